"""The per-call pipeline PREPARE -> EXECUTE -> FINALIZE (spec §8) and errors as results (spec §12)."""

from __future__ import annotations

import logging

import pytest

from helpers import ASSISTANT, SCHEMA_CITY, SEQUENTIAL, context_with, make_tool, text_result
from yiemagent import (
    AbortSignal,
    AgentLoopConfig,
    AgentToolCall,
    AgentToolResult,
    ExecutedOutcome,
    FinalizedOutcome,
    ImmediateOutcome,
    LLMUsage,
    PendingApproval,
    PreparedToolCall,
    TextContent,
    ToolArgumentsError,
    ToolResultMessage,
    create_error_tool_result,
    create_tool_result_message,
    execute_prepared_tool_call,
    finalize_executed_tool_call,
    prepare_tool_call,
    prepare_tool_call_arguments,
    validate_required_args,
    validate_tool_arguments,
)


def call(name="getWeather", args=None, call_id="call_1"):
    return AgentToolCall(call_id, name, {"city": "Tokyo"} if args is None else args)


def error_text(outcome):
    assert outcome.is_error, outcome
    return outcome.result.content[0].text


weather = make_tool("getWeather", schema=SCHEMA_CITY)


# --- §8.1 PREPARE -----------------------------------------------------------------


@pytest.mark.spec("8.1")
def test_prepare_resolves_tool_and_returns_prepared_call():
    """A known tool with valid arguments gives a PreparedToolCall with the validated args."""
    ctx = context_with(weather)
    prep = prepare_tool_call(ctx, ASSISTANT, call(), SEQUENTIAL, None)
    assert isinstance(prep, PreparedToolCall)
    assert prep.tool is weather and prep.args == {"city": "Tokyo"} and prep.tool_call.id == "call_1"


@pytest.mark.spec("8.1")
def test_unknown_tool_lists_tools_and_suggests_the_closest():
    """An unknown name is an immediate error listing the tools and suggesting the nearest name."""
    ctx = context_with(weather, make_tool("getTime"))
    outcome = prepare_tool_call(ctx, ASSISTANT, call("getWeathr"), SEQUENTIAL, None)
    assert isinstance(outcome, ImmediateOutcome)
    assert error_text(outcome) == "Tool 'getWeathr' not found. Available tools: getWeather, getTime. Did you mean 'getWeather'?"


LONGEST = "A" * 64  # the longest unknown name that still gets a suggestion


@pytest.mark.spec("8.1")
@pytest.mark.parametrize(
    "tools, name, expected",
    [
        ((), "getWeather", "Tool 'getWeather' not found. Available tools: (none)."),
        (
            (make_tool("GETWEATHER"),),
            "getweather",
            "Tool 'getweather' not found. Available tools: GETWEATHER. Did you mean 'GETWEATHER'?",
        ),
        (
            (weather, make_tool("getTime")),
            "GETWEATHER",
            "Tool 'GETWEATHER' not found. Available tools: getWeather, getTime. Did you mean 'getWeather'?",
        ),
        (
            (make_tool(LONGEST),),
            LONGEST.lower(),
            f"Tool '{LONGEST.lower()}' not found. Available tools: {LONGEST}. Did you mean '{LONGEST}'?",
        ),
        ((make_tool(LONGEST),), LONGEST.lower() + "a", f"Tool '{LONGEST.lower()}a' not found. Available tools: {LONGEST}."),
    ],
    ids=["no-tools", "differs-only-in-case", "upper-case-call-of-a-camel-case-tool", "64-chars-gets-a-suggestion", "65-chars-gets-none"],
)
def test_unknown_tool_message_exact_text(tools, name, expected):
    """The exact text the model reads: "(none)" with no tools; a name differing only in case, either way round, is
    suggested (difflib alone would not, its case-sensitive ratio is 0); names longer than 64 characters get no suggestion."""
    assert error_text(prepare_tool_call(context_with(*tools), ASSISTANT, call(name), SEQUENTIAL, None)) == expected


@pytest.mark.spec("8.2")
def test_a_tool_that_changes_its_arguments_in_place_leaves_the_models_call_as_sent():
    """A hand-written execute that edits args (and a list inside) edits its own copy, not the call the history holds."""

    def execute(tool_call_id, args, signal, on_partial_result):
        args["city"] = "changed"
        args["tags"].append("added")
        return text_result("ok")

    original = call("t", {"city": "Oslo", "tags": ["a"]})
    prep = prepare_tool_call(context_with(make_tool("t", execute)), ASSISTANT, original, SEQUENTIAL, None)
    assert not execute_prepared_tool_call(prep, None, None).is_error
    assert original.arguments == {"city": "Oslo", "tags": ["a"]}


