"""Anthropic's server tools on the wire: real replies parse, streamed and not, and their blocks go back as they came.

Recordings from pydantic-ai's and vercel/ai's test cassettes (tests/fixtures, each with
its .txt), served by a real local HTTP server in chunks. docs/streaming.md "Server tools".
"""

from __future__ import annotations

import json

import pytest

from helpers import openai_request_validator
from localserver import LocalServer, Reply
from server_tool_fixtures import REPLIES, SSE, STREAMS, chunked, load, server_blocks, sse_bytes, streamed_blocks
from yiemagent import (
    AgentContext,
    AssistantMessage,
    LLMError,
    TextContent,
    ToolResultMessage,
    UserMessage,
    extract_tool_calls,
    format_msg_for_llm,
)
from yiemagent.llm import AnthropicClient, OpenAIClient
from yiemagent.llm._wire import message_text
from yiemagent.llm.anthropic import build_anthropic_request
from yiemagent.types import message_from_dict
from yiemagent.normalize import normalize_message
from yiemagent.events import stream_to

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}


def streamed(name: str) -> tuple[AssistantMessage, list[tuple[str, str]]]:
    """The message an AnthropicClient reads from the recorded stream, served in chunks, and the deltas it emitted."""
    deltas: list[tuple[str, str]] = []
    with LocalServer(lambda r: Reply(chunks=chunked(sse_bytes(name)), headers=SSE)) as server:
        with stream_to(lambda kind, text: deltas.append((kind, text))):
            message = AnthropicClient("claude-sonnet-4-5", "key", base_url=server.url, stream=True)(FORMATTED)
    return message, deltas


def whole(name: str) -> AssistantMessage:
    with LocalServer(lambda r: Reply(body=load(name))) as server:
        return AnthropicClient("claude-sonnet-4-5", "key", base_url=server.url)(FORMATTED)


def text_runs(blocks: list[dict]) -> list[list[dict]]:
    """The runs of adjacent text blocks, in order."""
    runs: list[list[dict]] = []
    previous = None
    for block in blocks:
        if block["type"] == "text":
            if previous != "text":
                runs.append([])
            runs[-1].append(block)
        previous = block["type"]
    return runs


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_a_streamed_server_tool_reply_keeps_every_server_block_as_it_came(name):
    """Each server_tool_use, mcp_tool_use and *_tool_result block of a real stream is in the message, in order, as the stream carried it."""
    message, _ = streamed(name)
    expected = server_blocks(streamed_blocks(name))
    assert expected, "the fixture holds server-tool blocks"
    assert server_blocks(message.content) == expected
    assert message.stop_reason == STREAMS[name]


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_a_streamed_server_tool_reply_emits_deltas_that_join_to_its_text(name):
    """The text and thinking deltas of a server-tool stream, joined, equal the message's text and thinking (docs/streaming.md)."""
    message, deltas = streamed(name)
    assert message_text(message, "text")
    for kind in ("text", "thinking"):
        assert "".join(t for k, t in deltas if k == kind) == message_text(message, kind)


@pytest.mark.parametrize("name", sorted(REPLIES))
def test_a_whole_server_tool_reply_keeps_every_server_block_as_it_came(name):
    """A non-streamed reply's server-tool blocks are in the message exactly as the body holds them, in order."""
    message = whole(name)
    expected = server_blocks(load(name)["content"])
    assert expected and server_blocks(message.content) == expected
    assert message.stop_reason == REPLIES[name]


@pytest.mark.parametrize("name", sorted(STREAMS) + sorted(REPLIES))
def test_server_tool_calls_are_not_tool_calls_of_the_agent(name):
    """Only the reply's client tool_use blocks are extracted as tool calls: a server tool is never the agent's to run."""
    message = streamed(name)[0] if name in STREAMS else whole(name)
    blocks = streamed_blocks(name) if name in STREAMS else load(name)["content"]
    calls = extract_tool_calls(message)[1]
    assert [c.id for c in calls] == [b["id"] for b in blocks if b["type"] == "tool_use"]


