"""The agent core under attack (docs/conformance.md "Review 2: the merged agent core"): add_message racing the
run's ends and shutdown, a session that hangs or raises, usage of rounds that failed.

Each test names the promise it checks; each failed before the fix it came with.
"""

from __future__ import annotations

import queue
import threading

import pytest

from helpers import WAIT, EventRecorder, blocking_tool, make_tool, text_result
from yiemagent import (
    AgentRunEndEvent,
    AssistantMessage,
    LLMCallEndEvent,
    LLMUsage,
    TextContent,
    UserMessage,
    add_message,
    reject,
    run_agent,
    shutdown,
    take_response,
)
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply

STALL = 6 * WAIT  # how long a stalled session waits for release: longer than any join below, so a test that is blocked fails


def user(text: str) -> UserMessage:
    return UserMessage([TextContent(text)])


def texts(messages) -> list:
    return [m.content[0].text if m.content and isinstance(m.content[0], TextContent) else m.role for m in messages]


class HangingSession:
    """A session whose ``append`` of a message with text ``hang_on`` blocks until ``release`` (a disk that stalls)."""

    def __init__(self, hang_on: str) -> None:
        self.hang_on = hang_on
        self.stored: list = []
        self.hanging, self.release = threading.Event(), threading.Event()

    def messages(self):
        return []

    def append(self, message):
        content = getattr(message, "content", None)  # an approval step has none
        if content and getattr(content[0], "text", None) == self.hang_on:
            self.hanging.set()
            self.release.wait(STALL)
        self.stored.append(message)

    def clear(self):
        self.stored.clear()


def in_thread(fn, *args):
    """Run ``fn`` on a thread; return (thread, outcome list) so a test can join it with a deadline."""
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(fn(*args)), daemon=True)
    thread.start()
    return thread, outcome


def blocking_llm(final: str = "final"):
    """An llm_call that signals ``entered`` and returns ``final`` once ``release`` is set."""
    entered, release = threading.Event(), threading.Event()

    def answer(formatted):
        entered.set()
        release.wait(WAIT)
        return AssistantMessage([TextContent(final)], stop_reason="stop")

    return answer, entered, release


def test_a_session_hanging_on_a_message_added_in_the_last_round_does_not_hang_shutdown(agents):
    """A message added during the run's last round is stored as the run ends; a session that stalls there must
    not hold the agent's doorbell lock: sends and shutdown(timeout) still return, and the message lands."""
    answer, entered, release = blocking_llm()
    session = HangingSession("late")
    agent = agents(ScriptedLLM([answer]), session=session)
    run_agent(agent, "go")
    assert entered.wait(WAIT)
    add_message(agent, user("late"))
    release.set()
    assert session.hanging.wait(WAIT)
    sender, _ = in_thread(run_agent, agent, "more")
    sender.join(WAIT)
    assert not sender.is_alive(), "run_agent blocked behind the session"
    stopper, returned = in_thread(shutdown, agent, 0.2)
    stopper.join(WAIT)
    assert not stopper.is_alive(), "shutdown blocked behind the session"
    assert returned == [[{"role": "user", "content": "more"}]]
    session.release.set()
    assert take_response(agent, timeout=WAIT).content[0].text == "final"
    assert texts(agent.history()) == ["go", "final", "late"]
    assert texts(session.stored) == ["go", "final", "late"]


def test_a_session_hanging_in_add_message_while_idle_does_not_hang_sends_or_shutdown(agents):
    """add_message while idle stores first; a stalled store blocks that caller only, and the run its
    message precedes waits for it, so the order stays the session's."""
    session = HangingSession("note")
    agent = agents(ScriptedLLM(["answer"]), session=session)
    adder, _ = in_thread(add_message, agent, user("note"))
    assert session.hanging.wait(WAIT)
    sender, _ = in_thread(run_agent, agent, "go")
    sender.join(WAIT)
    assert not sender.is_alive(), "run_agent blocked behind add_message's session"
    session.release.set()
    adder.join(WAIT)
    assert take_response(agent, timeout=WAIT).content[0].text == "answer"
    assert texts(agent.history()) == ["note", "go", "answer"] and texts(session.stored) == ["note", "go", "answer"]


def test_shutdown_while_add_message_hangs_in_the_session_returns(agents):
    """shutdown(timeout) returns while an idle add_message is stuck in the session."""
    session = HangingSession("note")
    agent = agents(ScriptedLLM([]), session=session)
    adder, _ = in_thread(add_message, agent, user("note"))
    assert session.hanging.wait(WAIT)
    stopper, returned = in_thread(shutdown, agent, 0.2)
    stopper.join(WAIT)
    alive = stopper.is_alive()
    session.release.set()
    adder.join(WAIT)
    assert not alive, "shutdown blocked behind add_message's session"
    assert returned == [[]] and texts(agent.history()) == ["note"]


