"""Tool definitions (spec §3) and per-agent tool stores (spec §4)."""

from __future__ import annotations

import pytest

from helpers import ASSISTANT, SEQUENTIAL, context_with, make_tool, text_result
from yiemagent import (
    AgentTool,
    AgentToolCall,
    ToolDefinitionError,
    ToolSchemaError,
    ToolStore,
    clear_tools,
    execute_tool_calls,
    get_tools,
    list_tool,
    register_all_tools,
    register_tool,
)
from yiemagent.tools import builtin_tools, register_builtin_tools, resolve_builtin_names


@pytest.mark.spec("3")
def test_tool_defaults_follow_the_spec():
    """prepare_arguments and validate_required_args default to None, parallel to False."""
    tool = AgentTool("t", "T", "d", {"type": "object"}, lambda *a: text_result("x"))
    assert tool.prepare_arguments is None and tool.validate_required_args is None
    assert tool.parallel_tool_execute is False and tool.timeout_s is None


@pytest.mark.spec("3")
@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"name": ""}, "non-empty string"),
        ({"execute": "not callable"}, "execute must be callable"),
        ({"prepare_arguments": 3}, "prepare_arguments must be callable"),
        ({"input_schema": []}, "input_schema must be a dict"),
        ({"timeout_s": 0}, "timeout_s must be a positive"),
    ],
)
def test_bad_tool_definition_raises_naming_the_field(kwargs, fragment):
    """Programmer misuse in a tool definition raises at once with the field named."""
    fields = dict(name="t", label="T", description="d", input_schema={"type": "object"}, execute=lambda *a: None)
    fields.update(kwargs)
    with pytest.raises(ToolDefinitionError, match=fragment):
        AgentTool(**fields)


@pytest.mark.spec("4")
def test_register_and_get_tools_in_registration_order():
    """get_tools returns tools keyed by name, in registration order."""
    store = ToolStore("s")
    for name in ("b", "a", "c"):
        register_tool(store, make_tool(name))
    assert list(get_tools(store)) == ["b", "a", "c"]
    assert get_tools(store)["a"].name == "a"


@pytest.mark.spec("4")
def test_get_tools_returns_the_store_dict_not_a_copy():
    """Mutating what get_tools returns mutates the store (spec §4: "not a copy")."""
    store = ToolStore("s")
    tools = get_tools(store)
    tools["x"] = make_tool("x")
    assert "x" in store.tools and get_tools(store) is store.tools


@pytest.mark.spec("4")
def test_stores_are_isolated():
    """Registering or clearing in one store never affects another."""
    a, b = ToolStore("A"), ToolStore("B")
    register_tool(a, make_tool("getTime"))
    register_tool(b, make_tool("getWeather"))
    assert list(get_tools(a)) == ["getTime"] and list(get_tools(b)) == ["getWeather"]
    clear_tools(a)
    assert list(get_tools(a)) == [] and list(get_tools(b)) == ["getWeather"]


@pytest.mark.spec("4")
def test_register_tool_rejects_an_invalid_json_schema_naming_the_tool():
    """A schema that is not JSON Schema raises ToolSchemaError with the tool's name."""
    store = ToolStore("s")
    with pytest.raises(ToolSchemaError, match="'broken'.*properties"):
        register_tool(store, make_tool("broken", schema={"type": "object", "properties": {"x": {"type": "nonsense"}}}))
    assert "broken" not in store.tools
    assert issubclass(ToolSchemaError, ValueError)


@pytest.mark.spec("4")
def test_register_tool_rejects_what_is_not_a_tool():
    """Registering something that is not an AgentTool is a clear error."""
    with pytest.raises(ToolDefinitionError, match="AgentTool"):
        register_tool(ToolStore("s"), {"name": "x"})  # type: ignore[arg-type]


@pytest.mark.spec("4")
def test_register_all_tools_returns_the_store_dict_with_list_tools_last():
    """register_all_tools returns store.tools, with listTools registered last."""
    store = ToolStore("s")
    tools = register_all_tools(store)
    assert tools is store.tools
    assert list(tools)[-1] == "listTools"


@pytest.mark.spec("15")
@pytest.mark.spec("1")
def test_list_tool_is_bound_to_its_store():
    """listTools lists the tools of its own store, in the §1 Step 1 format."""
    a, b = ToolStore("A"), ToolStore("B")
    register_tool(a, make_tool("getTime"))
    register_tool(b, make_tool("getWeather"))
    result = list_tool(a).execute("call-1", {}, None, lambda x: x)
    text = result.content[0].text
    assert text.startswith("Available tools:\n- getTime: Gettime — test tool getTime")
    assert "getWeather" not in text
    register_tool(a, make_tool("late"))
    assert "- late: Late — test tool late" in list_tool(a).execute("c", {}, None, lambda x: x).content[0].text


@pytest.mark.spec("4")
def test_a_store_is_named_default_unless_named():
    assert ToolStore().name == "default"
    assert ToolStore("mine").name == "mine"


@pytest.mark.spec("4")
def test_register_tool_refuses_what_is_not_a_store_or_not_a_tool_naming_its_type():
    with pytest.raises(ToolDefinitionError) as info:
        register_tool(object(), make_tool("t"))
    assert str(info.value) == "register_tool(store, tool): store must be a ToolStore, got object"
    with pytest.raises(ToolDefinitionError) as info:
        register_tool(ToolStore(), {"name": "t"})
    assert str(info.value) == "register_tool(store, tool): tool must be an AgentTool, got dict"


def _own_get_time():
    return make_tool("getTime", lambda *a: text_result("mine"))


@pytest.mark.spec("4")
def test_register_all_tools_replaces_a_tool_of_a_built_ins_name_unless_asked_to_keep_it():
    store = ToolStore()
    mine = register_tool(store, _own_get_time())
    register_all_tools(store)
    assert store.tools["getTime"] is not mine, "register_all_tools() kept the caller's getTime"
    assert list(store.tools) == ["getTime", "getWeather", "writeTool", "listTools"], "a replaced tool keeps its place"

    kept = ToolStore()
    mine = register_tool(kept, _own_get_time())
    register_all_tools(kept, keep_existing=True)
    assert kept.tools["getTime"] is mine
    assert list(kept.tools) == ["getTime", "getWeather", "writeTool", "listTools"]


def test_register_builtin_tools_replaces_by_default():
    store = ToolStore()
    mine = register_tool(store, _own_get_time())
    register_builtin_tools(store, ["getTime"])
    assert store.tools["getTime"] is not mine
    assert list(store.tools) == ["getTime"]


def test_builtin_tools_are_the_three_before_list_tools_and_write_tool_knows_the_store(tmp_path):
    """builtin_tools(store): getWeather, getTime, writeTool, the last bound to ``store`` so that
    it refuses a name the store already holds."""
    store = ToolStore()
    register_tool(store, make_tool("taken"))
    tools = builtin_tools(store)
    assert [t.name for t in tools] == ["getWeather", "getTime", "writeTool"]
    args = {"name": "taken", "label": "T", "description": "d", "inputSchema": {"type": "object"}, "executeCode": "return None"}
    batch = execute_tool_calls(context_with(tools[2]), ASSISTANT, [AgentToolCall("w", "writeTool", args)], SEQUENTIAL, None, None)
    assert batch.messages[0].is_error and "already registered" in batch.messages[0].content[0].text


def test_builtin_tools_option_of_the_wrong_type_is_refused_naming_the_type():
    with pytest.raises(TypeError) as info:
        resolve_builtin_names(5)
    assert str(info.value) == "builtin_tools must be True, False or an iterable of tool names, got int"
