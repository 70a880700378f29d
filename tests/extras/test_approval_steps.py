"""Reading the approval steps of a history (decision 18; docs/sessions.md "Pending approvals live in the history").

``waiting_calls`` is what every verb and run reads; ``resume_approvals`` what a run does first.
Both take plain histories here, as a session or a file gives them.
"""

from __future__ import annotations

import pytest

from helpers import calls_reply, call
from yiemagent import AgentLoopConfig, ApprovalMessage, PendingApproval, TextContent, UserMessage
from yiemagent.approvals import Resumed, Waiting, resume_approvals, waiting_calls
from yiemagent.extraction import extract_tool_calls

REPLY = calls_reply(call("c1", "delete", '{"path": "/a"}'), call("c2", "delete", '{"path": "/b"}'))
C1, C2 = extract_tool_calls(REPLY)[1]
USER = UserMessage([TextContent("clean up")])


def step(call_id: str, decision: str, arguments: dict, reason: str = "") -> ApprovalMessage:
    return ApprovalMessage(call_id, "delete", decision, arguments, reason)


DEFERRED = step("c1", "deferred", {"path": "/a"}, "ask")
APPROVED = step("c1", "approved", {"path": "/a2"})


@pytest.mark.parametrize("history", [[], [USER], [USER, DEFERRED]], ids=["empty", "user only", "a step but no reply"])
def test_a_history_without_an_assistant_message_has_no_reply_and_nothing_waiting(history):
    """No assistant message: there is no last reply, and no call can wait."""
    assert waiting_calls(history) == (None, {})


def test_a_history_ending_with_a_reply_gives_that_reply_and_nothing_waiting():
    """The last message is the reply: nothing was deferred after it."""
    assert waiting_calls([USER, REPLY]) == (REPLY, {})


def test_a_reply_that_opens_the_history_is_read_like_any_other():
    """The reply at index 0 (a history that starts with the assistant) is still the last reply, its deferred call waiting."""
    assert waiting_calls([REPLY, DEFERRED]) == (REPLY, {"c1": Waiting(C1, "deferred", {"path": "/a"}, "ask", "ask")})


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([DEFERRED, APPROVED], Waiting(C1, "approved", {"path": "/a2"}, "ask", "ask")),
        ([DEFERRED, APPROVED, step("c1", "rejected", {"path": "/a"}, "no")], Waiting(C1, "rejected", {"path": "/a2"}, "no", "ask")),
        ([DEFERRED, APPROVED, step("c1", "resumed", {"path": "/a2"}), step("c1", "approved", {"path": "/a3"})], Waiting(C1, "resumed", {"path": "/a2"}, "ask", "ask")),
    ],
    ids=["approved", "rejected after approval", "decided after it started"],
)
def test_the_latest_decision_counts_until_the_call_starts(steps, expected):
    """Each step replaces the decision: only an approval changes the arguments, only a rejection the reason; once "resumed", later steps are ignored."""
    assert waiting_calls([USER, REPLY, *steps]) == (REPLY, {"c1": expected})


def test_a_decision_for_a_call_that_was_never_deferred_is_ignored():
    """A step other than "deferred" for a call with no deferral before it does not make it wait."""
    assert waiting_calls([USER, REPLY, APPROVED, step("c2", "rejected", {}, "no")]) == (REPLY, {})


def test_resume_with_nothing_waiting_does_nothing():
    """resume_approvals on a history with no waiting call appends nothing: no results, nothing pending, no terminate."""
    appended = []
    resumed = resume_approvals(lambda: [USER, REPLY], appended.append, "", {}, AgentLoopConfig(), None, None)
    assert resumed == Resumed([], [], False)
    assert appended == []


def test_resume_answers_the_rejected_call_and_leaves_the_undecided_one_pending():
    """Only a rejection decided: its error result is appended and returned, the undecided call is pending, and nothing asks to terminate."""
    history = [USER, REPLY, DEFERRED, step("c2", "deferred", {"path": "/b"}, "ask too"), step("c1", "rejected", {"path": "/a"}, "no")]
    appended = []
    resumed = resume_approvals(lambda: history + appended, appended.append, "", {}, AgentLoopConfig(), None, None)
    assert [(r.tool_call_id, r.tool_name, r.content, r.is_error) for r in resumed.results] == [("c1", "delete", [TextContent("no")], True)]
    assert resumed.results == appended
    assert resumed.pending == [PendingApproval("c2", "delete", {"path": "/b"}, "ask too")]
    assert resumed.terminate is False


def test_resume_runs_an_approved_call_without_a_run_scope():
    """An approved call resumed by a caller that gives no run scope (the function's default) runs and is answered; no scope is asked for."""
    from yiemagent import AgentTool, AgentToolResult
    from yiemagent.events import EventEmitter

    ran = []

    def delete(tool_call_id, args, signal, on_partial_result):
        ran.append(args)
        return AgentToolResult([TextContent(f"deleted {args['path']}")])

    tool = AgentTool("delete", "Delete", "Delete a file.", {"type": "object", "properties": {"path": {"type": "string"}}}, delete)
    history = [USER, REPLY, DEFERRED, APPROVED]
    appended = []
    resumed = resume_approvals(lambda: history + appended, appended.append, "", {"delete": tool}, AgentLoopConfig(), None, EventEmitter(None))
    assert ran == [{"path": "/a2"}]
    assert [(r.tool_call_id, r.content, r.is_error) for r in resumed.results] == [("c1", [TextContent("deleted /a2")], False)]
    assert resumed.terminate is False


def test_a_run_aborted_as_it_resumes_approvals_does_not_read_the_batch_for_its_answer():
    """start_of_run with the run's signal already aborted runs nothing more and never hands the resumed batch to ``answered`` (the typed answer's reading)."""
    from helpers import BareHost
    from yiemagent import AbortSignal
    from yiemagent.approvals import start_of_run

    host = BareHost(llm=None, queued=[])
    for message in (USER, REPLY, DEFERRED, step("c1", "rejected", {"path": "/a"}, "no")):
        host.state.messages.append(message)
    signal = AbortSignal()
    signal.abort("stop")
    read = []
    start_of_run(host, signal, [], lambda *batch: read.append(batch))
    assert read == []
    assert [r.tool_call_id for r in host.appended] == ["c1"]  # the rejection is still answered: nothing waits after an abort
