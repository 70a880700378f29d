"""``OTelSink``: an agent's events as OpenTelemetry spans, after the GenAI semantic conventions.

Beyond the spec (docs/tracing.md). One run is an ``invoke_agent`` span; inside it each
LLM round is a ``chat {model}`` span (kind CLIENT) and each tool call an
``execute_tool {name}`` span. A round's tool spans are the round's chat span's siblings,
not its children: the chat span covers the model's call only, which has ended when the
tools run (the conventions show them side by side under the encompassing span). The
spans start and end at the events' ``time_ns``, so the calls of a parallel batch are
sibling spans with their real start and end times, however the emitter queued their events.

How the sink finds the run an event belongs to: the run runs in the context of the call
that started it (docs/tracing.md "Trace context"), every event of the run is emitted in
that context or a copy of it (the run thread, tool threads, the delta relay), and the
sink keeps its open run in a ``ContextVar`` set there at ``AgentRunStartEvent``. So one
sink may serve many agents at once, and a sub-agent started from a tool has a run of its
own. An event seen outside any such context (a thread a tool started by hand) falls back
on the sink's only open run, if it has exactly one.

The sink also makes its spans current in the run thread (``opentelemetry.context.attach``)
while they are open: a span a tool or a hook starts, or an instrumented HTTP library in
``llm_call``, becomes a child of the tool's or the round's span, and an agent run started
from inside a tool (a sub-agent) a child of that tool's span. In a parallel batch the
tools run in threads that copied the run thread's context while their own span was
current, so there too a tool's spans are children of its span.

Every span ends: a round's or a call's span whose end event never came (a sink that
raised on it, a bug) ends, marked ``error.type`` "incomplete", when its run ends; a run
that never ends (an ``llm_call`` that never returns, a run ``shutdown`` gave up on) is
ended, marked "abandoned", when the interpreter exits, before the SDK's own exit handler
flushes the spans.

Without ``capture_content`` nothing the model, a tool or the user wrote reaches a span: a
failure's description names its cause, not its message (which may quote the answer
``output_type`` refused, or a tool's text), and a call to a tool its round did not offer
(a name the model made up) is a span without its name (docs/tracing.md "Status",
"Message content").

Thread safety: the sink may be called from any thread, by several agents at once.
``_lock`` guards ``_open`` and ``_loose``; each run's ``lock`` guards its spans. The sink
never raises: a failure to record (an exporter, a sampler or a span processor that raises,
also in ``on_start``: ``_spans.start_span``) is logged on the ``yiemagent.otel`` logger,
and the spans still end.
"""

from __future__ import annotations

import atexit
import contextvars
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from importlib import metadata
from types import MappingProxyType
from typing import Any, Optional

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from ..events import (
    AgentRunEndEvent,
    AgentRunStartEvent,
    LLMCallEndEvent,
    LLMCallStartEvent,
    LLMDeltaEvent,
    SubAgentEvent,
    ToolExecEndEvent,
    ToolExecStartEvent,
)
from ..types import text_of
from . import _content as content
from ._spans import RunSpans, end_span, fail_span, start_span

__all__ = ["OTelSink"]

logger = logging.getLogger("yiemagent.otel")

try:
    _VERSION = metadata.version("yiemagent")
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    _VERSION = "0"

_RUNS: contextvars.ContextVar[Mapping["OTelSink", "RunSpans"]] = contextvars.ContextVar("yiemagent_otel_runs", default=MappingProxyType({}))
"""The open run of each sink, in the context of that run (see the module docstring)."""

_SINKS: "weakref.WeakSet[OTelSink]" = weakref.WeakSet()  # every live sink: the exit handler ends their open runs
_EXIT_HOOK = threading.Lock()  # guards _exit_hooked
_exit_hooked = False


