"""Random sequences of agent operations, and load: nothing deadlocks, nothing is lost (spec §5, §6)."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from helpers import WAIT, drain_until_idle, make_tool, planner, take_waiting, text_result
from yiemagent import (
    AssistantMessage,
    LoopState,
    TextContent,
    ToolResultMessage,
    ToolStore,
    UserMessage,
    YiemAgent,
    abort,
    continue_agent,
    extract_tool_calls,
    follow_up,
    register_tool,
    run_agent,
    shutdown,
    take_response,
)



def check_history(history, sent_by_producer):
    """Every user message exactly once, each producer's in order; every tool call answered once."""
    users = [m.content[0].text for m in history if isinstance(m, UserMessage)]
    assert sorted(users) == sorted(text for texts in sent_by_producer.values() for text in texts)
    assert len(users) == len(set(users))
    for texts in sent_by_producer.values():
        positions = [users.index(t) for t in texts]
        assert positions == sorted(positions)
    answered = [m.tool_call_id for m in history if isinstance(m, ToolResultMessage)]
    called = [c.id for m in history if isinstance(m, AssistantMessage) for c in extract_tool_calls(m)[1]]
    assert sorted(answered) == sorted(called) and len(set(answered)) == len(answered)


class AgentMachine(RuleBasedStateMachine):
    """Drives run_agent / follow_up / take_response / continue_agent / abort in random order."""

    def __init__(self):
        super().__init__()
        store = ToolStore("stateful")
        register_tool(store, make_tool("echo", lambda i, a, s, p: text_result(f"echo {a}"), parallel=True))
        self.agent = YiemAgent(llm_call=planner, agent_event_sink=None, tool_store=store, parallel_tool_execute=True)
        self.sent = {"run": [], "follow": []}
        self.responses = []
        self.count = 0

    def _next(self, prefix):
        self.count += 1
        return f"{prefix}{self.count}"

    @rule()
    def send(self):
        text = self._next("r")
        run_agent(self.agent, text)
        self.sent["run"].append(text)

    @rule()
    def send_follow_up(self):
        text = self._next("f")
        follow_up(self.agent, text)
        self.sent["follow"].append(text)

    @rule()
    def take(self):
        take_waiting(self.agent, self.responses)

    @precondition(lambda self: self.count > 0)
    @rule()
    def continue_(self):
        continue_agent(self.agent)

    @rule()
    def abort_run(self):
        abort(self.agent)

    @rule(seconds=st.sampled_from([0, 0.001]))
    def pause(self, seconds):
        time.sleep(seconds)  # lets the loop interleave differently with the rules

    @invariant()
    def state_is_one_of_six(self):
        assert isinstance(self.agent.loop_state, LoopState)

    def teardown(self):
        try:
            assert drain_until_idle(self.agent, self.responses), f"deadlock: {self.agent!r}"
            check_history(self.agent.history(), self.sent)
            assert all(isinstance(r, AssistantMessage) for r in self.responses)
        finally:
            shutdown(self.agent, timeout=WAIT)


TestAgentMachine = AgentMachine.TestCase
TestAgentMachine = pytest.mark.spec("5")(TestAgentMachine)


@pytest.mark.spec("6")
def test_load_8_threads_500_messages_each():
    """Load: 8 producers × 500 messages → all 4,000 in the history exactly once, each producer in order."""
    producers, per_producer = 8, 500
    agent = YiemAgent(llm_call=lambda f: AssistantMessage([TextContent("ok")]), agent_event_sink=None)
    sent = {p: [f"p{p}-{i}" for i in range(per_producer)] for p in range(producers)}
    responses = []
    stop = threading.Event()

    def consume():
        while not stop.is_set():
            try:
                responses.append(take_response(agent, timeout=0.05))
            except TimeoutError:
                pass

    def produce(p):
        for text in sent[p]:
            (run_agent if p % 2 else follow_up)(agent, text)

    consumer = threading.Thread(target=consume)
    consumer.start()
    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
            assert not t.is_alive(), "a producer is stuck"
        stop.set()
        consumer.join(WAIT)
        assert drain_until_idle(agent, responses)
        check_history(agent.history(), sent)
        assert len([m for m in agent.history() if isinstance(m, UserMessage)]) == producers * per_producer
    finally:
        stop.set()
        shutdown(agent, timeout=WAIT)
