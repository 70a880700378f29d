"""Compaction against the other capabilities of a run (docs/sessions.md "Long conversations").

A summary request is an LLM request of the run: it sees the run's abort signal, its
reply is checked as any reply is (decision 15), a refusal is not a summary, and it counts
against ``max_requests`` (decision 20). A history with markers stays valid for an agent
without compaction, and prompt-cache breakpoints never reach the history.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import FIXTURES, EventRecorder, call, calls_reply
from localserver import LocalServer, Reply
from test_compaction import lookup, wire_pairs_whole
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
    MessageFormatError,
    YiemAgent,
    abort,
    approve,
    ask,
    follow_up,
    resume,
    run_agent,
    stream,
    tool,
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

                _abort_once_the_summary_is_held(agent, held, replies, lambda turn: f"city {turn}?")
                history = agent.history()
        finally:
            release.set()
    assert replies[-1].stop_reason == "aborted"
    assert not any(isinstance(m, CompactionMessage) for m in history)


def test_an_abort_during_the_summary_asked_after_an_overflow_ends_the_run_aborted():
    """After a ContextOverflowError the compaction's summary request sees the run's abort too: the run ends "aborted", and nothing more is sent."""
    held, release = threading.Event(), threading.Event()
    sent_after_hold = []

    def respond(request):
        body = request.json()
        if body["messages"][0]["content"].startswith(SUMMARY_PROMPT):
            held.set()
            return Reply(body=openai_reply({"role": "assistant", "content": "late summary"}), before=lambda: release.wait(60))
        if held.is_set():
            sent_after_hold.append(body)
        if len(request.body) > 3000:  # the server's window is smaller than the one the agent was told
            return Reply(status=400, body=(FIXTURES / "llamacpp-error-400-exceed-context.json").read_bytes(), headers={"Content-Type": "application/json"})
        return Reply(body=openai_reply({"role": "assistant", "content": "ok"}))

    replies = []
    with LocalServer(respond) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", backoff_factor=0.001)
        try:
            with YiemAgent(llm_call=client, agent_event_sink=None, context_window=100_000, compaction=SummarizeHistory(600)) as agent:

                _abort_once_the_summary_is_held(agent, held, replies, lambda turn: f"question {turn}: " + "words " * 100)
        finally:
            release.set()
    assert (replies[-1].stop_reason, replies[-1].error_message) == ("aborted", "the user left")
    assert sent_after_hold == []


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


# --- capabilities met over many turns ---------------------------------------------------


def test_a_summarised_session_loaded_by_an_agent_without_compaction_or_with_another_stays_valid(backend):
    """A history holding markers, loaded by an agent without compaction, sends every message and never the marker; one with TrimHistory keeps its pairs whole and its window."""
    with YiemAgent(llm_call=tool_loop([]), agent_event_sink=None, tools=[lookup], context_window=2048, compaction=SummarizeHistory(600), session=backend.open("s")) as agent:
        for turn in range(10):
            ask(agent, f"What about city {turn}?", timeout=30)
    stored = backend.open("s").messages()
    assert any(isinstance(m, CompactionMessage) for m in stored)
    plain = []
    with YiemAgent(llm_call=tool_loop(plain), agent_event_sink=None, tools=[lookup], session=backend.open("s")) as agent:
        assert ask(agent, "And city 10?", timeout=30).text.startswith("answer")
    sent = [m for m in plain[0]["messages"] if m["role"] != "system"]
    assert len(sent) == sum(isinstance(m, (UserMessage, AssistantMessage, ToolResultMessage)) for m in stored) + 1
    assert not any(m["role"] == "compaction" or "Summary of the earlier" in json.dumps(m) for m in plain[0]["messages"])
    wire_pairs_whole(plain[0])
    trimmed = []
    with YiemAgent(llm_call=tool_loop(trimmed), agent_event_sink=None, tools=[lookup], context_window=2048, compaction=TrimHistory(600), session=backend.open("s")) as agent:
        assert ask(agent, "And city 11?", timeout=30).text.startswith("answer")
    for formatted in trimmed:
        wire_pairs_whole(formatted)
        assert len(json.dumps(formatted)) < 2048 * 4


def anthropic_server(seen, thinking=True):
    """An Anthropic Messages API: a summary request gets a text; a user turn one tool_use (after a signed thinking block); a tool result a text."""

    def respond(request):
        body = request.json()
        seen.append(body)
        system = body.get("system")
        system_text = system if isinstance(system, str) else "".join(b.get("text", "") for b in system or [])
        usage = {"input_tokens": 100, "output_tokens": 5}
        if system_text.startswith(SUMMARY_PROMPT):
            content = [{"type": "text", "text": "The user asked about cities; all mild."}]
            return Reply(body={"id": "m", "type": "message", "role": "assistant", "model": "c", "content": content, "stop_reason": "end_turn", "usage": usage})
        last = body["messages"][-1]["content"]
        if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
            content = [{"type": "text", "text": "answer"}]
            return Reply(body={"id": "m", "type": "message", "role": "assistant", "model": "c", "content": content, "stop_reason": "end_turn", "usage": usage})
        content = [{"type": "tool_use", "id": f"toolu_{len(seen)}", "name": "lookup", "input": {"city": "Oslo"}}]
        if thinking:
            content.insert(0, {"type": "thinking", "thinking": "I should look it up.", "signature": f"sig{len(seen)}"})
        return Reply(body={"id": "m", "type": "message", "role": "assistant", "model": "c", "content": content, "stop_reason": "tool_use", "usage": usage})

    return respond


def count_breakpoints(value):
    if isinstance(value, dict):
        return ("cache_control" in value) + sum(count_breakpoints(v) for v in value.values())
    return sum(count_breakpoints(v) for v in value) if isinstance(value, list) else 0


def test_anthropic_cache_with_compaction_keeps_four_breakpoints_signed_thinking_and_a_clean_history(backend):
    """AnthropicClient(cache=True) under SummarizeHistory over 12 turns: at most 4 breakpoints a request (summary requests too), each tool_use goes with its signed thinking, no marker reaches the history or the session."""
    seen = []
    with LocalServer(anthropic_server(seen)) as server:
        client = AnthropicClient("claude-sonnet-4-5", "k", base_url=server.url, cache=True, max_tokens=512)
        with YiemAgent(llm_call=client, agent_event_sink=None, system_prompt="Be brief.", tools=[lookup], context_window=2048, compaction=SummarizeHistory(600), session=backend.open("c")) as agent:
            for turn in range(12):
                assert ask(agent, f"What about city {turn}?", timeout=30).text == "answer"
            history = agent.history()
    assert any(isinstance(m, CompactionMessage) for m in history)
    for body in seen:
        assert count_breakpoints(body) <= 4
        for i, message in enumerate(body["messages"]):
            blocks = message["content"] if isinstance(message["content"], list) else []
            if message["role"] == "assistant" and any(b.get("type") == "tool_use" for b in blocks):
                assert blocks[0]["type"] == "thinking" and blocks[0]["signature"].startswith("sig")
            if any(b.get("type") == "tool_result" for b in blocks):
                assert body["messages"][i - 1]["role"] == "assistant"
    assert "cache_control" not in json.dumps([m.to_dict() for m in history], default=str)
    assert "cache_control" not in json.dumps([m.to_dict() for m in backend.open("c").messages()], default=str)


def test_approvals_pending_across_a_compaction_run_and_every_request_keeps_its_pairs():
    """Each turn's call is deferred, approved and resumed over 12 turns of a 2,048-token window: every approved call runs, every turn is answered, every request keeps its pairs."""
    requests = []

    def defer_all(ctx, signal):
        return {"defer": True, "reason": "a person checks each lookup"}

    with YiemAgent(llm_call=tool_loop(requests), agent_event_sink=None, tools=[lookup], before_tool_call=defer_all, context_window=2048, compaction=SummarizeHistory(600)) as agent:
        for turn in range(12):
            waiting = ask(agent, f"What about city {turn}?", timeout=30)
            assert waiting.stop_reason == "awaiting_approval"
            call_id = [m for m in agent.history() if isinstance(m, AssistantMessage)][-1].content[0]["tool_calls"][0]["id"]
            approve(agent, call_id)
            assert resume(agent, timeout=30).text.startswith("answer")
        history = agent.history()
    assert sum(isinstance(m, ToolResultMessage) and "Report on" in m.content[0].text for m in history) == 12
    assert any(isinstance(m, CompactionMessage) for m in history)
    for formatted in requests:
        wire_pairs_whole(formatted)
        assert len(json.dumps(formatted)) < 2048 * 4


