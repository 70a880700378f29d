"""The agent's channels and the six loop states (spec §5 "Channel Architecture", "Loop States").

The spec's loop wakes on either channel. ``queue.Queue`` cannot wait on two queues at
once, and waiting on one with a timeout and checking the other would be polling. So each
channel is a ``queue.Queue`` that also rings a doorbell — the agent's ``Condition`` — after
every put and get. The loop thread sleeps on that condition and re-reads the channels
when it rings: idle means blocked, and a message wakes the loop at once, whether it came
through ``run_agent`` or straight through ``agent.input_channel.put``.
"""

from __future__ import annotations

import enum
import queue
from collections.abc import Callable
from typing import Any, Optional

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
    """A ``queue.Queue`` that calls ``on_change()`` after every successful put or get.

    ``on_change`` is called without the queue's own lock held, so it may take other
    locks freely (no lock-order inversion with the loop, which reads ``qsize()`` while
    holding the agent's condition).

    Thread safety: as ``queue.Queue``; any thread may put and get.
    """

    def __init__(self, maxsize: int, on_change: Optional[Callable[[], None]] = None) -> None:
        super().__init__(maxsize)
        self.on_change = on_change

    def put(self, item: Any, block: bool = True, timeout: Optional[float] = None) -> None:
        super().put(item, block, timeout)
        if self.on_change is not None:
            self.on_change()

    def get(self, block: bool = True, timeout: Optional[float] = None) -> Any:
        item = super().get(block, timeout)
        if self.on_change is not None:
            self.on_change()
        return item

    def drain(self) -> list[Any]:
        """Take every item that is in the channel now, without blocking."""
        items = []
        while True:
            try:
                items.append(self.get_nowait())
            except queue.Empty:
                return items