@pytest.mark.spec("8.1")
def test_prepare_arguments_hook_transforms_before_validation():
    """prepare_arguments runs before validation, so it can repair arguments the schema would reject."""
    tool = make_tool("t", schema=SCHEMA_CITY, prepare_arguments=lambda a: {"city": a.pop("town")})
    original = call("t", {"town": "Oslo"})
    prep = prepare_tool_call(context_with(tool), ASSISTANT, original, SEQUENTIAL, None)
    assert prep.args == {"city": "Oslo"}
    assert original.arguments == {"town": "Oslo"}, "the model's call is never mutated"


@pytest.mark.spec("8.1")
def test_prepare_tool_call_arguments_returns_original_when_unchanged():
    """With no hook, or a hook that changes nothing, the original call object comes back."""
    original = call("t", {"a": 1})
    assert prepare_tool_call_arguments(make_tool("t"), original) is original
    assert prepare_tool_call_arguments(make_tool("t", prepare_arguments=lambda a: a), original) is original
    changed = prepare_tool_call_arguments(make_tool("t", prepare_arguments=lambda a: {"a": 2}), original)
    assert changed.arguments == {"a": 2} and changed.id == original.id


@pytest.mark.spec("8.1")
@pytest.mark.parametrize(
    "hook, fragment",
    [
        (lambda a: 1 / 0, "prepare_arguments of tool 't' raised ZeroDivisionError"),
        (lambda a: ["not", "a", "dict"], "returned list; expected a dict"),
    ],
)
def test_broken_prepare_arguments_becomes_an_error_result(hook, fragment):
    """A prepare_arguments hook that raises or returns a non-dict yields an error result."""
    outcome = prepare_tool_call(context_with(make_tool("t", prepare_arguments=hook)), ASSISTANT, call("t"), SEQUENTIAL, None)
    assert fragment in error_text(outcome)


@pytest.mark.spec("8.1")
def test_default_validation_names_the_missing_field_and_shows_arguments():
    """Missing required fields are named and the received arguments are shown."""
    outcome = prepare_tool_call(context_with(weather), ASSISTANT, call(args={"town": "x"}), SEQUENTIAL, None)
    text = error_text(outcome)
    assert text.startswith("Invalid arguments for tool 'getWeather': city: 'city' is a required property")
    assert 'Received arguments: {"town": "x"}' in text


@pytest.mark.spec("8.1")
def test_default_validation_checks_the_whole_schema_not_only_required():
    """Decision 4: types, enums and lengths are validated, each failing field named."""
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "units": {"enum": ["C", "F"]}, "days": {"type": "integer", "maximum": 7}},
        "required": ["city"],
    }
    problem = validate_required_args({"city": 3, "units": "K", "days": 9}, schema)
    for fragment in ("city: 3 is not of type 'string'", "units: 'K' is not one of ['C', 'F']", "days: 9 is greater than the maximum of 7"):
        assert fragment in problem
    assert validate_required_args({"city": "x", "units": "C"}, schema) is None


@pytest.mark.spec("8.1")
def test_validate_tool_arguments_raises_value_error_on_failure():
    """validate_tool_arguments raises a ValueError subclass; prepare_tool_call catches it."""
    with pytest.raises(ToolArgumentsError) as info:
        validate_tool_arguments(weather, call(args={}))
    assert isinstance(info.value, ValueError)
    assert validate_tool_arguments(weather, call()) == {"city": "Tokyo"}


@pytest.mark.spec("8.1")
def test_custom_validator_replaces_the_default():
    """A tool's own validate_required_args is used instead of the schema, as the spec says."""
    tool = make_tool("t", schema=SCHEMA_CITY, validate_required_args=lambda a: None if a.get("ok") else "need ok")
    assert isinstance(prepare_tool_call(context_with(tool), ASSISTANT, call("t", {"ok": 1}), SEQUENTIAL, None), PreparedToolCall)
    assert "Invalid arguments for tool 't': need ok" == error_text(prepare_tool_call(context_with(tool), ASSISTANT, call("t", {}), SEQUENTIAL, None))


