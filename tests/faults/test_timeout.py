"""Per-tool timeout (AgentTool.timeout_s, beyond the spec; shared/spec/API.md)."""

from __future__ import annotations

import threading

import pytest

from helpers import ASSISTANT, PARALLEL, SEQUENTIAL, WAIT, EventRecorder, context_with, make_tool, text_result
from yiemagent import (
    AbortSignal,
    AgentToolCall,
    ExecutedOutcome,
    PreparedToolCall,
    ToolExecUpdateEvent,
    create_error_tool_result,
    execute_prepared_tool_call,
    execute_tool_calls,
)



@pytest.mark.spec("8.2")
@pytest.mark.parametrize("mode", [SEQUENTIAL, PARALLEL])
def test_overrunning_tool_becomes_an_error_naming_the_limit_and_its_signal_fires(mode):
    """A call past timeout_s is an error result naming the limit; its signal fires; the batch goes on."""
    saw_abort = threading.Event()

    def slow(tool_call_id, args, signal, on_partial_result):
        if signal.wait(WAIT):  # a cooperative tool: stops as soon as its signal fires
            saw_abort.set()
        return text_result("finished anyway")

    ctx = context_with(make_tool("slow", slow, timeout_s=0.05, parallel=True), make_tool("fast", parallel=True))
    batch_signal = AbortSignal()
    batch = execute_tool_calls(ctx, ASSISTANT, [AgentToolCall("a", "slow", {}), AgentToolCall("b", "fast", {})], mode, batch_signal, None)
    first, second = batch.messages
    assert first.is_error and "timed out after 0.05 s" in first.content[0].text and "timeout_s" in first.content[0].text
    assert not second.is_error
    assert saw_abort.wait(WAIT)
    assert not batch_signal.aborted, "a timeout stops that tool alone, not the batch"


@pytest.mark.spec("8.2")
def test_abandoned_tool_cannot_emit_after_its_end():
    """Partial results of a timed-out tool that keeps running are dropped."""
    release = threading.Event()
    done = threading.Event()

    def stubborn(tool_call_id, args, signal, on_partial_result):
        release.wait(WAIT)  # ignores its signal
        on_partial_result("late")
        done.set()
        return text_result("late result")

    recorder = EventRecorder()
    ctx = context_with(make_tool("stubborn", stubborn, timeout_s=0.05))
    batch = execute_tool_calls(ctx, ASSISTANT, [AgentToolCall("a", "stubborn", {})], SEQUENTIAL, None, recorder)
    release.set()
    assert done.wait(WAIT)
    assert batch.messages[0].is_error
    assert recorder.of_type(ToolExecUpdateEvent) == []


@pytest.mark.spec("8.2")
def test_tool_within_its_timeout_returns_normally():
    """A tool that finishes in time gives its own result, and its exceptions are still caught."""
    ctx = context_with(make_tool("quick", timeout_s=5), make_tool("bad", lambda *a: 1 / 0, timeout_s=5))
    batch = execute_tool_calls(ctx, ASSISTANT, [AgentToolCall("a", "quick", {}), AgentToolCall("b", "bad", {})], SEQUENTIAL, None, None)
    assert batch.messages[0].content[0].text == "quick:[]"
    assert batch.messages[1].is_error and "ZeroDivisionError" in batch.messages[1].content[0].text


@pytest.mark.spec("8.2")
def test_batch_abort_reaches_a_tool_with_a_timeout():
    """The per-call signal of a timed tool is a child of the batch signal: an abort reaches it."""
    started = threading.Event()
    stopped = threading.Event()

    def waits(tool_call_id, args, signal, on_partial_result):
        started.set()
        if signal.wait(WAIT):
            stopped.set()
        return text_result("stopped")

    signal = AbortSignal()
    ctx = context_with(make_tool("waits", waits, timeout_s=WAIT))
    worker = threading.Thread(
        target=execute_tool_calls, args=(ctx, ASSISTANT, [AgentToolCall("a", "waits", {})], SEQUENTIAL, signal, None)
    )
    worker.start()
    assert started.wait(WAIT)
    signal.abort()
    assert stopped.wait(WAIT)
    worker.join(WAIT)
    assert not worker.is_alive()


