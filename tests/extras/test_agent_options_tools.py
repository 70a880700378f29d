"""What a new agent offers the model: no built-in unless asked (decision 19), and the tools given to ``YiemAgent(tools=...)``.

docs/api.md "Agent options"; shared/spec/API.md "A run that fails says so" (``YiemAgent(..., tools=())``).
"""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import WAIT, make_tool
from yiemagent import SQLiteSession, ToolStore, YiemAgent, register_tool, run_agent, shutdown, take_response, tool
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.tools import BUILTIN_TOOL_NAMES


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()


def agent_threads() -> set[str]:
    return {thread.name for thread in threading.enumerate() if thread.name.startswith("yiemagent")}


# --- no built-in unless asked (decision 19) --------------------------------------------------


def test_a_bare_agent_offers_the_model_no_tool():
    """YiemAgent(llm_call=..., agent_event_sink=...) registers no built-in: its store is empty and its request offers no tool."""
    llm = ScriptedLLM(["hello"])
    with YiemAgent(llm_call=llm, agent_event_sink=None) as agent:
        assert list(agent.tool_store.tools) == [] and list(agent.state.tools) == []
        run_agent(agent, "hi")
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
    assert not llm.requests[0].get("tools")


def test_a_call_to_write_tool_from_a_bare_agent_is_an_unknown_tool_and_writes_nothing(tmp_path, monkeypatch):
    """A model asking a bare agent for writeTool gets an error result naming the unknown tool; no file is written."""
    monkeypatch.setenv("YIEMAGENT_TOOLS_DIR", str(tmp_path))
    arguments = {"name": "pwn", "label": "P", "description": "d", "inputSchema": {"type": "object"}, "executeCode": "return 1"}
    llm = ScriptedLLM([tool_call_reply(("c1", "writeTool", arguments)), "done"])
    with YiemAgent(llm_call=llm, agent_event_sink=None) as agent:
        run_agent(agent, "write a tool")
        take_response(agent, timeout=WAIT)
        result = agent.history()[2]
    assert result.is_error and "writeTool" in result.content[0].text
    assert list(tmp_path.iterdir()) == []


# --- tools= -----------------------------------------------------------------------------------


def test_tools_registers_functions_and_agent_tools_in_order_after_the_built_ins_asked_for():
    """tools=[function, AgentTool, function]: each registered in order, after the built-ins asked for; a function is wrapped by tool() and runs."""
    echo = make_tool("echo")
    llm = ScriptedLLM([tool_call_reply(("c1", "add", {"a": 2, "b": 3}), ("c2", "echo", {})), "five"])
    with YiemAgent(llm_call=llm, agent_event_sink=None, builtin_tools=["getTime"], tools=[add, echo, shout]) as agent:
        assert list(agent.tool_store.tools) == ["getTime", "add", "echo", "shout"]
        assert agent.tool_store.tools["echo"] is echo
        assert agent.tool_store.tools["add"].description == "Add two numbers."
        run_agent(agent, "2 + 3?")
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
        results = [m for m in agent.history() if m.role == "tool"]
    assert [t["function"]["name"] for t in llm.requests[0]["tools"]] == ["getTime", "add", "echo", "shout"]
    assert results[0].content[0].text == "5" and not results[0].is_error


def test_tools_join_the_tools_of_a_store_given():
    """With tool_store=..., the tools given are added to the store's own, after them."""
    store = ToolStore("mine")
    register_tool(store, make_tool("first"))
    with YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, tool_store=store, tools=[add]) as agent:
        assert agent.tool_store is store and list(store.tools) == ["first", "add"]


@pytest.mark.parametrize(
    "options, name, why",
    [
        ({"tools": [add, add]}, "add", "two tools named 'add'"),
        ({"tools": [shout, make_tool("shout")]}, "shout", "two tools named 'shout'"),
        ({"tools": [tool(add, name="getTime")], "builtin_tools": True}, "getTime", "the built-in asked for with builtin_tools"),
        ({"tools": [tool(add, name="getTime")], "builtin_tools": ["getTime"]}, "getTime", "the built-in asked for"),
        ({"tools": [make_tool("first")], "tool_store": "a store holding 'first'"}, "first", "a tool the tool_store given already holds"),
    ],
)
def test_two_tools_of_one_name_are_refused_at_construction_naming_it_and_nothing_is_left_behind(tmp_path, options, name, why):
    """Two tools of one name (or one named as a built-in asked for, or as a tool of the store given): ValueError naming it; no thread started, the store and the session untouched."""
    store = ToolStore("given")
    register_tool(store, make_tool("first"))
    if "tool_store" in options:
        options = {**options, "tool_store": store}
    session = SQLiteSession(tmp_path / "chat.sqlite", "chat")
    before = agent_threads()
    with pytest.raises(ValueError) as refused:
        YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, session=session, **options)
    assert repr(name) in str(refused.value) and why in str(refused.value)
    assert agent_threads() == before
    assert list(store.tools) == ["first"]
    with YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, session=session):  # not held by the refused agent
        pass
    session.close()


def test_a_tool_may_take_the_name_of_a_built_in_not_asked_for():
    """tools=[a tool named getWeather] with no built-ins: it is the agent's getWeather."""
    mine = make_tool("getWeather")
    with YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, tools=[mine]) as agent:
        assert dict(agent.tool_store.tools) == {"getWeather": mine}


@pytest.mark.parametrize("tools, message", [(add, "expects a list"), ("add", "expects a list"), (make_tool("x"), "expects a list"), ([add, 5], "holds int 5")])
def test_tools_that_is_not_a_list_of_tools_or_functions_is_a_type_error_naming_it(tools, message):
    """tools=a function, a string, an AgentTool, or a list holding 5: TypeError naming what it got."""
    with pytest.raises(TypeError, match=message):
        YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, tools=tools)


NAMES = st.sampled_from(["add", "shout", "echo", *BUILTIN_TOOL_NAMES])


@given(names=st.lists(NAMES, max_size=5), builtins=st.lists(st.sampled_from(BUILTIN_TOOL_NAMES), unique=True))
def test_an_agent_is_made_exactly_when_every_name_is_used_once(names, builtins):
    """Any tools and built-ins asked for: the agent is made iff no name repeats, and then its tools are the built-ins (spec order), then the tools in order."""
    tools = [make_tool(name) for name in names]
    wanted = [name for name in BUILTIN_TOOL_NAMES if name in builtins]
    if len(set(names)) < len(names) or set(names) & set(builtins):
        with pytest.raises(ValueError):
            YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, builtin_tools=builtins, tools=tools)
        return
    agent = YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, builtin_tools=builtins, tools=tools)
    try:
        assert list(agent.tool_store.tools) == wanted + names
        assert [agent.tool_store.tools[name] for name in names] == tools
    finally:
        shutdown(agent, timeout=WAIT)
