"""The tool file contract in Python (spec §17): every built-in module follows it."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import yiemagent.tools
from yiemagent import AgentTool, AgentToolResult, ToolStore

# agent_tool makes tools of agents (beyond the spec); it is not a tool file of §17
NOT_TOOL_FILES = {"agent_tool"}
MODULES = sorted(m.name for m in pkgutil.iter_modules(yiemagent.tools.__path__) if not m.name.startswith("_") and m.name not in NOT_TOOL_FILES)


@pytest.mark.spec("17")
@pytest.mark.parametrize("module_name", MODULES)
def test_builtin_module_defines_execute_and_factory(module_name):
    """Each built-in module defines <name>_execute and a <name>_tool factory returning an AgentTool."""
    module = importlib.import_module(f"yiemagent.tools.{module_name}")
    execute = getattr(module, f"{module_name}_execute")
    factory = getattr(module, f"{module_name}_tool")
    assert callable(execute)
    tool = factory(ToolStore("contract")) if module_name == "list_tools" else factory()
    assert isinstance(tool, AgentTool)


@pytest.mark.spec("17")
@pytest.mark.parametrize("module_name", MODULES)
def test_optional_hooks_when_present_are_wired_into_the_tool(module_name):
    """Optional <name>_prepare_arguments / <name>_validate_required_args, when defined, are the tool's hooks."""
    module = importlib.import_module(f"yiemagent.tools.{module_name}")
    factory = getattr(module, f"{module_name}_tool")
    tool = factory(ToolStore("contract")) if module_name == "list_tools" else factory()
    for suffix, field in (("prepare_arguments", "prepare_arguments"), ("validate_required_args", "validate_required_args")):
        hook = getattr(module, f"{module_name}_{suffix}", None)
        assert getattr(tool, field) is hook


@pytest.mark.spec("17")
def test_list_tools_execute_returns_an_agent_tool_result():
    """The execute function follows the contract signature and returns an AgentToolResult."""
    from yiemagent.tools.list_tools import list_tools_execute

    assert isinstance(list_tools_execute(ToolStore("x"), "c", {}, None, lambda p: None), AgentToolResult)
