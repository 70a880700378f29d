"""How an agent stops: ``close``, ``abort``, ``join`` and the finalizer's ``abandon`` (decision 16).

Spec: §5 says nothing about stopping; decision 16 (API.md) fixes it: nothing a caller
sent is lost (what was queued is returned), nothing blocks for ever (a run that does not
finish is aborted, then left on its daemon thread), and a run may shut its own agent down.

``Closing`` is a part of ``AgentCore`` (_core.py), kept apart because it is the one
place where the caller's thread and the agent's threads meet at the end. It uses the
core's bookkeeping and the same lock: ``_wake`` (the doorbell; it guards ``_closing``,
``_carry``, ``_run``, ``_added``, ``_force_exit``), the channels, ``_thread`` (the loop
thread) and ``_worker`` (the run thread). Thread safety is the core's, described there.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from typing import TYPE_CHECKING, Any, Optional

from .run import CONTINUE

if TYPE_CHECKING:
    from collections import deque

    from ._core import AgentCore
    from .channels import Channel
    from .messages import AgentMessage
    from .run import Run, RunWorker

__all__ = ["Closing", "current_core"]

logger = logging.getLogger("yiemagent.agent")

current_core: contextvars.ContextVar[Optional["AgentCore"]] = contextvars.ContextVar("yiemagent_current_core", default=None)
"""The core whose run the current code is part of: set in the run thread and copied into
every tool thread, so that ``shutdown`` called from a tool, a hook or the event sink knows
it must not wait for the run it is part of."""


class Closing:
    """``AgentCore``'s closing half (decision 16); see the module docstring for what it shares."""

    # set by AgentCore.__init__ (which also provides take_added); named here so a reader sees
    # what closing touches
    _wake: threading.Condition
    _closing: bool
    _force_exit: bool
    _carry: "deque[Any]"
    _run: Optional["Run"]
    _thread: threading.Thread
    _worker: "RunWorker"
    input_channel: "Channel"
    follow_up_channel: "Channel"

    def close(self, why: str) -> Optional[list[Any]]:
        """Start shutting down without waiting; return what was queued, or None if already closing.

        Atomic with respect to every send: the input channels are closed (a send blocked
        on a full channel wakes and raises ``AgentClosedError``) and emptied under
        ``_wake``, which the loop holds while it moves follow-ups, so every message that
        was accepted is either already in the history or in the list returned here.
        """
        with self._wake:
            if self._closing:
                return None
            self._closing = True
            self.input_channel.close(why)
            self.follow_up_channel.close(why)
            queued = [m for m in self.input_channel.drain() if m is not CONTINUE]
            queued.extend(self._carry)
            self._carry.clear()
            queued.extend(self.follow_up_channel.drain())
            self._wake.notify_all()
        return queued

    def abort(self, reason: str) -> bool:
        """Fire the active run's signal; False if no run is active."""
        with self._wake:
            run = self._run
        if run is None:
            return False
        run.signal.abort(reason)
        return True

    def is_own_thread(self) -> bool:
        """True when called from this agent's loop or run thread, or from code its run called (a tool, a hook, the sink)."""
        current = threading.current_thread()
        return current_core.get() is self or current is self._thread or current is self._worker.thread

    def join(self, timeout: Optional[float]) -> list[AgentMessage]:
        """Wait for the loop thread: ``timeout``, then abort the run and wait ``timeout`` more, then leave it.

        Returns (and takes out) the messages ``add_message`` queued for a run left running,
        which may never reach another round: ``shutdown`` returns them (decision 16).
        """
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.abort(f"aborted by shutdown: the run did not finish within {timeout} s")
            self._thread.join(timeout)
        if not self._thread.is_alive():
            return []
        with self._wake:
            self._force_exit = True
            self._wake.notify_all()
        self._thread.join()
        return self.take_added()

    def abandon(self) -> None:
        """The shell was garbage-collected without ``shutdown``: close, abort the run, let the threads end."""
        queued = self.close("the agent was garbage-collected without shutdown")
        self.abort("aborted: the agent was garbage-collected without shutdown")
        if queued:
            logger.warning("an agent dropped without shutdown had %d queued message(s); they were discarded", len(queued))
