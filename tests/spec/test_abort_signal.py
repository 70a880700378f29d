"""AbortSignal (spec §19 ``abortSignal``): its reason, its children, its callbacks and ``wait``."""

from __future__ import annotations

import logging
import threading

import pytest

from helpers import WAIT
from yiemagent import AbortSignal


@pytest.mark.spec("19")
def test_a_signal_carries_the_reason_it_was_aborted_with_and_none_before():
    """``reason`` is None until the signal fires, then the reason given (None when none was); a second abort changes nothing."""
    signal = AbortSignal()
    assert (signal.aborted, signal.reason) == (False, None)
    signal.abort("user pressed stop")
    signal.abort("later")
    assert (signal.aborted, signal.reason) == (True, "user pressed stop")
    quiet = AbortSignal()
    quiet.abort()
    assert (quiet.aborted, quiet.reason) == (True, None)


@pytest.mark.spec("19")
def test_a_child_gets_its_parents_reason_whether_made_before_or_after_the_abort():
    """A child fires with the parent's reason: when the parent aborts later, and at once when it had already aborted."""
    parent = AbortSignal()
    before = parent.child()
    parent.abort("timeout of the run")
    after = parent.child()
    assert (before.aborted, before.reason) == (True, "timeout of the run")
    assert (after.aborted, after.reason) == (True, "timeout of the run")


@pytest.mark.spec("19")
def test_on_abort_on_a_fired_signal_calls_the_callback_at_once():
    """A callback registered after the signal fired is called at once, in the caller's thread; what it returns unregisters nothing and returns None."""
    signal = AbortSignal()
    signal.abort()
    fired = []
    unregister = signal.on_abort(lambda: fired.append("now"))
    assert fired == ["now"]
    assert unregister() is None
    assert fired == ["now"]


@pytest.mark.spec("19")
def test_an_unregistered_callback_is_not_called_when_the_signal_fires():
    """The function on_abort returns unregisters the callback: abort() then calls only the callbacks still registered."""
    signal = AbortSignal()
    fired = []
    forget_a = signal.on_abort(lambda: fired.append("a"))
    signal.on_abort(lambda: fired.append("b"))
    assert forget_a() is None
    forget_a()  # a second call is harmless
    signal.abort()
    assert fired == ["b"]


@pytest.mark.spec("19")
def test_wait_returns_false_when_its_timeout_passes_before_the_signal_fires():
    """wait(timeout) on a signal that has not fired returns False once the timeout passes (here at once); after abort() it returns True."""
    signal = AbortSignal()
    assert signal.wait(timeout=0) is False
    assert signal.wait(0.01) is False
    signal.abort()
    assert signal.wait(timeout=0) is True


def test_a_callback_that_raises_is_logged_on_yiemagent_tooling_and_the_others_still_run(caplog):
    """An exception from an abort callback is logged as an ERROR with its traceback on "yiemagent.tooling", naming the
    callback; abort() does not raise, and the next callback still runs."""

    def broken() -> None:
        raise RuntimeError("socket already closed")

    signal = AbortSignal()
    fired = []
    signal.on_abort(broken)
    signal.on_abort(lambda: fired.append("next"))
    with caplog.at_level(logging.ERROR, logger="yiemagent.tooling"):
        signal.abort("stop")
    assert fired == ["next"]
    records = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert records == [("yiemagent.tooling", "ERROR", f"abort callback {broken!r} raised")]
    exc_type, exc, _ = caplog.records[0].exc_info
    assert (exc_type, str(exc)) == (RuntimeError, "socket already closed")


@pytest.mark.spec("19")
def test_wait_on_a_signal_already_fired_returns_true_at_once():
    """A signal fired before anyone waits (so it never made its event) answers wait() True at once, whatever the timeout."""
    signal = AbortSignal()
    signal.abort("early")
    assert signal.wait(WAIT) is True  # not False after WAIT


@pytest.mark.spec("19")
def test_wait_blocks_until_another_thread_aborts_and_then_returns_true():
    """wait() without a timeout, called before the signal fires, blocks until another thread aborts it and then returns True."""
    signal = AbortSignal()
    waiting = threading.Event()
    returned: list[bool] = []

    def waiter() -> None:
        waiting.set()
        returned.append(signal.wait())

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    waiting.wait(10)
    thread.join(0.2)  # the waiter is blocked in wait() by now (on a loaded machine, perhaps not: then it finds the flag set)
    signal.abort("stop")
    thread.join(10)
    assert returned == [True]


@pytest.mark.spec("19")
def test_a_released_child_no_longer_fires_with_its_parent():
    """release(child) forgets the child: the parent's abort no longer reaches it, while a child not released still fires."""
    parent = AbortSignal()
    released, kept = parent.child(), parent.child()
    parent.release(released)
    parent.abort("run aborted")
    assert (released.aborted, kept.aborted, kept.reason) == (False, True, "run aborted")