def test_history_can_be_read_while_the_session_hangs_in_the_run(agents):
    """agent.history() is 'safe to take from any thread': a stalled session store does not block it; the
    message is in memory already (memory first, then the session)."""
    answer, entered, release = blocking_llm("final")
    release.set()
    session = HangingSession("final")
    agent = agents(ScriptedLLM([answer]), session=session)
    run_agent(agent, "go")
    assert session.hanging.wait(WAIT)
    reader, seen = in_thread(agent.history)
    reader.join(WAIT)
    alive = reader.is_alive()
    session.release.set()
    assert not alive, "history() blocked behind the session"
    assert texts(seen[0]) == ["go", "final"]
    assert take_response(agent, timeout=WAIT).content[0].text == "final"


def test_messages_added_to_a_run_that_shutdown_abandons_are_returned_by_shutdown(agents):
    """Decision 16 for add_message: a run shutdown gives up on (an llm_call that ignores the abort) may never
    reach another round, so the messages added to it are returned by shutdown, and never appended later."""
    answer, entered, release = blocking_llm("late reply")
    agent = agents(ScriptedLLM([answer]))
    run_agent(agent, "go")
    assert entered.wait(WAIT)
    note = user("note")
    add_message(agent, note)
    returned = shutdown(agent, timeout=0.1)
    assert note in returned
    release.set()
    assert take_response(agent, timeout=WAIT).stop_reason == "aborted"
    assert "note" not in texts(agent.history())


def test_a_message_added_before_shutdown_joins_the_runs_next_round(agents):
    """shutdown lets the active run finish, and a message added to it before then joins its next LLM round
    (API.md: 'joins the history at that run's next round'), not only the history after the run."""
    slow, in_tool, release = blocking_tool("slow", WAIT)
    llm = ScriptedLLM([tool_call_reply(("c1", "slow", {})), "final"])
    agent = agents(llm, [slow])
    run_agent(agent, "go")
    assert in_tool.wait(WAIT)
    add_message(agent, user("meanwhile"))
    stopper, returned = in_thread(shutdown, agent, WAIT)
    with agent._core._wake:  # wait until shutdown has closed the agent (no polling: the doorbell rings on close)
        agent._core._wake.wait_for(lambda: agent.closing, WAIT)
    release.set()
    stopper.join(WAIT)
    assert returned == [[]]
    assert take_response(agent, timeout=WAIT).content[0].text == "final"
    assert llm.requests[1]["messages"][-1] == {"role": "user", "content": "meanwhile"}


class ExitingSession:
    """A session whose ``append`` raises SystemExit (a library calling sys.exit) on message ``on``."""

    def __init__(self, on: str) -> None:
        self.on = on

    def messages(self):
        return []

    def append(self, message):
        if message.content and getattr(message.content[0], "text", None) == self.on:
            raise SystemExit(3)

    def clear(self):
        pass


def test_a_session_raising_system_exit_on_a_late_added_message_still_delivers_the_response(agents):
    """HistoryWriter.append 'never raises': a session that raises SystemExit storing a message added in the
    last round must not strand the run's response (take_response would wait for ever)."""
    answer, entered, release = blocking_llm()
    agent = agents(ScriptedLLM([answer]), session=ExitingSession("late"))
    run_agent(agent, "go")
    assert entered.wait(WAIT)
    add_message(agent, user("late"))
    release.set()
    assert take_response(agent, timeout=WAIT).content[0].text == "final"
    assert agent.wait_until_idle(WAIT)
    run_agent(agent, "again")
    response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "error" and "SystemExit" in response.error_message


def test_the_tokens_of_a_reply_refused_by_decision_15_still_count(agents):
    """Usage sums every LLM round: a reply whose content cannot enter the history ends the run with an error,
    but its tokens were spent and count in the round's end event, the run's usage and agent.usage."""
    spent = LLMUsage(input_tokens=10, output_tokens=5, total_tokens=15)
    bad = AssistantMessage({"not": "a list"}, stop_reason="stop", usage=spent)
    recorder = EventRecorder()
    agent = agents(ScriptedLLM([bad]), agent_event_sink=recorder)
    run_agent(agent, "go")
    assert take_response(agent, timeout=WAIT).stop_reason == "error"
    assert agent.wait_until_idle(WAIT)
    assert recorder.of_type(LLMCallEndEvent)[0].usage == spent
    assert recorder.of_type(AgentRunEndEvent)[0].usage == spent
    assert agent.usage == spent


