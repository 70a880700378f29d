"""Tool records, the abort signal, contexts, configuration and the per-call outcomes.

Spec: §3 (agentTool, agentToolResult), §7 (agentToolCall), §8 (preparedToolCall,
immediateOutcome, executedOutcome, finalizedOutcome), §10 (agentToolCallBatch), §14
(beforeToolCallContext, afterToolCallContext), §19 "Tool Types", "Lifecycle Outcome
Types", "Context & Config Types". Beyond the spec, beside the hooks' contexts: ``RunContext``,
the context a tool call sees of its run (``current_run_context()``).
"""

from __future__ import annotations

import contextvars
import logging
import numbers
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from ._format_cache import History
from .errors import ToolDefinitionError
from .messages import AgentMessage, AssistantMessage, LLMModel, LLMUsage, ToolResultMessage

__all__ = [
    "AbortSignal",
    "AfterToolCallContext",
    "AgentContext",
    "AgentLoopConfig",
    "AgentState",
    "AgentTool",
    "AgentToolCall",
    "AgentToolCallBatch",
    "AgentToolResult",
    "BeforeToolCallContext",
    "ExecutedOutcome",
    "FinalizedOutcome",
    "ImmediateOutcome",
    "PendingApproval",
    "PreparedToolCall",
    "RunContext",
    "call_context",
    "current_run_context",
    "run_context",
]


class AbortSignal:
    """A flag that asks running work to stop (spec §19 ``abortSignal``).

    ``aborted`` turns true once and stays true. Tools check it, or block on ``wait()``,
    to stop early. ``child()`` makes a signal that fires when this one fires and may also
    fire on its own; the pipeline gives a tool with a timeout such a child, so that its
    timeout stops that tool alone and an abort still reaches it.

    Thread safety: every method may be called from any thread. ``_lock`` guards
    ``_children`` and the transition to aborted; the flag itself is a ``threading.Event``.
    """

    __slots__ = ("_event", "_lock", "_children", "_callbacks", "reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        # guards _children, _callbacks and the one-way transition of _event
        self._lock = threading.Lock()
        self._children: set[AbortSignal] = set()
        self._callbacks: list[Callable[[], Any]] = []
        self.reason: Optional[str] = None

    @property
    def aborted(self) -> bool:
        """True once ``abort()`` was called on this signal or on its parent."""
        return self._event.is_set()

    def abort(self, reason: Optional[str] = None) -> None:
        """Fire the signal, and every child of it; later calls do nothing."""
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            children, self._children = self._children, set()
            callbacks, self._callbacks = self._callbacks, []
        for child in children:
            child.abort(reason)
        for callback in callbacks:
            _run_abort_callback(callback)

    def on_abort(self, callback: Callable[[], Any]) -> Callable[[], None]:
        """Call ``callback()`` once when the signal fires (at once, here, if it already has).

        The callback runs in the thread that calls ``abort()``: keep it short and
        non-blocking (close a socket, set an event). An exception it raises is logged.
        Returns a function that unregisters the callback; call it when the work the
        callback would stop is over, so a long-lived signal does not grow.
        """
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        _run_abort_callback(callback)
        return lambda: None

    def _forget(self, callback: Callable[[], Any]) -> None:
        with self._lock:
            try:
                self._callbacks.remove(callback)
            except ValueError:
                pass

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until the signal fires or ``timeout`` seconds pass; return ``aborted``."""
        return self._event.wait(timeout)

    def child(self) -> AbortSignal:
        """A new signal that fires when this one does (at once if it already has)."""
        child = AbortSignal()
        with self._lock:
            if not self._event.is_set():
                self._children.add(child)
                return child
        child.abort(self.reason)
        return child

    def release(self, child: AbortSignal) -> None:
        """Forget a child that is no longer in use, so a long-lived signal does not grow."""
        with self._lock:
            self._children.discard(child)

    def __repr__(self) -> str:
        return f"AbortSignal(aborted={self.aborted})"


def _run_abort_callback(callback: Callable[[], Any]) -> None:
    try:
        callback()
    except Exception:
        logging.getLogger("yiemagent.tooling").exception("abort callback %r raised", callback)


@dataclass(frozen=True)
class AgentToolResult:
    """What a tool returns (spec §3 "Returns — agentToolResult").

    ``terminate`` asks the agent loop to stop after this batch; the batch stops only when
    every result in it asks (spec §10).

    Thread safety: immutable; may be shared between threads.
    """

    content: list[Any]
    details: Any = field(default_factory=dict)
    usage: Optional[LLMUsage] = None
    terminate: bool = False


@dataclass(frozen=True)
class AgentToolCall:
    """One tool call made by the LLM (spec §7 ``agentToolCall``).

    ``arguments_error`` is beyond the spec: extraction sets it when the model sent
    arguments that are not a JSON object (decision 2); ``prepare_tool_call`` then answers
    the call with an error result instead of running the tool.

    Thread safety: immutable; may be shared between threads.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    type: str = "function"
    arguments_error: Optional[str] = None


def _require_callable(tool_name: str, field_name: str, value: Any, optional: bool) -> None:
    if value is None and optional:
        return
    if not callable(value):
        raise ToolDefinitionError(f"tool {tool_name!r}: {field_name} must be callable, got {type(value).__name__}")


@dataclass(eq=False)
class AgentTool:
    """A tool the LLM can call (spec §3 ``agentTool``).

    ``execute(tool_call_id, args, signal, on_partial_result) -> AgentToolResult`` does the
    work; ``prepare_arguments(args) -> dict`` may rewrite the arguments before validation;
    ``validate_required_args(args) -> str | None`` replaces the default schema validation
    (None means valid). ``parallel_tool_execute`` lets the tool run beside others in a
    parallel batch (spec §9).

    ``timeout_s`` is beyond the spec: a call that runs longer becomes an error result
    naming the limit, and the call's signal fires so a cooperative tool stops. A tool
    that ignores its signal cannot be killed: its (daemon) thread is abandoned and runs
    on until ``execute`` returns; its result and any later partial results are dropped.

    The schema is checked as JSON Schema by ``register_tool``; the other fields are
    checked here, at construction.

    Raises:
        ToolDefinitionError: a field has the wrong type (a name that is not a non-empty
            string, an ``execute`` that is not callable, a non-positive timeout).

    Thread safety: treat a tool as immutable once registered; it is read from the loop
    thread and, in parallel batches, from tool threads.
    """

    name: str
    label: str
    description: str
    input_schema: dict[str, Any]
    execute: Callable[..., AgentToolResult]
    prepare_arguments: Optional[Callable[[dict[str, Any]], dict[str, Any]]] = None
    validate_required_args: Optional[Callable[[dict[str, Any]], Optional[str]]] = None
    parallel_tool_execute: bool = False
    timeout_s: Optional[float] = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ToolDefinitionError(f"a tool's name must be a non-empty string, got {self.name!r}")
        if any(c.isspace() or not c.isprintable() for c in self.name):
            # LLM APIs take names like ^[a-zA-Z0-9_-]{1,64}$; a space is the common slip
            raise ToolDefinitionError(f"tool name {self.name!r} contains whitespace or control characters; use letters, digits, '_' or '-'")
        for field_name in ("label", "description"):
            if not isinstance(getattr(self, field_name), str):
                raise ToolDefinitionError(f"tool {self.name!r}: {field_name} must be a string")
        if not isinstance(self.input_schema, Mapping):
            raise ToolDefinitionError(
                f"tool {self.name!r}: input_schema must be a dict (a JSON Schema), got {type(self.input_schema).__name__}"
            )
        _require_callable(self.name, "execute", self.execute, optional=False)
        _require_callable(self.name, "prepare_arguments", self.prepare_arguments, optional=True)
        _require_callable(self.name, "validate_required_args", self.validate_required_args, optional=True)
        if self.timeout_s is not None and (
            isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, numbers.Real) or not self.timeout_s > 0
        ):
            raise ToolDefinitionError(f"tool {self.name!r}: timeout_s must be a positive number of seconds, got {self.timeout_s!r}")


