"""The loop thread: six states, follow-ups, abort, continue, shutdown (spec §5, §10, decisions 1 and 7)."""

from __future__ import annotations

import contextvars
import logging
import queue
import sys
import threading
import time

import pytest

from helpers import WAIT, StrictLLM, check_wire, make_agent, make_tool, text_result
from yiemagent import (
    AgentClosedError,
    AssistantMessage,
    AgentRunStartEvent,
    EmptyHistoryError,
    LoopState,
    ToolStore,
    UserMessage,
    TextContent,
    YiemAgent,
    abort,
    add_message,
    approve,
    continue_agent,
    follow_up,
    format_msg_for_llm,
    pending_approvals,
    prepare_context,
    register_tool,
    run_agent,
    shutdown,
    take_response,
)
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.loop import Channel



class GatedLLM:
    """An LLM whose every call blocks until the test opens a gate; records what it saw."""

    def __init__(self):
        self.entered = threading.Semaphore(0)
        self.gates: list[threading.Event] = []
        self.requests = []
        self._lock = threading.Lock()

    def __call__(self, formatted):
        gate = threading.Event()
        with self._lock:
            self.gates.append(gate)
            self.requests.append(formatted)
        self.entered.release()
        assert gate.wait(WAIT), "the test never opened the gate"
        from yiemagent import AssistantMessage

        users = [m["content"] for m in formatted["messages"] if m["role"] == "user"]
        return AssistantMessage([TextContent(f"saw {users}")])

    def wait_entered(self):
        assert self.entered.acquire(timeout=WAIT), "the LLM was not called"

    def open(self):
        with self._lock:
            gates = list(self.gates)
        for gate in gates:
            gate.set()


def wait_for_state(agent, state):
    with agent._core._wake:
        assert agent._core._wake.wait_for(lambda: state in agent.loop_state_history, WAIT), list(agent.loop_state_history)


@pytest.mark.spec("5")
def test_states_of_a_simple_run():
    """Idle -> new message -> processing -> completed -> idle."""
    with make_agent(ScriptedLLM(["hi"])) as agent:
        assert agent.loop_state is LoopState.IDLE
        run_agent(agent, "hello")
        take_response(agent, timeout=WAIT)
        assert agent.wait_until_idle(WAIT)
        assert list(agent.loop_state_history) == [
            LoopState.IDLE,
            LoopState.NEW_MESSAGE,
            LoopState.PROCESSING,
            LoopState.COMPLETED,
            LoopState.IDLE,
        ]


@pytest.mark.spec("6")
@pytest.mark.spec("5")
def test_message_while_busy_is_queued_then_joins_the_next_round():
    """State 4: a message sent during a run is queued and taken into the history at the run's next LLM round."""
    llm = GatedLLM()
    tool = make_tool("t")
    script = ScriptedLLM([tool_call_reply(("a", "t", {})), "second round"])

    def first_blocks(formatted):
        if not llm.requests:
            llm(formatted)  # block the first round until the gate opens
            return script(formatted)
        return script(formatted)

    with make_agent(first_blocks, tool) as agent:
        run_agent(agent, "first")
        llm.wait_entered()
        with agent._core._wake:  # state 3: the run took its input, nothing is queued
            assert not agent._core._wake.wait_for(lambda: agent.loop_state is not LoopState.PROCESSING, 0.2), agent.loop_state
        run_agent(agent, "second")
        wait_for_state(agent, LoopState.INPUT_QUEUED)
        assert agent.loop_state is LoopState.INPUT_QUEUED
        llm.open()
        assert take_response(agent, timeout=WAIT).content[0].text == "second round"
        second_request_users = [m["content"] for m in script.requests[1]["messages"] if m["role"] == "user"]
        assert second_request_users == ["first", "second"]


@pytest.mark.spec("5")
def test_follow_up_while_busy_is_moved_into_input_after_queued_input():
    """State 5 -> 4: a follow-up during a run moves into the input channel, behind input already queued."""
    llm = GatedLLM()
    with make_agent(llm) as agent:
        run_agent(agent, "first")
        llm.wait_entered()
        run_agent(agent, "queued input")
        follow_up(agent, "follow-up")
        wait_for_state(agent, LoopState.FOLLOW_UP_QUEUED)
        history = list(agent.loop_state_history)
        assert history.index(LoopState.FOLLOW_UP_QUEUED) > history.index(LoopState.PROCESSING)
        assert all(isinstance(state, LoopState) for state in history), history
        llm.open()
        take_response(agent, timeout=WAIT)  # run 1 ends with one round: the two others start run 2
        llm.wait_entered()
        llm.open()
        assert take_response(agent, timeout=WAIT).content[0].text == "saw ['first', 'queued input', 'follow-up']"


@pytest.mark.spec("5")
def test_follow_up_while_idle_starts_a_run():
    """Decision 7: a follow-up sent to an idle agent is not stranded: it starts a run."""
    with make_agent(ScriptedLLM(["answered"])) as agent:
        follow_up(agent, "only a follow-up")
        assert take_response(agent, timeout=WAIT).content[0].text == "answered"


@pytest.mark.spec("5")
def test_idle_loop_is_blocked_not_polling():
    """While idle the loop thread sleeps on its condition: it evaluates nothing until a message arrives."""
    with make_agent(ScriptedLLM(["pong"])) as agent:
        assert agent.wait_until_idle(WAIT)
        calls = []
        real = agent._core._next_action

        def counting():
            calls.append(1)
            return real()

        agent._core._next_action = counting
        time.sleep(0.3)  # long enough for any polling loop to show itself
        assert calls == []
        run_agent(agent, "ping")
        assert take_response(agent, timeout=WAIT).content[0].text == "pong"
        assert calls, "the message woke the loop"


@pytest.mark.spec("10")
def test_abort_stops_running_tools_answers_the_rest_and_serves_the_next_message():
    """abort: the running tool sees the signal, calls not yet run get "Operation aborted", stop_reason "aborted"."""
    started = threading.Event()
    saw_abort = threading.Event()

    def waits(tool_call_id, args, signal, on_partial_result):
        started.set()
        if signal.wait(WAIT):
            saw_abort.set()
        return text_result("stopped early")

    ran_later = []
    llm = ScriptedLLM([tool_call_reply(("a", "waits", {}), ("b", "later", {}), ("c", "later", {})), "next run"])
    later = make_tool("later", lambda *a: ran_later.append(1) or text_result("x"))
    with make_agent(llm, make_tool("waits", waits), later) as agent:
        run_agent(agent, "go")
        assert started.wait(WAIT)
        assert abort(agent) is True
        response = take_response(agent, timeout=WAIT)
        assert response.stop_reason == "aborted" and saw_abort.is_set()
        results = [m for m in agent.history() if m.role == "tool"]
        assert [(m.tool_call_id, m.content[0].text) for m in results] == [
            ("a", "stopped early"),
            ("b", "Operation aborted"),
            ("c", "Operation aborted"),
        ]
        assert ran_later == []
        run_agent(agent, "again")
        assert take_response(agent, timeout=WAIT).content[0].text == "next run"
        assert abort(agent) is False or agent.loop_state is not LoopState.IDLE