@pytest.mark.parametrize("op", ["shutdown", "abort"])
def test_a_tool_that_adds_a_message_then_stops_its_own_agent(agents, op):
    """A tool calling add_message and then shutdown/abort on its own agent: no deadlock, the message lands
    after the tool's result, and the run ends with its response delivered."""
    from yiemagent import abort

    holder = {}

    def selfish(*args):
        add_message(holder["agent"], user("from the tool"))
        (shutdown if op == "shutdown" else abort)(holder["agent"])
        return text_result("stopped myself")

    llm = ScriptedLLM([tool_call_reply(("c1", "selfish", {})), "final"])
    agent = agents(llm, [make_tool("selfish", selfish)])
    holder["agent"] = agent
    run_agent(agent, "go")
    response = take_response(agent, timeout=WAIT)
    if op == "shutdown":  # the run goes on to its next round, which sees the added message
        assert response.content[0].text == "final"
        assert texts(agent.history())[-3:] == ["stopped myself", "from the tool", "final"]
    else:
        assert response.stop_reason == "aborted"
        assert texts(agent.history())[-2:] == ["stopped myself", "from the tool"]


def test_a_dropped_agent_with_a_session_stores_what_was_added_to_its_run(tmp_path):
    """The finalizer of an agent dropped mid-run aborts the run; a message added to that run still enters the
    history and the session as the run ends, and the threads end."""
    import gc

    from yiemagent import SQLiteSession, YiemAgent

    answer, entered, release = blocking_llm("never kept")
    with SQLiteSession(tmp_path / "s.db", "dropped") as session:
        agent = YiemAgent(llm_call=ScriptedLLM([answer]), agent_event_sink=None, session=session, builtin_tools=False)
        run_agent(agent, "go")
        assert entered.wait(WAIT)
        add_message(agent, user("note"))
        core = agent._core
        with pytest.warns(ResourceWarning, match="without shutdown"):
            del agent
            gc.collect()
        release.set()
        core._thread.join(WAIT)
        core._worker.thread.join(WAIT)
        assert not core._thread.is_alive() and not core._worker.thread.is_alive()
        assert texts(session.messages()) == ["go", "note"]


def test_a_run_does_not_start_between_add_messages_choice_and_its_append(agents, monkeypatch):
    """add_message chose 'append now' (no run), then was preempted before storing: a run_agent meanwhile must
    not start a run that appends its input first. The added message comes first, as the caller saw it."""
    from yiemagent import AgentRunStartEvent
    from yiemagent.run import HistoryWriter

    preempted, resume = threading.Event(), threading.Event()
    original = HistoryWriter.append_stored_first

    def slow_to_store(self, message):
        preempted.set()
        resume.wait(WAIT)
        original(self, message)

    monkeypatch.setattr(HistoryWriter, "append_stored_first", slow_to_store)
    started = threading.Event()

    def sink(event):
        if isinstance(event, AgentRunStartEvent):
            started.set()

    agent = agents(ScriptedLLM(["answer"]), agent_event_sink=sink)
    adder, _ = in_thread(add_message, agent, user("note"))
    assert preempted.wait(WAIT)
    run_agent(agent, "go")
    assert not started.wait(0.5), "a run started while add_message was between its choice and its append"
    resume.set()
    adder.join(WAIT)
    assert take_response(agent, timeout=WAIT).content[0].text == "answer"
    assert texts(agent.history()) == ["note", "go", "answer"]


def test_a_message_added_in_the_last_round_lands_before_the_next_runs_input(agents):
    """Input queued during the last round starts the next run; a message added meanwhile is appended as the
    first run ends, so it comes before that input, and the next run's LLM round sees it."""
    answer, entered, release = blocking_llm("first answer")
    llm = ScriptedLLM([answer, "second answer"])
    agent = agents(llm)
    run_agent(agent, "go")
    assert entered.wait(WAIT)
    run_agent(agent, "next")
    add_message(agent, user("late"))
    release.set()
    assert take_response(agent, timeout=WAIT).content[0].text == "first answer"
    assert take_response(agent, timeout=WAIT).content[0].text == "second answer"
    assert texts(agent.history()) == ["go", "first answer", "late", "next", "second answer"]
    assert [m["content"] for m in llm.requests[1]["messages"] if m["role"] == "user"] == ["go", "late", "next"]