@dataclass
class AgentContext:
    """What one LLM round sees: system prompt, messages, tools (spec §19 ``agentContext``).

    Thread safety: built for one LLM round by the run thread; in a parallel batch tool threads read it and must not change it.
    """

    system_prompt: str
    messages: list[AgentMessage]
    tools: Mapping[str, AgentTool]


DEFAULT_SYSTEM_PROMPT = "You are helpful assistant."  # spec §1 Step 2.5, word for word


@dataclass
class AgentState:
    """The agent's mutable runtime state (spec §19 ``agentState``).

    Thread safety: owned by the agent; see ``YiemAgent`` for which thread writes what.
    """

    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    model: Optional[LLMModel] = None
    tools: Mapping[str, AgentTool] = field(default_factory=dict)
    messages: list[AgentMessage] = field(default_factory=History)  # a list that counts its edits (docs/performance.md)
    pending_tool_calls: set[str] = field(default_factory=set)
    active_run: bool = False
    error_message: Optional[str] = None


_TOOL_EXECUTION_MODES = ("sequential", "parallel")


@dataclass(frozen=True)
class AgentLoopConfig:
    """Hooks and the execution mode for one batch (spec §19 ``agentLoopConfig``).

    ``before_tool_call(ctx, signal) -> None | dict`` may block a call;
    ``after_tool_call(ctx, signal) -> None | dict`` may replace parts of its result
    (spec §14). ``tool_execution`` is "sequential" or "parallel" (spec §9).

    Thread safety: immutable; may be shared between threads.
    """

    before_tool_call: Optional[Callable[..., Any]] = None
    after_tool_call: Optional[Callable[..., Any]] = None
    tool_execution: str = "sequential"

    def __post_init__(self) -> None:
        if self.tool_execution not in _TOOL_EXECUTION_MODES:
            raise ValueError(f"tool_execution must be one of {_TOOL_EXECUTION_MODES}, got {self.tool_execution!r}")


