"""A run's end raced with real threads: senders, a slow taker, ``wait_until_idle`` and ``shutdown`` (spec §5 state 6; decision 16).

The run thread records state 6 and delivers its own response (docs/performance.md "The
run's own cost"); these stress its end with tiny channels, so that a response often waits
for room while the next runs start and end, and check the promises at every moment: no
message is lost, responses leave in the order of their runs, an idle agent has nothing
waiting, and every blocking call returns. Each test is bounded (a few hundred runs).
"""

from __future__ import annotations

import linecache
import sys
import threading

import pytest

from helpers import WAIT, make_agent
from yiemagent import (
    AgentClosedError,
    AssistantMessage,
    TextContent,
    UserMessage,
    abort,
    add_message,
    follow_up,
    run_agent,
    shutdown,
    take_response,
)
from yiemagent.loop import AgentCore, LoopState


@pytest.fixture(autouse=True)
def switch_often():
    """Threads switch every microsecond instead of every 5 ms: a run's end interleaves at many more points."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def echo_last_user(formatted):
    """An LLM that answers with the text of the last user message it was sent: a response names its run's input."""
    users = [m["content"] for m in formatted["messages"] if m["role"] == "user"]
    last = users[-1] if users else ""
    return AssistantMessage([TextContent(last if isinstance(last, str) else "".join(p["text"] for p in last))], stop_reason="stop")


def small_agent(output: int = 1, inputs: int = 2):
    """An echoing agent whose channels hold ``inputs`` messages (input and follow-up) and ``output`` responses."""
    agent = make_agent(echo_last_user)
    agent.output_channel.maxsize = output
    agent.input_channel.maxsize = agent.follow_up_channel.maxsize = inputs
    return agent


_RUNNING = (LoopState.PROCESSING, LoopState.INPUT_QUEUED, LoopState.FOLLOW_UP_QUEUED)
SPEC_STEPS = {
    (LoopState.IDLE, LoopState.NEW_MESSAGE), (LoopState.NEW_MESSAGE, LoopState.PROCESSING),
    (LoopState.COMPLETED, LoopState.IDLE), (LoopState.COMPLETED, LoopState.NEW_MESSAGE),
    *((a, b) for a in _RUNNING for b in (*_RUNNING, LoopState.COMPLETED) if a is not b),
}
"""The steps between two recorded states that spec §5's table allows (a message queued as a run ends starts the next at once)."""


def texts(messages, role):
    return [m.content[0].text for m in messages if m.role == role]


def start(*threads):
    for thread in threads:
        thread.start()
    return threads


def joined(*threads):
    for thread in threads:
        thread.join(WAIT)
    return not any(thread.is_alive() for thread in threads)


@pytest.mark.spec("5")
def test_senders_on_three_channels_and_a_slow_taker_lose_and_reorder_nothing():
    """Three threads send by run_agent, follow_up and add_message into two-message channels while another takes
    responses: every message enters the history once, each channel's in its order, and the responses taken are
    the history's assistant messages in order, each answering the input last before it; the states recorded step as spec §5 allows."""
    for round_ in range(25):
        agent = small_agent()
        responses, done = [], threading.Event()
        sends = {"run": (run_agent, str), "follow": (follow_up, str), "add": (add_message, lambda text: UserMessage([TextContent(text)]))}

        def sender(kind):
            send, make = sends[kind]
            for i in range(25):
                send(agent, make(f"{kind}-{round_}-{i}"))

        def taker():
            while not (done.is_set() and agent.output_channel.empty()):
                try:
                    responses.append(take_response(agent, timeout=0.01))
                except TimeoutError:
                    continue

        senders = start(*(threading.Thread(target=sender, args=(kind,)) for kind in sends))
        (taking,) = start(threading.Thread(target=taker))
        try:
            assert joined(*senders), "a send blocked for ever"
            assert agent.wait_until_idle(WAIT)
            core = agent._core
            assert not core._pending_output and not core._delivering, "idle while a response waits"
            done.set()
            assert joined(taking)
            history = agent.history()
            users = texts(history, "user")
            for kind in sends:
                assert [u for u in users if u.startswith(kind)] == [f"{kind}-{round_}-{i}" for i in range(25)]
            assert [r.content[0].text for r in responses] == texts(history, "assistant")
            answered = [users.index(r.content[0].text) for r in responses]
            assert answered == sorted(answered), "a response left before an earlier run's"
            with core._wake:
                states = list(agent.loop_state_history)
            assert set(zip(states, states[1:])) <= SPEC_STEPS
        finally:
            done.set()
            assert shutdown(agent, timeout=WAIT) == []