class _Unreadable(list):
    """Content that raises RuntimeError when read (a hand-made item put straight on the input channel)."""

    def __iter__(self):
        raise RuntimeError("boom")

    def __len__(self):
        raise RuntimeError("boom")


def test_an_item_put_on_the_input_channel_that_raises_when_read_is_dropped_and_the_agent_serves_on(agents):
    """The input channel takes items put by hand; one whose reading raises anything (not only ValueError) is
    dropped and logged, and a run left with nothing to answer ends "error" naming it without an LLM round (which
    would put an assistant message first in the history). Before, the exception escaped the run: no response
    ever came and no run started again."""
    llm = ScriptedLLM(["answer"])
    agent = agents(llm)
    agent.input_channel.put({"role": "user", "content": _Unreadable()})
    response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "error" and "not a valid user message" in response.error_message and "RuntimeError: boom" in response.error_message
    assert llm.requests == [] and agent.history() == []
    run_agent(agent, "again")
    assert take_response(agent, timeout=WAIT).content[0].text == "answer"
    assert texts(agent.history()) == ["again", "answer"]


def test_a_run_that_fails_outside_its_pipeline_still_ends_and_the_agent_serves_on(agents, monkeypatch, caplog):
    """A bug that escapes process_message (here injected) still ends the run with an "error" response naming
    it (and logged with its traceback), so the loop collects the run instead of waiting for it for ever; the
    next run gets the next run id."""
    import yiemagent.loop as core_module

    real = core_module.process_message
    calls = []

    def broken_once(host, run):
        calls.append((host, run.id))
        if len(calls) == 1:
            raise RuntimeError("a bug in the run")
        return real(host, run)

    monkeypatch.setattr(core_module, "process_message", broken_once)
    agent = agents(ScriptedLLM(["answer"]))
    run_agent(agent, "go")
    response = take_response(agent, timeout=WAIT)
    assert (response.content, response.stop_reason, response.error_message) == ([], "error", "internal error: RuntimeError: a bug in the run")
    [record] = [r for r in caplog.records if r.exc_info and r.exc_info[0] is RuntimeError]
    assert (record.name, record.levelname, record.getMessage()) == ("yiemagent.agent", "ERROR", "run 1 failed outside its pipeline")
    run_agent(agent, "again")
    assert take_response(agent, timeout=WAIT).content[0].text == "answer"
    assert [run_id for host, run_id in calls if host is agent._core][:2] == [1, 2]


def test_a_response_that_finds_the_output_channel_full_is_kept_and_delivered_when_there_is_room(agents, monkeypatch):
    """Someone else may fill the output channel between the loop's look and its put: the response is kept
    (not lost, not replaced) and put again. Injected: the first put finds the channel full."""
    agent = agents(ScriptedLLM(["answer"]))
    real = agent.output_channel.put_internal
    refused = []

    def full_once(item):
        if not refused:
            refused.append(item)
            raise queue.Full
        real(item)

    monkeypatch.setattr(agent.output_channel, "put_internal", full_once)
    run_agent(agent, "go")
    response = take_response(agent, timeout=WAIT)
    assert response is refused[0] and response.content == [TextContent("answer")]
    assert agent.wait_until_idle(WAIT) and agent.output_channel.empty()


def test_the_agent_is_not_idle_while_a_response_is_on_its_way_to_the_output_channel(agents, monkeypatch):
    """The run is over and nothing is queued, but the loop is still putting the response on the output channel:
    wait_until_idle's timeout passes and it answers False (a bool, as documented). Injected: a slow put."""
    agent = agents(ScriptedLLM(["answer"]))
    real = agent.output_channel.put_internal
    putting, go = threading.Event(), threading.Event()

    def slow(item):
        putting.set()
        go.wait(WAIT)
        real(item)

    monkeypatch.setattr(agent.output_channel, "put_internal", slow)
    run_agent(agent, "go")
    assert putting.wait(WAIT)
    assert agent.wait_until_idle(0.05) is False
    go.set()
    assert take_response(agent, timeout=WAIT).content == [TextContent("answer")]
    assert agent.wait_until_idle(WAIT) is True


