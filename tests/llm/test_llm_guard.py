"""The call guard (the deadline and the abort, docs/conformance.md "The LLM clients: decisions 13 and 14"): tripping shuts the call's socket down, whenever the socket becomes known."""

from __future__ import annotations

import gc
import json
import socket
import threading
import weakref

import pytest

from helpers import WAIT
from localserver import LocalServer, Reply
from yiemagent import AbortSignal, LLMError
from yiemagent.llm import OpenAIClient
from yiemagent.streaming import stream_to
from yiemagent.llm._guard import ABORTED, DEADLINE, CallGuard
from yiemagent.llm._http import _tripped

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}


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


def test_the_deadline_timer_trips_the_guard_for_the_deadline():
    """A guard entered with a deadline is tripped by the deadline thread when it passes, with the reason DEADLINE."""
    with CallGuard(0, None) as guard:
        assert guard.wait(WAIT)
        assert guard.reason == DEADLINE


def test_a_socket_connected_after_the_trip_is_shut_down_at_once():
    """A socket the call connects after the guard tripped (an abort during a TLS handshake's connect) is shut down on attach_socket;
    the caller's own descriptor stays open."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        guard = CallGuard(None, None)
        guard.trip(ABORTED)
        guard.attach_socket(ours)
        theirs.settimeout(WAIT)
        assert theirs.recv(1) == b"", "the peer sees the connection end"
        assert ours.fileno() != -1


def sse(*deltas, finish=None) -> bytes:
    """OpenAI stream events: one chunk per text delta, then the finish reason and [DONE] when ``finish`` is given."""
    events = [{"model": "m", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]} for text in deltas]
    if finish is not None:
        events.append({"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return ("".join(f"data: {json.dumps(event)}\n\n" for event in events) + ("data: [DONE]\n\n" if finish else "")).encode()


def test_an_abort_ends_a_call_on_a_kept_alive_connection():
    """The second call of a client reuses the first one's connection (no new socket is connected): an abort after its
    first delta still shuts that connection down, and the call ends as aborted without waiting for the rest."""
    signal, release, rest_sent = AbortSignal(), threading.Event(), threading.Event()
    whole = {"model": "m", "choices": [{"message": {"role": "assistant", "content": "first"}, "finish_reason": "stop"}]}
    stream = [sse("Hello"), lambda: release.wait(WAIT), rest_sent.set, sse(", world", finish="stop")]
    replies = iter([Reply(body=whole), Reply(chunks=stream, headers={"Content-Type": "text/event-stream"})])
    try:
        with LocalServer(lambda request: next(replies)) as server:
            client = OpenAIClient(f"{server.url}/v1", "m", stream=True, timeout=WAIT)
            assert client(FORMATTED).content[0].text == "first"
            with stream_to(lambda kind, text: signal.abort(), signal):
                with pytest.raises(LLMError, match="was aborted"):
                    client(FORMATTED)
            assert not rest_sent.is_set(), "the client waited for the server instead of closing"
    finally:
        release.set()
    assert server.requests[0].client_port == server.requests[1].client_port


class Listener:
    def __call__(self, kind, text):
        pass


def test_a_finished_call_keeps_nothing_of_its_listener_alive():
    """After a call, nothing the call made keeps the run's listener (an agent's relay, and through it the run) alive:
    the guard it set as the context's current one is unset when it ends."""
    listener = Listener()
    gone = weakref.ref(listener)
    with LocalServer(lambda request: Reply(body={"model": "m", "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]})) as server:
        with stream_to(listener):
            OpenAIClient(f"{server.url}/v1", "m", deadline_s=None)(FORMATTED)
    del listener
    gc.collect()
    assert gone() is None
