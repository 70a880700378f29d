"""The agent loop (spec §5): its channels, its six states, and the core that runs it.

Spec: §5 "Channel Architecture" (``Channel``), "Loop States" (``LoopState``), "Loop Logic"
(``AgentCore._agent_loop``), in that order; §6 is run.py. Decision 16 (how an agent stops:
``close``, ``abort``, ``join``, ``abandon``) ends the file.

The spec's loop wakes on either channel. ``queue.Queue`` cannot wait on two queues at
once, and waiting on one with a timeout and checking the other would be polling. So each
channel is a ``queue.Queue`` that also rings a doorbell — the agent's ``Condition`` — after
every put and get. The loop thread sleeps on that condition and re-reads the channels
when it rings: idle means blocked, and a message is acted on at once, whether it came
through ``run_agent`` or straight through ``agent.input_channel.put``. When the loop
sleeps and its next step is state 2 (a message for an idle agent), the ringing thread takes
that step itself, under the loop's lock, and the loop sleeps on (``AgentCore.ring``).

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

``YiemAgent`` (agent.py) is a thin shell around one ``AgentCore``. The threads own the
core and never the shell, so an agent its caller dropped without ``shutdown`` is
garbage-collected, and its finalizer closes the core, which lets the threads end
(Python's convention for unclosed resources: a ``ResourceWarning``, then the resources
are released). The core is also the run's host: it implements ``run.RunHost``, the
narrow interface through which a run reaches its agent.
"""

from __future__ import annotations

import contextvars
import enum
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Optional, Union

from ._format_cache import History
from .errors import AgentClosedError
from .events import EventEmitter, call_unstreamed
from .types import AgentLoopConfig, AgentMessage, AgentState, AssistantMessage, LLMUsage, UsageLimits, UsageMeter
from ._failures import describe_error
from .registry import ToolStore
from .run import CONTINUE, HistoryWriter, Run, process_message
from ._threads import RunWorker
from .history.sessions import Session

__all__ = ["AgentCore", "Channel", "LoopState", "current_core"]

logger = logging.getLogger("yiemagent.agent")

_EXIT = "exit"
_NO_MORE_RESPONSES = "the agent has been shut down and every response was taken"

current_core: contextvars.ContextVar[Optional["AgentCore"]] = contextvars.ContextVar("yiemagent_current_core", default=None)
"""The core whose run the current code is part of: set in the run thread and copied into
every tool thread, so that ``shutdown`` called from a tool, a hook or the event sink knows
it must not wait for the run it is part of."""


# --- spec §5 "Channel Architecture" -----------------------------------------------


class Channel(queue.Queue[Any]):
    """A ``queue.Queue`` that calls ``on_change()`` after every successful put or get, and can be closed.

    ``on_change`` is called without the queue's own lock held, so it may take other
    locks freely (no lock-order inversion with the loop, which reads ``qsize()`` while
    holding the agent's condition).

    With ``carry_context``, ``put`` also keeps ``contextvars.copy_context()`` of the putting
    thread beside the item (``_contexts``, in step with ``queue``: one entry per item);
    ``head_context`` and ``take_nowait`` read it, ``get`` and ``drain`` drop it.

    With ``done_when_taken`` (the input and follow-up channels, whose one consumer is the
    agent), an item counts as done (``task_done``) as it leaves the channel: taken by a run,
    moved by the loop, or drained by ``shutdown``. So ``join()`` returns once the agent has
    taken everything sent, and never waits for ever on an agent that stopped. The output
    channel's consumer is the caller, who calls ``task_done`` as ``queue.Queue`` asks.

    Thread safety: as ``queue.Queue``; any thread may put, get and close. ``_closed`` and
    ``_contexts`` are guarded by the queue's own ``mutex`` (the lock behind ``not_full``
    and ``not_empty``), which is what makes a close atomic with respect to every put and get.
    The methods enter ``mutex`` itself rather than either ``Condition``: the same lock, without
    the Python call a ``Condition``'s ``with`` makes to enter it (docs/performance.md "Frames a
    run no longer makes").
    """

    def __init__(self, maxsize: int, on_change: Optional[Callable[[], None]] = None, *, carry_context: bool = False, done_when_taken: bool = False) -> None:
        super().__init__(maxsize)
        self.on_change = on_change
        self._done_when_taken = done_when_taken
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
        if self._done_when_taken:
            self.unfinished_tasks -= 1
            if not self.unfinished_tasks:
                self.all_tasks_done.notify_all()
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
        with self.mutex:
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
        with self.mutex:
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
        with self.mutex:
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
        with self.mutex:
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

    def drain(self, ring: bool = True) -> list[Any]:
        """Take every item that is in the channel now, without blocking (closed or not); ``ring=False``: no ``on_change`` (the caller rings what it must)."""
        if not self._qsize():  # read without the lock (one length): an item put meanwhile is the next drain's, as it would be after it
            return []
        with self.mutex:
            items = [self._get_with()[0] for _ in range(self._qsize())]
            if items:
                self.not_full.notify_all()
        if items and ring and self.on_change is not None:
            self.on_change()
        return items


