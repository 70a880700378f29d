"""Approvals across processes: a web-style flow on one SQLite session (decision 18; docs/api.md "Approvals that wait for a person").

Process A defers two calls and exits; process B opens the same session, approves one
(with changed arguments), rejects the other and continues. Real processes, a real
SQLite file, and for the HTTP clients a real server on 127.0.0.1 that plays the model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from helpers import ROOT, WAIT
from localserver import LocalServer, Reply
from yiemagent import SQLiteSession, ToolResultMessage

PROCESS = r"""
import json, sys
from yiemagent import (AgentTool, AgentToolResult, AnthropicClient, OpenAIClient, SQLiteSession, TextContent, ToolStore,
    YiemAgent, approve, continue_agent, pending_approvals, register_tool, reject, run_agent, shutdown, take_response)
from yiemagent.llm import ScriptedLLM
from yiemagent.types import AssistantMessage

db, phase, kind, url, log = sys.argv[1:6]

def tool(name):
    def execute(tool_call_id, args, signal, on_partial_result):
        with open(log, "a") as handle:
            handle.write(json.dumps([phase, tool_call_id, name, args]) + "\n")
        return AgentToolResult([TextContent(name + " ok")])
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    return AgentTool(name, name, "a test tool", schema, execute)

def defer_deletes(ctx, signal):
    return {"defer": True, "reason": "a person decides"} if ctx.tool_call.name == "delete" else None

if kind == "openai":
    llm = OpenAIClient(url, "m", max_retries=0)
elif kind == "anthropic":
    llm = AnthropicClient("m", "k", base_url=url, max_retries=0)
else:
    calls = [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps({"path": p})}}
             for i, n, p in (("c1", "delete", "/tmp/a"), ("c2", "read", "/tmp/b"), ("c3", "delete", "/tmp/c"))]
    first = AssistantMessage([{"type": "tool_calls", "tool_calls": calls}], stop_reason="tool_use")
    llm = ScriptedLLM([first] if phase == "A" else ["all done"])
store = ToolStore("web")
register_tool(store, tool("delete"))
register_tool(store, tool("read"))
session = SQLiteSession(db, "web")
agent = YiemAgent(llm_call=llm, agent_event_sink=None, tool_store=store, builtin_tools=False, before_tool_call=defer_deletes, session=session)
out = {"pending_at_start": [[p.tool_call_id, p.tool_name, p.arguments, p.reason] for p in pending_approvals(agent)]}
if phase == "A":
    run_agent(agent, "clean up")
else:
    approve(agent, "c1", arguments={"path": "/tmp/a2"})
    reject(agent, "c3", "not this one")
    continue_agent(agent)
response = take_response(agent, timeout=20)
out["stop_reason"] = response.stop_reason
out["pending"] = [[p.tool_call_id, p.tool_name, p.arguments, p.reason] for p in pending_approvals(agent)]
shutdown(agent)
session.close()
print(json.dumps(out))
"""

THREE_CALLS = (("c1", "delete", "/tmp/a"), ("c2", "read", "/tmp/b"), ("c3", "delete", "/tmp/c"))


def openai_reply(first: bool) -> Reply:
    if not first:
        return Reply(body={"choices": [{"message": {"role": "assistant", "content": "all done"}, "finish_reason": "stop"}]})
    calls = [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps({"path": p})}} for i, n, p in THREE_CALLS]
    return Reply(body={"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": calls}, "finish_reason": "tool_calls"}]})


def anthropic_reply(first: bool) -> Reply:
    if not first:
        return Reply(body={"content": [{"type": "text", "text": "all done"}], "stop_reason": "end_turn", "model": "m"})
    blocks = [{"type": "tool_use", "id": i, "name": n, "input": {"path": p}} for i, n, p in THREE_CALLS]
    return Reply(body={"content": blocks, "stop_reason": "tool_use", "model": "m"})


def answered_in(kind: str, body: dict) -> Counter:
    """How many results each call id has in a request body the agent sent."""
    if kind == "openai":
        return Counter(m["tool_call_id"] for m in body["messages"] if m["role"] == "tool")
    return Counter(b["tool_use_id"] for m in body["messages"] if isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_result")


def process(db, phase: str, kind: str, url: str, log) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROCESS, str(db), phase, kind, url, str(log)], capture_output=True, text=True, timeout=WAIT * 3, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def ran(log) -> list[list]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def web_flow(tmp_path, kind: str, url: str) -> tuple[dict, dict, list[list]]:
    db, log = tmp_path / "web.db", tmp_path / "ran.jsonl"
    first = process(db, "A", kind, url, log)
    assert first["stop_reason"] == "awaiting_approval"
    assert ran(log) == [["A", "c2", "read", {"path": "/tmp/b"}]]  # a deferred call never runs before its approval
    second = process(db, "B", kind, url, log)
    return first, second, ran(log)


def check_web_flow(tmp_path, first: dict, second: dict, calls: list[list]) -> None:
    waiting = [["c1", "delete", {"path": "/tmp/a"}, "a person decides"], ["c3", "delete", {"path": "/tmp/c"}, "a person decides"]]
    assert first["pending"] == waiting
    assert second["pending_at_start"] == waiting  # process B sees what process A left
    assert second["stop_reason"] == "stop" and second["pending"] == []
    # the approved call ran once, in B, with the new arguments; the rejected one never ran
    assert calls == [["A", "c2", "read", {"path": "/tmp/b"}], ["B", "c1", "delete", {"path": "/tmp/a2"}]]
    session = SQLiteSession(tmp_path / "web.db", "web")
    try:
        results = Counter(m.tool_call_id for m in session.messages() if isinstance(m, ToolResultMessage))
        rejected = [m for m in session.messages() if isinstance(m, ToolResultMessage) and m.tool_call_id == "c3"]
    finally:
        session.close()
    assert results == {"c1": 1, "c2": 1, "c3": 1}  # every call has exactly one result
    assert rejected[0].is_error and rejected[0].content[0].text == "not this one"


def test_web_flow_across_two_processes_with_scripted_llm(tmp_path):
    """ScriptedLLM in each process: A defers and exits, B approves one call with new arguments, rejects one, continues."""
    check_web_flow(tmp_path, *web_flow(tmp_path, "scripted", "-"))


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_web_flow_across_two_processes_over_http(tmp_path, kind):
    """OpenAIClient and AnthropicClient against a real server: the request after B's continue answers each call exactly once."""
    make = openai_reply if kind == "openai" else anthropic_reply
    with LocalServer(lambda request: make(len(server.requests) == 1)) as server:
        first, second, calls = web_flow(tmp_path, kind, server.url)
        bodies = [r.json() for r in server.requests]
    check_web_flow(tmp_path, first, second, calls)
    assert len(bodies) == 2
    assert answered_in(kind, bodies[1]) == {"c1": 1, "c2": 1, "c3": 1}
    assert answered_in(kind, bodies[0]) == {}
