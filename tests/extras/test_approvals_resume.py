"""Approvals in fewer lines: ``tool(..., requires_approval=True)`` and ``resume`` (decision 18; docs/api.md
"Approvals in fewer lines")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass

import pytest

from helpers import ROOT, WAIT, StrictLLM, call, calls_reply, gated_llm, make_agent
from yiemagent import (
    AgentTool,
    AssistantMessage,
    EmptyHistoryError,
    SQLiteSession,
    TextContent,
    ToolDefinitionError,
    ToolExecEndEvent,
    ToolResultMessage,
    UserMessage,
    approve,
    ask,
    pending_approvals,
    reject,
    resume,
    shutdown,
    tool,
)

EXAMPLE = ROOT / "examples" / "approvals" / "two_processes.py"


class Ran:
    """The tools of these tests, made with ``tool()``: each records the paths it ran with."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # guards paths
        self.paths: list[tuple[str, str]] = []

    def tool(self, name: str, *, requires_approval: bool = False, parallel: bool = False) -> AgentTool:
        def run(path: str) -> str:
            with self.lock:
                self.paths.append((name, path))
            return f"{name} {path}"

        return tool(run, name=name, requires_approval=requires_approval, parallel=parallel)


def path_call(call_id: str, name: str, path: str) -> dict:
    return call(call_id, name, json.dumps({"path": path}))


def results(agent) -> dict[str, list[tuple[str, bool]]]:
    """Each call id's results in the history: (text, is_error)."""
    found: dict[str, list[tuple[str, bool]]] = {}
    for m in agent.history():
        if isinstance(m, ToolResultMessage):
            found.setdefault(m.tool_call_id, []).append((m.content[0].text, m.is_error))
    return found


def test_tool_carries_requires_approval_in_each_form_and_agent_tool_checks_it():
    """``tool(fn, requires_approval=True)`` and ``@tool(requires_approval=True)`` set the AgentTool's flag (default False); a non-bool is refused."""

    def delete(path: str) -> str:
        return path

    assert tool(delete).requires_approval is False
    assert tool(delete, requires_approval=True).requires_approval is True
    assert tool(requires_approval=True)(delete).requires_approval is True
    with pytest.raises(ToolDefinitionError, match="requires_approval must be True or False, got 'yes'"):
        AgentTool("t", "T", "", {"type": "object"}, lambda *a: None, requires_approval="yes")


def test_a_call_of_a_tool_that_requires_approval_waits_and_runs_once_when_resumed():
    """Sequential batch: the flagged call is deferred naming the tool, the other runs; approved, resume runs it once and returns the answer."""
    ran = Ran()
    events: list = []
    llm = StrictLLM(calls_reply(path_call("c1", "delete", "/tmp/a"), path_call("c2", "read", "/tmp/b")),
                    AssistantMessage([TextContent("all done")], stop_reason="stop"))
    agent = make_agent(llm, ran.tool("delete", requires_approval=True), ran.tool("read"), sink=events.append, builtin_tools=False)
    try:
        reply = ask(agent, "clean up", timeout=WAIT)
        assert reply.stop_reason == "awaiting_approval"
        assert [(p.tool_call_id, p.reason) for p in pending_approvals(agent)] == [("c1", "tool 'delete' requires approval")]
        assert ran.paths == [("read", "/tmp/b")]
        ends = [e for e in events if isinstance(e, ToolExecEndEvent) and e.tool_call_id == "c1"]
        assert ends[0].result.details == {"deferred": True, "reason": "tool 'delete' requires approval"}
        approve(agent, "c1")
        reply = resume(agent, timeout=WAIT)
        assert (reply.stop_reason, reply.text) == ("stop", "all done")
        assert ran.paths == [("read", "/tmp/b"), ("delete", "/tmp/a")]
        assert results(agent) == {"c1": [("delete /tmp/a", False)], "c2": [("read /tmp/b", False)]}
        assert pending_approvals(agent) == [] and len(llm.requests) == 2
    finally:
        shutdown(agent, timeout=WAIT)


