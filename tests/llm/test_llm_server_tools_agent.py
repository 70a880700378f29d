"""Agent runs over real Anthropic server-tool replies: the next request carries them back, a paused turn goes on.

Replies recorded by pydantic-ai and vercel/ai (tests/fixtures), served by a real local HTTP
server, streamed in chunks. docs/streaming.md "Server tools".
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from helpers import WAIT, EventRecorder, make_tool, text_result
from localserver import LocalServer, Reply
from server_tool_fixtures import SSE, chunked, load, server_blocks, sse_bytes, streamed_blocks
from yiemagent import (
    AgentRunEndEvent,
    SQLiteSession,
    TextContent,
    YiemAgent,
    continue_agent,
    follow_up,
    load_history,
    register_tool,
    run_agent,
    save_history,
    take_response,
)
from yiemagent.llm import AnthropicClient

PAUSED, CONTINUED = "anthropic-stream-pause-turn.sse", "anthropic-stream-pause-turn-continued.sse"


def stream_reply(name: str) -> Reply:
    return Reply(chunks=chunked(sse_bytes(name)), headers=SSE)


class Script:
    """A server's replies in order (the last one repeated), each request recorded by the LocalServer."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)
        self.served = 0
        self._lock = threading.Lock()

    def __call__(self, request: Any) -> Reply:
        with self._lock:
            reply = self.replies[min(self.served, len(self.replies) - 1)]
            self.served += 1
        return reply() if callable(reply) else reply


def agent_on(server: LocalServer, *, stream: bool = True, tools=(), **kwargs: Any) -> YiemAgent:
    client = AnthropicClient("claude-sonnet-4-5", "key", base_url=server.url, stream=stream, max_retries=0)
    agent = YiemAgent(llm_call=client, agent_event_sink=kwargs.pop("sink", None), builtin_tools=False, **kwargs)
    for tool in tools:
        register_tool(agent.tool_store, tool)
    return agent


def ask(agent: YiemAgent, text: str):
    run_agent(agent, text)
    return take_response(agent, timeout=WAIT)


def assistant_turns(request: Any) -> list[list[dict]]:
    return [m["content"] for m in request.json()["messages"] if m["role"] == "assistant"]


@pytest.mark.spec("6")
def test_an_agent_run_over_a_streamed_server_tool_reply_runs_only_the_client_tool():
    """Tool search (a server tool) then a client call: only the client tool runs, and the answer comes from the next round."""
    ran: list[dict] = []

    def get_temp_data(tool_call_id, args, signal, on_partial_result):
        ran.append(args)
        return text_result("65F, sunny")

    never = make_tool("tool_search_tool_regex", lambda *a: pytest.fail("a server tool was run by the agent"))
    script = Script(stream_reply("anthropic-stream-tool-search.jsonl"), stream_reply("anthropic-stream-tool-search-answer.jsonl"))
    with LocalServer(script) as server, agent_on(server, tools=[make_tool("get_temp_data", get_temp_data), never]) as agent:
        response = ask(agent, "What is the weather in San Francisco?")
    assert response.stop_reason == "stop" and "San Francisco" in response.content[0].text
    assert ran == [streamed_blocks("anthropic-stream-tool-search.jsonl")[3]["input"]] == [{"location": "San Francisco, CA"}]
    assert len(server.requests) == 2


def test_the_next_request_carries_the_server_blocks_back_unchanged():
    """After a server-tool round, the assistant turn goes back with its server blocks as the stream carried them, then the tool result."""
    blocks = streamed_blocks("anthropic-stream-tool-search.jsonl")
    script = Script(stream_reply("anthropic-stream-tool-search.jsonl"), stream_reply("anthropic-stream-tool-search-answer.jsonl"))
    with LocalServer(script) as server, agent_on(server, tools=[make_tool("get_temp_data")]) as agent:
        ask(agent, "What is the weather in San Francisco?")
    messages = server.requests[1].json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [
        blocks[0],
        blocks[1],
        {"type": "text", "text": blocks[2]["text"]},
        {"type": "tool_use", "id": blocks[3]["id"], "name": "get_temp_data", "input": blocks[3]["input"]},
    ]
    assert messages[2]["content"][0]["tool_use_id"] == blocks[3]["id"]


def test_a_later_run_sends_a_whole_replys_server_blocks_and_citations_again():
    """A non-streamed web-search reply goes back, in the next run's request, with its server blocks exactly as they came and its citations."""
    body = load("anthropic-web-search-citations.json")
    with LocalServer(Script(Reply(body=body), stream_reply("anthropic-stream-tool-search-answer.jsonl"))) as server:
        with agent_on(server, stream=False) as agent:
            first = ask(agent, "Weather in San Francisco today?")
            ask(agent, "Thanks!")
    turn = assistant_turns(server.requests[1])[0]
    assert server_blocks(turn) == server_blocks(body["content"])
    assert [b for b in turn if b["type"] == "text"] == [b for b in body["content"] if b["type"] == "text"], "each text block with its own citations"
    assert [b.citations or [] for b in first.content if isinstance(b, TextContent)] == [b.get("citations", []) for b in body["content"] if b["type"] == "text"]


