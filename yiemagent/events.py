"""Lifecycle events and the serialising emitter that delivers them (spec §13).

The three tool events are the spec's. The run and LLM-round events are beyond the spec,
named in its style, so that a user can watch a whole run (docs/events.md lists them all).

An event sink is any callable ``sink(event) -> None``. The library never calls it
directly: it goes through an ``EventEmitter``, which guarantees decision 8 — the sink is
never called from two threads at once, and an exception it raises is logged and dropped.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from .messages import AssistantMessage, LLMUsage
from .types import AgentToolResult

__all__ = [
    "AgentRunEndEvent",
    "AgentRunStartEvent",
    "EventEmitter",
    "LLMCallEndEvent",
    "LLMCallStartEvent",
    "LLMDeltaEvent",
    "SubAgentEvent",
    "ToolExecEndEvent",
    "ToolExecStartEvent",
    "ToolExecUpdateEvent",
    "as_emitter",
]

logger = logging.getLogger("yiemagent.events")
# Everything a sink raises is contained (issue 9): SystemExit or any BaseException from a
# sink would otherwise end the run thread, and no response would ever come.
_SINK_ERRORS = (BaseException,)


@dataclass(frozen=True, slots=True)
class ToolExecStartEvent:
    """A tool call is about to be prepared (spec §13 ``toolExecStartEvent``).

    Thread safety: immutable; may be shared between threads.
    """

    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolExecUpdateEvent:
    """A running tool reported a partial result (spec §13 ``toolExecUpdateEvent``).

    Thread safety: immutable; may be shared between threads.
    """

    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    partial_result: Any


@dataclass(frozen=True, slots=True)
class ToolExecEndEvent:
    """A tool call has its final result (spec §13 ``toolExecEndEvent``).

    Thread safety: immutable; may be shared between threads.
    """

    tool_call_id: str
    tool_name: str
    result: AgentToolResult
    is_error: bool


@dataclass(frozen=True, slots=True)
class AgentRunStartEvent:
    """A run of ``_process_message`` began (beyond the spec).

    ``run_id`` counts runs from 1 for this agent; ``new_messages`` is how many queued
    messages the run took into the history at its start.

    Thread safety: immutable; may be shared between threads.
    """

    run_id: int
    new_messages: int


@dataclass(frozen=True, slots=True)
class AgentRunEndEvent:
    """A run ended; ``response`` is what was put on the output channel (beyond the spec).

    ``usage`` is the sum over the run's LLM rounds (API.md "Usage", decision 13); a
    round whose call failed adds nothing.

    Thread safety: immutable; may be shared between threads.
    """

    run_id: int
    response: AssistantMessage
    rounds: int
    duration_s: float
    usage: LLMUsage = field(default_factory=LLMUsage)


@dataclass(frozen=True, slots=True)
class LLMCallStartEvent:
    """An LLM round is starting (beyond the spec); ``round`` counts from 1 within the run.

    Thread safety: immutable; may be shared between threads.
    """

    run_id: int
    round: int
    message_count: int


@dataclass(frozen=True, slots=True)
class LLMCallEndEvent:
    """An LLM round ended (beyond the spec).

    ``response`` is None when the call failed; ``error`` then says why.

    Thread safety: immutable; may be shared between threads.
    """

    run_id: int
    round: int
    duration_s: float
    response: Optional[AssistantMessage]
    usage: Optional[LLMUsage]
    error: Optional[str]


@dataclass(frozen=True, slots=True)
class LLMDeltaEvent:
    """A fragment of a streamed LLM reply arrived (beyond the spec; API.md "Streaming").

    ``kind`` is ``"text"`` or ``"thinking"``. The deltas of one round come after its
    ``LLMCallStartEvent`` and before its ``LLMCallEndEvent``; joined, the deltas of a
    kind equal that kind's text in the round's final ``AssistantMessage``. Tool-call
    fragments are never sent as deltas.

    Thread safety: immutable; may be shared between threads.
    """

    run_id: int
    round: int
    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class SubAgentEvent:
    """An event of a sub-agent's run, as the parent's sink sees it (beyond the spec; docs/api.md "Agents as tools").

    ``tool_call_id`` is the parent's call of the ``agent_tool`` whose sub-agent emitted
    ``event``; a sub-agent of a sub-agent nests one ``SubAgentEvent`` in another. They come
    between the call's ``ToolExecStartEvent`` and ``ToolExecEndEvent``, through the
    parent's emitter (decision 8: never two sink calls at once, also for sub-agents run in
    parallel).

    Thread safety: immutable; may be shared between threads.
    """

    tool_call_id: str
    event: Any


class EventEmitter:
    """Delivers events to a user's sink one at a time, containing its failures.

    Spec: §13 "Event Sink"; decision 8.

    Calling the emitter calls the sink under a lock, so events from tool threads in a
    parallel batch never overlap. A sink that raises — anything, ``SystemExit`` included —
    is logged (``yiemagent.events`` logger, with the traceback) and the event is dropped;
    the pipeline goes on. Only a ``KeyboardInterrupt`` in the main thread propagates.

    Thread safety: callable from any thread; ``_lock`` serialises calls into the sink.
    A sink must not block for long: it holds up every thread that emits.
    """

    __slots__ = ("sink", "_lock")

    def __init__(self, sink: Optional[Callable[[Any], Any]]) -> None:
        self.sink = sink
        # held for the whole duration of one sink call: the sink is never re-entered
        self._lock = threading.RLock()

    def __call__(self, event: Any) -> None:
        sink = self.sink
        if sink is None:
            return
        with self._lock:
            try:
                sink(event)
            except _SINK_ERRORS:
                if threading.current_thread() is threading.main_thread() and sys.exc_info()[0] is KeyboardInterrupt:
                    raise  # a real Ctrl-C in a script that drives the pipeline itself
                logger.exception("event sink %r raised on %s; the event was dropped", sink, type(event).__name__)


def as_emitter(sink: Any) -> EventEmitter:
    """Wrap a sink in an ``EventEmitter``, or return it if it already is one."""
    return sink if isinstance(sink, EventEmitter) else EventEmitter(sink)