def test_a_parallel_batch_defers_each_flagged_call_and_resume_runs_the_approved_and_answers_the_rejected():
    """Parallel batch: both flagged calls wait while the free one runs; one approved (new arguments) runs once, the rejected gets its reason."""
    ran = Ran()
    llm = StrictLLM(
        calls_reply(path_call("c1", "delete", "/tmp/a"), path_call("c2", "read", "/tmp/b"), path_call("c3", "delete", "/etc")),
        AssistantMessage([TextContent("done")], stop_reason="stop"),
    )
    tools = (ran.tool("delete", requires_approval=True, parallel=True), ran.tool("read", parallel=True))
    agent = make_agent(llm, *tools, builtin_tools=False, parallel_tool_execute=True)
    try:
        assert ask(agent, "clean up", timeout=WAIT).stop_reason == "awaiting_approval"
        assert [p.tool_call_id for p in pending_approvals(agent)] == ["c1", "c3"]
        approve(agent, "c1", arguments={"path": "/tmp/a2"})
        reject(agent, "c3", "not /etc")
        assert resume(agent, timeout=WAIT).text == "done"
        assert sorted(ran.paths) == [("delete", "/tmp/a2"), ("read", "/tmp/b")]
        assert results(agent) == {"c1": [("delete /tmp/a2", False)], "c2": [("read /tmp/b", False)], "c3": [("not /etc", True)]}
        sent = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
        assert sent == ["read /tmp/b", "delete /tmp/a2", "not /etc"]  # history order: the batch, then what resume answered
    finally:
        shutdown(agent, timeout=WAIT)


@pytest.mark.parametrize(
    ("answer", "pending", "result"),
    [
        (None, [("c1", "tool 'delete' requires approval")], None),
        ({}, [], ("delete /tmp/a", False)),
        ({"block": False}, [], ("delete /tmp/a", False)),
        ({"block": True, "reason": "never"}, [], ("never", True)),
        ({"defer": True, "reason": "ask the owner"}, [("c1", "ask the owner")], None),
    ],
    ids=["none-leaves-it-to-the-tool", "empty-dict-allows", "block-false-allows", "block", "own-defer-reason"],
)
def test_before_tool_call_decides_first_and_none_leaves_it_to_the_tool(answer, pending, result):
    """The hook is asked first: a dict it returns is the decision for the call (allow, block, defer); None lets requires_approval defer it."""
    ran = Ran()
    asked: list[str] = []

    def hook(ctx, signal):
        asked.append(ctx.tool_call.id)
        return answer

    agent = make_agent(StrictLLM(calls_reply(path_call("c1", "delete", "/tmp/a"))), ran.tool("delete", requires_approval=True),
                       builtin_tools=False, before_tool_call=hook)
    try:
        reply = ask(agent, "clean up", timeout=WAIT)
        assert asked == ["c1"]
        assert [(p.tool_call_id, p.reason) for p in pending_approvals(agent)] == pending
        assert reply.stop_reason == ("awaiting_approval" if pending else "stop")
        assert results(agent) == ({"c1": [result]} if result else {})
        assert ran.paths == ([("delete", "/tmp/a")] if result == ("delete /tmp/a", False) else [])
    finally:
        shutdown(agent, timeout=WAIT)


def test_an_approved_call_is_not_deferred_again_by_its_tool_while_the_hook_still_answers_none():
    """The hook asked again for the approved call answers None (as it did when the tool deferred it): the call runs once, the run goes on."""
    ran = Ran()
    asked: list[str] = []
    hook = lambda ctx, signal: asked.append(ctx.tool_call.id)  # noqa: E731 - always None
    agent = make_agent(StrictLLM(calls_reply(path_call("c1", "delete", "/tmp/a"))), ran.tool("delete", requires_approval=True),
                       builtin_tools=False, before_tool_call=hook)
    try:
        assert ask(agent, "clean up", timeout=WAIT).stop_reason == "awaiting_approval"
        approve(agent, "c1")
        assert resume(agent, timeout=WAIT).stop_reason == "stop"
        assert asked == ["c1", "c1"] and ran.paths == [("delete", "/tmp/a")]
    finally:
        shutdown(agent, timeout=WAIT)