ODD_SUMMARIES = {
    "a tool call": lambda: calls_reply(call("s1", "lookup", '{"city": "Oslo"}')),
    "an empty text": lambda: AssistantMessage([TextContent("  ")]),
    "an error": lambda: AssistantMessage([], stop_reason="error", error_message="server said no"),
    "a refusal": lambda: AssistantMessage([TextContent("I won't.")], stop_reason="refusal"),
    "a raise": lambda: (_ for _ in ()).throw(ConnectionResetError("gone")),
    "not a message": lambda: {"content": "a dict"},
    "None content": lambda: AssistantMessage(None),
    "a good summary": lambda: AssistantMessage([TextContent("Cities were asked about; all mild.")]),
}


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(sorted(ODD_SUMMARIES)), min_size=1, max_size=6))
def test_whatever_the_summariser_returns_every_turn_is_answered_and_only_a_summary_is_stored(replies):
    """Property: a summariser that returns a tool call, an empty text, an error, a refusal, raises or returns no message never breaks a run; a marker only ever holds a real summary."""
    answers = iter(replies * 20)
    requests = []
    with YiemAgent(llm_call=tool_loop(requests, lambda formatted: ODD_SUMMARIES[next(answers)]()), agent_event_sink=None, tools=[lookup], context_window=2048, compaction=SummarizeHistory(600)) as agent:
        for turn in range(8):
            assert ask(agent, f"What about city {turn}?", timeout=30).text.startswith("answer")
        history = agent.history()
    for marker in (m for m in history if isinstance(m, CompactionMessage)):
        assert marker.summary == "Cities were asked about; all mild."
    for formatted in requests:
        wire_pairs_whole(formatted)


