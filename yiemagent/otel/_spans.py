"""The open spans of one run, and marking and ending a span so that nothing stops it ending.

Beyond the spec (docs/tracing.md "Every span ends"); the sink is ``sink.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from contextvars import Token
from types import TracebackType
from typing import Any, Optional

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode

__all__ = ["RunSpans", "end_span", "fail_span", "start_span"]

logger = logging.getLogger("yiemagent.otel")


class RunSpans:
    """The open spans of one run.

    Thread safety: ``lock`` guards every field but ``run_id``, ``span``, ``parent`` and
    ``thread``, which are set once. ``tokens`` are detached only in ``thread`` (a token
    belongs to the context it was attached in).
    """

    __slots__ = ("run_id", "span", "parent", "thread", "lock", "tokens", "chat", "chat_round", "chat_start_ns", "chat_provider",
                 "chat_streamed", "tools", "offered", "attached_tool", "provider", "model", "counted", "ended", "converted")

    def __init__(self, run_id: Optional[int], span: Optional[Span], parent: Optional[otel_context.Context], thread: Optional[int]) -> None:
        self.run_id = run_id
        self.span = span
        self.parent = parent  # the context the run's child spans start in: the run's span in the caller's context
        self.thread = thread  # the run thread, where its spans are made current (None: never made current)
        self.lock = threading.Lock()
        self.tokens: list[tuple[Token[Context], Optional[Span]]] = []  # attached contexts, innermost last
        self.chat: Optional[Span] = None
        self.chat_round = 0
        self.chat_start_ns = 0
        self.chat_provider: Optional[str] = None  # what the round's start event called the provider
        self.chat_streamed = False
        self.tools: dict[str, Span] = {}  # open execute_tool spans by tool_call_id
        self.offered: Optional[Mapping[str, object]] = None  # the tools the last round offered, by name (None: no round told)
        self.attached_tool: Optional[Span] = None  # the tool span current in the run thread, if any
        self.provider: Optional[str] = None  # gen_ai.provider.name, once a round told it
        self.model: Optional[str] = None
        self.counted = False  # a round reported its usage: the run's sum means something
        self.ended = False
        self.converted: dict[int, list[object]] = {}  # with capture_content: the messages' JSON, by id (_content.py)


def fail_span(span: Span, error_type: str, description: Optional[str]) -> None:
    """Mark ``span`` failed, the conventions' way: status ERROR and ``error.type``."""
    try:
        span.set_attribute("error.type", error_type)
        span.set_status(Status(StatusCode.ERROR, description))
    except Exception:
        logger.warning("could not mark a span failed", exc_info=True)


def end_span(span: Span, end_ns: int) -> None:
    """End ``span`` at ``end_ns``; a span processor or exporter that raises is logged, never lets a span stay open."""
    try:
        span.end(end_time=end_ns)
    except Exception:
        logger.warning("a span processor raised while a span ended", exc_info=True)


def start_span(tracer: trace.Tracer, name: str, context: Optional[otel_context.Context], **options: Any) -> Span:
    """``tracer.start_span``, that always gives a span to end: a span processor raising in ``on_start`` is logged.

    The SDK makes and starts a span before its processors' ``on_start``, so when one
    raises the span exists, started, and only the traceback holds it: it is taken from
    there (``_interrupted``) and returned, to be ended like any other (the processors it
    reached see it end; the exporter gets it). Where no span was made (a sampler that
    raised, another SDK), a non-recording span in the parent's context stands in, so the
    run's rounds and calls still start and end as spans under that parent
    (docs/tracing.md "Every span ends").
    """
    try:
        return tracer.start_span(name, context=context, **options)
    except Exception as exc:
        logger.warning("the tracing SDK raised while a span started", exc_info=True)
        span = _interrupted(exc.__traceback__)
        if span is None:
            return trace.NonRecordingSpan(trace.get_current_span(context).get_span_context())
        return span


def _interrupted(tb: Optional[TracebackType]) -> Optional[Span]:
    """The span whose start raised: the outermost frame's ``span`` or ``self`` that is a recording span."""
    while tb is not None:
        local = tb.tb_frame.f_locals
        for value in (local.get("span"), local.get("self")):
            if isinstance(value, Span) and value.is_recording():
                return value
        tb = tb.tb_next
    return None
