"""Per-tool timeout (AgentTool.timeout_s, beyond the spec; shared/spec/API.md)."""

from __future__ import annotations

import threading

import pytest

from helpers import ASSISTANT, PARALLEL, SEQUENTIAL, EventRecorder, context_with, make_tool, text_result
from yiemagent import AbortSignal, AgentToolCall, ToolExecUpdateEvent, execute_tool_calls

WAIT = 10


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
