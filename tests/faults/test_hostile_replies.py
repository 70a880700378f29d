"""Decision 15 as a property: whatever an LLM replies, the next run succeeds (docs/failures.md)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from helpers import WAIT, StrictLLM, check_wire, make_tool
from strategies import Nested, hostile_replies, wild_values
from yiemagent import AgentContext, AssistantMessage, ImageContent, TextContent, ToolResultMessage, ToolStore, UserMessage, YiemAgent
from yiemagent import extract_tool_calls, format_msg_for_llm, load_history, register_tool, run_agent, save_history, shutdown, take_response
from yiemagent._bounds import MAX_ARGUMENTS_DEPTH, MAX_DEPTH, NotJSONError, json_safe
from yiemagent.llm.anthropic import build_anthropic_request
from yiemagent.normalize import normalize_reply


def _call_block(arguments, nested):
    """A reply's block holding one call with ``arguments``: spec §7's ``tool_calls`` form (arguments four levels down) or ``tool_call`` (one)."""
    if nested:
        return {"type": "tool_calls", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "getWeather", "arguments": arguments}}]}
    return {"type": "tool_call", "id": "a", "name": "getWeather", "arguments": arguments}



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
@example(reply=AssistantMessage([_call_block(Nested(60), True)]))  # arguments of 61 levels, four levels down a block: 65
@example(reply=AssistantMessage([_call_block(Nested(61), True)]))
@example(reply=AssistantMessage([_call_block(Nested(62), True)]))
@example(reply=AssistantMessage([_call_block(Nested(63), True)]))
@example(reply=AssistantMessage([_call_block(Nested(63), False)]))
def test_what_a_reply_keeps_is_plain_json(reply):
    """Every block a normalised reply keeps is a content object (a text's citations a list of JSON objects) or strict JSON (no NaN, no set, nothing deeper than 64)."""
    message = normalize_reply(reply).message
    if message is None:
        return
    for block in message.content:
        if isinstance(block, TextContent):
            assert isinstance(block.text, str)
            assert block.citations is None or (type(block.citations) is list and all(type(c) is dict for c in block.citations))
            json_safe(block.to_dict())
        elif isinstance(block, ImageContent):
            assert isinstance(block.data, str) and isinstance(block.mime_type, str)
        else:
            json_safe(block)


def _levels(value):
    """How many containers deep ``value`` nests (0 for a leaf)."""
    if isinstance(value, dict):
        return 1 + max(map(_levels, value.values()), default=0)
    return 0


@given(depth=st.integers(MAX_ARGUMENTS_DEPTH - 8, MAX_DEPTH + 2), nested=st.booleans())
@example(depth=60, nested=True)  # Nested(n) is n + 1 levels: 61 to 64 levels of arguments, 65 to 68 in the block
@example(depth=61, nested=True)
@example(depth=62, nested=True)
@example(depth=63, nested=True)
@example(depth=63, nested=False)
@example(depth=MAX_ARGUMENTS_DEPTH - 1, nested=True)  # the deepest arguments kept: the block is exactly MAX_DEPTH deep
def test_arguments_are_kept_only_when_their_block_stays_within_the_bound(depth, nested):
    """docs/failures.md, "Arguments a model sends": arguments up to MAX_ARGUMENTS_DEPTH levels run in either form, deeper ones are an error naming the bound, and the kept block never passes MAX_DEPTH."""
    arguments = Nested(depth)
    checked = normalize_reply(AssistantMessage([_call_block(arguments, nested)]))
    (call,) = checked.calls
    (block,) = checked.message.content
    json_safe(block)  # raises NotJSONError past MAX_DEPTH
    if _levels(arguments) <= MAX_ARGUMENTS_DEPTH:
        assert call.arguments_error is None and call.arguments == arguments
    else:
        assert call.arguments == {}
        assert f"is nested deeper than {MAX_ARGUMENTS_DEPTH} levels" in call.arguments_error


_citation_lists = st.lists(st.dictionaries(st.sampled_from(["type", "$type", "items", "url", "cited_text"]), wild_values, max_size=3) | wild_values, max_size=3)


def _plain_or_none(citation):
    """The citation as strict JSON, or None when it is not a JSON object that can be sent."""
    try:
        return json_safe({"citations": [citation]})["citations"][0] if isinstance(citation, dict) else None  # within the bound in its block
    except NotJSONError:
        return None


@given(text=st.text(), citations=_citation_lists | wild_values)
@example(text="sunny", citations=[{"type": "web_search_result_location", "cited_text": float("nan")}, {"type": "char_location", "document_index": 0}])
@example(text="sunny", citations=[{"type": "x", "$type": "tuple", "items": 5}])  # the history's own tag key, in a provider's JSON
@example(text="sunny", citations=[Nested(61), Nested(62), {"type": "ok"}])  # 62 and 63 levels: the block's JSON form is 64 and 65 deep
def test_a_texts_citations_are_kept_as_plain_json_through_the_history_and_the_next_request(text, citations):
    """Decision 15 for TextContent's citations: what cannot be sent again is dropped, the rest is kept, survives save_history/load_history, and Anthropic's own (those with a cited_text) go back to Anthropic."""
    (block,) = normalize_reply(AssistantMessage([TextContent(text, citations)])).message.content
    assert block.text == text
    if not isinstance(citations, list):
        assert block.citations is None
    else:
        assert block.citations == [c for c in map(_plain_or_none, citations) if c is not None]
        assert all(type(c) is dict for c in block.citations)
    message = AssistantMessage([block])
    with tempfile.TemporaryDirectory() as folder:
        save_history([message], Path(folder) / "history.json")
        assert load_history(Path(folder) / "history.json")[0].content == [block]
    history = [UserMessage([TextContent("q")]), message, UserMessage([TextContent("more")])]
    turns = build_anthropic_request(format_msg_for_llm(AgentContext("", history, {}), None), "m", 100)["messages"]
    if text.strip():
        own = [c for c in block.citations or [] if isinstance(c.get("cited_text"), str)]  # another provider's are not sent (llm/anthropic.py _sent_citations)
        sent = {"type": "text", "text": text, **({"citations": own} if own else {})}
        assert turns[1] == {"role": "assistant", "content": [sent]}
