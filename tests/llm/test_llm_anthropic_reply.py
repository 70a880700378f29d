"""Reading Anthropic's Messages API replies, whole and streamed (llm/_anthropic_reply.py; decisions 13 and 14).

The recorded replies (tests/fixtures, each with its .txt) show what Anthropic sends; small
event lists written here show what a proxy or a broken server can send instead. What is
not the protocol raises a ``ReplyError`` naming what was wrong (the client turns it into
an ``LLMError`` with that text), so no partial or guessed reply reaches the run.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import pytest
from pydantic import BaseModel

from helpers import check_a_cut_reply_is_answered_not_run, make_agent
from localserver import LocalServer, Reply
from server_tool_fixtures import load, stream_events
from yiemagent import AssistantMessage, TextContent, UserMessage, ask, format_msg_for_llm
from yiemagent.llm import AnthropicClient
from yiemagent.llm._wire import ReplyError, message_text
from yiemagent.types import AgentContext
from yiemagent.llm.anthropic import AnthropicStream, build_anthropic_request, parse_anthropic_response, parse_anthropic_stream

CITATION = {"type": "web_search_result_location", "url": "https://example.com", "title": "Example", "cited_text": "hello"}
SECOND_CITATION = {"type": "web_search_result_location", "url": "https://example.org", "title": "Other", "cited_text": "world"}


def framed(*events: dict[str, Any], stop_reason: Optional[str] = "end_turn") -> list[dict[str, Any]]:
    """``events`` between a ``message_start`` and a ``message_delta`` + ``message_stop``, as Anthropic frames a reply."""
    start = {"type": "message_start", "message": {"model": "claude-sonnet-4-5", "usage": {"input_tokens": 3, "output_tokens": 1}}}
    end = {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": 5}}
    return [start, *events, end, {"type": "message_stop"}]


def block(index: int, content_block: dict[str, Any], *deltas: dict[str, Any]) -> list[dict[str, Any]]:
    """One content block's events: its start, its deltas, its stop."""
    return [
        {"type": "content_block_start", "index": index, "content_block": content_block},
        *({"type": "content_block_delta", "index": index, "delta": delta} for delta in deltas),
        {"type": "content_block_stop", "index": index},
    ]


def read(events: list[Any], deltas: Optional[list[tuple[str, str]]] = None):
    """The message an ``AnthropicStream`` makes of ``events`` (fed until it says the message stopped), its deltas put in ``deltas``."""
    stream = AnthropicStream(None if deltas is None else lambda kind, text: deltas.append((kind, text)))
    for event in events:
        if stream.add(event):
            break
    return stream.finish()


# --- what a reply names: its api, provider and model -------------------------------------


def test_a_whole_reply_names_the_anthropic_api_its_provider_and_its_model():
    """``api`` (which tracing reads to name the provider), ``provider`` and the reply's own ``model``."""
    body = load("anthropic-parallel-tool-use.json")
    message = parse_anthropic_response(body)
    assert (message.api, message.provider, message.model) == ("anthropic-messages", "anthropic", "claude-haiku-4-5-20251001")
    assert message.stop_reason == "tool_use" and len(message.content) == 5


def test_a_streamed_reply_names_the_anthropic_api_its_provider_and_the_model_of_its_message_start():
    message = parse_anthropic_stream(stream_events("anthropic-stream-tool-use.jsonl"))
    assert (message.api, message.provider, message.model) == ("anthropic-messages", "anthropic", "claude-haiku-4-5-20251001")
    assert message.content == [
        {
            "type": "tool_call",
            "id": "toolu_01KFbKqPYSuAKujiL6mTfzYA",
            "name": "json",
            "arguments": {"elements": [{"location": "San Francisco", "temperature": 58, "condition": "sunny"}]},
        }
    ]
    assert message.stop_reason == "tool_use"


def test_a_model_that_is_not_text_or_never_named_is_none():
    """A reply whose ``model`` is a number, or a stream without ``message_start``, gives ``model`` None, never a made-up name."""
    assert parse_anthropic_response({"content": [{"type": "text", "text": "hi"}], "model": 7}).model is None
    without_start = framed(*block(0, {"type": "text", "text": ""}, {"type": "text_delta", "text": "hi"}))[1:]
    message = read(without_start)
    assert message.model is None
    assert message.content[0].text == "hi"


