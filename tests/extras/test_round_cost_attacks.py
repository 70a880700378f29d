"""A cheaper round keeps its promises under attack (docs/performance.md "W1"; spec §6, §9, §13).

What a round no longer does when nobody listens, the flag ``AbortSignal.aborted`` reads, and
a parallel batch of one call run in the calling thread: each held to what the round did
before, with a sink set mid-round, a thread paused inside ``abort``, and hung tools.
"""

from __future__ import annotations

import contextvars
import linecache
import logging
import sys
import threading

import pytest

from helpers import WAIT
from yiemagent import AbortSignal, AgentTool, AgentToolResult, AssistantMessage, TextContent, YiemAgent, run_agent, shutdown, take_response
from yiemagent.events import EventEmitter, LLMCallEndEvent, LLMDeltaEvent, relay_deltas
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.streaming import current_abort_signal, current_stream, emit_delta


def _pause_inside_abort_at(marker: str, reached: threading.Event, go_on: threading.Event, code=AbortSignal.abort.__code__):
    """A trace function that stops the thread running ``AbortSignal.abort`` (or ``code``) just before its line holding ``marker``."""
    return _pause_in(code, lambda frame, lines: marker in linecache.getline(frame.f_code.co_filename, frame.f_lineno), reached, go_on)


def _pause_in(code, at, reached: threading.Event, go_on: threading.Event):
    """A trace function that stops the thread running ``code`` before each line for which ``at(frame, lines run so far)`` is true, until ``go_on``."""
    lines: list = []

    def local(frame, event, arg):
        if event == "line":
            lines.append(frame.f_lineno)
            if at(frame, len(lines) - 1):
                reached.set()
                go_on.wait(WAIT)
        return local

    def calls(frame, event, arg):
        return local if frame.f_code is code else None

    return calls


def test_wait_returns_true_once_aborted_reads_true_in_another_thread():
    """A thread that finds ``aborted`` true gets True from ``wait(0)`` too, though the aborting thread has not yet set the event."""
    signal = AbortSignal()
    reached, go_on = threading.Event(), threading.Event()

    def aborter():
        sys.settrace(_pause_inside_abort_at("if self._event is not None:", reached, go_on))
        try:
            signal.abort("stop")
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=aborter, daemon=True)
    thread.start()
    try:
        assert reached.wait(WAIT)
        seen = (signal.aborted, signal.wait(0), signal.reason)
    finally:
        go_on.set()
        thread.join(WAIT)
    assert seen == (True, True, "stop")


def test_a_wait_that_read_the_flag_just_before_the_abort_returns_true():
    """A thread in ``wait`` that read the flag false, then lost the race to a whole ``abort`` (which found no event to set), reads it again under the lock: True, not its timeout."""
    signal = AbortSignal()
    reached, go_on, answers = threading.Event(), threading.Event(), []

    def waiter():
        sys.settrace(_pause_inside_abort_at("with self._lock:", reached, go_on, code=AbortSignal.wait.__code__))
        try:
            answers.append(signal.wait(WAIT))
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    try:
        assert reached.wait(WAIT)  # the waiter read the flag false and has not taken the lock
        signal.abort("stop")
    finally:
        go_on.set()
    thread.join(WAIT)
    assert answers == [True]


def test_two_threads_blocked_in_wait_are_both_woken_by_one_abort():
    """Two threads in ``wait`` block on the one event the first of them made, so one ``abort`` wakes both: neither is left to its timeout."""
    signal = AbortSignal()
    reached, go_on, answers = (threading.Event(), threading.Event()), threading.Event(), []

    def waiter(n):
        sys.settrace(_pause_inside_abort_at("return event.wait(timeout)", reached[n], go_on, code=AbortSignal.wait.__code__))
        try:
            answers.append(signal.wait(WAIT))
        finally:
            sys.settrace(None)

    threads = [threading.Thread(target=waiter, args=(n,), daemon=True) for n in (0, 1)]
    try:
        for thread, its_event_taken in zip(threads, reached, strict=True):
            thread.start()
            assert its_event_taken.wait(WAIT)  # the waiter holds the event it will block on
        signal.abort("stop")
    finally:
        go_on.set()
    for thread in threads:
        thread.join(2 * WAIT)
    assert answers == [True, True]


