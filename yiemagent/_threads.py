"""Every thread of an agent but its loop: the run worker, the tool pool, one-off daemons.

Spec: §5 (``@spawn _processMessage`` is the run worker), §9 "Parallel Execution" (the pool
parallel batches run on). The loop thread itself is the agent's (loop.py).

One pool serves every batch of every agent in the process, so the threads of one batch
are reused by the next instead of being started again (starting a thread blocks until it
runs: about 0.1 ms each, 3 ms for a batch of 32, more on a loaded machine). A call that
finds no idle thread gets a thread started for it, so no call ever waits for a free
worker; at most ``TOOL_THREADS_KEPT`` threads stay once the calls end, and each exits
after ``TOOL_THREAD_IDLE_S`` with no call.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Optional, TypeVar

if TYPE_CHECKING:
    from .types import AbortSignal

__all__ = ["RunWorker", "ToolPool", "call_at", "run_coroutine", "start_daemon", "tool_pool", "wait_on_daemon"]

logger = logging.getLogger("yiemagent.run")

T = TypeVar("T")
TOOL_THREADS_KEPT = 32
"""At most this many of the tool pool's threads outlive the calls they ran (``ToolPool``; docs/performance.md)."""
TOOL_THREAD_IDLE_S = 30.0
"""A tool pool thread with no call for this long exits (``ToolPool``; docs/performance.md)."""


