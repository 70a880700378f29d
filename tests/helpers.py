"""Builders shared by the tests: tools, contexts, an event recorder."""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from yiemagent import (
    AgentContext,
    AgentLoopConfig,
    AgentTool,
    AgentToolResult,
    AssistantMessage,
    TextContent,
    ToolStore,
    register_tool,
)

SCHEMA_CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "minLength": 1}},
    "required": ["city"],
}


def text_result(text: str, *, terminate: bool = False, details: Optional[dict] = None) -> AgentToolResult:
    return AgentToolResult([TextContent(text)], details or {}, None, terminate)


def make_tool(
    name: str,
    execute: Optional[Callable[..., Any]] = None,
    *,
    schema: Optional[dict] = None,
    parallel: bool = False,
    **kwargs: Any,
) -> AgentTool:
    """A tool that echoes its arguments unless given another ``execute``."""

    def echo(tool_call_id, args, signal, on_partial_result):
        return text_result(f"{name}:{sorted(args.items())}")

    return AgentTool(
        name=name,
        label=name.title(),
        description=f"test tool {name}",
        input_schema=schema if schema is not None else {"type": "object"},
        execute=execute or echo,
        parallel_tool_execute=parallel,
        **kwargs,
    )


def context_with(*tools: AgentTool) -> AgentContext:
    store = ToolStore("test")
    for tool in tools:
        register_tool(store, tool)
    return AgentContext("You are a test.", [], store.tools)


ASSISTANT = AssistantMessage([TextContent("calling tools")])
SEQUENTIAL = AgentLoopConfig()
PARALLEL = AgentLoopConfig(tool_execution="parallel")


class EventRecorder:
    """An event sink that records events and notices overlapping calls."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self._inside = 0
        self.overlaps = 0
        self._guard = threading.Lock()  # guards _inside and overlaps

    def __call__(self, event: Any) -> None:
        with self._guard:
            self._inside += 1
            if self._inside > 1:
                self.overlaps += 1
        try:
            self.events.append(event)
        finally:
            with self._guard:
                self._inside -= 1

    def of_type(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    def for_call(self, call_id: str) -> list[Any]:
        return [e for e in self.events if getattr(e, "tool_call_id", None) == call_id]


def run_tool(tool: AgentTool, args: dict, partials: Optional[list] = None):
    """Run one tool as the agent does (EXECUTE phase) and return the ExecutedOutcome."""
    from yiemagent import AgentToolCall, PreparedToolCall, execute_prepared_tool_call
    from yiemagent.events import EventEmitter

    def sink(event):
        if partials is not None:
            partials.append(event.partial_result)

    return execute_prepared_tool_call(PreparedToolCall(tool, AgentToolCall("call-1", tool.name, args), args), None, EventEmitter(sink))
