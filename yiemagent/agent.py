"""The agent: channels, the background loop thread, and the functions that drive it.

Spec: §1 Step 2.5 (the constructor), §5 (the agent loop), §6 (via ``run.process_message``),
§10 "continue()". Public functions: ``run_agent``, ``follow_up``, ``take_response``,
``continue_agent``, ``abort``, ``shutdown``.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Optional, Union

from .channels import Channel, LoopState
from .errors import AgentClosedError, EmptyHistoryError, MessageFormatError
from .events import EventEmitter
from .formatting import format_msg_for_llm as default_format_msg_for_llm
from .formatting import openai_to_user_message
from .formatting import prepare_context as default_prepare_context
from .messages import AgentMessage, AssistantMessage, LLMModel, LLMUsage
from .history import history_from_session
from .limits import DEFAULT_MAX_ROUNDS, check_max_rounds
from .registry import ToolStore
from .run import CONTINUE, Run, RunWorker, process_message
from .sessions import HistoryWriter, Session
from .tooling import DEFAULT_SYSTEM_PROMPT, AgentState
from .tools import register_builtin_tools, resolve_builtin_names
from .usage import UsageMeter

__all__ = ["YiemAgent", "abort", "continue_agent", "follow_up", "run_agent", "shutdown", "take_response"]

logger = logging.getLogger("yiemagent.agent")

_EXIT = "exit"


class YiemAgent:
    """An LLM agent that runs tools, driven through three channels (spec §1 Step 2.5, §5).

    The constructor takes or creates a ``ToolStore``, registers the built-in tools in it
    (those ``builtin_tools`` selects), builds the ``AgentState``, the channels
    ``input_channel`` (16), ``follow_up_channel`` (32) and ``output_channel`` (16), and
    starts the loop thread. Use it as a context manager to shut it down on exit.

    Built-ins are registered only under names still free in the store, so a tool a caller
    registered before (a stub ``getWeather`` in a test, say) is kept. ``max_retry_delay_ms``
    overrides the cap of an ``llm_call`` that has one: its ``max_retry_delay_ms`` attribute
    is set (``OpenAIClient``, ``AnthropicClient``).

    Issue 13 options (API.md "Agent options"): ``max_rounds`` caps the LLM rounds of one
    run (decision 12; None for no limit); ``builtin_tools`` is True, False or the names
    of the built-ins to register; ``session`` is where the history lives: the agent
    starts from ``session.messages()`` (tool calls a crash left unanswered get error
    results, stored too, see ``history.complete_tool_calls``) and stores each message as it
    enters the history. ``agent.usage`` is the token usage summed over all runs.

    Thread safety:
        Three threads take part. The caller's threads use the public functions, which
        may be called from any thread. The loop thread (``yiemagent-loop-*``) owns the
        loop bookkeeping and moves follow-ups; the run thread (``yiemagent-run-*``) runs
        ``process_message`` and is the only writer of ``state.messages``,
        ``state.pending_tool_calls`` and ``state.error_message``.
        ``_wake`` (a ``Condition``) guards the loop bookkeeping (``_run``, ``_run_done``,
        ``_run_response``, ``_pending_output``, ``_closing``, ``_force_exit``,
        ``_loop_exited``, ``loop_state``) and is the doorbell every channel rings after a
        put or get. ``_history_lock`` guards ``state.messages``: read it from another
        thread with ``agent.history()``, which returns a copy. Replace or edit
        ``state.messages`` directly only while the agent is idle (``wait_until_idle``);
        such edits bypass the session. ``_history_lock`` is held while a message is
        appended to the session, so the session's order is the history's.
        ``_added`` (messages ``add_message`` got during a run) is guarded by ``_wake``.
        ``agent.usage`` may be read from any thread (``UsageMeter``).
        The event sink is called from the run thread and tool threads, never two at once.
    """

    def __init__(
        self,
        *,
        llm_call: Callable[[dict[str, Any]], AssistantMessage],
        agent_event_sink: Optional[Callable[[Any], Any]],
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        model: Optional[LLMModel] = None,
        messages: Optional[list[AgentMessage]] = None,
        prepare_context: Optional[Callable[..., Any]] = None,
        format_msg_for_llm: Optional[Callable[..., Any]] = None,
        before_tool_call: Optional[Callable[..., Any]] = None,
        after_tool_call: Optional[Callable[..., Any]] = None,
        session_id: Optional[str] = None,
        max_retry_delay_ms: Optional[float] = None,
        parallel_tool_execute: bool = False,
        tool_store: Optional[ToolStore] = None,
        max_rounds: Optional[int] = DEFAULT_MAX_ROUNDS,
        builtin_tools: Union[bool, Iterable[str]] = True,
        session: Optional[Session] = None,
    ) -> None:
        if not callable(llm_call):
            raise TypeError(f"llm_call must be callable, got {type(llm_call).__name__}")
        if agent_event_sink is not None and not callable(agent_event_sink):
            raise TypeError(f"agent_event_sink must be callable or None, got {type(agent_event_sink).__name__}")
        self.max_rounds = check_max_rounds(max_rounds)
        builtin_names = resolve_builtin_names(builtin_tools)
        self.session = session
        if session is not None and messages is not None:
            raise ValueError("give either session= or messages=, not both: with a session the history comes from it")
        history = history_from_session(session) if session is not None else list(messages or [])
        for index, message in enumerate(history):
            if not isinstance(message, AgentMessage):
                raise MessageFormatError(f"messages[{index}] is {type(message).__name__}; expected an AgentMessage")
        self.session_id = session_id
        self.llm_call = llm_call
        self.agent_event_sink = agent_event_sink
        self.prepare_context = prepare_context or default_prepare_context
        self.format_msg_for_llm = format_msg_for_llm or default_format_msg_for_llm
        self.before_tool_call = before_tool_call
        self.after_tool_call = after_tool_call
        self.parallel_tool_execute = parallel_tool_execute
        self.max_retry_delay_ms = max_retry_delay_ms
        if max_retry_delay_ms is not None and hasattr(llm_call, "max_retry_delay_ms"):
            llm_call.max_retry_delay_ms = max_retry_delay_ms  # type: ignore[attr-defined]

        self.tool_store = tool_store if tool_store is not None else ToolStore(session_id or "agent")
        register_builtin_tools(self.tool_store, builtin_names, keep_existing=tool_store is not None)
        self.state = AgentState(system_prompt, model, self.tool_store.tools, history, set(), False, None)
        self._emit = EventEmitter(agent_event_sink)
        self._writer = HistoryWriter(self.state, session)  # where messages enter the history (issue 13)
        self._history_lock = self._writer.lock  # guards state.messages (and orders session appends)
        self._usage = UsageMeter()  # agent.usage: summed at the end of each run

        # the doorbell, and the lock of the loop bookkeeping below (see "Thread safety")
        self._wake = threading.Condition()
        self.input_channel = Channel(16, self._ring)
        self.follow_up_channel = Channel(32, self._ring)
        self.output_channel = Channel(16, self._ring)
        self._run: Optional[Run] = None
        self._run_done = False
        self._run_response: Optional[AssistantMessage] = None
        self._run_count = 0
        self._pending_output: deque[AssistantMessage] = deque()
        self._carry: deque[Any] = deque()  # follow-ups taken but not yet placed (input was full); loop thread only
        self._added: deque[AgentMessage] = deque()  # add_message during a run, for its next round; guarded by _wake
        self._closing = False
        self._force_exit = False
        self._loop_exited = False
        self.undelivered_responses: list[AssistantMessage] = []
        self.loop_state = LoopState.IDLE
        self.loop_state_history: deque[LoopState] = deque([LoopState.IDLE], maxlen=256)

        name = f"yiemagent-{session_id or hex(id(self))[2:]}"
        self._worker = RunWorker(f"{name}-run")
        self._thread = threading.Thread(target=self._agent_loop, name=f"{name}-loop", daemon=True)
        self._thread.start()

    # --- where messages enter the history (issue 13: sessions, add_message, usage) ----

    def _append(self, message: AgentMessage) -> None:
        """Every message of a run enters the history here (memory, then the session; never raises)."""
        self._writer.append(message)

    def _take_session_failure(self) -> Optional[str]:
        return self._writer.take_failure()

    def _take_added(self) -> None:
        """Append the messages ``add_message`` queued during a run (run thread at a round, or at the run's end)."""
        with self._wake:
            added = list(self._added)
            self._added.clear()
        for message in added:
            self._append(message)

    @property
    def usage(self) -> LLMUsage:
        """Token usage summed over every run of this agent so far (API.md "Usage", decision 13)."""
        return self._usage.total

    def history(self) -> list[AgentMessage]:
        """A copy of the conversation history, safe to take from any thread."""
        with self._history_lock:
            return list(self.state.messages)

    @property
    def closing(self) -> bool:
        """True once ``shutdown`` was called: no new run starts, no more input is taken."""
        return self._closing

    # --- the loop (spec §5) ---------------------------------------------------------

    def _ring(self) -> None:
        with self._wake:
            self._wake.notify_all()

    def _set_state(self, state: LoopState) -> None:
        """Record a loop state; called with ``_wake`` held."""
        if state is not self.loop_state:
            self.loop_state = state
            self.loop_state_history.append(state)
            self._wake.notify_all()

    def _next_action(self) -> Union[Callable[[], None], str, None]:
        """What the loop does next, or None to sleep until the doorbell rings (``_wake`` held)."""
        if self._force_exit:
            return _EXIT
        if self._run_done:
            return self._collect_run
        if self._pending_output and not self.output_channel.full():
            return self._deliver
        follow_ups = bool(self._carry) or not self.follow_up_channel.empty()
        if self._closing:
            if self._run is not None:
                return None
            self.undelivered_responses.extend(self._pending_output)  # no room, and nobody to wait for
            self._pending_output.clear()
            return _EXIT
        if self._run is None:
            if follow_ups and not self.input_channel.full():
                return self._move_follow_ups  # decision 7: a follow-up sent while idle starts a run
            if not self.input_channel.empty():
                return self._start_run
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
                with self._wake:
                    action = self._next_action()
                    while action is None:
                        self._wake.wait()
                        action = self._next_action()
                if action is _EXIT:
                    return
                action()  # type: ignore[operator]
        except BaseException:  # logged, not re-raised: the thread ends either way, and run_agent now refuses
            logger.exception("the agent loop failed; the agent stops serving")
        finally:
            with self._wake:
                self._loop_exited = True
                self._set_state(LoopState.IDLE)
                self._wake.notify_all()

    def _start_run(self) -> None:
        """State 2: a message is waiting and no run is active — start one (spec ``@spawn _processMessage``)."""
        with self._wake:
            self._set_state(LoopState.NEW_MESSAGE)
            self._run_count += 1
            run = Run(self._run_count)
            self._run = run
            self.state.active_run = True
            self._set_state(LoopState.PROCESSING)
        self._worker.submit(lambda: self._execute_run(run))

    def _execute_run(self, run: Run) -> None:
        """The run thread: process, then hand the response to the loop (or deliver it, if the loop is gone)."""
        response = process_message(self, run)
        with self._wake:
            if not self._loop_exited:
                self._run_response, self._run_done = response, True
                self._wake.notify_all()
                return
            self._run, self.state.active_run = None, False
            self._take_added()
        try:
            self.output_channel.put_nowait(response)
        except queue.Full:
            self.undelivered_responses.append(response)

    def _collect_run(self) -> None:
        """State 6: the run finished — queue its response for the output channel and reset."""
        with self._wake:
            self._set_state(LoopState.COMPLETED)
            assert self._run_response is not None
            self._pending_output.append(self._run_response)
            self._run, self._run_done, self._run_response = None, False, None
            self.state.active_run = False
            self._take_added()  # add_message during the run's last round: appended before another run starts

    def _deliver(self) -> None:
        with self._wake:
            response = self._pending_output.popleft()
        try:
            self.output_channel.put_nowait(response)
        except queue.Full:  # someone else filled it meanwhile: keep the response, wait for room
            with self._wake:
                self._pending_output.appendleft(response)

    def _move_follow_ups(self) -> None:
        """States 5 -> 4: move follow-ups into the input channel, in order, as far as it has room."""
        while True:
            if not self._carry:
                try:
                    self._carry.append(self.follow_up_channel.get_nowait())
                except queue.Empty:
                    return
            try:
                self.input_channel.put_nowait(self._carry[0])
            except queue.Full:
                return
            self._carry.popleft()

    def wait_until_idle(self, timeout: Optional[float] = None) -> bool:
        """Block until no run is active and nothing is queued; False if ``timeout`` passed first."""

        def idle() -> bool:
            return (
                self._run is None
                and not self._run_done
                and not self._pending_output
                and not self._carry
                and self.input_channel.empty()
                and self.follow_up_channel.empty()
                and (self.loop_state is LoopState.IDLE or self._loop_exited)
            )

        with self._wake:
            return self._wake.wait_for(idle, timeout)

    def __enter__(self) -> "YiemAgent":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            abort(self)
        shutdown(self)

    def __repr__(self) -> str:
        return f"YiemAgent(session_id={self.session_id!r}, loop_state={self.loop_state.name}, messages={len(self.state.messages)})"


def _as_user_input(agent: YiemAgent, message: Any) -> Any:
    if agent.closing:
        raise AgentClosedError("the agent has been shut down; it takes no more messages")
    if agent._loop_exited:
        raise AgentClosedError("the agent's loop thread has stopped (see the 'yiemagent.agent' log); it takes no more messages")
    if isinstance(message, str):
        return {"role": "user", "content": message}
    if not isinstance(message, AgentMessage):
        openai_to_user_message(message)  # validate now, in the caller's thread: raises MessageFormatError
    return message


def run_agent(agent: YiemAgent, message: Any) -> None:
    """Send a user message; the loop starts a run, or the active run takes it at its next LLM round.

    Spec: §1 Step 3, §16 (runAgent). ``message`` is an OpenAI-style dict
    ``{"role": "user", "content": ...}``, a plain string, or any ``AgentMessage`` (which
    enters the history as it is — e.g. the result an external system hands back after an
    async handoff, spec §10). Blocks while the input channel is full (16 messages).

    Raises:
        MessageFormatError: the message is not of a form a user message can take.
        AgentClosedError: the agent has been shut down.
    """
    agent.input_channel.put(_as_user_input(agent, message))


def follow_up(agent: YiemAgent, message: Any) -> None:
    """Send a follow-up: it joins the input after what is already queued (spec §5, decision 7).

    While a run is active the loop moves it into the input channel; while the agent is
    idle it starts a run. Takes the same messages as ``run_agent``.
    """
    agent.follow_up_channel.put(_as_user_input(agent, message))


def take_response(agent: YiemAgent, timeout: Optional[float] = None) -> AssistantMessage:
    """The next response from the output channel (spec §5 takeResponse).

    Raises:
        TimeoutError: no response came within ``timeout`` seconds.
    """
    try:
        return agent.output_channel.get(timeout=timeout)
    except queue.Empty:
        raise TimeoutError(f"no response from the agent within {timeout} s") from None


def continue_agent(agent: YiemAgent) -> None:
    """Run the LLM on the current history without a new user message (spec §10 "Async handoff").

    For instance after a terminating tool handed work to an external system whose
    result has since been added to the history.

    Raises:
        EmptyHistoryError: there is no conversation to continue.
        AgentClosedError: the agent has been shut down.
    """
    if agent.closing:
        raise AgentClosedError("the agent has been shut down; it cannot continue")
    with agent._wake:
        queued = agent._run is not None or bool(agent._carry) or not (agent.input_channel.empty() and agent.follow_up_channel.empty())
    if not queued and not agent.history():
        raise EmptyHistoryError("cannot continue: the conversation history is empty; send a message with run_agent first")
    agent.input_channel.put(CONTINUE)


def abort(agent: YiemAgent, reason: str = "aborted by abort()") -> bool:
    """Abort the active run: its signal fires, running tools see it, calls not yet run get
    "Operation aborted", and the run ends with stop_reason "aborted". False if no run is active.

    An LLM call in flight sees the signal through ``current_abort_signal()`` (a streaming
    client closes its connection); whatever it returns after the abort is dropped, never
    kept in the history (issue 14).
    """
    with agent._wake:
        run = agent._run
    if run is None:
        return False
    run.signal.abort(reason)
    return True


def shutdown(agent: YiemAgent, timeout: Optional[float] = None) -> list[Any]:
    """Stop the agent and return the messages that were still queued, so none is lost silently.

    The active run may finish (its response still goes to the output channel); after
    ``timeout`` seconds it is aborted and given ``timeout`` seconds more; a run still going
    after that (an LLM call that does not return) is left to finish on its daemon thread
    and delivers its response itself. Responses that find the output channel full are
    kept in ``agent.undelivered_responses``. Calling it again returns [].
    """
    with agent._wake:
        if agent._closing:
            return []
        agent._closing = True
        agent._wake.notify_all()
    agent._thread.join(timeout)
    if agent._thread.is_alive():
        abort(agent, f"aborted by shutdown: the run did not finish within {timeout} s")
        agent._thread.join(timeout)
    if agent._thread.is_alive():
        with agent._wake:
            agent._force_exit = True
            agent._wake.notify_all()
        agent._thread.join()
    agent._worker.stop()
    queued = [m for m in agent.input_channel.drain() if m is not CONTINUE]
    queued.extend(agent._carry)
    agent._carry.clear()
    queued.extend(agent.follow_up_channel.drain())
    return queued
