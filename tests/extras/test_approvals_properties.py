"""The invariant of approvals (decision 18): any interleaving of approve, reject, new message and restart answers every call exactly once,
whether a call waits because ``before_tool_call`` deferred it or because its tool has ``requires_approval`` (docs/api.md "Approvals in fewer lines")."""

from __future__ import annotations

import itertools
import threading
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import WAIT, StrictLLM, make_agent, make_tool, text_result
from yiemagent import (
    AssistantMessage, TextContent, ToolResultMessage, approve, continue_agent, pending_approvals, reject, resume, run_agent, shutdown, take_response,
)
from yiemagent.approvals import waiting_calls
from yiemagent.extraction import extract_tool_calls
from yiemagent.history import complete_tool_calls

actions = st.lists(
    st.one_of(
        st.tuples(st.just("approve"), st.integers(0, 3), st.booleans()),
        st.tuples(st.just("reject"), st.integers(0, 3)),
        st.tuples(st.just("message"), st.booleans()),
        st.tuples(st.just("continue")),
        st.tuples(st.just("resume")),
        st.tuples(st.just("restart")),
    ),
    max_size=8,
)


class World:
    """One agent whose model makes a batch of calls on request; the tools record every run."""

    def __init__(self, sizes, deferred_names, by_flag: bool = False) -> None:
        self.lock = threading.Lock()  # guards ran
        self.ran: list[tuple[str, dict]] = []
        self.ids = itertools.count()
        self.sizes = iter(sizes)
        self.deferred_names = deferred_names
        self.by_flag = by_flag  # the deferred tools have requires_approval, and the hook answers None
        self.approved: dict[str, dict] = {}
        self.rejected: set[str] = set()
        self.agent = self.new_agent([])

    def reply(self, formatted):
        last = formatted["messages"][-1]
        if last["role"] == "user" and last["content"].startswith("batch"):
            n = next(self.sizes, 2)
            calls = []
            for _ in range(n):
                i = next(self.ids)
                calls.append({"id": f"c{i}", "type": "function", "function": {"name": f"t{i % 3}", "arguments": {"n": i}}})
            return AssistantMessage([{"type": "tool_calls", "tool_calls": calls}], stop_reason="tool_use")
        return AssistantMessage([TextContent("done")], stop_reason="stop")

    def tool(self, name):
        def execute(tool_call_id, args, signal, on_partial_result):
            with self.lock:
                self.ran.append((tool_call_id, dict(args)))
            return text_result("ok")

        return make_tool(name, execute, requires_approval=self.by_flag and name in self.deferred_names)

    def hook(self, ctx, signal):
        return {"defer": True, "reason": "ask"} if ctx.tool_call.name in self.deferred_names and not self.by_flag else None

    def new_agent(self, messages):
        llm = StrictLLM(*[self.reply] * 100)  # checks each request as a strict server would
        tools = [self.tool(f"t{i}") for i in range(3)]
        return make_agent(llm, *tools, builtin_tools=False, before_tool_call=self.hook, messages=messages)

    def respond(self):
        response = take_response(self.agent, timeout=WAIT)
        assert response.stop_reason in ("stop", "awaiting_approval"), response.error_message

    def check(self):
        history = self.agent.history()
        results = Counter(m.tool_call_id for m in history if isinstance(m, ToolResultMessage))
        assert all(count == 1 for count in results.values()), results
        calls = [c.id for m in history if isinstance(m, AssistantMessage) for c in extract_tool_calls(m)[1]]
        waiting = waiting_calls(history)[1]
        assert {c for c in calls if c not in results} == set(waiting)  # unanswered means waiting, nothing else
        ran = Counter(i for i, _ in self.ran)
        assert all(count == 1 for count in ran.values()), ran  # no call ran twice
        assert not (set(ran) & self.rejected)  # a rejected call never ran
        for call_id, args in self.ran:
            if call_id in self.approved:
                assert args == self.approved[call_id]  # with the arguments it was approved with
        assert all(c in results or c in waiting for c in ran)
        assert all(i in self.approved for i in ran if f"t{int(i[1:]) % 3}" in self.deferred_names)  # none ran unapproved


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(1, 4), max_size=4), deferred=st.sets(st.sampled_from(["t0", "t1", "t2"])), steps=actions, by_flag=st.booleans())
def test_any_interleaving_of_approve_reject_and_new_messages_answers_every_call_once(sizes, deferred, steps, by_flag):
    """Whatever is decided in whatever order, with restarts between, each call has at most one result while it waits and exactly one at the end;
    a call waits by its hook or by its tool's requires_approval, and runs only once approved."""
    world = World(sizes, deferred, by_flag)
    try:
        run_agent(world.agent, "batch 0")
        world.respond()
        world.check()
        for step in steps:
            pending = pending_approvals(world.agent)
            if step[0] in ("approve", "reject") and pending:
                chosen = pending[step[1] % len(pending)]
                if step[0] == "approve":
                    arguments = {"n": -1} if step[2] else None
                    approve(world.agent, chosen.tool_call_id, arguments=arguments)
                    world.approved[chosen.tool_call_id] = arguments or chosen.arguments
                else:
                    reject(world.agent, chosen.tool_call_id)
                    world.rejected.add(chosen.tool_call_id)
            elif step[0] == "message":
                run_agent(world.agent, "batch more" if step[1] else "hello")
                world.respond()
            elif step[0] == "continue":
                continue_agent(world.agent)
                world.respond()
            elif step[0] == "resume":
                assert resume(world.agent, timeout=WAIT).stop_reason in ("stop", "awaiting_approval")
            elif step[0] == "restart":
                history = world.agent.history()
                shutdown(world.agent)
                repair = complete_tool_calls(history)
                assert not repair.changed  # the repair on load never takes a waiting call for a lost one
                world.agent = world.new_agent(repair.messages)
            world.check()
        run_agent(world.agent, "the end")
        world.respond()
        world.check()
        history = world.agent.history()
        results = Counter(m.tool_call_id for m in history if isinstance(m, ToolResultMessage))
        calls = [c.id for m in history if isinstance(m, AssistantMessage) for c in extract_tool_calls(m)[1]]
        assert results == Counter(calls)  # exactly one result per call
    finally:
        shutdown(world.agent)
