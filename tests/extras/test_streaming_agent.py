"""The agent side of streaming (docs/streaming.md): a custom llm_call's deltas reach the sink as LLMDeltaEvent.

The llm_calls here stream through the documented protocol (yiemagent.events,
docs/streaming.md) — from the calling thread and from threads of their own carrying the
call's context — so these tests hold for any client, not only the two HTTP ones.
"""

from __future__ import annotations

import contextvars
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import given

from helpers import ROOT, WAIT, EventRecorder, make_agent, make_tool, text_result
from strategies import streamed_replies
from yiemagent import (
    AbortSignal,
    AgentRunEndEvent,
    AgentRunStartEvent,
    AssistantMessage,
    LLMCallEndEvent,
    LLMCallStartEvent,
    LLMDeltaEvent,
    LLMError,
    TextContent,
    ToolExecEndEvent,
    ToolExecStartEvent,
    ToolStore,
    UserMessage,
    YiemAgent,
    abort,
    register_tool,
    run_agent,
    take_response,
)
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.events import current_abort_signal, emit_delta, stream_to



def reply_of(thinking: str, text: str) -> AssistantMessage:
    """A final reply holding a thinking block (as the clients make it) and a text block."""
    content: list[Any] = [{"type": "thinking", "thinking": thinking}] if thinking else []
    return AssistantMessage(content + ([TextContent(text)] if text else []), stop_reason="stop", model="streamer")


def text_of_kind(message: AssistantMessage, kind: str) -> str:
    if kind == "text":
        return "".join(b.text for b in message.content if isinstance(b, TextContent))
    return "".join(b["thinking"] for b in message.content if isinstance(b, dict) and b.get("type") == "thinking")


def streamer(*rounds: tuple[list[tuple[str, str]], AssistantMessage]) -> Callable[[dict], AssistantMessage]:
    """An llm_call that, per call, emits the round's deltas and then returns its reply."""
    script = list(rounds)

    def llm_call(formatted: dict) -> AssistantMessage:
        deltas, reply = script.pop(0)
        for kind, text in deltas:
            emit_delta(kind, text)
        return reply

    return llm_call


def deltas_of(recorder: EventRecorder) -> list[tuple[int, int, str, str]]:
    return [(e.run_id, e.round, e.kind, e.text) for e in recorder.of_type(LLMDeltaEvent)]


def test_deltas_come_between_their_rounds_start_and_end_events(recorder):
    """Each round: LLMCallStartEvent, its deltas (tagged with its run and round), then LLMCallEndEvent."""
    first = tool_call_reply(("c1", "lookup", {"q": "x"}), text="Let me look.")
    llm = streamer(([("text", "Let me "), ("text", "look.")], first), ([("thinking", "found"), ("text", "It is "), ("text", "x.")], reply_of("found", "It is x.")))
    with make_agent(llm, make_tool("lookup"), sink=recorder) as agent:
        run_agent(agent, "what is it?")
        assert text_of_kind(take_response(agent, timeout=WAIT), "text") == "It is x."
    shown = [(type(e).__name__, getattr(e, "round", None), getattr(e, "text", None)) for e in recorder.events]
    assert shown == [
        ("AgentRunStartEvent", None, None),
        ("LLMCallStartEvent", 1, None),
        ("LLMDeltaEvent", 1, "Let me "),
        ("LLMDeltaEvent", 1, "look."),
        ("LLMCallEndEvent", 1, None),
        ("ToolExecStartEvent", None, None),
        ("ToolExecEndEvent", None, None),
        ("LLMCallStartEvent", 2, None),
        ("LLMDeltaEvent", 2, "found"),
        ("LLMDeltaEvent", 2, "It is "),
        ("LLMDeltaEvent", 2, "x."),
        ("LLMCallEndEvent", 2, None),
        ("AgentRunEndEvent", None, None),
    ]
    assert [e.kind for e in recorder.of_type(LLMDeltaEvent)] == ["text", "text", "thinking", "text", "text"]
    assert {e.run_id for e in recorder.of_type(LLMDeltaEvent)} == {1}


_SET_BY_SINK: contextvars.ContextVar[Any] = contextvars.ContextVar("set_by_sink", default=None)


def test_a_rounds_deltas_reach_the_sink_in_one_context_kept_for_the_round():
    """The sink gets a round's deltas in one context of its own (DeltaRelay): what it set at one delta it finds at the next, and the llm_call's context never sees it."""
    found: list[Any] = []
    in_llm_call: list[Any] = []

    def llm_call(formatted: dict) -> AssistantMessage:
        for piece in ("a", "b", "c"):
            emit_delta("text", piece)
        in_llm_call.append(_SET_BY_SINK.get())
        return reply_of("", "abc")

    def sink(event: Any) -> None:
        if isinstance(event, LLMDeltaEvent):
            found.append(_SET_BY_SINK.get())
            _SET_BY_SINK.set(event.text)

    with make_agent(llm_call, sink=sink) as agent:
        run_agent(agent, "go")
        assert text_of_kind(take_response(agent, timeout=WAIT), "text") == "abc"
    assert found == [None, "a", "b"]
    assert in_llm_call == [None]


