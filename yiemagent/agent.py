"""The agent's public face: ``YiemAgent`` and the functions that drive it.

Spec: §1 Step 2.5 (the constructor), §5 (the agent loop), §6 (via ``run.process_message``),
§10 "continue()"; decisions 15 and 16. Public functions: ``run_agent``, ``follow_up``,
``take_response``, ``continue_agent``, ``abort``, ``shutdown``; beyond the spec ``ask`` and
``resume`` (one run, one reply).

``YiemAgent`` is a shell around an ``AgentCore`` (``_core.py``), which holds the state, the
channels and the threads. The threads hold the core, never the shell: an agent dropped
without ``shutdown`` is collected, and its finalizer closes the core so that its threads
end (docs/failures.md).
"""

from __future__ import annotations

import logging
import queue
import time
import warnings
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Optional, Union

from ._threads import start_daemon
from .approvals import approve, pending_approvals, reject, superseding_results
from .loop import AgentCore
from ._format_cache import History
from .errors import AgentClosedError, EmptyHistoryError, MessageFormatError
from .formatting import format_msg_for_llm as default_format_msg_for_llm
from .formatting import openai_to_user_message
from .formatting import prepare_context as default_prepare_context
from .history import each_message, history_from_session
from .run import DEFAULT_MAX_ROUNDS, check_max_rounds
from .types import AgentMessage, AgentState, AssistantMessage, CompactionMessage, DEFAULT_SYSTEM_PROMPT, LLMModel, UsageLimits
from .normalize import normalize_message
from .registry import ToolStore, register_tool
from .run import CONTINUE, NOTHING_TO_CONTINUE
from .run_stream import AskLock, RunStream
from .history.sessions import Session, hold_session, release_session
from .typed.output import OutputSpec, check_output_mode
from .tools import agent_tools, register_builtin_tools, resolve_builtin_names
from .context import make_compactor

__all__ = [
    "YiemAgent",
    "abort",
    "add_message",
    "approve",
    "ask",
    "continue_agent",
    "follow_up",
    "pending_approvals",
    "reject",
    "resume",
    "run_agent",
    "shutdown",
    "stream",
    "take_response",
]

logger = logging.getLogger("yiemagent.agent")


