"""Approvals that wait for a person (beyond the spec; decision 18; docs/api.md "Approvals that wait for a person")."""

from __future__ import annotations

import threading

import pytest

from helpers import WAIT, StrictLLM, call, calls_reply, make_agent, make_tool, text_result
from yiemagent import (
    ApprovalMessage,
    AssistantMessage,
    EmptyHistoryError,
    PendingApproval,
    SQLiteSession,
    TextContent,
    ToolArgumentsError,
    ToolExecEndEvent,
    ToolResultMessage,
    UserMessage,
    add_message,
    approve,
    continue_agent,
    load_history,
    pending_approvals,
    reject,
    run_agent,
    save_history,
    shutdown,
    take_response,
)

SCHEMA_PATH = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": False}


class Ran:
    """The tools of these tests: each records the arguments it ran with."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # guards calls
        self.calls: list[tuple[str, dict]] = []

    def tool(self, name: str, **kwargs):
        def execute(tool_call_id, args, signal, on_partial_result):
            with self.lock:
                self.calls.append((name, dict(args)))
            return text_result(f"{name} done with {sorted(args.items())}")

        return make_tool(name, execute, schema=SCHEMA_PATH, **kwargs)


def defer_deletes(ctx, signal):
    """A before_tool_call that sends every call of 'delete' to a person."""
    if ctx.tool_call.name == "delete":
        return {"defer": True, "reason": f"deleting {ctx.args['path']} needs approval"}
    return None


def three_calls() -> AssistantMessage:
    return calls_reply(
        call("c1", "delete", '{"path": "/tmp/a"}'),
        call("c2", "read", '{"path": "/tmp/b"}'),
        call("c3", "delete", '{"path": "/tmp/c"}'),
    )


def results_by_call(history) -> dict[str, list[ToolResultMessage]]:
    found: dict[str, list[ToolResultMessage]] = {}
    for message in history:
        if isinstance(message, ToolResultMessage):
            found.setdefault(message.tool_call_id, []).append(message)
    return found


def deferred_agent(ran: Ran, llm: StrictLLM, **kwargs):
    agent = make_agent(llm, ran.tool("delete"), ran.tool("read"), builtin_tools=False, before_tool_call=defer_deletes, **kwargs)
    run_agent(agent, "clean up")
    return agent, take_response(agent, timeout=WAIT)


def test_a_deferred_call_is_neither_run_nor_answered_and_the_run_ends_awaiting_approval():
    """The other calls of the batch run; the deferred ones wait, without a result, and the run ends "awaiting_approval"."""
    ran, llm = Ran(), StrictLLM(three_calls())
    agent, response = deferred_agent(ran, llm)
    try:
        assert response.stop_reason == "awaiting_approval"
        assert ran.calls == [("read", {"path": "/tmp/b"})]
        assert set(results_by_call(agent.history())) == {"c2"}
        assert pending_approvals(agent) == [
            PendingApproval("c1", "delete", {"path": "/tmp/a"}, "deleting /tmp/a needs approval"),
            PendingApproval("c3", "delete", {"path": "/tmp/c"}, "deleting /tmp/c needs approval"),
        ]
        assert len(llm.requests) == 1
    finally:
        shutdown(agent)


def test_continue_runs_the_approved_call_with_its_new_arguments_and_answers_the_rejected_one():
    """approve (with changed arguments) and reject, then continue_agent: one result per call, and the LLM is called again."""
    ran, llm = Ran(), StrictLLM(three_calls(), AssistantMessage([TextContent("all done")], stop_reason="stop"))
    agent, _ = deferred_agent(ran, llm)
    try:
        approve(agent, "c1", arguments={"path": "/tmp/a2"})
        reject(agent, "c3", "not that one")
        assert pending_approvals(agent) == []
        continue_agent(agent)
        final = take_response(agent, timeout=WAIT)
        assert final.stop_reason == "stop"
        assert ran.calls == [("read", {"path": "/tmp/b"}), ("delete", {"path": "/tmp/a2"})]
        results = results_by_call(agent.history())
        assert {k: len(v) for k, v in results.items()} == {"c1": 1, "c2": 1, "c3": 1}
        assert results["c3"][0].is_error and results["c3"][0].content == [TextContent("not that one")]
        assert not results["c1"][0].is_error
        assert len(llm.requests) == 2  # StrictLLM checked that every call had its result
        sent = llm.requests[1]["messages"]
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool", "tool"]  # no approval step is sent
        assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == ["c2", "c1", "c3"]
    finally:
        shutdown(agent)


def test_continue_with_a_call_still_undecided_runs_the_decided_ones_and_waits_again():
    """Decided calls are settled at once; the run ends "awaiting_approval" again without an LLM round."""
    ran, llm = Ran(), StrictLLM(three_calls())
    agent, _ = deferred_agent(ran, llm)
    try:
        approve(agent, "c1")
        continue_agent(agent)
        again = take_response(agent, timeout=WAIT)
        assert again.stop_reason == "awaiting_approval"
        assert [p.tool_call_id for p in pending_approvals(agent)] == ["c3"]
        assert ran.calls[-1] == ("delete", {"path": "/tmp/a"})
        assert len(llm.requests) == 1
    finally:
        shutdown(agent)


def test_a_new_message_while_approvals_wait_rejects_them_as_superseded():
    """run_agent while calls wait: each gets an error result "superseded by a new message", before the new message, with its events."""
    ran, llm, events = Ran(), StrictLLM(three_calls(), AssistantMessage([TextContent("ok")], stop_reason="stop")), []
    agent, _ = deferred_agent(ran, llm, sink=events.append)
    try:
        run_agent(agent, "never mind")
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
        history = agent.history()
        results = results_by_call(history)
        assert [r.content for r in results["c1"] + results["c3"]] == [[TextContent("superseded by a new message")]] * 2
        last_user = max(i for i, m in enumerate(history) if isinstance(m, UserMessage))
        assert all(history.index(r) < last_user for r in results["c1"] + results["c3"])
        assert [name for name, _ in ran.calls] == ["read"]
        assert pending_approvals(agent) == []
        superseded = [e for e in events if isinstance(e, ToolExecEndEvent) and e.tool_call_id in ("c1", "c3")]
        assert [(e.tool_call_id, e.is_error) for e in superseded[-2:]] == [("c1", True), ("c3", True)]  # the run's events say so
    finally:
        shutdown(agent)


def test_an_approved_call_runs_before_a_new_message_supersedes_the_rest():
    """A new message after an approval: the approved call runs, the undecided one is superseded."""
    ran, llm = Ran(), StrictLLM(three_calls(), AssistantMessage([TextContent("ok")], stop_reason="stop"))
    agent, _ = deferred_agent(ran, llm)
    try:
        approve(agent, "c3")
        run_agent(agent, "and then?")
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
        results = results_by_call(agent.history())
        assert results["c1"][0].content == [TextContent("superseded by a new message")]
        assert not results["c3"][0].is_error
        assert ran.calls[-1] == ("delete", {"path": "/tmp/c"})
    finally:
        shutdown(agent)


def test_add_message_of_a_user_message_while_idle_supersedes_the_waiting_calls():
    """add_message(UserMessage) while calls wait answers them first, so the history stays valid to send."""
    ran, llm = Ran(), StrictLLM(three_calls(), AssistantMessage([TextContent("ok")], stop_reason="stop"))
    agent, _ = deferred_agent(ran, llm)
    try:
        add_message(agent, UserMessage([TextContent("a note")]))
        assert pending_approvals(agent) == []
        assert {k: len(v) for k, v in results_by_call(agent.history()).items()} == {"c1": 1, "c2": 1, "c3": 1}
        continue_agent(agent)
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"  # StrictLLM: the wire is valid
    finally:
        shutdown(agent)


def test_the_before_hook_is_asked_again_for_an_approved_call_but_cannot_defer_it_again():
    """An approved call goes through the normal pipeline: the hook is called, its defer is ignored, a block still blocks."""
    seen = []

    def hook(ctx, signal):
        seen.append(ctx.tool_call.id)
        return {"defer": True, "reason": "always"}

    ran = Ran()
    llm = StrictLLM(calls_reply(call("x", "delete", '{"path": "/p"}')), AssistantMessage([TextContent("ok")], stop_reason="stop"))
    agent = make_agent(llm, ran.tool("delete"), builtin_tools=False, before_tool_call=hook)
    try:
        run_agent(agent, "go")
        assert take_response(agent, timeout=WAIT).stop_reason == "awaiting_approval"
        approve(agent, "x")
        continue_agent(agent)
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
        assert seen == ["x", "x"]
        assert ran.calls == [("delete", {"path": "/p"})]
    finally:
        shutdown(agent)


def test_approve_refuses_an_unknown_id_and_arguments_that_fail_the_schema():
    """approve names what is wrong and records nothing: an id that is not waiting, arguments the tool's schema refuses."""
    ran, llm = Ran(), StrictLLM(three_calls())
    agent, _ = deferred_agent(ran, llm)
    try:
        with pytest.raises(ValueError, match="no tool call 'c2' is waiting"):
            approve(agent, "c2")
        with pytest.raises(ToolArgumentsError, match="path"):
            approve(agent, "c1", arguments={"path": 3})
        with pytest.raises(ValueError, match="nope"):
            reject(agent, "nope")
        assert len(pending_approvals(agent)) == 2
        assert not any(isinstance(m, ApprovalMessage) and m.decision != "deferred" for m in agent.history())
    finally:
        shutdown(agent)


