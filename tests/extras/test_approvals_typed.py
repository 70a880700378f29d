"""A typed answer waiting for approval (decision 18 with docs/api.md "Typed answers"): the deferred ``final_result``
is found as it resumes, and an approved answer ends the run with the typed ``.output``, once."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from helpers import WAIT, StrictLLM, call, calls_reply, make_agent, make_tool, text_result
from yiemagent import (
    AssistantMessage,
    SQLiteSession,
    TextContent,
    ToolArgumentsError,
    ToolResultMessage,
    UserMessage,
    approve,
    ask,
    continue_agent,
    pending_approvals,
    reject,
    run_agent,
    shutdown,
    take_response,
)


@dataclass(frozen=True)
class Answer:
    city: str


def final(city, call_id: str = "c1") -> dict:
    return call(call_id, "final_result", json.dumps({"city": city}))


def defer_all(ctx, signal):
    """A before_tool_call that sends every call to a person."""
    return {"defer": True, "reason": "a person decides"}


def defer_first(ctx, signal):
    """A before_tool_call that sends only the call "c1" to a person."""
    return {"defer": True, "reason": "a person decides"} if ctx.tool_call.id == "c1" else None


def finals(history) -> list[AssistantMessage]:
    return [m for m in history if isinstance(m, AssistantMessage) and m.output is not None]


def waiting_answer(llm: StrictLLM, hook=defer_all, **kwargs):
    """An agent typed ``Answer`` whose first run ends "awaiting_approval" on its final_result call "c1"."""
    agent = make_agent(llm, builtin_tools=False, output_type=Answer, before_tool_call=hook, **kwargs)
    assert ask(agent, "which city?", timeout=WAIT).stop_reason == "awaiting_approval"
    assert [(p.tool_call_id, p.tool_name) for p in pending_approvals(agent)] == [("c1", "final_result")]
    return agent


def test_an_approved_final_answer_ends_the_run_with_the_typed_output_delivered_once():
    """approve then continue_agent: the deferred final_result is found, the run ends "stop" with .output, without an LLM round."""
    llm = StrictLLM(calls_reply(final("Paris")), AssistantMessage([TextContent('{"city": "Rome"}')], stop_reason="stop"))
    agent = waiting_answer(llm)
    try:
        approve(agent, "c1")
        continue_agent(agent)
        response = take_response(agent, timeout=WAIT)
        assert (response.stop_reason, response.output) == ("stop", Answer("Paris")), response.error_message
        assert len(llm.requests) == 1
        history = agent.history()
        assert finals(history) == [response]
        assert [m.content[0].text for m in history if isinstance(m, ToolResultMessage)] == ["Final answer received."]
        assert pending_approvals(agent) == []
        assert ask(agent, "and then?", timeout=WAIT).output == Answer("Rome")  # the answer was the one response: none was left queued
        assert [m.output for m in finals(agent.history())] == [Answer("Paris"), Answer("Rome")]
    finally:
        shutdown(agent)


def test_approve_checks_new_arguments_of_a_final_answer_against_the_answers_schema():
    """approve(arguments=) of a final_result call is checked as the answer's schema will check it; the approved answer is the output."""
    agent = waiting_answer(StrictLLM(calls_reply(final("Paris"))))
    try:
        with pytest.raises(ToolArgumentsError, match="city"):
            approve(agent, "c1", arguments={"city": 3})
        approve(agent, "c1", arguments={"city": "Rome"})
        continue_agent(agent)
        assert take_response(agent, timeout=WAIT).output == Answer("Rome")
    finally:
        shutdown(agent)


def test_a_rejected_final_answer_goes_back_to_the_model_with_the_reason_and_its_next_answer_is_the_output():
    """reject(final_result) is an answer not accepted: its error result carries the reason to the model, whose next answer ends the run."""
    llm = StrictLLM(calls_reply(final("Paris")), calls_reply(final("Oslo", "c2")))
    agent = waiting_answer(llm, defer_first)
    try:
        reject(agent, "c1", "not that one")
        continue_agent(agent)
        response = take_response(agent, timeout=WAIT)
        assert (response.stop_reason, response.output) == ("stop", Answer("Oslo")), response.error_message
        assert llm.requests[1]["messages"][-1]["content"] == "not that one"
        assert finals(agent.history()) == [response]
    finally:
        shutdown(agent)


def test_a_rejected_final_answer_counts_against_output_retries():
    """With output_retries=0 a rejected answer ends the run "output_invalid" naming the reason, without an LLM round."""
    llm = StrictLLM(calls_reply(final("Paris")))
    agent = waiting_answer(llm, output_retries=0)
    try:
        reject(agent, "c1", "not that one")
        continue_agent(agent)
        response = take_response(agent, timeout=WAIT)
        assert response.stop_reason == "output_invalid"
        assert response.error_message == "the final answer is invalid after 0 retries: not that one"
        assert len(llm.requests) == 1 and finals(agent.history()) == []
    finally:
        shutdown(agent)


