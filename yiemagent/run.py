"""One run of the agent: the message processing pipeline (spec §6 ``_processMessage``).

Drain the input channel into the history, then loop: prepare_context -> format_msg_for_llm
-> llm_call -> append the reply -> extract_tool_calls -> execute_tool_calls -> append the
results -> stop (a reply without tool calls, a terminating batch, an abort, a failure) or
go round again. The run always ends with an ``AssistantMessage`` for the output channel;
nothing it does raises out of it (decision 11).

Every message passes ``yiemagent.normalize`` before it enters the history (decision 15),
and a run reaches its agent only through ``RunHost``.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Protocol

from .approvals import answer_deferred_aborted, awaiting_response, deferral_steps, start_of_run, superseding_results
from .batch import ToolCallAllowance, answer_tool_calls_with_error, execute_tool_calls_within, terminated_response
from .events import AgentRunEndEvent, AgentRunStartEvent, EventEmitter, LLMCallEndEvent, LLMCallStartEvent
from .extraction import extract_tool_calls
from .formatting import openai_to_user_message
from .types import (
    AbortSignal,
    AgentContext,
    AgentLoopConfig,
    AgentMessage,
    AgentState,
    AgentToolCall,
    AgentToolCallBatch,
    ApprovalMessage,
    AssistantMessage,
    LLMUsage,
    MessagesSnapshot,
    RunContext,
    RunScope,
    TextContent,
    ToolResultMessage,
    UsageLimits,
    NO_USAGE,
    add_usage,
    run_context_later,
)
from .normalize import normalize_message, normalize_reply, normalize_tool_result
from ._failures import describe_error, user_code_errors
from .errors import AgentClosedError
from .events import relay_deltas
from .history.sessions import Session, release_session
from ._sub_runs import add_sub_run_usage, collecting, stop_collecting
from .tokens import count_tokens
from .typed.output import OutputSpec, offered_tools, output_invalid_response

__all__ = [
    "CONTINUE",
    "DEFAULT_MAX_ROUNDS",
    "HistoryWriter",
    "Run",
    "RunHost",
    "add_late_sub_run_usage",
    "check_max_rounds",
    "max_rounds_response",
    "process_message",
    "rounds_exhausted",
    "usage_limit_response",
]

logger = logging.getLogger("yiemagent.run")
_sessions_logger = logging.getLogger("yiemagent.sessions")  # a store that failed (docs/sessions.md)

CONTINUE = object()
"""Put on the input channel by ``continue_agent``: asks for a run without adding a message."""

TRUNCATED_CALL_MESSAGE = (
    "This tool call was cut off by the token limit (stop_reason 'length') and was not run. "
    "Re-issue it complete, with all of its arguments."
)


class RunHost(Protocol):
    """What a run may touch of its agent: the whole interface between the two.

    The agent's core (``loop.AgentCore``) implements it; a run never reaches further.
    Each member has one job, so that a feature can grow the run without reaching into
    the agent: a session stores each message in ``append``; streaming wraps ``llm_call``;
    limits read ``max_rounds``; usage goes to ``record_usage``.

    Members (all called from the run thread unless said otherwise):
        state: the ``AgentState``; the run reads ``system_prompt``, ``model``, ``tools``
            (through ``prepare_context``) and writes ``pending_tool_calls`` and
            ``error_message``. It changes ``messages`` only through ``append``.
        llm_call, prepare_context, format_msg_for_llm: the agent's current hooks.
        max_rounds: LLM rounds per run, or None for no limit (decision 12).
        usage_limits: the run's ``UsageLimits``, or None (checked beside ``max_rounds``).
        loop_config(): the ``AgentLoopConfig`` (tool hooks, execution mode) for a batch.
        emit: the ``EventEmitter``; called from the run thread and from tool threads.
        closing: True once ``shutdown`` began; the run then takes no more input.
        take_input(): every queued input item, in order (raw: dicts, messages, ``CONTINUE``);
            the run asks for none once ``closing`` (``shutdown`` returns them).
        take_added(): messages ``add_message`` queued during the run (normalised), in order;
            taken at the top of every round, closing or not (the host appends those left
            when the run ends).
        input_waiting() (optional): whether ``take_added`` or ``take_input`` would give anything
            now; a round after the first takes input only when it says True (a host without it
            is asked every round). It never says False for input queued before it was asked.
        append(message): add one message to the history (and its session); the run has
            normalised it. Never raises, whatever the session raises.
        take_session_failure(): why the session failed to store a message, or None.
        record_usage(usage): add the run's summed usage to the agent's total.
        history(): a copy of the history.
        output_spec (optional, beyond the spec): the typed answer (``typed/output.py``), or None.
        compactor (optional, beyond the spec): what a long conversation sends (``context/compaction.py``), or None.
        deps (optional, beyond the spec): what tools receive in their ``RunContext`` (``types.py``).
    """

    state: AgentState
    llm_call: Callable[[dict[str, Any]], Any]
    prepare_context: Callable[..., Any]
    format_msg_for_llm: Callable[..., Any]
    emit: EventEmitter
    max_rounds: Optional[int]
    usage_limits: Optional[UsageLimits]

    @property
    def closing(self) -> bool: ...

    def loop_config(self) -> AgentLoopConfig: ...

    def take_input(self) -> list[Any]: ...

    def take_added(self) -> list[AgentMessage]: ...

    def append(self, message: AgentMessage) -> None: ...

    def take_session_failure(self) -> Optional[str]: ...

    def record_usage(self, usage: LLMUsage) -> None: ...

    def history(self) -> list[AgentMessage]: ...


class _RunHistory:
    """The history a run's batches started from, for their ``RunContext`` snapshots made when first asked (``_batch_run_context``).

    ``items`` is ``state.messages`` while the run is on (it only grows at its end then:
    ``RunHost``), and a copy of it once the run has ended (``process_message``): the agent
    is idle then and its history may be edited, while a thread a tool started may still
    ask for its call's context. Thread safety: ``items`` is replaced once, by the run
    thread; a reader gets the list or its copy, which begin with the same messages.
    """

    __slots__ = ("items",)

    def __init__(self, items: Sequence[AgentMessage]) -> None:
        self.items = items


@dataclass
class Run:
    """One run: its number, its abort signal, and what it has done so far.

    Thread safety: made by the loop thread, then used by the run thread; ``signal`` may
    be fired from any thread (``abort``).
    """

    id: int
    signal: AbortSignal = field(default_factory=AbortSignal)
    rounds: int = 0
    took_first_input: bool = False  # until then, queued input is what this run is about to take (set by the host's first take_input, loop.py)
    usage: LLMUsage = NO_USAGE  # summed over the run's LLM rounds (decision 13); the shared zero, not one made per run
    tool_calls: int = 0  # tool calls let through max_tool_calls (batch.ToolCallAllowance: run, or deferred for approval)
    invalid_answers: int = 0  # beyond the spec: typed answers that failed their check (typed/output.py)
    side_requests: int = 0  # LLM requests beside the rounds' (compaction's summaries): they count against max_requests
    # the usage of its agent_tool calls' sub-runs, not yet folded into usage (_sub_runs.py; add_late_sub_run_usage)
    late_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)  # guards late, ended
    late: list[LLMUsage] = field(default_factory=list, repr=False, compare=False)
    ended: bool = False  # the run's usage is final: later sub-run usage goes to the agent's total
    # the history its batches' RunContexts read their snapshot from (_execute_batch): the live list while
    # the run is on, a copy of it from the run's end, when the idle agent's history may be edited
    history: Optional[_RunHistory] = field(default=None, repr=False, compare=False)


def add_late_sub_run_usage(usage: LLMUsage) -> bool:
    """The usage of a sub-run that ended after its ``agent_tool`` call did (the call timed out).

    Its event came too late to be emitted (decision 8), but its tokens were spent: they join
    the run's usage while the run goes on (folded in after each batch and at its end), else
    the agent's total. Called from the tool's thread, which carries the run's context;
    returns False outside a run (the usage is then the caller's to keep). A sub-run that
    ended in time reaches the same collector through its call's reporter (``_sub_runs.py``).
    """
    return add_sub_run_usage(usage)


def _late_usage_of(host: RunHost, run: Run) -> Callable[[LLMUsage], None]:
    def add(usage: LLMUsage) -> None:
        with run.late_lock:
            if not run.ended:
                run.late.append(usage)
                return
        host.record_usage(usage)  # the run is over: the agent's total still counts it

    return add


def _fold_late_usage(run: Run, *, end: bool = False) -> None:
    """Add the late sub-run usage that has come in to ``run.usage`` (run thread only); ``end`` closes the run to more."""
    with run.late_lock:
        late, run.late = run.late, []
        run.ended = run.ended or end
    for usage in late:
        run.usage = add_usage(run.usage, usage)


# --- where messages enter the history (spec §6; docs/sessions.md) ---------------------


class HistoryWriter:
    """Where every message enters an agent's history: ``state.messages``, then the session.

    Spec: §6 (the run appends input, replies and results); docs/sessions.md "The agent
    with a session": each message is stored as it enters the history, before the next LLM
    round can see it. ``release`` ends the agent's hold on the session (decision 17).

    Thread safety: two locks, taken in this order. ``store_lock`` is held across the
    session's ``append``, so the session's order is the history's; only appenders take
    it. ``lock`` guards ``state.messages``, ``_failure`` and the hold's flags
    (``_storing``, ``_release_asked``, ``_released``) and is held only for a list or flag
    operation, never across the session: a session that stalls (a disk, a database lock)
    blocks the thread appending and those queued behind it, never a reader of the history,
    and never ``release``, which leaves the release to a store in progress. Neither lock is
    held while taking the agent's ``_wake`` (the agent never waits for ``store_lock`` while
    holding ``_wake``), so there is no lock-order cycle. Any thread may call any method.
    """

    __slots__ = ("state", "session", "lock", "store_lock", "_failure", "_storing", "_release_asked", "_released")

    def __init__(self, state: AgentState, session: Optional[Session]) -> None:
        self.state = state
        self.session = session
        self.lock = threading.Lock()  # guards state.messages, _failure and the hold's flags; never held across the session
        self.store_lock = threading.Lock()  # orders appends: held from the memory append to the session's return
        self._failure: Optional[str] = None  # the first store that failed since take_failure
        self._storing = False  # a session.append is in progress (it releases the hold if asked meanwhile)
        self._release_asked = False  # the agent has ended: no store starts any more
        self._released = False  # release_session was called (once)

    def append(self, message: AgentMessage) -> None:
        """Keep ``message`` in memory and store it; never raises (the run's path).

        A session that fails leaves the message in memory (the conversation stays whole,
        so valid to send) and records the failure: the run takes it with ``take_failure``
        before its next LLM round and ends with stop_reason "error" naming it, so no round
        sees a message the session lacks without the caller being told. Called in the
        agent's run thread, where anything the session raises — ``SystemExit`` too — is
        contained (``pipeline.user_code_errors``): it must not strand the run's response.
        """
        if self.session is None:  # nothing to store, nothing to order with a store: the list's own lock
            with self.lock:
                self.state.messages.append(message)
            return
        with self.store_lock:
            with self.lock:
                self.state.messages.append(message)
                if self._release_asked:  # the agent has ended; another agent may hold the session now
                    self._failure = self._failure or f"the agent has released the session {self.session!r}; a message was not stored"
                    return
                self._storing = True
            try:
                self.session.append(message)
            except user_code_errors() as exc:  # sqlite3.Error, OSError, a custom session's own
                why = f"the session {self.session!r} could not store a {getattr(message, 'role', '?')} message: {type(exc).__name__}: {exc}"
                _sessions_logger.error("%s", why, exc_info=True)
                with self.lock:
                    self._failure = self._failure or why
            finally:
                self._stored()

    def append_stored_first(self, message: AgentMessage) -> None:
        """Store ``message``, then keep it (``add_message`` while idle): a failure raises and nothing is added."""
        with self.store_lock:
            with self.lock:
                if self._release_asked:
                    raise AgentClosedError("the agent has been shut down; it takes no more messages")
                self._storing = True
            try:
                if self.session is not None:
                    self.session.append(message)
                with self.lock:
                    self.state.messages.append(message)
            finally:
                self._stored()

    def _stored(self) -> None:
        with self.lock:
            self._storing = False
            release = self._release_asked and not self._released
            self._released = self._released or release
        if release and self.session is not None:
            release_session(self.session)

    def release(self) -> None:
        """End the agent's hold on its session (decision 17): now, or when the store in progress returns.

        Called as the agent ends, by the thread that stored its last message (the loop
        thread, or a run ``shutdown`` left running). From then on no store starts, so the
        next holder's messages never interleave with this agent's. Never waits for a
        stalled session and never raises; calling it again does nothing.
        """
        with self.lock:
            self._release_asked = True
            release = not self._storing and not self._released
            self._released = self._released or release
        if release and self.session is not None:
            release_session(self.session)

    def take_failure(self) -> Optional[str]:
        """The first store failure since the last call, if any; clears it."""
        if self._failure is None:  # read without the lock: a failure recorded meanwhile is the next call's, as it would be after it
            return None
        with self.lock:
            failure, self._failure = self._failure, None
            return failure


# --- the cap on LLM rounds (decision 12) ---------------------------------------------
# Beyond the spec, whose loop (§6) goes round for as long as the model calls tools: a model that
# keeps calling tools must not run up cost without end. The run checks the cap at the top of each
# round, after the previous round's tool results are in the history, so a run stopped by it leaves
# every tool call answered and the history valid to send again; ``continue_agent`` goes on from
# there with a fresh allowance of rounds.

DEFAULT_MAX_ROUNDS = 50
"""Decision 12; pydantic-ai's default request limit is also 50."""


def check_max_rounds(value: Any) -> Optional[int]:
    """``value`` if it is a valid ``max_rounds``: None (no limit) or an int of at least 1.

    Raises:
        TypeError: not an int (a bool is refused too: ``max_rounds=True`` is a slip).
        ValueError: an int below 1 — a run must be allowed one round to do anything.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_rounds must be an int or None, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"max_rounds must be at least 1 (or None for no limit), got {value}")
    return value


def rounds_exhausted(rounds_done: int, max_rounds: Optional[int]) -> bool:
    """True when a run that has done ``rounds_done`` LLM rounds may not start another."""
    return max_rounds is not None and rounds_done >= max_rounds


def max_rounds_response(max_rounds: int) -> AssistantMessage:
    """The response of a run stopped by its cap: stop_reason "max_rounds", the limit named.

    Made by the agent, so (like "aborted" and "error") it is not added to the history.
    """
    why = (
        f"the run reached max_rounds={max_rounds} LLM rounds and was stopped; "
        "every tool call has its result; call continue_agent to go on"
    )
    logger.warning("run stopped: %s", why)
    return AssistantMessage([TextContent(f"Stopped after {max_rounds} LLM rounds (max_rounds).")], stop_reason="max_rounds", error_message=why)


def usage_limit_response(passed: str, verb: str = "passed") -> AssistantMessage:
    """The response of a run stopped by its ``UsageLimits``: stop_reason "usage_limit", the limit and the count named.

    ``verb``: "passed" (the usage of a round went above a token limit) or "reached" (a cap
    stopped what would have gone beyond it: a call not run, a request not sent; decision 20).
    Made by the agent, so (like "max_rounds") it is not added to the history.
    """
    why = f"the run {verb} its usage limit {passed} and was stopped; every tool call has its result; call continue_agent to go on"
    logger.warning("run stopped: %s", why)
    return AssistantMessage([TextContent(f"Stopped: usage limit {passed}.")], stop_reason="usage_limit", error_message=why)


# --- limits that are caps, before each request (decision 20; docs/api.md "Limits that are caps") ----
# A run checks its summed usage after each round (``UsageLimits.passed``), and, before sending a
# request, what the request would add: ``max_requests``, and the input tokens it would send
# (``count_tokens``, calibrated on the last reply's usage). No estimate is made when no token
# limit needs it (a capability not in play costs a run nothing).


def _requests_passed(limits: Optional[UsageLimits], sent: int) -> Optional[str]:
    """``max_requests`` named with its count when a run that sent ``sent`` LLM requests may send no more; else None."""
    cap = None if limits is None else limits.max_requests
    if cap is None or sent < cap:
        return None
    return f"max_requests={cap} ({sent} LLM requests sent)"


def _request_passes_tokens(
    limits: Optional[UsageLimits], spent: LLMUsage, system_prompt: str, messages: Sequence[AgentMessage], tools: Mapping[str, Any]
) -> Optional[str]:
    """The token limit a request would pass, by its estimate (``count_tokens``), named with the counts; else None.

    ``spent`` is what the run's earlier rounds used; the request's input is estimated,
    calibrated on the last reply in ``messages`` that reports its usage (its
    ``input_tokens`` counted the request that produced it). Only ``max_input_tokens`` and
    ``max_total_tokens`` are checked: a request's input counts in both. Nothing is
    estimated when neither is set.
    """
    if limits is None or (limits.max_input_tokens is None and limits.max_total_tokens is None):
        return None
    calibrate = _last_reply_with_usage(messages)
    estimate = count_tokens(messages, system_prompt=system_prompt, tools=list(tools.values()), calibrate=calibrate)
    for name, used, what in (
        ("max_input_tokens", spent.input_tokens, "input tokens"),
        ("max_total_tokens", spent.total_tokens, "tokens in all"),
    ):
        cap = getattr(limits, name)
        if cap is not None and used + estimate > cap:
            return f"{name}={cap} ({used} {what} used; the next request's input is about {estimate} tokens)"
    return None


def _last_reply_with_usage(messages: Sequence[AgentMessage]) -> Optional[AssistantMessage]:
    """The last ``AssistantMessage`` whose usage reports input tokens (the exact count of the messages before it)."""
    for message in reversed(messages):
        if not isinstance(message, AssistantMessage) or message.usage is None:
            continue
        counted = message.usage.input_tokens  # a careless client may have put None or a float there (types.add_usage)
        if isinstance(counted, int) and not isinstance(counted, bool) and counted > 0:
            return message
    return None


def _read_input(host: RunHost, *, with_input: bool = True) -> tuple[list[AgentMessage], int, Optional[str], bool]:
    """Spec §6 step 1: every queued input message, checked, in order, not yet appended.

    Returns (the messages, how many came from the input channel, why the first dropped
    item was dropped or None, whether ``continue_agent`` asked for this run). Messages
    given to ``add_message`` during the run come first, also when ``with_input`` is False
    (a closing agent: ``shutdown`` returns its input, but an added message is the run's to
    append).
    """
    messages = list(host.take_added())
    if not with_input:
        return messages, 0, None, False
    taken, dropped, continued = 0, None, False
    for raw in host.take_input():
        if raw is CONTINUE:
            continued = True
            continue
        try:
            # checked like any message (decision 15), converted or not: a lone surrogate becomes U+FFFD here, once
            message = normalize_message(raw if isinstance(raw, AgentMessage) else openai_to_user_message(raw))
        except user_code_errors() as exc:  # not only ValueError: a hand-made item may raise anything as it is read
            # run_agent validates; only a message put on the channel by hand can fail here
            logger.error("dropped a message put on the input channel that is not a valid user message: %.300r", raw, exc_info=True)
            dropped = dropped or f"a message put on the input channel is not a valid user message and was dropped: {describe_error(exc)}"
            continue
        messages.append(message)
        taken += 1
    return messages, taken, dropped, continued


def _approval_steps_in_play(history: list[AgentMessage], messages: list[AgentMessage]) -> bool:
    """Whether a call may wait for approval: an approval step after the history's last assistant message, or in the input.

    A call waits only through such a step (approvals.py), so a run without one never asks
    approvals.py anything: the cost of decision 18 is this backward look, in a run with no approvals.
    ``history`` is ``state.messages`` itself, not a copy: the run thread calls this, and it
    is the only thread that appends while a run is on (``RunHost``), so the look costs the
    tail it reads, not a copy of the whole history.
    """
    for message in reversed(history):
        if isinstance(message, AssistantMessage):
            break
        if isinstance(message, ApprovalMessage):
            return True
    return any(isinstance(message, ApprovalMessage) for message in messages)


def _append_input(host: RunHost, messages: list[AgentMessage]) -> None:
    """Append input; a new message first answers the calls still waiting for approval (decision 18)."""
    if not messages:
        return
    if not _approval_steps_in_play(host.state.messages, messages):
        for message in messages:
            host.append(message)
        return
    for message in messages:
        for result in superseding_results(host.history(), message, host.emit) if not isinstance(message, ToolResultMessage) else ():
            host.append(result)
        host.append(message)


def _take_input(host: RunHost, *, with_input: bool = True) -> tuple[int, Optional[str], bool]:
    """Spec §6 step 1: move every queued input message into the history (``_read_input``, then append)."""
    messages, taken, dropped, continued = _read_input(host, with_input=with_input)
    if messages:
        _append_input(host, messages)
    return taken, dropped, continued


_OVERFLOWED = "LLM call failed: ContextOverflowError"
"""How a round's error begins when the server said the request is too long (errors.py ``ContextOverflowError``)."""

NOTHING_TO_CONTINUE = "cannot continue: the conversation history is empty; send a message with run_agent first"
"""Why ``continue_agent`` refuses an idle agent with no history, and why a run of continues alone on one ends "error"."""


def _error_response(why: str) -> AssistantMessage:
    """Decision 11: a failed run ends with stop_reason "error" and says why."""
    logger.warning("run ended with an error: %s", why)
    return AssistantMessage([], stop_reason="error", error_message=why)


def _aborted_response(run: Run) -> AssistantMessage:
    reason = run.signal.reason or "aborted by abort()"
    logger.info("run %d aborted: %s", run.id, reason)
    return AssistantMessage([TextContent("Run aborted.")], stop_reason="aborted", error_message=reason)


def _requested_model(host: RunHost) -> tuple[Optional[str], Optional[str]]:
    """The model and provider a round asks for, as far as the agent knows (``LLMCallStartEvent``).

    The agent's ``state.model`` when it has one, else the ``model`` and ``provider``
    attributes of ``llm_call`` (``OpenAIClient``, ``AnthropicClient``…); None where
    neither says. Read each round: ``llm_call`` may be replaced between runs.
    """
    configured, llm_call = host.state.model, host.llm_call
    model = _text_attribute(configured, "name") or _text_attribute(llm_call, "model")
    return model, _text_attribute(configured, "provider") or _text_attribute(llm_call, "provider")


def _text_attribute(owner: Any, name: str) -> Optional[str]:
    """``owner.name`` when it is a non-empty str, else None (also when reading it raises: it is user code)."""
    try:
        value = getattr(owner, name, None)
    except user_code_errors():
        return None
    return value if isinstance(value, str) and value else None


def _reported_usage(raw: Any) -> Optional[LLMUsage]:
    """The usage a reply reports, read before ``normalize_reply`` may refuse the reply (the round's tokens were spent)."""
    # the exact types first: isinstance of a message or usage class goes through ABCMeta (dataclasses_json's mixin), a call of its own
    usage = getattr(raw, "usage", None) if type(raw) is AssistantMessage or isinstance(raw, AssistantMessage) else None
    return usage if usage is not None and (type(usage) is LLMUsage or isinstance(usage, LLMUsage)) else None


def _request_context(host: RunHost, steps: RunSteps) -> tuple[Optional[AgentContext], Optional[str]]:
    """Step 2: prepare the context (with the typed answer's tool); returns (context, None) or (None, why it failed)."""
    try:
        ctx = host.prepare_context(host.state, host.emit)
    except user_code_errors() as exc:
        return None, f"prepare_context raised {describe_error(exc)}"
    if not isinstance(ctx, AgentContext):
        return None, f"prepare_context returned {type(ctx).__name__}; expected an AgentContext"
    if steps.answer is not None:  # beyond the spec: the final-answer tool (typed/output.py)
        ctx = steps.answer.offer(ctx)
    return ctx, None


def _call_llm(host: RunHost, run: Run, ctx: AgentContext, answer: Optional[_TypedAnswer] = None) -> tuple[Optional[AssistantMessage], Any, Optional[str]]:
    """Steps 3-4: format the prepared context, call the LLM. Returns (reply, calls, error).

    The reply is checked by ``normalize_reply`` before anything else sees it (decision 15).
    The call runs inside ``relay_deltas`` (docs/streaming.md), so a streaming client's deltas reach
    the sink between this round's start and end events. If the run was aborted by the
    time ``llm_call`` returns or raises, its reply is dropped (None): whether cut short or
    complete, it does not enter the history, and the run ends "aborted". The tokens it
    reported still count in the run's usage, as do those of a reply ``normalize_reply``
    refused (the round happened; only its content was unusable).
    """
    emit = host.emit
    try:
        formatted = host.format_msg_for_llm(ctx, emit)
    except user_code_errors() as exc:
        return None, [], f"format_msg_for_llm raised {describe_error(exc)}"
    if answer is not None:  # beyond the spec: a typed answer asked of the provider (docs/api.md "Native typed answers")
        formatted = answer.request(formatted)
    if getattr(emit, "listened", True):  # nothing is built for a sink nobody set (events.py EventEmitter.listened)
        model, provider = _requested_model(host)
        emit(LLMCallStartEvent(run.id, run.rounds, len(ctx.messages), model, provider, ctx))
    started = time.perf_counter()
    calls: list[AgentToolCall] = []
    reply, error, error_type, usage = None, None, None, None
    try:
        with relay_deltas(emit, run.id, run.rounds, run.signal):  # its deltas reach the sink until it returns
            raw = host.llm_call(formatted)
        usage = _reported_usage(raw)
        reply, calls, error = normalize_reply(raw)
        error_type = "invalid_reply" if error is not None else None
    except user_code_errors() as exc:
        error, error_type = f"LLM call failed: {describe_error(exc)}", type(exc).__qualname__
    if usage is not None:  # tokens spent count even when an abort drops the reply, or decision 15 refuses it
        run.usage = add_usage(run.usage, usage)
    if run.signal.aborted:  # a reply cut short by abort (or finished after it) never enters the history
        reply, calls, error_type = None, [], "aborted"
        error = f"aborted during the LLM call: {run.signal.reason or 'aborted by abort()'}"
    duration = time.perf_counter() - started
    if logger.isEnabledFor(logging.DEBUG):  # one call where debug() makes two
        logger.debug("run %d round %d: llm_call took %.3f s%s", run.id, run.rounds, duration, f"; {error}" if error else "")
    if getattr(emit, "listened", True):
        emit(LLMCallEndEvent(run.id, run.rounds, duration, reply, usage, error, error_type))
    return reply, calls, error


# --- the steps of a run that a capability adds (spec §6 beyond the seed; docs/architecture.md "One run's loop") ---
# The seed's loop is six steps. Every capability beyond it is a step called at one of a few fixed
# points of that loop, and is there only when the agent configures it (pi-agent-core's runLoop
# does the same with its optional hooks): a run without limits, typed answers or approvals does
# the seed's six steps and nothing else (docs/performance.md "W1").


class _TypedAnswer:
    """The typed answer's steps (docs/api.md "Typed answers"): offer its tool or ask for its schema, read a text reply, read a batch.

    Made once per run, only when the agent has an ``output_type``; ``native`` (the
    provider's JSON-schema mode, docs/api.md "Native typed answers") is settled then,
    from ``output_mode`` and the ``llm_call`` of that run. Run thread only.
    """

    __slots__ = ("spec", "host", "run", "native")

    def __init__(self, spec: OutputSpec, host: RunHost, run: Run) -> None:
        self.spec, self.host, self.run = spec, host, run
        self.native = spec.native_for(host.llm_call)

    def offer(self, ctx: AgentContext) -> AgentContext:
        """After step 2: the prepared context, with the final-answer tool when the answer has one and is not asked of the provider."""
        if self.spec.tool is None or self.native:
            return ctx
        return AgentContext(ctx.system_prompt, ctx.messages, offered_tools(ctx.tools, self.spec))

    def request(self, formatted: Any) -> Any:
        """Step 3: the formatted request, with the answer's ``response_format`` when the provider is asked for it (a copy: the formatter's dict is left as it is)."""
        if not self.native or not isinstance(formatted, dict):
            return formatted
        return {**formatted, "response_format": self.spec.response_format()}

    def read_text(self, reply: AssistantMessage) -> tuple[AssistantMessage, Optional[AssistantMessage]]:
        """Step 5 found no call: append the reply (with its ``output`` when valid); returns (reply, the run's response or None to go on)."""
        verdict = self.spec.from_text(reply, self.native)
        if verdict.valid:
            reply = replace(reply, output=verdict.value)
        self.host.append(reply)
        if verdict.valid:
            return reply, reply
        self.run.invalid_answers += 1
        if self.run.invalid_answers > self.spec.retries:
            return reply, output_invalid_response(verdict.why or "", self.spec.retries)
        self.host.append(self.spec.retry_message(verdict.why or "", self.native))
        return reply, None

    def read_batch(self, reply: AssistantMessage, calls: list[Any], results: list[ToolResultMessage]) -> Optional[AssistantMessage]:
        """After step 6: the run's response when the batch answered (or failed past the retries), else None.

        A valid ``final_result`` call: the agent's final reply, appended, is the response. An
        invalid one (its arguments, the type's own check, a block or a rejection: its error
        result) counts against ``output_retries``; past them, "output_invalid". Used after
        each batch and after a batch resumed from approvals (approvals.py ``start_of_run``).
        """
        given = self.spec.from_batch(calls, results) if not self.run.signal.aborted else None
        if given is None:
            return None
        if given.valid:
            final = self.spec.final_message(reply, given.value)
            self.host.append(final)
            return final
        self.run.invalid_answers += 1
        if self.run.invalid_answers > self.spec.retries:
            return output_invalid_response(given.why or "", self.spec.retries)
        return None


@dataclass(frozen=True)
class RunSteps:
    """The steps one run adds to the seed's loop (spec §6), each there only when its capability is configured.

    Fixed points of ``_rounds``, in the order a round meets them:

    - ``before_round``: at the top of every round, before step 1 takes more input; each
      returns the response that ends the run, or None (``max_rounds``, decision 12; the
      usage limits passed by the rounds so far and ``max_requests``, decision 20).
    - ``before_request``: after step 2, before step 3 formats and sends: the response that
      ends the run, or None (a request whose estimated input passes a token limit).
    - ``compact``: after step 2, before ``before_request``: the context to send, compacted when the
      history outgrows the context window, or the response that ends the run (nothing fits); called
      again once after a ``ContextOverflowError`` (docs/sessions.md "Long conversations").
    - ``answer``: the typed answer (``_TypedAnswer``): it offers its tool after step 2,
      reads a reply without calls at step 5 and each batch after step 6.
    - ``allowance``: ``max_tool_calls``, handed to each batch (``batch.ToolCallAllowance``);
      the run ends after a batch that reached it.

    Approvals (decision 18) are read from the history where a run starts and from what a
    batch defers; sub-run usage is collected by the run's collector (``_sub_runs.py``),
    which costs nothing until a sub-run reports. Neither adds a step to a round.
    """

    before_round: tuple[Callable[[Run], Optional[AssistantMessage]], ...] = ()
    before_request: Optional[Callable[[Run, AgentContext], Optional[AssistantMessage]]] = None
    answer: Optional[_TypedAnswer] = None
    allowance: Optional[ToolCallAllowance] = None
    compact: Optional[Callable[[Run, AgentContext, bool], "AgentContext | AssistantMessage"]] = None


def run_steps(host: RunHost, run: Run) -> RunSteps:
    """The steps of ``run``: one for each capability the agent configures, none for the others."""
    spec = _output_spec(host)
    limits: Optional[UsageLimits] = getattr(host, "usage_limits", None)  # the run's; a host may have none
    max_rounds = host.max_rounds
    before_round: list[Callable[[Run], Optional[AssistantMessage]]] = []
    if max_rounds is not None:  # decision 12; checked before input, which waits for the next run
        before_round.append(lambda run: max_rounds_response(max_rounds) if rounds_exhausted(run.rounds, max_rounds) else None)
    before_request = None
    if limits is not None:
        if any(getattr(limits, name) is not None for name in _LIMITS_OF_USAGE):  # checked where max_rounds is: after a round's results are in the history
            before_round.append(lambda run: _usage_passed(limits, run))
        if limits.max_requests is not None:  # decision 20: a request beyond max_requests is not sent
            before_round.append(lambda run: _stopped_by(_requests_passed(limits, run.rounds + run.side_requests)))
        if limits.max_input_tokens is not None or limits.max_total_tokens is not None:  # decision 20: by its estimate
            before_request = lambda run, ctx: _stopped_by(_request_passes_tokens(limits, run.usage, ctx.system_prompt, ctx.messages, ctx.tools))  # noqa: E731
    answer = _TypedAnswer(spec, host, run) if spec is not None else None
    compactor = getattr(host, "compactor", None)  # YiemAgent(compaction=...): context/compaction.py
    max_requests = limits.max_requests if limits is not None else None
    compact = (lambda run, ctx, overflowed: compactor.compact(host, run, ctx, overflowed, max_requests)) if compactor is not None else None
    return RunSteps(tuple(before_round), before_request, answer, _tool_call_allowance(limits, spec), compact)


_LIMITS_OF_USAGE = ("max_input_tokens", "max_output_tokens", "max_total_tokens", "max_tool_calls")
"""The limits ``UsageLimits.passed`` reads: the run's summed usage is checked between rounds only when one is set."""


def _stopped_by(cap: Optional[str]) -> Optional[AssistantMessage]:
    """The response of a run a cap stops before it sends (decision 20), or None when ``cap`` is None."""
    return usage_limit_response(cap, "reached") if cap is not None else None


def _usage_passed(limits: UsageLimits, run: Run) -> Optional[AssistantMessage]:
    passed = limits.passed(run.usage, run.tool_calls) if run.rounds else None
    return usage_limit_response(passed) if passed is not None else None


def _output_spec(host: RunHost) -> Optional[OutputSpec]:
    """The agent's typed answer (``YiemAgent(output_type=...)``), or None; a host may have none."""
    return getattr(host, "output_spec", None)


def _answer_of_batch(host: RunHost, run: Run, reply: AssistantMessage, calls: list[Any], results: list[ToolResultMessage]) -> Optional[AssistantMessage]:
    """A whole batch read for the typed answer (``_TypedAnswer.read_batch``): the run's response when it ends the run, else None."""
    spec = _output_spec(host)
    return _TypedAnswer(spec, host, run).read_batch(reply, calls, results) if spec is not None else None


def _rounds(host: RunHost, run: Run) -> AssistantMessage:
    """Spec §6 ``_processMessage``'s loop: its six steps in the seed's order, and the run's own steps (``RunSteps``) at fixed points.

    Step 1 after the first round takes input only when the host says some waits (``input_waiting``,
    one check): a message put or added after that check is taken by the next round's, as it would
    be by a take made a moment earlier (docs/performance.md "W1").
    """
    steps = run_steps(host, run)
    waiting = getattr(host, "input_waiting", None)  # optional (RunHost): one cheap check a round when nothing is queued
    paused = False  # the last reply was a turn the server paused (stop_reason "pause_turn")
    while True:
        for check in steps.before_round:
            stop = check(run)
            if stop is not None:
                return stop
        if run.rounds and not paused and (waiting is None or waiting()):  # a paused turn goes back as the last message: input joins after it is done
            _take_input(host, with_input=not host.closing)  # step 1 again: messages that arrived meanwhile join this run
        if run.signal.aborted:
            return _aborted_response(run)
        failure = host.take_session_failure()  # a message the session could not store (docs/failures.md)
        if failure is not None:
            return _error_response(failure)
        ctx, error = _request_context(host, steps)  # step 2
        if ctx is not None and steps.compact is not None:
            compacted = steps.compact(run, ctx, False)
            if isinstance(compacted, AssistantMessage):
                return compacted
            if run.signal.aborted:  # during a summary request: nothing more is sent
                return _aborted_response(run)
            ctx = compacted
        if ctx is not None and steps.before_request is not None:
            stop = steps.before_request(run, ctx)
            if stop is not None:
                return stop
        run.rounds += 1
        if ctx is None:
            return _error_response(error or "no context")
        reply, tool_calls, error = _call_llm(host, run, ctx, steps.answer)  # steps 3 and 4 (and 5: normalize_reply extracts the calls)
        if steps.compact is not None and error is not None and error.startswith(_OVERFLOWED) and not _stopped(steps, run):
            compacted = steps.compact(run, ctx, True)  # once after a ContextOverflowError: compact more, ask again
            if isinstance(compacted, AssistantMessage):  # nothing smaller can be sent: the server's refusal ends the run
                return _error_response(error)
            if run.signal.aborted:
                return _aborted_response(run)
            ctx = compacted
            run.rounds += 1
            reply, tool_calls, error = _call_llm(host, run, ctx, steps.answer)
        if reply is None and run.signal.aborted:  # _call_llm dropped the reply of an aborted call
            return _aborted_response(run)
        if error is not None or reply is None:
            return _error_response(error or "no reply")
        if reply.stop_reason == "error":  # an llm_call that reports its failure instead of raising
            return reply if reply.error_message else replace(reply, error_message="llm_call returned stop_reason 'error'")
        # beyond the spec: a paused turn (Anthropic's server tools) is sent again to go on, a round like any (docs/streaming.md)
        paused = reply.stop_reason == "pause_turn" and not tool_calls
        if paused:
            host.append(reply)
            continue
        if not tool_calls:  # step 5: no tool calls, this is the final response
            if steps.answer is None or reply.stop_reason == "refusal":  # a refusal ends the run, never retried (docs/streaming.md "Refusals")
                host.append(reply)
                return reply
            reply, response = steps.answer.read_text(reply)
            if response is not None:
                return response
            continue
        host.append(reply)
        response = _tool_round(host, run, steps, ctx, reply, tool_calls)  # step 6
        if response is not None:
            return response


def _stopped(steps: RunSteps, run: Run) -> bool:
    """Whether a request made again now would pass a cap of the run (``max_rounds``, ``max_requests``, usage) or follow its abort.

    The request made again after a ``ContextOverflowError`` is a request like any (decision
    20): when a cap forbids it, the run ends with the overflow that made it needed.
    """
    return run.signal.aborted or any(check(run) is not None for check in steps.before_round)


def _tool_round(host: RunHost, run: Run, steps: RunSteps, ctx: AgentContext, reply: AssistantMessage, tool_calls: list[Any]) -> Optional[AssistantMessage]:
    """Step 6: run the reply's calls, append their results; the run's response when the batch ends it, else None."""
    if reply.stop_reason == "length":  # decision 10: a cut-off call is never run
        batch = answer_tool_calls_with_error(tool_calls, TRUNCATED_CALL_MESSAGE, host.emit)
    else:
        batch = _execute_batch(host, run, steps.allowance, ctx, reply, tool_calls)
    for tool_result in batch.messages:
        host.append(normalize_tool_result(tool_result))
    if batch.deferred:  # decision 18: the pending state goes into the history, and the run ends
        if run.signal.aborted:  # nothing waits after an abort
            for result in answer_deferred_aborted(batch.deferred):
                host.append(result)
            return _aborted_response(run)
        for step in deferral_steps(batch.deferred):
            host.append(normalize_message(step))
        return awaiting_response(batch.deferred)
    if steps.answer is not None:  # the final-answer tool (typed/output.py)
        ended = steps.answer.read_batch(reply, tool_calls, batch.messages)
        if ended is not None:
            return ended
    if batch.terminate:
        return terminated_response(batch.messages, reply)
    if run.signal.aborted:
        return _aborted_response(run)
    passed = steps.allowance.passed() if steps.allowance is not None else None
    if passed is not None:  # decision 20: calls past max_tool_calls were answered, not run; the run ends here
        return usage_limit_response(passed, "reached")
    return None


def _execute_batch(
    host: RunHost, run: Run, allowance: Optional[ToolCallAllowance], ctx: AgentContext, reply: AssistantMessage, tool_calls: list[Any]
) -> AgentToolCallBatch:
    """Step 6's ``executeToolCalls``, with the run's context for its tools and hooks (``RunContext``, types.py).

    The batch's ``AgentContext`` holds a copy of the history for the hooks that read it (spec §14);
    with no hook nothing reads its messages, and the batch gets the round's context as it is
    (docs/performance.md "W1"). The ``RunContext``'s snapshot is the history the batch started
    from: its first ``count`` messages, read when a tool or hook first asks. While a run is on
    the history only grows at its end (``RunHost``: the run alone appends; it is edited only
    while the agent is idle), so that prefix is the same whenever it is read during the run; from
    the run's end it is read from a copy (``_RunHistory``), so a thread a tool started that asks
    only once the idle history was edited still gets the history its batch started from. The batch's scope
    is given to the batch, not set as this thread's context: each call sets the context
    variable once, to a scope of its own on the batch's (``types.run_context_later``), so a
    call's tools and hooks, and threads started with a copy of the call's context, see their
    own batch's context however late they ask; outside the calls it is what it was before.
    """
    config = host.loop_config()
    if config.before_tool_call is not None or config.after_tool_call is not None:
        context = AgentContext(ctx.system_prompt, host.history(), ctx.tools)
    else:
        context = ctx
    host.state.pending_tool_calls = {tool_calls[0].id} if len(tool_calls) == 1 else {c.id for c in tool_calls}
    # beyond the spec: what tools and hooks see of the run (types.py current_run_context), made only if one asks;
    # handed to the batch, whose calls' scopes hold it, rather than set as this thread's context around the batch
    scope = _batch_scope(host, run)
    try:
        return execute_tool_calls_within(allowance, context, reply, tool_calls, config, run.signal, host.emit, scope)
    finally:
        host.state.pending_tool_calls = set()
        if allowance is not None:
            run.tool_calls = allowance.used
        if run.late:  # an agent_tool's sub-runs spent for this run (_sub_runs.py)
            _fold_late_usage(run)


def _batch_scope(host: RunHost, run: Run) -> RunScope:
    """The ``RunContext`` scope of a batch starting now (``_execute_batch``, and approved calls resumed: approvals.py ``start_of_run``), made only if a call asks.

    Its snapshot is the history as the batch starts: its first ``count`` messages, read from
    the run's ``_RunHistory`` (the live history during the run, a copy from its end).
    """
    history = run.history
    if history is None or history.items is not host.state.messages:
        history = run.history = _RunHistory(host.state.messages)
    return run_context_later(partial(_batch_run_context, getattr(host, "deps", None), run.id, run.rounds, run.usage, history, len(history.items)))


def _batch_run_context(deps: Any, run_id: int, rounds: int, usage: LLMUsage, history: _RunHistory, count: int) -> RunContext:
    """A batch's ``RunContext`` (its ``tool_call_id`` None), its snapshot the first ``count`` messages of ``history``."""
    return RunContext(deps, run_id, rounds, usage, MessagesSnapshot(history.items[:count]), None)  # type: ignore[arg-type]  # the field's descriptor takes it


def _tool_call_allowance(limits: Optional[UsageLimits], answer: Optional[OutputSpec]) -> Optional[ToolCallAllowance]:
    """The run's ``max_tool_calls`` (limits.py), or None when it has none; the typed answer's tool does not count."""
    if limits is None or limits.max_tool_calls is None:
        return None
    return ToolCallAllowance(limits.max_tool_calls, exempt=() if answer is None or answer.tool is None else (answer.tool.name,))


def _answer_unanswered_calls(host: RunHost, why: str) -> None:
    """After a failure inside a batch: give each call of the last reply that has no result an error result (decision 1)."""
    history = host.history()
    answered: set[str] = set()
    for message in reversed(history):
        if isinstance(message, ToolResultMessage):
            answered.add(message.tool_call_id)
        elif isinstance(message, ApprovalMessage):  # an approval step (decision 18) answers nothing
            continue
        elif isinstance(message, AssistantMessage):
            for call in extract_tool_calls(message)[1]:
                if call.id not in answered:
                    content = [TextContent(f"The tool call was not completed: {why}")]
                    host.append(ToolResultMessage(call.id, call.name, content, {}, None, None, True))
            return
        else:
            return


def process_message(host: RunHost, run: Run) -> AssistantMessage:
    """Process queued messages until a final response (spec §6 ``_processMessage``).

    Takes the agent as a ``RunHost``. Returns the LLM's final reply (already appended to
    the history), or a response the agent made: "tool_use_terminated" (spec §10),
    "aborted", or "error" (decision 11). Those
    made by the agent are not appended to the history, so that the history stays a valid
    conversation to send to an LLM again. Never raises.
    """
    started = time.perf_counter()
    messages, taken, dropped, continued = _read_input(host)
    logger.debug("run %d started: %d new message(s)%s", run.id, taken, " (continue_agent)" if continued else "")
    if getattr(host.emit, "listened", True):  # nothing is built for a sink nobody set (events.py EventEmitter.listened)
        host.emit(AgentRunStartEvent(run.id, taken))
    sub_runs = collecting(_late_usage_of(host, run))  # an agent_tool's sub-runs report their usage to this run (_sub_runs.py)
    try:
        # approvals first: their results go before any new message (decision 18)
        in_play = _approval_steps_in_play(host.state.messages, messages)
        ended = start_of_run(host, run.signal, messages, lambda *batch: _answer_of_batch(host, run, *batch), partial(_batch_scope, host, run)) if in_play else None
        _append_input(host, messages)
        if ended is not None:
            response = ended
        elif taken == 0 and host.closing:  # shutdown took this run's input (decision 16): no LLM round for nothing
            response = AssistantMessage([], stop_reason="aborted", error_message="the agent was shut down before the run took its input")
        elif taken == 0 and dropped and not continued:  # nothing to answer: a round would send the LLM no new message
            response = _error_response(dropped)
        elif not host.state.messages:  # no conversation to send: continues alone (accepted while a follow-up waited)
            response = _error_response(NOTHING_TO_CONTINUE)
        else:
            response = _rounds(host, run)
    except BaseException as exc:  # a bug here or in a hook must not strand the run: the loop waits for its response
        logger.exception("run %d failed", run.id)
        response = _error_response(f"internal error: {describe_error(exc)}")
        _answer_unanswered_calls(host, response.error_message or "internal error")
    finally:
        stop_collecting(sub_runs)
        if run.history is not None:  # a tool's thread may ask for its batch's context once the idle history is edited
            run.history.items = run.history.items[:]  # a slice: one pass in C, a reference added to each message
    host.state.error_message = response.error_message if response.stop_reason == "error" else None
    _fold_late_usage(run, end=True)
    host.record_usage(run.usage)
    duration = time.perf_counter() - started
    # docs/tracing.md "Logging": DEBUG only, so that a quiet run that succeeds logs nothing at INFO or above
    logger.debug(
        "run %d ended: stop_reason %r after %d round(s) in %.3f s, %d input + %d output tokens",
        run.id, response.stop_reason, run.rounds, duration, run.usage.input_tokens, run.usage.output_tokens,
    )
    if getattr(host.emit, "listened", True):
        host.emit(AgentRunEndEvent(run.id, response, run.rounds, duration, run.usage))
    return response