def test_a_sink_set_during_a_round_nobody_listened_to_gets_the_rest_of_its_deltas():
    """A sink set while the LLM call of a round that began unheard is streaming receives the deltas that come after, as a relay would give them."""
    received: list = []
    agent_box: list = []

    def llm_call(formatted):
        emit_delta("text", "before anyone listens ")
        agent_box[0].agent_event_sink = received.append  # the caller sets a sink mid-round
        emit_delta("text", "after")
        return AssistantMessage([TextContent("before anyone listens after")], stop_reason="stop")

    with YiemAgent(llm_call=llm_call, agent_event_sink=None) as agent:
        agent_box.append(agent)
        run_agent(agent, "hi")
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
    deltas = [(e.kind, e.text) for e in received if isinstance(e, LLMDeltaEvent)]
    assert deltas == [("text", "after")]


def test_a_delta_of_a_round_that_began_unheard_never_comes_after_its_end_event(caplog):
    """A delta emitted by a thread the LLM call left running, after the call returned, is dropped even once a sink listens
    (as a relay closed at the round's end drops it), and the drop is logged naming the delta's kind, run and round."""
    received: list = []
    agent_box: list = []
    late: list = []

    def llm_call(formatted):
        context = contextvars.copy_context()
        late.append(lambda: context.run(emit_delta, "text", "too late"))
        return AssistantMessage([TextContent("done")], stop_reason="stop")

    with YiemAgent(llm_call=llm_call, agent_event_sink=None) as agent:
        agent_box.append(agent)
        run_agent(agent, "hi")
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
        agent.agent_event_sink = received.append
        with caplog.at_level(logging.DEBUG, logger="yiemagent.stream"):
            late[0]()
    assert [e for e in received if isinstance(e, LLMDeltaEvent)] == []
    assert [r.getMessage() for r in caplog.records if r.name == "yiemagent.stream"] == ["a text delta of run 1 round 1 after llm_call returned was dropped"]


_SET_BY_SINK: contextvars.ContextVar = contextvars.ContextVar("set_by_sink", default=None)


def test_a_relay_made_mid_round_gives_the_rest_of_the_rounds_deltas_as_one_made_at_its_start():
    """A round that began unheard and got a sink mid-round: its later deltas carry the round's run and round, reach the sink
    in one context kept for the round, stop at the abort, and the round's target is gone after its end."""
    found: list = []
    emit, signal = EventEmitter(None), AbortSignal()

    def sink(event):
        if isinstance(event, LLMDeltaEvent):
            found.append((event.run_id, event.round, event.text, _SET_BY_SINK.get()))
            _SET_BY_SINK.set(event.text)

    with relay_deltas(emit, 3, 2, signal):
        emit_delta("text", "unheard")
        emit.sink = sink
        emit_delta("text", "one")
        emit_delta("text", "two")
        signal.abort("stop")
        emit_delta("text", "after the abort")
    assert found == [(3, 2, "one", None), (3, 2, "two", "one")]
    assert current_stream() is None


def _delta_paused_at(line: str, context: contextvars.Context, text: str) -> tuple[threading.Thread, threading.Event, threading.Event]:
    """A thread emitting the delta ``text`` in ``context`` (the call's, as a thread the LLM call started carries it),
    paused at ``line`` of ``relay_deltas.__call__`` until ``go_on`` is set; ``reached`` is set once it is there."""
    reached, go_on = threading.Event(), threading.Event()

    def delta() -> None:
        sys.settrace(_pause_inside_abort_at(line, reached, go_on, relay_deltas.__call__.__code__))
        try:
            context.run(emit_delta, "text", text)
        finally:
            sys.settrace(None)

    worker = threading.Thread(target=delta)
    worker.start()
    return worker, reached, go_on


def test_an_unheard_round_ends_without_waiting_for_a_late_relay_and_drops_the_delta_it_did_not_see():
    """The end of a round that began unheard, coming while a late delta makes its relay, takes no lock, and that delta never reaches the sink after the end."""
    received: list = []
    emit = EventEmitter(None)
    block = relay_deltas(emit, 1, 1)
    block.__enter__()
    context = contextvars.copy_context()  # the call's context, as a thread the LLM call started carries it
    emit.sink = received.append  # a sink set mid-round: the late delta makes the round's relay
    worker, reached, go_on = _delta_paused_at("relay = self._relay = DeltaRelay(", context, "late")
    assert reached.wait(WAIT)  # it saw the round still on and no relay yet, and is about to make one
    block.__exit__(None, None, None)  # the round ends now: a lock shared with the maker would hold it here
    go_on.set()
    worker.join(WAIT)
    assert not worker.is_alive()
    assert [e for e in received if isinstance(e, LLMDeltaEvent)] == []