def test_a_batch_whose_results_alone_outgrow_the_window_ends_its_run_naming_the_overflow_and_the_next_run_answers():
    """Parallel results far beyond the window: that run ends "error" naming the overflow, and the next question is answered from a request that fits."""
    requests = []

    @tool
    def dump(part: str) -> str:
        """A huge result."""
        return f"part {part}: " + "data " * 3000

    def llm(formatted):
        requests.append(formatted)
        last = formatted["messages"][-1]
        if last["role"] == "user" and "dump" in last["content"]:
            return calls_reply(call("d1", "dump", '{"part": "a"}'), call("d2", "dump", '{"part": "b"}'))
        return AssistantMessage([TextContent("answer")], stop_reason="stop")

    for strategy in (TrimHistory(600), SummarizeHistory(600)):
        requests.clear()
        with YiemAgent(llm_call=llm, agent_event_sink=None, tools=[dump], context_window=2048, compaction=strategy) as agent:
            assert ask(agent, "hello", timeout=30).text == "answer"
            failed = ask(agent, "dump it all", timeout=30, check=False)
            assert failed.stop_reason == "error" and failed.error_message.startswith("context overflow"), failed
            assert ask(agent, "and now a short question", timeout=30).text == "answer"
        assert len(json.dumps(requests[-1])) < 2048 * 4


def _overflowing_past_3000_bytes(bodies: list):
    """A server's ``respond``: each request's body recorded in ``bodies``; llama.cpp's context overflow (400) past 3,000 bytes, else "ok"."""

    def respond(request):
        bodies.append(request.body)
        if len(request.body) > 3000:
            return Reply(status=400, body=(FIXTURES / "llamacpp-error-400-exceed-context.json").read_bytes(), headers={"Content-Type": "application/json"})
        return Reply(body=openai_reply({"role": "assistant", "content": "ok"}))

    return respond


