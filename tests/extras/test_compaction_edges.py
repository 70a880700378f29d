"""Compaction against the other capabilities of a run (docs/sessions.md "Long conversations").

A summary request is an LLM request of the run: it sees the run's abort signal, its
reply is checked as any reply is (decision 15), a refusal is not a summary, and it counts
against ``max_requests`` (decision 20). A history with markers stays valid for an agent
without compaction, and prompt-cache breakpoints never reach the history.
"""

from __future__ import annotations

import json
import threading

from helpers import EventRecorder, call, calls_reply
from localserver import LocalServer, Reply
from test_compaction import lookup
from session_backends import backend, postgres_server  # noqa: F401  fixtures: each backend in turn
from yiemagent import (
    AssistantMessage,
    CompactionMessage,
    SummarizeHistory,
    TextContent,
    ToolResultMessage,
    TrimHistory,
    UsageLimits,
    UserMessage,
    YiemAgent,
    abort,
    ask,
)
from yiemagent.llm import AnthropicClient, OpenAIClient

SUMMARY_PROMPT = "You summarise"


def tool_loop(requests, summariser=None):
    """A model that calls lookup once per question, then answers; ``summariser(formatted)`` answers a summary request."""

    def answer(formatted):
        messages = formatted["messages"]
        if messages[0]["role"] == "system" and messages[0]["content"].startswith(SUMMARY_PROMPT):
            return summariser(formatted) if summariser else AssistantMessage([TextContent("The user asked about cities.")])
        requests.append(formatted)
        if messages[-1]["role"] == "user":
            return calls_reply(call(f"call_{len(requests)}", "lookup", json.dumps({"city": f"city {len(requests)}"})))
        return AssistantMessage([TextContent(f"answer {len(requests)}")], stop_reason="stop")

    return answer


def openai_reply(message, usage=None):
    return {"id": "x", "object": "chat.completion", "model": "m", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage or {"prompt_tokens": 10, "completion_tokens": 2}}


def test_an_abort_during_the_summary_request_ends_the_run_aborted_without_a_marker():
    """The summary request sees the run's abort signal: a server that holds it does not hold the run, and no marker is stored."""
    held, release = threading.Event(), threading.Event()

    def respond(request):
        body = request.json()
        if body["messages"][0]["content"].startswith(SUMMARY_PROMPT):
            held.set()
            return Reply(body=openai_reply({"role": "assistant", "content": "late summary"}), before=lambda: release.wait(60))
        if body["messages"][-1]["role"] == "user":
            message = {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{len(server.requests)}", "type": "function", "function": {"name": "lookup", "arguments": '{"city": "Oslo"}'}}]}
            return Reply(body=openai_reply(message))
        return Reply(body=openai_reply({"role": "assistant", "content": "ok"}))

    replies = []
    with LocalServer(respond) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", backoff_factor=0.001)
        try:
            with YiemAgent(llm_call=client, agent_event_sink=None, tools=[lookup], context_window=2048, compaction=SummarizeHistory(600)) as agent:

                def talk():
                    for turn in range(12):
                        replies.append(ask(agent, f"city {turn}?", timeout=120, check=False))
                        if held.is_set():
                            return

                talker = threading.Thread(target=talk, daemon=True)
                talker.start()
                assert held.wait(60), "no summary was asked for"
                abort(agent, "the user left")
                talker.join(30)
                assert not talker.is_alive(), "the run waited for the summary request after the abort"
                history = agent.history()
        finally:
            release.set()
    assert replies[-1].stop_reason == "aborted"
    assert not any(isinstance(m, CompactionMessage) for m in history)


def test_a_refusal_or_a_filtered_reply_is_never_stored_as_the_summary():
    """A summariser that refuses (or is filtered) made no summary: no marker holds its words, and every turn is answered."""
    for stop_reason in ("refusal", "content_filter"):
        requests = []

        def refusing(formatted, stop_reason=stop_reason):
            return AssistantMessage([TextContent("I can't help with summarising that.")], stop_reason=stop_reason)

        with YiemAgent(llm_call=tool_loop(requests, refusing), agent_event_sink=None, tools=[lookup], context_window=2048, compaction=SummarizeHistory(600)) as agent:
            for turn in range(8):
                assert ask(agent, f"What about city {turn}?", timeout=30).text.startswith("answer")
            history = agent.history()
        assert not any(isinstance(m, CompactionMessage) for m in history), stop_reason
        assert not any("can't help" in json.dumps(r) for r in requests), stop_reason


def test_a_summary_reply_is_checked_like_any_reply_before_it_is_stored(backend):
    """A summary whose content is a str with a lone surrogate is fixed as decision 15 fixes a reply: stored in the session, loaded, and sent by the next agent."""

    def odd(formatted):
        return AssistantMessage("cities were asked \ud800 about")

    with YiemAgent(llm_call=tool_loop([], odd), agent_event_sink=None, tools=[lookup], context_window=2048, compaction=SummarizeHistory(600), session=backend.open("s")) as agent:
        for turn in range(8):
            assert ask(agent, f"What about city {turn}?", timeout=30).text.startswith("answer")
    markers = [m for m in backend.open("s").messages() if isinstance(m, CompactionMessage)]
    assert markers and all("cities were asked" in m.summary and "\ud800" not in m.summary for m in markers)
    requests = []
    with YiemAgent(llm_call=tool_loop(requests, odd), agent_event_sink=None, tools=[lookup], context_window=2048, compaction=SummarizeHistory(600), session=backend.open("s")) as agent:
        assert ask(agent, "And city 9?", timeout=30).text.startswith("answer")
    assert "cities were asked" in json.dumps(requests[0])


def test_the_summary_request_counts_against_max_requests():
    """max_requests bounds every LLM request of a run, the summary's too: no request past the cap is sent (decision 20)."""
    sent = []

    def counting(formatted):
        sent.append(formatted)
        return tool_loop([])(formatted)

    summarised = 0
    with YiemAgent(llm_call=counting, agent_event_sink=None, tools=[lookup], context_window=2048, compaction=SummarizeHistory(600), usage_limits=UsageLimits(max_requests=2)) as agent:
        for turn in range(10):
            before = len(sent)
            ask(agent, f"What about city {turn}?", timeout=30, check=False)
            assert len(sent) - before <= 2, f"{len(sent) - before} requests sent in a run under max_requests=2"
            summarised += any(r["messages"][0]["content"].startswith(SUMMARY_PROMPT) for r in sent[before:] if r["messages"][0]["role"] == "system")
    assert summarised, "no run summarised"
