"""The thread pool parallel batches run on (spec §9 "Parallel Execution").

One pool serves every batch of every agent in the process, so the threads of one batch
are reused by the next instead of being started again (starting a thread blocks until it
runs: about 0.1 ms each, 3 ms for a batch of 32). The pool grows whenever the calls in
flight would outnumber its threads, so no call ever waits for a free worker.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Optional, TypeVar

__all__ = ["tool_pool"]

T = TypeVar("T")
_MIN_THREADS = 8


class ElasticToolPool:
    """A ``ThreadPoolExecutor`` that is replaced by a larger one when it could fill up.

    Thread safety: ``submit`` may be called from any thread. ``_lock`` guards
    ``_executor``, ``_size`` and ``_in_flight``. An outgrown executor is shut down without
    waiting: its running calls finish on its threads, which then exit.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _executor, _size, _in_flight
        self._executor: Optional[ThreadPoolExecutor] = None
        self._size = 0
        self._in_flight = 0

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``fn(*args)`` on a thread that is free now; the pool grows if none would be."""
        with self._lock:
            self._in_flight += 1
            if self._executor is None or self._in_flight > self._size:
                outgrown = self._executor
                self._size = max(self._in_flight, 2 * self._size, _MIN_THREADS)
                self._executor = ThreadPoolExecutor(self._size, thread_name_prefix="yiemagent-tool")
                if outgrown is not None:
                    outgrown.shutdown(wait=False)
            executor = self._executor
        # in the submitter's context: a tool sees the run's context variables (the streaming
        # target, the agent it belongs to — which ``shutdown`` reads to know it must not wait)
        future = executor.submit(contextvars.copy_context().run, fn, *args)
        future.add_done_callback(self._release)
        return future

    def _release(self, _future: Future[Any]) -> None:
        with self._lock:
            self._in_flight -= 1


tool_pool = ElasticToolPool()