class _Forward:
    """An attribute of ``YiemAgent`` that lives on its core (read-write, or read-only)."""

    def __init__(self, writable: bool = False) -> None:
        self.writable = writable
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else getattr(obj._core, self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        if not self.writable:
            raise AttributeError(f"YiemAgent.{self.name} cannot be replaced")
        setattr(obj._core, self.name, value)


def _require_callable(argument: str, value: Any, optional: bool = True) -> None:
    if value is None and optional:
        return
    if not callable(value):
        expected = "a callable or None" if optional else "a callable"
        raise TypeError(f"YiemAgent({argument}=...) expects {expected}, got {type(value).__name__}: {value!r:.80}")


def _finalize(core: AgentCore, name: str) -> None:
    """The shell was collected: warn as Python does for unclosed resources, then release the threads."""
    if core.closing:
        return
    # stacklevel 3: the line that dropped the agent (2 would be weakref.finalize.__call__)
    warnings.warn(f"agent {name!r} was garbage-collected without shutdown(); its threads are released", ResourceWarning, stacklevel=3)
    # on a thread of its own: a finalizer may run inside any thread, even one holding a channel's lock
    start_daemon(core.abandon, f"{name}-abandon")


class YiemAgent:
    """An LLM agent that runs tools, driven through three channels (spec §1 Step 2.5, §5).

    The constructor takes or creates a ``ToolStore``, registers the tools asked for in it,
    builds the ``AgentState``, the channels ``input_channel`` (16), ``follow_up_channel``
    (32) and ``output_channel`` (16), and starts the loop thread. Use it as a context
    manager to shut it down on exit. An agent dropped without ``shutdown`` releases its
    threads when it is garbage-collected (with a ``ResourceWarning``).

    No built-in tool is registered unless asked for (decision 19: the spec's constructor
    calls ``register_all_tools``, docs/conformance.md "Deviations"): ``builtin_tools=True``
    registers the spec's four. Built-ins are registered only under names still free in the
    store, so a tool a caller registered before (a stub ``getWeather`` in a test, say) is
    kept. ``tools`` (``AgentTool``s, and functions that ``tool()`` wraps) are registered
    after them, in order. ``max_retry_delay_ms``
    overrides the cap of an ``llm_call`` that has one: its ``max_retry_delay_ms`` attribute
    is set (``OpenAIClient``, ``AnthropicClient``).

    Options beyond the spec (docs/api.md "Agent options"): ``max_rounds`` caps the LLM rounds of one
    run (decision 12; None for no limit); ``usage_limits`` (a ``UsageLimits``) caps its tokens and tool
    calls (stop_reason "usage_limit"); ``builtin_tools`` is False (the default), True or
    the names of the built-ins to register; ``session`` is where the history lives: the agent
    starts from ``session.messages()`` (tool calls a crash left unanswered get error
    results, stored too, see ``history.complete_tool_calls``) and stores each message as it
    enters the history. ``agent.usage`` is the token usage summed over all runs.
    ``output_type`` / ``output_retries`` make the final answer typed (``typed/output.py``,
    docs/api.md "Typed answers"); ``output_mode`` says how the model gives it: "tool" (the
    ``final_result`` tool), "native" (the provider's JSON-schema mode), "auto" (native where
    ``llm_call`` names its server's, else the tool; docs/api.md "Native typed answers");
    ``deps`` is what tools receive in their ``RunContext``
    (``types.py``). ``context_window`` and ``compaction`` (``TrimHistory``, ``SummarizeHistory``)
    decide what a request sends once the history outgrows the window (docs/sessions.md
    "Long conversations"); one without the other is a ``ValueError`` (the window may come
    from ``model.context_window``).

    Raises:
        TypeError: an argument has the wrong type (``llm_call``, the sink or a hook not
            callable, ``tool_store`` not a ``ToolStore``); the message names the argument.
        MessageFormatError: an entry of ``messages`` (or of the session) cannot be sent to
            an LLM (decision 15).
        ValueError: both ``session`` and ``messages`` given; a bad ``max_rounds``; an
            unknown name in ``builtin_tools``; two tools of one name in ``tools`` (or one
            named as a built-in asked for, or as a tool of the store given), naming it;
            ``output_type`` with a store that already has a ``final_result`` tool; a
            negative ``output_retries``; an ``output_mode`` other than the three; ``compaction``
            without a context window or ``context_window`` without a ``compaction``. Nothing is
            started or registered then.
        ToolDefinitionError: an ``output_type`` JSON Schema cannot express; a function in
            ``tools`` that ``tool()`` cannot wrap.

    Thread safety:
        Three threads take part. The caller's threads use the public functions, which
        may be called from any thread. The loop thread (``yiemagent-*-loop``) and the
        run thread (``yiemagent-*-run``) belong to the core (see ``AgentCore``). Read
        the history from another thread with ``agent.history()``, which returns a copy;
        replace or edit ``state.messages`` directly only while the agent is idle
        (``wait_until_idle``). ``state.messages`` is a ``History`` (a list that counts
        its edits, so the formatter knows when it may reuse the previous request's wire
        dicts, docs/performance.md); editing it in place keeps that, e.g. ``state.messages[:] =
        load_history(path)``. A list assigned to ``state.messages`` is used as it is (it
        stays the caller's list): every round is then formatted from each message's
        own cache, exactly, at about 0.12 µs per message (docs/performance.md). The event sink is called from the run thread and tool
        threads, never two at once. The hooks and ``llm_call`` may be replaced between
        runs; a change applies from the next LLM round or batch.
    """

    llm_call = _Forward(writable=True)
    agent_event_sink = _Forward(writable=True)
    prepare_context = _Forward(writable=True)
    format_msg_for_llm = _Forward(writable=True)
    before_tool_call = _Forward(writable=True)
    after_tool_call = _Forward(writable=True)
    parallel_tool_execute = _Forward(writable=True)
    state = _Forward()
    tool_store = _Forward()
    input_channel = _Forward()
    follow_up_channel = _Forward()
    output_channel = _Forward()
    loop_state = _Forward()
    loop_state_history = _Forward()
    undelivered_responses = _Forward()
    closing = _Forward()
    session = _Forward()
    max_rounds = _Forward()
    usage_limits = _Forward()
    usage = _Forward()  # LLMUsage summed over every run (decision 13)

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
        builtin_tools: Union[bool, Iterable[str]] = False,
        session: Optional[Session] = None,
        output_type: Any = None,
        output_retries: int = 1,
        output_mode: str = "tool",
        deps: Any = None,
        usage_limits: Optional[UsageLimits] = None,
        tools: Iterable[Any] = (),
        context_window: Optional[int] = None,
        compaction: Any = None,
    ) -> None:
        _require_callable("llm_call", llm_call, optional=False)
        check_output_mode(output_mode)
        compactor = make_compactor(compaction, context_window, model)
        output_spec = OutputSpec(output_type, output_retries, output_mode) if output_type is not None else None
        for argument, value in (
            ("agent_event_sink", agent_event_sink),
            ("prepare_context", prepare_context),
            ("format_msg_for_llm", format_msg_for_llm),
            ("before_tool_call", before_tool_call),
            ("after_tool_call", after_tool_call),
        ):
            _require_callable(argument, value)
        if tool_store is not None and not isinstance(tool_store, ToolStore):
            raise TypeError(f"YiemAgent(tool_store=...) expects a ToolStore or None, got {type(tool_store).__name__}: {tool_store!r:.80}")
        if not isinstance(system_prompt, str):
            raise TypeError(f"YiemAgent(system_prompt=...) expects a str, got {type(system_prompt).__name__}")
        max_rounds = check_max_rounds(max_rounds)
        if usage_limits is not None and not isinstance(usage_limits, UsageLimits):
            raise TypeError(f"YiemAgent(usage_limits=...) expects a UsageLimits or None, got {type(usage_limits).__name__}")
        builtin_names = resolve_builtin_names(builtin_tools)
        extra_tools = agent_tools(tools, builtin_names, tool_store.tools if tool_store is not None else ())
        if session is not None and messages is not None:
            raise ValueError("give either session= or messages=, not both: with a session the history comes from it")
        if session is not None:
            hold_session(session)  # decision 17: one agent holds a session at a time (SessionInUseError); before reading it
        try:
            history = History()  # counts its edits: the formatter's shortcut (docs/performance.md)
            # decision 15: what enters the history is checked, once (a session's messages by history_from_session)
            history.extend(history_from_session(session) if session is not None else each_message(messages or [], normalize_message))
            self.session_id = session_id
            self.max_retry_delay_ms = max_retry_delay_ms
            if max_retry_delay_ms is not None and hasattr(llm_call, "max_retry_delay_ms"):
                llm_call.max_retry_delay_ms = max_retry_delay_ms

            store = tool_store if tool_store is not None else ToolStore(session_id or "agent")
            register_builtin_tools(store, builtin_names, keep_existing=tool_store is not None)
            for extra in extra_tools:
                register_tool(store, extra)
            if output_spec is not None and output_spec.tool is not None and output_spec.tool.name in store.tools:
                raise ValueError(f"output_type needs the tool name {output_spec.tool.name!r} for the final answer; the tool store already has a tool by that name")
            name = f"yiemagent-{session_id or hex(id(self))[2:]}"
            self._core = AgentCore(
                name=name,
                llm_call=llm_call,
                agent_event_sink=agent_event_sink,
                state=AgentState(system_prompt, model, store.tools, history, set(), False, None),
                tool_store=store,
                prepare_context=prepare_context or default_prepare_context,
                format_msg_for_llm=format_msg_for_llm or default_format_msg_for_llm,
                before_tool_call=before_tool_call,
                after_tool_call=after_tool_call,
                parallel_tool_execute=parallel_tool_execute,
                max_rounds=max_rounds,
                usage_limits=usage_limits,
                session=session,
                output_spec=output_spec,
                deps=deps,
                compactor=compactor,
            )
        except BaseException:
            if session is not None:
                release_session(session)  # the agent never started: its hold goes (docs/sessions.md)
            raise
        self._ask_lock = AskLock()  # one ask(), stream() or resume() at a time: one request, one reply
        self._name = name  # of its threads
        finalizer = weakref.finalize(self, _finalize, self._core, name)
        finalizer.atexit = False  # at exit the daemon threads just stop; no warning for agents still in use

    def history(self) -> list[AgentMessage]:
        """A copy of the conversation history, safe to take from any thread."""
        return self._core.history()

    def wait_until_idle(self, timeout: Optional[float] = None) -> bool:
        """Block until no run is active and nothing is queued; False if ``timeout`` passed first.

        Raises:
            RuntimeError: called from inside the agent's own run (a tool, a hook, its event
                sink, ``llm_call``), whose end would wait for this call (``_refuse_own_run``).
        """
        _refuse_own_run(self, "wait_until_idle()")
        return self._core.wait_until_idle(timeout)

    def __enter__(self) -> "YiemAgent":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            abort(self)
        shutdown(self)

    def __repr__(self) -> str:
        core = self._core
        return f"YiemAgent(session_id={self.session_id!r}, loop_state={core.loop_state.name}, messages={len(core.state.messages)})"