# --- the stop reason -----------------------------------------------------------------------


def test_a_reply_with_a_tool_call_stops_for_tool_use_whatever_its_stop_reason_says():
    """A proxy that answers ``end_turn`` (or nothing) with ``tool_use`` blocks: the calls are still run."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "getWeather", "input": {"city": "Tokyo"}}
    for reason in ("end_turn", None):
        message = parse_anthropic_response({"content": [{"type": "text", "text": "Let me look."}, call], "stop_reason": reason})
        assert message.stop_reason == "tool_use"
    streamed = read(framed(*block(0, {"type": "tool_use", "id": "toolu_1", "name": "getWeather", "input": {"city": "Tokyo"}}), stop_reason="end_turn"))
    assert streamed.stop_reason == "tool_use"


@pytest.mark.parametrize("reason", ["a_reason_added_later", None, "", 3, ["end_turn"], {"end_turn": True}])
def test_a_stop_reason_unknown_missing_or_not_text_reads_as_stop(reason):
    message = parse_anthropic_response({"content": [{"type": "text", "text": "Done."}], "stop_reason": reason})
    assert message.stop_reason == "stop"


def test_a_reply_cut_by_the_context_window_stops_for_length_and_its_calls_are_not_run():
    """``model_context_window_exceeded`` (Anthropic's stop reason when the context window, not ``max_tokens``, cut the
    reply) is a reply cut at its limit, like ``max_tokens``: ``length``, so its whole-looking calls get an error result
    asking for them again instead of running (decision 10). It read as ``stop``, then ``tool_use``: the calls ran."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "json", "input": {"x": 1}}
    cut = {"type": "message", "role": "assistant", "model": "m", "content": [call], "stop_reason": "model_context_window_exceeded"}
    assert parse_anthropic_response(cut).stop_reason == "length"
    streamed = read(framed(*block(0, call), stop_reason="model_context_window_exceeded"))
    assert streamed.stop_reason == "length"
    final = {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "re-issued"}], "stop_reason": "end_turn"}
    replies = [Reply(body=cut), Reply(body=final)]
    with LocalServer(lambda request: replies.pop(0)) as server:
        check_a_cut_reply_is_answered_not_run(AnthropicClient("m", "key-0123456789", base_url=server.url, max_retries=0))


# Anthropic's documented reply when its streaming classifiers stop a reply ("Streaming refusals",
# platform.claude.com/docs/en/test-and-evaluate/strengthen-guardrails/handle-streaming-refusals)
REFUSED = {
    "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "Hello.."}],
    "stop_reason": "refusal",
    "stop_details": {"type": "refusal", "category": "cyber", "explanation": "This request was declined because it could enable cyber harm."},
}


