"""A sender interrupted while its ring takes the loop's step (spec §5 state 2; docs/performance.md "The run's own cost").

A message sent to an idle agent starts its run in the sender's thread (``AgentCore.ring``).
That thread may be interrupted there: a ``KeyboardInterrupt`` (Ctrl-C reaches the main
thread, which is often the sender) lands at a Python function's entry or just after one
returns. These raise it at each such point of the sender's ring, one at a time, and check
that the interruption reaches the sender and that the agent is left whole: no run is active
that nothing runs, the message is answered, the states step as spec §5 allows, and
``shutdown`` closes the output channel.
"""

from __future__ import annotations

import sys
import threading

import pytest

from helpers import WAIT, drain_until_idle, make_agent
from test_run_end_races import SPEC_STEPS
from yiemagent import run_agent, shutdown
from yiemagent import _threads, loop
from yiemagent.llm import ScriptedLLM


def _interrupt_at(n: int, hits: list):
    """A trace function that raises ``KeyboardInterrupt`` at the ``n``-th entry to or return from a function of loop.py or _threads.py inside ``ring``."""
    seen = [0]
    inside = [False]
    ring_code = loop.AgentCore.ring.__code__

    def point(frame) -> None:
        if inside[0] and frame.f_code.co_filename in (loop.__file__, _threads.__file__):
            seen[0] += 1
            if seen[0] - 1 == n:
                hits.append(frame.f_code.co_name)
                raise KeyboardInterrupt

    def local(frame, event, arg):
        if event == "return":
            try:
                point(frame)
            finally:
                if frame.f_code is ring_code:
                    inside[0] = False
        return local

    def calls(frame, event, arg):
        if frame.f_code is ring_code:
            inside[0] = True
        point(frame)
        return local

    return calls


@pytest.mark.spec("5")
def test_a_sender_interrupted_anywhere_in_the_ring_that_starts_its_run_gets_the_interruption_and_the_agent_serves_on():
    """A KeyboardInterrupt at any function entry or return in the ring of a message sent to an idle agent reaches the
    sender, and leaves no run active that nothing runs: that message and the next are answered, the states step as spec §5
    allows, and shutdown closes the output channel."""
    n = 0
    while True:
        agent = make_agent(ScriptedLLM(["pong"] * 4))
        assert agent.wait_until_idle(WAIT)
        hits, outcome = [], []

        def sender():
            sys.settrace(_interrupt_at(n, hits))
            try:
                run_agent(agent, "first")
                outcome.append("returned")
            except KeyboardInterrupt:
                outcome.append("interrupted")
            finally:
                sys.settrace(None)

        try:
            thread = threading.Thread(target=sender)
            thread.start()
            thread.join(WAIT)
            if not hits:  # past the last point: the ring ran whole
                assert outcome == ["returned"]
                break
            assert outcome == ["interrupted"], (n, hits)
            run_agent(agent, "second")
            responses = []
            assert drain_until_idle(agent, responses), (n, hits, agent._core._run)
            users = [m.content[0].text for m in agent.history() if m.role == "user"]
            assert users == ["first", "second"] and responses and {r.stop_reason for r in responses} == {"stop"}, (n, hits)
            states = list(agent.loop_state_history)
            assert set(zip(states, states[1:])) <= SPEC_STEPS, (n, hits, states)
        finally:
            returned = shutdown(agent, timeout=WAIT)
        assert returned == [] and agent.output_channel.closed
        n += 1
    assert n > 10, n  # the ring took state 2: NEW_MESSAGE, PROCESSING and the run's hand-over were each interrupted