def test_the_request_made_again_after_an_overflow_counts_against_max_requests():
    """After a ContextOverflowError the request made again is a request like any: under max_requests=1 a run sends one, and its reply names the overflow (decision 20)."""
    bodies = []

    with LocalServer(_overflowing_past_3000_bytes(bodies)) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", backoff_factor=0.001)
        with YiemAgent(llm_call=client, agent_event_sink=None, context_window=4000, compaction=TrimHistory(500), usage_limits=UsageLimits(max_requests=1)) as agent:
            overflowed = False
            for turn in range(12):
                before = len(bodies)
                reply = ask(agent, f"question {turn}: " + "words " * 100, timeout=30, check=False)
                assert len(bodies) - before <= 1, f"{len(bodies) - before} requests sent in a run under max_requests=1"
                overflowed = overflowed or (reply.stop_reason == "error" and "ContextOverflowError" in reply.error_message)
    assert overflowed, "no request overflowed"


def test_the_request_made_again_after_an_overflow_is_sent_while_the_runs_caps_leave_room():
    """A cap the run has not reached (max_requests=2) lets the request made again after a ContextOverflowError go: the run sends two, each a round of its own, and the second's reply is its answer (decision 20)."""
    from yiemagent import AgentRunEndEvent, LLMCallStartEvent

    bodies = []
    recorder = EventRecorder()

    with LocalServer(_overflowing_past_3000_bytes(bodies)) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", backoff_factor=0.001)
        with YiemAgent(llm_call=client, agent_event_sink=recorder, context_window=4000, compaction=TrimHistory(500), usage_limits=UsageLimits(max_requests=2)) as agent:
            retried = []
            for turn in range(12):
                before, events = len(bodies), len(recorder.events)
                reply = ask(agent, f"question {turn}: " + "words " * 100, timeout=30, check=False)
                if len(bodies) - before == 2:
                    run_events = recorder.events[events:]
                    rounds = ([e.round for e in run_events if isinstance(e, LLMCallStartEvent)], [e.rounds for e in run_events if isinstance(e, AgentRunEndEvent)])
                    retried.append((reply.stop_reason, reply.text, rounds))
    assert ("stop", "ok", ([1, 2], [2])) in retried, retried


def test_the_request_made_again_after_an_overflow_asks_for_the_native_typed_answer_as_the_refused_one_did():
    """output_mode="native" over a compacted conversation: the request made again after a ContextOverflowError carries the answer's response_format, as the refused one did, and its answer is the output (docs/api.md "Native typed answers")."""
    from dataclasses import dataclass

    @dataclass
    class Word:
        word: str

    bodies = []

    def respond(request):
        bodies.append(request.json())
        if len(request.body) > 3000:
            return Reply(status=400, body=(FIXTURES / "llamacpp-error-400-exceed-context.json").read_bytes(), headers={"Content-Type": "application/json"})
        return Reply(body=openai_reply({"role": "assistant", "content": json.dumps({"word": "ok"})}))

    with LocalServer(respond) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", backoff_factor=0.001)
        with YiemAgent(llm_call=client, agent_event_sink=None, context_window=4000, compaction=TrimHistory(500), output_type=Word, output_mode="native") as agent:
            retried = []
            for turn in range(12):
                before = len(bodies)
                reply = ask(agent, f"question {turn}: " + "words " * 100, timeout=30, check=False)
                if len(bodies) - before == 2:
                    retried.append(reply.output)
    assert Word("ok") in retried, retried  # a retry that fits is answered; one still too long ends the run with the overflow
    assert all("response_format" in body for body in bodies)


