"""Tool-call extraction from an LLM response (spec §7, decision 2)."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import check_wire, context_with, make_tool
from strategies import argument_texts, json_values
from yiemagent import (
    AgentContext,
    AgentLoopConfig,
    AssistantMessage,
    TextContent,
    UserMessage,
    execute_tool_calls,
    extract_tool_calls,
    format_msg_for_llm,
)
from yiemagent.extraction import arguments_json, json_text, parse_tool_arguments
from yiemagent.normalize import normalize_reply


def one_call(**call):
    return AssistantMessage([{"type": "tool_call", **call}])


@pytest.mark.spec("7")
def test_openai_tool_calls_array_with_function_object():
    """Format 1: a tool_calls block whose entries carry name/arguments under "function"."""
    msg = AssistantMessage(
        [
            {
                "type": "tool_calls",
                "tool_calls": [
                    {"id": "call_1", "function": {"name": "getWeather", "arguments": {"city": "Tokyo"}}},
                    {"id": "call_2", "function": {"name": "getTime", "arguments": '{"timezone": "Asia/Tokyo"}'}},
                ],
            }
        ]
    )
    has, calls, returned = extract_tool_calls(msg)
    assert has and returned is msg
    assert [(c.id, c.name, c.arguments, c.type) for c in calls] == [
        ("call_1", "getWeather", {"city": "Tokyo"}, "function"),
        ("call_2", "getTime", {"timezone": "Asia/Tokyo"}, "function"),
    ]


@pytest.mark.spec("7")
def test_spec_example_format_1_with_flat_name_and_arguments():
    """Format 1 exactly as the spec prints it: name and arguments at the top of each entry."""
    msg = AssistantMessage([{"type": "tool_calls", "tool_calls": [{"id": "call_1", "name": "getWeather", "arguments": {"city": "Tokyo"}}]}])
    _, calls, _ = extract_tool_calls(msg)
    assert (calls[0].name, calls[0].arguments) == ("getWeather", {"city": "Tokyo"})


@pytest.mark.spec("7")
def test_single_tool_call_block_flat_or_under_function():
    """Format 2: a single tool_call block, with name/arguments flat or under "function"."""
    msg = AssistantMessage(
        [
            TextContent("thinking aloud"),
            {"type": "tool_call", "id": "a", "name": "getWeather", "arguments": {"city": "Paris"}},
            {"type": "tool_call", "id": "b", "function": {"name": "getTime", "arguments": "{}"}},
        ]
    )
    has, calls, _ = extract_tool_calls(msg)
    assert [(c.id, c.name, c.arguments) for c in calls] == [("a", "getWeather", {"city": "Paris"}), ("b", "getTime", {})]


@pytest.mark.spec("7")
def test_no_tool_calls_in_a_text_reply():
    """A reply with only text has no tool calls."""
    assert extract_tool_calls(AssistantMessage([TextContent("hello")]))[:2] == (False, [])


@pytest.mark.spec("7")
@pytest.mark.parametrize("raw", ["", "   ", None, "null", '""'])
def test_empty_arguments_mean_an_empty_object(raw):
    """Empty string, null, JSON null and an empty JSON string all mean {}."""
    _, calls, _ = extract_tool_calls(one_call(id="x", name="t", arguments=raw))
    assert calls[0].arguments == {} and calls[0].arguments_error is None


@pytest.mark.spec("7")
def test_missing_arguments_mean_an_empty_object():
    """A call without an arguments key has arguments {}."""
    _, calls, _ = extract_tool_calls(one_call(id="x", name="t"))
    assert calls[0].arguments == {} and calls[0].arguments_error is None


@pytest.mark.spec("7")
def test_double_encoded_arguments_are_decoded():
    """A JSON string holding a JSON string of an object decodes to the object."""
    raw = json.dumps(json.dumps({"city": "Tokyo"}))
    _, calls, _ = extract_tool_calls(one_call(id="x", name="t", arguments=raw))
    assert calls[0].arguments == {"city": "Tokyo"}


@pytest.mark.spec("7")
@pytest.mark.parametrize(
    "raw, fragment",
    [
        ('{"city": "Tok', "not valid JSON"),
        ("[1, 2]", "must be a JSON object, got an array"),
        ("42", "got a number"),
        (["a"], "got an array"),
    ],
)
def test_unparseable_arguments_become_an_error_not_a_crash(raw, fragment):
    """Arguments that are not a JSON object mark the call with a message about the JSON."""
    _, calls, _ = extract_tool_calls(one_call(id="x", name="t", arguments=raw))
    assert calls[0].arguments == {}
    assert fragment in calls[0].arguments_error


@pytest.mark.spec("7")
@pytest.mark.parametrize("bad_id", [None, ""])
def test_missing_or_empty_ids_get_a_stable_unique_synthetic_id(bad_id):
    """A missing or empty id is replaced by one that is the same on every extraction and unique per call."""
    entry = {"function": {"name": "t", "arguments": "{}"}}
    if bad_id is not None:
        entry["id"] = bad_id
    msg = AssistantMessage([{"type": "tool_calls", "tool_calls": [dict(entry), dict(entry)]}])
    first = [c.id for c in extract_tool_calls(msg)[1]]
    second = [c.id for c in extract_tool_calls(msg)[1]]
    assert first == second
    assert len(set(first)) == 2
    assert all(len(i) == 9 and i.isalnum() for i in first)


@pytest.mark.spec("7")
def test_synthetic_ids_of_two_replies_made_at_the_same_instant_differ_by_their_calls():
    """Two replies with one id-less call each and the same timestamp (a fast server, a clock's resolution)
    still get two ids: otherwise the second call's result would answer the first call too."""
    from datetime import datetime, timezone

    at = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
    first = AssistantMessage([{"type": "tool_call", "name": "getTime", "arguments": {"timezone": "UTC"}}], timestamp=at)
    second = AssistantMessage([{"type": "tool_call", "name": "getWeather", "arguments": {"city": "Oslo"}}], timestamp=at)
    assert extract_tool_calls(first)[1][0].id != extract_tool_calls(second)[1][0].id


@pytest.mark.spec("7")
def test_a_call_whose_keys_cannot_be_sorted_still_gets_a_synthetic_id():
    """Arguments with keys of mixed types (a custom llm_call's dict) cannot be hashed as sorted JSON; the id comes from the rest."""
    msg = AssistantMessage([{"type": "tool_call", "name": "t", "arguments": {1: "one", "two": 2}}])
    [call] = extract_tool_calls(msg)[1]
    assert len(call.id) == 9 and call.id.isalnum()
    assert extract_tool_calls(msg)[1][0].id == call.id


@pytest.mark.spec("7")
def test_non_object_entries_are_skipped():
    """An entry of a tool_calls list that is not an object cannot be answered and is skipped."""
    msg = AssistantMessage([{"type": "tool_calls", "tool_calls": ["junk", {"id": "a", "name": "t"}]}])
    assert [c.id for c in extract_tool_calls(msg)[1]] == ["a"]


@pytest.mark.spec("7")
@given(json_values | st.text())
def test_arbitrary_arguments_never_raise(raw):
    """Property: whatever the arguments are, extraction yields a dict and never raises."""
    _, calls, _ = extract_tool_calls(one_call(id="x", name="t", arguments=raw))
    assert isinstance(calls[0].arguments, dict)
    assert (calls[0].arguments_error is None) or calls[0].arguments == {}


@pytest.mark.spec("7")
def test_invalid_json_error_names_the_fault_and_echoes_the_arguments_cut_at_300_characters():
    """Decision 2: the exact text the model reads for arguments that are not JSON; the echo is cut at 300 characters."""
    raw = '{"city": "' + "T" * 291  # 301 characters
    _, calls, _ = extract_tool_calls(one_call(id="x", name="t", arguments=raw))
    assert calls[0].arguments == {}
    assert calls[0].arguments_error == (
        "the arguments are not valid JSON (Unterminated string starting at line 1 column 10); "
        f"received {raw[:300]!r}... [1 more characters cut]. Send the arguments as one JSON object"
    )
    fits = raw[:298]  # its repr is 300 characters: not cut
    _, calls, _ = extract_tool_calls(one_call(id="x", name="t", arguments=fits))
    assert calls[0].arguments_error.endswith(f"received {fits!r}. Send the arguments as one JSON object")
    _, calls, _ = extract_tool_calls(one_call(id="x", name="t", arguments='{"a": }'))
    assert calls[0].arguments_error == (
        "the arguments are not valid JSON (Expecting value at line 1 column 7); "
        "received '{\"a\": }'. Send the arguments as one JSON object"
    )


@pytest.mark.spec("7")
def test_arguments_that_are_not_an_object_are_named_and_echoed_cut_at_300_characters():
    """Decision 2: the exact text for JSON that is not an object, for a value of another Python type, and the 300-character cap."""
    raw = '["' + "x" * 297 + '"]'  # 301 characters
    _, calls, _ = extract_tool_calls(one_call(id="x", name="t", arguments=raw))
    assert calls[0].arguments_error == f"the arguments must be a JSON object, got an array: {raw[:300]!r}... [1 more characters cut]"
    fits = raw[:296] + "\"]"  # its repr is 300 characters: not cut
    _, calls, _ = extract_tool_calls(one_call(id="x", name="t", arguments=fits))
    assert calls[0].arguments_error == f"the arguments must be a JSON object, got an array: {fits!r}"
    _, calls, _ = extract_tool_calls(one_call(id="x", name="t", arguments=("a",)))
    assert calls[0].arguments_error == "the arguments must be a JSON object, got a tuple: ('a',)"


@pytest.mark.spec("7")
def test_arguments_nested_too_deeply_for_the_parser_get_an_exact_error():
    """JSON nested deeper than the parser can go is an error result, with the exact text the model reads."""
    _, calls, _ = extract_tool_calls(one_call(id="x", name="t", arguments="[" * 100_000))
    assert calls[0].arguments == {}
    assert calls[0].arguments_error == "the arguments are nested too deeply to be read. Send the arguments as one flatter JSON object"


@pytest.mark.spec("7")
def test_arguments_that_are_not_strict_json_name_the_place_under_arguments():
    """Decision 15: a NaN inside the arguments is an error naming its place from "arguments"."""
    _, calls, _ = extract_tool_calls(one_call(id="x", name="t", arguments={"a": [1, float("nan")]}))
    assert calls[0].arguments == {}
    assert calls[0].arguments_error == (
        "arguments/a/1 is nan, which JSON cannot carry. Send the arguments as one JSON object of plain JSON values"
    )


@pytest.mark.spec("7")
def test_name_and_arguments_missing_under_function_are_taken_from_the_top_of_the_call():
    """Decision 2: a "function" object without a name or arguments falls back to the call's own keys."""
    msg = AssistantMessage(
        [
            {
                "type": "tool_calls",
                "tool_calls": [
                    {"id": "a", "name": "getWeather", "function": {"arguments": {"city": "Oslo"}}},
                    {"id": "b", "arguments": {"tz": "UTC"}, "function": {"name": "getTime"}},
                ],
            }
        ]
    )
    _, calls, _ = extract_tool_calls(msg)
    assert [(c.name, c.arguments) for c in calls] == [("getWeather", {"city": "Oslo"}), ("getTime", {"tz": "UTC"})]


@pytest.mark.spec("7")
def test_an_id_of_exactly_128_characters_is_kept_and_one_longer_is_replaced():
    """Decision 15: MAX_ID_CHARS is the longest id kept."""
    _, calls, _ = extract_tool_calls(AssistantMessage([{"type": "tool_call", "id": "i" * 128, "name": "t"}, {"type": "tool_call", "id": "i" * 129, "name": "t"}]))
    assert calls[0].id == "i" * 128
    assert len(calls[1].id) == 9 and calls[1].id.isalnum()


@pytest.mark.spec("7")
def test_repeated_ids_are_renamed_in_order_keeping_every_other_field(caplog):
    """Decision 15: later repeats of an id become <id>_2, <id>_3 (skipping an id in use); a renamed call keeps its
    name, arguments, type and arguments error, and each renaming is logged at debug level."""
    import logging

    caplog.set_level(logging.DEBUG, logger="yiemagent.extraction")
    msg = AssistantMessage(
        [
            {"type": "tool_call", "id": "a", "name": "t", "arguments": {"n": 1}},
            {"type": "tool_call", "id": "a", "name": "u", "arguments": "[1]"},
            {"type": "tool_call", "id": "a", "name": "v", "arguments": {"n": 3}},
            {"type": "tool_call", "id": "b", "name": "w"},
            {"type": "tool_call", "id": "b", "name": "w"},
            {"type": "tool_call", "id": "b_2", "name": "w"},
        ]
    )
    _, calls, _ = extract_tool_calls(msg)
    assert [(c.id, c.name, c.arguments, c.type, c.arguments_error) for c in calls] == [
        ("a", "t", {"n": 1}, "function", None),
        ("a_2", "u", {}, "function", "the arguments must be a JSON object, got an array: '[1]'"),
        ("a_3", "v", {"n": 3}, "function", None),
        ("b", "w", {}, "function", None),
        ("b_3", "w", {}, "function", None),
        ("b_2", "w", {}, "function", None),
    ]
    assert [r.getMessage() for r in caplog.records if r.name == "yiemagent.extraction"] == [
        "tool call id 'a' repeated in one reply; the later call is renamed 'a_2'",
        "tool call id 'a' repeated in one reply; the later call is renamed 'a_3'",
        "tool call id 'b' repeated in one reply; the later call is renamed 'b_3'",
    ]


@pytest.mark.spec("7")
def test_malformed_tool_calls_blocks_are_skipped_with_a_warning_naming_them(caplog):
    """A tool_calls value that is not a list, or an entry that is not an object, is skipped with a warning that says
    what it was; the blocks after it are still read."""
    import logging

    caplog.set_level(logging.WARNING, logger="yiemagent.extraction")
    msg = AssistantMessage(
        [
            {"type": "tool_calls", "tool_calls": "junk"},
            {"type": "tool_calls", "tool_calls": [42, {"id": "a", "name": "t"}]},
            {"type": "tool_call", "id": "b", "name": "u"},
        ]
    )
    _, calls, _ = extract_tool_calls(msg)
    assert [c.id for c in calls] == ["a", "b"]
    assert [r.getMessage() for r in caplog.records if r.name == "yiemagent.extraction"] == [
        "ignored a tool_calls block whose tool_calls is str, not a list",
        "ignored a tool call that is int, not an object: 42",
    ]


@pytest.mark.spec("7")
def test_identical_id_less_calls_in_both_formats_get_distinct_synthetic_ids():
    """Each call of a reply has its own position, counted across both formats, so identical id-less calls
    (in a tool_calls list and as tool_call blocks) still get distinct 9-character ids, none renamed."""
    call = {"type": "tool_call", "name": "t", "arguments": {}}
    msg = AssistantMessage([{"type": "tool_calls", "tool_calls": [dict(call), dict(call), dict(call)]}, dict(call), dict(call), dict(call)])
    ids = [c.id for c in extract_tool_calls(msg)[1]]
    assert len(set(ids)) == 6
    assert all(len(i) == 9 and i.isalnum() for i in ids)


# --- Arguments Python's json mishandles (docs/failures.md "Arguments a model sends") ---

HUGE = "1" * 5000  # past Python's 4,300-digit limit for int(str)


@pytest.mark.spec("7")
@pytest.mark.parametrize(
    "raw, problem",
    [
        ('{"city": %s}' % HUGE, "arguments/city is an integer of 5000 digits, more than the 4300 digits Python reads"),
        ('{"a": [1, -%s]}' % HUGE, "arguments/a/1 is an integer of 5000 digits, more than the 4300 digits Python reads"),
        ('{"x": 1e400}', "arguments/x is the number 1e400, which does not fit a float"),
        ('{"x": NaN}', "arguments/x is NaN, which JSON cannot carry"),
        ('{"x": [-Infinity]}', "arguments/x/0 is -Infinity, which JSON cannot carry"),
        ('{"s": "ok \\ud800"}', "arguments/s holds a lone surrogate (U+D800) at position 3, which UTF-8 cannot encode"),
        ('{"k\\udfff": 1}', "arguments holds a key 'k\ufffd' with a lone surrogate (U+DFFF) at position 1, which UTF-8 cannot encode"),
        ({"n": 10**5000}, "arguments/n is an integer of about 5001 digits, more than the 4300 digits Python writes"),
    ],
    ids=["5000-digit int", "negative in a list", "1e400", "NaN", "-Infinity", "lone surrogate", "surrogate key", "python int"],
)
def test_arguments_python_cannot_hold_are_an_error_naming_the_place(raw, problem):
    """A number or text Python's json cannot read or write back is an arguments_error naming its place, never an exception."""
    _, calls, _ = extract_tool_calls(one_call(id="x", name="t", arguments=raw))
    assert calls[0].arguments == {}
    assert calls[0].arguments_error == f"{problem}. Send the arguments as one JSON object of plain JSON values"


@pytest.mark.spec("7")
def test_a_4300_digit_integer_and_a_surrogate_pair_are_read_as_sent():
    """The limits are Python's, not stricter: 4,300 digits is read, an escaped surrogate pair is one character."""
    _, calls, _ = extract_tool_calls(one_call(id="x", name="t", arguments='{"n": %s, "e": "\\ud83d\\ude00"}' % ("7" * 4300)))
    assert calls[0].arguments_error is None
    assert calls[0].arguments == {"n": int("7" * 4300), "e": "\U0001F600"}


def test_a_mapping_that_raises_when_read_is_an_error_result_not_a_crash():
    """Whatever reading the arguments raises becomes a problem for that call, naming the exception."""

    class Hostile(dict):
        def items(self):
            raise RuntimeError("boom")

    arguments, problem = parse_tool_arguments(Hostile(a=1))
    assert arguments == {}
    assert problem == "the arguments could not be read (RuntimeError: boom). Send the arguments as one JSON object"


def test_the_exception_text_of_arguments_that_could_not_be_read_is_cut_at_200_characters():
    """The exception's own text may be anything (a hostile mapping's): the model reads at most 200 characters of it."""

    class Hostile(dict):
        def items(self):
            raise RuntimeError("b" + "o" * 499)

    _, problem = parse_tool_arguments(Hostile(a=1))
    assert problem == (
        f"the arguments could not be read (RuntimeError: b{'o' * 199}... [300 more characters cut]). Send the arguments as one JSON object"
    )


def test_arguments_json_writes_strict_json_and_never_raises():
    """The one re-serialisation: non-ASCII kept, and a value JSON cannot carry becomes "{}" instead of raising."""
    assert arguments_json({"city": "Zürich"}) == '{"city": "Zürich"}'
    assert arguments_json({"x": float("nan")}) == "{}"
    assert arguments_json({"n": 10**5000}) == "{}"


def test_arguments_sent_back_as_an_empty_object_are_logged_with_their_value(caplog):
    """What was dropped is not silent: a warning says the arguments went back as {} and shows them."""
    caplog.set_level(logging.WARNING, logger="yiemagent.extraction")
    assert arguments_json({"x": float("nan"), "city": "Zürich"}) == "{}"
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "yiemagent.extraction"] == [
        ("WARNING", "tool-call arguments that are not strict JSON were sent back as {}: {'x': nan, 'city': 'Zürich'}")
    ]


