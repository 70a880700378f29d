"""The public functions raced from several threads, then shutdown (docs/failures.md "Shutdown (decision 16)"; add_message: docs/api.md).

Each step of the state machine starts several operations at once on a barrier, each on
its own thread, and joins them with a deadline: no call may block for ever. Teardown
races ``shutdown`` with more sends, then checks that every message whose send returned
was processed exactly once or returned by ``shutdown`` — a message given to ``add_message``
too: in the history exactly once, or returned —, that refused sends left no trace, that
every assistant message's tool calls are followed at once by their results (an added
message lands only between rounds), and that the events of each tool call came start,
updates, end, and that the session holds the history in its order.
"""

from __future__ import annotations

import threading

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from helpers import WAIT, EventRecorder, make_tool, planner, text_result
from yiemagent import (
    AgentClosedError,
    AssistantMessage,
    EmptyHistoryError,
    ToolExecEndEvent,
    ToolExecStartEvent,
    ToolExecUpdateEvent,
    TextContent,
    ToolStore,
    UserMessage,
    YiemAgent,
    abort,
    add_message,
    continue_agent,
    follow_up,
    register_tool,
    run_agent,
    shutdown,
    take_response,
)
from yiemagent.extraction import extract_tool_calls

OPS = ["run_agent", "follow_up", "add_message", "abort", "continue", "take"]


def echo(call_id, args, signal, on_partial_result):
    on_partial_result("one")
    on_partial_result("two")
    return text_result(f"echo {args}")


class ListSession:
    """An in-memory session (any object with messages/append/clear is one); ``_lock`` guards ``stored``."""

    def __init__(self):
        self._lock = threading.Lock()
        self.stored = []

    def messages(self):
        with self._lock:
            return list(self.stored)

    def append(self, message):
        with self._lock:
            self.stored.append(message)

    def clear(self):
        with self._lock:
            self.stored.clear()


class RaceMachine(RuleBasedStateMachine):
    """Races run_agent, follow_up, add_message, abort, continue_agent and take_response; teardown races shutdown."""

    def __init__(self):
        super().__init__()
        store = ToolStore("races")
        register_tool(store, make_tool("echo", echo, parallel=True))
        self.recorder = EventRecorder()
        self.session = ListSession()
        self.agent = YiemAgent(
            llm_call=planner, agent_event_sink=self.recorder, tool_store=store, parallel_tool_execute=True, session=self.session
        )
        self.lock = threading.Lock()  # guards accepted, refused, count
        self.accepted: list[str] = []
        self.refused: list[str] = []
        self.count = 0

    def _text(self):
        with self.lock:
            self.count += 1
            return f"m{self.count}"

    def _do(self, op):
        agent = self.agent
        if op in ("run_agent", "follow_up", "add_message"):
            text = self._text()
            send = {"run_agent": run_agent, "follow_up": follow_up, "add_message": lambda a, t: add_message(a, UserMessage([TextContent(t)]))}[op]
            try:
                send(agent, text)
            except AgentClosedError:
                with self.lock:
                    self.refused.append(text)
                return
            with self.lock:
                self.accepted.append(text)
        elif op == "abort":
            abort(agent)
        elif op == "continue":
            try:
                continue_agent(agent)
            except (EmptyHistoryError, AgentClosedError):
                pass
        elif op == "take":
            try:
                take_response(agent, timeout=0.01)
            except (TimeoutError, AgentClosedError):
                pass

    def _race(self, ops, extra=None):
        barrier = threading.Barrier(len(ops) + (1 if extra else 0))
        outcome = []

        def start(op):
            barrier.wait(WAIT)
            self._do(op)

        def start_extra():
            barrier.wait(WAIT)
            outcome.append(extra())

        threads = [threading.Thread(target=start, args=(op,)) for op in ops]
        if extra:
            threads.append(threading.Thread(target=start_extra))
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
            assert not t.is_alive(), f"a call blocked: {ops}"
        return outcome

    @rule(ops=st.lists(st.sampled_from(OPS), min_size=2, max_size=5))
    def race(self, ops):
        self._race(ops)

    def teardown(self):
        agent = self.agent
        try:
            (returned,) = self._race(["run_agent", "follow_up", "add_message", "run_agent", "follow_up"], extra=lambda: shutdown(agent, timeout=WAIT))
            returned_texts = [m.content[0].text if isinstance(m, UserMessage) else m["content"] for m in returned]
            processed = [m.content[0].text for m in agent.history() if isinstance(m, UserMessage)]
            assert len(processed) == len(set(processed)), "a message was processed twice"
            assert sorted(processed + returned_texts) == sorted(self.accepted), "a message was lost or duplicated"
            assert not set(self.refused) & set(processed + returned_texts), "a refused message left a trace"
            self._check_calls_answered_at_once(agent.history())
            assert self.session.messages() == agent.history(), "the session's order is not the history's"
            taker = threading.Thread(target=self._drain_after_shutdown)
            taker.start()
            taker.join(WAIT)
            assert not taker.is_alive(), "take_response blocked after shutdown"
            self._check_event_order()
        finally:
            shutdown(agent, timeout=WAIT)

    def _drain_after_shutdown(self):
        with pytest.raises(AgentClosedError):
            while True:
                assert isinstance(take_response(self.agent), AssistantMessage)

    @staticmethod
    def _check_calls_answered_at_once(history):
        for index, message in enumerate(history):
            if isinstance(message, AssistantMessage):
                ids = [c.id for c in extract_tool_calls(message)[1]]
                following = history[index + 1 : index + 1 + len(ids)]
                assert [getattr(m, "tool_call_id", None) for m in following] == ids, "a message landed inside a batch"

    def _check_event_order(self):
        by_call: dict[str, list[type]] = {}
        for event in list(self.recorder.events):
            if isinstance(event, (ToolExecStartEvent, ToolExecUpdateEvent, ToolExecEndEvent)):
                by_call.setdefault(event.tool_call_id, []).append(type(event))
        for call_id, kinds in by_call.items():
            assert kinds[0] is ToolExecStartEvent and kinds[-1] is ToolExecEndEvent, (call_id, kinds)
            assert kinds.count(ToolExecStartEvent) == 1 and kinds.count(ToolExecEndEvent) == 1, (call_id, kinds)
        assert self.recorder.overlaps == 0


# each example starts an agent and dozens of threads: a quarter of the profile's examples,
# short programs (the "deep" profile still runs 375 of up to 15 steps)
RaceMachine.TestCase.settings = settings(settings.default, max_examples=max(10, settings.default.max_examples // 4), stateful_step_count=15)
TestRaceMachine = pytest.mark.spec("5")(RaceMachine.TestCase)
