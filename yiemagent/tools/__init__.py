"""The built-in tools, one module each, following the Python form of the tool file contract (spec §17).

Each module defines ``<name>_execute`` (and, where it needs them,
``<name>_prepare_arguments`` / ``<name>_validate_required_args``) and a factory
``<name>_tool()`` returning the ``AgentTool``. The names the LLM sees are the spec's.

The built-ins own their registration: ``register_all_tools`` (spec §4),
``register_builtin_tools`` (the agent's ``builtin_tools=`` option, docs/api.md "Agent
options") and ``agent_tools`` (its ``tools=`` option) live here, so ``registry.py`` imports
no tool and the tool modules can import ``registry.py`` without an import circle.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Union

from ..registry import ToolStore, register_tool
from ..typed.functions import tool as function_tool
from ..types import AgentTool
from .get_time import get_time_tool
from .get_weather import get_weather_tool
from .list_tools import list_tools_tool
from .write_tool import write_tool_tool

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "agent_tools",
    "builtin_tools",
    "get_time_tool",
    "get_weather_tool",
    "list_tool",
    "list_tools_tool",
    "register_all_tools",
    "register_builtin_tools",
    "resolve_builtin_names",
    "write_tool_tool",
]

# name the LLM sees -> factory taking the store; in the spec's order (§4), listTools last
_FACTORIES: "OrderedDict[str, Callable[[ToolStore], AgentTool]]" = OrderedDict(
    [
        ("getWeather", lambda store: get_weather_tool()),
        ("getTime", lambda store: get_time_tool()),
        ("writeTool", lambda store: write_tool_tool(store=store)),
        ("listTools", list_tools_tool),
    ]
)

BUILTIN_TOOL_NAMES: tuple[str, ...] = tuple(_FACTORIES)
"""The built-in tools, in the order they are registered: getWeather, getTime, writeTool, listTools."""


def builtin_tools(store: ToolStore) -> list[AgentTool]:
    """The built-ins ``register_all_tools`` registers before ``listTools``, in the spec's order (§4)."""
    return [factory(store) for name, factory in _FACTORIES.items() if name != "listTools"]


def list_tool(store: ToolStore) -> AgentTool:
    """The ``listTools`` tool bound to ``store`` (spec §1 Step 1, §15 listTool)."""
    return list_tools_tool(store)


def resolve_builtin_names(builtin: Union[bool, str, Iterable[str]]) -> tuple[str, ...]:
    """The built-in names the agent option ``builtin_tools`` selects, in registration order.

    docs/api.md "Agent options": ``True`` all four, ``False`` none, an iterable of names only
    those (a single string counts as one name, as a user writing ``builtin_tools="getTime"``
    means).

    Raises:
        ValueError: a name is not a built-in; the message names it and lists the built-ins.
        TypeError: ``builtin`` is neither a bool nor an iterable of strings.
    """
    if builtin is True:
        return BUILTIN_TOOL_NAMES
    if builtin is False or builtin is None:
        return ()
    names = [builtin] if isinstance(builtin, str) else builtin
    try:
        wanted = list(names)
    except TypeError:
        raise TypeError(f"builtin_tools must be True, False or an iterable of tool names, got {type(builtin).__name__}") from None
    for name in wanted:
        if not isinstance(name, str):
            raise TypeError(f"builtin_tools holds {name!r}; expected tool names (str)")
        if name not in _FACTORIES:
            raise ValueError(f"builtin_tools names {name!r}, which is not a built-in tool; the built-ins are {', '.join(BUILTIN_TOOL_NAMES)}")
    return tuple(name for name in BUILTIN_TOOL_NAMES if name in wanted)


def register_builtin_tools(
    store: ToolStore, names: Iterable[str] = BUILTIN_TOOL_NAMES, *, keep_existing: bool = False
) -> OrderedDict[str, AgentTool]:
    """Register the named built-ins in ``store``, in the spec's order, and return ``store.tools``.

    With ``keep_existing=True`` (the agent uses it for a store it is given) a built-in
    is registered only if its name is still free, so a tool of the same name that the
    caller registered first is kept.

    Raises:
        ValueError: a name is not a built-in (see ``resolve_builtin_names``).
    """
    for name in resolve_builtin_names(list(names)):
        if not (keep_existing and name in store.tools):
            register_tool(store, _FACTORIES[name](store))
    return store.tools


def register_all_tools(store: ToolStore, *, keep_existing: bool = False) -> OrderedDict[str, AgentTool]:
    """Register the built-in tools, ``listTools`` last, and return ``store.tools``.

    Spec: §4 "Static Registration — register_all_tools()": getWeather, getTime, writeTool,
    then the ``listTools`` tool bound to this store.

    With ``keep_existing=True`` (beyond the spec) names already taken are left alone, as
    in ``register_builtin_tools``.
    """
    return register_builtin_tools(store, BUILTIN_TOOL_NAMES, keep_existing=keep_existing)


def agent_tools(tools: Iterable[Any], builtin_names: Iterable[str] = (), store_names: Iterable[str] = ()) -> list[AgentTool]:
    """The agent option ``tools``, checked: ``AgentTool``s as they are, functions wrapped by ``tool()``.

    docs/api.md "Agent options" (shared/spec/API.md "A run that fails says so"). Everything
    is checked before anything is registered, so a refused list leaves no trace: each tool
    goes through ``register_tool``'s checks into a store of its own, and no two may share a
    name, nor take the name of a built-in asked for (``builtin_names``) or of a tool the
    agent's store already holds (``store_names``).

    Raises:
        TypeError: ``tools`` is not an iterable, or holds something neither an ``AgentTool``
            nor callable; the message names it.
        ValueError: two tools with one name, or a name already taken; the message names it.
        ToolDefinitionError, ToolSchemaError: a function ``tool()`` cannot wrap, a schema
            ``register_tool`` refuses.
    """
    if isinstance(tools, (str, bytes, AgentTool)) or callable(tools):
        raise TypeError(f"YiemAgent(tools=...) expects a list of AgentTools or functions, got {type(tools).__name__}: {tools!r:.80}")
    try:
        given = list(tools)
    except TypeError:
        raise TypeError(f"YiemAgent(tools=...) expects a list of AgentTools or functions, got {type(tools).__name__}") from None
    taken = {name: "the built-in asked for with builtin_tools" for name in builtin_names}
    taken.update((name, "a tool the tool_store given already holds") for name in store_names)
    checked = ToolStore("tools=")  # register_tool's checks, on a store no one else sees
    for item in given:
        if not isinstance(item, AgentTool) and not callable(item):
            raise TypeError(f"YiemAgent(tools=...) holds {type(item).__name__} {item!r:.80}; expected an AgentTool or a function")
        agent_tool = item if isinstance(item, AgentTool) else function_tool(item)
        if agent_tool.name in checked.tools:
            raise ValueError(f"YiemAgent(tools=...) holds two tools named {agent_tool.name!r}; each name may be used once")
        if agent_tool.name in taken:
            raise ValueError(f"YiemAgent(tools=...) holds a tool named {agent_tool.name!r}, the name of {taken[agent_tool.name]}; each name may be used once")
        register_tool(checked, agent_tool)
    return list(checked.tools.values())
