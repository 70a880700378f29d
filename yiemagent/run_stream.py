"""One run's events as an iterator: what ``stream(agent, message)`` returns (docs/streaming.md "Iterating over a run").

Beyond the spec. ``stream`` (agent.py) sends the message as ``ask`` does — alone, once the
agent is idle, holding the agent's ask lock — and taps the agent's ``EventEmitter``
(events.py): every event the sink gets from then on is also appended to the stream, in the
sink's order, as it happens. The stream follows the first run that starts (the one its
message started: the agent was idle and the lock keeps other asks out) up to that run's
``AgentRunEndEvent``; a sub-agent's events come as the ``SubAgentEvent`` the sink sees.
The reply is then taken from the output channel, so the output channel holds no reply
of it, and the lock is released.

A consumer that stops early — a ``break``, an exception in its loop body, the stream's
timeout, a stream dropped before it was iterated — lets the run go: the tap stops,
the events it held are dropped, and a daemon thread (``yiemagent-*-stream-reply``) waits
for the run's reply, takes it and releases the lock. The run goes on to its end; the
agent's own sink still gets every event; the next ``ask`` gets its own reply.

Memory: the stream holds the events its consumer has not read yet. It never holds up the
run (a consumer that reads slowly must not stall the agent's sink, its tools or its LLM
call, nor keep ``abort`` and ``shutdown`` waiting), so the bound is the run's own: its
events refer to the messages the run adds to the history anyway, and its deltas add up
to the text of its replies, which the clients cap (``max_reply_bytes``) round by round
and ``max_rounds`` caps in number.

Thread safety: the tap is called by the emitter, under its lock, in the run thread and
tool threads; the consumer reads in its own thread. The event deque is appended by the
tap and popped by the consumer (``collections.deque`` is safe for that); the consumer
waits on the agent's doorbell (``AgentCore.wait_for``), which the tap rings after each
event. A ``RunStream`` is iterated once, by one thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Optional

from ._threads import start_daemon
from .errors import AgentClosedError, RunFailedError
from .events import AgentRunEndEvent, AgentRunStartEvent, LLMCallEndEvent, LLMDeltaEvent
from .types import FAILED_RUN_STOP_REASONS, AssistantMessage

if TYPE_CHECKING:
    from .loop import AgentCore

__all__ = ["AskLock", "RunStream"]

logger = logging.getLogger("yiemagent.stream")


class AskLock:
    """One ``ask`` or ``stream`` at a time on an agent (one request, one reply), that knows the thread it waits for.

    A thread that holds it (a ``stream`` it is iterating) and asks again would wait for
    ever for itself: ``acquire`` raises ``RuntimeError`` instead. A stream whose consumer
    stopped early hands it over: its daemon releases it when the run's reply is taken,
    and the consumer's thread may then wait for it like any other.

    Thread safety: ``_lock`` is released by the thread that took the reply (the caller, or a
    stream's daemon); ``holder`` (the ident of the thread a stream or ask holds it for, or
    None) is written only by that thread while it holds the lock, and by ``hand_over``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held from the send to the reply's taking
        self.holder: Optional[int] = None
        # the call that last took it, named when another gives up waiting for it; written
        # under the lock, read without it (one str reference: at worst the previous holder's name)
        self.verb = "ask()"

    def acquire(self, timeout: Optional[float], verb: str) -> bool:
        """Take it within ``timeout`` seconds (None: wait as long as it takes) for the call ``verb``; False if it did not come.

        Raises:
            RuntimeError: this thread holds it already (an ``ask`` inside the loop over a ``stream`` of the same agent).
        """
        if self.holder == threading.get_ident():
            raise RuntimeError(f"{verb} inside the loop over a stream() of the same agent would wait for ever for that stream's run: finish or close() the stream first")
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            return False
        self.holder, self.verb = threading.get_ident(), verb
        return True

    def hand_over(self) -> None:
        """A stream's daemon will release it: the consumer's thread no longer holds it."""
        self.holder = None

    def release(self) -> None:
        self.holder = None
        self._lock.release()


class _Tap:
    """The emitter's tap of one stream: keeps its run's events until the consumer reads them.

    Thread safety: ``__call__`` runs under the emitter's lock (one event at a time);
    ``run_id`` and ``ended`` are written only there, before the doorbell rings; ``events``
    is a deque the consumer pops; ``reply`` is written once, by whoever takes the reply.
    """

    __slots__ = ("core", "events", "run_id", "ended", "listening", "untap", "reply", "__weakref__")

    def __init__(self, core: "AgentCore") -> None:
        self.core = core
        self.events: deque[Any] = deque()
        self.run_id: Optional[int] = None  # the stream's run, from its AgentRunStartEvent
        self.ended = False  # its AgentRunEndEvent came
        self.listening = True
        self.reply: Optional[AssistantMessage] = None
        self.untap: Callable[[], None] = core.emit.tap(self)

    def __call__(self, event: Any) -> None:
        if not self.listening:
            return
        if self.run_id is None:
            if not isinstance(event, AgentRunStartEvent):
                return  # nothing of a run before it starts (the agent was idle when the stream began)
            self.run_id = event.run_id
        self.events.append(event)
        if isinstance(event, AgentRunEndEvent) and event.run_id == self.run_id:
            self.ended, self.listening = True, False
        self.core.ring()

    def stop(self) -> None:
        """Take no more events and drop those not read."""
        self.listening = False
        self.untap()
        self.events.clear()
        self.core.ring()  # a consumer waiting in another thread looks again