def test_typed_answers_over_a_compacted_conversation_keep_their_final_result_pairs():
    """output_type over 14 turns of a 2,048-token window, a third of the answers invalid first: each turn's output is right, and no request parts a final_result call from its result."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Town:
        name: str
        population: int

    state = {"turn": 0, "sent": 0}
    requests = []

    def llm(formatted):
        messages = formatted["messages"]
        if messages[0]["role"] == "system" and messages[0]["content"].startswith(SUMMARY_PROMPT):
            return AssistantMessage([TextContent("Towns were asked about.")])
        requests.append(formatted)
        state["sent"] += 1
        turn, last = state["turn"], messages[-1]
        if last["role"] == "user" and last["content"].startswith("Which town"):
            return calls_reply(call(f"l{state['sent']}", "lookup", json.dumps({"city": f"town {turn}"})))
        population = "many" if turn % 3 == 0 and last["role"] == "tool" and last.get("name", "lookup") != "final_result" and "Report on" in str(last["content"]) else turn
        return calls_reply(call(f"f{state['sent']}", "final_result", json.dumps({"name": f"town {turn}", "population": population})))

    with YiemAgent(llm_call=llm, agent_event_sink=None, tools=[lookup], output_type=Town, output_retries=2, context_window=2048, compaction=SummarizeHistory(600)) as agent:
        for turn in range(14):
            state["turn"] = turn
            assert ask(agent, f"Which town is number {turn}?", timeout=30).output == Town(f"town {turn}", turn)
        history = agent.history()
    assert any(isinstance(m, CompactionMessage) for m in history)
    for formatted in requests:
        wire_pairs_whole(formatted)
        assert len(json.dumps(formatted)) < 2048 * 4


def sse(events) -> bytes:
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n"


def test_a_streamed_turn_that_summarises_shows_its_reply_and_never_the_summary():
    """stream() over 10 turns of a streaming client: each turn's text is its reply's, the summary's deltas never reach the stream, and each stream ends with the run's reply."""

    def respond(request):
        body = request.json()
        if body["messages"][0]["content"].startswith(SUMMARY_PROMPT):
            text = [{"choices": [{"index": 0, "delta": {"content": "HIDDEN "}}]}, {"choices": [{"index": 0, "delta": {"content": "summary"}, "finish_reason": "stop"}]}]
            return Reply(chunks=[sse(text)])
        if body["messages"][-1]["role"] == "user":
            chunks = [
                {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": f"c{len(server.requests)}", "type": "function", "function": {"name": "lookup", "arguments": '{"city": "Oslo"}'}}]}}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
            ]
            return Reply(chunks=[sse(chunks)])
        return Reply(chunks=[sse([{"choices": [{"index": 0, "delta": {"content": "the answer"}, "finish_reason": "stop"}]}])])

    with LocalServer(respond) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", stream=True, backoff_factor=0.001)
        with YiemAgent(llm_call=client, agent_event_sink=EventRecorder(), tools=[lookup], context_window=2048, compaction=SummarizeHistory(600)) as agent:
            for turn in range(10):
                run = stream(agent, f"What about city {turn}?", timeout=30)
                assert "".join(run.text()) == "the answer" and run.reply.text == "the answer"
            history = agent.history()
    assert [m.summary for m in history if isinstance(m, CompactionMessage)][-1] == "HIDDEN summary"


def test_a_sub_agent_s_long_single_turn_drops_its_oldest_rounds_and_the_parent_s_usage_holds_the_sub_run_s():
    """An agent_tool sub-agent making 16 lookups in one turn of a 2,048-token window: every request fits and keeps its pairs, the sub-agent answers, and the parent's usage holds the sub-run's."""
    from yiemagent import LLMUsage
    from yiemagent.tools.agent_tool import agent_tool

    sub_requests = []

    def sub_llm(formatted):
        sub_requests.append(formatted)
        done = sum(m["role"] == "tool" for m in formatted["messages"])
        if len(sub_requests) <= 16:
            reply = calls_reply(call(f"s{len(sub_requests)}", "lookup", json.dumps({"city": f"city {len(sub_requests)}"})))
        else:
            reply = AssistantMessage([TextContent(f"looked up, {done} reports in view")], stop_reason="stop")
        return AssistantMessage(reply.content, stop_reason=reply.stop_reason, usage=LLMUsage(10, 1))

    research = agent_tool(lambda: YiemAgent(llm_call=sub_llm, agent_event_sink=None, tools=[lookup], context_window=2048, compaction=TrimHistory(600)), name="research", description="Researches.")
    parent_script = iter([calls_reply(call("p1", "research", '{"task": "look up sixteen cities"}')), AssistantMessage([TextContent("done")], stop_reason="stop")])
    with YiemAgent(llm_call=lambda formatted: next(parent_script), agent_event_sink=None, tools=[research]) as agent:
        assert ask(agent, "research", timeout=60).text == "done"
        history, usage = agent.history(), agent.usage
    result = [m for m in history if isinstance(m, ToolResultMessage)][0]
    assert not result.is_error and "looked up" in result.content[0].text
    assert len(sub_requests) == 17 and usage.input_tokens == 170
    for formatted in sub_requests:
        wire_pairs_whole(formatted)
        assert len(json.dumps(formatted)) < 2048 * 4
    assert sum(m["role"] == "tool" for m in sub_requests[-1]["messages"]) < 16  # the oldest rounds were left out


def reply_room_server(window, seen):
    """An OpenAI-like server that refuses (context_length_exceeded) a request whose prompt (a quarter of its bytes) and max_tokens pass ``window``."""
    refusal = (FIXTURES / "openai-error-400-context-length-exceeded.json").read_bytes()

    def respond(request):
        body = request.json()
        seen.append(body)
        if len(request.body) // 4 + body.get("max_tokens", 0) > window:
            return Reply(status=400, body=refusal, headers={"Content-Type": "application/json"})
        if body["messages"][-1]["role"] == "user":
            message = {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{len(seen)}", "type": "function", "function": {"name": "lookup", "arguments": '{"city": "Oslo"}'}}]}
            return Reply(body=openai_reply(message))
        return Reply(body=openai_reply({"role": "assistant", "content": "ok"}))

    return respond


@pytest.mark.parametrize("wrapped", [False, True], ids=["client", "fallback"])
def test_a_fallback_llm_leaves_the_reply_room_its_clients_ask_for(wrapped):
    """FallbackLLM wrapping a client with max_tokens=3000: compaction leaves that room as for the client alone, so a server that counts prompt and reply never refuses a request and every turn is answered."""
    from yiemagent import FallbackLLM

    seen = []
    with LocalServer(reply_room_server(5120, seen)) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", options={"max_tokens": 3000}, backoff_factor=0.001)
        with YiemAgent(llm_call=FallbackLLM(client) if wrapped else client, agent_event_sink=None, tools=[lookup], context_window=4096, compaction=TrimHistory(800)) as agent:
            for turn in range(10):
                assert ask(agent, f"city {turn}?", timeout=30).text == "ok"
    assert all(len(json.dumps(body)) // 4 + 3000 <= 5120 for body in seen), "a request was refused for the reply's room"


def test_a_summary_far_longer_than_asked_never_makes_the_next_summary_request_outgrow_the_window():
    """A model that answers a summary far longer than asked: the next summary request still fits the window (the summary so far is cut), and later summaries are made."""
    summary_requests = []

    def summariser(formatted):
        summary_requests.append(formatted)
        if len(summary_requests) == 1:
            return AssistantMessage([TextContent("The user asked about cities. " + "Every report said mild and dry. " * 1000)])
        return AssistantMessage([TextContent(f"Summary {len(summary_requests)}: cities, all mild.")])

    with YiemAgent(llm_call=tool_loop([], summariser), agent_event_sink=None, tools=[lookup], context_window=2048, compaction=SummarizeHistory(600)) as agent:
        for turn in range(14):
            assert ask(agent, f"What about city {turn}?", timeout=30).text.startswith("answer")
        history = agent.history()
    assert len(summary_requests) >= 2
    assert all(len(json.dumps(r)) < 2048 * 4 for r in summary_requests), [len(json.dumps(r)) for r in summary_requests]
    assert [m.summary for m in history if isinstance(m, CompactionMessage)][-1].startswith("Summary")


def png(width, height):
    """A base64 PNG header of ``width`` x ``height`` (what count_tokens reads an image's cost from)."""
    import base64
    import struct
    import zlib

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + chunk + b"\x00" * 4000).decode()


