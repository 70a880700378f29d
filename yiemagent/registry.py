"""Per-agent tool stores and static registration (spec §4, §15 ``listTool``).

Each agent owns one ``ToolStore``; registering a tool in one store never affects another
(spec §4 "Per-Agent Isolation"). ``get_tools`` returns the store's own ordered dict, not a
copy, so that it stays consistent with ``AgentState.tools`` (spec §4).

The built-in tools register themselves (``yiemagent.tools``: ``register_all_tools``,
``register_builtin_tools``, ``list_tool``): this module knows no tool, so the tool
modules may import it without an import circle.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError

from ._bounds import NotJSONError, json_safe
from .errors import ToolDefinitionError, ToolSchemaError
from .types import AgentTool

__all__ = ["ToolStore", "check_input_schema", "clear_tools", "get_tools", "register_tool"]


def check_input_schema(tool_name: str, schema: Any) -> None:
    """Raise ``ToolSchemaError`` naming the tool if ``schema`` is not valid JSON Schema.

    The metaschema is the one the schema names in ``$schema``, else Draft 2020-12. A
    top-level ``"type"`` must be ``"object"`` (spec §7: the arguments are one object).
    """
    if not isinstance(schema, dict):
        raise ToolSchemaError(f"tool {tool_name!r}: input_schema must be a JSON object (dict), got {type(schema).__name__}")
    if "type" in schema and schema["type"] != "object":
        # a tool's arguments are always one JSON object (spec §7); every LLM API rejects another top-level type
        raise ToolSchemaError(f"tool {tool_name!r}: input_schema must describe an object (\"type\": \"object\"), got \"type\": {schema['type']!r}")
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator_class.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise ToolSchemaError(f"tool {tool_name!r}: input_schema is not a valid JSON Schema at {where}: {exc.message}") from exc


class ToolStore:
    """An isolated set of tools, keyed by name in registration order (spec §4 ``toolStore``).

    Thread safety: ``_lock`` serialises mutations (``register_tool``, ``clear_tools``).
    Readers on other threads (the agent loop, ``listTools``) look tools up by name or take
    a snapshot with ``tuple(store.tools.values())``; both are atomic under CPython's GIL,
    so registering a tool while an agent runs is safe: the next LLM round sees it.
    """

    __slots__ = ("name", "tools", "_lock", "__weakref__")  # weakly held by an MCPClient that follows its server

    def __init__(self, name: str = "default") -> None:
        self.name = name
        self.tools: OrderedDict[str, AgentTool] = OrderedDict()
        # guards mutations of self.tools
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ToolStore(name={self.name!r}, tools={list(self.tools)!r})"


def register_tool(store: ToolStore, tool: AgentTool) -> AgentTool:
    """Add ``tool`` to ``store`` under its name; a tool of the same name is replaced.

    Spec: §4 "Registration API" (registerTool).

    Replacing keeps the tool's original position, as an ordered dict does; that is how
    a developer reloads a tool written by ``writeTool`` (spec §15).

    Raises:
        ToolDefinitionError: ``store`` is not a ``ToolStore`` (an agent, say) or ``tool``
            is not an ``AgentTool``.
        ToolSchemaError: ``tool.input_schema`` is not a valid JSON Schema, or not strict
            JSON (NaN, infinity: it is sent with every request); the message names the
            tool and the place in the schema.
    """
    if not isinstance(store, ToolStore):
        hint = " (for an agent, pass agent.tool_store)" if hasattr(store, "tool_store") else ""
        raise ToolDefinitionError(f"register_tool(store, tool): store must be a ToolStore, got {type(store).__name__}{hint}")
    if not isinstance(tool, AgentTool):
        raise ToolDefinitionError(f"register_tool(store, tool): tool must be an AgentTool, got {type(tool).__name__}")
    check_input_schema(tool.name, tool.input_schema)
    try:
        json_safe(tool.input_schema, _path="input_schema")
    except NotJSONError as exc:  # the schema goes to the LLM with every request: strict JSON only (decision 15)
        raise ToolSchemaError(f"tool {tool.name!r}: {exc}") from None
    with store._lock:
        store.tools[tool.name] = tool
    return tool


def get_tools(store: ToolStore) -> OrderedDict[str, AgentTool]:
    """The store's own ordered dict of tools — not a copy (spec §4 getTools)."""
    return store.tools


def clear_tools(store: ToolStore) -> None:
    """Remove every tool from ``store`` and from no other store (spec §4 clearTools)."""
    with store._lock:
        store.tools.clear()
