"""Reading a reply: ``AssistantMessage.text``, ``ask`` and ``resume`` (beyond the spec, docs/api.md "Reading a reply", "Approvals in fewer lines")."""

from __future__ import annotations

import threading
import time

import pytest

from helpers import WAIT, gated_llm, make_agent
from yiemagent import AssistantMessage, TextContent, UserMessage, ask, resume, run_agent, shutdown, take_response
from yiemagent.llm import ScriptedLLM


def test_text_joins_the_text_blocks_and_skips_tool_calls():
    """``.text`` is the text blocks joined, without tool-call blocks or thinking."""
    reply = AssistantMessage(
        [TextContent("Hello, "), {"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "world"},
         {"type": "toolCall", "id": "c1", "name": "x", "arguments": {}}]
    )
    assert reply.text == "Hello, world"


def test_text_of_a_failed_reply_is_empty():
    """A reply whose content is empty gives "" (``content[0].text`` raises there)."""
    reply = AssistantMessage([], stop_reason="error", error_message="boom")
    assert reply.text == ""


def test_two_asks_in_a_row_give_two_replies():
    """Each ask gets the reply to its own message, with a timeout or without one (no limit)."""
    llm = ScriptedLLM(["first", "second"])
    agent = make_agent(llm, builtin_tools=False)
    try:
        assert ask(agent, "one").text == "first"
        assert ask(agent, "two", timeout=WAIT).text == "second"
    finally:
        shutdown(agent, timeout=WAIT)
    assert len(llm.requests) == 2


@pytest.mark.parametrize("second_call", [lambda agent: ask(agent, "b", timeout=WAIT), lambda agent: resume(agent)], ids=["ask", "resume"])
def test_concurrent_asks_give_a_reply_each(second_call):
    """Two threads asking at once (or one asking, one resuming without a timeout) get two runs and two replies, not one run for both."""
    llm, started, release = gated_llm("fast")
    agent = make_agent(llm, builtin_tools=False)
    answers: dict[str, str] = {}
    try:
        first = threading.Thread(target=lambda: answers.__setitem__("a", ask(agent, "a", timeout=WAIT).text))
        first.start()
        assert started.wait(WAIT)
        second = threading.Thread(target=lambda: answers.__setitem__("b", second_call(agent).text))
        second.start()
        release.set()
        first.join(WAIT)
        second.join(WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert answers == {"a": "slow", "b": "fast"}
    assert len(llm.requests) == 2


def test_ask_times_out_when_no_reply_comes():
    """``timeout`` bounds the call: an LLM that never answers gives TimeoutError, after the timeout, not later."""
    llm, _, release = gated_llm()
    agent = make_agent(llm, builtin_tools=False)
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            ask(agent, "hi", timeout=0.1)
        assert time.monotonic() - started < 0.9
    finally:
        release.set()
        shutdown(agent, timeout=WAIT)


ASK = lambda agent, timeout: ask(agent, "b", timeout=timeout)  # noqa: E731
RESUME = lambda agent, timeout: resume(agent, timeout=timeout)  # noqa: E731


@pytest.mark.parametrize(
    ("holder", "waiter", "holder_name"), [(ASK, ASK, "ask()"), (ASK, RESUME, "ask()"), (RESUME, ASK, "resume()")], ids=["ask-ask", "ask-resume", "resume-ask"]
)
def test_an_ask_that_does_not_get_its_turn_within_its_timeout_raises_saying_so(holder, waiter, holder_name):
    """ask and resume share the agent's lock: while one waits for its reply, another with a timeout gives up after it, naming the one holding it, and sends nothing."""
    llm, started, release = gated_llm("never sent")
    agent = make_agent(llm, builtin_tools=False, messages=[UserMessage([TextContent("earlier")])])
    answers = []
    first = threading.Thread(target=lambda: answers.append(holder(agent, WAIT).text))
    first.start()
    try:
        assert started.wait(WAIT)
        with pytest.raises(TimeoutError) as raised:
            waiter(agent, 0.1)
        assert str(raised.value) == f"another {holder_name} on this agent did not finish within 0.1 s"
    finally:
        release.set()
        first.join(WAIT)
        shutdown(agent, timeout=WAIT)
    assert answers == ["slow"] and len(llm.requests) == 1


@pytest.mark.parametrize("waiter", [ASK, RESUME], ids=["ask", "resume"])
def test_an_ask_while_a_run_goes_on_raises_when_the_agent_does_not_become_idle_in_time(waiter):
    """ask (or resume) waits for the run run_agent started; past its timeout it raises saying so, and its message (or continue) is not sent."""
    llm, started, release = gated_llm("never sent")
    agent = make_agent(llm, builtin_tools=False)
    try:
        run_agent(agent, "a")
        assert started.wait(WAIT)
        with pytest.raises(TimeoutError) as raised:
            waiter(agent, 0.1)
        assert str(raised.value) == "the agent did not become idle within 0.1 s"
        release.set()
        assert take_response(agent, timeout=WAIT).text == "slow"
        assert agent.wait_until_idle(WAIT)
    finally:
        release.set()
        shutdown(agent, timeout=WAIT)
    assert len(llm.requests) == 1


def test_an_ask_without_a_timeout_waits_for_its_turn_however_long_the_other_ask_takes():
    """With no timeout an ask waits for the ask before it to end, past any fixed wait (here 1.2 s), then gets its own reply."""
    llm, started, release = gated_llm("second")
    agent = make_agent(llm, builtin_tools=False)
    answers: list[object] = []

    def second_ask() -> None:
        try:
            answers.append(ask(agent, "b").text)
        except Exception as error:  # the test's assertion names it
            answers.append(error)

    first = threading.Thread(target=lambda: answers.append(ask(agent, "a", timeout=WAIT).text))
    first.start()
    second = threading.Thread(target=second_ask)
    try:
        assert started.wait(WAIT)
        second.start()
        time.sleep(1.2)  # the second ask waits for its turn all this time
        assert answers == []
        release.set()
        first.join(WAIT)
        second.join(WAIT)
    finally:
        release.set()
        shutdown(agent, timeout=WAIT)
    assert answers == ["slow", "second"] and len(llm.requests) == 2
