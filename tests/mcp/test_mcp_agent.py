"""An agent calling MCP tools end to end: a scripted model, real MCP servers, events, hooks, a parallel batch, abort."""

from __future__ import annotations

import pytest

import mcp  # noqa: E402,F401  make test installs the mcp extra (Makefile): these tests run there, never skip

from helpers import EventRecorder, make_tool, text_result  # noqa: E402
from helpers import WAIT  # noqa: E402
from mcp_support import HttpServer, time_server_command  # noqa: E402
from yiemagent import (
    ToolExecEndEvent,
    ToolExecStartEvent,
    ToolExecUpdateEvent,
    ToolResultMessage,
    YiemAgent,
    abort,
    register_tool,
    run_agent,
    shutdown,
    take_response,
)
from yiemagent.llm.scripted import ScriptedLLM, tool_call_reply
from yiemagent.mcp import MCPClient


@pytest.fixture(scope="module")
def http_server():
    server = HttpServer()
    yield server
    server.close()


def agent_with(client: MCPClient, llm: ScriptedLLM, recorder: EventRecorder, **options) -> YiemAgent:
    agent = YiemAgent(llm_call=llm, agent_event_sink=recorder, **options)
    for tool in client.tools():
        register_tool(agent.tool_store, tool)
    return agent


def tool_results(agent: YiemAgent) -> dict[str, ToolResultMessage]:
    return {m.tool_call_id: m for m in agent.history() if isinstance(m, ToolResultMessage)}


def test_an_agent_calls_mcp_server_time_with_events_and_hooks(recorder):
    """A scripted model's calls reach mcp-server-time; results, errors, events and both hooks work as for any tool."""
    before, after = [], []

    def before_tool_call(ctx, signal):
        before.append(ctx.tool_call.name)
        if ctx.args.get("timezone") == "Antarctica/Troll":
            return {"block": True, "reason": "no calls to Troll"}
        return None

    def after_tool_call(ctx, signal):
        after.append((ctx.tool_call.id, ctx.is_error))
        return None

    llm = ScriptedLLM(
        [
            tool_call_reply(
                ("c1", "time_get_current_time", {"timezone": "Europe/Warsaw"}),
                ("c2", "time_get_current_time", {"timezone": "Mars/Olympus"}),
                ("c3", "time_get_current_time", {"timezone": "Antarctica/Troll"}),
                ("c4", "time_get_current_time", {}),
            ),
            "It is evening in Warsaw.",
        ]
    )
    with MCPClient.stdio(time_server_command(), name="time") as client:
        agent = agent_with(client, llm, recorder, before_tool_call=before_tool_call, after_tool_call=after_tool_call, parallel_tool_execute=True)
        try:
            run_agent(agent, "What time is it in Warsaw?")
            response = take_response(agent, timeout=WAIT)
            results = tool_results(agent)
        finally:
            shutdown(agent, timeout=WAIT)
    assert response.stop_reason == "stop"
    assert not results["c1"].is_error and results["c1"].details["timezone"] == "Europe/Warsaw"
    assert results["c2"].is_error and "Invalid timezone" in results["c2"].content[0].text
    assert results["c3"].is_error and results["c3"].content[0].text == "no calls to Troll"
    assert results["c4"].is_error and "'timezone' is a required property" in results["c4"].content[0].text  # the MCP inputSchema, checked here
    assert before == ["time_get_current_time"] * 3  # c4 failed validation before the hook
    assert sorted(after) == [("c1", False), ("c2", True)]
    ends = {e.tool_call_id: e for e in recorder.of_type(ToolExecEndEvent)}
    assert {e.tool_call_id for e in recorder.of_type(ToolExecStartEvent)} >= {"c1", "c2"}
    assert not ends["c1"].is_error and ends["c2"].is_error
    sent = str(llm.requests[1])
    assert "Europe/Warsaw" in sent and "Invalid timezone" in sent


def test_mcp_calls_run_in_a_parallel_batch(http_server, recorder):
    """In a parallel batch an MCP call runs while another tool is still running (a latch, not a clock, proves it); progress arrives as update events."""

    def gate(tool_call_id, args, signal, on_partial_result):
        http_server.wait_for("STARTED slow")  # returns only if the MCP call started while this tool runs
        return text_result("saw the MCP call start")

    llm = ScriptedLLM([tool_call_reply(("g", "gate", {}), ("s", "web_slow", {"seconds": 0.2}), ("p", "web_countdown", {"steps": 2})), "all done"])
    with MCPClient.http(http_server.url, name="web") as client:
        agent = agent_with(client, llm, recorder, parallel_tool_execute=True)
        register_tool(agent.tool_store, make_tool("gate", gate, parallel=True))
        try:
            run_agent(agent, "go")
            assert take_response(agent, timeout=WAIT).stop_reason == "stop"
            results = tool_results(agent)
        finally:
            shutdown(agent, timeout=WAIT)
    assert results["g"].content[0].text == "saw the MCP call start" and not results["g"].is_error
    assert results["s"].content[0].text == "slept 0.2 s" and not results["s"].is_error
    updates = [e.partial_result.content[0].text for e in recorder.for_call("p") if isinstance(e, ToolExecUpdateEvent)]
    assert updates == ["progress 1/2: step 1", "progress 2/2: step 2"]  # MCP progress -> update events


def test_aborting_the_agent_cancels_the_mcp_call(http_server, recorder):
    """abort() during an MCP call ends the run at once; the call's result is an error and the server cancels it."""
    llm = ScriptedLLM([tool_call_reply(("s", "web_slow", {"seconds": 60}))])
    with MCPClient.http(http_server.url, name="web") as client:
        agent = agent_with(client, llm, recorder)
        try:
            run_agent(agent, "go")
            http_server.wait_for("STARTED slow")
            abort(agent, "the user pressed stop")
            response = take_response(agent, timeout=WAIT)
            results = tool_results(agent)
        finally:
            shutdown(agent, timeout=WAIT)
    assert response.stop_reason == "aborted"
    assert results["s"].is_error and "aborted (the user pressed stop)" in results["s"].content[0].text
    http_server.wait_for("CANCELLED slow")
