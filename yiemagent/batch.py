"""Batches of tool calls: sequential and parallel execution, termination (spec §9, §10, §11).

Whatever happens, a batch answers every call exactly once, in call order, and emits
exactly one ``ToolExecStartEvent`` and one ``ToolExecEndEvent`` per call (decision 1).
Calls not yet run when the signal fires are answered "Operation aborted". Calls past the
run's ``max_tool_calls`` (a ``ToolCallAllowance``) are answered with an error result
naming the limit and never prepared or run (decision 20; docs/api.md "Limits that are caps").
"""

from __future__ import annotations

import contextvars
import logging
from concurrent.futures import Future
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Union

from .types import (
    AbortSignal,
    AgentContext,
    AgentLoopConfig,
    AgentTool,
    AgentToolCall,
    AgentToolCallBatch,
    AgentToolResult,
    AssistantMessage,
    FinalizedOutcome,
    ImmediateOutcome,
    PendingApproval,
    PreparedToolCall,
    RunScope,
    TextContent,
    ToolResultMessage,
    built,
    call_context,
    enter_call_context,
    leave_run_context,
)
from ._failures import describe_error, user_code_errors
from ._threads import tool_pool
from .events import EventEmitter, ToolExecEndEvent, ToolExecStartEvent, as_emitter
from .pipeline import (
    ABORTED_MESSAGE,
    call_tool,
    create_error_tool_result,
    create_tool_result_message,
    execute_prepared_tool_call,
    finalize_executed_tool_call,
    prepare_tool_call,
    schema_admits,
    tool_result_message,
)
from ._bounds import json_copy

__all__ = [
    "ToolCallAllowance",
    "answer_tool_calls_with_error",
    "execute_tool_calls",
    "execute_tool_calls_parallel",
    "execute_tool_calls_sequential",
    "execute_tool_calls_within",
    "should_terminate",
    "terminated_response",
]

logger = logging.getLogger("yiemagent.batch")


# --- max_tool_calls: a cap, not a report (decision 20) -------------------------------


class ToolCallAllowance:
    """What is left of a run's ``max_tool_calls`` (docs/api.md "Limits that are caps").

    A call counts when the agent lets it go ahead: it passed PREPARE (its tool exists, its
    arguments are valid, ``before_tool_call`` did not block it), so it is executed now or,
    deferred for approval, once a person approves it. A call that fails in PREPARE never
    ran and does not count; nor does a call of ``exempt`` tools (the typed answer's
    ``final_result``, which runs no user code). Once ``cap`` calls were let through, every
    later call of the run is refused before PREPARE, in call order: in a parallel batch the
    calls let through are the first ones that pass PREPARE, whatever order they finish in.

    Thread safety: used by one thread at a time, the one preparing the batch's calls (the
    run thread): both batch modes prepare in order in the calling thread.
    """

    __slots__ = ("cap", "used", "refused", "exempt")

    def __init__(self, cap: int, used: int = 0, exempt: Iterable[str] = ()) -> None:
        self.cap = cap
        self.used = used  # calls let through in this run so far
        self.refused = 0  # calls refused in this run so far
        self.exempt = frozenset(exempt)

    def admits(self, call: AgentToolCall) -> bool:
        """Whether ``call`` may go on to PREPARE; a refusal is counted."""
        if call.name in self.exempt or self.used < self.cap:
            return True
        self.refused += 1
        return False

    def take(self, call: AgentToolCall) -> None:
        """``call`` passed PREPARE: it counts against the cap (unless its tool is exempt)."""
        if call.name not in self.exempt:
            self.used += 1

    def refusal(self) -> str:
        """The error result's text of a call past the cap: the limit named."""
        return (
            f"Not run: this run reached its usage limit max_tool_calls={self.cap} "
            f"({self.used} tool calls run); the agent runs no more tool calls in this run."
        )

    def passed(self) -> Optional[str]:
        """The limit named with its counts once a call was refused ("max_tool_calls=3 (3 tool calls run, 2 refused)"); else None."""
        if not self.refused:
            return None
        return f"max_tool_calls={self.cap} ({self.used} tool calls run, {self.refused} refused)"