_CLOSED = "the agent has been shut down; it takes no more messages"


def _as_user_input(agent: YiemAgent, message: Any) -> Any:
    """Check a message in the caller's thread and return what goes on the channel (decision 15)."""
    if agent.closing:
        raise AgentClosedError(_CLOSED)
    if agent._core.loop_exited:
        raise AgentClosedError("the agent's loop thread has stopped (see the 'yiemagent.agent' log); it takes no more messages")
    if isinstance(message, str):
        return {"role": "user", "content": message}
    if isinstance(message, CompactionMessage):  # the agent's compaction makes these; one sent alone gave a request of no messages
        raise MessageFormatError("a CompactionMessage is written by the agent's compaction (docs/sessions.md), not sent to it: send the summary as a UserMessage")
    if isinstance(message, AgentMessage):
        return normalize_message(message)  # raises MessageFormatError for what cannot be sent again
    normalize_message(openai_to_user_message(message))  # validate now, in the caller's thread: raises MessageFormatError
    return message


def run_agent(agent: YiemAgent, message: Any) -> None:
    """Send a user message; the loop starts a run, or the active run takes it at its next LLM round.

    Spec: §1 Step 3, §16 (runAgent). ``message`` is an OpenAI-style dict
    ``{"role": "user", "content": ...}``, a plain string, or any ``AgentMessage`` (which
    enters the history as it is — e.g. the result an external system hands back after an
    async handoff, spec §10 — once checked, decision 15: a ``UserMessage`` whose content
    is a str gets it as one text block). Whatever its form, a lone surrogate in its text
    becomes U+FFFD as it enters the history, so the history, the request and the session
    hold the same text (docs/failures.md). Blocks while the input channel is full (16
    messages). Once it returned, the message is processed or returned by ``shutdown``
    (decision 16). A run this message starts runs in a copy of the caller's
    ``contextvars`` context, with its tools, hooks and event sink: a run started inside an
    OpenTelemetry span is that span's child (docs/tracing.md "Trace context").

    Raises:
        MessageFormatError: the message is not of a form a user message can take.
        AgentClosedError: the agent has been shut down, also while this call was blocked
            on a full channel; the message was not taken.
    """
    agent.input_channel.put(_as_user_input(agent, message))