@given(streamed_replies())
def test_joined_deltas_of_each_kind_equal_the_final_text_of_that_kind(stream):
    """Property: however the same thinking and text are cut and interleaved, the deltas of a kind join to that kind's text."""
    thinking, text, deltas = stream
    recorder = EventRecorder()
    with make_agent(streamer((deltas, reply_of(thinking, text))), sink=recorder) as agent:
        run_agent(agent, "go")
        final = take_response(agent, timeout=WAIT)
    events = recorder.of_type(LLMDeltaEvent)
    for kind in ("text", "thinking"):
        assert "".join(e.text for e in events if e.kind == kind) == text_of_kind(final, kind)
    assert [(e.kind, e.text) for e in events] == deltas


def test_deltas_from_the_clients_own_threads_are_serialised_and_complete():
    """Decision 8: four threads carrying the call's context emit at once; the sink never overlaps, none is lost."""
    inside, overlaps, seen = [0], [0], []
    guard = threading.Lock()

    def slow_sink(event: Any) -> None:  # stays in the sink a while, so that an unserialised call would overlap
        with guard:
            inside[0] += 1
            overlaps[0] += inside[0] > 1
        time.sleep(0.001)
        seen.append(event)
        with guard:
            inside[0] -= 1

    def llm_call(formatted: dict) -> AssistantMessage:
        start = threading.Barrier(5)

        def writer(name: str) -> None:
            start.wait(WAIT)
            for i in range(20):
                emit_delta("text", f"{name}{i} ")

        threads = [threading.Thread(target=contextvars.copy_context().run, args=(writer, f"t{n}-")) for n in range(4)]
        for thread in threads:
            thread.start()
        writer("main-")
        for thread in threads:
            thread.join(WAIT)
        return reply_of("", "".join(e.text for e in seen if isinstance(e, LLMDeltaEvent)))

    with make_agent(llm_call, sink=slow_sink) as agent:
        run_agent(agent, "go")
        final = take_response(agent, timeout=WAIT)
    deltas = [e for e in seen if isinstance(e, LLMDeltaEvent)]
    assert overlaps[0] == 0 and len(deltas) == 100
    for name in ("main-", "t0-", "t1-", "t2-", "t3-"):  # each thread's own deltas arrive in its order
        assert [d.text for d in deltas if d.text.startswith(name)] == [f"{name}{i} " for i in range(20)]
    kinds = [type(e).__name__ for e in seen]
    assert kinds.index("LLMCallStartEvent") < kinds.index("LLMDeltaEvent") and kinds[-2:] == ["LLMCallEndEvent", "AgentRunEndEvent"]
    assert final.content[0].text == "".join(d.text for d in deltas)


def test_deltas_sent_after_llm_call_returned_are_dropped(recorder, caplog):
    """A thread the client left running emits after the call returned: dropped, like a partial result after execute,
    with a DEBUG line on yiemagent.stream saying which delta of which run and round."""
    go, emitted = threading.Event(), threading.Event()
    left_running: list[threading.Thread] = []

    def llm_call(formatted: dict) -> AssistantMessage:
        emit_delta("text", "Hi")

        def late() -> None:
            go.wait(WAIT)
            emit_delta("text", " late")
            emitted.set()

        thread = threading.Thread(target=contextvars.copy_context().run, args=(late,))
        thread.start()
        left_running.append(thread)
        return reply_of("", "Hi")

    with make_agent(llm_call, sink=recorder) as agent, caplog.at_level(logging.DEBUG, logger="yiemagent.stream"):
        run_agent(agent, "go")
        assert take_response(agent, timeout=WAIT).content[0].text == "Hi"
        go.set()
        left_running[0].join(WAIT)
    assert emitted.is_set(), "the late delta was sent (and did not raise)"
    assert deltas_of(recorder) == [(1, 1, "text", "Hi")]
    assert "a text delta of run 1 round 1 after llm_call returned was dropped" in [r.getMessage() for r in caplog.records if r.name == "yiemagent.stream"]
    assert isinstance(recorder.events[-1], AgentRunEndEvent)


def _cut_short_reply(formatted: dict) -> AssistantMessage:
    return AssistantMessage([TextContent("Hel")], stop_reason="stop")


def _raise_connection_closed(formatted: dict) -> AssistantMessage:
    raise LLMError("the stream was closed by abort")


def _complete_tool_call(formatted: dict) -> AssistantMessage:
    return tool_call_reply(("c1", "lookup", {"q": "x"}), text="Hello")