def timed(name, execute, timeout_s):
    tool = make_tool(name, execute, timeout_s=timeout_s)
    return PreparedToolCall(tool, AgentToolCall("call_1", name, {"a": 1}), {"a": 1})


@pytest.mark.spec("8.2")
def test_timed_tool_runs_on_its_own_named_daemon_thread_with_the_calls_id_and_args():
    """A tool with timeout_s gets the call id and args like any tool, on a daemon thread named after it."""
    seen = []

    def execute(tool_call_id, args, signal, on_partial_result):
        me = threading.current_thread()
        seen.append((tool_call_id, args, me.name, me.daemon, me is threading.main_thread()))
        return text_result("ok")

    outcome = execute_prepared_tool_call(timed("clock", execute, WAIT), None, None)
    assert outcome == ExecutedOutcome(text_result("ok"), False)
    assert seen == [("call_1", {"a": 1}, "yiemagent-tool-clock-timed", True, False)]


@pytest.mark.spec("8.2")
def test_timeout_error_text_and_the_reason_its_signal_gives():
    """The exact text the model reads, and the reason the tool's own signal carries when it fires."""
    reasons = []
    stopped = threading.Event()

    def slow(tool_call_id, args, signal, on_partial_result):
        if signal.wait(WAIT):
            reasons.append(signal.reason)
        stopped.set()
        return text_result("finished anyway")

    outcome = execute_prepared_tool_call(timed("slow", slow, 0.05), None, None)
    assert outcome == ExecutedOutcome(
        create_error_tool_result(
            "Tool 'slow' timed out after 0.05 s (its timeout_s limit); it was asked to stop and its result will be ignored"
        ),
        True,
    )
    assert stopped.wait(WAIT)
    assert reasons == ["tool 'slow' timed out after 0.05 s"]


@pytest.mark.spec("8.2")
def test_abort_while_a_timed_tool_ignores_it_ends_the_call_at_once_as_aborted():
    """The run's abort ends the wait for a timed tool that does not stop: the call is an "Operation aborted" error."""
    batch_signal = AbortSignal()
    release = threading.Event()
    done = threading.Event()

    def stubborn(tool_call_id, args, signal, on_partial_result):
        batch_signal.abort()  # the run is aborted while this tool runs; the tool ignores it
        release.wait(WAIT)
        done.set()
        return text_result("late")

    outcome = execute_prepared_tool_call(timed("stubborn", stubborn, WAIT), batch_signal, None)
    release.set()
    assert outcome == ExecutedOutcome(create_error_tool_result("Operation aborted"), True)
    assert done.wait(WAIT)


@pytest.mark.spec("8.2")
def test_a_finished_timed_calls_signal_is_no_longer_tied_to_the_batch_signal():
    """Once a timed call is over, the batch signal forgets that call's signal: a later abort does not reach it."""
    kept = []

    def keeps_its_signal(tool_call_id, args, signal, on_partial_result):
        kept.append(signal)
        return text_result("ok")

    batch_signal = AbortSignal()
    assert not execute_prepared_tool_call(timed("k", keeps_its_signal, WAIT), batch_signal, None).is_error
    batch_signal.abort()
    assert kept[0] is not batch_signal and not kept[0].aborted


@pytest.mark.spec("12")
def test_keyboard_interrupt_from_a_timed_tool_propagates_in_the_main_thread():
    """As for a tool without timeout_s: Ctrl-C raised in the tool reaches a main-thread caller (docs/failures.md)."""

    def interrupted(*args):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        execute_prepared_tool_call(timed("stop", interrupted, WAIT), None, None)
