"""tool() against careless callers and repeated calls (review)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from yiemagent import ToolDefinitionError, ToolError, tool


def run(made, args):
    return made.execute("call", args, None, lambda partial: None).content[0].text


def test_a_mutable_default_is_fresh_for_each_call_that_omits_it():
    """The function appended to its default list; each later call saw the earlier calls' items, though the schema promised []."""

    def collect(item: str, seen: list[str] = []) -> int:  # noqa: B006 - the point of the test
        seen.append(item)
        return len(seen)

    made = tool(collect)
    assert made.input_schema["properties"]["seen"]["default"] == []
    assert [run(made, {"item": "a"}) for _ in range(3)] == ["1", "1", "1"]
    assert run(made, {"item": "a", "seen": ["x"]}) == "2"


class Calculator:
    def add(self, a: int, b: int) -> int:
        return a + b


def test_a_method_taken_from_its_class_is_a_clear_definition_error():
    """tool(Calculator.add) made the model send 'self' (an untyped required property)."""
    with pytest.raises(ToolDefinitionError, match="method taken from its class"):
        tool(Calculator.add)
    assert run(tool(Calculator().add), {"a": 1, "b": 2}) == "3"


def test_a_nested_function_whose_first_parameter_is_named_self_is_still_a_tool():
    def outer():
        def relay(self: str) -> str:
            return self

        return relay

    assert run(tool(outer()), {"self": "me"}) == "me"


def test_a_nested_function_whose_unannotated_first_parameter_is_named_self_is_still_a_tool():
    """Only a function defined in a class body is a method: a nested function's untyped 'self' is the model's argument, like any other."""

    def outer():
        def relay(self, times: int = 1):
            return [self] * times

        return relay

    made = tool(outer())
    assert made.input_schema["properties"] == {"self": {}, "times": {"type": "integer", "default": 1}}
    assert run(made, {"self": "me", "times": 2}) == '["me", "me"]'


class Guarded:
    """Doubles a number."""

    def __call__(self, n: int) -> int:
        return 2 * n

    def __getattribute__(self, name: str) -> Any:  # a proxy that refuses to hand out its __call__
        if name == "__call__":
            raise AttributeError(name)
        return object.__getattribute__(self, name)


def test_a_callable_object_that_refuses_to_hand_out_its_call_is_still_a_tool():
    """Calling it still works (Python looks __call__ up on the type), so the async-generator check must not require the attribute."""
    made = tool(Guarded(), name="double")
    assert (made.description, made.input_schema["properties"]) == ("Doubles a number.", {"n": {"type": "integer"}})
    assert run(made, {"n": 2}) == "4"


def test_a_direct_call_missing_a_required_positional_argument_is_a_tool_error_not_a_shifted_call():
    """execute({"b": 5}) on f(a, b=2, /) passed 5 as a (the later argument moved into the gap); now it names the missing argument."""

    def f(a: int, b: int = 2, /) -> str:
        return f"{a} {b}"

    made = tool(f)
    with pytest.raises(ToolError, match="missing required argument 'a'"):
        run(made, {"b": 5})
    assert run(made, {"a": 1}) == "1 2"


def test_a_function_that_changes_its_arguments_does_not_change_the_models_message():
    """An Any (or **kwargs, or dict[str, Any]) argument was the history's own tool-call object: the function's change was sent back as the model's arguments."""
    from yiemagent import YiemAgent, register_tool, run_agent, take_response
    from yiemagent.llm import ScriptedLLM
    from yiemagent.llm.scripted import tool_call_reply

    @tool
    def note(data: Any, table: dict[str, Any], **extra: Any) -> str:
        data["added"] = {1, 2}  # not even JSON
        table["rows"].append("added")
        extra["more"].clear()
        return "ok"

    sent = {"data": {"a": [1]}, "table": {"rows": ["r1"]}, "more": {"k": "v"}}
    llm = ScriptedLLM([tool_call_reply(("c1", "note", sent)), "done"])
    with YiemAgent(llm_call=llm, agent_event_sink=None, builtin_tools=False) as agent:
        register_tool(agent.tool_store, note)
        run_agent(agent, "go")
        assert take_response(agent, timeout=30).content[0].text == "done"
        history = agent.history()
    assert history[1].content[0]["tool_calls"][0]["function"]["arguments"] == sent
    assert json.loads(llm.requests[1]["messages"][2]["tool_calls"][0]["function"]["arguments"]) == sent
