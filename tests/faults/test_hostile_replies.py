"""Decision 15 as a property: whatever an LLM replies, the next run succeeds (issue 9)."""

from __future__ import annotations

import pytest
from hypothesis import given

from helpers import WAIT, StrictLLM, check_wire, make_tool
from strategies import hostile_replies
from yiemagent import AssistantMessage, ToolResultMessage, ToolStore, YiemAgent, extract_tool_calls, register_tool, run_agent, shutdown, take_response
from yiemagent.normalize import normalize_reply



@given(reply=hostile_replies)
def test_normalised_reply_can_be_sent_again(reply):
    """normalize_reply never raises, and what it keeps serialises as strict JSON with its calls extracted the same way."""
    checked = normalize_reply(reply)
    if checked.message is None:
        assert checked.error
        return
    checked.message.to_json()
    again = extract_tool_calls(checked.message)[1]
    assert [(c.id, c.name, c.arguments) for c in again] == [(c.id, c.name, c.arguments) for c in checked.calls]
    assert len({c.id for c in again}) == len(again)


@pytest.mark.spec("6")
@given(reply=hostile_replies)
def test_the_run_after_any_reply_succeeds(reply):
    """For any reply an LLM could produce, every request stays acceptable to a strict server and the next run works."""
    store = ToolStore("hostile")
    register_tool(store, make_tool("getWeather"))
    llm = StrictLLM(reply)
    agent = YiemAgent(llm_call=llm, agent_event_sink=None, tool_store=store)
    try:
        run_agent(agent, "go")
        assert isinstance(take_response(agent, timeout=WAIT), AssistantMessage)
        run_agent(agent, "next")
        response = take_response(agent, timeout=WAIT)
        assert response.stop_reason != "error", response.error_message
        assert response.content[0].text == "done"
        for request in llm.requests:
            check_wire(request)
        results = [m.tool_call_id for m in agent.history() if isinstance(m, ToolResultMessage)]
        assert len(results) == len(set(results))
    finally:
        shutdown(agent, timeout=WAIT)


@given(reply=hostile_replies)
def test_what_a_reply_keeps_is_plain_json(reply):
    """Every block a normalised reply keeps is a content object or strict JSON (no NaN, no set, nothing deeper than 64)."""
    from yiemagent import ImageContent, TextContent
    from yiemagent._bounds import json_safe

    message = normalize_reply(reply).message
    if message is None:
        return
    for block in message.content:
        if isinstance(block, TextContent):
            assert isinstance(block.text, str)
        elif isinstance(block, ImageContent):
            assert isinstance(block.data, str) and isinstance(block.mime_type, str)
        else:
            json_safe(block)