CITED = ["anthropic-stream-web-search-citations.sse", "anthropic-web-search-citations.json"]


def provider_blocks(name: str) -> list[dict]:
    """The content blocks Anthropic sent in the recording, streamed or whole."""
    return streamed_blocks(name) if name in STREAMS else load(name)["content"]


def as_sent_back(block: dict) -> dict:
    """A text block as Anthropic takes it back: its citations only when it has some."""
    if block["type"] != "text":
        return block
    return {"type": "text", "text": block["text"], **({"citations": block["citations"]} if block.get("citations") else {})}


@pytest.mark.parametrize("name", CITED)
def test_each_text_block_anthropic_sent_is_a_text_content_with_its_own_citations(name):
    """docs/streaming.md "Server tools": one TextContent per text block Anthropic sent, each with its own citations; the text reads as the model wrote it."""
    message = streamed(name)[0] if name in STREAMS else whole(name)
    sent = [b for b in provider_blocks(name) if b["type"] == "text" and b["text"]]
    texts = [b for b in message.content if isinstance(b, TextContent)]
    assert not [b for b in message.content if isinstance(b, dict) and b.get("type") == "text"]
    assert [(b.text, b.citations or []) for b in texts] == [(b["text"], b.get("citations") or []) for b in sent]
    assert sum(1 for b in texts if b.citations) == sum(1 for b in sent if b.get("citations")) > 1, "each citation stays on its own block"
    assert message.text == "".join(b["text"] for b in sent)
    cited_run = "".join(b["text"] for b in text_runs(provider_blocks(name))[-1])
    assert cited_run in message_text(message, "text"), "segments are joined as they are, not with newlines"


@pytest.mark.parametrize("name", CITED)
def test_a_cited_reply_goes_back_block_for_block_on_the_next_request(name):
    """The second turn's request sends each text block as Anthropic sent it, with its own citations, between the server blocks in their place."""
    reply = streamed(name)[0] if name in STREAMS else whole(name)
    request = anthropic_request_for([UserMessage([TextContent("news?")]), reply, UserMessage([TextContent("thanks")])])
    turn = request["messages"][1]["content"]
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "user"]
    assert turn == [as_sent_back(b) for b in provider_blocks(name) if b["type"] != "text" or b["text"]]
    for block in (b for b in turn if b["type"] == "text"):  # what Anthropic accepts: text not empty nor whitespace, citations a non-empty list of objects
        assert block["text"].strip() and block.keys() <= {"type", "text", "citations"}
        assert "citations" not in block or (block["citations"] and all(isinstance(c, dict) and c.get("type") for c in block["citations"]))
    again = AssistantMessage.from_json(reply.to_json())
    assert anthropic_request_for([UserMessage([TextContent("news?")]), again, UserMessage([TextContent("thanks")])]) == request


def test_a_citation_that_is_not_an_object_is_an_llm_error():
    """A citations_delta whose citation is not an object is not the protocol: LLMError, no reply."""
    body = sse_bytes("anthropic-stream-web-search-citations.sse").replace(b'"citation":{', b'"citation":["x"],"was":{', 1)
    with LocalServer(lambda r: Reply(chunks=chunked(body), headers=SSE)) as server:
        with pytest.raises(LLMError, match="citation"):
            AnthropicClient("m", "k", base_url=server.url, stream=True, max_retries=0)(FORMATTED)


def test_a_streamed_server_tool_input_that_is_not_an_object_is_an_llm_error():
    """A server_tool_use whose streamed input is not a JSON object would be refused when sent back: LLMError (decision 14)."""
    events = [
        {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '["not", "an object"]'}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
        {"type": "message_stop"},
    ]
    body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()
    with LocalServer(lambda r: Reply(chunks=[body], headers=SSE)) as server:
        with pytest.raises(LLMError, match="server_tool_use block 0 is not a JSON object"):
            AnthropicClient("m", "k", base_url=server.url, stream=True, max_retries=0)(FORMATTED)


