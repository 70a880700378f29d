"""Batches of tool calls: sequential and parallel execution, termination (spec §9, §10, §11).

Whatever happens, a batch answers every call exactly once, in call order, and emits
exactly one ``ToolExecStartEvent`` and one ``ToolExecEndEvent`` per call (decision 1).
Calls not yet run when the signal fires are answered "Operation aborted".
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from collections.abc import Sequence
from typing import Any, Optional

from .types import (
    AbortSignal,
    AgentContext,
    AgentLoopConfig,
    AgentToolCall,
    AgentToolCallBatch,
    AgentToolResult,
    AssistantMessage,
    FinalizedOutcome,
    ImmediateOutcome,
    PendingApproval,
    PreparedToolCall,
    TextContent,
    ToolResultMessage,
    call_context,
)
from ._threads import tool_pool
from .events import EventEmitter, ToolExecEndEvent, ToolExecStartEvent, as_emitter
from .pipeline import (
    ABORTED_MESSAGE,
    create_error_tool_result,
    create_tool_result_message,
    describe_error,
    execute_prepared_tool_call,
    finalize_executed_tool_call,
    prepare_tool_call,
    user_code_errors,
)

__all__ = [
    "answer_tool_calls_with_error",
    "execute_tool_calls",
    "execute_tool_calls_parallel",
    "execute_tool_calls_sequential",
    "should_terminate",
    "terminated_response",
]

logger = logging.getLogger("yiemagent.batch")


def should_terminate(finalized: list[FinalizedOutcome]) -> bool:
    """True only for a non-empty batch whose every result asks to terminate (spec §10 shouldTerminate)."""
    return bool(finalized) and all(f.result.terminate for f in finalized)


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
    made_by = {} if reply is None else {"api": reply.api, "provider": reply.provider, "model": reply.model, "usage": reply.usage}
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
) -> FinalizedOutcome:
    """EXECUTE then FINALIZE one prepared call and emit its end event; never raises."""
    try:
        with call_context(prep.tool_call.id):  # the call's RunContext, in the thread that runs it (types.py)
            executed = execute_prepared_tool_call(prep, signal, emit)
            finalized = finalize_executed_tool_call(context, assistant_msg, prep, executed, config, signal)
    except user_code_errors() as exc:  # a bug in this library must still not lose the call
        logger.exception("internal error while running tool %r", prep.tool.name)
        finalized = FinalizedOutcome(
            prep.tool_call, create_error_tool_result(f"Internal error running tool {prep.tool.name!r}: {describe_error(exc)}"), True
        )
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
) -> PreparedToolCall | FinalizedOutcome | PendingApproval:
    """Emit the call's start event, then PREPARE it — unless the signal has already fired.

    Returns the prepared call, or the finalized outcome of a call that ended here (its
    end event already emitted), or the ``PendingApproval`` of a call ``before_tool_call``
    deferred (decision 18): its end event carries a result whose ``details`` say
    ``{"deferred": True, "reason": ...}``; that result never enters the history.
    """
    emit(ToolExecStartEvent(tool_call.id, tool_call.name, tool_call.arguments))
    if _aborted(signal):
        prep: PreparedToolCall | ImmediateOutcome = ImmediateOutcome(create_error_tool_result(ABORTED_MESSAGE), True)
    else:
        with call_context(tool_call.id):  # before_tool_call sees the call's RunContext (types.py)
            prep = prepare_tool_call(context, assistant_msg, tool_call, config, signal)
    if isinstance(prep, ImmediateOutcome):
        return _end_immediately(tool_call, prep, emit)
    if isinstance(prep, PendingApproval):
        waiting = AgentToolResult([TextContent(f"Awaiting approval: {prep.reason}")], {"deferred": True, "reason": prep.reason})
        emit(ToolExecEndEvent(tool_call.id, tool_call.name, waiting, False))
    return prep


def _batch(steps: list[FinalizedOutcome | PendingApproval]) -> AgentToolCallBatch:
    finalized = [s for s in steps if isinstance(s, FinalizedOutcome)]
    deferred = [s for s in steps if isinstance(s, PendingApproval)]
    terminate = should_terminate(finalized) and not deferred
    return AgentToolCallBatch([create_tool_result_message(f) for f in finalized], terminate, deferred)


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
    emit = as_emitter(event_sink)
    finalized: list[FinalizedOutcome | PendingApproval] = []
    for tool_call in tool_calls:
        step = _start_and_prepare(context, assistant_msg, tool_call, config, signal, emit)
        if isinstance(step, PreparedToolCall):
            step = _execute_and_finalize(context, assistant_msg, step, config, signal, emit)
        finalized.append(step)
    return _batch(finalized)


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
    its task inside the preparation loop. The pool (``yiemagent._threads``) always has a
    free thread per call in flight, so no call waits for a worker: a batch of N sleeping
    tools takes about as long as one. Every call is collected before returning; a tool
    with ``timeout_s`` that overruns does not hold the batch up (see
    ``execute_prepared_tool_call``).
    """
    emit = as_emitter(event_sink)
    slots: list[FinalizedOutcome | PendingApproval | Future[FinalizedOutcome]] = []
    for tool_call in tool_calls:
        step = _start_and_prepare(context, assistant_msg, tool_call, config, signal, emit)
        if isinstance(step, PreparedToolCall):
            slots.append(tool_pool.submit(_execute_and_finalize, context, assistant_msg, step, config, signal, emit))
        else:
            slots.append(step)
    finalized = [slot.result() if isinstance(slot, Future) else slot for slot in slots]
    return _batch(finalized)


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
    has_sequential = False
    for tool_call in tool_calls:
        tool = context.tools.get(tool_call.name)
        if tool is not None and not tool.parallel_tool_execute:
            has_sequential = True
            break
    if config.tool_execution == "sequential" or has_sequential:
        return execute_tool_calls_sequential(context, assistant_msg, tool_calls, config, signal, event_sink)
    return execute_tool_calls_parallel(context, assistant_msg, tool_calls, config, signal, event_sink)


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
