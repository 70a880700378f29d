"""A reply's citations, read whole (docs/api.md "Citations"; shared/spec/API.md "Today's models, turn after turn").

OpenAI's ``url_citation`` annotations and Anthropic's ``citations`` are ``reply.citations``, each
with its URL, title, cited text and span in ``reply.text``. Every reply is a real recording
(tests/fixtures, a .txt beside each names its source), served by a real HTTP server.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import FIXTURES
from localserver import LocalServer, Reply
from strategies import cited_text_content, json_values, text_content
from yiemagent import AnthropicClient, AssistantMessage, Citation, SQLiteSession, UserMessage, format_msg_for_llm
from yiemagent.history._json import message_from_json, message_to_json
from yiemagent.llm import OpenAIClient, OpenAIResponsesClient
from yiemagent.llm._responses_reply import parse_responses_response
from yiemagent.llm.openai import parse_openai_response, parse_openai_stream
from yiemagent.types import AgentContext, TextContent

SSE = {"Content-Type": "text/event-stream"}
QUESTION = {"messages": [{"role": "user", "content": "q"}]}
FINAL = {"model": "m", "choices": [{"message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}]}
ANTHROPIC_FINAL = {"type": "message", "role": "assistant", "model": "m", "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}}


def reply_of(name: str) -> Reply:
    if name.endswith(".json"):
        return Reply(body=json.loads((FIXTURES / name).read_text()))
    return Reply(chunks=[(FIXTURES / name).read_bytes()], headers=SSE)


def openai_reply(name: str) -> AssistantMessage:
    with LocalServer(lambda r: reply_of(name)) as server:
        return OpenAIClient(f"{server.url}/v1", "m", stream=not name.endswith(".json"), max_retries=0)(QUESTION)


def anthropic_reply(name: str) -> AssistantMessage:
    with LocalServer(lambda r: reply_of(name)) as server:
        return AnthropicClient("claude-sonnet-4-5", "key", base_url=server.url, stream=not name.endswith(".json"), max_retries=0)(QUESTION)


@pytest.mark.spec("14")
def test_openai_url_citations_are_the_replys_citations_with_their_spans():
    """A search model's message.annotations are reply.citations: URL, title, and the span of the text that cites, as OpenAI indexed it."""
    recorded = json.loads((FIXTURES / "openai-search-annotations.json").read_text())["choices"][0]["message"]
    reply = openai_reply("openai-search-annotations.json")
    assert reply.text == recorded["content"]
    expected = [
        Citation(a["url_citation"]["url"], a["url_citation"]["title"], None, a["url_citation"]["start_index"], a["url_citation"]["end_index"])
        for a in recorded["annotations"]
    ]
    assert reply.citations == expected and len(expected) == 12
    assert reply.text[expected[0].start : expected[0].end].startswith("([forbes.com](https://www.forbes.com/")
    (block,) = [b for b in reply.content if isinstance(b, TextContent)]  # one text, as OpenAI sent it
    assert block.citations == recorded["annotations"]


@pytest.mark.spec("14")
def test_streamed_openai_annotations_are_the_replys_citations():
    """delta.annotations (a search model sends them in the last chunk) are reply.citations; a span past the text is kept within it."""
    reply = openai_reply("openai-stream-search-annotation.sse")
    assert reply.citations == [Citation("https://zh.wikipedia.org/wiki/%E4%B8%8A%E6%B5%B7%E4%B9%90%E9%AB%98%E4%B9%90%E5%9B%AD?utm_source=openai", "上海乐高乐园", None, 0, 0)]
    assert reply.stop_reason == "stop" and reply.text == ""


@pytest.mark.spec("14")
def test_annotations_streamed_in_several_deltas_are_all_the_replys_citations():
    """The recorded search reply streamed with each of its annotations in a delta of its own, then a finish chunk: every one is a citation, in order, as read whole."""
    body = json.loads((FIXTURES / "openai-search-annotations.json").read_text())
    message = body["choices"][0]["message"]
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": message["content"]}}]}]
    chunks += [{"choices": [{"index": 0, "delta": {"annotations": [a]}}]} for a in message["annotations"]]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    reply = parse_openai_stream(chunks)
    assert reply.citations == parse_openai_response(body).citations and len(reply.citations) == len(message["annotations"]) > 1


def responses_reply(name: str) -> AssistantMessage:
    """The recorded Responses API reply of ``name`` read by OpenAIResponsesClient, whole or streamed (each recorded event sent named after its type)."""
    if name.endswith(".json"):
        reply = reply_of(name)
    else:
        events = [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]
        reply = Reply(chunks=["".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()], headers=SSE)
    with LocalServer(lambda r: reply) as server:
        return OpenAIResponsesClient("m", "k", base_url=f"{server.url}/v1", stream=not name.endswith(".json"), max_retries=0)(QUESTION)


