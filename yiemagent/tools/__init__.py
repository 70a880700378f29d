"""The built-in tools, one module each, following the Python form of the tool file contract (spec §17).

Each module defines ``<name>_execute`` (and, where it needs them,
``<name>_prepare_arguments`` / ``<name>_validate_required_args``) and a factory
``<name>_tool()`` returning the ``AgentTool``. The names the LLM sees are the spec's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .get_time import get_time_tool
from .get_weather import get_weather_tool
from .list_tools import list_tools_tool
from .write_tool import write_tool_tool

if TYPE_CHECKING:
    from ..registry import ToolStore
    from ..tooling import AgentTool

__all__ = ["builtin_tools", "get_time_tool", "get_weather_tool", "list_tools_tool", "write_tool_tool"]


def builtin_tools(store: "ToolStore") -> list["AgentTool"]:
    """The built-ins ``register_all_tools`` registers before ``listTools``, in the spec's order (§4)."""
    return [get_weather_tool(), get_time_tool(), write_tool_tool(store=store)]
