"""Approvals that wait for a person: deferred tool calls, kept in the history (beyond the spec).

docs/api.md "Approvals that wait for a person"; decision 18. ``before_tool_call`` may
answer ``{"defer": True, "reason": ...}``: the call is neither run nor answered, the other
calls of the batch run as usual, and the run ends after the batch with stop_reason
"awaiting_approval"; so does a call of a tool with ``requires_approval`` that the hook
left open (None; ``pipeline.prepare_tool_call``, docs/api.md "Approvals in fewer lines").
The pending state is a list of ``ApprovalMessage`` steps in the
history after the batch ("deferred", "approved", "rejected", "resumed"), so a session
carries it to another process; the formatter never sends them. Then:

- ``pending_approvals(agent)``: the calls still waiting for a decision;
- ``approve(agent, id, arguments=None)`` / ``reject(agent, id, reason)``: record a decision;
- the next run (``continue_agent``, ``resume`` in agent.py, or a new message) first runs
  the approved calls through the normal pipeline (``before_tool_call`` is asked again, but
  cannot defer them again, nor can the tool's ``requires_approval``) and answers the
  rejected ones with an error result carrying the reason;
- a new message (``run_agent``, ``follow_up``, ``add_message`` of a user or assistant message)
  answers every call still waiting with an error result, "superseded by a new message";
- a typed answer's ``final_result`` may wait too: it runs with the tools a run offers, and
  once no call of its batch waits the batch is read for the answer as any batch is
  (docs/api.md "Typed answers").

Every tool call still gets exactly one result, and a deferred call runs only after its
approval. Pending calls always belong to the last assistant message of the history: the LLM
is not called again until each of them is answered, so only the history's tail is read.

Thread safety: the verbs may be called from any thread; they read a copy of the history
and add their step with ``add_message``'s path (stored in the session first while the
agent is idle). Call them while the agent is idle (after the "awaiting_approval" response):
a decision taken while a run resumes is too late for that run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Optional, cast

from .batch import answer_tool_calls_with_error, execute_tool_calls_within, terminated_response
from .errors import ToolArgumentsError
from .extraction import extract_tool_calls
from .types import (
    AbortSignal,
    AgentContext,
    AgentLoopConfig,
    AgentMessage,
    AgentToolCall,
    ApprovalMessage,
    AssistantMessage,
    PendingApproval,
    RunScope,
    TextContent,
    ToolResultMessage,
    UserMessage,
)
from .normalize import normalize_message, normalize_tool_result
from .pipeline import ABORTED_MESSAGE, prepare_tool_call_arguments, validate_tool_arguments
from .typed.output import offered_tools

__all__ = [
    "AWAITING_APPROVAL",
    "BatchAnswer",
    "SUPERSEDED_REASON",
    "Resumed",
    "Waiting",
    "answer_deferred_aborted",
    "approve",
    "awaiting_response",
    "deferral_steps",
    "last_batch",
    "pending_approvals",
    "reject",
    "resume_approvals",
    "start_of_run",
    "superseding_results",
    "waiting_calls",
]

BatchAnswer = Callable[[AssistantMessage, list[AgentToolCall], list[ToolResultMessage]], Optional[AssistantMessage]]
"""What a run makes of a whole batch (its reply, calls and results): its response when the batch
gave the typed answer (or its last invalid one), else None (run.py; docs/api.md "Typed answers")."""

AWAITING_APPROVAL = "awaiting_approval"
SUPERSEDED_REASON = "superseded by a new message"
DEFAULT_REJECT_REASON = "rejected by the user"
LOST_AFTER_RESUME = (
    "No result was recorded for this approved tool call: it was started, and the process running it "
    "stopped before it finished, so it may or may not have taken effect. Check before repeating it."
)


@dataclass(frozen=True)
class Waiting:
    """A deferred call of the last batch that has no result yet, and the last decision taken on it.

    ``decision`` is that of its latest ``ApprovalMessage``: "deferred" (no decision yet),
    "approved" (``arguments`` are those it runs with), "rejected" (``reason`` is the error
    result's text) or "resumed" (it was started and left no result: lost).
    """

    call: AgentToolCall
    decision: str
    arguments: dict[str, Any]
    reason: str
    deferred_because: str


def waiting_calls(messages: Sequence[AgentMessage]) -> tuple[Optional[AssistantMessage], dict[str, Waiting]]:
    """The last assistant message and its deferred calls that have no result, in call order.

    Reads only the messages after the last ``AssistantMessage`` (module docstring).
    """
    index = _last_assistant(messages)
    if index < 0:
        return None, {}
    assistant = cast(AssistantMessage, messages[index])  # the index _last_assistant found
    tail = messages[index + 1:]
    if not any(isinstance(m, ApprovalMessage) for m in tail):
        return assistant, {}
    calls = {c.id: c for c in extract_tool_calls(assistant)[1]}
    found: dict[str, Waiting] = {}
    answered: set[str] = set()
    for message in tail:
        if isinstance(message, ToolResultMessage):
            answered.add(message.tool_call_id)
        elif isinstance(message, ApprovalMessage) and message.tool_call_id in calls:
            step, current = message, found.get(message.tool_call_id)
            if step.decision == "deferred" and current is None:
                found[step.tool_call_id] = Waiting(calls[step.tool_call_id], "deferred", dict(step.arguments), step.reason, step.reason)
            elif current is not None and current.decision != "resumed":  # a decision after the start comes too late
                reason = step.reason if step.decision == "rejected" else current.reason
                arguments = dict(step.arguments) if step.decision == "approved" else current.arguments
                found[step.tool_call_id] = replace(current, decision=step.decision, arguments=arguments, reason=reason)
    order = list(calls)
    waiting = {i: found[i] for i in sorted(found, key=order.index) if i not in answered}
    return assistant, waiting


def _last_assistant(messages: Sequence[AgentMessage]) -> int:
    """The index of the last ``AssistantMessage`` (-1 when there is none)."""
    index = len(messages) - 1
    while index >= 0 and not isinstance(messages[index], AssistantMessage):
        index -= 1
    return index


def last_batch(messages: Sequence[AgentMessage]) -> tuple[Optional[AssistantMessage], list[AgentToolCall], list[ToolResultMessage]]:
    """The last assistant message, its tool calls as they ran and the results they have, read from the history's tail.

    A call resumed after its approval ran with the arguments of its "resumed" step (the
    approved ones). What a batch resumed after approvals is judged on as a whole (a typed
    answer given through ``final_result``, deferred or beside a deferred call: ``start_of_run``).
    """
    index = _last_assistant(messages)
    if index < 0:
        return None, [], []
    assistant, tail = cast(AssistantMessage, messages[index]), messages[index + 1:]  # the index _last_assistant found
    ran_with = {m.tool_call_id: m.arguments for m in tail if isinstance(m, ApprovalMessage) and m.decision == "resumed"}
    calls = [replace(c, arguments=dict(ran_with[c.id]), arguments_error=None) if c.id in ran_with else c for c in extract_tool_calls(assistant)[1]]
    return assistant, calls, [m for m in tail if isinstance(m, ToolResultMessage)]


def deferral_steps(deferred: Sequence[PendingApproval]) -> list[ApprovalMessage]:
    """The "deferred" steps a run appends after a batch that deferred these calls."""
    return [ApprovalMessage(p.tool_call_id, p.tool_name, "deferred", dict(p.arguments), p.reason) for p in deferred]


def awaiting_response(pending: Sequence[PendingApproval]) -> AssistantMessage:
    """The response of a run that ends waiting for approvals (made by the agent, not in the history)."""
    listed = "; ".join(f"{p.tool_name} ({p.tool_call_id}): {p.reason}" for p in pending)
    return AssistantMessage([TextContent(f"Awaiting approval of {len(pending)} tool call(s): {listed}")], stop_reason=AWAITING_APPROVAL)


def _pending_of(waiting: Mapping[str, Waiting]) -> list[PendingApproval]:
    return [PendingApproval(w.call.id, w.call.name, dict(w.call.arguments), w.deferred_because) for w in waiting.values() if w.decision == "deferred"]


def superseding_results(messages: Sequence[AgentMessage], incoming: AgentMessage, emit: Any = None) -> list[ToolResultMessage]:
    """The error results that must enter the history before ``incoming`` (decision 18).

    A user or assistant message while calls wait answers each of them: a rejected one with
    its reason, any other with "superseded by a new message"; a run passes its ``emit``, so
    each such call gets its start and end events there (decision 1). A tool result or an
    approval step needs none.
    """
    if not isinstance(incoming, (UserMessage, AssistantMessage)):
        return []
    _, waiting = waiting_calls(messages)
    results = []
    for w in waiting.values():
        results += answer_tool_calls_with_error([w.call], w.reason if w.decision == "rejected" else SUPERSEDED_REASON, emit).messages
    return results


def _never_defers(hook: Optional[Callable[..., Any]]) -> Callable[..., Any]:
    """``before_tool_call`` for an approved call: asked as usual, except that a defer is ignored (a block keeps its reason).

    Its answer is always a decision (``{}`` where the hook left it open or only deferred), so
    a tool with ``requires_approval`` does not send its approved call back to a person.
    """

    def asked_again(ctx: Any, signal: Any) -> Any:
        answer = hook(ctx, signal) if hook is not None else None
        if answer is None:
            return {}
        if isinstance(answer, Mapping) and answer.get("defer"):
            return {k: v for k, v in answer.items() if k != "defer"}
        return answer

    return asked_again


@dataclass(frozen=True)
class Resumed:
    """What ``resume_approvals`` did: the results it appended, the calls still waiting, whether to stop."""

    results: list[ToolResultMessage]
    pending: list[PendingApproval]
    terminate: bool


def resume_approvals(
    history: Callable[[], list[AgentMessage]],
    append: Callable[[AgentMessage], None],
    system_prompt: str,
    tools: Mapping[str, Any],
    config: AgentLoopConfig,
    signal: Optional[AbortSignal],
    emit: Any,
    run_scope: Optional[Callable[[], RunScope]] = None,
) -> Resumed:
    """Run the approved calls and answer the rejected ones (the start of a run, decision 18).

    Each approved call gets a "resumed" step before it runs (a crash while it runs leaves it
    lost, never pending again), then goes through PREPARE -> EXECUTE -> FINALIZE with its
    approved arguments. Rejected calls get an error result with the reason; calls left
    "resumed" without a result (a failure while they ran) get ``LOST_AFTER_RESUME``. The
    results are appended in call order; calls without a decision stay waiting. ``run_scope``
    makes the run's ``RunContext`` scope of this batch (run.py), as the run's own batches
    get theirs, so the calls see their run's context (types.py ``current_run_context``).
    """
    assistant, waiting = waiting_calls(history())
    if assistant is None or not waiting:
        return Resumed([], [], False)
    approved = [w for w in waiting.values() if w.decision == "approved"]
    for w in approved:
        append(ApprovalMessage(w.call.id, w.call.name, "resumed", w.arguments, ""))
    by_id: dict[str, ToolResultMessage] = {}
    terminate = False
    if approved:
        calls = [replace(w.call, arguments=w.arguments, arguments_error=None) for w in approved]
        context = AgentContext(system_prompt, history(), tools)
        config = replace(config, before_tool_call=_never_defers(config.before_tool_call))
        outer = run_scope() if run_scope is not None else None
        batch = execute_tool_calls_within(None, context, assistant, calls, config, signal, emit, outer)
        by_id.update((m.tool_call_id, m) for m in batch.messages)
        terminate = batch.terminate
    for w in waiting.values():
        if w.decision in ("rejected", "resumed"):
            text = w.reason if w.decision == "rejected" else LOST_AFTER_RESUME
            by_id.update((m.tool_call_id, m) for m in answer_tool_calls_with_error([w.call], text, emit).messages)
    results = [normalize_tool_result(by_id[i]) for i in waiting if i in by_id]
    for result in results:
        append(result)
    pending = _pending_of({i: w for i, w in waiting.items() if i not in by_id})
    return Resumed(results, pending, terminate and len(results) == len(approved) and not pending)


def start_of_run(
    host: Any, signal: Optional[AbortSignal], messages: list[AgentMessage], answered: Optional[BatchAnswer] = None,
    run_scope: Optional[Callable[[], RunScope]] = None,
) -> Optional[AssistantMessage]:
    """The start of a run after approvals (decision 18): decisions taken, approved calls run, rejected answered.

    ``host`` is the run's ``run.RunHost``; ``messages`` the run's input, not yet appended:
    the approval steps and tool results queued before any new message (``add_message``
    during the last run) are appended first and taken off the list. The calls run with
    the tools the run offers (``typed.output.offered_tools``: a deferred ``final_result``
    is found). Once no call waits, the whole batch is handed to ``answered`` (the run's
    reading of a typed answer, docs/api.md "Typed answers"), as a batch that deferred
    nothing is when it ends: its response (the answer, appended by it, or
    "output_invalid") ends the run. Returns the run's response when it must end here:
    calls still wait and no new message came (stop_reason "awaiting_approval"), the
    batch gave the answer, or the resumed calls all asked to terminate. None when the run
    goes on to its rounds (or nothing was waiting); a new message always goes on, after
    an answer the batch gave has entered the history.
    """
    lead = 0
    while lead < len(messages) and isinstance(messages[lead], (ApprovalMessage, ToolResultMessage)):
        host.append(messages[lead])
        lead += 1
    del messages[:lead]
    if not waiting_calls(host.history())[1]:
        return None
    tools = offered_tools(host.state.tools, getattr(host, "output_spec", None))  # a host may have no output_spec
    resumed = resume_approvals(host.history, host.append, host.state.system_prompt, tools, host.loop_config(), signal, host.emit, run_scope)
    new_message = any(isinstance(m, (UserMessage, AssistantMessage)) for m in messages)
    ended = None
    if not resumed.pending and resumed.results and answered is not None and not (signal is not None and signal.aborted):
        assistant, calls, results = last_batch(host.history())
        ended = answered(assistant, calls, results) if assistant is not None else None  # a call waited: the last batch has its assistant
    if new_message:
        return None  # the new message answers what still waits (run._append_input)
    if resumed.pending:
        return awaiting_response(resumed.pending)
    if ended is not None:
        return ended
    if resumed.terminate:  # spec §10, as after any batch whose calls all asked to stop (no LLM reply in this run)
        return terminated_response(resumed.results)
    return None


def answer_deferred_aborted(deferred: Sequence[PendingApproval]) -> list[ToolResultMessage]:
    """Results for calls deferred in a batch that was aborted: nothing waits after an abort."""
    return [ToolResultMessage(p.tool_call_id, p.tool_name, [TextContent(ABORTED_MESSAGE)], {}, is_error=True) for p in deferred]


# --- the verbs (the package face re-exports them) -------------------------------------


def pending_approvals(agent: Any) -> list[PendingApproval]:
    """The tool calls waiting for a decision, in call order (read from the history, so from a session too)."""
    return _pending_of(waiting_calls(agent._core.history())[1])


def _waiting_one(history: Sequence[AgentMessage], tool_call_id: str) -> Waiting:
    waiting = waiting_calls(history)[1]
    found = waiting.get(tool_call_id) if isinstance(tool_call_id, str) else None
    if found is None or found.decision == "resumed":
        listed = ", ".join(repr(i) for i, w in waiting.items() if w.decision != "resumed") or "none"
        raise ValueError(f"no tool call {tool_call_id!r} is waiting for approval (waiting: {listed})")
    return found


def _record(agent: Any, step: ApprovalMessage) -> None:
    """Append a decision whose call is checked again as it goes in, under the lock of an idle add_message
    answering waiting calls: a decision never lands after its call was answered (ValueError instead)."""

    def still_waiting(history: list[AgentMessage]) -> list[AgentMessage]:
        _waiting_one(history, step.tool_call_id)
        return []

    agent._core.add_message(normalize_message(step), before=still_waiting)


def approve(agent: Any, tool_call_id: str, *, arguments: Optional[dict[str, Any]] = None) -> None:
    """Approve a deferred call: it runs when the agent resumes (``continue_agent`` or ``resume``), with ``arguments`` if given.

    The decision is a step in the history (stored in the session). Deciding again before
    the run resumes replaces the decision.

    Raises:
        ValueError: no call of that id is waiting for approval.
        ToolArgumentsError: ``arguments`` is not a dict, or, through the tool's
            ``prepare_arguments``, fails its validation (nothing is recorded).
        MessageFormatError: ``arguments`` is not JSON (it could not be stored), or holds
            text UTF-8 cannot carry (a lone surrogate): the message names the argument
            (``arguments/path``); the tool never runs with U+FFFD in its place (decision 14).
    """
    waiting = _waiting_one(agent._core.history(), tool_call_id)
    if arguments is None:
        arguments = waiting.call.arguments
    elif not isinstance(arguments, dict):
        raise ToolArgumentsError(f"approve(arguments=...) expects a dict of arguments, got {type(arguments).__name__}")
    else:  # checked now, as the pipeline will check them (prepare_arguments, then the schema), so a person hears of a slip at once
        tool = offered_tools(agent._core.state.tools, agent._core.output_spec).get(waiting.call.name)
        if tool is not None:
            try:
                prepared = prepare_tool_call_arguments(tool, replace(waiting.call, arguments=arguments))
            except ToolArgumentsError:
                raise
            except Exception as exc:
                raise ToolArgumentsError(f"prepare_arguments of tool {tool.name!r} raised {type(exc).__name__}: {exc}") from exc
            validate_tool_arguments(tool, prepared)
    _record(agent, ApprovalMessage(tool_call_id, waiting.call.name, "approved", dict(arguments), ""))


def reject(agent: Any, tool_call_id: str, reason: str = DEFAULT_REJECT_REASON) -> None:
    """Reject a deferred call: it never runs; when the agent resumes, its result is an error result with ``reason``.

    Raises:
        ValueError: no call of that id is waiting for approval.
    """
    waiting = _waiting_one(agent._core.history(), tool_call_id)
    _record(agent, ApprovalMessage(tool_call_id, waiting.call.name, "rejected", dict(waiting.call.arguments), str(reason)))
