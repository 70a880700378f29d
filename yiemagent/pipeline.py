"""The per-call pipeline: PREPARE -> EXECUTE -> FINALIZE (spec §8), errors as results (spec §12).

Every function here returns a value for anything the model or a tool did wrong: an
unknown tool, arguments that fail the schema, a hook or a tool that raises or returns the
wrong type. Each becomes an error ``AgentToolResult`` the model can read and recover
from; nothing raises out of the pipeline (spec §8.1 "Key design principle", §12).
"""

from __future__ import annotations

import difflib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Optional

import jsonschema
from jsonschema.protocols import Validator

from ._threads import wait_on_daemon
from ._failures import ABORTED_MESSAGE, create_error_tool_result, describe_error, user_code_errors
from ._bounds import cap_text, json_copy, preview, short_repr
from ._fast_schema import compile_fast_check
from .errors import ToolArgumentsError
from ._sub_runs import collector as sub_run_collector
from .events import AgentRunEndEvent, EventEmitter, SubAgentEvent, ToolExecUpdateEvent, as_emitter
from .types import (
    AbortSignal,
    AfterToolCallContext,
    AgentContext,
    AgentLoopConfig,
    AgentTool,
    AgentToolCall,
    AgentToolResult,
    BeforeToolCallContext,
    ExecutedOutcome,
    FinalizedOutcome,
    ImmediateOutcome,
    LLMUsage,
    MessageContent,
    PendingApproval,
    PreparedToolCall,
    TextContent,
    ToolResultMessage,
    built,
    utc_now,
)

__all__ = [
    "ABORTED_MESSAGE",
    "compiled_validator",
    "create_error_tool_result",
    "create_tool_result_message",
    "execute_prepared_tool_call",
    "finalize_executed_tool_call",
    "prepare_tool_call",
    "prepare_tool_call_arguments",
    "validate_required_args",
    "validate_tool_arguments",
]

logger = logging.getLogger("yiemagent.pipeline")

_SUGGEST_MAX_CHARS = 64  # no suggestion for a longer unknown name: difflib is quadratic, and no tool is named so
_AFTER_HOOK_KEYS = ("content", "details", "usage", "terminate", "is_error")


# --- spec §8.1 "Validate arguments": the default validator, on jsonschema ----------------
# Decision 4: the default validator checks the whole ``input_schema``, not only its
# ``required`` list. Compiled validators are cached per schema object, so a tool's schema
# is compiled once, not on every call.

_CACHE_SIZE = 1024
# id(schema) -> (schema, validator, fast check or None). The schema itself is kept so that its id
# cannot be reused by another object while the entry lives; the identity check below makes a
# stale id harmless anyway.
_cache: OrderedDict[int, tuple[Any, Validator, Optional[Callable[[Any], bool]]]] = OrderedDict()
_cache_lock = threading.Lock()  # orders the writers of _cache (a reader takes one entry in one C call, without it)


def _compiled(schema: dict[str, Any]) -> tuple[Any, Validator, Optional[Callable[[Any], bool]]]:
    """The cache entry of this schema object: compiled once, the jsonschema validator beside its fast check."""
    key = id(schema)
    entry = _cache.get(key)  # read without the lock: one C call, atomic; the lock orders the writers
    if entry is not None and entry[0] is schema:
        try:
            _cache.move_to_end(key)
        except KeyError:  # another thread evicted it meanwhile: it is still this schema's
            pass
        return entry
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = validator_class(schema)
    # _fast_schema.py: jsonschema's verdict for the common shapes of schema, in a few checks (draft 2020-12 only)
    fast = compile_fast_check(schema) if validator_class is jsonschema.Draft202012Validator else None
    entry = (schema, validator, fast)
    with _cache_lock:
        _cache[key] = entry
        if len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return entry


def compiled_validator(schema: dict[str, Any]) -> Validator:
    """The cached jsonschema validator for this schema object."""
    return _compiled(schema)[1]


def _field_of(error: jsonschema.ValidationError) -> str:
    """The argument a validation error is about, as a path like ``units`` or ``items/0``."""
    path = "/".join(str(p) for p in error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict) and isinstance(error.validator_value, list):
        # "required" errors sit on the parent object; name the missing field itself.
        missing = [name for name in error.validator_value if name not in error.instance]
        if missing:
            return "/".join(filter(None, [path, str(missing[0])]))
    return path or "(arguments)"