def should_terminate(finalized: list[FinalizedOutcome]) -> bool:
    """True only for a non-empty batch whose every result asks to terminate (spec §10 shouldTerminate)."""
    return _every_one_asks([f.result.terminate for f in finalized])


def _every_one_asks(asks: Sequence[Any]) -> bool:
    """Spec §10's rule, for ``should_terminate`` and ``_batch`` alike: there are results, and each asks to terminate."""
    return bool(asks) and all(asks)


def terminated_response(results: Sequence[ToolResultMessage], reply: Optional[AssistantMessage] = None) -> AssistantMessage:
    """Spec §10 "Batch Processing": the final response of a batch whose tools all asked to stop.

    "Tool execution completed." then the results' text blocks. ``reply``, the LLM's reply that
    made the calls, gives its model and usage; approved calls resumed at the start of a run
    (``approvals.start_of_run``) have none in that run.
    """
    content: list[Any] = [TextContent("Tool execution completed.")]
    for result in results:
        for block in result.content:
            if isinstance(block, TextContent):
                content.append(block)
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                content.append(TextContent(block["text"]))
    failed = any(m.is_error for m in results)
    made_by: dict[str, Any] = {} if reply is None else {"api": reply.api, "provider": reply.provider, "model": reply.model, "usage": reply.usage}
    return AssistantMessage(
        content,
        stop_reason="tool_use_terminated",
        error_message="One or more tool calls failed" if failed else None,
        **made_by,
    )


def _aborted(signal: Optional[AbortSignal]) -> bool:
    return signal is not None and signal.aborted


def _execute_and_finalize(
    context: AgentContext,
    assistant_msg: Any,
    prep: PreparedToolCall,
    config: AgentLoopConfig,
    signal: Optional[AbortSignal],
    emit: EventEmitter,
    scope: call_context,
) -> FinalizedOutcome:
    """EXECUTE then FINALIZE one prepared call and emit its end event; never raises. ``scope``: the call's, as PREPARE had it."""
    try:
        with scope:  # the call's RunContext, in the thread that runs it (types.py)
            executed = execute_prepared_tool_call(prep, signal, emit)
            finalized = finalize_executed_tool_call(context, assistant_msg, prep, executed, config, signal)
    except user_code_errors() as exc:  # a bug in this library must still not lose the call
        logger.exception("internal error while running tool %r", prep.tool.name)
        finalized = FinalizedOutcome(
            prep.tool_call, create_error_tool_result(f"Internal error running tool {prep.tool.name!r}: {describe_error(exc)}"), True
        )
    if emit.listened:  # nothing is built for a sink nobody set (EventEmitter.listened)
        emit(ToolExecEndEvent(prep.tool_call.id, prep.tool_call.name, finalized.result, finalized.is_error))
    return finalized


def _end_immediately(tool_call: AgentToolCall, outcome: ImmediateOutcome, emit: EventEmitter) -> FinalizedOutcome:
    """Finalize a call that ended in PREPARE, emitting its end event (decision 1)."""
    emit(ToolExecEndEvent(tool_call.id, tool_call.name, outcome.result, outcome.is_error))
    return FinalizedOutcome(tool_call, outcome.result, outcome.is_error)