@pytest.mark.parametrize("ending", [_cut_short_reply, _raise_connection_closed, _complete_tool_call])
def test_abort_mid_stream_ends_the_run_aborted_and_keeps_the_partial_reply_out(recorder, ending, caplog):
    """Abort while a reply streams: the client sees the signal; whatever it then returns or raises is dropped (a delta
    with a DEBUG line on yiemagent.stream), no tool runs, the next run works."""
    streaming = threading.Event()
    ran: list[dict] = []
    calls = [0]

    def llm_call(formatted: dict) -> AssistantMessage:
        calls[0] += 1
        if calls[0] > 1:
            return reply_of("", "next answer")
        emit_delta("text", "Hel")
        streaming.set()
        signal = current_abort_signal()
        assert signal is not None and signal.wait(WAIT)  # a client would close its connection here
        emit_delta("text", "lo")  # already read before it noticed: dropped, the user asked to stop
        return ending(formatted)

    lookup = make_tool("lookup", lambda i, args, s, p: ran.append(args) or text_result("x"))
    with make_agent(llm_call, lookup, sink=recorder) as agent, caplog.at_level(logging.DEBUG, logger="yiemagent.stream"):
        run_agent(agent, "hello?")
        assert streaming.wait(WAIT)
        assert abort(agent, "stop typing") is True
        response = take_response(agent, timeout=WAIT)
        assert "a text delta of run 1 round 1 after the abort was dropped" in [r.getMessage() for r in caplog.records if r.name == "yiemagent.stream"]
        assert response.stop_reason == "aborted" and response.error_message == "stop typing"
        assert [type(m) for m in agent.history()] == [UserMessage]
        end = recorder.of_type(LLMCallEndEvent)[0]
        assert end.response is None and end.error == "aborted during the LLM call: stop typing"
        run_agent(agent, "again")
        assert take_response(agent, timeout=WAIT).content[0].text == "next answer"
        assert [m.role for m in agent.history()] == ["user", "user", "assistant"]
    assert ran == [] and recorder.of_type(ToolExecStartEvent) == []
    assert deltas_of(recorder) == [(1, 1, "text", "Hel")]


def test_a_stream_that_fails_midway_runs_no_tool_and_keeps_nothing(recorder):
    """Decision 14: text deltas shown, then the stream breaks: the run ends in error, no tool ran, the history holds only the user message."""
    ran: list[dict] = []

    def llm_call(formatted: dict) -> AssistantMessage:
        emit_delta("text", "I will call lookup with ")
        emit_delta("text", '{"q": "x"}')
        raise LLMError("the stream ended before the reply was complete")

    lookup = make_tool("lookup", lambda i, args, s, p: ran.append(args) or text_result("x"))
    with make_agent(llm_call, lookup, sink=recorder) as agent:
        run_agent(agent, "go")
        response = take_response(agent, timeout=WAIT)
        assert response.stop_reason == "error" and "ended before the reply was complete" in response.error_message
        assert [m.role for m in agent.history()] == ["user"]
    assert ran == [] and recorder.of_type(ToolExecStartEvent) == []
    assert [d[3] for d in deltas_of(recorder)] == ["I will call lookup with ", '{"q": "x"}']


def test_a_tool_call_runs_from_the_complete_reply_with_its_final_arguments(recorder):
    """Decision 14: only text deltas reach the sink; the tool runs once, with the arguments of the returned reply."""
    ran: list[dict] = []
    first = tool_call_reply(("c1", "lookup", {"q": "final"}), text="Checking.")
    llm = streamer(([("text", "Checking.")], first), ([("text", "Done.")], reply_of("", "Done.")))
    lookup = make_tool("lookup", lambda i, args, s, p: ran.append(args) or text_result("x"))
    with make_agent(llm, lookup, sink=recorder) as agent:
        run_agent(agent, "go")
        assert take_response(agent, timeout=WAIT).content[0].text == "Done."
    assert ran == [{"q": "final"}]
    assert [(d.kind, d.text) for d in recorder.of_type(LLMDeltaEvent)] == [("text", "Checking."), ("text", "Done.")]
    assert [type(e) for e in recorder.events].count(ToolExecEndEvent) == 1


def test_a_tool_call_delta_kind_is_refused_inside_the_call(recorder):
    """A client that tries to stream a tool call as a delta gets ValueError: the call fails, nothing reaches the sink as text."""

    def llm_call(formatted: dict) -> AssistantMessage:
        emit_delta("tool_call", '{"name": "lookup"}')
        return reply_of("", "unreachable")

    with make_agent(llm_call, sink=recorder) as agent:
        run_agent(agent, "go")
        response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "error" and "delta kind" in response.error_message
    assert recorder.of_type(LLMDeltaEvent) == [] and len(recorder.of_type(LLMCallStartEvent)) == 1
    assert len(recorder.of_type(AgentRunStartEvent)) == 1


def test_the_streaming_llm_call_of_docs_streaming_md_works_as_documented(recorder):
    """docs/streaming.md's example llm_call streams through an agent, and stops emitting once the run is aborted."""
    block = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "streaming.md").read_text(encoding="utf-8"), re.S)[0]
    namespace: dict[str, Any] = {}
    exec(block, namespace)
    with make_agent(namespace["my_streaming_llm_call"], sink=recorder) as agent:
        run_agent(agent, "what is the answer?")
        assert take_response(agent, timeout=WAIT).content[0].text == "The answer is 42."
    assert [d[3] for d in deltas_of(recorder)] == ["The answer ", "is 42."]
    signal = AbortSignal()
    signal.abort()
    seen: list[str] = []
    with stream_to(lambda kind, text: seen.append(text), signal):
        assert namespace["my_streaming_llm_call"]({}).content[0].text == ""
    assert seen == []