def test_a_whole_server_tool_input_that_is_not_an_object_is_an_llm_error():
    """A non-streamed server_tool_use whose input is a string is not the protocol: LLMError, no reply."""
    body = load("anthropic-tool-search.json")
    body["content"][0]["input"] = "weather"
    with LocalServer(lambda r: Reply(body=body)) as server:
        with pytest.raises(LLMError, match="server_tool_use block whose input is str"):
            AnthropicClient("m", "k", base_url=server.url, max_retries=0)(FORMATTED)


@pytest.mark.parametrize("name", ["anthropic-web-search-citations.json", "anthropic-stream-web-search-citations.sse", "anthropic-tool-search.json", "anthropic-stream-pause-turn.sse"])
def test_a_server_tool_reply_survives_normalisation_and_the_json_round_trip(name):
    """Decision 15 keeps a server-tool reply as it is, and its JSON form gives back an equal message."""
    message = streamed(name)[0] if name in STREAMS else whole(name)
    assert normalize_message(message) is message
    assert AssistantMessage.from_json(message.to_json()) == message
    assert message_from_dict(json.loads(json.dumps(message.to_dict()))) == message


def anthropic_request_for(history: list) -> dict:
    return build_anthropic_request(format_msg_for_llm(AgentContext("sys", history, {}), None), "m", 100)


def test_the_request_sends_every_block_back_in_its_place():
    """The assistant turn goes back block for block: server blocks as they came, cited text, tool_use, in the reply's order."""
    body = load("anthropic-tool-search.json")
    reply = whole("anthropic-tool-search.json")
    call = extract_tool_calls(reply)[1][0]
    result = ToolResultMessage(call.id, call.name, [TextContent("65F")])
    sent = anthropic_request_for([UserMessage([TextContent("weather?")]), reply, result])["messages"]
    expected = [
        body["content"][0],
        body["content"][1],
        {"type": "text", "text": body["content"][2]["text"]},
        {"type": "tool_use", "id": call.id, "name": "get_temp_data", "input": body["content"][3]["input"]},
    ]
    assert sent[1] == {"role": "assistant", "content": expected}
    assert sent[2]["content"][0]["tool_use_id"] == call.id


def test_cited_text_goes_back_with_its_citations():
    """A text carrying citations goes back with them, beside the thinking and server blocks, in order, block for block."""
    body = load("anthropic-web-search-citations.json")
    reply = whole("anthropic-web-search-citations.json")
    sent = anthropic_request_for([UserMessage([TextContent("weather?")]), reply])["messages"][1]["content"]
    assert [b["type"] for b in sent] == ["thinking", "server_tool_use", "web_search_tool_result", *["text"] * 19]
    assert sent == body["content"]


def test_a_segment_of_whitespace_alone_joins_the_text_before_it():
    """A cited answer's segment of whitespace alone (which Anthropic refuses as a block) goes back at the end of the text block before it."""
    reply = streamed("anthropic-stream-pause-turn-continued.sse")[0]
    assert any(isinstance(b, TextContent) and b.is_segment and not b.text.strip() for b in reply.content), "the recording holds one"
    sent = anthropic_request_for([UserMessage([TextContent("news?")]), reply, UserMessage([TextContent("thanks")])])["messages"][1]["content"]
    texts = [b for b in sent if b["type"] == "text"]
    assert all(b["text"].strip() for b in texts)
    assert "".join(b["text"] for b in texts) == reply.text
    assert [c for b in texts for c in b.get("citations", [])] == [c for b in reply.content if isinstance(b, TextContent) for c in b.citations or []]


