"""Tool lifecycle events (spec §13, decisions 1 and 8)."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys
import threading

import pytest

from helpers import ASSISTANT, PARALLEL, ROOT, SCHEMA_CITY, SEQUENTIAL, WAIT, EventRecorder, LingeringSink, context_with, make_tool, text_result
from yiemagent import (
    AgentLoopConfig,
    AgentToolCall,
    ToolExecEndEvent,
    ToolExecStartEvent,
    ToolExecUpdateEvent,
    execute_tool_calls,
    run_agent,
    take_response,
)
from yiemagent.events import EventEmitter, as_emitter
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply



def streaming_tool(name, parts, parallel=True):
    def execute(tool_call_id, args, signal, on_partial_result):
        for part in parts:
            on_partial_result(part)
        return text_result(f"{name} done")

    return make_tool(name, execute, parallel=parallel)


@pytest.mark.spec("13")
@pytest.mark.parametrize("timeout_s", [None, 30.0], ids=["untimed", "timed"])
def test_start_updates_end_for_a_successful_call(recorder, timeout_s):
    """A call, with or without its timeout_s, emits start (with arguments), one update per partial result, then end with the result."""
    tool = streaming_tool("s", ["10%", "90%"])
    ctx = context_with(dataclasses.replace(tool, timeout_s=timeout_s))
    execute_tool_calls(ctx, ASSISTANT, [AgentToolCall("c1", "s", {"q": 1})], SEQUENTIAL, None, recorder)
    start, up1, up2, end = recorder.events
    assert start == ToolExecStartEvent("c1", "s", {"q": 1})
    assert (up1, up2) == (ToolExecUpdateEvent("c1", "s", {"q": 1}, "10%"), ToolExecUpdateEvent("c1", "s", {"q": 1}, "90%"))
    assert isinstance(end, ToolExecEndEvent) and end.result.content[0].text == "s done" and end.is_error is False


@pytest.mark.spec("13")
@pytest.mark.parametrize("mode", [SEQUENTIAL, PARALLEL])
def test_exactly_one_start_and_one_end_per_call_even_when_prepare_fails(recorder, mode):
    """Unknown tools, invalid arguments and blocked calls still get exactly one start and one end."""
    config = AgentLoopConfig(
        before_tool_call=lambda c, s: {"block": True} if c.tool_call.id == "blocked" else None, tool_execution=mode.tool_execution
    )
    ctx = context_with(make_tool("w", schema=SCHEMA_CITY, parallel=True))
    batch_calls = [
        AgentToolCall("ok", "w", {"city": "x"}),
        AgentToolCall("unknown", "nope", {}),
        AgentToolCall("invalid", "w", {}),
        AgentToolCall("blocked", "w", {"city": "y"}),
    ]
    execute_tool_calls(ctx, ASSISTANT, batch_calls, config, None, recorder)
    for call in batch_calls:
        kinds = [type(e) for e in recorder.for_call(call.id)]
        assert kinds == [ToolExecStartEvent, ToolExecEndEvent], call.id
    ends = {e.tool_call_id: e.is_error for e in recorder.of_type(ToolExecEndEvent)}
    assert ends == {"ok": False, "unknown": True, "invalid": True, "blocked": True}


@pytest.mark.spec("13")
def test_start_is_emitted_before_prepare(recorder):
    """The start event precedes the before hook (i.e. preparation) of its call."""
    order = []
    sink = lambda e: order.append(type(e).__name__)  # noqa: E731
    config = AgentLoopConfig(before_tool_call=lambda c, s: order.append("before_hook"))
    execute_tool_calls(context_with(make_tool("t")), ASSISTANT, [AgentToolCall("c", "t", {})], config, None, sink)
    assert order == ["ToolExecStartEvent", "before_hook", "ToolExecEndEvent"]


@pytest.mark.spec("13")
def test_sink_is_never_called_from_two_threads_at_once():
    """Decision 8: in a parallel batch whose tools all report at once, sink calls never overlap."""
    n = 8
    barrier = threading.Barrier(n, timeout=WAIT)
    recorder = EventRecorder()

    def execute(tool_call_id, args, signal, on_partial_result):
        barrier.wait()
        for i in range(50):
            on_partial_result(i)
        return text_result("ok")

    tool = make_tool("burst", execute, parallel=True)
    calls = [AgentToolCall(f"c{i}", "burst", {}) for i in range(n)]
    execute_tool_calls(context_with(tool), ASSISTANT, calls, PARALLEL, None, recorder)
    assert recorder.overlaps == 0
    assert len(recorder.of_type(ToolExecUpdateEvent)) == n * 50
    for call in calls:
        kinds = [type(e) for e in recorder.for_call(call.id)]
        assert kinds[0] is ToolExecStartEvent and kinds[-1] is ToolExecEndEvent
        assert set(kinds[1:-1]) == {ToolExecUpdateEvent}


@pytest.mark.spec("13")
def test_an_agents_sink_that_lingers_is_still_never_entered_by_two_tool_threads_at_once(agents):
    """Decision 8: parallel tools that report together meet in a sink that waits for them; the agent's emitter keeps them out, one at a time."""
    n = 4
    barrier = threading.Barrier(n, timeout=WAIT)

    def execute(tool_call_id, args, signal, on_partial_result):
        barrier.wait()  # every tool reports at the same moment
        on_partial_result(tool_call_id)
        return text_result("reported")

    sink = LingeringSink(ToolExecUpdateEvent, linger=1.0)
    llm = ScriptedLLM([tool_call_reply(*[(f"c{i}", "report", {}) for i in range(n)]), "all reported"])
    agent = agents(llm, [make_tool("report", execute, parallel=True)], agent_event_sink=sink, parallel_tool_execute=True)
    run_agent(agent, "report")
    assert take_response(agent, timeout=WAIT).content[0].text == "all reported"
    assert sink.overlaps == 0 and not sink.met.is_set()
    assert sorted(e.partial_result for e in sink.of_type(ToolExecUpdateEvent)) == [f"c{i}" for i in range(n)]