def schema_admits(args: Any, input_schema: dict[str, Any]) -> bool:
    """Whether ``args`` are valid for the whole ``input_schema`` (decision 4), without the errors ``validate_required_args`` names.

    The schema's fast check when it has one (``_fast_schema.py``), else jsonschema's ``is_valid``.
    """
    _, validator, fast = _compiled(input_schema)
    return fast(args) if fast is not None else validator.is_valid(args)


def validate_required_args(args: Any, input_schema: dict[str, Any]) -> Optional[str]:
    """Validate ``args`` against the whole ``input_schema``; None when valid.

    Spec: §8.1 default ``validateRequiredArgs(args, inputSchema)``.
    Deviation: decision 4 — every keyword of the schema is checked, not only
    ``required``.

    Returns an error text that names each failing field and shows the arguments that
    were received, e.g. ``city: 'city' is a required property. Received arguments:
    {}``.
    """
    # valid arguments (the common case) cost one check; jsonschema lists the errors only when there are some
    if schema_admits(args, input_schema):
        return None
    validator = _compiled(input_schema)[1]
    problems = sorted((_field_of(e), e.message) for e in validator.iter_errors(args))
    if not problems:
        return None
    # error texts echo model input: each part is capped (docs/failures.md), the whole text by the pipeline
    lines = "; ".join(f"{field}: {cap_text(message, 300)}" for field, message in problems[:20])
    # preview() bounds the depth and turns keys into str, so only a value JSON cannot hold
    # reaches _shown; the text is for the model to read, not to parse back
    received = json.dumps(preview(args), ensure_ascii=False, sort_keys=True, default=_shown)
    return f"{lines}. Received arguments: {cap_text(received, 1000)}"


def _shown(value: Any) -> str:
    """A value JSON cannot hold, in words: its bounded repr, or its type if even repr fails."""
    try:
        return short_repr(value)
    except Exception:  # a hostile __repr__ must not turn a validation error into a crash
        return f"<{type(value).__name__} object>"


# --- spec §8: the three phases ----------------------------------------------------------


def _unknown_tool_message(name: str, tools: Mapping[str, AgentTool]) -> str:
    names = list(tools)
    text = f"Tool {short_repr(name)} not found. Available tools: {', '.join(names) if names else '(none)'}."
    if len(name) <= _SUGGEST_MAX_CHARS:  # only a plausible name gets a suggestion (bounded cost)
        lowered = {n.lower(): n for n in names}
        close = [lowered[name.lower()]] if name.lower() in lowered else difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        if close:
            text += f" Did you mean {close[0]!r}?"
    return text


def prepare_tool_call_arguments(tool: AgentTool, tool_call: AgentToolCall) -> AgentToolCall:
    """Run the tool's ``prepare_arguments`` hook, if any (spec §8.1 "Prepare arguments").

    Returns the original ``tool_call`` when there is no hook or the hook changed nothing,
    else a copy carrying the new arguments. The hook receives a copy of the arguments,
    so the original call (which events and the history show) is never rebound; the
    copy is shallow, so a hook must not mutate nested values in place.

    Raises:
        ToolArgumentsError: the hook did not return a dict.
        Exception: whatever the hook raised (``prepare_tool_call`` turns it into an error result).
    """
    if tool.prepare_arguments is None:
        return tool_call
    prepared = tool.prepare_arguments(dict(tool_call.arguments))
    if not isinstance(prepared, dict):
        raise ToolArgumentsError(
            f"prepare_arguments of tool {tool.name!r} returned {type(prepared).__name__}; expected a dict of arguments"
        )
    if prepared == tool_call.arguments:
        return tool_call
    return replace(tool_call, arguments=prepared)


def validate_tool_arguments(tool: AgentTool, tool_call: AgentToolCall) -> dict[str, Any]:
    """Validate a call's arguments and return them (spec §8.1 "Validate arguments").

    Uses the tool's own ``validate_required_args`` when it has one, else the default
    ``validate_required_args(args, tool.input_schema)``, which checks the whole schema
    (decision 4).

    Raises:
        ToolArgumentsError: the arguments are invalid; the message names the tool, each
            failing field, and shows the received arguments.
    """
    args = tool_call.arguments
    if tool.validate_required_args is not None:
        problem = tool.validate_required_args(args)
        if problem is not None and not isinstance(problem, str):
            raise ToolArgumentsError(
                f"validate_required_args of tool {tool.name!r} returned {type(problem).__name__}; "
                "expected None (valid) or an error string"
            )
    else:
        problem = validate_required_args(args, tool.input_schema)
    if problem is not None:
        raise ToolArgumentsError(f"Invalid arguments for tool {tool.name!r}: {problem}")
    return args