def _start_and_prepare(
    context: AgentContext,
    assistant_msg: Any,
    tool_call: AgentToolCall,
    config: AgentLoopConfig,
    signal: Optional[AbortSignal],
    emit: EventEmitter,
    allowance: Optional[ToolCallAllowance],
    scope: call_context,
) -> PreparedToolCall | FinalizedOutcome | PendingApproval:
    """Emit the call's start event, then PREPARE it — unless the signal has already fired, or the call is past the cap.

    Returns the prepared call, or the finalized outcome of a call that ended here (its
    end event already emitted), or the ``PendingApproval`` of a call ``before_tool_call``
    deferred (decision 18): its end event carries a result whose ``details`` say
    ``{"deferred": True, "reason": ...}``; that result never enters the history.
    ``allowance`` (the run's ``max_tool_calls``, decision 20): a call past it is answered
    with an error naming the limit before PREPARE; a call that passes PREPARE counts.
    """
    if emit.listened:
        emit(ToolExecStartEvent(tool_call.id, tool_call.name, tool_call.arguments))
    if _aborted(signal):
        prep: PreparedToolCall | ImmediateOutcome | PendingApproval = ImmediateOutcome(create_error_tool_result(ABORTED_MESSAGE), True)
    elif allowance is not None and not allowance.admits(tool_call):
        prep = ImmediateOutcome(create_error_tool_result(allowance.refusal()), True)
    else:
        with scope:  # before_tool_call sees the call's RunContext (types.py)
            prep = prepare_tool_call(context, assistant_msg, tool_call, config, signal)
        if allowance is not None and not isinstance(prep, ImmediateOutcome):  # to be run now, or once approved
            allowance.take(tool_call)
    if isinstance(prep, ImmediateOutcome):
        return _end_immediately(tool_call, prep, emit)
    if isinstance(prep, PendingApproval):
        waiting = AgentToolResult([TextContent(f"Awaiting approval: {prep.reason}")], {"deferred": True, "reason": prep.reason})
        emit(ToolExecEndEvent(tool_call.id, tool_call.name, waiting, False))
    return prep


_Answered = tuple[ToolResultMessage, bool]
"""A call answered the short way (``_plain_call``): its result message, and whether its result asks to terminate."""


def _plain_call(
    tools: Mapping[str, AgentTool], tool_call: AgentToolCall, signal: Optional[AbortSignal], emit: EventEmitter, outer: Optional[RunScope] = None
) -> Optional[_Answered]:
    """PREPARE -> EXECUTE -> FINALIZE of a plain call, in one step, and its result message; None for any other call (docs/performance.md "W1").

    Spec §8's three phases and §11's message, for a call that takes none of their branches: its tool exists
    and has no ``prepare_arguments``, no ``validate_required_args`` of its own, no
    ``timeout_s`` and no ``requires_approval``; its arguments were read without a problem
    and pass the tool's schema (the same check, ``pipeline.schema_admits``); the signal has
    not fired. The batch makes it only when nothing else can act on the call: no
    ``before_tool_call`` or ``after_tool_call`` hook, no ``max_tool_calls``, nobody
    listening to the call's events as it starts (``_run_batch``). Such a call is validated, gets its
    own copy of the arguments, and runs (``pipeline.call_tool``) in its ``RunContext``
    scope (entered once on the batch's ``outer``: ``types.enter_call_context``), as the three phases would run it,
    without the outcome of each phase as an object of its own: its result goes straight into
    the message ``create_tool_result_message`` would make (``pipeline.tool_result_message``).
    Anything else, or anything raised on the way, is left to the three phases, which do it
    again from the start and name the cause: nothing has run yet. ``tests/extras/test_round_cost.py``
    holds it to the three phases: the same result messages, the same ending of the batch, the same
    arguments, ``RunContext`` and partial-result answers for each tool.
    """
    tool = tools.get(tool_call.name)
    if (
        tool is None
        or tool_call.arguments_error is not None
        or tool.prepare_arguments is not None
        or tool.validate_required_args is not None
        or tool.timeout_s is not None
        or tool.requires_approval
        or (signal is not None and signal.aborted)
    ):
        return None
    try:
        if not schema_admits(tool_call.arguments, tool.input_schema):
            return None
    except user_code_errors():  # the three phases say what failed
        return None
    # the tool gets arguments of its own: the call in the history keeps what the model sent (as prepare_tool_call)
    args = json_copy(tool_call.arguments)
    scope = enter_call_context(tool_call.id, outer)  # the call's RunContext, if the tool asks (types.py)
    try:
        result, is_error = call_tool(tool, tool_call, args, signal, emit)
    except user_code_errors() as exc:  # a bug in this library must still not lose the call (as _execute_and_finalize)
        logger.exception("internal error while running tool %r", tool.name)
        result, is_error = create_error_tool_result(f"Internal error running tool {tool.name!r}: {describe_error(exc)}"), True
    finally:
        if scope is not None:
            leave_run_context(scope)
    return tool_result_message(tool_call, result, is_error), bool(result.terminate)


