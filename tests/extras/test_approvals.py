"""Approvals that wait for a person (beyond the spec; decision 18; docs/api.md "Approvals that wait for a person")."""

from __future__ import annotations

import threading

import pytest

from helpers import WAIT, StrictLLM, blocking_tool, call, calls_reply, make_agent, make_tool, text_result
from yiemagent import (
    AbortSignal,
    ApprovalMessage,
    AssistantMessage,
    EmptyHistoryError,
    MessageFormatError,
    PendingApproval,
    SQLiteSession,
    TextContent,
    ToolArgumentsError,
    ToolExecEndEvent,
    ToolExecStartEvent,
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


def approval_steps(history) -> list[tuple[str, str, dict, str]]:
    return [(m.tool_call_id, m.decision, m.arguments, m.reason) for m in history if isinstance(m, ApprovalMessage)]


def deferred_agent(ran: Ran, llm: StrictLLM, **kwargs):
    agent = make_agent(llm, ran.tool("delete"), ran.tool("read"), builtin_tools=False, before_tool_call=defer_deletes, **kwargs)
    run_agent(agent, "clean up")
    return agent, take_response(agent, timeout=WAIT)


def resume_approved(agent, *approved: str) -> None:
    """run_agent ends "awaiting_approval"; approve the ``approved`` calls as they are; continue_agent (its response not taken)."""
    run_agent(agent, "go")
    assert take_response(agent, timeout=WAIT).stop_reason == "awaiting_approval"
    for call_id in approved:
        approve(agent, call_id)
    continue_agent(agent)


def approved_once(hook, **kwargs) -> tuple[Ran, list]:
    """One call "x" of 'delete' that ``hook`` defers, approved as it is, then continue_agent to the end: what ran, and the history."""
    ran = Ran()
    llm = StrictLLM(calls_reply(call("x", "delete", '{"path": "/p"}')), AssistantMessage([TextContent("ok")], stop_reason="stop"))
    agent = make_agent(llm, ran.tool("delete"), builtin_tools=False, before_tool_call=hook, **kwargs)
    try:
        resume_approved(agent, "x")
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
        return ran, agent.history()
    finally:
        shutdown(agent)


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
        # each decision is a step (an approval has no reason, a rejection keeps the call's arguments), and "resumed" comes before the run
        assert approval_steps(agent.history()) == [
            ("c1", "deferred", {"path": "/tmp/a"}, "deleting /tmp/a needs approval"),
            ("c3", "deferred", {"path": "/tmp/c"}, "deleting /tmp/c needs approval"),
            ("c1", "approved", {"path": "/tmp/a2"}, ""),
            ("c3", "rejected", {"path": "/tmp/c"}, "not that one"),
            ("c1", "resumed", {"path": "/tmp/a2"}, ""),
        ]
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

    ran, _ = approved_once(hook)
    assert seen == ["x", "x"]
    assert ran.calls == [("delete", {"path": "/p"})]


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
        results = results_by_call(agent.history())
        assert {k: len(v) for k, v in results.items()} == {"c1": 1, "c2": 1, "c3": 1}
        for call_id in ("c1", "c3"):  # the deferred calls: the pipeline's abort result, an error for the tool that was asked
            result = results[call_id][0]
            assert (result.tool_name, result.content, result.details, result.is_error) == ("delete", [TextContent("Operation aborted")], {}, True)
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
        resume_approved(agent, "c1")
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


def test_the_awaiting_response_names_each_waiting_call_with_the_reason_it_waits():
    """The response of a run that ends "awaiting_approval" lists each deferred call, its tool and the hook's reason, in call order."""
    ran, llm = Ran(), StrictLLM(three_calls())
    agent, response = deferred_agent(ran, llm)
    shutdown(agent)
    assert response.content == [
        TextContent(
            "Awaiting approval of 2 tool call(s): delete (c1): deleting /tmp/a needs approval; delete (c3): deleting /tmp/c needs approval"
        )
    ]


def test_a_rejected_call_gets_its_start_and_end_events_in_the_run_that_answers_it():
    """Decision 1 for a rejection: the resuming run emits the rejected call's start and end events, the end an error with the reason."""
    events = []
    ran, llm = Ran(), StrictLLM(three_calls(), AssistantMessage([TextContent("ok")], stop_reason="stop"))
    agent, _ = deferred_agent(ran, llm, sink=events.append)
    try:
        reject(agent, "c1", "no")
        reject(agent, "c3", "not that either")
        del events[:]
        continue_agent(agent)
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
    finally:
        shutdown(agent)
    starts = [(e.tool_call_id, e.tool_name, e.arguments) for e in events if isinstance(e, ToolExecStartEvent)]
    ends = [(e.tool_call_id, e.is_error, e.result.content) for e in events if isinstance(e, ToolExecEndEvent)]
    assert starts == [("c1", "delete", {"path": "/tmp/a"}), ("c3", "delete", {"path": "/tmp/c"})]
    assert ends == [("c1", True, [TextContent("no")]), ("c3", True, [TextContent("not that either")])]


def test_a_new_message_answers_a_rejected_call_with_its_reason_and_the_undecided_one_as_superseded():
    """add_message of a user message while idle: a rejected call's result is its rejection's reason, an undecided call's "superseded by a new message"."""
    ran, llm = Ran(), StrictLLM(three_calls())
    agent, _ = deferred_agent(ran, llm)
    try:
        reject(agent, "c1", "not now")
        add_message(agent, UserMessage([TextContent("a note")]))
        results = results_by_call(agent.history())
    finally:
        shutdown(agent)
    assert [(r.content, r.is_error) for r in results["c1"]] == [([TextContent("not now")], True)]
    assert [(r.content, r.is_error) for r in results["c3"]] == [([TextContent("superseded by a new message")], True)]
    assert ran.calls == [("read", {"path": "/tmp/b"})]


def test_a_decision_that_is_refused_names_the_id_given_and_the_calls_that_do_wait():
    """approve / reject of a call that is not waiting raise ValueError naming it (any value, even unhashable) and listing the ids waiting, or "none"."""
    ran, llm = Ran(), StrictLLM(three_calls(), AssistantMessage([TextContent("ok")], stop_reason="stop"))
    agent, _ = deferred_agent(ran, llm)
    try:
        with pytest.raises(ValueError) as refused:
            approve(agent, "c2")
        assert str(refused.value) == "no tool call 'c2' is waiting for approval (waiting: 'c1', 'c3')"
        with pytest.raises(ValueError) as refused:
            reject(agent, ["c1"])
        assert str(refused.value) == "no tool call ['c1'] is waiting for approval (waiting: 'c1', 'c3')"
        reject(agent, "c1")
        reject(agent, "c3")
        continue_agent(agent)
        take_response(agent, timeout=WAIT)
        with pytest.raises(ValueError) as refused:
            approve(agent, "c1")
        assert str(refused.value) == "no tool call 'c1' is waiting for approval (waiting: none)"
    finally:
        shutdown(agent)


def test_approve_refuses_arguments_that_are_not_a_dict_and_a_prepare_arguments_that_raises():
    """approve's ToolArgumentsError names the type given, or the tool and what its prepare_arguments raised; nothing is recorded."""

    def renamed(args):
        return {"path": args["where"]}

    ran = Ran()
    llm = StrictLLM(calls_reply(call("x", "delete", '{"where": "/p"}')))
    agent = make_agent(llm, ran.tool("delete", prepare_arguments=renamed), builtin_tools=False, before_tool_call=defer_deletes)
    try:
        run_agent(agent, "go")
        assert take_response(agent, timeout=WAIT).stop_reason == "awaiting_approval"
        with pytest.raises(ToolArgumentsError) as refused:
            approve(agent, "x", arguments=["/q"])
        assert str(refused.value) == "approve(arguments=...) expects a dict of arguments, got list"
        with pytest.raises(ToolArgumentsError) as refused:
            approve(agent, "x", arguments={"path": "/q"})
        assert str(refused.value) == "prepare_arguments of tool 'delete' raised KeyError: 'where'"
        assert isinstance(refused.value.__cause__, KeyError)
        assert [m.decision for m in agent.history() if isinstance(m, ApprovalMessage)] == ["deferred"]
    finally:
        shutdown(agent)


def test_the_hook_asked_again_sees_the_run_that_resumes_the_call_and_an_answer_of_none_lets_it_run():
    """For an approved call before_tool_call gets the agent's system prompt, the history up to the "resumed" step, the reply with the call, and the run's abort signal."""
    seen = []

    def hook(ctx, signal):
        seen.append((ctx.context.system_prompt, ctx.assistant_message, ctx.context.messages[-1], signal))
        return {"defer": True, "reason": "ask"} if len(seen) == 1 else None

    ran, history = approved_once(hook, system_prompt="Ask before deleting.")
    prompt, assistant, last, signal = seen[1]
    assert (prompt, assistant) == ("Ask before deleting.", history[1])
    assert (last.role, last.tool_call_id, last.decision) == ("approval", "x", "resumed")
    assert isinstance(signal, AbortSignal) and not signal.aborted
    assert ran.calls == [("delete", {"path": "/p"})]


def test_the_hook_asked_again_can_still_block_an_approved_call_with_its_reason():
    """A defer is ignored for an approved call, the rest of the answer is not: {"defer", "block", "reason"} blocks it with that reason, as it would any call (spec §14)."""
    answers = iter([{"defer": True, "reason": "ask"}, {"defer": True, "block": True, "reason": "the file is locked now"}])
    ran, history = approved_once(lambda ctx, signal: next(answers))
    assert [(r.content, r.is_error) for r in results_by_call(history)["x"]] == [([TextContent("the file is locked now")], True)]
    assert ran.calls == []


def test_the_hook_asked_again_answering_neither_none_nor_a_dict_is_named_as_for_any_call():
    """An approved call whose hook, asked again, answers a str gets the pipeline's own error result naming the type (spec §14), the tool not run."""
    answers = iter([{"defer": True, "reason": "ask"}, "yes"])
    ran, history = approved_once(lambda ctx, signal: next(answers))
    [result] = results_by_call(history)["x"]
    assert result.is_error and "before_tool_call hook returned str; expected None or a dict" in result.content[0].text
    assert ran.calls == []


def test_approved_calls_that_all_ask_to_terminate_end_the_resuming_run_without_an_llm_round():
    """Spec §10 for resumed calls: when every approved call's result asks to terminate, the run ends "tool_use_terminated" with the results' text."""
    def handoff(tool_call_id, args, signal, on_partial_result):
        return text_result(f"handed {args['path']} to the archive", terminate=True)

    llm = StrictLLM(calls_reply(call("c1", "delete", '{"path": "/tmp/a"}'), call("c3", "delete", '{"path": "/tmp/c"}')))
    agent = make_agent(llm, make_tool("delete", handoff, schema=SCHEMA_PATH), builtin_tools=False, before_tool_call=defer_deletes)
    try:
        resume_approved(agent, "c1", "c3")
        response = take_response(agent, timeout=WAIT)
    finally:
        shutdown(agent)
    assert (response.stop_reason, response.error_message) == ("tool_use_terminated", None)
    assert response.content == [
        TextContent("Tool execution completed."), TextContent("handed /tmp/a to the archive"), TextContent("handed /tmp/c to the archive"),
    ]
    assert len(llm.requests) == 1


def test_a_decision_on_a_call_that_has_started_is_refused_while_it_runs():
    """While an approved call runs (its "resumed" step written, no result yet) it no longer waits: a decision on it raises, the others stay waiting."""
    delete, entered, release = blocking_tool("delete", WAIT)
    llm = StrictLLM(three_calls())
    agent = make_agent(llm, delete, Ran().tool("read"), builtin_tools=False, before_tool_call=defer_deletes)
    try:
        resume_approved(agent, "c1")
        assert entered.wait(WAIT)
        try:
            with pytest.raises(ValueError) as refused:
                reject(agent, "c1")
            assert str(refused.value) == "no tool call 'c1' is waiting for approval (waiting: 'c3')"
            assert [p.tool_call_id for p in pending_approvals(agent)] == ["c3"]
        finally:
            release.set()
        assert take_response(agent, timeout=WAIT).stop_reason == "awaiting_approval"
    finally:
        shutdown(agent)


def test_a_call_left_started_without_a_result_is_answered_as_lost_and_never_run_again():
    """A history whose approved call has a "resumed" step and no result (given as messages=): the next run answers it with the lost-call text, not a second run."""
    from yiemagent.approvals import LOST_AFTER_RESUME

    history = [
        UserMessage([TextContent("clean up")]),
        calls_reply(call("c1", "delete", '{"path": "/tmp/a"}'), call("c3", "delete", '{"path": "/tmp/c"}')),
        ApprovalMessage("c1", "delete", "deferred", {"path": "/tmp/a"}, "ask"),
        ApprovalMessage("c3", "delete", "deferred", {"path": "/tmp/c"}, "ask"),
        ApprovalMessage("c1", "delete", "approved", {"path": "/tmp/a"}),
        ApprovalMessage("c1", "delete", "resumed", {"path": "/tmp/a"}),
    ]
    ran = Ran()
    agent = make_agent(StrictLLM(), ran.tool("delete"), builtin_tools=False, before_tool_call=defer_deletes, messages=history)
    try:
        assert [p.tool_call_id for p in pending_approvals(agent)] == ["c3"]
        continue_agent(agent)
        assert take_response(agent, timeout=WAIT).stop_reason == "awaiting_approval"
        results = results_by_call(agent.history())
    finally:
        shutdown(agent)
    assert [(r.content, r.is_error) for r in results["c1"]] == [([TextContent(LOST_AFTER_RESUME)], True)]
    assert "c3" not in results and ran.calls == []


def test_decisions_sent_as_input_during_a_run_are_taken_by_the_next_run_before_it_resumes():
    """Approval steps queued on the input while the deferring run is busy: the next run appends them all first, then runs the approved call and answers the rejected one."""
    read, entered, release = blocking_tool("read", WAIT)
    ran = Ran()
    llm = StrictLLM(three_calls(), AssistantMessage([TextContent("all done")], stop_reason="stop"))
    agent = make_agent(llm, ran.tool("delete"), read, builtin_tools=False, before_tool_call=defer_deletes)
    try:
        run_agent(agent, "clean up")
        assert entered.wait(WAIT)
        try:
            run_agent(agent, ApprovalMessage("c1", "delete", "approved", {"path": "/tmp/a"}))
            run_agent(agent, ApprovalMessage("c3", "delete", "rejected", {"path": "/tmp/c"}, "keep it"))
        finally:
            release.set()
        assert take_response(agent, timeout=WAIT).stop_reason == "awaiting_approval"
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
        results = results_by_call(agent.history())
    finally:
        shutdown(agent)
    assert ran.calls == [("delete", {"path": "/tmp/a"})]
    assert [(r.content, r.is_error) for r in results["c3"]] == [([TextContent("keep it")], True)]
    assert len(llm.requests) == 2


def test_pending_approvals_are_listed_in_call_order_whatever_the_ids():
    """Waiting calls come in the order of the reply's calls, not of their ids."""
    ran = Ran()
    llm = StrictLLM(calls_reply(call("b7", "delete", '{"path": "/b"}'), call("a9", "delete", '{"path": "/a"}')))
    agent = make_agent(llm, ran.tool("delete"), builtin_tools=False, before_tool_call=defer_deletes)
    try:
        run_agent(agent, "go")
        take_response(agent, timeout=WAIT)
        assert [p.tool_call_id for p in pending_approvals(agent)] == ["b7", "a9"]
    finally:
        shutdown(agent)


def test_a_deferred_call_whose_id_an_earlier_batch_used_still_waits():
    """Ids need only be unique within a reply: a deferred call reusing the id of the previous batch's answered call waits for its decision."""
    ran = Ran()
    llm = StrictLLM(calls_reply(call("call_0", "read", '{"path": "/b"}')), calls_reply(call("call_0", "delete", '{"path": "/a"}')))
    agent = make_agent(llm, ran.tool("delete"), ran.tool("read"), builtin_tools=False, before_tool_call=defer_deletes)
    try:
        run_agent(agent, "go")
        assert take_response(agent, timeout=WAIT).stop_reason == "awaiting_approval"
        assert pending_approvals(agent) == [PendingApproval("call_0", "delete", {"path": "/a"}, "deleting /a needs approval")]
    finally:
        shutdown(agent)


def test_approve_refuses_arguments_holding_a_lone_surrogate_naming_where_and_the_tool_never_runs_with_u_fffd():
    """Text UTF-8 cannot carry in approved arguments is a MessageFormatError naming its place; nothing is recorded, nothing runs."""
    ran = Ran()
    llm = StrictLLM(calls_reply(call("x", "delete", '{"path": "/p"}')), AssistantMessage([TextContent("ok")], stop_reason="stop"))
    agent = make_agent(llm, ran.tool("delete"), builtin_tools=False, before_tool_call=defer_deletes)
    try:
        run_agent(agent, "go")
        assert take_response(agent, timeout=WAIT).stop_reason == "awaiting_approval"
        with pytest.raises(MessageFormatError) as refused:
            approve(agent, "x", arguments={"path": "x\ud800y"})
        assert isinstance(refused.value, ValueError)
        assert "arguments/path holds a lone surrogate (U+D800) at position 1" in str(refused.value)
        with pytest.raises(MessageFormatError, match="arguments holds a key '.' with a lone surrogate"):  # a step made by hand
            add_message(agent, ApprovalMessage("x", "delete", "approved", {"path": "/q", "\udfff": 1}))
        assert [m.decision for m in agent.history() if isinstance(m, ApprovalMessage)] == ["deferred"]
        approve(agent, "x")
        continue_agent(agent)
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
        assert ran.calls == [("delete", {"path": "/p"})]
    finally:
        shutdown(agent)