def prepare_tool_call(
    context: AgentContext,
    assistant_msg: Any,
    tool_call: AgentToolCall,
    config: AgentLoopConfig,
    signal: Optional[AbortSignal],
) -> PreparedToolCall | ImmediateOutcome | PendingApproval:
    """Resolve, prepare and validate one tool call, then ask ``before_tool_call``.

    Spec: §8.1 "Phase 1: Prepare" (prepareToolCall); §14 "beforeToolCall Hook".

    Returns a ``PreparedToolCall``, or an ``ImmediateOutcome`` carrying an error result
    when the tool is unknown (the error lists the tools that exist and suggests the
    closest name), the arguments were not a JSON object, ``prepare_arguments`` or the
    validator raised or rejected them, the hook raised, returned something that is not
    None or a dict, or blocked the call, or the signal fired during the hook.
    Never raises for input that came from the model or for a failing hook.

    Beyond the spec (decision 18): a hook that answers ``{"defer": True, "reason": ...}``
    gets a ``PendingApproval``: the call is neither run nor answered until a person
    approves or rejects it (``yiemagent.approvals``). So does a call of a tool with
    ``requires_approval`` when there is no hook or it answers None; any dict the hook
    returns (``{}``: allow) is its decision for that call and stands (docs/api.md
    "Approvals in fewer lines").
    """
    tool = context.tools.get(tool_call.name)
    if tool is None:
        return ImmediateOutcome(create_error_tool_result(_unknown_tool_message(tool_call.name, context.tools)), True)
    if tool_call.arguments_error is not None:
        return ImmediateOutcome(
            create_error_tool_result(f"Invalid arguments for tool {tool.name!r}: {tool_call.arguments_error}"), True
        )
    try:
        prepared_call = prepare_tool_call_arguments(tool, tool_call) if tool.prepare_arguments is not None else tool_call
    except ToolArgumentsError as exc:
        return ImmediateOutcome(create_error_tool_result(str(exc)), True)
    except user_code_errors() as exc:
        return ImmediateOutcome(create_error_tool_result(f"prepare_arguments of tool {tool.name!r} raised {describe_error(exc)}"), True)
    try:
        args = validate_tool_arguments(tool, prepared_call)
    except ToolArgumentsError as exc:
        return ImmediateOutcome(create_error_tool_result(str(exc)), True)
    except user_code_errors() as exc:
        return ImmediateOutcome(
            create_error_tool_result(f"validate_required_args of tool {tool.name!r} raised {describe_error(exc)}"), True
        )
    # the hook and the tool get arguments of their own: the call in the history keeps what the model sent
    args = json_copy(args)

    hook = config.before_tool_call
    before = None
    if hook is not None:
        try:
            before = hook(BeforeToolCallContext(assistant_msg, tool_call, args, context), signal)
        except user_code_errors() as exc:
            logger.warning("before_tool_call hook raised on tool %r", tool.name, exc_info=True)
            return ImmediateOutcome(
                create_error_tool_result(f"before_tool_call hook raised {describe_error(exc)}; tool {tool.name!r} was not run"), True
            )
        if signal is not None and signal.aborted:
            return ImmediateOutcome(create_error_tool_result(ABORTED_MESSAGE), True)
        if before is not None:
            if not isinstance(before, Mapping):
                return ImmediateOutcome(
                    create_error_tool_result(
                        f"before_tool_call hook returned {type(before).__name__}; expected None or a dict; "
                        f"tool {tool.name!r} was not run"
                    ),
                    True,
                )
            if before.get("block"):
                reason = before.get("reason")
                return ImmediateOutcome(create_error_tool_result(str(reason) if reason else "Tool execution was blocked"), True)
            if before.get("defer"):  # decision 18: waits for a person (docs/api.md "Approvals that wait for a person")
                reason = before.get("reason")
                return PendingApproval(tool_call.id, tool.name, dict(tool_call.arguments), str(reason) if reason else "awaiting approval")
    if before is None and tool.requires_approval:  # the hook left it to the tool (decision 18)
        return PendingApproval(tool_call.id, tool.name, dict(tool_call.arguments), f"tool {tool.name!r} requires approval")
    return PreparedToolCall(tool, tool_call, args)