@pytest.mark.spec("13")
def test_raising_sink_is_logged_and_ignored(caplog):
    """Decision 8: a sink that raises is logged and the batch completes normally."""

    def sink(event):
        raise RuntimeError("sink broke")

    with caplog.at_level(logging.ERROR, logger="yiemagent.events"):
        batch = execute_tool_calls(context_with(streaming_tool("s", ["p"])), ASSISTANT, [AgentToolCall("c", "s", {})], SEQUENTIAL, None, sink)
    assert batch.messages[0].content[0].text == "s done" and not batch.messages[0].is_error
    assert "sink broke" in caplog.text
    assert caplog.records[0].getMessage() == f"event sink {sink!r} raised on ToolExecStartEvent; the event was dropped"


@pytest.mark.spec("13")
def test_an_emitter_is_not_wrapped_again():
    """as_emitter gives an EventEmitter back as it is (one lock, one log line per failure); a sink it wraps."""
    emitter = as_emitter(print)
    assert isinstance(emitter, EventEmitter) and emitter.sink is print
    assert as_emitter(emitter) is emitter


def test_stopping_one_tap_leaves_the_others_and_an_emitter_with_none_left_is_not_listened_to():
    """EventEmitter.tap's stop function takes away its own tap only: the other taps get the next events, and with no sink and no tap left ``listened`` is False."""
    emitter, first, second = EventEmitter(None), [], []
    stop_first, stop_second = emitter.tap(first.append), emitter.tap(second.append)
    emitter("one")
    stop_first()
    emitter("two")
    assert first == ["one"] and second == ["one", "two"] and emitter.listened
    stop_second()
    emitter("three")
    assert second == ["one", "two"] and not emitter.listened


def test_listened_follows_the_sink_as_it_is_set_and_taken_away_with_or_without_taps():
    """``listened`` is kept as the sink and the taps change: a sink set later, a sink taken away while a tap listens, the last tap stopped with a sink."""
    emitter, seen = EventEmitter(None), []
    assert not emitter.listened and emitter.sink is None
    emitter.sink = seen.append
    assert emitter.listened and emitter.sink == seen.append
    emitter("one")
    emitter.sink = None
    assert not emitter.listened
    emitter("dropped")
    stop = emitter.tap(seen.append)
    assert emitter.listened
    emitter.sink = None  # taking away a sink that is not there leaves the tap listening
    assert emitter.listened
    emitter.sink = print
    stop()
    assert emitter.listened  # the sink still listens
    emitter.sink = None
    assert not emitter.listened and seen == ["one"]
    with pytest.raises(AttributeError):
        emitter.listened = True  # read-only: it is what the sink and the taps make it