@dataclass(frozen=True)
class Answer:
    city: str


def final(city: str, call_id: str) -> dict:
    return call(call_id, "final_result", json.dumps({"city": city}))


def test_a_typed_answer_beside_a_flagged_call_is_delivered_once_the_call_is_approved():
    """output_type: final_result in the batch of a flagged call; approved, resume returns the typed answer without an LLM round."""
    ran = Ran()
    llm = StrictLLM(calls_reply(path_call("c1", "delete", "/tmp/a"), final("Paris", "c2")))
    agent = make_agent(llm, ran.tool("delete", requires_approval=True), builtin_tools=False, output_type=Answer)
    try:
        assert ask(agent, "which city?", timeout=WAIT).stop_reason == "awaiting_approval"
        assert [p.tool_call_id for p in pending_approvals(agent)] == ["c1"]
        approve(agent, "c1")
        reply = resume(agent, timeout=WAIT)
        assert (reply.stop_reason, reply.output) == ("stop", Answer("Paris")), reply.error_message
        assert ran.paths == [("delete", "/tmp/a")] and len(llm.requests) == 1
        assert [m.output for m in agent.history() if isinstance(m, AssistantMessage) and m.output is not None] == [Answer("Paris")]
    finally:
        shutdown(agent, timeout=WAIT)


def test_a_typed_answer_after_an_approved_call_is_delivered_by_resume():
    """output_type: the flagged call alone waits; approved, resume runs it and the model's next final_result is the reply's output."""
    ran = Ran()
    llm = StrictLLM(calls_reply(path_call("c1", "delete", "/tmp/a")), calls_reply(final("Oslo", "c2")))
    agent = make_agent(llm, ran.tool("delete", requires_approval=True), builtin_tools=False, output_type=Answer)
    try:
        assert ask(agent, "which city?", timeout=WAIT).stop_reason == "awaiting_approval"
        approve(agent, "c1")
        reply = resume(agent, timeout=WAIT)
        assert (reply.stop_reason, reply.output) == ("stop", Answer("Oslo")), reply.error_message
        assert ran.paths == [("delete", "/tmp/a")] and len(llm.requests) == 2
    finally:
        shutdown(agent, timeout=WAIT)


def test_resume_times_out_when_no_reply_comes():
    """``timeout`` bounds the call: a model that does not answer the resumed run gives TimeoutError naming the timeout."""
    llm, started, release = gated_llm()
    agent = make_agent(llm, builtin_tools=False, messages=[UserMessage([TextContent("earlier")])])
    try:
        with pytest.raises(TimeoutError, match="within"):
            resume(agent, timeout=0.2)
        assert started.is_set()
    finally:
        release.set()
        shutdown(agent, timeout=WAIT)


def test_resume_of_an_agent_with_no_history_raises_as_continue_agent_does():
    """resume on an empty history raises EmptyHistoryError (continue_agent's), and the lock is free after it."""
    agent = make_agent(StrictLLM(), builtin_tools=False)
    try:
        with pytest.raises(EmptyHistoryError):
            resume(agent, timeout=WAIT)
        assert ask(agent, "hello", timeout=WAIT).stop_reason == "stop"
    finally:
        shutdown(agent, timeout=WAIT)


def test_resume_with_check_false_returns_a_failed_run_as_a_value():
    """check=False: the run after the approval fails (the model raises), and resume returns its reply, stop_reason "error"."""
    ran = Ran()
    llm = StrictLLM(calls_reply(path_call("c1", "delete", "/tmp/a")), RuntimeError("model down"))
    agent = make_agent(llm, ran.tool("delete", requires_approval=True), builtin_tools=False)
    try:
        assert ask(agent, "clean up", timeout=WAIT).stop_reason == "awaiting_approval"
        approve(agent, "c1")
        reply = resume(agent, timeout=WAIT, check=False)
        assert reply.stop_reason == "error" and "model down" in (reply.error_message or "")
        assert ran.paths == [("delete", "/tmp/a")]
    finally:
        shutdown(agent, timeout=WAIT)


