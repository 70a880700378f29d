"""The built-in tools, one module each, following the Python form of the tool file contract (spec §17).

Each module defines ``<name>_execute`` (and, where it needs them,
``<name>_prepare_arguments`` / ``<name>_validate_required_args``) and a factory
``<name>_tool()`` returning the ``AgentTool``. The names the LLM sees are the spec's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .list_tools import list_tools_tool

if TYPE_CHECKING:
    from ..registry import ToolStore
    from ..tooling import AgentTool

__all__ = ["builtin_tools", "list_tools_tool"]


def builtin_tools(store: "ToolStore") -> list["AgentTool"]:
    """The built-ins ``register_all_tools`` registers before ``listTools``, in the spec's order (§4)."""
    return []