@pytest.mark.spec("14")
@pytest.mark.parametrize("name", ["openai-responses-web-search-citations.json", "openai-responses-stream-web-search-citations.jsonl"])
def test_responses_api_url_citations_are_the_replys_citations(name):
    """The Responses API's output_text annotations (flat url_citations), whole and streamed, are reply.citations with the spans OpenAI indexed."""
    lines = (FIXTURES / name).read_text().splitlines()
    body = json.loads((FIXTURES / name).read_text()) if name.endswith(".json") else json.loads(lines[-1])["response"]
    (part,) = [p for item in body["output"] if item["type"] == "message" for p in item["content"]]
    reply = responses_reply(name)
    assert reply.text == part["text"]
    assert reply.citations == [Citation(a["url"], a["title"], None, a["start_index"], a["end_index"]) for a in part["annotations"]]
    assert len(reply.citations) >= 10 and reply.text[reply.citations[0].start : reply.citations[0].end].startswith("([")


@pytest.mark.spec("14")
@pytest.mark.parametrize("name", ["openai-responses-web-search-citations.json", "openai-responses-stream-web-search-citations.jsonl"])
def test_responses_api_cached_input_tokens_are_the_replys_cache_reads(name):
    """The Responses API's input_tokens_details.cached_tokens (gpt-5-mini's recorded web search, whole and streamed) are the reply's cache_read_tokens (decision 13)."""
    lines = (FIXTURES / name).read_text().splitlines()
    raw = (json.loads((FIXTURES / name).read_text()) if name.endswith(".json") else json.loads(lines[-1])["response"])["usage"]
    usage = responses_reply(name).usage
    assert raw["input_tokens_details"]["cached_tokens"] == 3712
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.reasoning_tokens) == (
        raw["input_tokens"], raw["output_tokens"], 3712, raw["output_tokens_details"]["reasoning_tokens"]
    )


@pytest.mark.spec("14")
@pytest.mark.parametrize("name", ["anthropic-web-search-citations.json", "anthropic-stream-web-search-citations.sse"])
def test_anthropic_citations_are_the_replys_citations_each_spanning_its_block(name):
    """Each Anthropic citation is a Citation with its URL, title and cited_text, spanning in reply.text the text block that carries it; text stays one block per block sent."""
    reply = anthropic_reply(name)
    texts = [b for b in reply.content if isinstance(b, TextContent)]
    cited = [(block, c) for block in texts for c in block.citations or []]
    assert len(cited) == len(reply.citations) > 1
    for citation, (block, raw) in zip(reply.citations, cited, strict=True):
        assert (citation.url, citation.title, citation.cited_text) == (raw["url"], raw["title"], raw["cited_text"])
        assert reply.text[citation.start : citation.end] == block.text
    if name.endswith(".json"):
        assert (len(texts), len(cited)) == (19, 9)
        assert reply.text[reply.citations[0].start : reply.citations[0].end] == "Temperature: 66°F with clear skies"


@pytest.mark.spec("14")
def test_openai_annotations_go_to_neither_server_and_anthropic_citations_go_back_to_anthropic():
    """OpenAI's annotations are not sent back (chat completions take none, Anthropic refuses another provider's); Anthropic's own go back on their blocks."""
    cited = openai_reply("openai-search-annotations.json")
    anthropic = anthropic_reply("anthropic-web-search-citations.json")
    history = [UserMessage([TextContent("q")]), cited, UserMessage([TextContent("next")])]
    with LocalServer(lambda r: Reply(body=FINAL)) as server:
        OpenAIClient(f"{server.url}/v1", "m", max_retries=0)(format_msg_for_llm(AgentContext("", history, {})))
    (sent,) = [m for m in server.requests[0].json()["messages"] if m["role"] == "assistant"]
    assert sent == {"role": "assistant", "content": cited.text}
    history += [anthropic, UserMessage([TextContent("more")])]
    with LocalServer(lambda r: Reply(body=ANTHROPIC_FINAL)) as server:
        AnthropicClient("claude-sonnet-4-5", "key", base_url=server.url, max_retries=0)(format_msg_for_llm(AgentContext("", history, {})))
    first, second = [m for m in server.requests[0].json()["messages"] if m["role"] == "assistant"]
    assert first["content"] == [{"type": "text", "text": cited.text}]
    sent_citations = [b.get("citations") for b in second["content"] if b["type"] == "text" and "citations" in b]
    assert sent_citations == [b.citations for b in anthropic.content if isinstance(b, TextContent) and b.citations]