@pytest.mark.spec("8.1")
@pytest.mark.parametrize(
    "validator, fragment",
    [
        (lambda a: 1 / 0, "validate_required_args of tool 't' raised ZeroDivisionError: division by zero"),
        (lambda a: 42, "validate_required_args of tool 't' returned int; expected None (valid) or an error string"),
    ],
)
def test_broken_custom_validator_becomes_an_error_result(validator, fragment):
    """A validator that raises or returns neither None nor a string yields an error result saying so."""
    outcome = prepare_tool_call(context_with(make_tool("t", validate_required_args=validator)), ASSISTANT, call("t"), SEQUENTIAL, None)
    assert error_text(outcome) == fragment


@pytest.mark.spec("8.1")
def test_unparseable_arguments_from_extraction_become_an_error_result():
    """A call marked with arguments_error is answered with that error, the tool is not run."""
    ran = []
    tool = make_tool("t", execute=lambda *a: ran.append(1))
    bad = AgentToolCall("c", "t", {}, arguments_error="the arguments are not valid JSON (x)")
    assert error_text(prepare_tool_call(context_with(tool), ASSISTANT, bad, SEQUENTIAL, None)) == (
        "Invalid arguments for tool 't': the arguments are not valid JSON (x)"
    )
    assert ran == []


@pytest.mark.spec("14")
def test_before_hook_receives_context_and_may_block_with_reason():
    """before_tool_call sees message, call, args, context and signal; block:true stops the call with its reason."""
    seen = []

    def before(ctx, signal):
        seen.append((ctx.assistant_message, ctx.tool_call.id, ctx.args, ctx.context, signal))
        return {"block": True, "reason": "user said no"}

    ctx, signal = context_with(weather), AbortSignal()
    outcome = prepare_tool_call(ctx, ASSISTANT, call(), AgentLoopConfig(before_tool_call=before), signal)
    assert error_text(outcome) == "user said no"
    assert seen == [(ASSISTANT, "call_1", {"city": "Tokyo"}, ctx, signal)]


@pytest.mark.spec("14")
@pytest.mark.parametrize("answer", [None, {"block": False}, {}])
def test_before_hook_none_or_block_false_proceeds(answer):
    """None, {"block": False} and {} all let the call proceed."""
    config = AgentLoopConfig(before_tool_call=lambda ctx, signal: answer)
    assert isinstance(prepare_tool_call(context_with(weather), ASSISTANT, call(), config, None), PreparedToolCall)


@pytest.mark.spec("14")
def test_before_hook_block_without_reason_has_default_text():
    """A block without a reason says the execution was blocked."""
    config = AgentLoopConfig(before_tool_call=lambda ctx, signal: {"block": True})
    assert error_text(prepare_tool_call(context_with(weather), ASSISTANT, call(), config, None)) == "Tool execution was blocked"


@pytest.mark.spec("14")
@pytest.mark.parametrize(
    "answer, reason",
    [({"reason": "deleting needs a person"}, "deleting needs a person"), ({"reason": 7}, "7"), ({}, "awaiting approval"), ({"reason": ""}, "awaiting approval")],
    ids=["text", "not-text", "none", "empty"],
)
def test_before_hook_defer_waits_for_approval_with_its_reason_or_a_default(answer, reason):
    """Decision 18 (docs/api.md "Approvals that wait for a person"): {"defer": True} gives a PendingApproval with the hook's reason as text, or "awaiting approval"."""
    config = AgentLoopConfig(before_tool_call=lambda ctx, signal: {"defer": True, **answer})
    outcome = prepare_tool_call(context_with(weather), ASSISTANT, call(), config, None)
    assert outcome == PendingApproval("call_1", "getWeather", {"city": "Tokyo"}, reason)


@pytest.mark.spec("8.1")
def test_signal_fired_during_before_hook_aborts_the_call():
    """If the signal fires during before_tool_call, the call ends with "Operation aborted"."""
    signal = AbortSignal()
    config = AgentLoopConfig(before_tool_call=lambda ctx, s: s.abort())
    assert error_text(prepare_tool_call(context_with(weather), ASSISTANT, call(), config, signal)) == "Operation aborted"


@pytest.mark.spec("12")
@pytest.mark.parametrize(
    "hook, fragment",
    [
        (lambda ctx, s: 1 / 0, "before_tool_call hook raised ZeroDivisionError"),
        (lambda ctx, s: "yes please", "before_tool_call hook returned str; expected None or a dict"),
    ],
)
def test_broken_before_hook_blocks_with_an_error_result(hook, fragment):
    """A before hook that raises or returns garbage does not run the tool and says why."""
    outcome = prepare_tool_call(context_with(weather), ASSISTANT, call(), AgentLoopConfig(before_tool_call=hook), None)
    assert fragment in error_text(outcome) and "was not run" in error_text(outcome)