@pytest.mark.parametrize("stream", [True, False])
def test_a_paused_turn_is_continued_by_the_run_itself(stream):
    """A pause_turn reply is sent again as the last turn, in the same run, and the run ends with the continued reply."""
    names = (PAUSED, CONTINUED) if stream else ("anthropic-pause-turn.json", "anthropic-pause-turn-continued.json")
    replies = [stream_reply(n) for n in names] if stream else [Reply(body=load(n)) for n in names]
    sink = EventRecorder()
    with LocalServer(Script(*replies)) as server, agent_on(server, stream=stream, sink=sink) as agent:
        response = ask(agent, "Run the six searches.")
        history = agent.state.messages
    paused = streamed_blocks(PAUSED) if stream else load(names[0])["content"]
    assert response.stop_reason == "stop" and response is history[-1]
    assert [m.stop_reason for m in history[1:]] == ["pause_turn", "stop"]
    messages = server.requests[1].json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"], "the paused turn is the last message: Anthropic goes on with it"
    assert server_blocks(messages[1]["content"]) == server_blocks(paused)
    assert [e.rounds for e in sink.events if isinstance(e, AgentRunEndEvent)] == [2]


def test_the_continuation_request_has_the_shape_anthropic_accepted():
    """The request continuing the recorded paused stream has the blocks, types and ids of the one pydantic-ai sent, which Anthropic answered."""
    recorded = load("anthropic-request-pause-turn-continue.json")["messages"]
    with LocalServer(Script(stream_reply(PAUSED), stream_reply(CONTINUED))) as server, agent_on(server) as agent:
        ask(agent, recorded[0]["content"][0]["text"])
    sent = server.requests[1].json()["messages"]

    def shape(messages):
        return [(m["role"], [(b["type"], b.get("id") or b.get("tool_use_id") or b.get("text") or b.get("thinking")) for b in m["content"]]) for m in messages]

    assert shape(sent) == shape(recorded)


def test_max_rounds_bounds_a_server_that_keeps_pausing():
    """Every continuation is a round: a server pausing for ever gets max_rounds requests, then the run ends "max_rounds"."""
    with LocalServer(Script(stream_reply(PAUSED))) as server, agent_on(server, max_rounds=3) as agent:
        response = ask(agent, "Search.")
        history = agent.state.messages
    assert response.stop_reason == "max_rounds" and "max_rounds=3" in response.error_message
    assert len(server.requests) == 3
    assert [m.stop_reason for m in history[1:]] == ["pause_turn"] * 3


def test_continue_agent_goes_on_with_a_turn_left_paused():
    """A run stopped by max_rounds on a paused turn leaves it last in the history; continue_agent sends it again and ends the turn."""
    with LocalServer(Script(stream_reply(PAUSED), stream_reply(CONTINUED))) as server, agent_on(server, max_rounds=1) as agent:
        assert ask(agent, "Search.").stop_reason == "max_rounds"
        continue_agent(agent)
        response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "stop"
    assert [m["role"] for m in server.requests[1].json()["messages"]] == ["user", "assistant"]


def test_input_sent_during_a_paused_turn_joins_after_the_turn_is_done():
    """A follow-up that arrives while a paused turn is pending does not come between the turn and its continuation."""
    held, sent = threading.Event(), threading.Event()

    def paused_after_the_follow_up() -> Reply:
        held.set()
        return Reply(chunks=chunked(sse_bytes(PAUSED)), headers=SSE, before=lambda: sent.wait(WAIT))

    script = Script(paused_after_the_follow_up, stream_reply(CONTINUED), stream_reply("anthropic-stream-tool-search-answer.jsonl"))
    with LocalServer(script) as server, agent_on(server) as agent:
        run_agent(agent, "Search.")
        assert held.wait(WAIT)
        follow_up(agent, "And the weather tomorrow?")
        sent.set()
        take_response(agent, timeout=WAIT)
        take_response(agent, timeout=WAIT)
    roles = [[m["role"] for m in r.json()["messages"]] for r in server.requests]
    assert roles == [["user"], ["user", "assistant"], ["user", "assistant", "user"]]
    assert len(server.requests[2].json()["messages"][1]["content"]) > len(server.requests[1].json()["messages"][1]["content"]), (
        "the paused turn and its continuation go back as one assistant turn"
    )


def test_a_saved_and_reloaded_history_still_sends_the_server_blocks(tmp_path):
    """save_history then load_history: a new agent's request carries the server blocks and citations as the first agent's did."""
    body = load("anthropic-web-search-citations.json")
    answer = stream_reply("anthropic-stream-tool-search-answer.jsonl")
    with LocalServer(Script(Reply(body=body), answer, answer, Reply(body=body), answer)) as server:
        with agent_on(server, stream=False) as agent:
            ask(agent, "Weather in San Francisco today?")
            ask(agent, "Thanks!")
            save_history(agent.state.messages, tmp_path / "history.json")
        with agent_on(server, stream=False, messages=load_history(tmp_path / "history.json")) as reloaded:
            ask(reloaded, "And tomorrow?")
        with agent_on(server, stream=False, session=SQLiteSession(tmp_path / "s.db", "web")) as stored:
            ask(stored, "Weather in San Francisco today?")
        with agent_on(server, stream=False, session=SQLiteSession(tmp_path / "s.db", "web")) as restarted:
            ask(restarted, "Thanks!")
    sent = assistant_turns(server.requests[1])[0]
    assert server_blocks(sent) == server_blocks(body["content"])
    assert [b for b in sent if b["type"] == "text"] == [b for b in body["content"] if b["type"] == "text"], "each text block with its own citations"
    assert assistant_turns(server.requests[2])[0] == sent, "a saved history sends what the agent that saved it sent"
    assert assistant_turns(server.requests[4])[0] == sent, "a session gives back what was sent"