class _PartialResultReporter:
    """The ``on_partial_result`` callback given to one ``execute`` (spec §13 toolExecUpdateEvent).

    A ``SubAgentEvent`` of this call (an ``agent_tool``'s sub-run) is emitted as it is, not
    wrapped in an update event; the usage in its ``AgentRunEndEvent`` goes to the run's
    collector (``_sub_runs.py``). Only this call's own sub-run counts: a sub-agent's
    sub-agent is already in its parent's sum, and reaches here wrapped once more. After ``close()`` — called as soon as ``execute`` has returned, raised or timed out —
    partial results are dropped (decision 8), so no update can follow the call's end event.

    It returns whether the report was emitted: an ``agent_tool`` whose sub-run ends after its
    call timed out learns so, and hands the sub-run's usage to the run another way
    (run.py ``add_late_sub_run_usage``).

    Thread safety: called from the tool's thread (or threads it starts). A report racing
    ``close()`` is either delivered before ``close`` returns or dropped (decision 8). Each
    report is made under ``_lock``, which checks ``_open``; the lock is made by the call's
    first report (under the module's ``_first_reports``, so two first reports make one),
    and a call nobody reports for (most calls: docs/performance.md "W1") makes none and
    ``close`` takes none. ``close`` sets ``_open`` False and then reads ``_lock``; a first
    report stores ``_lock`` and then, under it, reads ``_open``. Attribute stores and loads
    are atomic and in program order under the GIL, so of the two the later sees the
    other's store: either ``close`` sees the lock and takes it, waiting for a report
    inside it to return (delivered before ``close`` returns), or the report sees
    ``_open`` False and drops itself. A report that made no lock found one, and it is the
    lock ``close`` waits on.
    """

    __slots__ = ("_emit", "_call", "_args", "_lock", "_open", "_sub_runs")

    def __init__(self, emit: EventEmitter, tool_call: AgentToolCall, args: dict[str, Any]) -> None:
        self._emit = emit
        self._call = tool_call
        self._args = args  # what the tool received: the update event shows them
        self._lock: Optional[threading.Lock] = None  # guards each report's check of _open and its emit; made by the first report
        self._open = True
        self._sub_runs = sub_run_collector()  # the run this call belongs to (made in its batch, in the run's context)

    def __call__(self, partial_result: Any = None) -> bool:
        """Emit ``partial_result``; True when it was emitted, False when dropped (the call has ended)."""
        lock = self._lock
        if lock is None:
            with _first_reports:
                lock = self._lock
                if lock is None:
                    lock = self._lock = threading.Lock()
        with lock:
            if not self._open:
                logger.debug("partial result of %r after its end was dropped", self._call.id)
                return False
            call = self._call
            if isinstance(partial_result, SubAgentEvent) and partial_result.tool_call_id == call.id:
                self._emit(partial_result)  # a sub-agent's event reaches the sink as it is (tools/agent_tool.py)
                if isinstance(partial_result.event, AgentRunEndEvent) and self._sub_runs is not None:
                    self._sub_runs(partial_result.event.usage)  # the sub-run's usage joins its parent run's (_sub_runs.py)
                return True
            self._emit(ToolExecUpdateEvent(call.id, call.name, self._args, partial_result))
            return True

    def close(self) -> None:
        """From now on every report is dropped; a report being emitted is waited for (see the class)."""
        self._open = False  # first; then the lock, which a first report may have made before this
        lock = self._lock
        if lock is not None:
            with lock:  # a report inside it has returned: delivered before close returns
                pass


_first_reports = threading.Lock()  # makes a call's reporter lock (taken once per call that reports, never by close)


def _check_result(tool: AgentTool, result: Any) -> Optional[str]:
    """Why ``result`` is not a usable ``AgentToolResult``, or None when it is."""
    if not isinstance(result, AgentToolResult):
        return f"Tool {tool.name!r} returned {type(result).__name__}; expected AgentToolResult"
    if not isinstance(result.content, (list, tuple)):
        return f"Tool {tool.name!r} returned content of type {type(result.content).__name__}; expected a list of content blocks"
    for block in result.content:
        if type(block) is not TextContent and not isinstance(block, (MessageContent, dict)):  # a text block, most often: no ABC check
            return f"Tool {tool.name!r} returned a content block of type {type(block).__name__}; expected TextContent or ImageContent"
    return None


