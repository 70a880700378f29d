"""tool() against careless callers and repeated calls (review)."""

from __future__ import annotations

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


def test_a_direct_call_missing_a_required_positional_argument_is_a_tool_error_not_a_shifted_call():
    """execute({"b": 5}) on f(a, b=2, /) passed 5 as a (the later argument moved into the gap); now it names the missing argument."""

    def f(a: int, b: int = 2, /) -> str:
        return f"{a} {b}"

    made = tool(f)
    with pytest.raises(ToolError, match="missing required argument 'a'"):
        run(made, {"b": 5})
    assert run(made, {"a": 1}) == "1 2"