@pytest.mark.parametrize("strategy", [TrimHistory(600), SummarizeHistory(600)], ids=["trim", "summarize"])
def test_images_in_a_long_conversation_count_by_their_size_and_every_request_fits(strategy):
    """Each of 10 questions carries a 1,000 x 1,000 image (about 1,334 tokens): the request keeps the newest, counts each by its size (not its base64 length), fits the window, and the summary names an image without its data."""
    from yiemagent import ImageContent, LLMCallStartEvent, count_tokens

    summaries = []
    requests = []

    def summariser(formatted):
        summaries.append(formatted)
        return AssistantMessage([TextContent("Pictures of cities were shown.")])

    recorder = EventRecorder()
    with YiemAgent(llm_call=tool_loop(requests, summariser), agent_event_sink=recorder, tools=[lookup], context_window=4096, compaction=strategy) as agent:
        for turn in range(10):
            question = UserMessage([TextContent(f"What city is in picture {turn}?"), ImageContent(png(1000, 1000), "image/png")])
            assert ask(agent, question, timeout=30).text.startswith("answer")
    sent = [e.context for e in recorder.of_type(LLMCallStartEvent)]
    for formatted in requests:
        wire_pairs_whole(formatted)
        assert "picture" in json.dumps(formatted["messages"][-1]) or formatted["messages"][-1]["role"] == "tool"
    for ctx in sent:
        assert count_tokens(list(ctx.messages), system_prompt=ctx.system_prompt, tools=list(ctx.tools.values())) <= 4096 - 1024
    assert all(png(1000, 1000) not in json.dumps(s) for s in summaries)
    assert not summaries or "[an image]" in json.dumps(summaries[0])