def _refuse_own_run(agent: YiemAgent, verb: str) -> None:
    """Raise ``RuntimeError`` naming ``verb`` when called from inside the agent's own run: it would wait for ever for that run to end."""
    if agent._core.is_own_thread():
        raise RuntimeError(f"{verb} from inside the agent's own run (a tool, a hook, its event sink, llm_call) would wait for ever for that run to end; use run_agent or add_message")


def _send_alone(agent: YiemAgent, send: Callable[[], None], timeout: Optional[float], left: Callable[[], Optional[float]], verb: str, watch: Optional[Callable[[], Any]] = None) -> Any:
    """The first half of ``ask``, ``stream`` and ``resume``: take the agent's ask lock, wait until it is idle, ``send()``.

    ``watch()``, called just before the send, starts watching the run (a ``RunStream``);
    returned, or cancelled if the send fails. Returns with the lock held; on any error it
    is released and nothing was sent. Each ``TimeoutError`` names the timeout and what it
    waited for (the other call holding the lock by its ``verb``).
    """
    _refuse_own_run(agent, verb)
    if not agent._ask_lock.acquire(left(), verb):
        raise TimeoutError(f"another {agent._ask_lock.verb} on this agent did not finish within {timeout} s")
    try:
        if not agent.wait_until_idle(left()):
            raise TimeoutError(f"the agent did not become idle within {timeout} s")
        watcher = watch() if watch is not None else None
        try:
            send()
        except BaseException:
            if watcher is not None:
                watcher.cancel()
            raise
        return watcher
    except BaseException:
        agent._ask_lock.release()
        raise


