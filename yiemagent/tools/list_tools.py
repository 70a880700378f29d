"""``listTools``: list the tools of one store (spec §1 Step 1, §15 "listTool — Discover Available Tools").

Each store gets its own instance, bound to it, so an agent sees only its own tools.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Optional

from ..types import AbortSignal, AgentTool, AgentToolResult, TextContent

if TYPE_CHECKING:
    from ..registry import ToolStore

__all__ = ["list_tools_execute", "list_tools_tool"]


def list_tools_execute(
    store: "ToolStore", tool_call_id: str, args: dict[str, Any], signal: Optional[AbortSignal], on_partial_result: Any
) -> AgentToolResult:
    """``Available tools:`` then ``- name: label — description`` per tool, in registration order."""
    tools = tuple(store.tools.values())  # an atomic snapshot: a tool may be registered meanwhile
    lines = ["Available tools:"]
    lines.extend(f"- {t.name}: {t.label} — {t.description}" for t in tools)
    if not tools:
        lines.append("(none)")
    return AgentToolResult([TextContent("\n".join(lines))], {"store": store.name, "tools": [t.name for t in tools]})


def list_tools_tool(store: "ToolStore") -> AgentTool:
    """The ``listTools`` tool bound to ``store`` (spec §15 ``listTool(store)``)."""
    return AgentTool(
        name="listTools",
        label="List Tools",
        description=(
            "List every tool available to this agent with its label and description. "
            "Call it to discover tools, or before writing a new tool to avoid a name collision."
        ),
        input_schema={"type": "object", "properties": {}},
        execute=partial(list_tools_execute, store),
        parallel_tool_execute=True,
    )