def test_no_run_starts_until_every_add_message_storing_meanwhile_is_in_the_history(agents):
    """Two add_message calls on an idle agent store one after the other (the session is slow): the agent is not
    idle, and no run starts, until both are in the history, not only the first; the run then sees both, before
    its own input."""
    session = HangingSession("first")
    second_hanging, second_release = threading.Event(), threading.Event()
    original = session.append

    def append(message):
        if getattr(message.content[0], "text", None) == "second":
            second_hanging.set()
            second_release.wait(STALL)
        original(message)

    session.append = append
    llm = ScriptedLLM(["answer"])
    agent = agents(llm, session=session)
    first, _ = in_thread(add_message, agent, user("first"))
    assert session.hanging.wait(WAIT)
    second, _ = in_thread(add_message, agent, user("second"))  # waits for the first to be stored
    with agent._core._wake:  # both calls counted as storing
        assert agent._core._wake.wait_for(lambda: agent._core._adding == 2, WAIT)
    session.release.set()
    assert second_hanging.wait(WAIT)
    first.join(WAIT)
    assert not first.is_alive()
    assert agent.wait_until_idle(0.05) is False, "idle while the second add_message was still storing"
    run_agent(agent, "go")
    second_release.set()
    second.join(WAIT)
    assert take_response(agent, timeout=WAIT).content[0].text == "answer"
    assert texts(agent.history()) == ["first", "second", "go", "answer"]
    assert [m["content"] for m in llm.requests[0]["messages"] if m["role"] == "user"] == ["first", "second", "go"]


def test_a_session_shutting_its_agent_down_as_the_run_appends_a_late_message_does_not_wait_for_itself(agents):
    """The session is called from the run thread, also as the run ends (a message added during the last round):
    a shutdown() made there is from inside the run, so it does not wait for the run it is part of."""
    answer, entered, release = blocking_llm("final")
    outcome = {}
    holder = {}

    class ShuttingSession:
        def messages(self):
            return []

        def append(self, message):
            if message.content and getattr(message.content[0], "text", None) == "late":
                outcome["queued"] = shutdown(holder["agent"])

        def clear(self):
            pass

    agent = agents(answer, session=ShuttingSession())
    holder["agent"] = agent
    run_agent(agent, "go")
    assert entered.wait(WAIT)
    add_message(agent, user("late"))
    release.set()
    assert take_response(agent, timeout=WAIT).content[0].text == "final"
    assert outcome == {"queued": []} and agent.closing


def answering_slowly(agents):
    """An agent whose call c1 waits for approval, and an add_message("first") in a thread answering it, its answer
    stalled in the session (until ``session.release``)."""
    session = HangingSession("superseded by a new message")
    llm = ScriptedLLM([tool_call_reply(("c1", "delete", {}))])
    defer = lambda ctx, signal: {"defer": True, "reason": "a person decides"}  # noqa: E731
    agent = agents(llm, [make_tool("delete", lambda *a: text_result("deleted"))], session=session, before_tool_call=defer)
    run_agent(agent, "clean up")
    assert take_response(agent, timeout=WAIT).stop_reason == "awaiting_approval"
    in_thread(add_message, agent, user("first"))
    assert session.hanging.wait(WAIT)
    return agent, session


def test_two_add_messages_at_once_while_a_call_waits_for_approval_answer_it_once(agents):
    """Decision 18: the first of two add_message calls answers the waiting call ("superseded by a new message");
    the second waits until that answer is in the history, so it finds nothing left to answer: one result per
    call, or the history could not be sent again."""
    agent, session = answering_slowly(agents)
    second, _ = in_thread(add_message, agent, user("second"))
    second.join(0.2)  # time for the second to read the history, if it did not wait for the first
    assert second.is_alive(), "the second add_message did not wait for the first to store"
    session.release.set()
    second.join(WAIT)
    results = [m for m in agent.history() if m.role == "tool"]
    assert [(r.tool_call_id, r.content) for r in results] == [("c1", [TextContent("superseded by a new message")])]
    assert [m.content[0].text for m in agent.history()[-2:]] == ["first", "second"]


def test_a_decision_made_while_add_message_answers_its_call_is_refused_not_recorded_after_the_answer(agents):
    """Decision 18: reject() while an add_message is answering the waiting call raises ValueError (the call is no
    longer waiting) once that answer is in; it never records a rejection after the call was answered "superseded"."""
    agent, session = answering_slowly(agents)

    def decide():
        try:
            reject(agent, "c1", "no")
            return "recorded"
        except ValueError as exc:
            return str(exc)

    rejecter, outcome = in_thread(decide)
    rejecter.join(0.2)  # time for reject to read the history while the answer is still being stored
    session.release.set()
    rejecter.join(WAIT)
    assert outcome == ["no tool call 'c1' is waiting for approval (waiting: none)"]
    steps = [m.decision for m in agent.history() if m.role == "approval"]
    assert steps == ["deferred"] and [m.content[0].text for m in agent.history()[-2:]] == ["superseded by a new message", "first"]