def test_a_deferred_call_emits_one_start_and_one_end_event_in_its_run():
    """Each run pairs its events: the deferring run ends the call with a result marked deferred, the resuming run runs it."""
    events = []
    ran, llm = Ran(), StrictLLM(calls_reply(call("x", "delete", '{"path": "/p"}')), AssistantMessage([TextContent("ok")], stop_reason="stop"))
    agent = make_agent(llm, ran.tool("delete"), builtin_tools=False, before_tool_call=defer_deletes, sink=events.append)
    try:
        run_agent(agent, "go")
        take_response(agent, timeout=WAIT)
        ends = [e for e in events if isinstance(e, ToolExecEndEvent)]
        assert len(ends) == 1 and ends[0].result.details == {"deferred": True, "reason": "deleting /p needs approval"}
        assert not ends[0].is_error
        approve(agent, "x")
        continue_agent(agent)
        take_response(agent, timeout=WAIT)
        ends = [e for e in events if isinstance(e, ToolExecEndEvent)]
        assert len(ends) == 2 and "done" in ends[1].result.content[0].text
    finally:
        shutdown(agent)


def test_the_pending_state_survives_a_saved_history_and_the_repair_on_load():
    """save_history / load_history keep the waiting calls waiting: no lost-call result is added for them."""
    ran, llm = Ran(), StrictLLM(three_calls())
    agent, _ = deferred_agent(ran, llm)
    try:
        history = agent.history()
    finally:
        shutdown(agent)
    from yiemagent.history import complete_tool_calls

    repair = complete_tool_calls(history)
    assert not repair.changed
    assert repair.messages == history


