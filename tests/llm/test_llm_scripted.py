"""``ScriptedLLM`` and ``tool_call_reply``: the model users write examples and tests with (docs/api.md)."""

from __future__ import annotations

import pytest

from yiemagent import AssistantMessage, LLMError, TextContent
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply


def test_a_text_entry_is_a_stop_reply_from_the_scripted_model():
    """A str in the script answers as one text block, stop_reason "stop", model "scripted"."""
    reply = ScriptedLLM(["hi"])({"messages": []})
    assert (reply.content, reply.stop_reason, reply.model) == ([TextContent("hi")], "stop", "scripted")


def test_entries_answer_in_order_a_callable_sees_the_request_and_an_exception_is_raised():
    """Messages as they are, a callable called with the formatted request, an exception raised; add() appends."""
    given = AssistantMessage([TextContent("as given")])
    seen = []
    llm = ScriptedLLM([given, lambda formatted: seen.append(formatted) or AssistantMessage([TextContent("called")])])
    llm.add(ValueError("boom"), "last")
    first, second = {"n": 1}, {"n": 2}
    assert llm(first) is given
    assert llm(second).content == [TextContent("called")] and seen == [second]
    with pytest.raises(ValueError, match="boom"):
        llm({"n": 3})
    assert llm({"n": 4}).content == [TextContent("last")]
    assert llm.requests == [first, second, {"n": 3}, {"n": 4}]


def test_a_script_that_runs_out_says_at_which_request():
    """A test expecting fewer rounds fails loudly: LLMError naming the request that found the script empty."""
    llm = ScriptedLLM(["one"])
    llm({})
    with pytest.raises(LLMError, match=r"^ScriptedLLM: the script ran out at request 2$"):
        llm({})


def test_tool_call_reply_holds_the_calls_in_spec_format_1_after_its_text():
    """spec §7 format 1: one tool_calls block of {"id", "type": "function", "function": {name, arguments}}, after the
    text when there is one; stop_reason "tool_use", model "scripted"."""
    reply = tool_call_reply(("c1", "get_weather", {"city": "Tokyo"}), ("c2", "get_time", {}), text="Looking.")
    assert (reply.stop_reason, reply.model) == ("tool_use", "scripted")
    assert reply.content == [
        TextContent("Looking."),
        {
            "type": "tool_calls",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Tokyo"}}},
                {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": {}}},
            ],
        },
    ]
    assert tool_call_reply(("c1", "t", {})).content[0]["type"] == "tool_calls"  # no text: no text block
    assert len(tool_call_reply(("c1", "t", {})).content) == 1
