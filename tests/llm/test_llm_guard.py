"""The call guard (issue 10 class 5, issue 14 abort): tripping shuts the call's socket down, whenever the socket becomes known."""

from __future__ import annotations

import socket

from yiemagent import AbortSignal
from yiemagent.llm._guard import ABORTED, DEADLINE, CallGuard
from yiemagent.llm._http import _tripped


class Connection:
    """What the guard sees of a urllib3 connection: its ``sock``."""

    def __init__(self, sock):
        self.sock = sock


def test_a_connection_attached_after_the_trip_is_shut_down_at_once():
    """A guard that tripped before the pool handed out a (kept-alive, connected) socket shuts that socket down on attach."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        guard = CallGuard(None, None)
        guard.trip(ABORTED)
        guard.attach(Connection(ours))
        theirs.settimeout(5)
        assert theirs.recv(1) == b"", "the peer sees the connection end"
        assert guard.reason == ABORTED


def test_the_first_reason_wins_and_the_abort_signal_trips_it():
    """An abort fires the guard through AbortSignal.on_abort; a later deadline does not change the reason."""
    signal = AbortSignal()
    ours, theirs = socket.socketpair()
    with ours, theirs:
        with CallGuard(60, signal) as guard:
            guard.attach(Connection(ours))
            signal.abort()
            guard.trip(DEADLINE)
            theirs.settimeout(5)
            assert theirs.recv(1) == b""
    assert guard.reason == ABORTED and guard.wait(0)


def test_a_finished_call_leaves_no_callback_on_a_long_lived_signal():
    """Leaving the guard unregisters its abort callback, so a run's signal does not grow with each call."""
    signal = AbortSignal()
    with CallGuard(60, signal):
        assert len(signal._callbacks) == 1
    assert signal._callbacks == []


def test_a_read_timing_out_as_the_deadline_passes_counts_as_the_deadline():
    """When the time is up but the timer has not fired yet, a timed-out read trips the guard for the deadline itself."""
    guard = CallGuard(0, None)
    assert _tripped(guard) and guard.reason == DEADLINE
    assert not _tripped(CallGuard(60, None))


def test_a_trip_after_the_call_ended_leaves_the_pooled_connection_alone():
    """A deadline or abort firing after the call returned does not shut down the connection, which may serve the next call."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        with CallGuard(60, None) as guard:
            guard.attach(Connection(ours))
        guard.trip(DEADLINE)
        ours.sendall(b"x")
        theirs.settimeout(5)
        assert theirs.recv(1) == b"x" and guard.reason is None