def _execute_with_timeout(
    prep: PreparedToolCall, signal: Optional[AbortSignal], reporter: _PartialResultReporter, timeout_s: float
) -> tuple[Any, Optional[BaseException], Optional[str]]:
    """Run ``execute`` on its own daemon thread and wait at most ``timeout_s``, or until an abort.

    Returns (result, exception, why_abandoned): ``why_abandoned`` is None when ``execute``
    returned or raised, else "timeout" or "aborted". On timeout the call's own signal
    fires, so a cooperative tool stops; on abort (the run's signal) the wait ends at once,
    so a run ends promptly even when the tool ignores its signal. A tool that ignores its
    signal cannot be killed: its thread is abandoned — it runs on until ``execute``
    returns, its result and any later partial result are dropped, and, being a daemon
    thread, it does not keep the interpreter alive (docs/failures.md).
    """
    call_signal = signal.child() if signal is not None else AbortSignal()
    try:
        finished, result, error = wait_on_daemon(
            lambda: prep.tool.execute(prep.tool_call.id, prep.args, call_signal, reporter),
            f"yiemagent-tool-{prep.tool.name}-timed",
            timeout_s,
            call_signal,
        )
    finally:
        if signal is not None:
            signal.release(call_signal)
    if finished:
        return result, error, None
    reporter.close()
    if call_signal.aborted:
        return None, None, "aborted"
    call_signal.abort(f"tool {prep.tool.name!r} timed out after {timeout_s:g} s")
    return None, None, "timeout"


def execute_prepared_tool_call(prep: PreparedToolCall, signal: Optional[AbortSignal], event_sink: Any) -> ExecutedOutcome:
    """Call the tool's ``execute`` and capture its result or failure.

    Spec: §8.2 "Phase 2: Execute" (executePreparedToolCall).

    ``on_partial_result`` emits a ``ToolExecUpdateEvent`` per partial result (spec §13).
    A tool that raises, returns something that is not an ``AgentToolResult``, or runs
    past its ``timeout_s`` gives an error outcome naming the tool and the cause.
    Deviation: the spec passes the event sink itself as ``onPartialResult``; here the
    callback wraps each partial result in the update event the spec's §13 table names.
    """
    emit = as_emitter(event_sink)
    tool = prep.tool
    if tool.timeout_s is None:
        return ExecutedOutcome(*call_tool(tool, prep.tool_call, prep.args, signal, emit))
    reporter = _PartialResultReporter(emit, prep.tool_call, prep.args)
    error: Optional[BaseException] = None
    result: Any = None
    try:
        result, error, abandoned = _execute_with_timeout(prep, signal, reporter, tool.timeout_s)
        if abandoned == "aborted":
            return ExecutedOutcome(create_error_tool_result(ABORTED_MESSAGE), True)
        if abandoned == "timeout":
            return ExecutedOutcome(
                create_error_tool_result(
                    f"Tool {tool.name!r} timed out after {tool.timeout_s:g} s (its timeout_s limit); "
                    "it was asked to stop and its result will be ignored"
                ),
                True,
            )
        if error is not None and not isinstance(error, user_code_errors()):
            raise error  # KeyboardInterrupt from the tool's thread, run from the main thread: let it stop the caller
    except user_code_errors() as exc:
        error = exc
    finally:
        reporter.close()
    return ExecutedOutcome(*_executed(tool, result, error))


def call_tool(
    tool: AgentTool, tool_call: AgentToolCall, args: dict[str, Any], signal: Optional[AbortSignal], emit: EventEmitter
) -> tuple[AgentToolResult, bool]:
    """EXECUTE of a tool without ``timeout_s``, in this thread: (its result, is_error) (spec §8.2).

    ``execute`` gets ``args`` and a ``_PartialResultReporter`` closed as soon as it returns
    or raises; what it raised or returned wrong is an error result (``_executed``).
    ``execute_prepared_tool_call`` and the batch's plain call (batch.py ``_plain_call``) both
    run a tool this way.
    """
    reporter = _PartialResultReporter(emit, tool_call, args)
    error: Optional[BaseException] = None
    result: Any = None
    try:
        result = tool.execute(tool_call.id, args, signal, reporter)
    except user_code_errors() as exc:
        error = exc
    finally:
        reporter.close()
    return _executed(tool, result, error)


def _executed(tool: AgentTool, result: Any, error: Optional[BaseException]) -> tuple[AgentToolResult, bool]:
    """What ``execute`` returned or raised, as EXECUTE's outcome: (the result, False), or (an error result naming the cause, True)."""
    if error is not None:
        logger.debug("tool %r raised", tool.name, exc_info=error)
        return create_error_tool_result(f"Tool {tool.name!r} failed: {describe_error(error)}"), True
    problem = _check_result(tool, result)
    if problem is not None:
        return create_error_tool_result(problem), True
    return result, False


