"""Records refused at construction say which field is wrong, what it must be and what it got: AgentTool (spec §3),
AgentLoopConfig (spec §19), UsageLimits (docs/api.md "Agents as tools, fallback models, usage limits")."""

from __future__ import annotations

import pytest

from yiemagent import AgentLoopConfig, AgentTool, LLMUsage, ToolDefinitionError, UsageLimits


def _execute(*args):
    return None


def _tool(**changes):
    fields = dict(name="t", label="T", description="d", input_schema={"type": "object"}, execute=_execute)
    fields.update(changes)
    return AgentTool(**fields)


@pytest.mark.spec("3")
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"execute": "run"}, "tool 't': execute must be callable, got str"),
        ({"execute": None}, "tool 't': execute must be callable, got NoneType"),
        ({"prepare_arguments": 3}, "tool 't': prepare_arguments must be callable, got int"),
        ({"validate_required_args": 3}, "tool 't': validate_required_args must be callable, got int"),
        ({"validate_required_args": "required"}, "tool 't': validate_required_args must be callable, got str"),
        ({"label": 5}, "tool 't': label must be a string"),
        ({"description": None}, "tool 't': description must be a string"),
        ({"input_schema": []}, "tool 't': input_schema must be a dict (a JSON Schema), got list"),
        ({"timeout_s": True}, "tool 't': timeout_s must be a positive number of seconds, got True"),
        ({"timeout_s": "5"}, "tool 't': timeout_s must be a positive number of seconds, got '5'"),
        ({"timeout_s": 0}, "tool 't': timeout_s must be a positive number of seconds, got 0"),
        ({"timeout_s": -1.5}, "tool 't': timeout_s must be a positive number of seconds, got -1.5"),
        ({"name": ""}, "a tool's name must be a non-empty string, got ''"),
        ({"name": 5}, "a tool's name must be a non-empty string, got 5"),
        ({"name": "get weather"}, "tool name 'get weather' contains whitespace or control characters; use letters, digits, '_' or '-'"),
        ({"name": "get\x00weather"}, "tool name 'get\\x00weather' contains whitespace or control characters; use letters, digits, '_' or '-'"),
        ({"requires_approval": "yes"}, "tool 't': requires_approval must be True or False, got 'yes'"),
    ],
)
def test_a_bad_tool_field_raises_tool_definition_error_with_the_exact_text(changes, message):
    """Each malformed field of an AgentTool is refused at construction with a ToolDefinitionError naming the tool, the
    field, what it must be and the type (or value) it got; execute is required, the two optional hooks may be None."""
    with pytest.raises(ToolDefinitionError) as raised:
        _tool(**changes)
    assert str(raised.value) == message


@pytest.mark.spec("3")
def test_the_optional_tool_hooks_may_be_none_or_callables_and_any_positive_timeout_is_taken():
    """prepare_arguments and validate_required_args may be None or any callable; timeout_s any positive real number."""
    tool = _tool(prepare_arguments=dict, validate_required_args=lambda args: None, timeout_s=0.25)
    assert (tool.prepare_arguments, tool.timeout_s) == (dict, 0.25)
    assert _tool(prepare_arguments=None, validate_required_args=None, timeout_s=None).validate_required_args is None


@pytest.mark.spec("19")
def test_an_unknown_tool_execution_mode_is_refused_naming_the_modes():
    """AgentLoopConfig takes "sequential" or "parallel" (spec §9); anything else is a ValueError naming both and the value."""
    with pytest.raises(ValueError) as raised:
        AgentLoopConfig(tool_execution="both")
    assert str(raised.value) == "tool_execution must be one of ('sequential', 'parallel'), got 'both'"
    assert AgentLoopConfig(tool_execution="parallel").tool_execution == "parallel"


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"max_input_tokens": "5"}, TypeError, "UsageLimits(max_input_tokens=...) must be an int or None, got str"),
        ({"max_output_tokens": True}, TypeError, "UsageLimits(max_output_tokens=...) must be an int or None, got bool"),
        ({"max_tool_calls": 2.0}, TypeError, "UsageLimits(max_tool_calls=...) must be an int or None, got float"),
        ({"max_total_tokens": -1}, ValueError, "UsageLimits(max_total_tokens=...) must be at least 0 (or None for no limit), got -1"),
    ],
)
def test_a_bad_usage_limit_is_refused_with_the_exact_text(changes, error, message):
    """A limit that is not an int (a bool included) is a TypeError naming the field and the type; a negative one a
    ValueError naming the field and the value."""
    with pytest.raises(error) as raised:
        UsageLimits(**changes)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("usage", "tool_calls", "message"),
    [
        (LLMUsage(input_tokens=12, output_tokens=1), 0, "max_input_tokens=10 (12 input tokens used)"),
        (LLMUsage(input_tokens=1, output_tokens=11), 0, "max_output_tokens=10 (11 output tokens used)"),
        (LLMUsage(input_tokens=6, output_tokens=6), 0, "max_total_tokens=10 (12 tokens in all used)"),
        (LLMUsage(), 11, "max_tool_calls=10 (11 tool calls used)"),
    ],
)
def test_each_limit_passed_is_named_with_its_count_and_what_it_counts(usage, tool_calls, message):
    """``UsageLimits.passed`` names the first limit gone above, its value, the count used and what was counted."""
    limits = UsageLimits(max_input_tokens=10, max_output_tokens=10, max_total_tokens=10, max_tool_calls=10)
    assert limits.passed(usage, tool_calls) == message


def test_a_usage_limit_of_zero_is_taken_and_any_use_passes_it():
    """0 is a valid limit (nothing allowed): a run with one tool call, or one token, passes it; with none it does not."""
    limits = UsageLimits(max_input_tokens=0, max_output_tokens=0, max_total_tokens=0, max_tool_calls=0)
    assert (limits.max_input_tokens, limits.max_output_tokens, limits.max_total_tokens, limits.max_tool_calls) == (0, 0, 0, 0)
    assert limits.passed(LLMUsage(), 0) is None
    assert limits.passed(LLMUsage(), 1) == "max_tool_calls=0 (1 tool calls used)"
    assert limits.passed(LLMUsage(output_tokens=1, total_tokens=1), 0) == "max_output_tokens=0 (1 output tokens used)"