def test_repeated_overflows_never_shrink_the_room_until_nothing_fits():
    """A server that refuses requests again and again (each refused run ends naming its overflow): the room shrinks, but never below half, so once the server accepts again a question is answered."""
    refusing = threading.Event()
    refusing.set()

    def respond(request):
        if refusing.is_set():
            return Reply(status=400, body=(FIXTURES / "llamacpp-error-400-exceed-context.json").read_bytes(), headers={"Content-Type": "application/json"})
        return Reply(body=openai_reply({"role": "assistant", "content": "ok"}))

    with LocalServer(respond) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", backoff_factor=0.001)
        with YiemAgent(llm_call=client, agent_event_sink=None, system_prompt="Answer briefly and kindly. " * 60, context_window=2048, compaction=TrimHistory(500)) as agent:
            for turn in range(8):
                refused = ask(agent, f"question {turn} " + "with some words " * 20, timeout=30, check=False)
                assert refused.stop_reason == "error" and "ContextOverflowError" in refused.error_message
            refusing.clear()
            assert ask(agent, "hello", timeout=30).text == "ok"


def test_a_follow_up_sent_during_the_summary_request_is_sent_in_the_same_run():
    """A follow-up that arrives while the summary request is out is not lost: it joins the run and a later request of it carries it."""
    from yiemagent import follow_up

    in_summary, sent = threading.Event(), threading.Event()
    requests = []

    def summariser(formatted):
        in_summary.set()
        sent.wait(30)
        return AssistantMessage([TextContent("Cities were asked about.")])

    with YiemAgent(llm_call=tool_loop(requests, summariser), agent_event_sink=None, tools=[lookup], context_window=2048, compaction=SummarizeHistory(600)) as agent:

        def send_when_summarising():
            if in_summary.wait(60):
                follow_up(agent, "and please add the weather in Bergen")
            sent.set()

        helper = threading.Thread(target=send_when_summarising, daemon=True)
        helper.start()
        for turn in range(10):
            ask(agent, f"What about city {turn}?", timeout=60)
            if sent.is_set():
                break
        helper.join(30)
        assert agent.wait_until_idle(30)
        history = agent.history()
    assert in_summary.is_set()
    assert any(isinstance(m, UserMessage) and "Bergen" in m.content[0].text for m in history)
    assert any("Bergen" in json.dumps(r) for r in requests), "the follow-up was never sent"


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["ok", "overflow"]), min_size=1, max_size=40), st.sampled_from(["trim", "summarize"]))
def test_whatever_overflows_a_model_answers_each_run_ends_in_at_most_two_requests_and_the_agent_recovers(behaviours, strategy):
    """Property: a model that refuses any requests as too long: each run sends at most two requests (and summaries), ends with the answer or the overflow named, and once the model accepts again a question is answered."""
    from yiemagent import ContextOverflowError

    script = iter(behaviours)
    per_run = []

    def llm(formatted):
        if formatted["messages"][0]["content"].startswith(SUMMARY_PROMPT):
            return AssistantMessage([TextContent("Questions were asked.")])
        per_run[-1] += 1
        if next(script, "ok") == "overflow":
            raise ContextOverflowError("the request is longer than the model's context window")
        return AssistantMessage([TextContent("ok")], stop_reason="stop")

    compaction = TrimHistory(300) if strategy == "trim" else SummarizeHistory(300)
    with YiemAgent(llm_call=llm, agent_event_sink=None, system_prompt="Answer briefly. " * 40, context_window=1024, compaction=compaction) as agent:
        for turn in range(len(behaviours) + 1):
            per_run.append(0)
            reply = ask(agent, f"question {turn} " + "and some words " * 15, timeout=30, check=False)
            assert per_run[-1] <= 2
            assert reply.text == "ok" or (reply.stop_reason == "error" and "ContextOverflowError" in reply.error_message), reply
        per_run.append(0)
        assert ask(agent, "hello", timeout=30).text == "ok"