def test_a_refused_reply_is_stop_reason_refusal_with_its_explanation_whole_or_streamed():
    """Anthropic's ``stop_reason "refusal"`` is the reply's "refusal" (not "content_filter", which a typed answer retried), its words ``stop_details.explanation`` and the text written before it kept; with no explanation the refusal is empty text, not None."""
    whole = parse_anthropic_response(REFUSED)
    streamed = read([
        {"type": "message_start", "message": {"model": "claude-sonnet-4-5", "usage": {"input_tokens": 3, "output_tokens": 1}}},
        *block(0, {"type": "text", "text": ""}, {"type": "text_delta", "text": "Hello.."}),
        {"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details": REFUSED["stop_details"]}, "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    ])
    for message in (whole, streamed):
        assert (message.stop_reason, message.refusal, message.text) == ("refusal", REFUSED["stop_details"]["explanation"], "Hello..")
    bare = parse_anthropic_response({**REFUSED, "stop_details": None})
    assert (bare.stop_reason, bare.refusal) == ("refusal", "")


def test_a_refused_turn_goes_back_to_anthropic_without_a_refusal_block():
    """Anthropic takes no refusal block: the refused turn goes back as the text it wrote."""
    refused = parse_anthropic_response(REFUSED)
    context = AgentContext(system_prompt="", messages=[UserMessage([TextContent("hi")], None), refused, UserMessage([TextContent("something else")], None)], tools={})
    body = build_anthropic_request(format_msg_for_llm(context), "claude-sonnet-4-5", 100)
    assert body["messages"][1] == {"role": "assistant", "content": [{"type": "text", "text": "Hello.."}]}


class Location(BaseModel):
    city: str


def test_a_refusal_with_output_type_ends_the_run_without_a_retry_through_anthropic():
    """With output_type, Anthropic's refusal ends the run with stop_reason "refusal" and its explanation: one request, no retry."""
    with LocalServer(lambda request: Reply(body=REFUSED)) as server:
        with make_agent(AnthropicClient("claude-sonnet-4-5", "key-0123456789", base_url=server.url, max_retries=0), output_type=Location, output_retries=2) as agent:
            reply = ask(agent, "?", timeout=20, check=False)
    assert (reply.stop_reason, reply.refusal, len(server.requests)) == ("refusal", REFUSED["stop_details"]["explanation"], 1)


# --- tool_use blocks -------------------------------------------------------------------------


def test_a_tool_use_block_without_id_or_name_becomes_a_call_with_empty_text_for_them():
    """The id and name of a call are always text (the run then gives the call a synthetic id, or an unknown-tool result)."""
    message = parse_anthropic_response({"content": [{"type": "tool_use", "input": {"x": 1}}], "stop_reason": "tool_use"})
    assert message.content == [{"type": "tool_call", "id": "", "name": "", "arguments": {"x": 1}}]


def test_a_streamed_tool_use_without_input_or_deltas_has_empty_arguments():
    """A ``tool_use`` that starts without ``input`` and gets no ``input_json_delta``: the model sent no arguments, ``{}``."""
    message = read(framed(*block(0, {"type": "tool_use", "id": "toolu_1", "name": "getTime"}), stop_reason="tool_use"))
    assert message.content == [{"type": "tool_call", "id": "toolu_1", "name": "getTime", "arguments": {}}]


def test_a_streamed_server_tool_use_without_input_or_deltas_goes_back_with_an_empty_input():
    start = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"}
    message = read(framed(*block(0, start)))
    assert message.content == [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}]


# --- thinking --------------------------------------------------------------------------------


def test_a_thinking_block_whose_signature_is_not_text_is_refused_naming_it():
    """It would go back to Anthropic and be refused every round (decision 14)."""
    with pytest.raises(ReplyError, match=r"^a thinking block whose 'signature' is int, not text$"):
        parse_anthropic_response({"content": [{"type": "thinking", "thinking": "Hm.", "signature": 5}]})


def test_streamed_signature_pieces_are_joined_and_the_thinking_block_keeps_only_its_own_fields():
    thinking = block(
        0,
        {"type": "thinking", "thinking": ""},
        {"type": "thinking_delta", "thinking": "Hm."},
        {"type": "signature_delta", "signature": "EqQB"},
        {"type": "signature_delta", "signature": "Ckgw"},
    )
    message = read(framed(*thinking, *block(1, {"type": "text", "text": ""}, {"type": "text_delta", "text": "Yes."})))
    assert message.content[0] == {"type": "thinking", "thinking": "Hm.", "signature": "EqQBCkgw"}
    assert message.content[1].text == "Yes."


def test_a_thinking_block_started_with_its_signature_keeps_it():
    """A proxy may send the whole block in its start: the signature there is kept (it is needed to send the block back)."""
    message = read(framed(*block(0, {"type": "thinking", "thinking": "Hm.", "signature": "EqQBCkgw"})))
    assert message.content == [{"type": "thinking", "thinking": "Hm.", "signature": "EqQBCkgw"}]


# --- text and citations ------------------------------------------------------------------


def test_a_text_block_started_with_text_and_citations_keeps_both_and_emits_the_text():
    """A proxy may send text and citations in the block's start: they are kept (non-object citations dropped), and the start's text is emitted."""
    deltas: list[tuple[str, str]] = []
    start = {"type": "text", "text": "Hello", "citations": [CITATION, "not a citation"]}
    events = block(0, start, {"type": "citations_delta", "citation": SECOND_CITATION}, {"type": "text_delta", "text": " world"})
    message = read(framed(*events), deltas)
    assert message.content == [TextContent("Hello world", [CITATION, SECOND_CITATION])]
    assert deltas == [("text", "Hello"), ("text", " world")]


@pytest.mark.parametrize("start", [{"type": "text", "text": ""}, {"type": "text", "text": "", "citations": None}])
def test_a_citations_delta_adds_to_a_text_block_started_without_a_citation_list(start):
    events = block(0, start, {"type": "citations_delta", "citation": CITATION}, {"type": "text_delta", "text": "hello"})
    message = read(framed(*events))
    assert message.content == [TextContent("hello", [CITATION])]


def _cited_reply(*texts: tuple[str, list[dict[str, Any]]], between: Optional[dict[str, Any]] = None) -> list[dict[str, Any]]:
    """A text split into blocks, each started empty with its citations sent as citations_delta before its text (as Anthropic streams them)."""
    events: list[dict[str, Any]] = []
    for index, (text, citations) in enumerate(texts):
        if between is not None and index == 1:
            events += block(len(texts), between)
        events += block(index, {"type": "text", "text": "", **({"citations": []} if citations else {})}, *({"type": "citations_delta", "citation": c} for c in citations), {"type": "text_delta", "text": text})
    return framed(*events)


def _whole(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The non-streamed body of the same reply: each block with its deltas applied."""
    blocks: dict[int, dict[str, Any]] = {}
    for event in events:
        if event["type"] == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
        elif event["type"] == "content_block_delta" and event["delta"]["type"] == "text_delta":
            blocks[event["index"]]["text"] += event["delta"]["text"]
        elif event["type"] == "content_block_delta":
            blocks[event["index"]]["citations"] = [*blocks[event["index"]].get("citations", []), event["delta"]["citation"]]
    order = [e["index"] for e in events if e["type"] == "content_block_start"]
    return {"content": [blocks[i] for i in order], "stop_reason": "end_turn"}


def test_each_text_block_keeps_its_own_citations_streamed_or_whole():
    """docs/streaming.md "Server tools": a text split at its citations is one TextContent per block, each with its own citations, joined as written."""
    events = _cited_reply(("Tokyo is ", []), ("sunny", [CITATION]), (" and ", []), ("warm", [SECOND_CITATION]), (".", []))
    deltas: list[tuple[str, str]] = []
    streamed, whole = read(events, deltas), parse_anthropic_response(_whole(events))
    expected = [TextContent("Tokyo is ", []), TextContent("sunny", [CITATION]), TextContent(" and ", []), TextContent("warm", [SECOND_CITATION]), TextContent(".", [])]
    assert streamed.content == whole.content == expected
    assert streamed.text == message_text(streamed, "text") == "".join(t for _, t in deltas) == "Tokyo is sunny and warm."
    assert AssistantMessage.from_json(streamed.to_json()).content == expected


def test_a_lone_text_block_carries_its_citations_or_none():
    """A text block with no text block beside it is not a segment: its citations, or None when it has none."""
    assert parse_anthropic_response({"content": [{"type": "text", "text": "hi", "citations": None}]}).content == [TextContent("hi")]
    assert parse_anthropic_response({"content": [{"type": "text", "text": "hi", "citations": [CITATION, 5]}]}).content == [TextContent("hi", [CITATION])]


def test_a_block_the_reply_drops_does_not_split_a_cited_text():
    """A block of a type the reader does not keep, between two cited blocks, leaves them one text: the deltas and the reply's text agree."""
    events = _cited_reply(("sunny", [CITATION]), ("warm", [SECOND_CITATION]), between={"type": "a_block_added_later"})
    deltas: list[tuple[str, str]] = []
    streamed = read(events, deltas)
    assert streamed.content == parse_anthropic_response(_whole(events)).content == [TextContent("sunny", [CITATION]), TextContent("warm", [SECOND_CITATION])]
    assert "".join(t for _, t in deltas) == message_text(streamed, "text") == "sunnywarm"


@pytest.mark.parametrize(
    "texts, expected",
    [
        ((("your key: sk-LIVE", [CITATION]), ("SECRET99 ok", [SECOND_CITATION])), [TextContent("your key: *** ok", [CITATION, SECOND_CITATION])]),
        ((("your key: sk-LIVESECRET99", [CITATION]), (" ok", [SECOND_CITATION])), [TextContent("your key: ***", [CITATION]), TextContent(" ok", [SECOND_CITATION])]),
    ],
    ids=["across two blocks", "inside one block"],
)
def test_a_key_in_cited_text_is_masked_even_across_two_blocks(texts, expected):
    """No secret leaves the process: a key echoed in a cited text is masked; split across two blocks, they become one block holding both citations."""
    body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in _cited_reply(*texts)).encode()
    with LocalServer(lambda r: Reply(chunks=[body], headers={"Content-Type": "text/event-stream"})) as server:
        message = AnthropicClient("m", "sk-LIVESECRET99", base_url=server.url, stream=True)({"messages": [{"role": "user", "content": "hi"}]})
    assert "LIVESECRET" not in message.to_json() and "sk-LIVE" not in message.to_json()
    assert message.content == expected


# --- message_delta and message_stop ------------------------------------------------------


def test_a_message_delta_without_a_delta_still_gives_its_usage():
    events = framed(*block(0, {"type": "text", "text": ""}, {"type": "text_delta", "text": "hi"}))
    events[-2] = {"type": "message_delta", "usage": {"output_tokens": 9}}
    message = read(events)
    assert message.usage.output_tokens == 9 and message.usage.input_tokens == 3
    assert message.stop_reason == "stop"


def test_after_message_stop_nothing_more_is_read():
    """``add`` says the message stopped; ``parse_anthropic_stream`` reads no further (here: an error event after it)."""
    events = framed(*block(0, {"type": "text", "text": ""}, {"type": "text_delta", "text": "Done."}))
    stream = AnthropicStream()
    assert [stream.add(event) for event in events] == [False] * (len(events) - 1) + [True]
    late_error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    message = parse_anthropic_stream([*events, late_error])
    assert message.content[0].text == "Done." and message.stop_reason == "stop"


def test_a_stream_that_ends_without_message_stop_is_refused_and_may_be_retried():
    """Decision 14: every block stopped and the stop reason sent, but no ``message_stop``: not whole."""
    events = framed(*block(0, {"type": "text", "text": ""}, {"type": "text_delta", "text": "Done."}))[:-1]
    with pytest.raises(ReplyError, match=r"^the stream ended before message_stop; the partial reply was dropped$") as raised:
        parse_anthropic_stream(events)
    assert raised.value.retryable


# --- error events --------------------------------------------------------------------------


def test_a_recorded_overloaded_error_event_raises_with_the_servers_words_and_status():
    with pytest.raises(ReplyError, match="Overloaded") as raised:
        parse_anthropic_stream(stream_events("anthropic-stream-error-overloaded.sse"))
    assert raised.value.status == 529 and raised.value.retryable


@pytest.mark.parametrize(
    "event",
    [
        {"type": "error"},  # an error event that says nothing more
        {"type": "ping", "error": {"type": "api_error", "message": "Internal server error"}},  # an error inside another event
    ],
)
def test_an_error_event_or_an_event_carrying_an_error_raises(event):
    events = framed(*block(0, {"type": "text", "text": ""}, {"type": "text_delta", "text": "Hel"}))
    with pytest.raises(ReplyError, match="^error reported after HTTP 200: "):
        parse_anthropic_stream([*events[:3], event, *events[3:]])


# --- what is not the protocol, named ---------------------------------------------------------


@pytest.mark.parametrize(
    "body, message",
    [
        ("not json", r"^the reply is not a JSON object but str 'not json'$"),
        ({"content": "hi"}, r"^the body has no content list$"),
        ({"content": ["hi"]}, r"^a content block is not a JSON object but str 'hi'$"),
    ],
)
def test_a_body_that_is_not_the_protocol_is_refused_naming_what_is_wrong(body, message):
    with pytest.raises(ReplyError, match=message):
        parse_anthropic_response(body)


TEXT_START = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
TOOL_START = {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}}