def test_a_call_started_after_approval_that_left_no_result_is_lost_not_pending(tmp_path):
    """A crash while an approved call runs: on load it gets the lost-call result, it is never run again."""
    ran, llm = Ran(), StrictLLM(three_calls())
    agent, _ = deferred_agent(ran, llm)
    try:
        history = agent.history()
    finally:
        shutdown(agent)
    history.append(ApprovalMessage("c1", "delete", "approved", {"path": "/tmp/a"}))
    history.append(ApprovalMessage("c1", "delete", "resumed", {"path": "/tmp/a"}))
    save_history(history, tmp_path / "h.json")
    loaded = load_history(tmp_path / "h.json")
    results = results_by_call(loaded)
    assert results["c1"][0].is_error and "may or may not have taken effect" in results["c1"][0].content[0].text
    assert "c3" not in results  # still waiting


def test_a_deferred_call_of_a_batch_that_is_not_the_last_is_answered_on_load():
    """Waiting only makes sense for the last batch: an older unanswered deferred call gets the lost-call result."""
    from yiemagent.history import complete_tool_calls

    first = calls_reply(call("old", "delete", "{}"))
    history = [UserMessage([TextContent("hi")]), first, ApprovalMessage("old", "delete", "deferred", {}, "r"), AssistantMessage([TextContent("later")])]
    repair = complete_tool_calls(history)
    assert [r.tool_call_id for _, r in repair.added] == ["old"]


def test_a_session_carries_the_pending_state_to_a_new_agent(tmp_path):
    """A second agent on the same SQLite session sees the same pending approvals, and can approve and continue."""
    path = tmp_path / "s.db"
    ran, llm = Ran(), StrictLLM(three_calls())
    session = SQLiteSession(path, "web")
    agent, response = deferred_agent(ran, llm, session=session)
    assert response.stop_reason == "awaiting_approval"
    pending = pending_approvals(agent)
    shutdown(agent)
    session.close()

    ran2, llm2 = Ran(), StrictLLM(AssistantMessage([TextContent("done")], stop_reason="stop"))
    session2 = SQLiteSession(path, "web")
    agent2 = make_agent(llm2, ran2.tool("delete"), ran2.tool("read"), builtin_tools=False, before_tool_call=defer_deletes, session=session2)
    try:
        assert pending_approvals(agent2) == pending
        approve(agent2, "c1")
        reject(agent2, "c3")
        continue_agent(agent2)
        assert take_response(agent2, timeout=WAIT).stop_reason == "stop"
        assert ran2.calls == [("delete", {"path": "/tmp/a"})]
        assert {k: len(v) for k, v in results_by_call(session2.messages()).items()} == {"c1": 1, "c2": 1, "c3": 1}
    finally:
        shutdown(agent2)
        session2.close()