def _let_go(tap: _Tap, output: Any, lock: AskLock, name: str) -> None:
    """The consumer stopped early: the run goes on; a daemon stops the tap, takes the run's reply when it ends, releases the ask lock.

    All of it on the daemon: as a finalizer this may run inside any thread, even one
    holding a channel's lock, where ringing the doorbell could wait for ever.
    """
    lock.hand_over()

    def take_reply() -> None:
        try:
            tap.stop()
            tap.reply = output.get()  # no timeout: the run's own end (AgentClosedError if it never started)
        except BaseException as exc:  # a daemon's failure is logged, never lost; the lock is released either way
            logger.debug("a stream let go took no reply: %s: %s", type(exc).__name__, exc)
        finally:
            lock.release()

    start_daemon(take_reply, f"{name}-stream-reply")


class RunStream:
    """The events of one run as they happen; ``text()`` its text; ``reply`` its reply (docs/api.md "A run that fails says so").

    Made by ``stream(agent, message, timeout=..., check=...)``. Iterating it yields every
    event the agent's sink gets for the run, in the sink's order, each as soon as the sink
    got it: ``AgentRunStartEvent`` first, ``AgentRunEndEvent`` last, deltas
    (``LLMDeltaEvent``) and sub-agent events (``SubAgentEvent``) included. When the run
    ends the reply is taken and the iteration ends; with ``check`` (the default) a failed
    run (``FAILED_RUN_STOP_REASONS``) then raises ``RunFailedError``.

    Stopping early (break, an exception, ``close()``) or the stream's ``timeout`` lets the
    run go on to its end on its own; its reply is taken then, and the agent takes the next
    ``ask`` or ``stream`` once it has.

    Raises (while iterating):
        TimeoutError: the run did not end within the stream's ``timeout`` (counted from ``stream()``).
        AgentClosedError: the agent was shut down before the run started (``shutdown`` returned the message).
        RunFailedError: with ``check``, the run failed; ``.reply`` is set first.
        RuntimeError: the stream was iterated a second time.

    Thread safety: iterate it in one thread; the run's threads feed it (see the module).
    ``close()`` may be called from any thread: a consumer waiting for the next event wakes
    and its iteration ends.
    """

    def __init__(self, core: "AgentCore", lock: AskLock, name: str, deadline: Optional[float], timeout: Optional[float], check: bool) -> None:
        self._core = core
        self._tap = _Tap(core)
        self._deadline = deadline
        self._timeout = timeout
        self._check = check
        self._iterated = False
        self._lock = lock
        # stopped early or dropped unread: let the run go (the callback holds no reference to self)
        self._let_go = weakref.finalize(self, _let_go, self._tap, core.output_channel, lock, name)
        self._let_go.atexit = False

    @property
    def reply(self) -> AssistantMessage:
        """The reply the run ended with, once iteration has ended (or, after stopping early, once the run has).

        Raises:
            RuntimeError: the run's reply is not taken yet.
        """
        reply = self._tap.reply
        if reply is None:
            raise RuntimeError("the run's reply is not in yet: iterate the stream to its end first")
        return reply

    def __iter__(self) -> Iterator[Any]:
        if self._iterated:
            raise RuntimeError("a RunStream is iterated once; it has been iterated already")
        self._iterated = True
        return self._events()

    def text(self) -> Iterator[str]:
        """The run's text as it is written: its text deltas, and the whole text of a round that streamed none.

        A round's ``LLMCallEndEvent`` gives the text of a reply whose ``llm_call`` did not
        stream (``ScriptedLLM``, a client with ``stream=False``); a sub-agent's text is not
        the run's. Iterates the stream: the same errors, the same early stop.
        """
        events = iter(self)
        streamed = False  # this round sent text deltas
        try:
            for event in events:
                if isinstance(event, LLMDeltaEvent) and event.kind == "text":
                    streamed = True
                    yield event.text
                elif isinstance(event, LLMCallEndEvent):
                    if not streamed and event.response is not None and event.response.text:
                        yield event.response.text
                    streamed = False
        finally:
            events.close()  # type: ignore[attr-defined]

    def close(self) -> None:
        """Stop reading: the run goes on to its end, its reply taken then (nothing to do once iteration ended)."""
        self._let_go()

    def cancel(self) -> None:
        """Its message was never sent: stop the tap; the sender releases the lock."""
        self._let_go.detach()
        self._tap.stop()

    def _left(self) -> Optional[float]:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def _events(self) -> Iterator[Any]:
        tap, core = self._tap, self._core
        finished = False
        try:
            while True:
                if not core.wait_for(lambda: bool(tap.events) or not tap.listening or core.run_over(tap.run_id), self._left()):
                    raise TimeoutError(f"the run did not end within the stream's timeout of {self._timeout} s; it goes on, and its reply is taken when it ends")
                if not self._let_go.alive:
                    return  # close()d: the run was let go, its reply is the daemon's to take
                if tap.events:
                    yield tap.events.popleft()
                elif tap.run_id is None and not tap.ended:
                    raise AgentClosedError("the agent was shut down before the stream's run started; shutdown() returned its message")
                else:
                    break  # the run ended (its end event read; or it ended without one: the reply still comes)
            reply = self._take_reply()
            finished = True
        finally:
            if not finished:
                self._let_go()
        if self._check and reply.stop_reason in FAILED_RUN_STOP_REASONS:
            raise RunFailedError(reply)

    def _take_reply(self) -> AssistantMessage:
        try:
            reply: AssistantMessage = self._core.output_channel.get(timeout=self._left())  # the channel holds the replies
        except queue.Empty:
            raise TimeoutError(f"the run's reply did not come within the stream's timeout of {self._timeout} s") from None
        self._let_go.detach()
        self._tap.stop()
        self._tap.reply = reply
        self._lock.release()
        return reply