@pytest.mark.parametrize(
    "events, message",
    [
        (["ping"], r"^a stream event is not a JSON object but str 'ping'$"),
        ([{"type": "message_start", "message": "m"}], r"^message_start's message is not a JSON object but str 'm'$"),
        ([{"type": "content_block_start", "index": 0, "content_block": "b"}], r"^a content block is not a JSON object but str 'b'$"),
        ([TEXT_START, {"type": "content_block_delta", "index": 0, "delta": "d"}], r"^a content block delta is not a JSON object but str 'd'$"),
        (
            [TOOL_START, {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}],
            r"^a text_delta for content block 0, which is a 'tool_use' block$",
        ),
        (
            [TEXT_START, {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": "c"}}],
            r"^a citations_delta whose 'citation' is str, not an object$",
        ),
        ([TEXT_START, {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 5}}], r"^a text_delta whose 'text' is int, not text$"),
        (
            [TEXT_START, {"type": "content_block_delta", "index": 3, "delta": {"type": "text_delta", "text": "x"}}],
            r"^stream event 'content_block_delta' names an unknown content block index 3$",
        ),
        (
            [{"type": "content_block_start", "index": "0", "content_block": {"type": "text", "text": ""}}],
            r"^stream event 'content_block_start' names an unknown content block index '0'$",
        ),
        (
            [{"type": "content_block_start", "index": True, "content_block": {"type": "text", "text": ""}}],
            r"^stream event 'content_block_start' names an unknown content block index True$",
        ),
    ],
)
def test_a_stream_event_that_is_not_the_protocol_is_refused_naming_what_is_wrong(events, message):
    with pytest.raises(ReplyError, match=message):
        read(framed(*events))


@pytest.mark.parametrize(
    "delta",
    [{"type": "input_json_delta", "partial_json": '{"city": "Tokyo"}'}, {"type": "text_delta", "text": "late"}],
    ids=["input_json_delta", "text_delta"],
)
def test_a_delta_after_its_block_stopped_is_refused(delta):
    """A ``tool_use``'s input is read at its ``content_block_stop`` (here ``{}``, from its start): a piece sent after it
    was dropped, so the tool ran with ``{}`` instead of the arguments the model sent (decision 14). Not the protocol."""
    started = {"type": "tool_use", "id": "toolu_1", "name": "getWeather", "input": {}} if delta["type"] == "input_json_delta" else {"type": "text", "text": ""}
    late = {"type": "content_block_delta", "index": 0, "delta": delta}
    with pytest.raises(ReplyError, match=rf"^a {delta['type']} for content block 0 after its content_block_stop$"):
        read(framed(*block(0, started), late, stop_reason="tool_use"))


def test_a_delta_whose_type_is_not_text_is_ignored_like_an_unknown_delta():
    events = block(0, {"type": "text", "text": ""}, {"type": ["text_delta"], "text": "x"}, {"type": "image_delta"}, {"type": "text_delta", "text": "hi"})
    message = read(framed(*events))
    assert [b.text for b in message.content] == ["hi"]


# --- sending back what came ---------------------------------------------------------------


def test_an_entry_of_content_blocks_that_is_not_a_block_is_not_sent_back():
    """``content_blocks`` written by a custom ``prepare_context``: an entry that is not a block is left out, the others go in order."""
    server = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}
    formatted = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "ok", "content_blocks": ["web_search_tool_result", server, {"type": "text", "text": "ok"}]},
            {"role": "user", "content": "go on"},
        ]
    }
    request = build_anthropic_request(formatted, "claude-sonnet-4-5", 1024)
    assert request["messages"][1] == {"role": "assistant", "content": [server, {"type": "text", "text": "ok"}]}
