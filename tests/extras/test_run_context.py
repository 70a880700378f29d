"""A context for tools: ``YiemAgent(deps=...)``, ``RunContext``, ``current_run_context()`` (beyond the spec, docs/api.md "A context for tools, async tools")."""

from __future__ import annotations

import threading
from typing import Optional

import pytest

from helpers import WAIT, make_agent
from yiemagent import AssistantMessage, RunContext, ToolDefinitionError, ask, current_run_context, shutdown, tool
from yiemagent.llm.scripted import ScriptedLLM, tool_call_reply
from yiemagent.types import LLMUsage


def test_a_tool_parameter_annotated_run_context_receives_it_and_is_not_in_the_schema():
    """deps, run id, round, usage, the messages snapshot and the call id reach the function."""
    seen: list[RunContext] = []

    @tool
    def lookup(key: str, ctx: RunContext) -> str:
        """Look a key up in the deps."""
        seen.append(ctx)
        return ctx.deps[key]

    assert "ctx" not in lookup.input_schema["properties"]
    first = AssistantMessage(tool_call_reply(("c1", "lookup", '{"key": "a"}')).content, stop_reason="tool_use", usage=LLMUsage(5, 2))
    llm = ScriptedLLM([first, "done"])
    agent = make_agent(llm, lookup, builtin_tools=False, deps={"a": "alpha"})
    try:
        assert ask(agent, "look", timeout=WAIT).text == "done"
    finally:
        shutdown(agent, timeout=WAIT)
    (ctx,) = seen
    assert (ctx.deps, ctx.run_id, ctx.round, ctx.tool_call_id) == ({"a": "alpha"}, 1, 1, "c1")
    assert ctx.usage.input_tokens == 5 and ctx.usage.output_tokens == 2
    assert isinstance(ctx.messages, tuple) and ctx.messages[-1].content == first.content
    assert llm.requests[1]["messages"][-1]["content"] == "alpha"


def test_the_model_cannot_send_the_run_context_parameter():
    """An argument named like the RunContext parameter is refused: it is not the model's."""

    @tool
    def f(ctx: Optional[RunContext], x: int = 0) -> str:
        return "ran"

    with pytest.raises(Exception, match="ctx"):
        f.execute("c1", {"ctx": {}}, None, lambda p: None)
    assert f.execute("c1", {}, None, lambda p: None).content[0].text == "ran"  # outside a run: None


def test_hooks_and_parallel_tools_see_their_own_call_in_current_run_context():
    """before/after hooks and each tool of a parallel batch (on pool threads) see the RunContext of their own call."""
    barrier = threading.Barrier(2, timeout=WAIT)
    seen: dict[str, list] = {"before": [], "after": [], "tool": []}

    @tool(parallel=True)
    def work(n: int) -> str:
        barrier.wait()  # both calls at once, on two threads
        ctx = current_run_context()
        seen["tool"].append((ctx.tool_call_id, ctx.deps, threading.current_thread().name))
        return str(n)

    def before(context, signal):
        seen["before"].append(current_run_context().tool_call_id)

    def after(context, signal):
        seen["after"].append(current_run_context().tool_call_id)

    llm = ScriptedLLM([tool_call_reply(("a", "work", '{"n": 1}'), ("b", "work", '{"n": 2}')), "ok"])
    agent = make_agent(llm, work, builtin_tools=False, deps="D", before_tool_call=before, after_tool_call=after, parallel_tool_execute=True)
    try:
        ask(agent, "go", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert sorted(seen["before"]) == ["a", "b"] and sorted(seen["after"]) == ["a", "b"]
    assert sorted((i, d) for i, d, _ in seen["tool"]) == [("a", "D"), ("b", "D")]
    assert current_run_context() is None  # nothing leaks into the caller's thread


def test_a_tool_with_timeout_s_sees_the_run_context_on_its_own_thread():
    """A call on the thread of timeout_s sees its RunContext too."""

    @tool(timeout_s=WAIT)
    def where(ctx: RunContext) -> str:
        return f"{ctx.tool_call_id}:{ctx.round}"

    llm = ScriptedLLM([tool_call_reply(("t1", "where", "{}")), "ok"])
    agent = make_agent(llm, where, builtin_tools=False)
    try:
        ask(agent, "go", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert llm.requests[1]["messages"][-1]["content"] == "t1:1"


def test_a_run_context_parameter_with_another_annotation_kind_is_model_input():
    """Only the annotation RunContext (or Optional of it) is injected; a list of them is refused as a tool argument."""
    with pytest.raises(ToolDefinitionError):

        @tool
        def g(ctxs: list[RunContext]) -> str:
            return ""