# --- spec §5 "Loop States" -------------------------------------------------------


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


# --- spec §5 "Loop Logic": the core and its loop thread ----------------------------


class AgentCore:
    """An agent's state, channels and threads; the host of its runs (``run.RunHost``).

    Thread safety:
        The caller's threads use the channels and ``close``. The loop thread
        (``yiemagent-*-loop``) owns the loop bookkeeping and moves follow-ups; the run
        thread (``yiemagent-*-run``) runs ``process_message`` and is the only writer of
        ``state.messages`` (through ``append``), ``state.pending_tool_calls`` and
        ``state.error_message``. ``_wake`` (a ``Condition`` on the ``RLock`` ``_lock``, which the
        code enters directly: holding ``_wake`` is holding ``_lock``) guards the loop
        bookkeeping (``_run``, ``_pending_output``, ``_delivering``,
        ``_carry``, ``_added``, ``_adding``, ``_closing``, ``_force_exit``, ``_loop_exited``,
        ``_asleep``, ``loop_state``) and is the doorbell every channel rings after a put or get; the
        loop thread alone sleeps on ``_bell`` (a ``Condition`` on the same lock), rung only
        when the loop may have a step to take. A ring that finds the loop asleep (``_asleep``,
        set by the loop thread as it waits) takes the loop's next step itself when that step
        is state 2: the sender's thread starts the run (``ring``) and the loop sleeps on. The run thread records state 6 itself, under
        ``_wake`` (``_run_and_hand_over``), delivers its response when nothing waits before
        it (``_deliver``, one at a time: ``_delivering``), and rings ``_bell`` only if the
        loop then has work.
        ``_history_lock`` (the ``HistoryWriter``'s ``lock``) guards ``state.messages``;
        the writer's ``store_lock`` orders session appends. No user code (a session, a
        hook) ever runs with ``_wake`` held, and no thread waits for a history lock while
        holding ``_wake``: a session that stalls holds up only the thread storing. ``usage``
        may be read from any thread (``UsageMeter``). The event sink is called through
        ``emit``, never from two threads at once (decision 8).
    """

    def __init__(
        self,
        *,
        name: str,
        llm_call: Callable[[dict[str, Any]], AssistantMessage],
        agent_event_sink: Optional[Callable[[Any], Any]],
        state: AgentState,
        tool_store: ToolStore,
        prepare_context: Callable[..., Any],
        format_msg_for_llm: Callable[..., Any],
        before_tool_call: Optional[Callable[..., Any]],
        after_tool_call: Optional[Callable[..., Any]],
        parallel_tool_execute: bool,
        max_rounds: Optional[int] = None,
        usage_limits: Optional[UsageLimits] = None,
        session: Optional[Session] = None,
        output_spec: Any = None,
        deps: Any = None,
        compactor: Any = None,
    ) -> None:
        self.output_spec = output_spec  # typed/output.py OutputSpec, or None (beyond the spec)
        self.compactor = compactor  # context/compaction.py Compactor, or None (beyond the spec)
        self.deps = deps  # handed to tools in their RunContext (types.py; beyond the spec)
        self.llm_call = llm_call
        self.prepare_context = prepare_context
        self.format_msg_for_llm = format_msg_for_llm
        self.before_tool_call = before_tool_call
        self.after_tool_call = after_tool_call
        self.parallel_tool_execute = parallel_tool_execute
        self.tool_store = tool_store
        self.state = state
        self.emit = EventEmitter(agent_event_sink)
        self.max_rounds = max_rounds
        self.usage_limits = usage_limits  # UsageLimits or None; read by each run (run.py)
        self.session = session
        self._writer = HistoryWriter(state, session)  # where messages enter the history (docs/sessions.md)
        # run.RunHost's append and take_session_failure are the writer's own: a run reaches it in one call (docs/performance.md "W1")
        self.append = self._writer.append
        self.take_session_failure = self._writer.take_failure
        self._history_lock = self._writer.lock  # guards state.messages (and orders session appends)
        self._usage = UsageMeter()  # summed at the end of each run

        # the doorbell, and the lock of the loop bookkeeping below (see "Thread safety"); the
        # loop thread alone sleeps on _bell, the same lock: a ring that cannot change what the
        # loop does next (a state recorded, a run's start or end with nothing queued) leaves it asleep
        lock = self._lock = threading.RLock()  # entered directly, not through a Condition (class docstring)
        self._wake = threading.Condition(lock)
        self._bell = threading.Condition(lock)
        # the input channels keep each message's sender's context: the run it starts runs in it
        self.input_channel = Channel(16, self.ring, carry_context=True, done_when_taken=True)
        self.follow_up_channel = Channel(32, self.ring, carry_context=True, done_when_taken=True)
        self.output_channel = Channel(16, self._output_changed)
        self._run: Optional[Run] = None
        self._run_count = 0
        self._pending_output: deque[AssistantMessage] = deque()
        self._delivering = False  # a response is being put on the output channel (_deliver)
        # follow-ups taken but not yet placed (input was full), each with its sender's context
        self._carry: deque[tuple[Any, Optional[contextvars.Context]]] = deque()
        # add_message during a run, for its next round: each message with its ``before`` (add_message)
        self._added: deque[tuple[AgentMessage, Callable[[list[AgentMessage]], Sequence[AgentMessage]]]] = deque()
        self._adding = 0  # add_message calls storing while idle: no run starts until they are in the history
        self._before_lock = threading.Lock()  # one idle add_message at a time reads the history, appends what goes before its message, then the message
        self._closing = False
        self._asleep = False  # the loop thread waits on _bell (set and cleared by it, under _wake): a ring may take its next step
        self._force_exit = False
        self._loop_exited = False
        self.undelivered_responses: list[AssistantMessage] = []
        self.loop_state = LoopState.IDLE
        self.loop_state_history: deque[LoopState] = deque([LoopState.IDLE], maxlen=256)

        self._worker = RunWorker(f"{name}-run")
        self._thread = threading.Thread(target=self._agent_loop, name=f"{name}-loop", daemon=True)
        self._thread.start()

    # --- the loop (spec §5) ---------------------------------------------------------

    def _set_state(self, state: LoopState) -> None:
        """Record a loop state; called with ``_wake`` held. Wakes the watchers (``wait_until_idle``), not the loop."""
        if state is not self.loop_state:
            self.loop_state = state
            self.loop_state_history.append(state)
            self._wake.notify_all()

    def _next_action(self) -> Union[Callable[[], None], str, None]:
        """What the loop does next, or None to sleep until the doorbell rings (``_wake`` held)."""
        if self._force_exit:  # join gave up on the run: what waits for room is kept, before that run's response
            if not self._delivering:  # else the thread delivering does it, at its next step
                self._give_up_output()
            return _EXIT
        if self._pending_output and not self._delivering and not self.output_channel.full():
            return self._deliver
        if self._closing:
            if self._run is not None or self._delivering:  # its run's end, or the delivery, rings when done
                return None
            self._give_up_output()  # no room, and nobody to wait for
            return _EXIT
        follow_ups = bool(self._carry) or not self.follow_up_channel.empty()
        if self._run is None:
            if follow_ups and not self.input_channel.full():
                return self._move_follow_ups  # decision 7: a follow-up sent while idle starts a run
            if not self.input_channel.empty():
                # a run starts once every add_message storing meanwhile is in the history
                return self._start_run if not self._adding else None
            self._set_state(LoopState.IDLE)
            return None
        if follow_ups and not self.input_channel.full():
            self._set_state(LoopState.FOLLOW_UP_QUEUED)
            return self._move_follow_ups
        if follow_ups:
            self._set_state(LoopState.FOLLOW_UP_QUEUED)
        elif self._run.took_first_input and not self.input_channel.empty():
            self._set_state(LoopState.INPUT_QUEUED)
        else:
            self._set_state(LoopState.PROCESSING)
        return None

    def _agent_loop(self) -> None:
        """The loop thread (spec §5 ``_agentLoop``): blocked until a channel or the run rings."""
        try:
            while True:
                with self._lock:
                    action = self._next_action()
                    while action is None:
                        self._asleep = True
                        self._bell.wait()
                        self._asleep = False
                        action = self._next_action()
                if action is _EXIT:
                    return
                action()  # type: ignore[operator]
        except BaseException:  # logged, not re-raised: the thread ends either way, and sends now raise
            logger.exception("the agent loop failed; the agent stops serving")
        finally:
            why = "the agent's loop thread has stopped (see the 'yiemagent.agent' log); it takes no more messages"
            with self._lock:
                self._loop_exited = True
                self._asleep = False  # no ring takes a step of a loop that has gone
                self.input_channel.close(why)
                self.follow_up_channel.close(why)
                if self._run is None:  # else the run delivers its response, then closes the output
                    self.output_channel.close(_NO_MORE_RESPONSES if self._closing else why)
                stored_last = self._run is None  # no run will store another message
                self._set_state(LoopState.IDLE)
                self._wake.notify_all()
            self._worker.stop()
            if stored_last:
                self._writer.release()  # decision 17: the session's hold ends with the agent (docs/sessions.md)

    def _start_run(self) -> None:
        """State 2: a message is waiting and no run is active — start one (spec ``@spawn _processMessage``).

        All or nothing, under ``_wake``: a run made the active one is handed to the run thread
        even when this thread is interrupted meanwhile (a ``KeyboardInterrupt`` in a sender
        taking the step in ``ring``): the ``finally`` hands it over in one call into C
        (``RunWorker.submit``), so no run is ever active that nothing runs. Interrupted before
        the run is made active, none is on, and ``ring`` has the loop take the step again.
        """
        with self._lock:
            run = Run(self._run_count + 1)
            try:
                self._set_state(LoopState.NEW_MESSAGE)
                self._run_count, self._run, self.state.active_run = run.id, run, True
                self._set_state(LoopState.PROCESSING)
            finally:
                if self._run is run:  # active: handed over, in state 3 (again, if interrupted before), whatever interrupted this thread
                    self._worker.submit(lambda: self._execute_run(run))
                    self._set_state(LoopState.PROCESSING)

    def _execute_run(self, run: Run) -> None:
        """The run thread: the run, in a copy of the context its first input was sent in (docs/tracing.md).

        Its hooks, tools (``tool_pool`` copies the run thread's context) and sink see what
        the sender set; nothing the run sets leaks back. No input left (``shutdown`` took
        it): an empty context. Never inside the sender's LLM-call stream (``call_unstreamed``).
        """
        sent_in = self.input_channel.head_context()
        context = sent_in.copy() if sent_in is not None else contextvars.Context()
        context.run(call_unstreamed, self._run_and_hand_over, run)

    def _run_and_hand_over(self, run: Run) -> None:
        """Process, then hand the response to the loop (or deliver it, if the loop is gone).

        Messages ``add_message`` queued during the last round are appended here, without
        ``_wake``, before the run is marked done (after which ``add_message`` appends at
        once): they land in order, before the next run's input, each after what must go in
        before it, as when appended at once (decision 18: the answers to the calls that
        round deferred).
        """
        token = current_core.set(self)
        try:
            response = process_message(self, run)
        except BaseException as exc:  # process_message contains everything; a bug must still end the run, or the loop waits for ever
            logger.exception("run %d failed outside its pipeline", run.id)
            response = AssistantMessage([], stop_reason="error", error_message=f"internal error: {describe_error(exc)}")
        finally:
            current_core.reset(token)
        while True:
            with self._lock:
                added = list(self._added)
                self._added.clear()
                if not added:
                    alone = self._loop_exited
                    self._run, self.state.active_run = None, False
                    self._pending_output.append(response)
                    if alone:  # after the responses still waiting, with the run's end: never idle before it is out
                        self._give_up_output()
                    else:  # state 6 (spec §5 "Loop States"), in this thread: the loop is not woken to record it
                        self._set_state(LoopState.COMPLETED)
                    break
            for message, before in added:  # outside _wake: the session may be slow
                for earlier in self._before(message, before):
                    self.append(earlier)
                self.append(message)
        if alone:
            self._hand_over_alone()
            return
        self._deliver()
        with self._lock:  # the loop's next step, decided under the lock it decides under
            try:
                wakes = self._next_action() is not None
            except BaseException:  # a bug in the loop's step: the loop meets it too, logs it and stops serving
                wakes = True
            if wakes:
                self._bell.notify()

    def _hand_over_alone(self) -> None:
        """The loop has gone (decision 16) and the run's response is out (``_give_up_output``): close the output channel, release the session."""
        self.output_channel.close(_NO_MORE_RESPONSES)
        self._writer.release()  # decision 17: the loop has gone, and this run stored the agent's last message

    def _give_up_output(self) -> None:
        """No loop will wait for room again (shutdown, decision 16): put the waiting responses, in order, while the output channel has room, and keep the rest in ``undelivered_responses``.

        Called with ``_wake`` held and no delivery in flight (``put_internal`` never blocks).
        A response never goes into the channel after one kept: the channel's responses come
        before the kept ones, in the order of their runs.
        """
        while self._pending_output and not self.undelivered_responses:
            try:
                self.output_channel.put_internal(self._pending_output[0])
            except queue.Full:
                break
            self._pending_output.popleft()
        self.undelivered_responses.extend(self._pending_output)
        self._pending_output.clear()

    def _deliver(self) -> None:
        """Put the oldest waiting response into the output channel, if it has room; one delivery at a time (``_delivering``), so that responses keep their order.

        Called by the loop, and by the run thread as its run ends (the response it has just
        queued goes out without waking the loop). The put is made without ``_wake`` held;
        while it is made ``_delivering`` is set: no other delivery starts, and the agent is
        not idle. Once ``join`` has given up (``_force_exit``), a response delivered so could
        follow one ``_give_up_output`` kept (the join's ring keeps them before the loop thread
        exits): it goes through ``_give_up_output`` instead, after them (decision 16).
        """
        with self._lock:
            if self._delivering or not self._pending_output:
                return
            if self._force_exit:
                self._give_up_output()
                return
            response = self._pending_output.popleft()  # first: the channel's doorbell then finds none waiting
            self._delivering = True
        try:
            self.output_channel.put_internal(response)
        except queue.Full:  # someone else filled it meanwhile: keep the response, wait for room
            with self._lock:
                self._pending_output.appendleft(response)
        finally:
            with self._lock:
                self._delivering = False
                self._wake.notify_all()

    def _move_follow_ups(self) -> None:
        """States 5 -> 4: move follow-ups into the input channel, in order, as far as it has room.

        Holds ``_wake`` so that ``close`` sees either none or all of a move: a follow-up
        is never in flight between the channels when ``shutdown`` collects them.
        """
        with self._lock:
            while not self._closing:
                if not self._carry:
                    try:
                        self._carry.append(self.follow_up_channel.take_nowait())
                    except queue.Empty:
                        return
                try:
                    self.input_channel.put_internal(*self._carry[0])  # with the context it was sent in
                except queue.Full:
                    return
                self._carry.popleft()

    def wait_until_idle(self, timeout: Optional[float] = None) -> bool:
        """Block until no run is active and nothing is queued; False if ``timeout`` passed first."""

        def idle() -> bool:
            return (
                self._run is None
                and not self._pending_output
                and not self._delivering
                and not self._carry
                and not self._adding
                and self.input_channel.empty()
                and self.follow_up_channel.empty()
                and (self.loop_state is LoopState.IDLE or self._loop_exited)
            )

        with self._lock:
            return self._wake.wait_for(idle, timeout)

    def wait_for(self, predicate: Callable[[], bool], timeout: Optional[float]) -> bool:
        """Block until ``predicate()`` holds, read again at every ring of the doorbell; False if ``timeout`` passed first.

        ``predicate`` is called with ``_wake`` held (it may call ``run_over``) and must not
        block. A ``RunStream`` waits so for its run's next event (docs/streaming.md).
        """
        with self._lock:
            return self._wake.wait_for(predicate, timeout)

    def run_over(self, run_id: Optional[int]) -> bool:
        """With ``_wake`` held: run ``run_id`` is no longer active; for None (a run not started yet), no run will start again."""
        if run_id is None:
            return self._loop_exited  # runs start while the loop lives (by it, or by a ring while it sleeps): none after it ended
        run = self._run
        return run is None or run.id != run_id

    # --- run.RunHost: what a run may touch --------------------------------------------

    @property
    def agent_event_sink(self) -> Optional[Callable[[Any], Any]]:
        return self.emit.sink

    @agent_event_sink.setter
    def agent_event_sink(self, sink: Optional[Callable[[Any], Any]]) -> None:
        self.emit.sink = sink

    @property
    def closing(self) -> bool:
        """True once the agent is being shut down: no new run starts, no more input is taken."""
        return self._closing

    @property
    def loop_exited(self) -> bool:
        """True once the loop thread has stopped (after ``shutdown``, or a bug in the loop)."""
        return self._loop_exited

    def busy(self) -> bool:
        """True while a run is active or input is queued for one."""
        with self._lock:
            return self._run is not None or bool(self._carry) or not (self.input_channel.empty() and self.follow_up_channel.empty())

    _loop_config: Optional[AgentLoopConfig] = None  # the last one made: a batch reuses it while the hooks and mode are the same

    def loop_config(self) -> AgentLoopConfig:
        """The hooks and execution mode for the next batch (read afresh, so a change applies at once)."""
        mode = "parallel" if self.parallel_tool_execute else "sequential"
        config = self._loop_config
        if config is None or config.before_tool_call is not self.before_tool_call or config.after_tool_call is not self.after_tool_call or config.tool_execution != mode:
            config = self._loop_config = AgentLoopConfig(self.before_tool_call, self.after_tool_call, mode)
        return config

    def take_input(self) -> list[Any]:
        """Every queued input item, in order ([] once closing: ``shutdown`` returns those).

        The run's first take marks the run as having taken its first input (the loop then
        reads input still queued as INPUT_QUEUED) under ``_wake``, with the drain: the loop is
        woken only if that changes its next step (it recorded FOLLOW_UP_QUEUED: follow-ups
        wait for the room just made), not for a plain run's start.
        """
        if self._closing:
            return []
        run = self._run  # set by the loop before it handed this run to the run thread
        if run is None or run.took_first_input:
            return self.input_channel.drain()
        with self._lock:
            items = self.input_channel.drain(ring=False)
            run.took_first_input = True
            # asleep in PROCESSING, the loop saw no follow-up and no input it could call queued; a put since rang for
            # itself: only another state recorded (follow-ups waiting for the room just made) is the loop's to redo
            if self.loop_state is not LoopState.PROCESSING:
                self._bell.notify()
            self._wake.notify_all()
        return items

    append: Callable[[AgentMessage], None]
    """Add one message to the history (the run checked it can be sent again, decision 15): ``HistoryWriter.append``.

    Memory first, then the session (docs/sessions.md); never raises: a store that failed is
    reported by ``take_session_failure`` before the next LLM round. The writer's own method,
    set in ``__init__``, so that the run's two appends a round are one call each, not two.
    """

    def input_waiting(self) -> bool:
        """Whether step 1 has anything to take: a message ``add_message`` queued, or an item on the input channel.

        The run asks it at the top of each round after the first, and takes input (``take_added``,
        ``take_input``) only when it says so: a round with nothing queued pays this one check
        (docs/performance.md "W1"). Read without a lock, as ``take_added`` and ``Channel.drain``
        read the same two lengths first: a message put or added after the read is seen by the
        next round's check, as it would be by a take a moment earlier, and one still there when
        the run ends is the next run's input, or appended by ``_run_and_hand_over`` (an added
        one). Closing, it may say True for input that ``take_input`` then leaves to ``shutdown``.
        """
        return bool(self._added or self.input_channel.queue)

    def take_added(self) -> list[AgentMessage]:
        """The messages ``add_message`` queued during the run, in order (the run answers what waits before each)."""
        if not self._added:  # read without the lock: one added meanwhile is taken at the next round, as it would be after it
            return []
        with self._lock:
            added = [message for message, _ in self._added]
            self._added.clear()
        return added

    def _before(self, message: AgentMessage, before: Callable[[list[AgentMessage]], Sequence[AgentMessage]]) -> Sequence[AgentMessage]:
        """What must enter the history before ``message``, queued during the run that has just ended (``add_message``).

        ``before`` raises for a decision whose call no longer waits: the run answered it
        meanwhile, and the step goes in alone, as a run appends such a step (approvals.py).
        """
        try:
            return before(self.history())
        except Exception:  # logged, not raised: the run is over and its response must still reach the loop
            logger.warning("a message added during the run's last round: what goes before it could not be read", exc_info=True)
            return []

    take_session_failure: Callable[[], Optional[str]]
    """Why the session could not store a message since the last call, or None (docs/failures.md): ``HistoryWriter.take_failure``, set in ``__init__``."""

    def record_usage(self, usage: LLMUsage) -> None:
        """Add one run's usage to the agent's total (decision 13)."""
        self._usage.add(usage)

    @property
    def usage(self) -> LLMUsage:
        """Token usage summed over every run so far (decision 13)."""
        return self._usage.total

    def add_message(self, message: AgentMessage, before: Callable[[list[AgentMessage]], Sequence[AgentMessage]]) -> None:
        """``history.add_message``: append now while no run appends (stored first), else queue for the run's next round.

        Decided under ``_wake``; appending now, the call counts itself in ``_adding`` (no run
        starts while it is non-zero) and stores without ``_wake``, so a stalled session
        blocks this caller and the next run's start, never a send or ``shutdown``. Raises
        ``AgentClosedError`` once closing, or what the session raised (nothing added).
        Appending now, ``before(history)`` gives the messages that must go in first (the
        answers to calls waiting for approval, decision 18) or raises (a decision whose call
        is no longer waiting), under ``_before_lock``, so that two callers do not both answer
        the same calls and a decision never follows its call's answer; a queued message
        leaves that to the run, or to the end of the run (``_run_and_hand_over``).
        """
        with self._lock:
            if self._closing:
                raise AgentClosedError("the agent has been shut down; it takes no more messages")
            if self._run is not None:
                self._added.append((message, before))  # the run appends it at its next round, or as it ends
                return
            self._adding += 1
        try:
            with self._before_lock:
                for earlier in before(self.history()):
                    self._writer.append_stored_first(earlier)
                self._writer.append_stored_first(message)
        finally:
            with self._lock:
                self._adding -= 1
                self.ring()

    def history(self) -> list[AgentMessage]:
        """A copy of the conversation history, safe to take from any thread."""
        with self._history_lock:
            messages = self.state.messages
            return messages[:] if type(messages) is History else list(messages)  # a History's slice is one copy in C; list() goes item by item

    def ring(self) -> None:
        """Wake every watcher, and have the loop's next step taken: state 2 by this thread when the loop sleeps, any other by the loop.

        A message sent to an idle agent starts its run here, in the sender's thread, under
        ``_wake``: the states and the decision are the loop's own (``_next_action``,
        ``_start_run``), taken as the loop would take them on waking, without waking it
        (one thread hand-off a run fewer: docs/performance.md "The run's own cost"). Only
        while the loop thread waits on ``_bell`` (``_asleep``): then it cannot be between
        deciding a step and taking it, and on waking it decides again under the same lock,
        so a run is never started twice. Any other step (follow-ups to move, a response
        waiting for room, an exit) rings the loop; nothing to do leaves it asleep. No user
        code runs here: the run itself is the run thread's (``RunWorker``). This thread
        interrupted meanwhile (a ``KeyboardInterrupt``, Ctrl-C in a main thread that sends)
        leaves no run half started (``_start_run``): the loop is rung to decide again, and the
        interruption reaches the caller, never swallowed.
        """
        with self._lock:
            self._wake.notify_all()
            if self._asleep:
                try:
                    action = self._next_action()
                    if action == self._start_run:  # a bound method: equal, not identical, to the one _next_action returned
                        self._start_run()
                        return
                except Exception:  # a bug in the loop's step: the loop meets it too (woken below), logs it and stops serving
                    action = _EXIT
                except BaseException:  # this thread interrupted (KeyboardInterrupt): its caller gets it, the loop decides again
                    self._bell.notify()
                    raise
                if action is None:
                    return
            self._bell.notify()

    def _output_changed(self) -> None:
        """The output channel's doorbell: the watchers look again; the loop only if a response waits for room."""
        with self._lock:
            self._wake.notify_all()
            if self._pending_output:
                self._bell.notify()

    # --- closing (decision 16) -------------------------------------------------------

    def close(self, why: str) -> Optional[list[Any]]:
        """Start shutting down without waiting; return what was queued, or None if already closing.

        Atomic with respect to every send: the input channels are closed (a send blocked
        on a full channel wakes and raises ``AgentClosedError``) and emptied under
        ``_wake``, which the loop holds while it moves follow-ups, so every message that
        was accepted is either already in the history or in the list returned here.
        """
        with self._lock:
            if self._closing:
                return None
            self._closing = True
            self.input_channel.close(why)
            self.follow_up_channel.close(why)
            queued = [m for m in self.input_channel.drain() if m is not CONTINUE]
            queued.extend(item for item, _ in self._carry)
            self._carry.clear()
            queued.extend(self.follow_up_channel.drain())
            self.ring()
        return queued

    def abort(self, reason: str) -> bool:
        """Fire the active run's signal; False if no run is active."""
        with self._lock:
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
        """Wait for the loop thread (and the run thread it stops): ``timeout``, then abort the run and wait ``timeout`` more, then leave it.

        Returns (and takes out) the messages ``add_message`` queued for a run left running,
        which may never reach another round: ``shutdown`` returns them (decision 16).
        """
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.abort(f"aborted by shutdown: the run did not finish within {timeout} s")
            self._thread.join(timeout)
        if not self._thread.is_alive():
            # the loop stopped the run thread as it exited, after the last run ended: wait for it
            # too, so that shutdown leaves no thread of the agent behind
            self._worker.thread.join(timeout)
            return []
        with self._lock:
            self._force_exit = True
            self.ring()
        self._thread.join()
        return self.take_added()

    def abandon(self) -> None:
        """The shell was garbage-collected without ``shutdown``: close, abort the run, let the threads end."""
        queued = self.close("the agent was garbage-collected without shutdown")
        self.abort("aborted: the agent was garbage-collected without shutdown")
        if queued:
            logger.warning("an agent dropped without shutdown had %d queued message(s); they were discarded", len(queued))