@pytest.mark.spec("10")
def test_continue_runs_the_llm_on_the_current_history():
    """continue(): after a terminating tool and an external update, the LLM runs without a new user message."""
    handoff = make_tool("handoff", lambda *a: text_result("job 7 queued", terminate=True))
    llm = ScriptedLLM([tool_call_reply(("h", "handoff", {})), "job 7 finished: ok"])
    with make_agent(llm, handoff) as agent:
        run_agent(agent, "start job 7")
        assert take_response(agent, timeout=WAIT).stop_reason == "tool_use_terminated"
        assert agent.wait_until_idle(WAIT)
        agent._core.append(UserMessage([TextContent("[system] job 7 completed")]))  # the external system's result
        continue_agent(agent)
        assert take_response(agent, timeout=WAIT).content[0].text == "job 7 finished: ok"
        roles = [m["role"] for m in llm.requests[1]["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "user"]


@pytest.mark.spec("10")
def test_continue_on_an_empty_history_is_a_clear_error():
    """continue_agent with no conversation raises EmptyHistoryError."""
    with make_agent(ScriptedLLM()) as agent:
        with pytest.raises(EmptyHistoryError) as raised:
            continue_agent(agent)
        assert str(raised.value) == "cannot continue: the conversation history is empty; send a message with run_agent first"


@pytest.mark.spec("5")
def test_shutdown_lets_the_active_run_finish_and_returns_queued_messages():
    """shutdown: the run in progress completes and is delivered; messages still queued are returned."""
    llm = GatedLLM()
    agent = make_agent(llm)
    run_agent(agent, "in progress")
    llm.wait_entered()
    run_agent(agent, "queued 1")
    follow_up(agent, "queued follow-up")
    result = {}
    closer = threading.Thread(target=lambda: result.setdefault("queued", shutdown(agent, timeout=WAIT)))
    closer.start()
    llm.open()
    closer.join(WAIT)
    assert not closer.is_alive()
    assert take_response(agent, timeout=WAIT).content[0].text == "saw ['in progress']"
    assert result["queued"] == [{"role": "user", "content": "queued 1"}, {"role": "user", "content": "queued follow-up"}]
    assert not agent._core._thread.is_alive()


@pytest.mark.spec("5")
def test_shutdown_with_timeout_aborts_a_run_that_does_not_finish():
    """A run still going after the timeout is aborted; a cooperative tool stops and the response is delivered."""
    started = threading.Event()

    def waits(tool_call_id, args, signal, on_partial_result):
        started.set()
        signal.wait(WAIT)
        return text_result("stopped")

    agent = make_agent(ScriptedLLM([tool_call_reply(("a", "waits", {}))]), make_tool("waits", waits))
    run_agent(agent, "go")
    assert started.wait(WAIT)
    assert shutdown(agent, timeout=0.05) == []
    response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "aborted" and "shutdown" in response.error_message


@pytest.mark.spec("5")
def test_responses_wait_for_room_in_the_output_channel():
    """With the output channel full, responses are held, not dropped, and delivered as room appears."""
    llm = ScriptedLLM([f"r{i}" for i in range(20)])
    with make_agent(llm) as agent:
        for i in range(20):
            run_agent(agent, f"m{i}")
            if i < 16:
                # one message per run, so that there are at least 17 responses
                with agent._core._wake:
                    assert agent._core._wake.wait_for(lambda: agent.output_channel.qsize() == i + 1 or agent._core._pending_output, WAIT)
        texts = [take_response(agent, timeout=WAIT).content[0].text for _ in range(16)]
        assert texts == [f"r{i}" for i in range(16)]
        assert take_response(agent, timeout=WAIT).content[0].text.startswith("r16")


@pytest.mark.spec("5")
def test_a_dead_loop_refuses_messages_instead_of_queueing_them_forever(caplog):
    """If the loop thread dies (a bug), run_agent says so instead of queueing into a channel nobody reads."""
    from yiemagent import AgentClosedError

    agent = make_agent(ScriptedLLM(["x"]))
    try:

        def broken():
            raise RuntimeError("bug in the loop")

        agent._core._next_action = broken
        agent._core.ring()
        agent._core._thread.join(WAIT)
        assert not agent._core._thread.is_alive()
        [record] = [r for r in caplog.records if r.exc_info and r.exc_info[0] is RuntimeError]
        assert (record.name, record.levelname, record.getMessage()) == ("yiemagent.agent", "ERROR", "the agent loop failed; the agent stops serving")
        for send in (run_agent, follow_up):
            with pytest.raises(AgentClosedError) as raised:
                send(agent, "anyone there?")
            assert str(raised.value) == "the agent's loop thread has stopped (see the 'yiemagent.agent' log); it takes no more messages"
    finally:
        shutdown(agent, timeout=WAIT)


@pytest.mark.spec("5")
def test_after_the_loop_thread_died_no_ring_starts_a_run_and_shutdown_returns_the_message_left(caplog):
    """Runs start only while the loop thread lives (``run_over(None)`` relies on it): once it died of a bug, a ring
    finding a message left in the input channel starts no run, and shutdown returns the message."""
    llm = StrictLLM()
    agent = make_agent(llm)
    core = agent._core
    try:
        real = core._next_action

        def broken():
            raise RuntimeError("bug in the loop")

        core._next_action = broken
        core.ring()
        core._thread.join(WAIT)
        assert not core._thread.is_alive()
        core._next_action = real  # the step works again: only the loop thread is gone
        core.input_channel.put_internal("left behind")  # as the loop's own move puts into a closed channel; it rings
        assert core.run_over(None) and core._run is None and llm.requests == [] and agent.loop_state is LoopState.IDLE
    finally:
        assert shutdown(agent, timeout=WAIT) == ["left behind"]
    assert llm.requests == []


@pytest.mark.spec("5")
def test_a_bug_in_the_loops_step_met_first_by_the_run_thread_still_stops_the_loop(caplog):
    """The run thread decides the loop's next step as its run ends: when that step raises (a bug, injected during
    the run), the response is still delivered and the loop thread is woken to meet the bug, log it and stop serving."""
    core_box = []

    def broken():
        raise RuntimeError("bug in the loop")

    def llm(formatted):
        core_box[0]._next_action = broken  # the loop sleeps through the run: only the run's end can wake it
        return AssistantMessage([TextContent("x")])

    agent = make_agent(llm)
    core_box.append(agent._core)
    try:
        run_agent(agent, "go")
        assert take_response(agent, timeout=WAIT).content == [TextContent("x")]
        agent._core._thread.join(WAIT)
        assert not agent._core._thread.is_alive()
        [record] = [r for r in caplog.records if r.exc_info and r.exc_info[0] is RuntimeError]
        assert (record.name, record.getMessage()) == ("yiemagent.agent", "the agent loop failed; the agent stops serving")
        with pytest.raises(AgentClosedError):
            run_agent(agent, "anyone there?")
    finally:
        shutdown(agent, timeout=WAIT)


@pytest.mark.spec("10")
def test_leaving_the_with_block_normally_lets_the_active_run_finish():
    """``with agent:`` ends with shutdown alone: a run still active is not aborted, its response is delivered."""
    llm = GatedLLM()
    with make_agent(llm) as agent:
        run_agent(agent, "in progress")
        llm.wait_entered()
        for i in range(16):  # the input channel is full now (the run takes input only at its next round)
            run_agent(agent, f"queued {i}")

        def send_then_open():
            # blocks on the full channel until shutdown begins, then lets the LLM answer
            with pytest.raises(AgentClosedError):
                run_agent(agent, "blocked")
            llm.open()

        opener = threading.Thread(target=send_then_open, daemon=True)
        opener.start()
    opener.join(WAIT)
    response = take_response(agent, timeout=WAIT)
    assert (response.stop_reason, response.error_message) == (None, None)
    assert response.content == [TextContent("saw ['in progress']")]


@pytest.mark.spec("10")
def test_an_exception_leaving_the_with_block_aborts_the_run_and_propagates():
    """``with agent:`` left by an exception aborts the active run (reason "aborted by abort()"), shuts down, and re-raises it."""
    from yiemagent.events import current_abort_signal

    entered = threading.Event()

    def llm(formatted):
        entered.set()
        current_abort_signal().wait(WAIT)
        return "too late"

    agent = make_agent(llm)
    try:
        with pytest.raises(RuntimeError, match="the caller failed"):
            with agent:
                run_agent(agent, "go")
                assert entered.wait(WAIT)
                raise RuntimeError("the caller failed")
        assert agent.closing and not agent._core._thread.is_alive()
        response = take_response(agent, timeout=WAIT)
        assert (response.stop_reason, response.error_message) == ("aborted", "aborted by abort()")
    finally:
        shutdown(agent, timeout=WAIT)


@pytest.mark.spec("10")
def test_abort_without_a_reason_names_abort_in_the_response():
    """abort(agent) with no reason: the run ends "aborted" with error_message "aborted by abort()"."""
    llm = GatedLLM()
    with make_agent(llm) as agent:
        run_agent(agent, "go")
        llm.wait_entered()
        assert abort(agent) is True
        llm.open()
        response = take_response(agent, timeout=WAIT)
        assert (response.stop_reason, response.error_message) == ("aborted", "aborted by abort()")


@pytest.mark.spec("10")
def test_continue_during_a_run_is_queued_even_while_the_history_is_still_empty():
    """continue_agent while a run is active is queued: the history may be empty at that moment (here the run's only
    input was dropped), the check for an empty history is for an idle agent only; the run it starts finds nothing to
    continue and says so, without an LLM request."""
    outcome = []
    holder = {}

    def sink(event):
        if isinstance(event, AgentRunStartEvent) and not outcome:
            try:
                continue_agent(holder["agent"])
                outcome.append(("queued", holder["agent"].history()))
            except Exception as exc:  # the test reports it below
                outcome.append(("raised", exc))

    llm = ScriptedLLM(["continued"])
    with YiemAgent(llm_call=llm, agent_event_sink=sink, tool_store=ToolStore("loop")) as agent:
        holder["agent"] = agent
        agent.input_channel.put({"role": "assistant", "content": "not a user message"})  # by hand: dropped by the run
        first = take_response(agent, timeout=WAIT)
        assert first.stop_reason == "error" and "dropped" in first.error_message
        assert outcome == [("queued", [])]
        second = take_response(agent, timeout=WAIT)
        assert (second.stop_reason, second.error_message) == ("error", "cannot continue: the conversation history is empty; send a message with run_agent first")
        assert llm.requests == []


@pytest.mark.spec("10")
def test_continue_counts_a_follow_up_the_loop_has_taken_but_not_yet_placed():
    """A follow-up the loop took from its channel but has not yet moved into the input (``_carry``: the input was
    full a moment ago) is queued input: continue_agent on an otherwise empty agent is accepted, not refused as empty.

    The state lasts only until the loop moves the follow-up; the test holds the loop's lock to look at it."""
    llm = ScriptedLLM(["answered"])
    with make_agent(llm) as agent:
        core = agent._core
        with core._wake:
            core._carry.append(({"role": "user", "content": "carried"}, None))  # (message, the context it was sent in)
            continue_agent(agent)
        assert take_response(agent, timeout=WAIT).content == [TextContent("answered")]
        assert [m["content"] for m in llm.requests[0]["messages"] if m["role"] == "user"] == ["carried"]


@pytest.mark.spec("5")
def test_the_agent_is_not_idle_while_a_response_waits_for_room_in_a_full_output_channel():
    """A run is over and nothing is queued, but its response waits for room in the full output channel:
    wait_until_idle answers False until the caller takes one and the response is delivered."""
    llm = ScriptedLLM(["answer"])
    with make_agent(llm) as agent:
        filler = AssistantMessage([TextContent("filler")])
        while not agent.output_channel.full():
            agent.output_channel.put(filler)
        run_agent(agent, "go")
        core = agent._core
        with core._wake:  # the run is collected, its response kept by the loop for want of room
            assert core._wake.wait_for(lambda: core._run is None and bool(core._pending_output), WAIT)
        assert agent.wait_until_idle(0.05) is False
        assert take_response(agent, timeout=WAIT) is filler
        assert agent.wait_until_idle(WAIT) is True
        taken = [take_response(agent, timeout=WAIT) for _ in range(agent.output_channel.qsize())]
        assert [r.content for r in taken[-1:]] == [[TextContent("answer")]]


@pytest.mark.spec("5")
def test_wait_until_idle_honours_its_timeout():
    """wait_until_idle(timeout) returns False when a run is still active after the timeout, True once idle."""
    llm = GatedLLM()
    with make_agent(llm) as agent:
        run_agent(agent, "go")
        llm.wait_entered()
        assert agent.wait_until_idle(0.05) is False
        llm.open()
        take_response(agent, timeout=WAIT)
        assert agent.wait_until_idle(WAIT) is True


@pytest.mark.spec("5")
def test_taking_a_response_from_a_full_output_channel_wakes_the_loop_to_deliver_the_next():
    """A response held because the output channel was full is delivered as soon as a taker makes room, with
    nothing else happening in the agent (the output channel rings the loop on every get)."""
    llm = ScriptedLLM([f"r{i}" for i in range(17)])
    with make_agent(llm) as agent:
        core = agent._core
        for i in range(17):
            run_agent(agent, f"m{i}")
            with core._wake:
                assert core._wake.wait_for(lambda: core._run is None and agent.output_channel.qsize() + len(core._pending_output) == i + 1, WAIT)
        with core._wake:  # the loop is asleep: the 17th response waits for room
            assert core._wake.wait_for(lambda: agent.loop_state is LoopState.IDLE, WAIT)
            assert agent.output_channel.full() and len(core._pending_output) == 1
        assert [take_response(agent, timeout=WAIT).content[0].text for _ in range(16)] == [f"r{i}" for i in range(16)]
        assert take_response(agent, timeout=WAIT).content[0].text == "r16"


@pytest.mark.spec("5")
def test_a_run_whose_input_shutdown_took_before_its_thread_began_ends_and_shutdown_returns_the_message(caplog):
    """Decision 16: shutdown between a run's start and its thread's first step takes the run's input; the run
    then ends "aborted" without an LLM call, the loop ends, and shutdown returns the message."""
    llm = StrictLLM()
    agent = make_agent(llm)
    late, go = threading.Event(), threading.Event()
    agent._core._worker.submit(lambda: late.set() or go.wait(WAIT))  # the run thread is late: the OS ran it late
    assert late.wait(WAIT)
    run_agent(agent, "taken back")
    wait_for_state(agent, LoopState.PROCESSING)  # the run has started
    closer, returned = threading.Thread(target=lambda: returned.append(shutdown(agent, timeout=WAIT)), daemon=True), []
    closer.start()
    with agent._core._wake:  # shutdown has taken the queued input (the doorbell rings on close)
        assert agent._core._wake.wait_for(lambda: agent.closing, WAIT)
    go.set()
    closer.join(WAIT)
    assert returned == [[{"role": "user", "content": "taken back"}]]
    response = take_response(agent, timeout=WAIT)
    assert (response.stop_reason, response.error_message) == ("aborted", "the agent was shut down before the run took its input")
    assert llm.requests == [] and not agent._core._thread.is_alive() and "failed" not in caplog.text


@pytest.mark.spec("5")
def test_a_run_shutdown_left_running_delivers_its_response_then_closes_the_output():
    """A run still in an LLM call that ignores the abort is left running by shutdown; when it ends it delivers
    its response itself, is no longer active, and closes the output channel: the next take raises at once."""
    llm = GatedLLM()
    agent = make_agent(llm)
    run_agent(agent, "go")
    llm.wait_entered()
    closer, returned = threading.Thread(target=lambda: returned.append(shutdown(agent, timeout=0.05)), daemon=True), []
    closer.start()
    closer.join(WAIT / 2)  # the LLM call would hold it for WAIT: shutdown waits 2 x 0.05 s, then leaves the run
    assert returned == [[]], "shutdown waited for a run that does not finish"
    assert agent.loop_state is LoopState.IDLE and list(agent.loop_state_history)[-2:] == [LoopState.PROCESSING, LoopState.IDLE]
    llm.open()
    response = take_response(agent, timeout=WAIT)
    assert (response.stop_reason, response.error_message) == ("aborted", "aborted by shutdown: the run did not finish within 0.05 s")
    with pytest.raises(AgentClosedError) as raised:
        take_response(agent, timeout=WAIT)
    assert str(raised.value) == "the agent has been shut down and every response was taken"
    assert agent.state.active_run is False and agent.undelivered_responses == []


@pytest.mark.spec("5")
def test_a_run_shutdown_left_running_keeps_its_response_when_the_output_channel_is_full():
    """The response of a run that shutdown left running, finding the output channel full, is kept in
    ``undelivered_responses`` (decision 16: nothing lost)."""
    gated = GatedLLM()
    llm = ScriptedLLM([*[f"r{i}" for i in range(16)], gated])
    agent = make_agent(llm)
    for i in range(16):
        run_agent(agent, f"m{i}")
        with agent._core._wake:
            assert agent._core._wake.wait_for(lambda: agent.output_channel.qsize() == i + 1, WAIT)
    run_agent(agent, "last")
    gated.wait_entered()
    assert shutdown(agent, timeout=0.05) == []
    gated.open()
    agent._core._worker.thread.join(WAIT)
    assert not agent._core._worker.thread.is_alive()
    [kept] = agent.undelivered_responses
    assert (kept.stop_reason, kept.error_message) == ("aborted", "aborted by shutdown: the run did not finish within 0.05 s")
    assert [take_response(agent, timeout=WAIT).content[0].text for _ in range(16)] == [f"r{i}" for i in range(16)]
    with pytest.raises(AgentClosedError):
        take_response(agent, timeout=WAIT)


@pytest.mark.spec("5")
def test_a_response_held_for_room_when_shutdown_leaves_the_next_run_running_is_kept_before_that_runs_response():
    """A response held for a full output channel when shutdown leaves the next run running is neither lost nor
    overtaken by that run's response (decision 16: nothing lost; responses in the order of their runs)."""
    gated = GatedLLM()
    agent = make_agent(ScriptedLLM(["r0", "r1", gated]))
    agent.output_channel.maxsize = 1
    core = agent._core
    run_agent(agent, "m0")
    with core._wake:
        assert core._wake.wait_for(lambda: agent.output_channel.full(), WAIT)
    run_agent(agent, "m1")
    with core._wake:  # r1 ended, held: the channel has no room for it
        assert core._wake.wait_for(lambda: core._run is None and len(core._pending_output) == 1, WAIT)
    run_agent(agent, "m2")
    gated.wait_entered()
    assert shutdown(agent, timeout=0.05) == []
    # kept by the loop as it exited, not only once the run it left running ends
    assert [r.content[0].text for r in agent.undelivered_responses] == ["r1"] and not core._pending_output
    taken = [take_response(agent, timeout=WAIT)]  # room again, but the loop has gone
    gated.open()
    core._worker.thread.join(WAIT)
    with pytest.raises(AgentClosedError):
        while True:
            taken.append(take_response(agent, timeout=WAIT))
    assert [(r.stop_reason, r.content[0].text if r.content else None) for r in taken + agent.undelivered_responses] == [
        ("stop", "r0"), ("stop", "r1"), ("aborted", "Run aborted.")
    ]
    assert not core._pending_output


@pytest.mark.spec("5")
def test_sends_blocked_on_full_channels_are_woken_when_the_loop_dies():
    """A run_agent or follow_up blocked on a full channel when the loop thread dies (a bug, injected) raises
    AgentClosedError saying so, instead of waiting for ever on a channel nobody reads."""
    llm = GatedLLM()
    agent = make_agent(llm)
    try:
        run_agent(agent, "go")
        llm.wait_entered()
        for i in range(16):
            run_agent(agent, f"input {i}")
        for i in range(32):  # the input is full: follow-ups stay in their channel
            follow_up(agent, f"follow-up {i}")
        outcomes = {}

        def blocked(send):
            try:
                send(agent, "blocked")
                outcomes[send.__name__] = "sent"
            except AgentClosedError as exc:
                outcomes[send.__name__] = str(exc)

        senders = [threading.Thread(target=blocked, args=(send,), daemon=True) for send in (run_agent, follow_up)]
        for sender in senders:
            sender.start()

        def broken():
            raise RuntimeError("bug in the loop")

        agent._core._next_action = broken
        agent._core.ring()
        agent._core._thread.join(WAIT)
        for sender in senders:
            sender.join(WAIT)
        why = "the agent's loop thread has stopped (see the 'yiemagent.agent' log); it takes no more messages"
        assert outcomes == {"run_agent": why, "follow_up": why}
        assert agent.loop_state is LoopState.IDLE, "a stopped loop reports IDLE"
    finally:
        llm.open()
        shutdown(agent, timeout=WAIT)


@pytest.mark.spec("5")
def test_the_loop_state_history_keeps_the_last_256_states():
    """loop_state_history is capped: the last 256 states, the oldest dropped (a long-lived agent does not grow it)."""
    with make_agent(ScriptedLLM([f"r{i}" for i in range(70)])) as agent:
        assert agent.loop_state_history.maxlen == 256
        for i in range(70):  # at least four states a run: new message, processing, completed, idle
            run_agent(agent, f"m{i}")
            take_response(agent, timeout=WAIT)
            assert agent.wait_until_idle(WAIT)
        assert len(agent.loop_state_history) == 256 and agent.loop_state_history[-1] is LoopState.IDLE


@pytest.mark.spec("5")
def test_shutdown_keeps_a_response_held_for_a_full_output_channel(caplog):
    """shutdown with the output channel full and a response still held for it: the held response goes to
    ``undelivered_responses`` (decision 16: nothing lost), the loop ends cleanly, the others stay takeable."""
    llm = ScriptedLLM([f"r{i}" for i in range(17)])
    agent = make_agent(llm)
    core = agent._core
    for i in range(17):
        run_agent(agent, f"m{i}")
        with core._wake:
            assert core._wake.wait_for(lambda: core._run is None and agent.output_channel.qsize() + len(core._pending_output) == i + 1, WAIT)
    assert shutdown(agent, timeout=WAIT) == []
    assert [r.content[0].text for r in agent.undelivered_responses] == ["r16"]
    assert not agent._core._thread.is_alive() and "the agent loop failed" not in caplog.text
    assert [take_response(agent).content[0].text for _ in range(16)] == [f"r{i}" for i in range(16)]


@pytest.mark.spec("5")
def test_a_follow_up_taken_when_the_input_filled_up_is_moved_once_there_is_room():
    """Decision 7: follow-ups are moved into the input as far as it has room; the one taken from its channel
    when the input filled up is held by the loop and moved at the next room, so every follow-up is answered,
    in order, and the agent becomes idle."""
    gated = GatedLLM()
    llm = ScriptedLLM([gated, *[f"r{i}" for i in range(10)]])
    with make_agent(llm) as agent:
        run_agent(agent, "go")
        gated.wait_entered()
        for i in range(16):
            run_agent(agent, f"input {i}")
        for i in range(17):  # the input is full: they wait in their channel; then 16 fit, one is held
            follow_up(agent, f"follow-up {i}")
        gated.open()
        assert agent.wait_until_idle(WAIT), "a follow-up was left behind"
        assert all(isinstance(state, LoopState) for state in agent.loop_state_history)
        assert LoopState.FOLLOW_UP_QUEUED in agent.loop_state_history
        users = [m.content[0].text for m in agent.history() if m.role == "user"]
        assert users == ["go", *[f"input {i}" for i in range(16)], *[f"follow-up {i}" for i in range(17)]]
        assert len(llm.requests) == 4


# --- the channels themselves (spec §5 "Channel Architecture"): a queue.Queue that rings and can be closed


@pytest.mark.spec("5")
def test_a_channel_rings_its_doorbell_after_each_put_or_take_that_changed_it_and_only_then():
    """The loop sleeps until a channel rings: every put and take rings once; a take that found nothing does not
    (it would wake the loop for nothing)."""
    rings = []
    channel = Channel(4, lambda: rings.append(1), carry_context=True)
    channel.put("a")
    channel.put_internal("b")
    assert len(rings) == 2
    assert channel.take_nowait()[0] == "a" and len(rings) == 3
    assert channel.drain() == ["b"] and len(rings) == 4
    assert channel.drain() == [] and len(rings) == 4
    with pytest.raises(queue.Empty):
        channel.take_nowait()
    channel.put("c")
    assert channel.get() == "c" and len(rings) == 6


@pytest.mark.spec("5")
def test_a_channel_bounds_its_items_as_a_queue_does():
    """maxsize 0 is unbounded, as for ``queue.Queue``; at maxsize a put without waiting, and the loop's own
    put, raise ``queue.Full``."""
    unbounded = Channel(0)
    for i in range(40):
        unbounded.put(i, block=False)
        unbounded.put_internal(i)
    assert unbounded.qsize() == 80
    one = Channel(1)
    one.put("a", block=False)
    with pytest.raises(queue.Full):
        one.put("b", block=False)
    with pytest.raises(queue.Full):
        one.put_internal("b")
    assert one.get() == "a" and one.empty()


@pytest.mark.spec("5")
def test_a_channel_counts_each_item_put_as_an_unfinished_task_as_a_queue_does():
    """``task_done`` and ``join`` work as on a ``queue.Queue``: each put adds one task, whichever way it came."""
    channel = Channel(4)
    channel.put("a")
    channel.put("b")
    channel.put_internal("c")
    channel.put_internal("d")
    assert [channel.get() for _ in range(4)] == ["a", "b", "c", "d"]
    for _ in range(4):
        channel.task_done()
    with pytest.raises(ValueError, match="task_done"):
        channel.task_done()
    channel.join()  # every task is done: returns at once


@pytest.mark.spec("5")
def test_a_channel_the_agent_consumes_counts_an_item_done_as_it_is_taken():
    """The input and follow-up channels (``done_when_taken``): whichever way an item leaves (a take, a get, a
    drain), its task is done, so ``join`` returns once all are taken; a ``task_done`` beyond them is refused."""
    channel = Channel(4, carry_context=True, done_when_taken=True)
    channel.put("a")
    channel.put("b")
    channel.put_internal("c")
    channel.put_internal("d")
    assert channel.unfinished_tasks == 4
    assert channel.take_nowait()[0] == "a" and channel.unfinished_tasks == 3
    assert channel.get() == "b" and channel.unfinished_tasks == 2
    assert channel.drain() == ["c", "d"] and channel.unfinished_tasks == 0
    channel.join()  # returns at once: every item was taken
    with pytest.raises(ValueError, match="task_done"):
        channel.task_done()


def _joins_in_time(channel) -> bool:
    joiner = threading.Thread(target=channel.join, daemon=True)
    joiner.start()
    joiner.join(WAIT)
    return not joiner.is_alive()


@pytest.mark.spec("5")
def test_join_on_the_agents_input_channels_returns_once_it_has_taken_every_message():
    """``agent.input_channel.join()`` (and the follow-up channel's) waits while a message sent is still in
    the channel, and returns once the agent's runs have taken them all."""
    gate = threading.Event()
    entered = threading.Event()
    answers = ScriptedLLM(["one", "two", "three"])

    def llm(formatted):
        entered.set()
        assert gate.wait(WAIT), "the test never opened the gate"
        return answers(formatted)

    with make_agent(llm) as agent:
        try:
            run_agent(agent, "first")
            assert entered.wait(WAIT)
            run_agent(agent, "second")  # queued while the first run waits on its LLM
            follow_up(agent, "third")
            assert agent.input_channel.unfinished_tasks == 1 and agent.follow_up_channel.unfinished_tasks == 1
        finally:
            gate.set()
        assert _joins_in_time(agent.input_channel) and _joins_in_time(agent.follow_up_channel)
        assert agent.wait_until_idle(WAIT)


@pytest.mark.spec("5")
def test_join_on_the_input_channel_returns_after_shutdown_took_what_was_queued():
    """A message shutdown hands back unrun is taken too: ``join`` on a stopped agent's channel never waits for ever."""
    gate = threading.Event()
    entered = threading.Event()

    def llm(formatted):
        entered.set()
        gate.wait(WAIT)
        return AssistantMessage([TextContent("late")])

    agent = make_agent(llm)
    try:
        run_agent(agent, "first")
        assert entered.wait(WAIT)
        run_agent(agent, "queued")
        returned = shutdown(agent, timeout=0.05)
    finally:
        gate.set()
    assert [m["content"] for m in returned] == ["queued"]  # as it was sent
    assert _joins_in_time(agent.input_channel)


def _outcome_of_a_timed_wait(channel, call, gives_up):
    """Run ``call`` (a channel operation with a 0.2 s timeout) in a thread: [True] when it raised ``gives_up`` after waiting the 0.2 s."""
    outcome = []

    def wait():
        started = time.monotonic()
        try:
            call()
        except gives_up:
            outcome.append(time.monotonic() >= started + 0.2)
        except AgentClosedError:
            outcome.append("still waiting when the test gave up")

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(WAIT)
    channel.close("the test gave up")  # frees a call that would wait for ever
    waiter.join(WAIT)
    return outcome


@pytest.mark.spec("5")
def test_a_put_with_a_timeout_on_a_full_channel_waits_that_long_then_raises_full():
    """``put(item, timeout=t)`` on a full channel waits ``t`` seconds for room, then raises ``queue.Full``."""
    channel = Channel(1)
    channel.put("a")
    assert _outcome_of_a_timed_wait(channel, lambda: channel.put("b", timeout=0.2), queue.Full) == [True]
    assert channel.qsize() == 1


@pytest.mark.spec("5")
def test_a_channel_keeps_each_items_context_only_when_made_to_carry_it():
    """With ``carry_context`` each item keeps the context it was put in; without, none is kept; an empty channel has none."""
    var = contextvars.ContextVar("test_channel_var", default="unset")
    carrying, plain = Channel(2, carry_context=True), Channel(2)
    assert carrying.head_context() is None and plain.head_context() is None
    sender = contextvars.copy_context()
    sender.run(var.set, "sender")
    sender.run(carrying.put, "a")
    sender.run(plain.put, "a")
    assert carrying.head_context()[var] == "sender"
    item, context = carrying.take_nowait()
    assert item == "a" and context[var] == "sender"
    assert plain.head_context() is None and plain.take_nowait() == ("a", None)
    assert carrying.head_context() is None


@pytest.mark.spec("5")
def test_a_get_with_a_timeout_on_an_empty_channel_waits_that_long_then_raises_empty():
    """``get(timeout=t)`` on an empty channel waits ``t`` seconds for an item, then raises ``queue.Empty``."""
    channel = Channel(1)
    assert _outcome_of_a_timed_wait(channel, lambda: channel.get(timeout=0.2), queue.Empty) == [True]


class _SaysWhenWaiting(threading.Condition):
    """A condition that sets ``waiting`` as a thread starts to wait on it (the lock is released only then)."""

    def __init__(self, lock):
        super().__init__(lock)
        self.waiting = threading.Event()

    def wait(self, timeout=None):
        self.waiting.set()
        return super().wait(timeout)


@pytest.mark.spec("5")
def test_join_waiting_on_a_channel_the_agent_consumes_returns_as_the_last_item_is_taken():
    """A ``join`` already waiting on the input channel is woken when the agent takes the last item (not only
    one that starts after)."""
    channel = Channel(4, done_when_taken=True)
    channel.all_tasks_done = _SaysWhenWaiting(channel.mutex)
    channel.put("a")
    joiner = threading.Thread(target=channel.join, daemon=True)
    joiner.start()
    assert channel.all_tasks_done.waiting.wait(WAIT)
    assert channel.get() == "a"
    joiner.join(WAIT)
    assert not joiner.is_alive(), "join was not woken when the last item was taken"


@pytest.mark.spec("5")
def test_shutdown_of_an_agent_whose_loop_died_waits_only_its_timeout_for_a_run_still_going(caplog):
    """The loop thread died (a bug, injected) while a run waits on its LLM: ``shutdown(timeout)`` waits that
    long for the run, then returns; the run goes on and still delivers its response."""
    llm = GatedLLM()
    agent = make_agent(llm)
    try:
        run_agent(agent, "go")
        llm.wait_entered()

        def broken():
            raise RuntimeError("bug in the loop")

        agent._core._next_action = broken
        agent._core.ring()
        agent._core._thread.join(WAIT)
        assert not agent._core._thread.is_alive()
        closer, returned = threading.Thread(target=lambda: returned.append(shutdown(agent, timeout=0.05)), daemon=True), []
        closer.start()
        closer.join(WAIT / 2)  # the LLM holds the run for WAIT: shutdown waits 0.05 s for it, then leaves it
        assert returned == [[]]
    finally:
        llm.open()
    assert take_response(agent, timeout=WAIT).content[0].text == "saw ['go']"


class _StallingSession:
    """A session whose first store hangs until ``go_on`` is set or ``stall_s`` passed (any object with
    messages/append/clear is a session)."""

    def __init__(self, stall_s):
        self.stored, self.stall_s = [], stall_s
        self.hanging, self.go_on = threading.Event(), threading.Event()

    def messages(self):
        return list(self.stored)

    def append(self, message):
        if not self.hanging.is_set():
            self.hanging.set()
            self.go_on.wait(self.stall_s)
        self.stored.append(message)

    def clear(self):
        self.stored.clear()


@pytest.mark.spec("5")
def test_a_message_sent_while_an_idle_add_message_stores_starts_its_run_only_once_the_store_returned():
    """An idle ``add_message`` whose session is slow: a message sent meanwhile waits in the input channel, and
    its run starts (AgentRunStartEvent) only after the added message is stored and in the history."""
    session = _StallingSession(stall_s=0.5)
    seen_at_start = []

    def sink(event):
        if isinstance(event, AgentRunStartEvent):
            seen_at_start.append([m.content[0].text for m in session.stored])
            session.go_on.set()  # a run that started during the store: let the store finish at once

    agent = make_agent(ScriptedLLM(["answered"]), sink=sink, session=session)
    try:
        adder = threading.Thread(target=add_message, args=(agent, UserMessage([TextContent("note")])), daemon=True)
        adder.start()
        assert session.hanging.wait(WAIT)
        run_agent(agent, "question")  # the store still hangs: the run must wait for it
        assert take_response(agent, timeout=WAIT).content[0].text == "answered"
        adder.join(WAIT)
        assert seen_at_start == [["note"]]
        assert [m.content[0].text for m in agent.history()] == ["note", "question", "answered"]
    finally:
        session.go_on.set()
        shutdown(agent, timeout=WAIT)


@pytest.mark.spec("5")
def test_a_message_added_during_a_runs_last_round_first_answers_the_calls_that_round_deferred(agents):
    """Decision 18 for add_message during a run's last batch: the run ends "awaiting_approval", then the message
    joins the history after "superseded by a new message" results, so the history stays valid to send (decision 15)."""
    working, go = threading.Event(), threading.Event()

    def slow(*args):
        working.set()
        assert go.wait(WAIT)
        return text_result("slow done")

    llm = ScriptedLLM([tool_call_reply(("c1", "gated", {}), ("c2", "slow", {})), "answered"])
    defer = lambda ctx, signal: {"defer": True, "reason": "a person decides"} if ctx.tool_call.name == "gated" else None  # noqa: E731
    agent = agents(llm, [make_tool("gated"), make_tool("slow", slow)], before_tool_call=defer)
    run_agent(agent, "go")
    assert working.wait(WAIT)
    add_message(agent, UserMessage([TextContent("a note")]))  # the run is in its batch: the message waits for it
    go.set()
    assert take_response(agent, timeout=WAIT).stop_reason == "awaiting_approval"
    assert agent.wait_until_idle(WAIT)
    history = agent.history()
    assert [(m.role, getattr(m, "tool_call_id", None)) for m in history if m.role in ("tool", "user")][-3:] == [
        ("tool", "c2"), ("tool", "c1"), ("user", None)
    ]
    assert history[-2].content == [TextContent("superseded by a new message")] and pending_approvals(agent) == []
    check_wire(format_msg_for_llm(prepare_context(agent.state)))
    continue_agent(agent)
    assert take_response(agent, timeout=WAIT).content == [TextContent("answered")]


@pytest.mark.spec("5")
def test_a_decision_queued_during_a_run_that_answered_its_call_goes_in_alone_and_is_logged(agents, caplog):
    """Decision 18 at a run's end: an approval queued while its call waited, whose call the run then answered
    ("superseded by a new message"), can no longer go in before its call's answer; it goes in alone after the
    run's messages, and the reason is logged with the ValueError that said so."""
    started, decided = threading.Event(), threading.Event()

    def sink(event):
        if isinstance(event, AgentRunStartEvent) and event.run_id == 2:  # the run has taken its input, not yet appended it
            started.set()
            assert decided.wait(WAIT)

    llm = ScriptedLLM([tool_call_reply(("c1", "gated", {})), "done"])
    defer = lambda ctx, signal: {"defer": True, "reason": "a person decides"}  # noqa: E731
    agent = agents(llm, [make_tool("gated")], before_tool_call=defer, agent_event_sink=sink)
    run_agent(agent, "go")
    assert take_response(agent, timeout=WAIT).stop_reason == "awaiting_approval"
    run_agent(agent, "never mind")  # supersedes c1 when the run appends it
    assert started.wait(WAIT)
    with caplog.at_level(logging.WARNING, logger="yiemagent"):
        approve(agent, "c1")  # c1 still waits in the history: queued for the run
        decided.set()
        assert take_response(agent, timeout=WAIT).content == [TextContent("done")]
        assert agent.wait_until_idle(WAIT)
    history = agent.history()
    assert [(m.role, getattr(m, "tool_call_id", None), getattr(m, "decision", None)) for m in history[-5:]] == [
        ("approval", "c1", "deferred"), ("tool", "c1", None), ("user", None, None), ("assistant", None, None), ("approval", "c1", "approved"),
    ]
    assert history[-4].content == [TextContent("superseded by a new message")] and pending_approvals(agent) == []
    [record] = [r for r in caplog.records if r.name == "yiemagent.agent"]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "a message added during the run's last round: what goes before it could not be read"
    assert record.exc_info is not None and record.exc_info[0] is ValueError and "'c1'" in str(record.exc_info[1])
    check_wire(format_msg_for_llm(prepare_context(agent.state)))


@pytest.mark.spec("10")
def test_a_run_of_continues_alone_on_an_empty_history_sends_nothing_and_says_why(agents):
    """continue_agent is accepted while a follow-up waits; when the continues fill the input channel before the loop
    moves the follow-up, the run they start has no conversation: it ends "error" naming that, without an LLM request
    (none of a user message's), and the follow-up gets its own run."""
    llm = StrictLLM()
    agent = agents(llm)
    core = agent._core
    with core._wake:  # the loop cannot move the follow-up until the test lets go
        follow_up(agent, "first")
        while not agent.input_channel.full():
            continue_agent(agent)  # accepted: the agent is busy with the follow-up
    first = take_response(agent, timeout=WAIT)
    assert (first.stop_reason, first.error_message) == ("error", "cannot continue: the conversation history is empty; send a message with run_agent first")
    assert take_response(agent, timeout=WAIT).content == [TextContent("done")]
    assert [[m["content"] for m in r["messages"] if m["role"] == "user"] for r in llm.requests] == [["first"]]


# --- the run's own cost: who wakes the loop thread (docs/performance.md "The run's own cost") ---


@pytest.mark.spec("5")
def test_a_plain_run_never_wakes_the_loop_thread_and_records_the_loops_states_in_order():
    """A run sent to an idle agent with nothing queued beside it is started by the sender's thread (state 2, the loop's own
    step, taken while the loop sleeps); its first take, its end (state 6, recorded by the run thread) and the caller's take
    leave the loop asleep too. The states are the loop's, in its order, run after run."""
    with make_agent(ScriptedLLM(["pong"] * 20)) as agent:
        core = agent._core
        assert agent.wait_until_idle(WAIT)
        in_loop, started_by = [], []
        real_next, real_start = core._next_action, core._start_run

        def counting():
            if threading.current_thread() is core._thread:
                in_loop.append(agent.loop_state)
            return real_next()

        def starting():
            started_by.append(threading.current_thread())
            real_start()

        core._next_action, core._start_run = counting, starting
        for _ in range(20):
            before = len(agent.loop_state_history)
            run_agent(agent, "ping")
            assert take_response(agent, timeout=WAIT).content[0].text == "pong"
            assert agent.wait_until_idle(WAIT)
            assert list(agent.loop_state_history)[before:] == [LoopState.NEW_MESSAGE, LoopState.PROCESSING, LoopState.COMPLETED, LoopState.IDLE]
        assert in_loop == [] and started_by == [threading.current_thread()] * 20


@pytest.mark.spec("5")
def test_a_ring_while_the_loop_is_awake_leaves_state_2_to_the_loop_and_the_run_starts_once():
    """While the loop thread is between deciding a step and taking it (not asleep), a sender's ring does not start the run:
    it rings the loop, which starts it, once."""
    with make_agent(ScriptedLLM(["pong"])) as agent:
        core = agent._core
        assert agent.wait_until_idle(WAIT)
        started_by, real_start = [], core._start_run

        def starting():
            started_by.append(threading.current_thread())
            real_start()

        core._start_run = starting
        with core._wake:  # the loop thread waits on _bell, and cannot take the lock back until the test lets go
            core._asleep = False  # as if the loop were awake between two steps
            with core.input_channel.mutex:
                core.input_channel._put_with("ping", contextvars.copy_context())
                core.input_channel.unfinished_tasks += 1
            ringer = threading.Thread(target=core.ring)
            ringer.start()
            ringer.join(0.2)  # the RLock lets it in only after the test's block: it is still waiting
            assert ringer.is_alive() and started_by == []
        ringer.join(WAIT)
        assert take_response(agent, timeout=WAIT).content[0].text == "pong"
        assert started_by == [core._thread]


@pytest.mark.spec("5")
def test_senders_racing_the_loop_start_one_run_at_a_time_and_every_message_is_answered():
    """Eight threads send to one agent at once, at a short switch interval, while the loop moves follow-ups, delivers, and
    starts runs after a pause between deciding state 2 and taking it: no run ever starts while another is on, and every
    message enters the history exactly once."""
    def llm(formatted):
        time.sleep(0.0002)
        return AssistantMessage([TextContent("ok")], stop_reason="stop")

    with make_agent(llm) as agent:
        core = agent._core
        doubles, real_start = [], core._start_run

        def starting():
            if threading.current_thread() is core._thread:
                time.sleep(0.002)  # the loop thread preempted between deciding state 2 and taking it
            with core._wake:
                if core._run is not None:
                    doubles.append(core._run.id)
                real_start()

        core._start_run = starting
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)
        try:
            def send(i):
                for j in range(15):
                    (follow_up if j % 3 == 2 else run_agent)(agent, f"m{i}-{j}")
                    time.sleep(0.0003 * (i % 3))

            threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
            for thread in threads:
                thread.start()
            responses = 0
            while any(t.is_alive() for t in threads) or not agent.wait_until_idle(0):
                try:
                    take_response(agent, timeout=0.05)
                    responses += 1
                except TimeoutError:
                    pass
        finally:
            sys.setswitchinterval(interval)
        assert agent.wait_until_idle(WAIT)
        while True:
            try:
                take_response(agent, timeout=0.05)
                responses += 1
            except TimeoutError:
                break
        sent = sorted(m.content[0].text for m in agent.state.messages if isinstance(m, UserMessage))
        assert sent == sorted(f"m{i}-{j}" for i in range(8) for j in range(15))
        assert doubles == [] and responses == core._run_count


@pytest.mark.spec("5")
def test_responses_keep_their_order_when_a_run_ends_while_the_loop_delivers_an_earlier_one():
    """The loop delivers a response that waited for room under the lock a run's end delivers under: a run ending meanwhile does not put its response before the earlier one."""
    llm = GatedLLM()
    agent = make_agent(llm)
    try:
        core = agent._core
        for i in range(16):  # fill the output channel by hand
            agent.output_channel.put(AssistantMessage([TextContent(f"filler {i}")]))
        run_agent(agent, "first")
        llm.wait_entered()
        run_agent(agent, "second")  # queued: the second run starts once the first is collected
        llm.open()
        llm.wait_entered()  # the second run is in its LLM call; the first's response waits for room
        with core._wake:
            assert len(core._pending_output) == 1
        loop_putting, go, puts = threading.Event(), threading.Event(), []
        real_put = agent.output_channel.put_internal

        def put_internal(item, context=None):
            if threading.current_thread() is core._thread:
                loop_putting.set()
                go.wait(WAIT)
            real_put(item, context)
            puts.append(item.content[0].text)

        agent.output_channel.put_internal = put_internal
        assert take_response(agent, timeout=WAIT).content[0].text == "filler 0"  # room: the loop delivers the first
        assert loop_putting.wait(WAIT)
        llm.open()  # the second run ends while the loop is putting the first run's response
        time.sleep(0.2)  # room for the second run's end to overtake, were the delivery not under the loop's lock
        go.set()
        texts = [take_response(agent, timeout=WAIT).content[0].text for _ in range(17)]
        assert [t for t in texts if not t.startswith("filler")] == ["saw ['first']", "saw ['first', 'second']"]
    finally:
        llm.open()
        shutdown(agent, timeout=WAIT)


@pytest.mark.spec("5")
def test_a_follow_up_waiting_for_room_is_moved_when_the_run_takes_its_first_input():
    """The run's first take empties a full input channel: the loop, asleep in FOLLOW_UP_QUEUED, is woken to move the follow-up, which joins that run's next round."""
    gate, tool_gate, held = threading.Event(), threading.Event(), threading.Event()

    def waits(tool_call_id, args, signal, on_partial_result):
        assert tool_gate.wait(WAIT)
        return text_result("done")

    llm = ScriptedLLM([tool_call_reply(("c1", "waits", {})), "answered"])
    agent = make_agent(llm, make_tool("waits", waits))
    try:
        core = agent._core
        core._worker.submit(lambda: (held.set(), gate.wait(WAIT)))  # the run thread is busy: the run cannot take its input yet
        assert held.wait(WAIT)
        for i in range(16):
            run_agent(agent, f"message {i}")
        follow_up(agent, "the follow-up")
        with core._wake:
            assert core._wake.wait_for(lambda: agent.loop_state is LoopState.FOLLOW_UP_QUEUED, WAIT), agent.loop_state
        gate.set()  # the run takes its 16 messages, then waits in its tool
        with core._wake:  # the loop moved the follow-up into the room the run's first take made, while the run waits
            assert core._wake.wait_for(lambda: agent.follow_up_channel.empty() and not core._carry, WAIT), agent.loop_state
        tool_gate.set()
        assert take_response(agent, timeout=WAIT).content[0].text == "answered"
        assert agent.wait_until_idle(WAIT) and agent.output_channel.empty()  # one run: the follow-up joined its next round
        assert agent.history()[-2].content[0].text == "the follow-up"
    finally:
        gate.set()
        tool_gate.set()
        shutdown(agent, timeout=WAIT)


@pytest.mark.spec("5")
def test_shutdown_while_the_run_thread_puts_its_response_lets_the_response_reach_a_waiting_take():
    """Decision 16: shutdown that comes while a run's end is putting its response does not close the output channel under it: a take_response already waiting gets the response."""
    agent = make_agent(ScriptedLLM(["answer"]))
    core = agent._core
    real_put = agent.output_channel.put_internal
    putting, go, taken = threading.Event(), threading.Event(), []

    def put_internal(item, context=None):
        if threading.current_thread() is core._worker.thread:
            putting.set()
            go.wait(WAIT)
        real_put(item, context)

    agent.output_channel.put_internal = put_internal

    def take():
        try:
            taken.append(take_response(agent, timeout=WAIT).content[0].text)
        except AgentClosedError as exc:
            taken.append(exc)

    taker = threading.Thread(target=take, daemon=True)
    taker.start()
    run_agent(agent, "go")
    assert putting.wait(WAIT)
    closer = threading.Thread(target=lambda: shutdown(agent, timeout=WAIT), daemon=True)
    closer.start()
    with core._wake:
        assert core._wake.wait_for(lambda: agent.closing, WAIT)
    core._thread.join(0.3)  # room for the loop to exit and close the channel, were it not waiting for the delivery
    go.set()
    taker.join(WAIT)
    closer.join(WAIT)
    assert taken == ["answer"]


def test_loop_exited_is_the_bool_false_while_the_loop_runs_and_true_once_it_stopped() -> None:
    """``AgentCore.loop_exited`` is a bool: False from the start until the loop thread stops, True after shutdown, and ``run_over(None)`` says the same."""
    agent = make_agent(ScriptedLLM(["hi"]))
    try:
        assert agent._core.loop_exited is False
        with agent._core._wake:
            assert agent._core.run_over(None) is False
    finally:
        shutdown(agent)
    assert agent._core.loop_exited is True


def test_a_hook_or_the_execution_mode_changed_between_runs_applies_to_the_next_batch() -> None:
    """``loop_config`` is read afresh for each batch: a ``before_tool_call``, ``after_tool_call`` or ``parallel_tool_execute`` set, changed or removed between runs is what the next batch uses."""
    barrier = threading.Barrier(2)

    def meet(tool_call_id, args, signal, on_partial_result):
        try:
            barrier.wait(timeout=float(args["wait"]))
        except threading.BrokenBarrierError:
            barrier.reset()
            return text_result("alone")
        return text_result("met")

    seen: list[str] = []

    def before(ctx, signal):
        seen.append(f"before:{ctx.tool_call.id}")
        return None

    def after(ctx, signal):
        seen.append(f"after:{ctx.tool_call.id}")
        return None

    def turn(agent: YiemAgent, llm: ScriptedLLM, first: str, wait: float) -> list[str]:
        llm.add(tool_call_reply((first, "meet", {"wait": wait}), (first + "b", "meet", {"wait": wait})), "done")
        run_agent(agent, "go")
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
        return [m.content[0].text for m in agent.history() if type(m).__name__ == "ToolResultMessage"][-2:]

    llm = ScriptedLLM([])
    agent = make_agent(llm, make_tool("meet", meet, parallel=True), parallel_tool_execute=True)
    try:  # one change between two runs at a time
        assert turn(agent, llm, "c1", WAIT) == ["met", "met"]
        agent.parallel_tool_execute = False
        assert turn(agent, llm, "c2", 0.2) == ["alone", "alone"]  # one at a time: the first waits alone
        agent.before_tool_call = before
        turn(agent, llm, "c3", 0.2)
        assert seen == ["before:c3", "before:c3b"]
        agent.after_tool_call = after
        turn(agent, llm, "c4", 0.2)
        assert seen[2:] == ["before:c4", "after:c4", "before:c4b", "after:c4b"]
        agent.before_tool_call = None
        turn(agent, llm, "c5", 0.2)
        assert seen[6:] == ["after:c5", "after:c5b"]
        agent.after_tool_call = None
        turn(agent, llm, "c6", 0.2)
        assert len(seen) == 8
        agent.parallel_tool_execute = True
        assert turn(agent, llm, "c7", WAIT) == ["met", "met"]
    finally:
        shutdown(agent)