def _deadline(timeout: Optional[float]) -> tuple[Optional[float], Callable[[], Optional[float]]]:
    """The monotonic deadline of ``timeout`` (None: none), and the function that gives the seconds left."""
    deadline = None if timeout is None else time.monotonic() + timeout

    def left() -> Optional[float]:
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    return deadline, left


def _taken(agent: YiemAgent, send: Callable[[], None], timeout: Optional[float], verb: str, check: bool) -> AssistantMessage:
    """``send`` starts one run, and its reply is taken: under the agent's ask lock, once the agent is idle.

    The guarantees of ``ask`` and ``resume`` (docs/api.md "Reading a reply"): ``timeout``
    bounds the whole call; with ``check`` a failed run raises ``RunFailedError``.
    """
    _, left = _deadline(timeout)
    _send_alone(agent, send, timeout, left, verb)
    try:
        reply = take_response(agent, left())
    finally:
        agent._ask_lock.release()
    return reply.raise_for_failure() if check else reply


def ask(agent: YiemAgent, message: Any, *, timeout: Optional[float] = None, check: bool = True) -> AssistantMessage:
    """One request, one reply: ``run_agent`` then ``take_response`` (beyond the spec, docs/api.md "Reading a reply").

    Waits until the agent is idle first, and holds the agent's ask lock throughout, so that
    two asks (in a row or from two threads) give two runs and two replies; ``run_agent`` alone
    lets a message that arrives during a run join that run (spec §6 step 1), one reply for
    both. ``timeout`` bounds the whole call. Do not mix it with ``run_agent`` calls whose
    responses are still untaken: it returns the next response of the output channel.

    A run that failed (``FAILED_RUN_STOP_REASONS``: "error", "max_rounds", "usage_limit",
    "output_invalid", "refusal", "aborted") raises ``RunFailedError``, whose ``reply`` is
    the reply; ``check=False`` returns it as it is (docs/api.md "A run that fails says
    so"). "awaiting_approval" is not a failure.

    Raises:
        RunFailedError: with ``check``, the run failed.
        TimeoutError: the agent did not become idle, or did not answer, within ``timeout``,
            or another ``ask``/``stream``/``resume`` held the agent's lock past it (the message names it).
        RuntimeError: called from inside the agent's own run, or inside the loop over a
            ``stream`` of this agent: it would wait for ever for itself.
        MessageFormatError, AgentClosedError: as ``run_agent``; ``take_response``'s errors.
    """
    checked = _as_user_input(agent, message)  # a closed agent or a bad message fails at once, before any wait
    return _taken(agent, lambda: agent.input_channel.put(checked), timeout, "ask()", check)