def pipeline_log(caplog):
    """(level, message, exception) of each record the pipeline logged."""
    return [(r.levelname, r.getMessage(), r.exc_info and r.exc_info[1]) for r in caplog.records if r.name == "yiemagent.pipeline"]


@pytest.mark.spec("12")
def test_raising_hooks_are_logged_as_warnings_naming_the_tool_with_the_traceback(caplog):
    """A before or after hook that raises is logged at WARNING with the tool's name and the exception."""
    errors = []

    def raising(ctx, signal):
        errors.append(ZeroDivisionError("hook bug"))
        raise errors[-1]

    with caplog.at_level(logging.DEBUG, logger="yiemagent.pipeline"):
        prepare_tool_call(context_with(weather), ASSISTANT, call(), AgentLoopConfig(before_tool_call=raising), None)
        finalize(raising)
    assert pipeline_log(caplog) == [
        ("WARNING", "before_tool_call hook raised on tool 'getWeather'", errors[0]),
        ("WARNING", "after_tool_call hook raised on tool 't'", errors[1]),
    ]


# --- §8.2 EXECUTE -----------------------------------------------------------------


def prepared(tool, args=None):
    return PreparedToolCall(tool, call(tool.name, args or {}), args or {})


@pytest.mark.spec("3")
@pytest.mark.spec("8.2")
def test_execute_passes_id_args_signal_and_callback():
    """execute receives the call id, validated args, the signal and an on_partial_result callback."""
    seen = []

    def execute(tool_call_id, args, signal, on_partial_result):
        seen.append((tool_call_id, args, signal, callable(on_partial_result)))
        return text_result("ok")

    signal = AbortSignal()
    outcome = execute_prepared_tool_call(prepared(make_tool("t", execute), {"a": 1}), signal, None)
    assert outcome == ExecutedOutcome(text_result("ok"), False)
    assert seen == [("call_1", {"a": 1}, signal, True)]


@pytest.mark.spec("8.2")
def test_execute_that_raises_becomes_an_error_outcome():
    """An exception in execute is caught and described as an error result."""

    def execute(*a):
        raise RuntimeError("disk on fire")

    outcome = execute_prepared_tool_call(prepared(make_tool("t", execute)), None, None)
    assert error_text(outcome) == "Tool 't' failed: RuntimeError: disk on fire"


@pytest.mark.spec("8.2")
def test_execute_that_raises_is_logged_at_debug_with_its_exception(caplog):
    """The DEBUG log names the tool and carries the exception, so its traceback can be seen."""
    error = RuntimeError("disk on fire")

    def execute(*a):
        raise error

    with caplog.at_level(logging.DEBUG, logger="yiemagent.pipeline"):
        execute_prepared_tool_call(prepared(make_tool("t", execute)), None, None)
    assert pipeline_log(caplog) == [("DEBUG", "tool 't' raised", error)]


@pytest.mark.spec("8.2")
@pytest.mark.parametrize(
    "value, fragment",
    [
        ("a string", "returned str; expected AgentToolResult"),
        (None, "returned NoneType"),
        (AgentToolResult("text"), "content of type str"),
        (AgentToolResult([42]), "content block of type int"),
    ],
)
def test_execute_returning_the_wrong_type_becomes_an_error_outcome(value, fragment):
    """A result that is not an AgentToolResult with a list of content blocks is an error naming the type."""
    outcome = execute_prepared_tool_call(prepared(make_tool("t", lambda *a: value)), None, None)
    assert fragment in error_text(outcome)


# --- §8.3 FINALIZE ----------------------------------------------------------------


def finalize(after, executed=None, signal=None):
    tool = make_tool("t")
    prep = prepared(tool)
    executed = executed or ExecutedOutcome(text_result("secret=42"), False)
    return finalize_executed_tool_call(context_with(tool), ASSISTANT, prep, executed, AgentLoopConfig(after_tool_call=after), signal)


@pytest.mark.spec("8.3")
def test_finalize_without_hook_keeps_result():
    """With no after hook the executed result is final, with the original call."""
    tool = make_tool("t")
    executed = ExecutedOutcome(text_result("x"), False)
    out = finalize_executed_tool_call(context_with(tool), ASSISTANT, prepared(tool), executed, SEQUENTIAL, None)
    assert out == FinalizedOutcome(call("t", {}), text_result("x"), False)