_Step = Union[_Answered, FinalizedOutcome, PendingApproval, "Future[FinalizedOutcome]"]


def _batch(steps: Sequence[_Step]) -> AgentToolCallBatch:
    """The batch of ``steps``, in call order: each call's result message (a pool call's once it is done), the deferred calls apart.

    It terminates by ``should_terminate``'s rule (spec §10, ``_every_one_asks``) when no call was deferred.
    """
    messages: list[ToolResultMessage] = []
    deferred: list[PendingApproval] = []
    asks: list[Any] = []  # each result's terminate, in call order
    for step in steps:
        if isinstance(step, Future):
            step = step.result()
        if isinstance(step, tuple):
            message, stops = step
        elif isinstance(step, FinalizedOutcome):
            message, stops = create_tool_result_message(step), step.result.terminate
        else:
            deferred.append(step)
            continue
        messages.append(message)
        asks.append(stops)
    return built(AgentToolCallBatch, messages=messages, terminate=not deferred and _every_one_asks(asks), deferred=deferred)


def execute_tool_calls_sequential(
    context: AgentContext,
    assistant_msg: Any,
    tool_calls: list[AgentToolCall],
    config: AgentLoopConfig,
    signal: Optional[AbortSignal],
    event_sink: Any,
) -> AgentToolCallBatch:
    """Run each call through PREPARE -> EXECUTE -> FINALIZE, one after another, in this thread.

    Spec: §9 "Sequential Execution — executeToolCallsSequential()".
    Deviation: decision 1 — once the signal has fired, the remaining calls are not
    dropped (the spec ``break``s) but answered "Operation aborted", because LLM APIs
    reject a history in which a tool call has no result.
    """
    return _run_batch(context, assistant_msg, tool_calls, config, signal, as_emitter(event_sink), None, False)


def execute_tool_calls_parallel(
    context: AgentContext,
    assistant_msg: Any,
    tool_calls: list[AgentToolCall],
    config: AgentLoopConfig,
    signal: Optional[AbortSignal],
    event_sink: Any,
) -> AgentToolCallBatch:
    """Prepare the calls in order, run the prepared ones concurrently, return results in call order.

    Spec: §9 "Parallel Execution — executeToolCallsParallel()"; decision 6.

    Each prepared call starts on the pool as soon as it is prepared, as the spec schedules
    its task inside the preparation loop; a batch of one call runs in this thread, in a copy
    of its context (nothing would run beside it: the hand-off alone would cost). The pool (``yiemagent._threads``) always has a
    free thread per call in flight, so no call waits for a worker: a batch of N sleeping
    tools takes about as long as one. Every call is collected before returning; a tool
    with ``timeout_s`` that overruns does not hold the batch up (see
    ``execute_prepared_tool_call``).
    """
    return _run_batch(context, assistant_msg, tool_calls, config, signal, as_emitter(event_sink), None, True)