def stream(agent: YiemAgent, message: Any, *, timeout: Optional[float] = None, check: bool = True) -> RunStream:
    """``ask`` whose run is read as it happens: its events, its text (beyond the spec, docs/streaming.md "Iterating over a run").

    Sends ``message`` as ``ask`` does (alone, once the agent is idle) and returns a
    ``RunStream``: iterate it for every event the agent's sink gets for the run, as the
    sink gets it (deltas and sub-agent events included); ``.text()`` for the text alone;
    ``.reply`` once iteration has ended. The agent's own sink still gets every event.
    With ``check`` a failed run raises ``RunFailedError`` as the iteration ends.
    ``timeout`` bounds the whole stream, from this call to the reply. Stopping early (a
    ``break``, an exception) lets the run go on to its end, and its reply is taken then:
    the next ``ask`` gets its own (``run_stream.py``).

    Raises:
        TimeoutError: the agent did not become idle within ``timeout`` (later: while iterating).
        RuntimeError: as ``ask``: it would wait for ever for itself.
        MessageFormatError, AgentClosedError: as ``run_agent``.
    """
    checked = _as_user_input(agent, message)
    deadline, left = _deadline(timeout)
    watch = lambda: RunStream(agent._core, agent._ask_lock, agent._name, deadline, timeout, check)  # noqa: E731
    started: RunStream = _send_alone(agent, lambda: agent.input_channel.put(checked), timeout, left, "stream()", watch)  # what watch made
    return started


def follow_up(agent: YiemAgent, message: Any) -> None:
    """Send a follow-up: it joins the input after what is already queued (spec §5, decision 7).

    While a run is active the loop moves it into the input channel; while the agent is
    idle it starts a run. Takes the same messages, and raises the same errors, as
    ``run_agent`` (decision 16).
    """
    agent.follow_up_channel.put(_as_user_input(agent, message))


def take_response(agent: YiemAgent, timeout: Optional[float] = None) -> AssistantMessage:
    """The next response from the output channel (spec §5 takeResponse).

    After ``shutdown``, the responses still in the channel are returned, then it raises
    ``AgentClosedError`` (decision 16); a call already waiting when the last response
    source ended is woken and raises too. A run that ``shutdown`` left running (an LLM
    call that does not return) keeps the channel open until it delivers.

    Called from inside the agent's own run, it takes a response already waiting and does
    not wait for one: the next can only come once that run ends.

    Raises:
        TimeoutError: no response came within ``timeout`` seconds.
        AgentClosedError: the agent has been shut down and no response is left.
        RuntimeError: called from inside the agent's own run with no response waiting.
    """
    if agent._core.is_own_thread():
        try:
            own: AssistantMessage = agent.output_channel.get_nowait()
            return own
        except queue.Empty:
            _refuse_own_run(agent, "take_response()")
    try:
        response: AssistantMessage = agent.output_channel.get(timeout=timeout)  # the channel holds the responses
        return response
    except queue.Empty:
        raise TimeoutError(f"no response from the agent within {timeout} s") from None


def continue_agent(agent: YiemAgent) -> None:
    """Run the LLM on the current history without a new user message (spec §10 "Async handoff").

    For instance after a terminating tool handed work to an external system whose
    result has since been added to the history. After a run that ended
    "awaiting_approval", the run first runs the approved calls and answers the rejected
    ones (``yiemagent.approvals``, decision 18); calls still undecided keep it waiting.

    Accepted while the agent is busy; if the run it joins still finds no conversation (the
    follow-up that made the agent busy was not yet in the input), that run ends "error"
    with the same words, and sends the LLM nothing.

    Raises:
        EmptyHistoryError: there is no conversation to continue.
        AgentClosedError: the agent has been shut down.
    """
    core = agent._core
    if core.closing:
        raise AgentClosedError("the agent has been shut down; it cannot continue")
    if not core.busy() and not core.history():
        raise EmptyHistoryError(NOTHING_TO_CONTINUE)
    core.input_channel.put(CONTINUE)


def resume(agent: YiemAgent, *, timeout: Optional[float] = None, check: bool = True) -> AssistantMessage:
    """``continue_agent`` then ``take_response``, with ``ask``'s guarantees (docs/api.md "Approvals in fewer lines").

    After a run that ended "awaiting_approval" and the decisions (``approve``, ``reject``),
    this runs the approved calls, answers the rejected ones and returns the reply the run
    ends with (decision 18): the model's answer, or "awaiting_approval" again while calls
    are undecided. Waits until the agent is idle first and holds the agent's ask lock, as
    ``ask`` does; ``timeout`` bounds the whole call. With ``check`` a failed run raises (the
    reply's ``raise_for_failure``, where ``AssistantMessage`` has it); "awaiting_approval"
    is not a failure.

    Raises:
        TimeoutError: the agent did not become idle, or did not answer, within ``timeout``,
            or another ``ask``/``resume`` held the agent's lock past it (the message names it).
        EmptyHistoryError, AgentClosedError: as ``continue_agent``; ``take_response``'s errors.
    """
    return _taken(agent, lambda: continue_agent(agent), timeout, "resume()", check)