class ToolPool:
    """The worker threads parallel batches run on: started when a call finds none idle, kept for the next batch.

    Spec §9 "Parallel Execution". A call goes to the worker that went idle last, or, when
    none is idle, to a worker started for it: no call ever waits for a free worker (a
    batch of N sleeping tools takes about as long as one), however many are in flight.
    When its call ends, a worker stays for the next call only if fewer than ``keep`` are
    idle; otherwise it exits. An idle worker is blocked on a lock of its own with a
    timeout (never polling) and exits once it has waited ``idle_s`` with no call
    (docs/performance.md "A long-lived process"). So a burst larger than ``keep`` runs on
    as many threads as it has calls, at most ``keep`` of them outlive it, and those
    retire when the process stops sending work. Idle workers are a stack: the one that
    went idle last is reused first, so under a light load the others time out and go.

    One pool serves every batch of every agent in the process (``tool_pool``): a service's
    agents come and go and reuse the same threads, the idle threads are bounded for the
    whole process rather than per agent, and ``execute_tool_calls_parallel`` runs outside
    any agent. A worker belongs to no agent: it drops its call, the call's context and
    the future once the call ends, so an idle worker keeps no agent alive, and
    ``shutdown`` of an agent leaves none of that agent's threads. Workers are daemon
    threads, as the run worker: a tool that never returns cannot keep the interpreter
    alive.

    Thread safety: ``submit`` may be called from any thread. ``_lock`` guards ``_idle``
    (the idle workers, the last one to go idle at the end), ``_started`` (a count, for
    thread names) and ``_busy`` (the calls running, read by ``busy``). A worker's ``wake`` lock is released by the one ``submit`` that took
    the worker off ``_idle`` (under ``_lock``), after setting its ``job`` (None from
    ``retire_idle``: exit); the worker reads
    ``job`` only after acquiring ``wake``, so the two never touch ``job`` at once. In a
    child process just forked, every pool forgets the parent's idle workers (threads do not
    survive a fork) and starts its own.
    """

    def __init__(self, keep: int = TOOL_THREADS_KEPT, idle_s: float = TOOL_THREAD_IDLE_S) -> None:
        self.keep, self.idle_s = keep, idle_s
        self._lock = threading.Lock()  # guards _idle, _started, _busy
        self._idle: list[_Worker] = []
        self._started = 0
        self._busy = 0  # calls handed to a worker whose worker has not yet finished them
        _pools.add(self)

    def _forget_workers(self) -> None:
        """In a child process just forked: the parent's workers are not there, so none is idle (a call handed to one would never run)."""
        self._lock = threading.Lock()  # another thread may have held it at the fork
        self._idle = []
        self._busy = 0

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``fn(*args)`` on an idle worker, or on one started for it; the future has its result or exception."""
        future: Future[T] = Future()
        # in the submitter's context: a tool sees the run's context variables (the streaming
        # target, the agent it belongs to — which ``shutdown`` reads to know it must not wait)
        job = (future, contextvars.copy_context(), fn, args)
        with self._lock:
            self._busy += 1
            if self._idle:
                worker = self._idle.pop()
                worker.job = job
                worker.wake.release()
                return future
            self._started += 1
            name = f"yiemagent-tool_{self._started}"
        start_daemon(_Worker(self, job).run, name)
        return future

    def retire_idle(self) -> None:
        """End the idle workers now instead of after ``idle_s`` (the calls running go on; their workers stay)."""
        with self._lock:
            idle, self._idle = self._idle, []
            for worker in idle:  # under the lock, as submit hands over: job None tells the worker to exit
                worker.job = None
                worker.wake.release()

    def busy(self) -> int:
        """How many calls are running (handed to a worker that has not finished them); a reading, stale as soon as it returns."""
        with self._lock:
            return self._busy

    def _idle_after(self, worker: "_Worker") -> bool:
        """Put ``worker`` on the idle stack if fewer than ``keep`` are there; False: it must exit."""
        with self._lock:
            self._busy -= 1  # its call ended (it is settled just after)
            if len(self._idle) >= self.keep:
                return False
            self._idle.append(worker)
            return True

    def _retire(self, worker: "_Worker") -> bool:
        """``worker`` waited ``idle_s`` for nothing: True if it left the idle stack, False if a call was just handed to it."""
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
                return True
            return False


_Job = tuple[Future[Any], contextvars.Context, Callable[..., Any], tuple[Any, ...]]
_pools: "weakref.WeakSet[ToolPool]" = weakref.WeakSet()  # every pool, for the fork hook below


def _after_fork_in_child() -> None:
    for pool in list(_pools):
        pool._forget_workers()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _Worker:
    """One thread of a ``ToolPool``: runs the call it was started with, then each call handed to it while idle."""

    __slots__ = ("pool", "job", "wake")

    def __init__(self, pool: ToolPool, job: _Job) -> None:
        self.pool = pool
        self.job: Optional[_Job] = job
        self.wake = threading.Lock()  # released by the submit that hands this worker a job
        self.wake.acquire()

    def run(self) -> None:
        pool = self.pool
        while True:
            job, self.job = self.job, None
            if job is None:  # retire_idle
                return
            settle, outcome = _run_job(*job)
            del job  # an idle worker holds nothing of the call it ran (its agent can be collected)
            stays = pool._idle_after(self)
            # the future is settled once this worker is back on the idle stack: whoever has the
            # result finds the worker idle, so the next batch runs on this batch's threads
            settle(outcome)
            del settle, outcome
            if not stays:
                return
            if not self.wake.acquire(timeout=pool.idle_s):
                if pool._retire(self):
                    return
                # a submit took this worker off the stack as it timed out: under the pool's lock,
                # so its job is set and wake released by now; this acquire returns at once
                self.wake.acquire()


def _run_job(future: Future[Any], context: contextvars.Context, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Callable[[Any], None], Any]:
    """Run one call; returns how to settle its future (its result, or what it raised: nothing escapes the worker)."""
    if not future.set_running_or_notify_cancel():
        return (lambda _: None), None
    try:
        return future.set_result, context.run(fn, *args)
    except BaseException as exc:  # carried to the caller through the future, as ThreadPoolExecutor does
        return future.set_exception, exc


tool_pool = ToolPool()


class _Deadline:
    __slots__ = ("when", "order", "fn", "cancelled")

    def __init__(self, when: float, order: int, fn: Callable[[], Any]) -> None:
        self.when, self.order, self.cancelled = when, order, False
        self.fn: Optional[Callable[[], Any]] = fn  # None once it ran or was cancelled

    def __lt__(self, other: "_Deadline") -> bool:
        return (self.when, self.order) < (other.when, other.order)


class DeadlineWatch:
    """One thread that runs callbacks at their deadlines (the LLM calls' ``deadline_s``).

    A ``threading.Timer`` per call started and stopped a thread for every LLM request (a
    tenth of a millisecond and two context switches each, docs/performance.md); this one
    thread, started on first use, serves every call of the process. Idle, it is blocked
    on its condition; with deadlines pending, it sleeps until the nearest one or until a
    nearer one is added. A cancelled deadline is dropped from the heap once cancelled ones
    are half of it, so calls that end long before their deadline leave nothing behind.

    Thread safety: ``call_at`` and the cancel it returns may be called from any thread;
    ``_ready`` (a ``Condition``) guards ``_heap``, ``_cancelled`` and ``_thread``. A
    callback runs on the watch's thread, outside the lock, and must not block.
    """

    def __init__(self) -> None:
        self._ready = threading.Condition(threading.Lock())
        self._heap: list[_Deadline] = []
        self._cancelled = 0
        self._order = itertools.count()
        self._thread: Optional[threading.Thread] = None

    def call_at(self, when: float, fn: Callable[[], Any]) -> Callable[[], None]:
        """Run ``fn()`` at ``time.monotonic()`` ``when``; returns the cancel (harmless after it ran)."""
        entry = _Deadline(when, next(self._order), fn)
        with self._ready:
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:
                self._ready.notify()
            if self._thread is None:
                self._thread = start_daemon(self._watch, "yiemagent-deadlines")
        return lambda: self._cancel(entry)

    def _cancel(self, entry: _Deadline) -> None:
        with self._ready:
            if entry.fn is None:  # it ran, or was cancelled before
                return
            entry.cancelled, entry.fn = True, None
            self._cancelled += 1
            if self._cancelled > 32 and self._cancelled * 2 > len(self._heap):
                self._heap = [e for e in self._heap if not e.cancelled]
                heapq.heapify(self._heap)
                self._cancelled = 0

    def _watch(self) -> None:
        while True:
            with self._ready:
                while True:
                    while self._heap and self._heap[0].cancelled:
                        heapq.heappop(self._heap)
                        self._cancelled -= 1
                    if not self._heap:
                        self._ready.wait()
                        continue
                    delay = self._heap[0].when - time.monotonic()
                    if delay <= 0:
                        entry = heapq.heappop(self._heap)
                        fn, entry.fn = entry.fn, None
                        assert fn is not None  # not cancelled, so not run yet
                        break
                    self._ready.wait(delay)
            try:
                fn()
            except BaseException:  # a callback never raises (CallGuard.trip); a bug is logged, the watch lives
                logger.exception("a deadline callback failed")


_deadlines = DeadlineWatch()
call_at = _deadlines.call_at


class RunWorker:
    """The one thread that runs ``process_message`` (the spec's ``@spawn _processMessage``).

    A long-lived daemon thread fed by a queue: starting a thread per run would cost more
    than a whole run with a fast LLM. Daemon, so that an LLM call that never returns
    cannot keep the interpreter alive.

    Thread safety: ``submit`` and ``stop`` may be called from any thread (a ``SimpleQueue``).
    """

    submit: Callable[[Callable[[], None]], None]
    """Queue ``job``: the queue's own ``put``, one call into C with no Python frame, so an exception
    raised in the submitting thread (a ``KeyboardInterrupt``) lands before it or after it, never
    between taking the job and queueing it (loop.py ``AgentCore._start_run``)."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[Optional[Callable[[], None]]] = queue.SimpleQueue()
        self.submit = self._jobs.put
        self.thread = start_daemon(self._work, name)

    def stop(self) -> None:
        self._jobs.put(None)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except BaseException:  # a job never raises (process_message contains everything); a bug is logged, the thread lives
                logger.exception("a run job failed")


def start_daemon(target: Callable[[], Any], name: str) -> threading.Thread:
    """Start ``target`` on a named daemon thread: one that must never keep the interpreter alive."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def wait_on_daemon(
    fn: Callable[[], T], name: str, timeout_s: float, signal: "AbortSignal"
) -> tuple[bool, Optional[T], Optional[BaseException]]:
    """Run ``fn`` on a daemon thread in the caller's context; wait until it ends, ``signal`` fires, or ``timeout_s`` passes.

    Returns (finished, result, exception): when ``finished`` is False the thread is
    abandoned — it runs on until ``fn`` returns, and what it returns is dropped. The
    signal is seen through ``AbortSignal.on_abort``: no polling. Whatever ``fn`` raises,
    ``BaseException`` included, is carried back, never lost in the thread.
    """
    outcome: dict[str, Any] = {}
    finished = threading.Event()  # set by the thread when fn has returned or raised
    wake = threading.Event()  # set when fn is done or the signal fired: the waiter looks again

    def run() -> None:
        try:
            outcome["result"] = fn()
        except BaseException as exc:  # carried back to the waiting thread
            outcome["error"] = exc
        finally:
            finished.set()
            wake.set()

    context = contextvars.copy_context()  # the code sees the caller's context (shutdown knows it is inside a run)
    unregister = signal.on_abort(wake.set)
    try:
        start_daemon(lambda: context.run(run), name)
        wake.wait(timeout_s)
    finally:
        unregister()
    if finished.is_set():
        return True, outcome.get("result"), outcome.get("error")
    return False, None, None


def run_coroutine(coroutine: Any, signal: Optional["AbortSignal"], name: str = "an async tool") -> Any:
    """Run ``coroutine`` to its end on an event loop of its own, in this thread (an ``async def`` tool, docs/api.md).

    Beyond the spec, whose tools are plain functions: each call gets a fresh loop, so no
    loop is shared between threads or calls. When ``signal`` fires (``abort``, or the
    call's ``timeout_s``) the task is cancelled: the coroutine sees ``CancelledError`` at
    its next ``await``. Whatever the coroutine left behind (tasks it started, async
    generators, the loop's default executor) is cancelled and waited for at most
    ``CLEANUP_GRACE_S`` (``_close_loop``): what has not ended by then is abandoned with a
    warning naming it, so a task that swallows its cancellation cannot hold the call, and
    the loop is closed before this returns or raises. Called in a thread where a loop
    already runs (``execute`` called by hand from async code), the coroutine runs on a
    thread of its own, which this waits for.

    Raises:
        asyncio.CancelledError: the task was cancelled (a ``BaseException``: the caller
            turns it into an error result naming why).
        Exception: whatever the coroutine raised.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # the usual case: no loop runs in this thread (the run thread, a pool thread)
        pass
    else:  # execute called by hand from async code: a loop of its own needs a thread of its own
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["result"] = run_coroutine(coroutine, signal, name)
            except BaseException as exc:  # carried back to the caller
                outcome["error"] = exc

        context = contextvars.copy_context()
        thread = start_daemon(lambda: context.run(run), "yiemagent-tool-async")
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("result")
    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(coroutine)

        def cancel() -> None:  # in the thread that fired the signal
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop has closed meanwhile: the task is over
                pass

        unregister = signal.on_abort(cancel) if signal is not None else (lambda: None)
        try:
            return loop.run_until_complete(task)
        finally:
            unregister()
    finally:
        _close_loop(loop, name)


CLEANUP_GRACE_S = 1.0
"""How long an async tool's call waits, once its coroutine has ended, for what it left behind to end (docs/failures.md)."""


def _close_loop(loop: asyncio.AbstractEventLoop, name: str) -> None:
    """Cancel what is left on ``loop``, wait for it at most ``CLEANUP_GRACE_S``, and close the loop.

    Leftover tasks are cancelled, then async generators and the default executor are shut
    down, all within one deadline. A task that ignores its cancellation (a loop that
    catches ``CancelledError``), an async generator whose ``finally`` hangs, an executor
    thread that never returns: each is abandoned, named in one warning, and the loop closes
    anyway. An abandoned task is never resumed (its loop is closed); its coroutine is
    closed when it is collected.
    """
    deadline = time.monotonic() + CLEANUP_GRACE_S
    try:
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task_left in left:
            task_left.cancel()
        stuck = _wait_until(loop, left, deadline)
        stuck += _wait_until(loop, [loop.create_task(loop.shutdown_asyncgens())], deadline)
        stuck += _wait_until(loop, [loop.create_task(loop.shutdown_default_executor())], deadline)
        if stuck:
            logger.warning(
                "%s returned, but %d task(s) it left behind did not end within %g s of being cancelled; "
                "abandoned so that they cannot hold the call: %s",
                name, len(stuck), CLEANUP_GRACE_S, ", ".join(_task_name(t) for t in stuck),
            )
            for task_left in stuck:
                # our warning names it: asyncio's own "Task was destroyed but it is pending!" would
                # come again, later, at a garbage collection (run_until_complete sets this flag too)
                task_left._log_destroy_pending = False  # type: ignore[attr-defined]
    finally:
        loop.close()


def _wait_until(loop: asyncio.AbstractEventLoop, tasks: list["asyncio.Task[Any]"], deadline: float) -> list["asyncio.Task[Any]"]:
    """Run ``loop`` until ``tasks`` have ended or ``deadline`` passes; the tasks still pending."""
    if not tasks:
        return []
    _done, pending = loop.run_until_complete(asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic())))
    return [t for t in tasks if t in pending]


def _task_name(task: "asyncio.Task[Any]") -> str:
    coroutine = task.get_coro()
    return getattr(coroutine, "__qualname__", None) or task.get_name()