def test_two_first_deltas_that_race_make_one_relay_so_the_sink_keeps_one_context_for_the_round():
    """A delta that found no relay yet and waits for the lock while another thread's delta makes it goes through that relay:
    one relay a round, so the sink sees the round's one context (what it set at the first delta, at the second)."""
    found: list = []

    def sink(event):
        if isinstance(event, LLMDeltaEvent):
            found.append((event.text, _SET_BY_SINK.get()))
            _SET_BY_SINK.set(event.text)

    block = relay_deltas(EventEmitter(sink), 1, 1)
    block.__enter__()
    try:
        context = contextvars.copy_context()  # the call's context, as a thread the LLM call started carries it
        worker, reached, go_on = _delta_paused_at("with _late_relays:", context, "waited")
        assert reached.wait(WAIT)  # it found no relay and is about to take the lock
        emit_delta("text", "made the relay")
        go_on.set()
        worker.join(WAIT)
        assert not worker.is_alive()
    finally:
        block.__exit__(None, None, None)
    assert found == [("made the relay", None), ("waited", "made the relay")]


def test_a_target_first_asked_for_from_a_copy_of_an_ended_rounds_context_is_that_rounds_and_drops_its_deltas(caplog):
    """A thread carrying a copy of round 1's context that asks for the stream only during round 2, or after the run, gets round 1's
    target (a StreamTarget with the run's signal, refusing an unknown kind): its deltas reach no round and the sink never."""
    from yiemagent.events import StreamTarget

    received: list = []
    copied: list = []
    late: list = []

    def ask_late():
        target = copied[0].run(current_stream)
        late.append(target)
        target.emit("text", "late")
        copied[0].run(emit_delta, "thinking", "later")
        with pytest.raises(ValueError):
            target.emit("tool_call", "x")

    def llm_call(formatted):
        if not copied:  # round 1 copies its context and never asks for its stream
            copied.append(contextvars.copy_context())
            return tool_call_reply(("c1", "noop", "{}"))
        asker = threading.Thread(target=ask_late)  # round 2: round 1's copy asks now, from a plain thread
        asker.start()
        asker.join(WAIT)
        emit_delta("text", "two")
        late.append(current_abort_signal())
        return AssistantMessage([TextContent("two")], stop_reason="stop")

    noop = AgentTool("noop", "Noop", "does nothing", {"type": "object"}, lambda *a: AgentToolResult([TextContent("ok")]))
    with YiemAgent(llm_call=llm_call, tools=[noop], agent_event_sink=received.append) as agent, caplog.at_level(logging.DEBUG, logger="yiemagent.stream"):
        run_agent(agent, "hi")
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
        ask_late()  # and once more after the run
    target, run_signal, again = late
    assert type(target) is StreamTarget and target.signal is run_signal and run_signal is not None and again is target
    assert [(e.round, e.text) for e in received if isinstance(e, LLMDeltaEvent)] == [(2, "two")]
    dropped = [r.getMessage() for r in caplog.records if r.name == "yiemagent.stream"]
    assert dropped == ["a text delta of run 1 round 1 after llm_call returned was dropped", "a thinking delta of run 1 round 1 after llm_call returned was dropped"] * 2


def test_a_target_asked_for_while_nobody_listened_carried_into_a_plain_thread_gets_the_rest_of_its_round_and_closes_with_it():
    """A target taken before anyone listens and carried into a thread without the call's context: its deltas reach a sink set
    mid-round, as the round's and before its end event, and a delta from it after the round ended is dropped."""
    received: list = []
    agent_box: list = []
    carried: list = []

    def llm_call(formatted):
        target = current_stream()  # nobody listens yet
        carried.append(target)
        agent_box[0].agent_event_sink = received.append  # a sink set mid-round
        emitter = threading.Thread(target=target.emit, args=("text", "after the sink"))
        emitter.start()
        emitter.join(WAIT)
        return AssistantMessage([TextContent("after the sink")], stop_reason="stop")

    with YiemAgent(llm_call=llm_call, agent_event_sink=None) as agent:
        agent_box.append(agent)
        run_agent(agent, "hi")
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
        emitter = threading.Thread(target=carried[0].emit, args=("text", "after the end"))
        emitter.start()
        emitter.join(WAIT)
    kinds = [(type(e).__name__, getattr(e, "text", None)) for e in received if isinstance(e, (LLMDeltaEvent, LLMCallEndEvent))]
    assert kinds == [("LLMDeltaEvent", "after the sink"), ("LLMCallEndEvent", None)]
    assert [(e.run_id, e.round) for e in received if isinstance(e, LLMDeltaEvent)] == [(1, 1)]