# --- OpenAI custom tool calls (docs/failures.md "OpenAI custom and legacy calls") ---


def custom_call(**custom):
    return AssistantMessage([{"type": "tool_calls", "tool_calls": [{"id": "c1", "type": "custom", "custom": {"name": "code_exec", **custom}}]}])


@pytest.mark.spec("7")
@pytest.mark.parametrize("custom", [{"input": "ls -l"}, {}, {"input": None}], ids=["text", "missing", "null"])
def test_a_custom_calls_free_text_is_its_tools_input_and_a_missing_or_null_input_is_empty(custom):
    """The tool gets {"input": text}; a custom call without input, or with a null one, gets the empty text (as missing arguments are {})."""
    [call] = extract_tool_calls(custom_call(**custom))[1]
    assert (call.type, call.name, call.arguments, call.arguments_error) == ("custom", "code_exec", {"input": custom.get("input") or ""}, None)


@pytest.mark.spec("7")
@pytest.mark.parametrize(
    "value, got",
    [(42, "a number: 42"), (False, "a boolean: False"), (["ls"], "an array: ['ls']"), ({"cmd": "ls"}, "an object: {'cmd': 'ls'}"), (b"ls", "a bytes: b'ls'")],
    ids=["number", "boolean", "array", "object", "not JSON (an llm_call's own object)"],
)
def test_a_custom_call_whose_input_is_not_text_is_an_error_naming_what_it_got(value, got):
    """A custom call's input must be text: anything else is an arguments error with its kind and value, and the tool is not given it."""
    [call] = extract_tool_calls(custom_call(input=value))[1]
    assert (call.type, call.arguments) == ("custom", {})
    assert call.arguments_error == f"the input of a custom tool call must be text, got {got}"