@pytest.mark.spec("19")
@pytest.mark.parametrize("loader", [openai_reply, anthropic_reply])
def test_a_session_stores_and_loads_a_reply_with_its_citations(tmp_path, loader):
    """A reply with citations stored in a session reads back equal, with the same citations."""
    reply = loader("openai-search-annotations.json" if loader is openai_reply else "anthropic-web-search-citations.json")
    with SQLiteSession(tmp_path / "s.db", "s") as session:
        session.append(reply)
    with SQLiteSession(tmp_path / "s.db", "s") as session:
        (loaded,) = session.messages()
    assert loaded == reply and loaded.citations == reply.citations and loaded.citations


@pytest.mark.spec("19")
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(cited_text_content | text_content, max_size=5))
def test_citations_survive_the_json_form_and_their_spans_lie_in_the_text(blocks):
    """Property: whatever indices a provider sent, each citation's span lies within reply.text, and the JSON form gives back the same citations."""
    reply = AssistantMessage(blocks)
    for citation in reply.citations:
        assert 0 <= citation.start <= citation.end <= len(reply.text)
    again = message_from_json(message_to_json(reply), "row 1")
    assert again == reply and again.citations == reply.citations


@pytest.mark.spec("19")
@settings(max_examples=100, deadline=None)
@given(st.lists(json_values, max_size=4), st.text(max_size=10))
def test_any_citation_objects_give_citations_or_none_never_an_error(raw, text):
    """Property: citations that are not a provider's known shapes are read as far as they go, never raising, their spans in the text."""
    reply = AssistantMessage([TextContent(text, raw)])
    for citation in reply.citations:
        assert 0 <= citation.start <= citation.end <= len(text)
        assert all(v is None or isinstance(v, str) for v in (citation.url, citation.title, citation.cited_text))


@pytest.mark.spec("14")
@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10**6))
def test_responses_citations_keep_their_spans_when_the_text_comes_in_two_parts(cut):
    """Property: the recorded output_text cut into two parts anywhere (each annotation in its part, its indices that part's) gives the same citations."""
    body = json.loads((FIXTURES / "openai-responses-web-search-citations.json").read_text())
    message = next(item for item in body["output"] if item["type"] == "message")
    (part,) = message["content"]
    text, at = part["text"], cut % (len(part["text"]) + 1)
    kept = [a for a in part["annotations"] if a["end_index"] <= at or a["start_index"] >= at]  # none spans the cut
    first = [a for a in kept if a["end_index"] <= at]
    second = [{**a, "start_index": a["start_index"] - at, "end_index": a["end_index"] - at} for a in kept if a["start_index"] >= at and a not in first]
    message["content"] = [{**part, "text": text[:at], "annotations": first}, {**part, "text": text[at:], "annotations": second}]
    reply = parse_responses_response(body)
    assert reply.text == text
    assert reply.citations == [Citation(a["url"], a["title"], None, a["start_index"], a["end_index"]) for a in [*first, *[k for k in kept if k not in first]]]


@pytest.mark.spec("19")
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # OpenAI's url_citation: its indices read as ints within the text (0 kept as 0), a missing end_index the text's end
        ({"type": "url_citation", "url_citation": {"url": "u", "title": "t", "start_index": 0, "end_index": 3}}, Citation("u", "t", None, 4, 7)),
        ({"type": "url_citation", "url_citation": {"url": "u", "start_index": 2}}, Citation("u", None, None, 6, 9)),
        ({"type": "url_citation", "start_index": "2", "end_index": 4.0, "url": "u"}, Citation("u", None, None, 4, 4)),
        ({"type": "url_citation", "start_index": True, "end_index": 3, "url": "u"}, Citation("u", None, None, 4, 7)),
        # Anthropic's: a search result's source and a document's title stand in for url and title; what is not text is None
        ({"type": "search_result_location", "source": "https://s.example", "title": "Found", "cited_text": "c"}, Citation("https://s.example", "Found", "c", 4, 9)),
        ({"type": "char_location", "document_title": "The doc", "cited_text": "c"}, Citation(None, "The doc", "c", 4, 9)),
        ({"type": "web_search_result_location", "url": 5, "title": ["t"], "cited_text": 3}, Citation(None, None, None, 4, 9)),
    ],
)
def test_a_citations_fields_are_read_by_their_names_and_its_span_kept_within_its_text(raw, expected):
    """A citation object's URL, title and cited text are read under each provider's names (None for what is not text),
    and its offsets as ints within its text block (0 for what is not one), after the text before it."""
    reply = AssistantMessage([TextContent("One."), TextContent("hello", [raw])])
    assert reply.citations == [expected]