def add_message(agent: YiemAgent, message: AgentMessage) -> None:
    """Append ``message`` to the agent's history without starting a run (spec §10 hand-off; docs/sessions.md).

    While the agent is idle the message is appended at once (stored in the agent's session
    first). While a run is active it joins the history at that run's next LLM round, as
    input does; a run that ends without another round appends it when it ends, before
    the next run can start. Either way no run is started: ``continue_agent`` asks the LLM
    to go on, e.g. after a terminating tool handed work to an external system whose result
    this message carries. If ``shutdown`` gives up on the run it waits for, ``shutdown``
    returns it (decision 16).

    A user or assistant message appended while tool calls wait for approval first
    answers them, "superseded by a new message" (decision 18).

    Thread safety: callable from any thread; a run cannot start between the decision
    "idle or not" and the append (``AgentCore.add_message``), and the session is called
    without the agent's loop lock held. The message is checked (decision 15) in the
    caller's thread.

    Raises:
        MessageFormatError: ``message`` is not an ``AgentMessage``, or cannot be sent to an
            LLM again (decision 15).
        AgentClosedError: the agent has been shut down.
        Exception: while idle, whatever the agent's session raised storing the message
            (e.g. ``sqlite3.OperationalError``); the message was then not added.
    """
    if not isinstance(message, AgentMessage):
        raise MessageFormatError(f"add_message takes an AgentMessage (UserMessage, AssistantMessage, ToolResultMessage), got {type(message).__name__}")
    message = normalize_message(message)  # decision 15: checked in the caller's thread
    # decision 18: appended now, a new message first answers the calls waiting for approval (queued, the run does)
    agent._core.add_message(message, before=lambda history: superseding_results(history, message))


def abort(agent: YiemAgent, reason: str = "aborted by abort()") -> bool:
    """Abort the active run: its signal fires, running tools see it, calls not yet run get
    "Operation aborted", and the run ends with stop_reason "aborted". False if no run is active.

    A tool with ``timeout_s`` that ignores its signal is abandoned at once (its thread runs
    on; its result is dropped), so the run ends promptly. An LLM call in flight sees the
    signal through ``current_abort_signal()`` (a streaming client closes its connection);
    whatever it returns after the abort is dropped, never kept in the history (docs/streaming.md).
    """
    return agent._core.abort(reason)


def shutdown(agent: YiemAgent, timeout: Optional[float] = None) -> list[Any]:
    """Stop the agent and return the messages that were still queued, so none is lost (decision 16).

    The list holds the queued input as it was sent (dicts, messages), then any
    ``AgentMessage`` given to ``add_message`` for a run that ``shutdown`` gave up on.

    At once, every later send (and any send blocked on a full channel) raises
    ``AgentClosedError``, and every message accepted but not yet taken by a run is
    collected for the return value. The active run may finish (its response still goes
    to the output channel); after ``timeout`` seconds it is aborted and given ``timeout``
    seconds more; a run still going after that (an LLM call that does not return) is left
    to finish on its daemon thread and delivers its response itself. Responses that find
    the output channel full are kept in ``agent.undelivered_responses``. Calling it again
    returns [].

    Called from inside the agent's own run — a tool, a hook, the event sink, ``llm_call``
    — it does not wait (the run it would wait for is the caller's): it closes the agent,
    returns the queued messages, and the run ends as usual, its response delivered.
    """
    core = agent._core
    queued = core.close(_CLOSED) or []  # None: already closed (a second call still waits, and returns [])
    if not core.is_own_thread():
        queued.extend(core.join(timeout))  # add_message's messages, if the run was left running
    return queued
