"""The open spans of one run, and marking and ending a span so that nothing stops it ending.

Beyond the spec (docs/tracing.md "Every span ends"); the sink is ``sink.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Optional

from opentelemetry import context as otel_context
from opentelemetry.trace import Span, Status, StatusCode

__all__ = ["RunSpans", "end_span", "fail_span"]

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
        self.tokens: list[tuple[object, Optional[Span]]] = []  # attached contexts, innermost last
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