def test_setting_the_sink_waits_for_a_tap_being_added_so_listened_is_never_left_stale():
    """The sink's setter takes the lock ``tap`` and its stop hold while they change the taps and ``listened``.

    Without it, a setter reading the taps just before a tap lands, and writing after ``tap``
    wrote True, would leave ``listened`` False with a tap there: its events dropped. Here a
    thread sets the sink while the taps' lock is held, as by a ``tap`` in progress: it waits
    until the lock is released, and ``listened`` then reflects both.
    """
    emitter, seen = EventEmitter(None), []
    with emitter._taps_lock:  # a tap() in progress holds it
        setter = threading.Thread(target=setattr, args=(emitter, "sink", None))
        setter.start()
        setter.join(0.2)
        assert setter.is_alive()  # waiting for the lock
        emitter._taps = (seen.append,)  # what the tap in progress lands
        emitter._listened = True
    setter.join(WAIT)
    assert not setter.is_alive() and emitter.listened
    emitter("heard")
    assert seen == ["heard"]


# A process of its own (a hang is a timeout, not a stuck suite): a signal handler sets the sink
# while the main thread is inside the emitter's lock. The signal is raised from a tracer at the
# first point inside the lock where CPython runs a pending handler (the instruction after a call),
# so the handler runs exactly where a real one can land; with no such point, after the change.
_SIGNAL_DURING_A_CHANGE = """
import dis, signal, sys
from yiemagent.events import EventEmitter
setup, operation = sys.argv[1], sys.argv[2]
emitter = EventEmitter(print if "sink" in setup else None)
untap = emitter.tap(repr) if "tap" in setup else None
ran = []
signal.signal(signal.SIGUSR1, lambda *_: (setattr(emitter, "sink", ascii), ran.append(True)))
change = untap if operation == "stop the tap" else (lambda: setattr(emitter, "sink", None))
code = (untap if operation == "stop the tap" else EventEmitter.sink.fset).__code__
after_call = {i.offset for p, i in zip(dis.get_instructions(code), list(dis.get_instructions(code))[1:]) if p.opname == "CALL"}
def local(frame, event, arg):
    if event == "opcode" and frame.f_lasti in after_call and not ran and repr(emitter._taps_lock).startswith("<locked"):
        signal.raise_signal(signal.SIGUSR1)
    return local
def tracer(frame, event, arg):
    if frame.f_code is code:
        frame.f_trace_opcodes = True
        return local
    return None
sys.settrace(tracer)
change()
sys.settrace(None)
if not ran:
    signal.raise_signal(signal.SIGUSR1)
print(emitter.sink is ascii, emitter.listened, bool(emitter._taps))
"""


@pytest.mark.parametrize("setup, operation", [("tap", "stop the tap"), ("sink and tap", "stop the tap"), ("sink", "take the sink away")])
def test_a_signal_handler_that_sets_the_sink_during_a_change_of_the_sink_or_taps_neither_hangs_nor_leaves_listened_stale(setup, operation):
    """A signal handler setting the sink while the main thread holds the emitter's lock (stopping a tap, taking the sink away) returns, and ``listened`` then says the handler's sink listens."""
    done = subprocess.run([sys.executable, "-c", _SIGNAL_DURING_A_CHANGE, setup, operation], capture_output=True, text=True, timeout=WAIT, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "False"], done.stdout


@pytest.mark.spec("13")
def test_on_partial_result_answers_true_for_a_report_that_was_emitted(recorder):
    """A tool learns that its report reached the sink: on_partial_result returns True while execute runs (False once the call has ended, below)."""
    answers = []

    def execute(tool_call_id, args, signal, on_partial_result):
        answers.append(on_partial_result("half way"))
        return text_result("ok")

    execute_tool_calls(context_with(make_tool("t", execute)), ASSISTANT, [AgentToolCall("c", "t", {})], SEQUENTIAL, None, recorder)
    assert answers == [True]
    assert recorder.of_type(ToolExecUpdateEvent) == [ToolExecUpdateEvent("c", "t", {}, "half way")]


@pytest.mark.spec("13")
def test_partial_results_after_execute_returned_are_dropped(recorder, caplog):
    """Decision 8: a partial result reported after execute returned never reaches the sink; a DEBUG line says so."""
    saved = []

    def execute(tool_call_id, args, signal, on_partial_result):
        saved.append(on_partial_result)
        return text_result("ok")

    execute_tool_calls(context_with(make_tool("t", execute)), ASSISTANT, [AgentToolCall("c", "t", {})], SEQUENTIAL, None, recorder)
    with caplog.at_level(logging.DEBUG, logger="yiemagent.pipeline"):
        assert saved[0]("too late") is False
    assert [type(e) for e in recorder.events] == [ToolExecStartEvent, ToolExecEndEvent]
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("yiemagent.pipeline", "DEBUG", "partial result of 'c' after its end was dropped")
    ]