def test_continue_agent_on_an_empty_history_still_raises():
    """continue_agent keeps its spec §10 behaviour when nothing waits."""
    agent = make_agent(StrictLLM(), builtin_tools=False)
    try:
        with pytest.raises(EmptyHistoryError):
            continue_agent(agent)
    finally:
        shutdown(agent)


def test_a_parallel_batch_defers_some_calls_and_runs_the_others():
    """In a parallel batch the deferred calls wait while the others run concurrently, each answered once after approval."""
    ran, llm = Ran(), StrictLLM(three_calls(), AssistantMessage([TextContent("ok")], stop_reason="stop"))
    agent = make_agent(
        llm, ran.tool("delete", parallel=True), ran.tool("read", parallel=True), builtin_tools=False,
        before_tool_call=defer_deletes, parallel_tool_execute=True,
    )
    try:
        run_agent(agent, "go")
        assert take_response(agent, timeout=WAIT).stop_reason == "awaiting_approval"
        assert ran.calls == [("read", {"path": "/tmp/b"})]
        approve(agent, "c1")
        approve(agent, "c3")
        continue_agent(agent)
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
        assert sorted((name, args["path"]) for name, args in ran.calls) == [("delete", "/tmp/a"), ("delete", "/tmp/c"), ("read", "/tmp/b")]
        assert {k: len(v) for k, v in results_by_call(agent.history()).items()} == {"c1": 1, "c2": 1, "c3": 1}
    finally:
        shutdown(agent)


def test_an_abort_during_a_deferring_batch_leaves_nothing_waiting():
    """A batch aborted after a deferral: the deferred call is answered "Operation aborted" and the run ends "aborted"."""
    from yiemagent import abort

    def read_then_abort(tool_call_id, args, signal, on_partial_result):
        abort(agent)
        return text_result("read")

    llm = StrictLLM(three_calls())
    ran = Ran()
    agent = make_agent(llm, ran.tool("delete"), make_tool("read", read_then_abort, schema=SCHEMA_PATH), builtin_tools=False, before_tool_call=defer_deletes)
    try:
        run_agent(agent, "go")
        assert take_response(agent, timeout=WAIT).stop_reason == "aborted"
        assert pending_approvals(agent) == []
        assert {k: len(v) for k, v in results_by_call(agent.history()).items()} == {"c1": 1, "c2": 1, "c3": 1}
        assert ran.calls == []
    finally:
        shutdown(agent)


def test_an_abort_while_an_approved_call_runs_reaches_that_call():
    """An approved call resumed at the start of a run runs with the run's abort signal: abort() reaches it, and the run ends "aborted"."""
    from yiemagent import abort

    entered, seen = threading.Event(), []

    def delete(tool_call_id, args, signal, on_partial_result):
        stopped = threading.Event()
        if signal is not None:
            signal.on_abort(stopped.set)
        entered.set()
        seen.append(signal.reason if signal is not None and stopped.wait(WAIT) else None)
        return text_result("stopped")

    llm = StrictLLM(calls_reply(call("c1", "delete", '{"path": "/tmp/a"}')))
    agent = make_agent(llm, make_tool("delete", delete, schema=SCHEMA_PATH), builtin_tools=False, before_tool_call=defer_deletes)
    try:
        run_agent(agent, "clean up")
        assert take_response(agent, timeout=WAIT).stop_reason == "awaiting_approval"
        approve(agent, "c1")
        continue_agent(agent)
        assert entered.wait(WAIT)
        abort(agent, "the user changed their mind")
        response = take_response(agent, timeout=WAIT)
    finally:
        shutdown(agent)
    assert seen == ["the user changed their mind"]
    assert (response.stop_reason, response.error_message) == ("aborted", "the user changed their mind")
    assert len(llm.requests) == 1


def test_approve_checks_new_arguments_as_the_pipeline_will_after_prepare_arguments():
    """New arguments pass through the tool's prepare_arguments before the schema check, as they will when the call runs."""
    ran = Ran()
    delete = ran.tool("delete", prepare_arguments=lambda args: {"path": str(args.get("path"))})
    llm = StrictLLM(calls_reply(call("x", "delete", '{"path": "/p"}')), AssistantMessage([TextContent("ok")], stop_reason="stop"))
    agent = make_agent(llm, delete, builtin_tools=False, before_tool_call=defer_deletes)
    try:
        run_agent(agent, "go")
        take_response(agent, timeout=WAIT)
        approve(agent, "x", arguments={"path": 7})  # prepare_arguments makes it "7"
        continue_agent(agent)
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
        assert ran.calls == [("delete", {"path": "7"})]
    finally:
        shutdown(agent)