@pytest.mark.spec("5")
def test_idle_is_reported_only_once_the_runs_response_is_in_the_output_channel():
    """Waiting for idle from two threads while the run thread delivers: whenever wait_until_idle says idle, the run's
    response is already in the one-slot output channel (none held, none in flight) and the state is IDLE."""
    agent = small_agent()
    seen = []

    def watch():
        seen.append(agent.wait_until_idle(WAIT))

    try:
        for i in range(300):
            run_agent(agent, f"m{i}")
            watcher = threading.Thread(target=watch)
            watcher.start()
            assert agent.wait_until_idle(WAIT)
            core = agent._core
            with core._wake:
                assert (agent.output_channel.qsize(), len(core._pending_output), core._delivering) == (1, 0, False)
                assert agent.loop_state is LoopState.IDLE
            assert joined(watcher)
            assert take_response(agent, timeout=0).content[0].text == f"m{i}"
        assert seen == [True] * 300
    finally:
        shutdown(agent, timeout=WAIT)


@pytest.mark.spec("5")
def test_shutdown_at_any_moment_of_a_stream_of_runs_loses_no_message_and_no_response():
    """shutdown (after an abort every other time) once k responses were taken, while a sender sends and a taker waits
    with no timeout: the sender and the taker end, every accepted message is in the history or returned by shutdown,
    and the responses taken then kept in ``undelivered_responses`` are the history's answers in order."""
    for k in range(150):
        agent = small_agent(output=1 + k % 2)
        accepted, responses, enough = [], [], threading.Event()

        def sender():
            for i in range(30):
                try:
                    (run_agent if i % 3 else follow_up)(agent, f"m{i}")
                except AgentClosedError:
                    return
                accepted.append(f"m{i}")

        def taker():
            while True:
                try:
                    responses.append(take_response(agent))  # no timeout: the shutdown must end it
                except AgentClosedError:
                    return
                if len(responses) >= k % 5:
                    enough.set()

        threads = start(threading.Thread(target=sender), threading.Thread(target=taker))
        if k % 5:
            assert enough.wait(WAIT)
        if k % 2:
            abort(agent)
        returned = shutdown(agent, timeout=WAIT)
        assert joined(*threads), "a send or a take blocked after shutdown"
        history = agent.history()
        assert sorted(texts(history, "user") + [m["content"] for m in returned]) == sorted(accepted)
        out = [r for r in responses + agent.undelivered_responses if r.stop_reason != "aborted"]  # an aborted run's reply is not kept
        assert [r.content[0].text for r in out] == texts(history, "assistant")


@pytest.mark.spec("5")
def test_a_run_ending_after_shutdown_gave_up_on_it_keeps_its_response_after_those_already_kept():
    """shutdown gives up on a hung run while an earlier response waits for room (kept in ``undelivered_responses``); the
    caller then makes room and the run ends before the loop thread has exited: its response is kept after the earlier one,
    never put into the output channel ahead of it."""
    gate, entered = threading.Event(), threading.Event()

    def llm(formatted):
        last = [m["content"] for m in formatted["messages"] if m["role"] == "user"][-1]
        if last == "m3":
            entered.set()
            gate.wait(WAIT)
        return AssistantMessage([TextContent(f"r{last[1:]}")], stop_reason="stop")

    reached, go_on = threading.Event(), threading.Event()
    exit_line = "why = "  # the loop thread's first line once it has decided to exit

    def local(frame, event, arg):
        if event == "line" and exit_line in linecache.getline(frame.f_code.co_filename, frame.f_lineno):
            reached.set()
            go_on.wait(WAIT)
        return local

    threading.settrace(lambda frame, event, arg: local if frame.f_code is AgentCore._agent_loop.__code__ else None)
    try:
        agent = make_agent(llm)  # its loop thread is traced: it stops once it has decided to exit
    finally:
        threading.settrace(None)
    core = agent._core
    agent.output_channel.maxsize = 1
    run_agent(agent, "m1")
    assert agent.wait_until_idle(WAIT)  # r1 fills the output channel
    run_agent(agent, "m2")
    assert core.wait_for(lambda: core._run is None and len(core._pending_output) == 1, WAIT)  # r2 waits for room
    run_agent(agent, "m3")
    assert entered.wait(WAIT)
    stopping = threading.Thread(target=shutdown, args=(agent,), kwargs={"timeout": 0.05})
    stopping.start()
    try:
        assert reached.wait(WAIT)  # shutdown gave up on run 3 and kept r2; the loop thread has not exited yet
        taken = [take_response(agent, timeout=WAIT)]  # r1: room for one more
        gate.set()
        assert core.wait_for(lambda: core._run is None and not core._delivering, WAIT)
    finally:
        gate.set()
        go_on.set()
    assert joined(stopping)
    while True:
        try:
            taken.append(take_response(agent, timeout=WAIT))
        except AgentClosedError:
            break
    kept = [r.content[0].text if r.stop_reason == "stop" else r.stop_reason for r in agent.undelivered_responses]
    assert ([r.content[0].text for r in taken], kept) == (["r1"], ["r2", "aborted"])