@pytest.mark.spec("7")
def test_a_function_call_carrying_a_stray_custom_object_is_read_from_its_function():
    """The call's type decides where its name and arguments are: a "function" call is read from "function", whatever else it carries."""
    stray = {"id": "c1", "type": "function", "function": {"name": "getWeather", "arguments": '{"city": "Paris"}'}, "custom": {"name": "code_exec", "input": "ls"}}
    [call] = extract_tool_calls(AssistantMessage([{"type": "tool_calls", "tool_calls": [stray]}]))[1]
    assert (call.type, call.name, call.arguments, call.arguments_error) == ("function", "getWeather", {"city": "Paris"}, None)


@pytest.mark.spec("7")
def test_the_echo_of_a_custom_calls_input_that_is_not_text_is_cut_at_300_characters():
    """As for other arguments, the model reads at most 300 characters of what it sent."""
    value = list(range(200))
    shown = repr(value)  # 890 characters
    [call] = extract_tool_calls(custom_call(input=value))[1]
    assert call.arguments_error == (
        f"the input of a custom tool call must be text, got an array: {shown[:300]}... [{len(shown) - 300} more characters cut]"
    )


@settings(max_examples=150)
@given(texts=st.lists(argument_texts, min_size=1, max_size=4), mode=st.sampled_from(["sequential", "parallel"]))
def test_any_argument_text_gives_every_call_exactly_one_result(texts, mode):
    """Property: for any argument text, extraction and the pipeline never raise, each call gets one result, and the history is sendable."""
    reply = AssistantMessage(
        [{"type": "tool_calls", "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "t", "arguments": a}} for i, a in enumerate(texts)]}],
        stop_reason="tool_use",
    )
    checked = normalize_reply(reply)
    assert checked.error is None and [c.id for c in checked.calls] == [f"c{i}" for i in range(len(texts))]
    ctx = context_with(make_tool("t"))
    batch = execute_tool_calls(ctx, checked.message, checked.calls, AgentLoopConfig(tool_execution=mode), None, None)
    assert [m.tool_call_id for m in batch.messages] == [c.id for c in checked.calls]
    for call, result in zip(checked.calls, batch.messages):
        assert result.is_error == (call.arguments_error is not None)
    history = [UserMessage([TextContent("go")]), checked.message, *batch.messages]
    check_wire(format_msg_for_llm(AgentContext("", history, ctx.tools)))


@pytest.mark.spec("7")
def test_arguments_given_as_a_dict_are_held_to_the_same_depth_as_arguments_given_as_text():
    """A dict of arguments nested one level past MAX_ARGUMENTS_DEPTH is refused naming the depth, as its JSON text is; one level less is taken (docs/failures.md "Arguments a model sends")."""
    from yiemagent.extraction import MAX_ARGUMENTS_DEPTH

    def nested(levels: int) -> dict:
        value: dict = {}
        for _ in range(levels - 1):
            value = {"a": value}
        return value

    assert parse_tool_arguments(nested(MAX_ARGUMENTS_DEPTH)) == (nested(MAX_ARGUMENTS_DEPTH), None)
    for sent in (nested(MAX_ARGUMENTS_DEPTH + 1), json.dumps(nested(MAX_ARGUMENTS_DEPTH + 1))):
        arguments, problem = parse_tool_arguments(sent)
        assert arguments == {} and problem is not None and "nested" in problem


@pytest.mark.spec("7")
def test_a_call_whose_name_is_not_text_anywhere_gets_an_empty_name():
    """A call whose name is neither a string under function nor beside it is read with the name "" (the unknown tool's error then names it as empty)."""
    reply = AssistantMessage([{"type": "tool_calls", "tool_calls": [{"id": "c1", "name": 5, "function": {"name": ["t"], "arguments": "{}"}}]}])
    _, calls, _ = extract_tool_calls(reply)
    assert [call.name for call in calls] == [""]


@pytest.mark.spec("7")
def test_a_reply_read_again_from_its_cache_still_says_it_has_tool_calls():
    """extract_tool_calls on a reply already read answers from the message's cache with the same flag and calls, in a list of the caller's own."""
    reply = AssistantMessage([{"type": "tool_call", "id": "c1", "name": "t", "arguments": {"x": 1}}])
    first = extract_tool_calls(reply)
    again = extract_tool_calls(reply)
    assert again[0] is True and first[0] is True
    assert again[1] == first[1] and again[1] is not first[1]


@pytest.mark.parametrize("value", [{"a": object()}, {(1, 2): 1}, [{1j: "x"}]], ids=["value", "tuple-key", "complex-key"])
def test_json_text_refuses_what_json_dumps_refuses_with_its_own_error_and_drops_no_key(value):
    """json_text, the one-shot C encoder, raises json.dumps's own TypeError for a value or a key JSON cannot write, dropping nothing."""
    with pytest.raises(TypeError) as expected:
        json.dumps(value, ensure_ascii=False, allow_nan=False)
    with pytest.raises(TypeError) as got:
        json_text(value)
    assert str(got.value) == str(expected.value)
