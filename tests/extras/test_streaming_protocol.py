"""The side channel a streaming llm_call uses (yiemagent.events, also yiemagent.streaming) and AbortSignal.on_abort."""

from __future__ import annotations

import contextvars
import threading

import pytest

from yiemagent import AbortSignal
from yiemagent.events import current_abort_signal, current_stream, emit_delta, stream_to


def test_emit_delta_without_a_listener_does_nothing():
    """A client may always call emit_delta: with no stream_to around the call it is a no-op."""
    assert current_stream() is None
    emit_delta("text", "ignored")
    assert current_abort_signal() is None


def test_deltas_reach_the_target_of_the_enclosing_block_only():
    """Inside stream_to the deltas reach on_delta in order; after the block they do not; empty text is skipped."""
    seen: list[tuple[str, str]] = []
    signal = AbortSignal()
    with stream_to(lambda kind, text: seen.append((kind, text)), signal):
        emit_delta("thinking", "hm")
        emit_delta("text", "")
        emit_delta("text", "Hi")
        assert current_abort_signal() is signal
    emit_delta("text", "late")
    assert seen == [("thinking", "hm"), ("text", "Hi")]


def test_unknown_delta_kind_is_refused():
    """Only "text" and "thinking" deltas exist."""
    with stream_to(lambda kind, text: None):
        with pytest.raises(ValueError, match="tool"):
            emit_delta("tool", "{}")


def test_another_thread_does_not_see_the_target_unless_the_context_is_copied():
    """Two agents streaming in two threads never share a target; copy_context carries it along."""
    seen: list[str] = []
    with stream_to(lambda kind, text: seen.append(text)):
        plain = threading.Thread(target=emit_delta, args=("text", "lost"))
        plain.start()
        plain.join()
        context = contextvars.copy_context()
        carried = threading.Thread(target=context.run, args=(emit_delta, "text", "kept"))
        carried.start()
        carried.join()
    assert seen == ["kept"]


def test_on_abort_runs_once_in_the_aborting_thread_and_can_be_unregistered():
    """on_abort's callback fires once on abort; an unregistered one never fires; late registration fires at once."""
    signal = AbortSignal()
    fired: list[str] = []
    signal.on_abort(lambda: fired.append("a"))
    forget = signal.on_abort(lambda: fired.append("b"))
    forget()
    signal.abort("stop")
    signal.abort("again")
    assert fired == ["a"]
    signal.on_abort(lambda: fired.append("late"))
    assert fired == ["a", "late"]


def test_a_raising_abort_callback_does_not_stop_the_others(caplog):
    """A callback that raises is logged; the signal still fires and later callbacks still run."""
    signal = AbortSignal()
    fired: list[int] = []

    def broken() -> None:
        raise RuntimeError("boom")

    signal.on_abort(broken)
    signal.on_abort(lambda: fired.append(1))
    signal.abort()
    assert signal.aborted and fired == [1]
    assert "boom" in caplog.text


def test_child_signal_callbacks_fire_when_the_parent_aborts():
    """A child's on_abort callback fires when its parent is aborted (abort reaches a tool's timeout child)."""
    parent = AbortSignal()
    child = parent.child()
    fired = threading.Event()
    child.on_abort(fired.set)
    parent.abort()
    assert fired.is_set()
