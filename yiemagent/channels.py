"""The agent's channels and the six loop states (spec §5 "Channel Architecture", "Loop States").

The spec's loop wakes on either channel. ``queue.Queue`` cannot wait on two queues at
once, and waiting on one with a timeout and checking the other would be polling. So each
channel is a ``queue.Queue`` that also rings a doorbell — the agent's ``Condition`` — after
every put and get. The loop thread sleeps on that condition and re-reads the channels
when it rings: idle means blocked, and a message wakes the loop at once, whether it came
through ``run_agent`` or straight through ``agent.input_channel.put``.

A channel may carry, with each item, the ``contextvars`` context of the thread that put
it (``carry_context=True``: the input and follow-up channels). The run an item starts
runs in that context, so whatever the caller set in a ``ContextVar`` — the current
OpenTelemetry span, a request id — is what the run, its tools and its hooks see
(beyond the spec; docs/tracing.md "Trace context").

A channel can be closed (decision 16). Closing is atomic with respect to every put: a
put either landed before the close (and the item is processed or returned by
``shutdown``) or raises ``AgentClosedError`` — including a put that was blocked on a full
channel when the close came. A blocking ``get`` on a closed, empty channel raises too,
instead of waiting for an item that can no longer come.
"""

from __future__ import annotations

import contextvars
import enum
import queue
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Optional

from .errors import AgentClosedError

__all__ = ["Channel", "LoopState"]


class LoopState(enum.Enum):
    """The six states of the agent loop (spec §5 "Loop States" table)."""

    IDLE = 1
    """No run; both channels empty: the loop thread is blocked, waiting."""
    NEW_MESSAGE = 2
    """No run; the input channel has a message: a run is being started."""
    PROCESSING = 3
    """A run is active; nothing queued."""
    INPUT_QUEUED = 4
    """A run is active; the input channel has messages (drained at the next LLM round, or
    they start the next run)."""
    FOLLOW_UP_QUEUED = 5
    """A run is active; a follow-up waits to be moved into the input channel."""
    COMPLETED = 6
    """The run finished: its response goes to the output channel and the loop resets."""


class Channel(queue.Queue):
    """A ``queue.Queue`` that calls ``on_change()`` after every successful put or get, and can be closed.

    ``on_change`` is called without the queue's own lock held, so it may take other
    locks freely (no lock-order inversion with the loop, which reads ``qsize()`` while
    holding the agent's condition).

    With ``carry_context``, ``put`` also keeps ``contextvars.copy_context()`` of the putting
    thread beside the item (``_contexts``, in step with ``queue``: one entry per item);
    ``head_context`` and ``take_nowait`` read it, ``get`` and ``drain`` drop it.

    Thread safety: as ``queue.Queue``; any thread may put, get and close. ``_closed`` and
    ``_contexts`` are guarded by the queue's own ``mutex`` (the lock behind ``not_full``
    and ``not_empty``), which is what makes a close atomic with respect to every put and get.
    """

    def __init__(self, maxsize: int, on_change: Optional[Callable[[], None]] = None, *, carry_context: bool = False) -> None:
        super().__init__(maxsize)
        self.on_change = on_change
        self._closed: Optional[str] = None  # why the channel was closed; guarded by self.mutex
        # the context each item was put in, in step with self.queue; guarded by self.mutex
        self._contexts: Optional[deque[Optional[contextvars.Context]]] = deque() if carry_context else None

    # an item and its context go in and out together; called with self.mutex held
    def _put_with(self, item: Any, context: Optional[contextvars.Context]) -> None:
        self._put(item)
        if self._contexts is not None:
            self._contexts.append(context)

    def _get_with(self) -> tuple[Any, Optional[contextvars.Context]]:
        item = self._get()
        return item, (self._contexts.popleft() if self._contexts is not None else None)

    @property
    def closed(self) -> bool:
        """True once ``close`` was called."""
        return self._closed is not None

    def close(self, why: str) -> None:
        """Refuse every later put, wake every blocked put and get; items already in stay.

        ``why`` is the message of the ``AgentClosedError`` those calls raise.
        """
        with self.mutex:
            if self._closed is None:
                self._closed = why
            self.not_full.notify_all()
            self.not_empty.notify_all()

    def put(self, item: Any, block: bool = True, timeout: Optional[float] = None) -> None:
        """``queue.Queue.put``, except that a closed channel raises ``AgentClosedError``."""
        with self.not_full:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                if self._closed is not None:
                    raise AgentClosedError(self._closed)
                if self.maxsize <= 0 or self._qsize() < self.maxsize:
                    break
                if not block:
                    raise queue.Full
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise queue.Full
                self.not_full.wait(remaining)
            self._put_with(item, contextvars.copy_context() if self._contexts is not None else None)
            self.unfinished_tasks += 1
            self.not_empty.notify()
        if self.on_change is not None:
            self.on_change()

    def put_internal(self, item: Any, context: Optional[contextvars.Context] = None) -> None:
        """Put without blocking, even on a closed channel: the loop moving a follow-up it already accepted.

        ``context`` is the one the item was first sent in (``take_nowait`` of the channel it
        came from); it is kept with the item as ``put`` would keep the caller's.

        Raises:
            queue.Full: the channel has no room.
        """
        with self.not_full:
            if 0 < self.maxsize <= self._qsize():
                raise queue.Full
            self._put_with(item, context)
            self.unfinished_tasks += 1
            self.not_empty.notify()
        if self.on_change is not None:
            self.on_change()

    def get(self, block: bool = True, timeout: Optional[float] = None) -> Any:
        """``queue.Queue.get``, except that a blocking get on a closed, empty channel raises ``AgentClosedError``.

        ``get_nowait`` (``block=False``) still raises ``queue.Empty``.
        """
        with self.not_empty:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._qsize():
                if not block:
                    raise queue.Empty  # get_nowait: the loop's own non-blocking reads
                if self._closed is not None:
                    raise AgentClosedError(self._closed)
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise queue.Empty
                self.not_empty.wait(remaining)
            item, _ = self._get_with()
            self.not_full.notify()
        if self.on_change is not None:
            self.on_change()
        return item

    def take_nowait(self) -> tuple[Any, Optional[contextvars.Context]]:
        """``get_nowait``, with the context the item was put in (None when the channel keeps none).

        Raises:
            queue.Empty: the channel is empty.
        """
        with self.not_empty:
            if not self._qsize():
                raise queue.Empty
            entry = self._get_with()
            self.not_full.notify()
        if self.on_change is not None:
            self.on_change()
        return entry

    def head_context(self) -> Optional[contextvars.Context]:
        """The context the first item in the channel was put in; None when empty or when none is kept."""
        with self.mutex:
            return self._contexts[0] if self._contexts else None

    def drain(self) -> list[Any]:
        """Take every item that is in the channel now, without blocking (closed or not)."""
        with self.not_empty:
            items = [self._get_with()[0] for _ in range(self._qsize())]
            if items:
                self.not_full.notify_all()
        if items and self.on_change is not None:
            self.on_change()
        return items
