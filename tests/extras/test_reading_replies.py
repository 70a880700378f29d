"""Reading a reply: ``AssistantMessage.text`` and ``ask`` (beyond the spec, docs/api.md "Reading a reply")."""

from __future__ import annotations

import threading

import pytest

from helpers import WAIT, make_agent
from yiemagent import AssistantMessage, TextContent, ask, shutdown
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
    """Each ask gets the reply to its own message."""
    llm = ScriptedLLM(["first", "second"])
    agent = make_agent(llm, builtin_tools=False)
    try:
        assert ask(agent, "one", timeout=WAIT).text == "first"
        assert ask(agent, "two", timeout=WAIT).text == "second"
    finally:
        shutdown(agent, timeout=WAIT)
    assert len(llm.requests) == 2


def test_concurrent_asks_give_a_reply_each():
    """Two threads asking at once get two runs and two replies, not one run for both."""
    started, release = threading.Event(), threading.Event()

    def slow(formatted):
        started.set()
        assert release.wait(WAIT)
        return AssistantMessage([TextContent("slow")], stop_reason="stop")

    llm = ScriptedLLM([slow, "fast"])
    agent = make_agent(llm, builtin_tools=False)
    answers: dict[str, str] = {}
    try:
        first = threading.Thread(target=lambda: answers.__setitem__("a", ask(agent, "a", timeout=WAIT).text))
        first.start()
        assert started.wait(WAIT)
        second = threading.Thread(target=lambda: answers.__setitem__("b", ask(agent, "b", timeout=WAIT).text))
        second.start()
        release.set()
        first.join(WAIT)
        second.join(WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert answers == {"a": "slow", "b": "fast"}
    assert len(llm.requests) == 2


def test_ask_times_out_when_no_reply_comes():
    """``timeout`` bounds the call: an LLM that never answers gives TimeoutError."""
    release = threading.Event()

    def stuck(formatted):
        release.wait(WAIT)
        return AssistantMessage([TextContent("late")], stop_reason="stop")

    agent = make_agent(ScriptedLLM([stuck]), builtin_tools=False)
    try:
        with pytest.raises(TimeoutError):
            ask(agent, "hi", timeout=0.2)
    finally:
        release.set()
        shutdown(agent, timeout=WAIT)