def test_a_long_anthropic_tool_loop_with_thinking_drops_whole_rounds_and_keeps_each_signature_with_its_tool_use():
    """One turn of 14 signed-thinking tool rounds in a 2,048-token window: the oldest rounds are left out whole, each tool_use goes with its signed thinking and is answered in the next turn, the newest round is always sent."""
    seen = []

    def respond(request):
        body = request.json()
        seen.append(body)
        usage = {"input_tokens": 100, "output_tokens": 5}
        if len(seen) > 14:
            return Reply(body={"id": "m", "type": "message", "role": "assistant", "model": "c", "content": [{"type": "text", "text": "answer"}], "stop_reason": "end_turn", "usage": usage})
        content = [
            {"type": "thinking", "thinking": f"round {len(seen)}: look it up", "signature": f"sig{len(seen)}"},
            {"type": "tool_use", "id": f"toolu_{len(seen)}", "name": "lookup", "input": {"city": f"city {len(seen)}"}},
        ]
        return Reply(body={"id": "m", "type": "message", "role": "assistant", "model": "c", "content": content, "stop_reason": "tool_use", "usage": usage})

    with LocalServer(respond) as server:
        client = AnthropicClient("claude-sonnet-4-5", "k", base_url=server.url, cache=True, max_tokens=512)
        with YiemAgent(llm_call=client, agent_event_sink=None, tools=[lookup], max_rounds=20, context_window=2048, compaction=SummarizeHistory(600)) as agent:
            assert ask(agent, "Look up many cities.", timeout=60).text == "answer"
    assert len(seen) == 15
    for index, body in enumerate(seen):
        messages = body["messages"]
        assert messages[0]["role"] == "user" and "Look up many cities." in json.dumps(messages[0])
        for i, message in enumerate(messages):
            blocks = message["content"] if isinstance(message["content"], list) else []
            uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
            if uses:
                assert blocks[0]["type"] == "thinking" and blocks[0]["signature"] == f"sig{uses[0].split('_')[1]}"
                answered = [b["tool_use_id"] for b in messages[i + 1]["content"] if b.get("type") == "tool_result"]
                assert answered == uses
        if index:
            assert f"toolu_{index}" in json.dumps(messages[-2:])  # the newest round is sent
        assert count_breakpoints(body) <= 4
    assert sum(1 for m in seen[-1]["messages"] if m["role"] == "assistant") < 14  # the oldest rounds were left out


def test_a_compaction_message_sent_to_an_agent_is_refused_naming_it_and_the_agent_answers_on():
    """A CompactionMessage is the compaction's own record, never a caller's input: ask, run_agent and follow_up refuse it at once (it ran a request of no messages), and the agent answers the next question."""
    requests: list = []
    with YiemAgent(llm_call=tool_loop(requests), agent_event_sink=None) as agent:
        marker = CompactionMessage("a summary", 0, datetime.now(timezone.utc))
        for send in (lambda: ask(agent, marker, timeout=20), lambda: run_agent(agent, marker), lambda: follow_up(agent, marker)):
            with pytest.raises(MessageFormatError, match="a CompactionMessage is written by the agent's compaction"):
                send()
        assert requests == [] and agent.history() == []
        assert ask(agent, "hi", timeout=20).text == "answer 2"


def _abort_once_the_summary_is_held(agent, held, replies, question):
    """Ask ``question(turn)`` turn after turn on a thread of its own until the server holds a summary request, then abort: the asking thread ends."""

    def talk():
        for turn in range(12):
            replies.append(ask(agent, question(turn), timeout=120, check=False))
            if held.is_set():
                return

    talker = threading.Thread(target=talk, daemon=True)
    talker.start()
    assert held.wait(60), "no summary was asked for"
    abort(agent, "the user left")
    talker.join(30)
    assert not talker.is_alive(), "the run waited for the summary request after the abort"