def shown(path) -> list[str]:
    """What a file shows it prints: the text after each "# -> "."""
    return [line.split("# -> ", 1)[1].strip() for line in path.read_text(encoding="utf-8").splitlines() if "# -> " in line]


def test_the_two_process_example_prints_what_it_shows_and_runs_the_approved_call_once(tmp_path):
    """examples/approvals/two_processes.py, run as two real processes on one SQLite file: it prints what it shows; the tool runs once, in the second."""
    def run(phase: str) -> str:
        done = subprocess.run([sys.executable, str(EXAMPLE), phase], cwd=tmp_path, capture_output=True, text=True, timeout=WAIT * 3,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert done.returncode == 0, done.stderr
        return done.stdout

    first, second = run("ask"), run("approve")
    assert first.splitlines() == ["awaiting_approval"]
    assert second.splitlines() == ["deleting /tmp/old.log", "Deleted /tmp/old.log."]
    assert shown(EXAMPLE) == ["awaiting_approval", "Deleted /tmp/old.log."]
    session = SQLiteSession(tmp_path / "approvals.db", "ticket-7")
    try:
        answered = Counter(m.tool_call_id for m in session.messages() if isinstance(m, ToolResultMessage))
    finally:
        session.close()
    assert answered == {"c1": 1}
    assert run("approve").splitlines() == ["Deleted /tmp/old.log."]  # a third process: nothing waits, nothing runs again


PROCESS = r"""
import json, sys
from yiemagent import SQLiteSession, YiemAgent, approve, ask, pending_approvals, register_tool, reject, resume, tool
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply

db, phase, log = sys.argv[1:4]

@tool(requires_approval=True)
def delete(path: str) -> str:
    with open(log, "a") as handle:
        handle.write(json.dumps([phase, path]) + "\n")
    return "deleted " + path

first = tool_call_reply(("c1", "delete", {"path": "/tmp/a"}), ("c2", "delete", {"path": "/etc"}))
llm = ScriptedLLM([first] if phase == "A" else ["all done"])
with YiemAgent(llm_call=llm, agent_event_sink=None, builtin_tools=False, session=SQLiteSession(db, "web")) as agent:
    register_tool(agent.tool_store, delete)
    if phase == "A":
        reply = ask(agent, "clean up", timeout=20)
    else:
        approve(agent, "c1")
        reject(agent, "c2", "not /etc")
        reply = resume(agent, timeout=20)
    print(json.dumps([reply.stop_reason, [p.tool_call_id for p in pending_approvals(agent)]]))
"""


def test_a_second_process_approves_one_flagged_call_and_rejects_the_other(tmp_path):
    """Process A's flagged calls wait in the session; process B approves one (it runs once, in B) and rejects one (its reason is its result)."""
    db, log = tmp_path / "web.db", tmp_path / "ran.jsonl"

    def run(phase: str) -> list:
        done = subprocess.run([sys.executable, "-c", PROCESS, str(db), phase, str(log)], cwd=ROOT, capture_output=True, text=True, timeout=WAIT * 3)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert run("A") == ["awaiting_approval", ["c1", "c2"]]
    assert not log.exists()
    assert run("B") == ["stop", []]
    assert [json.loads(line) for line in log.read_text().splitlines()] == [["B", "/tmp/a"]]
    session = SQLiteSession(db, "web")
    try:
        found = [(m.tool_call_id, m.content[0].text, m.is_error) for m in session.messages() if isinstance(m, ToolResultMessage)]
    finally:
        session.close()
    assert found == [("c1", "deleted /tmp/a", False), ("c2", "not /etc", True)]