def test_an_answer_given_beside_a_deferred_call_ends_the_run_once_that_call_is_approved_and_run():
    """final_result runs in the batch, another call waits: after its approval the batch is whole and the answer ends the run."""
    ran = []
    look = make_tool("look", lambda tool_call_id, args, signal, on_partial_result: ran.append(args) or text_result("seen"))
    llm = StrictLLM(calls_reply(call("c1", "look", "{}"), final("Paris", "c2")))
    agent = make_agent(llm, look, builtin_tools=False, output_type=Answer, before_tool_call=defer_first)
    try:
        assert ask(agent, "which city?", timeout=WAIT).stop_reason == "awaiting_approval"
        approve(agent, "c1")
        continue_agent(agent)
        response = take_response(agent, timeout=WAIT)
        assert (response.stop_reason, response.output) == ("stop", Answer("Paris")), response.error_message
        assert ran == [{}] and len(llm.requests) == 1 and finals(agent.history()) == [response]
    finally:
        shutdown(agent)


def test_an_answer_given_beside_two_deferred_calls_waits_until_both_have_run():
    """With one of two deferred calls approved and run, the other still waiting, the batch is not whole:
    the run waits again and no final answer enters the history until the second call has run too."""
    ran = []
    look = make_tool("look", lambda tool_call_id, args, signal, on_partial_result: ran.append(tool_call_id) or text_result("seen"))
    llm = StrictLLM(calls_reply(call("c1", "look", "{}"), final("Paris", "c2"), call("c3", "look", "{}")))
    hook = lambda ctx, signal: {"defer": True} if ctx.tool_call.id in ("c1", "c3") else None  # noqa: E731
    agent = make_agent(llm, look, builtin_tools=False, output_type=Answer, before_tool_call=hook)
    try:
        assert ask(agent, "which city?", timeout=WAIT).stop_reason == "awaiting_approval"
        approve(agent, "c1")
        continue_agent(agent)
        assert take_response(agent, timeout=WAIT).stop_reason == "awaiting_approval"
        assert ran == ["c1"] and finals(agent.history()) == []
        approve(agent, "c3")
        continue_agent(agent)
        response = take_response(agent, timeout=WAIT)
        assert (response.stop_reason, response.output) == ("stop", Answer("Paris")), response.error_message
        assert ran == ["c1", "c3"] and len(llm.requests) == 1 and finals(agent.history()) == [response]
    finally:
        shutdown(agent)


def test_a_new_agent_on_the_session_approves_the_waiting_answer_and_ends_with_its_output(tmp_path):
    """The pending final_result lives in the history: a new agent of the same output_type reopening the session approves it."""
    path = tmp_path / "s.db"
    session = SQLiteSession(path, "web")
    agent = waiting_answer(StrictLLM(calls_reply(final("Paris"))), session=session)
    shutdown(agent)
    session.close()

    session2 = SQLiteSession(path, "web")
    llm2 = StrictLLM()
    agent2 = make_agent(llm2, builtin_tools=False, output_type=Answer, before_tool_call=defer_all, session=session2)
    try:
        approve(agent2, "c1")
        continue_agent(agent2)
        response = take_response(agent2, timeout=WAIT)
        assert (response.stop_reason, response.output) == ("stop", Answer("Paris")), response.error_message
        assert llm2.requests == []
        assert [json.loads(m.text) for m in finals(session2.messages())] == [{"city": "Paris"}]
    finally:
        shutdown(agent2)
        session2.close()


def test_an_approved_answer_followed_by_a_new_message_enters_the_history_before_it_and_the_run_answers_the_message():
    """approve, then run_agent: the approved answer's final reply enters the history first, then the message, which the model answers."""
    llm = StrictLLM(calls_reply(final("Paris")), AssistantMessage([TextContent('{"city": "Rome"}')], stop_reason="stop"))
    agent = waiting_answer(llm)
    try:
        approve(agent, "c1")
        run_agent(agent, "and now?")
        response = take_response(agent, timeout=WAIT)
        assert (response.stop_reason, response.output) == ("stop", Answer("Rome")), response.error_message
        history = agent.history()
        answers = finals(history)
        assert [a.output for a in answers] == [Answer("Paris"), Answer("Rome")]
        assert history.index(answers[0]) + 1 == [i for i, m in enumerate(history) if isinstance(m, UserMessage)][-1]
        assert len(llm.requests) == 2 and llm.requests[1]["messages"][-2] == {"role": "assistant", "content": '{"city": "Paris"}'}
    finally:
        shutdown(agent)