class OTelSink:
    """An event sink that records each run, LLM round and tool call as an OpenTelemetry span.

    ``tracer_provider``: where the spans go; None is OpenTelemetry's global provider (set
    with ``trace.set_tracer_provider``). ``capture_content``: also record what was sent and
    received — prompts, replies, tool arguments and results — which the conventions leave
    off by default because it holds user data; what is recorded is masked first (every
    live client's credentials become ``***``). docs/tracing.md lists every attribute.

    Needs only ``opentelemetry-api``; without an SDK installed and configured it records
    nothing, at almost no cost. Use ``tee`` to pair it with another sink.

    Thread safety: see the module docstring; one sink may serve many agents at once.
    """

    def __init__(self, tracer_provider: Optional[trace.TracerProvider] = None, *, capture_content: bool = False) -> None:
        self.capture_content = bool(capture_content)
        self._tracer = trace.get_tracer("yiemagent", _VERSION, tracer_provider=tracer_provider)
        self._lock = threading.Lock()  # guards _open, _loose and _nested
        self._open: dict[int, RunSpans] = {}  # runs started and not yet ended, by id(RunSpans)
        self._nested: dict[tuple[int, str], OTelSink] = {}  # the sinks of sub-agents' runs, by (id(run), call id)
        self._in_call: Optional[Span] = None  # for a sub-agent's sink: the parent's call span its runs nest in
        self._loose = RunSpans(None, None, None, 0)  # tool calls made outside any run (execute_tool_calls called directly)
        _SINKS.add(self)

    def __repr__(self) -> str:
        return f"OTelSink(capture_content={self.capture_content})"

    def __call__(self, event: Any) -> None:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            return  # ToolExecUpdateEvent, and events this sink does not know
        try:
            handler(self, event)
        except Exception:  # an exporter or span processor that raises: the run goes on, its spans still end
            logger.warning("OTelSink could not record a %s; the run's spans still end", type(event).__name__, exc_info=True)

    # --- finding the run -----------------------------------------------------------------

    def _find(self, run_id: Optional[int] = None, tool_call_id: Optional[str] = None) -> Optional[RunSpans]:
        """The open run ``event`` belongs to: the one of this context, else the sink's only open run."""
        run = _RUNS.get().get(self)
        if run is not None and not run.ended and (run_id is None or run.run_id == run_id):
            if tool_call_id is None or tool_call_id in run.tools:
                return run
        with self._lock:
            candidates = [
                r for r in self._open.values()
                if (run_id is None or r.run_id == run_id) and (tool_call_id is None or tool_call_id in r.tools)
            ]
        return candidates[0] if len(candidates) == 1 else None

    # --- making spans current in the run thread ------------------------------------------

    def _attach(self, run: RunSpans, span: Span) -> bool:
        """Make ``span`` current in the run thread, if this is the run thread; True if it was made current."""
        if run.thread != threading.get_ident() or run.parent is None:
            return False
        current = run.parent if span is run.span else trace.set_span_in_context(span, run.parent)
        run.tokens.append((otel_context.attach(current), span))
        return True

    def _detach(self, run: RunSpans, span: Optional[Span]) -> bool:
        """Detach ``span`` (and anything attached after it) if it is attached here; True if it was."""
        tokens = run.tokens
        if not tokens or run.thread != threading.get_ident():
            return False
        if tokens[-1][1] is not span:  # not the innermost (the common case): is it attached at all?
            for _, attached in tokens:
                if attached is span:
                    break
            else:
                return False
        while tokens:
            token, attached = tokens.pop()
            otel_context.detach(token)
            if attached is span:
                break
        return True

    def _detach_tool(self, run: RunSpans) -> None:
        """The run thread moves on: the tool span it made current (a parallel call, ended in its own thread) is current no more."""
        if run.attached_tool is not None and self._detach(run, run.attached_tool):
            run.attached_tool = None

    # --- runs ----------------------------------------------------------------------------

    def _run_start(self, event: AgentRunStartEvent) -> None:
        # the caller's context: a run started inside a span is its child; a sub-agent's run, its call's
        parent = trace.set_span_in_context(self._in_call) if self._in_call is not None else otel_context.get_current()
        span = start_span(
            self._tracer,
            "invoke_agent",
            parent,
            kind=SpanKind.INTERNAL,
            attributes={"gen_ai.operation.name": "invoke_agent", "yiemagent.run.id": event.run_id},
            start_time=event.time_ns,
        )
        # a sub-agent's spans are never made current: its events come through its parent's call,
        # on threads whose context belongs to the parent
        thread = threading.get_ident() if self._in_call is None else None
        run = RunSpans(event.run_id, span, trace.set_span_in_context(span, parent), thread)
        _RUNS.set({**_RUNS.get(), self: run})
        with self._lock:
            self._open[id(run)] = run
        _hook_exit()
        self._attach(run, span)

    def _run_end(self, event: AgentRunEndEvent) -> None:
        run = self._find(event.run_id)
        if run is None:
            return
        with run.lock:
            if run.ended:
                return
            run.ended = True
            if run.chat is not None or run.tools:
                self._end_children(run, event.time_ns, "incomplete")
            span = run.span
            assert span is not None
            try:
                response = event.response
                attributes: dict[str, Any] = {
                    "gen_ai.provider.name": run.provider or "unknown",
                    "gen_ai.response.finish_reasons": (content.finish_reason(response.stop_reason),),
                }
                if run.counted:
                    attributes.update(content.usage_attributes(event.usage))
                if run.model:
                    attributes["gen_ai.request.model"] = run.model
                if self.capture_content:
                    attributes["gen_ai.output.messages"] = content.output_messages(response, run.converted)
                span.set_attributes(attributes)
                if response.stop_reason in content.FAILED_RUN_STOP_REASONS:
                    stop = str(response.stop_reason)
                    fixed = f"the run ended with stop_reason {stop!r}"
                    fail_span(span, stop, content.failure_description(fixed, response.error_message, self.capture_content))
            finally:
                if threading.get_ident() == run.thread:
                    while run.tokens:
                        otel_context.detach(run.tokens.pop()[0])
                self._forget(run)
                end_span(span, event.time_ns)

    def _forget(self, run: RunSpans) -> None:
        with self._lock:
            self._open.pop(id(run), None)
        runs = _RUNS.get()
        if runs.get(self) is run:
            _RUNS.set({sink: r for sink, r in runs.items() if sink is not self})

    def _end_children(self, run: RunSpans, end_ns: int, why: str) -> None:
        """End the round and call spans of ``run`` still open (their end events never came); ``run.lock`` held."""
        open_spans = ([run.chat] if run.chat is not None else []) + list(run.tools.values())
        run.chat = None
        run.tools.clear()
        run.attached_tool = None
        for span in open_spans:
            fail_span(span, why, f"the span's end event never came; it was ended when its run ended ({why})")
            end_span(span, end_ns)

    # --- LLM rounds ----------------------------------------------------------------------

    def _llm_start(self, event: LLMCallStartEvent) -> None:
        run = self._find(event.run_id)
        if run is None:
            return  # a round of a run this sink did not see start
        with run.lock:
            if run.attached_tool is not None:
                self._detach_tool(run)
            if run.chat is not None:  # the previous round's end event never came
                self._end_children(run, event.time_ns, "incomplete")
            provider = content.provider_name(event.provider)
            attributes: dict[str, Any] = {"gen_ai.operation.name": "chat"}
            if provider:
                attributes["gen_ai.provider.name"] = provider
            if event.model:
                attributes["gen_ai.request.model"] = event.model
                run.model = run.model or event.model
            run.offered = event.context.tools if event.context is not None else None
            if self.capture_content and event.context is not None:
                attributes["gen_ai.input.messages"] = content.input_messages(event.context.messages, run.converted)
                if event.context.system_prompt:
                    attributes["gen_ai.system_instructions"] = content.system_instructions(event.context.system_prompt)
            run.chat = start_span(
                self._tracer,
                f"chat {event.model}" if event.model else "chat",
                run.parent,
                kind=SpanKind.CLIENT,
                attributes=attributes,
                start_time=event.time_ns,
            )
            run.chat_round, run.chat_start_ns, run.chat_provider, run.chat_streamed = event.round, event.time_ns, event.provider, False
            self._attach(run, run.chat)

    def _llm_delta(self, event: LLMDeltaEvent) -> None:
        run = self._find(event.run_id)
        if run is None:
            return
        with run.lock:
            if run.chat is None or run.chat_streamed or run.chat_round != event.round:
                return
            run.chat_streamed = True
            run.chat.set_attributes(
                {"gen_ai.request.stream": True, "gen_ai.response.time_to_first_chunk": (event.time_ns - run.chat_start_ns) / 1e9}
            )

    def _llm_end(self, event: LLMCallEndEvent) -> None:
        run = self._find(event.run_id)
        if run is None:
            return
        with run.lock:
            span = run.chat
            if span is None or run.chat_round != event.round:
                return
            run.chat = None
            try:
                reply = event.response
                attributes: dict[str, Any] = content.usage_attributes(event.usage)
                run.counted = run.counted or event.usage is not None
                provider = content.provider_name(run.chat_provider)
                if reply is not None:
                    provider = provider or content.provider_name(reply.provider, reply.api) or reply.provider
                    if reply.model:
                        attributes["gen_ai.response.model"] = reply.model
                    attributes["gen_ai.response.finish_reasons"] = (content.finish_reason(reply.stop_reason),)
                    if self.capture_content:
                        attributes["gen_ai.output.messages"] = content.output_messages(reply, run.converted)
                provider = provider or run.chat_provider or "unknown"
                attributes["gen_ai.provider.name"] = provider
                run.provider = run.provider or provider
                span.set_attributes(attributes)
                if event.error is not None:
                    error_type = event.error_type or "_OTHER"
                    why = content.failure_description(f"the round failed: {error_type}", event.error, self.capture_content)
                    fail_span(span, error_type, why)
                elif reply is not None and reply.stop_reason == "error":  # an llm_call that reports its failure
                    why = content.failure_description("the reply's stop_reason is 'error'", reply.error_message, self.capture_content)
                    fail_span(span, "error", why)
            finally:
                self._detach(run, span)
                end_span(span, event.time_ns)

    # --- tool calls ----------------------------------------------------------------------

    def _tool_start(self, event: ToolExecStartEvent) -> None:
        run = _RUNS.get().get(self)
        if run is None or run.ended:  # not in its run's context (a thread a tool started by hand), or no run
            run = self._find() or self._loose
        call_id = event.tool_call_id
        attributes: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.id": call_id, "gen_ai.tool.type": "function"}
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = content.tool_arguments(event.arguments)
        with run.lock:
            name: Optional[str] = event.tool_name
            if not self.capture_content and run.offered is not None and name not in run.offered:
                name = None  # a tool the round did not offer: its name is only the model's text (content)
            else:
                attributes["gen_ai.tool.name"] = name
            if run.attached_tool is not None:
                self._detach_tool(run)
            span = start_span(
                self._tracer,
                f"execute_tool {name}" if name is not None else "execute_tool",
                run.parent,  # None for a loose call: the current context
                attributes=attributes,
                start_time=event.time_ns,
            )  # kind INTERNAL, the default
            stale = run.tools.pop(call_id, None)
            run.tools[call_id] = span
            if self._attach(run, span):
                run.attached_tool = span
        if stale is not None:  # the same id again before its end came
            fail_span(stale, "incomplete", "a call with the same id started before this one ended")
            end_span(stale, event.time_ns)

    def _tool_end(self, event: ToolExecEndEvent) -> None:
        run = _RUNS.get().get(self)
        if run is None or run.ended or event.tool_call_id not in run.tools:
            run = self._find(tool_call_id=event.tool_call_id) or self._loose
        with run.lock:
            span = run.tools.pop(event.tool_call_id, None)
            if span is None:
                return
            try:
                result = event.result
                if event.is_error:
                    text = text_of(result.content)
                    error_type = content.tool_error_type(text)
                    why = content.failure_description(f"the call's result is an error: {error_type}", text, self.capture_content)
                    fail_span(span, error_type, why)
                elif self.capture_content:
                    span.set_attribute("gen_ai.tool.call.result", content.tool_result(result))
            finally:
                if run.attached_tool is span and self._detach(run, span):
                    run.attached_tool = None
                end_span(span, event.time_ns)
        if not self._nested:  # no sub-agent ran in any call (an entry is made, under the lock, before its call ends)
            return
        with self._lock:
            nested = self._nested.pop((id(run), event.tool_call_id), None)
        if nested is not None:
            nested._end_abandoned("the call that ran this sub-agent ended before its run did")  # a timeout: its spans end too

    # --- sub-agents ----------------------------------------------------------------------

    def _sub_agent(self, event: SubAgentEvent) -> None:
        """A sub-agent's event (``agent_tool``): recorded by a sink of its own whose runs nest in the call's span."""
        run = self._find(tool_call_id=event.tool_call_id) or self._loose
        with run.lock:
            call_span = run.tools.get(event.tool_call_id)
        if call_span is None:
            return  # a call this sink did not see start
        with self._lock:
            nested = self._nested.get((id(run), event.tool_call_id))
            if nested is None:
                nested = OTelSink(capture_content=self.capture_content)
                nested._tracer, nested._in_call = self._tracer, call_span
                self._nested[id(run), event.tool_call_id] = nested
        nested(event.event)

    # --- the exit handler ----------------------------------------------------------------

    def _end_abandoned(self, description: str = "the run had not ended when the process exited") -> None:
        """End every run still open (it never ended: the process is exiting, or its sub-agent's call ended), marked "abandoned"."""
        with self._lock:
            runs = list(self._open.values())
        now = time.time_ns()
        for run in runs:
            if not run.lock.acquire(timeout=1):  # the run is inside this sink right now: leave it
                continue
            try:
                if run.ended or run.span is None:
                    continue
                run.ended = True
                self._end_children(run, now, "abandoned")
                fail_span(run.span, "abandoned", description)
                end_span(run.span, now)
                with self._lock:
                    self._open.pop(id(run), None)
            finally:
                run.lock.release()


def _end_all_abandoned() -> None:
    for sink in list(_SINKS):
        sink._end_abandoned()


def _hook_exit() -> None:
    """Register the exit handler at the first run: after the tracer provider was made, so it runs before the SDK's own."""
    global _exit_hooked
    if _exit_hooked:
        return
    with _EXIT_HOOK:
        if not _exit_hooked:
            atexit.register(_end_all_abandoned)
            _exit_hooked = True


_HANDLERS: dict[type, Callable[[OTelSink, Any], None]] = {
    AgentRunStartEvent: OTelSink._run_start,
    AgentRunEndEvent: OTelSink._run_end,
    LLMCallStartEvent: OTelSink._llm_start,
    LLMDeltaEvent: OTelSink._llm_delta,
    LLMCallEndEvent: OTelSink._llm_end,
    ToolExecStartEvent: OTelSink._tool_start,
    ToolExecEndEvent: OTelSink._tool_end,
    SubAgentEvent: OTelSink._sub_agent,
}