def _apply_after_hook(result: AgentToolResult, is_error: bool, after: Mapping[str, Any]) -> tuple[AgentToolResult, bool]:
    """Replace the parts of ``result`` that ``after`` names (spec §8.3 merge); raise ValueError if malformed."""
    unknown = sorted(str(k) for k in after if k not in _AFTER_HOOK_KEYS)
    if unknown:
        raise ValueError(f"unknown keys {unknown}; expected any of {list(_AFTER_HOOK_KEYS)}")
    changes: dict[str, Any] = {}
    if "content" in after:
        content = after["content"]
        if not isinstance(content, (list, tuple)) or not all(isinstance(b, (MessageContent, dict)) for b in content):
            raise ValueError(f"'content' must be a list of content blocks, got {content!r:.200}")
        changes["content"] = list(content)
    if "details" in after:
        changes["details"] = after["details"]
    if "usage" in after:
        if after["usage"] is not None and not isinstance(after["usage"], LLMUsage):
            raise ValueError(f"'usage' must be an LLMUsage or None, got {type(after['usage']).__name__}")
        changes["usage"] = after["usage"]
    if "terminate" in after:
        if not isinstance(after["terminate"], bool):
            raise ValueError(f"'terminate' must be a bool, got {after['terminate']!r:.100}")
        changes["terminate"] = after["terminate"]
    if "is_error" in after:
        if not isinstance(after["is_error"], bool):
            raise ValueError(f"'is_error' must be a bool, got {after['is_error']!r:.100}")
        is_error = after["is_error"]
    return (replace(result, **changes) if changes else result), is_error


def finalize_executed_tool_call(
    context: AgentContext,
    assistant_msg: Any,
    prep: PreparedToolCall,
    executed: ExecutedOutcome,
    config: AgentLoopConfig,
    signal: Optional[AbortSignal],
) -> FinalizedOutcome:
    """Run ``after_tool_call`` over the executed result (spec §8.3, §14 "afterToolCall Hook").

    The hook may return None (keep the result) or a dict whose keys "content",
    "details", "usage", "terminate", "is_error" replace those parts. A hook that raises
    or returns anything else (another type, an unknown key, a value of the wrong type)
    gives an error result saying so. That error result deliberately does not carry the
    tool's own output: the hook may exist to mask it (spec §14 "Mask sensitive data").
    """
    result, is_error = executed.result, executed.is_error
    hook = config.after_tool_call
    if hook is not None:
        name = prep.tool.name
        try:
            after = hook(AfterToolCallContext(assistant_msg, prep.tool_call, prep.args, result, is_error, context), signal)
        except user_code_errors() as exc:
            logger.warning("after_tool_call hook raised on tool %r", name, exc_info=True)
            return FinalizedOutcome(
                prep.tool_call, create_error_tool_result(f"after_tool_call hook raised {describe_error(exc)} on tool {name!r}"), True
            )
        if after is not None:
            try:
                if not isinstance(after, Mapping):
                    raise ValueError(f"it returned {type(after).__name__}; expected None or a dict")
                result, is_error = _apply_after_hook(result, is_error, after)
            except ValueError as exc:
                return FinalizedOutcome(
                    prep.tool_call,
                    create_error_tool_result(f"after_tool_call hook returned an invalid value for tool {name!r}: {exc}"),
                    True,
                )
    return FinalizedOutcome(prep.tool_call, result, is_error)


def create_tool_result_message(finalized: FinalizedOutcome) -> ToolResultMessage:
    """Wrap a finalized call as the history's ``ToolResultMessage`` (spec §11).

    Decision 3: the role is "tool".
    """
    return tool_result_message(finalized.tool_call, finalized.result, finalized.is_error)


def tool_result_message(call: AgentToolCall, result: AgentToolResult, is_error: bool) -> ToolResultMessage:
    """``create_tool_result_message`` of a call's result without its ``FinalizedOutcome`` (batch.py ``_plain_call`` makes none)."""
    # ToolResultMessage(call.id, call.name, list(result.content), result.details, result.usage, None, is_error), in one step
    return built(
        ToolResultMessage,
        tool_call_id=call.id,
        tool_name=call.name,
        content=list(result.content),
        details=result.details,
        usage=result.usage,
        added_tool_names=None,
        is_error=is_error,
        timestamp=utc_now(),
    )