def test_tool_calls_keep_their_place_between_server_blocks():
    """Tool calls go back where they were among server blocks, with the ids their results answer (synthetic where none came)."""
    use = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}
    result = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
    reply = AssistantMessage(
        [TextContent("a"), {"type": "tool_call", "id": "", "name": "f", "arguments": {"x": 1}}, use, result, {"type": "tool_calls", "tool_calls": [{"id": "c2", "function": {"name": "g", "arguments": "{}"}}]}]
    )
    calls = extract_tool_calls(reply)[1]
    answers = [ToolResultMessage(c.id, c.name, [TextContent("ok")]) for c in calls]
    sent = anthropic_request_for([UserMessage([TextContent("go")]), reply, *answers])["messages"]
    assert [b["type"] for b in sent[1]["content"]] == ["text", "tool_use", "server_tool_use", "web_search_tool_result", "tool_use"]
    assert [b["id"] for b in sent[1]["content"] if b["type"] == "tool_use"] == [c.id for c in calls]
    assert [b["tool_use_id"] for b in sent[2]["content"]] == [c.id for c in calls] and calls[0].id


def test_a_block_anthropic_did_not_send_is_not_sent_to_it():
    """A dict block of no Anthropic kind in an assistant message (another provider's, a caller's) is not sent to Anthropic."""
    reply = AssistantMessage([TextContent("a"), {"type": "other", "x": 1}, {"type": "tool_result", "tool_use_id": "t"}])
    sent = anthropic_request_for([UserMessage([TextContent("go")]), reply, UserMessage([TextContent("more")])])["messages"]
    assert sent[1] == {"role": "assistant", "content": [{"type": "text", "text": "a"}]}


@pytest.mark.parametrize("text, sent", [("Let me look.  \n", [{"type": "text", "text": "Let me look."}]), (" \n", [])])
def test_a_final_assistant_turn_goes_without_trailing_whitespace(text, sent):
    """A request ending in an assistant turn (a turn to continue) has its trailing whitespace cut; a turn of only whitespace is left out."""
    use = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}
    paused = AssistantMessage([use, TextContent(text)], stop_reason="pause_turn")
    request = anthropic_request_for([UserMessage([TextContent("go")]), paused])
    assert request["messages"][-1] == {"role": "assistant", "content": [use, *sent]}
    plain = anthropic_request_for([UserMessage([TextContent("go")]), AssistantMessage([TextContent(text)])])
    assert plain["messages"][-1]["role"] == ("assistant" if sent else "user")


def test_the_openai_client_sends_no_anthropic_block():
    """OpenAIClient sends a server-tool reply as its text alone: no server block, no content_blocks, a valid chat request."""
    reply = whole("anthropic-web-search-citations.json")
    formatted = format_msg_for_llm(AgentContext("sys", [UserMessage([TextContent("weather?")]), reply, UserMessage([TextContent("thanks")])], {}), None)
    assert "content_blocks" in formatted["messages"][2], "the formatted dict carries them for the clients that need them"
    answer = {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}
    with LocalServer(lambda r: Reply(body=answer)) as server:
        OpenAIClient(f"{server.url}/v1", "m")(formatted)
    sent = server.requests[0].json()
    openai_request_validator().validate(sent)
    assert sent["messages"][2] == {"role": "assistant", "content": message_text(reply, "text")}
    assert b"srvtoolu_" not in server.requests[0].body and b"encrypted_" not in server.requests[0].body


def test_server_tools_declared_in_options_go_beside_the_agents_tools():
    """A server tool in options={"tools": ...} is sent, in Anthropic's form, beside the tools of the agent's store."""
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    formatted = {**FORMATTED, "tools": [{"type": "function", "function": {"name": "get_temp_data", "description": "d", "parameters": {"type": "object"}}}]}
    with LocalServer(lambda r: Reply(body=load("anthropic-tool-search.json"))) as server:
        AnthropicClient("m", "k", base_url=server.url, options={"tools": [search]})(formatted)
    assert server.requests[0].json()["tools"] == [search, {"name": "get_temp_data", "description": "d", "input_schema": {"type": "object"}}]