@pytest.mark.spec("14")
def test_after_hook_sees_result_and_replaces_parts():
    """after_tool_call sees the result and may replace content, details, usage, terminate and is_error."""
    seen = []
    usage = LLMUsage(1, 2, 0, 0, 3)

    def after(ctx, signal):
        seen.append((ctx.result.content[0].text, ctx.is_error, ctx.args, ctx.tool_call.id))
        return {"content": [TextContent("secret=***")], "details": {"masked": True}, "usage": usage, "terminate": True, "is_error": True}

    out = finalize(after)
    assert seen == [("secret=42", False, {}, "call_1")]
    assert out.result == AgentToolResult([TextContent("secret=***")], {"masked": True}, usage, True)
    assert out.is_error is True


@pytest.mark.spec("14")
def test_after_hook_returning_none_keeps_the_result():
    """None from after_tool_call keeps the result unchanged."""
    assert finalize(lambda ctx, s: None).result.content[0].text == "secret=42"


@pytest.mark.spec("8.3")
@pytest.mark.parametrize(
    "after, fragment",
    [
        (lambda ctx, s: 1 / 0, "after_tool_call hook raised ZeroDivisionError: division by zero on tool 't'"),
        (lambda ctx, s: "garbage", "it returned str; expected None or a dict"),
        (
            lambda ctx, s: {"terminat": True},
            "unknown keys ['terminat']; expected any of ['content', 'details', 'usage', 'terminate', 'is_error']",
        ),
        (lambda ctx, s: {"content": "plain"}, "'content' must be a list of content blocks, got 'plain'"),
        (
            lambda ctx, s: {"content": [TextContent("ok"), 42]},
            "'content' must be a list of content blocks, got [TextContent(text='ok', type='text'), 42]",
        ),
        (lambda ctx, s: {"terminate": "yes"}, "'terminate' must be a bool, got 'yes'"),
        (lambda ctx, s: {"is_error": "yes"}, "'is_error' must be a bool, got 'yes'"),
        (lambda ctx, s: {"usage": {"tokens": 1}}, "'usage' must be an LLMUsage or None, got dict"),
    ],
)
def test_broken_after_hook_becomes_an_error_result_without_leaking_output(after, fragment):
    """A raising or garbage-returning after hook gives an error result saying why, for the original call,
    never the unmasked output."""
    out = finalize(after)
    invalid = "after_tool_call hook returned an invalid value for tool 't': "
    assert error_text(out) == (fragment if fragment.startswith("after_tool_call") else invalid + fragment)
    assert out.tool_call == call("t", {})
    assert "secret=42" not in error_text(out)


@pytest.mark.spec("14")
@pytest.mark.parametrize("answer", [{}, {"is_error": True}])
def test_after_hook_that_changes_no_part_of_the_result_keeps_the_result_itself(answer):
    """A hook answer naming no part of the result (only the error flag, or nothing) passes the tool's own result object on."""
    executed = ExecutedOutcome(text_result("x"), False)
    out = finalize(lambda ctx, s: answer, executed)
    assert out.result is executed.result and out.is_error is answer.get("is_error", False)


# --- §11, §12 ---------------------------------------------------------------------


@pytest.mark.spec("12")
def test_create_error_tool_result_is_one_text_block():
    """createErrorToolResult: one text block, empty details, no terminate."""
    result = create_error_tool_result("boom")
    assert result == AgentToolResult([TextContent("boom")], {}, None, False)


@pytest.mark.spec("11")
def test_create_tool_result_message_copies_the_finalized_outcome():
    """The tool-result message carries id, name, content, details, usage and error flag, role "tool"."""
    usage = LLMUsage(1, 1, 0, 0, 2)
    result = AgentToolResult([TextContent("Weather in Tokyo: Sunny, 22°C")], {"temp": 22}, usage, False)
    msg = create_tool_result_message(FinalizedOutcome(call(), result, False))
    assert isinstance(msg, ToolResultMessage)
    assert (msg.role, msg.tool_call_id, msg.tool_name, msg.content, msg.details, msg.usage, msg.added_tool_names, msg.is_error) == (
        "tool",
        "call_1",
        "getWeather",
        [TextContent("Weather in Tokyo: Sunny, 22°C")],
        {"temp": 22},
        usage,
        None,
        False,
    )
    assert msg.timestamp.tzinfo is not None


@pytest.mark.spec("8.2")
def test_tool_error_is_reported_in_its_own_words():
    """A ToolError raised by execute becomes an error result with its message alone (beyond the spec)."""
    from yiemagent import ToolError

    def execute(*a):
        raise ToolError("City 'Atlantis' was not found")

    outcome = execute_prepared_tool_call(prepared(make_tool("t", execute)), None, None)
    assert error_text(outcome) == "Tool 't' failed: City 'Atlantis' was not found"