@dataclass(frozen=True)
class BeforeToolCallContext:
    """What ``before_tool_call`` sees (spec §14 ``beforeToolCallContext``).

    Thread safety: immutable; may be shared between threads.
    """

    assistant_message: AssistantMessage
    tool_call: AgentToolCall
    args: dict[str, Any]
    context: AgentContext


@dataclass(frozen=True)
class AfterToolCallContext:
    """What ``after_tool_call`` sees (spec §14 ``afterToolCallContext``).

    Thread safety: immutable; may be shared between threads.
    """

    assistant_message: AssistantMessage
    tool_call: AgentToolCall
    args: dict[str, Any]
    result: AgentToolResult
    is_error: bool
    context: AgentContext


# --- beyond the spec: a context for tools (docs/api.md "A context for tools, async tools") ---
# The spec's ``execute`` receives only (id, args, signal, onPartialResult) (§3). Beyond it, a
# tool or a hook often needs what the run knows: the application's own objects (a database
# handle, the user), which run and round this is, the tokens spent so far, the conversation.
# ``YiemAgent(deps=...)`` gives the application's objects; the run builds a ``RunContext`` for
# each batch and each call of it sees it, with its own ``tool_call_id``:
#
# - through ``current_run_context()``, from any ``execute``, ``before_tool_call`` or
#   ``after_tool_call`` (a context variable, set in the thread that runs them: the run
#   thread, a pool thread of a parallel batch, the thread of a call with ``timeout_s``);
# - as an argument of a ``tool()`` function, to a parameter annotated ``RunContext`` (it is
#   not in the schema; the model never sends it).
#
# Thread safety: a ``RunContext`` is immutable (``messages`` is a tuple: a snapshot taken when
# the batch started, which later messages do not change); each thread sees its own value of
# the context variable (``contextvars``).


@dataclass(frozen=True)
class RunContext:
    """What a tool call may know of its run.

    Attributes:
        deps: the agent's ``deps`` (``YiemAgent(deps=...)``), as given; None without.
        run_id: the run's number (1 for the agent's first run), as in the run's events.
        round: the LLM round whose tool calls these are (1-based).
        usage: the run's ``LLMUsage`` so far, this round's reply included.
        messages: a read-only snapshot of the history the batch started from.
        tool_call_id: the id of the call being run; None outside one call.
    """

    deps: Any
    run_id: int
    round: int
    usage: LLMUsage
    messages: tuple[AgentMessage, ...]
    tool_call_id: Optional[str]


_current: contextvars.ContextVar[Optional[RunContext]] = contextvars.ContextVar("yiemagent_run_context", default=None)


def current_run_context() -> Optional[RunContext]:
    """The ``RunContext`` of the tool call this thread is running, or None outside a run's tools and hooks."""
    return _current.get()


@contextmanager
def run_context(context: Optional[RunContext]) -> Iterator[Optional[RunContext]]:
    """Make ``context`` current in this thread for the ``with`` block (the run sets it around a batch)."""
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)


@contextmanager
def call_context(tool_call_id: str) -> Iterator[Optional[RunContext]]:
    """The current context with ``tool_call_id`` set, for one call's PREPARE, EXECUTE and FINALIZE; nothing outside a run."""
    outer = _current.get()
    with run_context(replace(outer, tool_call_id=tool_call_id) if outer is not None else None) as context:
        yield context


@dataclass(frozen=True, slots=True)
class PreparedToolCall:
    """A call that passed preparation: the resolved tool and its validated arguments (spec §8.1).

    Thread safety: immutable; may be shared between threads.
    """

    tool: AgentTool
    tool_call: AgentToolCall
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ImmediateOutcome:
    """A call that ended during preparation, with its (error) result (spec §8.1).

    Thread safety: immutable; may be shared between threads.
    """

    result: AgentToolResult
    is_error: bool


@dataclass(frozen=True, slots=True)
class ExecutedOutcome:
    """The result of ``execute``, before the after-hook (spec §8.2).

    Thread safety: immutable; may be shared between threads.
    """

    result: AgentToolResult
    is_error: bool


@dataclass(frozen=True, slots=True)
class FinalizedOutcome:
    """A call after all three phases (spec §8.3).

    Thread safety: immutable; may be shared between threads.
    """

    tool_call: AgentToolCall
    result: AgentToolResult
    is_error: bool


@dataclass(frozen=True)
class PendingApproval:
    """A tool call that waits for a person's decision (beyond the spec; decision 18).

    ``prepare_tool_call`` returns one when ``before_tool_call`` answers
    ``{"defer": True, "reason": ...}``; ``pending_approvals(agent)`` lists them, read from
    the history (docs/api.md "Approvals that wait for a person").

    Thread safety: immutable; may be shared between threads.
    """

    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    reason: str


@dataclass(frozen=True)
class AgentToolCallBatch:
    """The tool-result messages of one batch, in call order, and whether to stop (spec §10).

    ``deferred`` (beyond the spec, decision 18): the calls ``before_tool_call`` deferred,
    in call order; they have no result in ``messages``, and a batch with any does not
    terminate.

    Thread safety: immutable; may be shared between threads.
    """

    messages: list[ToolResultMessage]
    terminate: bool
    deferred: list[PendingApproval] = field(default_factory=list)