def _run_batch(
    context: AgentContext,
    assistant_msg: Any,
    tool_calls: list[AgentToolCall],
    config: AgentLoopConfig,
    signal: Optional[AbortSignal],
    emit: EventEmitter,
    allowance: Optional[ToolCallAllowance],
    parallel: bool,
    outer: Optional[RunScope] = None,
) -> AgentToolCallBatch:
    """Both modes: the calls are prepared in call order in this thread (so a cap lets the first ones through);
    a prepared call runs here at once (sequential) or starts on the pool (parallel) before the next is prepared.

    A parallel batch of one call has no other call to run beside it: it runs here, in a copy of
    this thread's context as a pool thread would run it, without the hand-off to a pool thread
    and back that the batch would wait for anyway (docs/performance.md "W1"). When nothing but the
    three phases can act on a call (no hook, no cap, no listener) and the batch runs its calls
    here, a plain call takes the short way through them (``_plain_call``), any other the long one.
    ``outer``: the run's scope of this batch (``types.run_context_later``), each call's ``RunContext``
    scope made on it; None: the context current in this thread (a batch outside a run)."""
    steps: list[_Step] = []
    alone = len(tool_calls) == 1
    # nothing but the three phases acts on a call: each may take the short way (_plain_call); a parallel batch of more runs them on the pool.
    # Whether anyone listens is asked at each call: a sink set during a batch gets the events of the calls that start after it
    plain = (not parallel or alone) and allowance is None and config.before_tool_call is None and config.after_tool_call is None
    for tool_call in tool_calls:
        if plain and not emit.listened:
            answered = contextvars.copy_context().run(_plain_call, context.tools, tool_call, signal, emit, outer) if parallel else _plain_call(context.tools, tool_call, signal, emit, outer)
            if answered is not None:
                if alone:  # the batch of one plain call: its one result, which asks to terminate or not (``_batch``'s rule for one)
                    return built(AgentToolCallBatch, messages=[answered[0]], terminate=answered[1], deferred=[])
                steps.append(answered)
                continue
        scope = call_context(tool_call.id, outer)
        step = _start_and_prepare(context, assistant_msg, tool_call, config, signal, emit, allowance, scope)
        if isinstance(step, PreparedToolCall):
            if parallel and alone:
                step = contextvars.copy_context().run(_execute_and_finalize, context, assistant_msg, step, config, signal, emit, scope)
            elif parallel:
                steps.append(tool_pool.submit(_execute_and_finalize, context, assistant_msg, step, config, signal, emit, scope))
                continue
            else:
                step = _execute_and_finalize(context, assistant_msg, step, config, signal, emit, scope)
        steps.append(step)
    return _batch(steps)


def execute_tool_calls(
    context: AgentContext,
    assistant_msg: Any,
    tool_calls: list[AgentToolCall],
    config: AgentLoopConfig,
    signal: Optional[AbortSignal],
    event_sink: Any,
) -> AgentToolCallBatch:
    """Run a batch, sequentially or in parallel (spec §9 "Dispatcher — executeToolCalls()").

    The whole batch runs sequentially when ``config.tool_execution`` is "sequential" or
    any known tool in it has ``parallel_tool_execute=False``; unknown tools do not count,
    they fail in PREPARE either way. Sequential is the safe default.
    """
    return execute_tool_calls_within(None, context, assistant_msg, tool_calls, config, signal, event_sink)


def execute_tool_calls_within(
    allowance: Optional[ToolCallAllowance], context: AgentContext, assistant_msg: Any, tool_calls: list[AgentToolCall],
    config: AgentLoopConfig, signal: Optional[AbortSignal], event_sink: Any, outer: Optional[RunScope] = None,
) -> AgentToolCallBatch:
    """``execute_tool_calls`` within a run's ``max_tool_calls`` (decision 20; ``ToolCallAllowance``).

    Both modes prepare the calls in call order in this thread, so the calls let through
    are the first ones that pass PREPARE, whichever mode runs them; the calls past the cap
    are answered with an error result naming the limit. ``allowance`` None: no cap.
    ``outer``: the batch's ``RunContext`` scope (``types.run_context_later``), which the run
    gives instead of setting it as the thread's context; None: the one current in this thread.
    """
    emit = as_emitter(event_sink)
    parallel = config.tool_execution != "sequential"
    if parallel:  # a sequential config runs the batch so whatever its tools say: they are read only for a parallel one
        for tool_call in tool_calls:
            tool = context.tools.get(tool_call.name)
            if tool is not None and not tool.parallel_tool_execute:
                parallel = False
                break
    return _run_batch(context, assistant_msg, tool_calls, config, signal, emit, allowance, parallel, outer)


def answer_tool_calls_with_error(tool_calls: list[AgentToolCall], message: str, event_sink: Any) -> AgentToolCallBatch:
    """Answer every call with the same error result without running anything.

    Used by the agent for a reply cut off at its token limit (decision 10). Each call
    still gets its start and end events (decision 1).
    """
    emit = as_emitter(event_sink)
    finalized = []
    for tool_call in tool_calls:
        emit(ToolExecStartEvent(tool_call.id, tool_call.name, tool_call.arguments))
        finalized.append(_end_immediately(tool_call, ImmediateOutcome(create_error_tool_result(message), True), emit))
    return _batch(finalized)