def test_a_tools_own_llm_call_after_the_round_finds_no_stream_and_streams_nothing_into_the_run():
    """A tool run in the batch after the round is outside the round's stream: no target, no abort signal, its deltas go nowhere."""
    received: list = []
    seen: list = []

    def tools_llm_call():
        seen.append((current_stream(), current_abort_signal()))
        emit_delta("text", "the tool's own")

    def execute(tool_call_id, args, signal, on_partial_result):
        tools_llm_call()
        return AgentToolResult([TextContent("ok")])

    def llm_call(formatted):
        emit_delta("text", "round")
        current_stream()
        return AssistantMessage([TextContent("round")], stop_reason="stop") if seen else tool_call_reply(("c1", "asker", "{}"), text="round")

    asker = AgentTool("asker", "Asker", "makes an LLM call of its own", {"type": "object"}, execute)
    with YiemAgent(llm_call=llm_call, tools=[asker], agent_event_sink=received.append) as agent:
        run_agent(agent, "hi")
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
    assert seen == [(None, None)]
    assert [(e.round, e.text) for e in received if isinstance(e, LLMDeltaEvent)] == [(1, "round"), (2, "round")]


@pytest.mark.parametrize("calls", [1, 2])
@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("call", ["wait_until_idle", "take_response"])
def test_a_tool_that_waits_for_its_own_agent_gets_an_error_naming_why_not_a_wait_for_ever(parallel, call, calls):
    """A tool (alone in its batch in the run thread, or beside another on the pool's threads) that waits for its own agent to be idle, or for its own run's response, gets a RuntimeError naming why, and the run goes on."""
    agent_box: list = []
    errors: list = []

    def execute(tool_call_id, args, signal, on_partial_result):
        agent = agent_box[0]
        try:
            agent.wait_until_idle() if call == "wait_until_idle" else take_response(agent)
        except RuntimeError as exc:
            errors.append(str(exc))
        return AgentToolResult([TextContent("ok")])

    waiter = AgentTool("waiter", "Waiter", "waits for its agent", {"type": "object"}, execute, parallel_tool_execute=True)
    llm = ScriptedLLM([tool_call_reply(*[(f"w{i}", "waiter", "{}") for i in range(1, calls + 1)]), "done"])
    agent = YiemAgent(llm_call=llm, tools=[waiter], agent_event_sink=None, parallel_tool_execute=parallel)
    agent_box.append(agent)
    try:
        run_agent(agent, "go")
        response = take_response(agent, timeout=WAIT)
    finally:
        shutdown(agent, timeout=1)  # bounded: a run stuck waiting for itself is left on its daemon thread
    assert response.stop_reason == "stop"
    assert len(errors) == calls
    assert all(call in error and "own run" in error for error in errors)


@pytest.mark.parametrize("calls", [1, 2])
@pytest.mark.parametrize("ending", ["timeout", "abort"])
def test_a_parallel_batch_of_a_hung_tool_ends_at_its_timeout_or_at_an_abort(calls, ending):
    """A tool that ignores its signal, alone in a parallel batch (run in the calling thread) or beside another, is ended by its timeout_s or by an abort, as a pool-run batch ends it."""
    from helpers import ASSISTANT, PARALLEL, context_with, make_tool, text_result
    from yiemagent import AgentToolCall, execute_tool_calls

    release, started = threading.Event(), threading.Event()

    def stubborn(tool_call_id, args, signal, on_partial_result):
        started.set()
        release.wait(WAIT)  # ignores its signal
        return text_result("late")

    timeout_s = 0.2 if ending == "timeout" else WAIT
    ctx = context_with(make_tool("stubborn", stubborn, timeout_s=timeout_s, parallel=True), make_tool("fast", parallel=True))
    tool_calls = [AgentToolCall("a", "stubborn", {})] + ([AgentToolCall("b", "fast", {})] if calls == 2 else [])
    signal = AbortSignal()
    if ending == "abort":
        threading.Thread(target=lambda: started.wait(WAIT) and signal.abort("stop"), daemon=True).start()
    try:
        batch = execute_tool_calls(ctx, ASSISTANT, tool_calls, PARALLEL, signal, None)
    finally:
        release.set()
    first = batch.messages[0]
    expected = "timed out after 0.2 s" if ending == "timeout" else "Operation aborted"
    assert first.is_error and expected in first.content[0].text
    assert len(batch.messages) == calls


# --- the partial-result reporter's lock, made by a call's first report (pipeline._PartialResultReporter) ---


def _reporter(sink):
    """A call's reporter whose events go to ``sink``, as ``call_tool`` makes it."""
    from yiemagent.pipeline import _PartialResultReporter
    from yiemagent.types import AgentToolCall

    return _PartialResultReporter(EventEmitter(sink), AgentToolCall("c1", "t", {}), {})


def _run_in_thread(target, *args) -> threading.Thread:
    worker = threading.Thread(target=target, args=args)
    worker.start()
    return worker


def _close_paused_after_its_first_line(reporter, reached: threading.Event, go_on: threading.Event, order: list) -> None:
    """``reporter.close()``, stopped once its first line has run until ``go_on``; "closed" added to ``order`` once it returned."""
    sys.settrace(_pause_in(type(reporter).close.__code__, lambda frame, lines: lines == 1, reached, go_on))
    try:
        reporter.close()
    finally:
        sys.settrace(None)
    order.append("closed")


def test_close_waits_for_a_report_being_emitted_and_every_later_report_is_dropped():
    """Decision 8: a report already in the sink when close() is called is delivered before close returns; a report after it returns False and emits nothing."""
    order: list = []
    entered, release = threading.Event(), threading.Event()

    def sink(event):
        entered.set()
        release.wait(WAIT)  # the report is being emitted while close is called
        order.append("update delivered")

    reporter = _reporter(sink)
    answers: list = []
    reporting = _run_in_thread(lambda: answers.append(reporter("half way")))
    assert entered.wait(WAIT)
    closing = _run_in_thread(lambda: (reporter.close(), order.append("closed")))
    closing.join(0.2)  # a close that does not wait for the report returns meanwhile
    release.set()
    for worker in (reporting, closing):
        worker.join(WAIT)
        assert not worker.is_alive()
    assert order == ["update delivered", "closed"] and answers == [True]
    assert reporter("too late") is False and order == ["update delivered", "closed"]


def test_a_first_report_racing_close_is_dropped_or_delivered_before_close_returns():
    """A call's first report made while close() is half done (its flag set, its lock not yet read) is dropped: no event reaches the sink after close returned."""
    order: list = []
    reached, go_on, progressed, release = threading.Event(), threading.Event(), threading.Event(), threading.Event()

    def sink(event):
        progressed.set()
        release.wait(WAIT)
        order.append("update delivered")

    reporter = _reporter(sink)

    answers: list = []
    closing = _run_in_thread(_close_paused_after_its_first_line, reporter, reached, go_on, order)
    assert reached.wait(WAIT)  # close has done its first step and not its second
    reporting = _run_in_thread(lambda: (answers.append(reporter("racing")), progressed.set()))
    progressed.wait(WAIT)  # the report was dropped, or is in the sink (or waits for a lock close holds, till WAIT)
    go_on.set()
    closing.join(0.2)  # a close that did not see the report's lock returns meanwhile
    release.set()
    for worker in (reporting, closing):
        worker.join(WAIT)
        assert not worker.is_alive()
    assert answers == [False] and order == ["closed"]


def test_two_first_reports_racing_make_one_lock_and_close_waits_for_the_one_in_the_sink():
    """Two reports that both found no lock make one between them: close, whichever report stored it, waits for the report still in the sink."""
    order: list = []
    in_sink, release = threading.Event(), threading.Event()
    b_read, b_go_on, c_reached, c_go_on = threading.Event(), threading.Event(), threading.Event(), threading.Event()

    def sink(event):
        if event.partial_result == "a":
            in_sink.set()
            release.wait(WAIT)
            order.append("update delivered")

    reporter = _reporter(sink)

    def report_b():  # found no lock, and stops before making one
        sys.settrace(_pause_inside_abort_at("with _first_reports:", b_read, b_go_on, type(reporter).__call__.__code__))
        try:
            reporter("b")
        finally:
            sys.settrace(None)

    b = _run_in_thread(report_b)
    assert b_read.wait(WAIT)
    a = _run_in_thread(reporter, "a")  # makes the lock, and is in the sink
    assert in_sink.wait(WAIT)
    c = _run_in_thread(_close_paused_after_its_first_line, reporter, c_reached, c_go_on, order)
    assert c_reached.wait(WAIT)  # the flag is set, the lock not read yet
    b_go_on.set()
    b.join(0.2)  # a report making a lock of its own returns meanwhile, dropped
    c_go_on.set()
    c.join(0.2)  # a close that reads that other lock returns meanwhile
    release.set()
    for worker in (a, b, c):
        worker.join(WAIT)
        assert not worker.is_alive()
    assert order == ["update delivered", "closed"]
