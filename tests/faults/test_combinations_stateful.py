"""Capabilities in combination: random agents driven through random conversations keep every promise (spec §5, §6, §9; decisions 1, 8, 15-18).

A feature tested alone can still break beside another: an approval waiting in a session
reopened by a new agent, a usage limit reached in a parallel batch that a sub-agent is part
of, an abort during a streamed round of a fallback model. This machine builds one agent
with a random combination of the agent's capabilities, then drives a random multi-turn
conversation through it, checking the promises after every step and, whenever the agent is
idle, all of them:

- every tool call answered exactly once (a deferred call: not before its decision), the
  answers after their calls;
- the history valid to send: formatted by ``format_msg_for_llm``, each tool call has its
  result and each result its call (``helpers.check_wire``);
- every message the machine sent is in the history exactly once, and no LLM request is
  made without one (a request with no conversation);
- every reply its own run's: the responses are the runs' own (``AgentRunEndEvent``), in
  order, each taken once, and an answer names the turn whose request it answered;
- the sink never entered by two threads at once (decision 8); the streamed deltas of a
  round joined are its reply's text;
- every failure a value or a typed error naming its cause: a failed run's reply has an
  ``error_message``, an error result has text, a verb raises a ``YiemAgentError`` with a
  message;
- no thread left behind after ``shutdown`` (``threading.enumerate``).

The capabilities that join it: ``output_type`` (the ``final_result`` tool, valid and invalid
answers), approvals (``before_tool_call`` deferring a tool; ``approve``, ``approve`` with new
arguments, ``reject``, then ``continue_agent`` or a new message superseding them),
``agent_tool`` (a sub-agent per call), ``UsageLimits`` (tool calls, total tokens),
``FallbackLLM`` (a primary that is down, then the model), an ``SQLiteSession`` reopened by a
new agent (pending approvals included), streaming (the model emits its text as deltas),
parallel batches, ``abort``, ``add_message``, ``follow_up`` and ``continue_agent``, at any time
and also while a batch is running (``interrupt_while_working``). The model is
the test's own deterministic ``llm_call``: it answers each request from the plan of its
turn (the last user message the machine sent), so every combination terminates.

Each new capability joins this machine when it lands: an option in ``OPTIONS``, a step of
the model's plans or a rule, and its promise among the checks.

Left out for now, with the reason: the machine does not count the calls each run executed,
so ``max_tool_calls`` is checked here only for its promises (every call answered, the run
ending ``usage_limit`` naming it); that no call runs past the cap is proven in
tests/extras/test_limit_caps.py. ``output`` read back from
a session is compared in its JSON form (a reopened agent gives the dict, not the type).
Under the "ci" profile the machine runs 120 conversations of 35 steps (about 15-30 s on
2 loaded cores); "deep" runs the profile's examples with 50 steps.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from helpers import WAIT, EventRecorder, check_wire, drain_until_idle, make_tool, take_waiting, text_result
from yiemagent import (
    AgentRunEndEvent,
    AgentState,
    AssistantMessage,
    FallbackLLM,
    LLMCallEndEvent,
    LLMDeltaEvent,
    LLMError,
    LLMUsage,
    SQLiteSession,
    TextContent,
    ToolResultMessage,
    ToolStore,
    UsageLimits,
    UserMessage,
    YiemAgent,
    YiemAgentError,
    abort,
    add_message,
    agent_tool,
    approve,
    continue_agent,
    extract_tool_calls,
    follow_up,
    format_msg_for_llm,
    pending_approvals,
    prepare_context,
    register_tool,
    reject,
    run_agent,
    shutdown,
)
from yiemagent.approvals import waiting_calls
from yiemagent._threads import tool_pool
from yiemagent.events import emit_delta
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply

TURN = "turn:"
"""How every user message the machine sends begins; the rest is the turn's name."""
FAILED = {"error", "max_rounds", "usage_limit", "output_invalid", "aborted", "refusal"}
"""The stop reasons of a run that failed: its reply must say why (docs/failures.md)."""
ROUND_USAGE = LLMUsage(input_tokens=400, output_tokens=5, total_tokens=405)
"""What each planned round reports: with max_total_tokens=1000 a run sends two requests; the third, estimated
(count_tokens calibrated on the last reply's 400) past the limit, is not sent (decision 20)."""


@dataclass
class Answer:
    """The typed answer of a run with ``output_type``: the turn it answers."""

    turn: str


# --- the model: the test's own deterministic llm_call -------------------------------

STEPS = ("echo", "slow", "gated", "helper", "bad", "fail", "bad_answer")
"""What one round of a turn may do before the turn's answer (PlannedModel)."""


class PlannedModel:
    """An ``llm_call`` that answers a request from the plan of its turn, streaming its text when asked.

    The turn is the last user message the machine sent (``TURN`` + name); the round is how
    many assistant messages follow it in the request. A plan is a tuple of ``STEPS``; past
    its end the model answers (a text naming the turn, or with ``final_result`` when the
    request offers it). Steps whose tool the request does not offer fall back to "echo".

    Thread safety: ``_lock`` guards ``plans`` and the call ids; callable from any thread.
    """

    def __init__(self, stream: bool) -> None:
        self._lock = threading.Lock()  # guards plans and _ids
        self.plans: dict[str, tuple[str, ...]] = {}
        self.unasked: list[dict[str, Any]] = []  # requests without a user message: no run should send one
        self._ids = itertools.count()
        self.stream = stream

    def plan(self, turn: str, steps: tuple[str, ...]) -> None:
        with self._lock:
            self.plans[turn] = steps

    def __call__(self, formatted: dict[str, Any]) -> AssistantMessage:
        messages = formatted["messages"]
        if not any(m["role"] == "user" for m in messages):
            with self._lock:
                self.unasked.append(formatted)
        starts = [i for i, m in enumerate(messages) if m["role"] == "user" and str(m.get("content", "")).startswith(TURN)]
        turn = messages[starts[-1]]["content"][len(TURN):] if starts else "none"
        rounds = sum(1 for m in messages[starts[-1] + 1:] if m["role"] == "assistant") if starts else 0
        offered = {t["function"]["name"] for t in formatted.get("tools", [])}
        with self._lock:
            steps = self.plans.get(turn, ())
            ids = [f"call-{next(self._ids)}" for _ in range(2)]
        step = steps[rounds] if rounds < len(steps) else "answer"
        if step == "fail":
            raise LLMError(f"the model refused turn {turn!r}", status=400)
        if step == "gated" and "gated" in offered:
            calls = [(ids[0], "gated", {"turn": turn}), (ids[1], "slow", {"turn": turn})]  # a batch that lasts: a message may come meanwhile
        elif step == "slow":
            calls = [(ids[0], "slow", {"turn": turn}), (ids[1], "echo", {"turn": turn})]
        elif step == "helper" and "helper" in offered:
            calls = [(ids[0], "helper", {"task": f"help with {turn}"})]
        elif step == "bad":
            calls = [(ids[0], "echo", "{not json"), (ids[1], "ECHO", {"turn": turn})]
        elif step == "bad_answer" and "final_result" in offered:
            calls = [(ids[0], "final_result", {"turn": 7})]
        elif step in ("echo", "gated", "helper"):
            calls = [(ids[0], "echo", {"turn": turn}), (ids[1], "echo", {"turn": turn, "n": 2})]
        elif "final_result" in offered:
            calls = [(ids[0], "final_result", {"turn": turn})]
        else:
            return self._said(AssistantMessage([TextContent(f"answer {turn}")], stop_reason="stop", model="planned", usage=ROUND_USAGE))
        reply = tool_call_reply(*calls, text=f"working on {turn}")
        return self._said(AssistantMessage(reply.content, stop_reason="tool_use", model="planned", usage=ROUND_USAGE))

    def _said(self, reply: AssistantMessage) -> AssistantMessage:
        if self.stream:
            text = reply.text
            for start in range(0, len(text), 4):
                emit_delta("text", text[start : start + 4])
        return reply


class DownModel:
    """A primary model that is always down (a retryable 503), so that ``FallbackLLM`` asks the next."""

    model = "down"

    def __call__(self, formatted: dict[str, Any]) -> AssistantMessage:
        raise LLMError("the primary model is unavailable", status=503, retryable=True)


def defer_gated(ctx: Any, signal: Any) -> Optional[dict[str, Any]]:
    """The approvals hook: every call of the tool "gated" waits for a person."""
    return {"defer": True, "reason": "a person decides"} if ctx.tool_call.name == "gated" else None


def echo_tool(name: str) -> Any:
    def execute(tool_call_id, args, signal, on_partial_result):
        on_partial_result(f"{name} half way")
        return text_result(f"{name} {sorted(args.items())}")

    return make_tool(name, execute, parallel=True)


def slow_tool(working: threading.Event) -> Any:
    """A tool that works until its call is aborted, or for a fiftieth of a second: an abort has a run to stop.

    ``working`` is set as a call starts."""

    def execute(tool_call_id, args, signal, on_partial_result):
        working.set()
        stopped = threading.Event()
        forget = signal.on_abort(stopped.set) if signal is not None else None
        try:
            stopped.wait(0.02)
        finally:
            if forget is not None:
                forget()
        return text_result("slow work done")

    return make_tool("slow", execute, parallel=True)


def sub_agent() -> YiemAgent:
    """A fresh sub-agent for one call of the ``agent_tool`` "helper"."""
    return YiemAgent(llm_call=ScriptedLLM(["sub answer"]), agent_event_sink=None, builtin_tools=False)


OPTIONS = st.fixed_dictionaries(
    {
        "output_type": st.sampled_from([None, Answer]),
        "approvals": st.booleans(),
        "agent_tool": st.booleans(),
        "usage_limits": st.sampled_from([None, UsageLimits(max_tool_calls=3), UsageLimits(max_total_tokens=1000)]),
        "fallback": st.booleans(),
        "session": st.booleans(),
        "stream": st.booleans(),
        "parallel": st.booleans(),
    }
)
PLANS = st.tuples(st.integers(0, 5), st.lists(st.sampled_from(STEPS), max_size=3)).map(
    lambda drawn: ("bad_answer", "bad_answer") if drawn[0] == 0 else tuple(drawn[1])  # one plan in six spends the typed answer's retry
)


# --- the checks ----------------------------------------------------------------------


def calls_and_answers(history: list[Any]) -> tuple[list[str], list[str]]:
    """The ids of the tool calls of the history's assistant messages, and of its tool results, in order."""
    called = [c.id for m in history if isinstance(m, AssistantMessage) for c in extract_tool_calls(m)[1]]
    answered = [m.tool_call_id for m in history if isinstance(m, ToolResultMessage)]
    return called, answered


def check_answers_follow_calls(history: list[Any]) -> None:
    """Mid-run too: no call id twice, no result twice, no result before (or without) its call."""
    seen: set[str] = set()
    answered: set[str] = set()
    for message in history:
        if isinstance(message, AssistantMessage):
            ids = [c.id for c in extract_tool_calls(message)[1]]
            assert not seen.intersection(ids) and len(set(ids)) == len(ids), f"a call id twice: {ids}"
            seen.update(ids)
        elif isinstance(message, ToolResultMessage):
            assert message.tool_call_id in seen, f"a result without its call: {message.tool_call_id!r}"
            assert message.tool_call_id not in answered, f"a call answered twice: {message.tool_call_id!r}"
            answered.add(message.tool_call_id)
            if message.is_error:
                assert message.content and message.content[0].text.strip(), "an error result that says nothing"


def turn_of(message: Any) -> Optional[str]:
    text = message.content[0].text if isinstance(message, UserMessage) and message.content and isinstance(message.content[0], TextContent) else ""
    return text[len(TURN):] if text.startswith(TURN) else None


def check_answers_name_their_turn(history: list[Any]) -> None:
    """Each answer in the history names the turn that the request it answered ended with."""
    turn = None
    for message in history:
        turn = turn_of(message) or turn
        if isinstance(message, AssistantMessage) and not extract_tool_calls(message)[1] and message.text:
            if message.text.startswith("answer "):
                assert message.text == f"answer {turn}", (message.text, turn)
            elif message.output is not None:  # the typed value, or its JSON form once loaded from a session
                assert message.output in (Answer(turn), {"turn": turn}), (message.output, turn)


def short(message: Any) -> str:
    """One line of a message, for a failure's report."""
    calls = [f"{c.id}:{c.name}" for c in extract_tool_calls(message)[1]] if isinstance(message, AssistantMessage) else []
    said = getattr(message, "text", None) if isinstance(message, AssistantMessage) else getattr(message, "content", "")
    extra = getattr(message, "tool_call_id", "") or getattr(message, "decision", "")
    return f"  {message.role} {extra} {calls or ''} {str(said)[:80]!s}"


def stored_form(history: list[Any]) -> list[dict[str, Any]]:
    """The messages as a session stores them (a typed answer in its JSON form)."""
    return [m.to_dict(encode_json=True) for m in history]


def shared_thread(thread: threading.Thread) -> bool:
    """A thread the process keeps for every agent: the tool pool's (idle between batches) and the deadline watch (_threads.py)."""
    return thread.name.startswith("yiemagent-tool_") or thread.name == "yiemagent-deadlines"


def tool_pool_is_idle() -> bool:
    """True once no call runs on the shared tool pool (a call's slot is released just after its result is read)."""
    deadline = time.monotonic() + WAIT
    while tool_pool.busy() and time.monotonic() < deadline:
        time.sleep(0.01)
    return not tool_pool.busy()


def check_failure_says_why(response: AssistantMessage) -> None:
    if response.stop_reason in FAILED:
        assert isinstance(response.error_message, str) and response.error_message.strip(), f"a failed run that says not why: {response!r}"


class CombinationMachine(RuleBasedStateMachine):
    """One agent with a random combination of capabilities, driven by random operations; the promises checked as it goes."""

    def __init__(self) -> None:
        super().__init__()
        self.threads_before = set(threading.enumerate())
        self.agent: Optional[YiemAgent] = None
        self.directory: Optional[Path] = None
        self.sent: list[str] = []  # the turns sent, in order
        self.responses: list[AssistantMessage] = []  # taken from the agent's output channel
        self.recorders: list[EventRecorder] = []  # one per agent (a reopened session makes a new one)
        self.taken_before = 0  # the responses taken from agents before the current one
        self.count = 0
        self.working = threading.Event()  # set when a call of the tool "slow" starts

    # --- building ----------------------------------------------------------------

    @initialize(options=OPTIONS)
    def build(self, options: dict[str, Any]) -> None:
        self.options = options
        self.model = PlannedModel(options["stream"])
        self.llm = FallbackLLM(DownModel(), self.model) if options["fallback"] else self.model
        if options["session"]:
            self.directory = Path(tempfile.mkdtemp(prefix="yiemagent-combinations-"))
        self.agent = self._new_agent()

    def _new_agent(self) -> YiemAgent:
        options = self.options
        store = ToolStore("combinations")
        for tool in (echo_tool("echo"), echo_tool("gated"), slow_tool(self.working)):
            register_tool(store, tool)
        if options["agent_tool"]:
            register_tool(store, agent_tool(sub_agent, name="helper", description="a sub-agent that helps"))
        recorder = EventRecorder()
        self.recorders.append(recorder)
        return YiemAgent(
            llm_call=self.llm,
            agent_event_sink=recorder,
            tool_store=store,
            builtin_tools=False,
            output_type=options["output_type"],
            before_tool_call=defer_gated if options["approvals"] else None,
            usage_limits=options["usage_limits"],
            parallel_tool_execute=options["parallel"],
            session=SQLiteSession(self.directory / "conversations.db", "conversation") if self.directory else None,
        )

    def _turn(self, steps: tuple[str, ...]) -> str:
        self.count += 1
        turn = f"t{self.count}"
        self.model.plan(turn, steps)
        self.sent.append(turn)
        return TURN + turn

    # --- the rules ---------------------------------------------------------------

    @rule(steps=PLANS)
    def send(self, steps):
        run_agent(self.agent, self._turn(steps))

    @rule(steps=PLANS)
    def send_follow_up(self, steps):
        follow_up(self.agent, self._turn(steps))

    @rule(steps=PLANS)
    def add(self, steps):
        add_message(self.agent, UserMessage([TextContent(self._turn(steps))]))

    @rule()
    def take(self):
        take_waiting(self.agent, self.responses)

    @rule()
    def continue_(self):
        self._typed_failure_or_none(continue_agent, self.agent)

    @rule()
    def abort_run(self):
        abort(self.agent)

    @rule(first=st.sampled_from(["slow", "gated"]), how=st.sampled_from(["abort", "add", "follow_up", "send"]), steps=PLANS)
    def interrupt_while_working(self, first, how, steps):
        """While a batch runs (the tool "slow" works), the run is aborted or a message comes: it lands mid-batch."""
        self.settle()
        self.working.clear()
        run_agent(self.agent, self._turn((first,) + steps))
        assert self.working.wait(WAIT), "the slow tool never started"
        if how == "abort":
            abort(self.agent)
        else:
            {"add": self.add, "follow_up": self.send_follow_up, "send": self.send}[how](steps)

    @rule(choice=st.sampled_from(["approve", "approve_with_arguments", "reject"]), index=st.integers(0, 3))
    def decide(self, choice, index):
        """A person decides one pending call (decisions are taken while the agent is idle: approvals.py)."""
        self.settle()
        pending = pending_approvals(self.agent)
        if not pending:
            return
        call = pending[index % len(pending)]
        if choice == "approve":
            approve(self.agent, call.tool_call_id)
        elif choice == "approve_with_arguments":
            approve(self.agent, call.tool_call_id, arguments={"turn": "approved"})
        else:
            reject(self.agent, call.tool_call_id, reason="the person said no")

    @precondition(lambda self: self.directory is not None)
    @rule()
    def reopen(self):
        """The process ends, another opens the same session: the same history, the same calls waiting for a decision."""
        self.settle()
        history, pending = self.agent.history(), pending_approvals(self.agent)
        assert shutdown(self.agent, timeout=WAIT) == []
        self.taken_before = len(self.responses)
        self.agent = self._new_agent()
        assert stored_form(self.agent.history()) == stored_form(history)
        assert pending_approvals(self.agent) == pending

    @rule(seconds=st.sampled_from([0, 0.001, 0.01]))
    def pause(self, seconds):
        time.sleep(seconds)  # lets the runs interleave differently with the rules

    @rule()
    def settle(self):
        """Wait until the agent is idle, take every response, and check every promise."""
        assert drain_until_idle(self.agent, self.responses), f"never idle: {self.agent!r}"
        history = self.agent.history()
        check_answers_follow_calls(history)
        called, answered = calls_and_answers(history)
        waiting = waiting_calls(history)[1]  # deferred calls, decided or not, that the next run resumes (decision 18)
        assert sorted(set(called) - set(answered)) == sorted(waiting), "a call neither answered nor waiting for approval"
        assert all(w.decision in ("deferred", "approved", "rejected") for w in waiting.values()), waiting
        assert {p.tool_call_id for p in pending_approvals(self.agent)} <= set(waiting)
        last_assistant = max((i for i, m in enumerate(history) if isinstance(m, AssistantMessage)), default=len(history))
        sendable = history[:last_assistant] if waiting else history  # waiting calls are the last reply's (approvals.py)
        state = AgentState("system", None, self.agent.state.tools, sendable, set(), False, None)
        try:
            check_wire(format_msg_for_llm(prepare_context(state)))
        except ValueError as exc:
            raise AssertionError(f"the history cannot be sent ({exc}):\n" + "\n".join(map(short, history))) from exc
        assert sorted(t for t in map(turn_of, history) if t) == sorted(self.sent), "a message sent is lost or doubled"
        try:
            check_answers_name_their_turn(history)
        except AssertionError as exc:
            raise AssertionError(f"{exc}:\n" + "\n".join(map(short, history))) from exc
        ends = [e.response for e in self.recorders[-1].of_type(AgentRunEndEvent)]
        for response in ends:
            event(f"a run ended {response.stop_reason}")  # what the runs came to (--hypothesis-show-statistics)
        taken = self.responses[self.taken_before:]
        assert len(taken) == len(ends) and all(t is e for t, e in zip(taken, ends)), "a response that is not its run's, or lost"
        self._check_streams()

    # --- the promises at every step ------------------------------------------------

    @invariant()
    def no_request_without_a_user_message(self):
        assert self.agent is None or not self.model.unasked, f"a request with no conversation: {self.model.unasked[:1]}"

    @invariant()
    def the_sink_is_never_entered_twice_at_once(self):
        assert all(r.overlaps == 0 for r in self.recorders)

    @invariant()
    def every_answer_follows_its_call(self):
        if self.agent is not None:
            check_answers_follow_calls(self.agent.history())

    @invariant()
    def every_response_is_a_runs_own_and_says_why_it_failed(self):
        if not self.recorders:
            return
        ends = [e.response for e in self.recorders[-1].of_type(AgentRunEndEvent)]
        taken = self.responses[self.taken_before:]
        assert all(t is e for t, e in zip(taken, ends)) and len(taken) <= len(ends)
        for response in self.responses:
            check_failure_says_why(response)

    def _check_streams(self) -> None:
        """The deltas of each round, joined, are its reply's text (none without streaming)."""
        events = self.recorders[-1].events
        aborted = {e.run_id for e in events if isinstance(e, AgentRunEndEvent) and e.response.stop_reason == "aborted"}
        deltas: dict[tuple[int, int], str] = {}
        for seen in events:
            if isinstance(seen, LLMDeltaEvent):
                deltas[(seen.run_id, seen.round)] = deltas.get((seen.run_id, seen.round), "") + seen.text
            elif isinstance(seen, LLMCallEndEvent):
                streamed = deltas.get((seen.run_id, seen.round), "")
                if seen.error is not None:
                    assert seen.error_type, f"an LLM failure without its kind: {seen!r}"
                if not self.options["stream"]:
                    assert streamed == ""
                elif seen.response is not None and seen.run_id not in aborted:
                    assert streamed == seen.response.text, (streamed, seen.response.text)

    def _typed_failure_or_none(self, verb: Any, *args: Any) -> None:
        try:
            verb(*args)
        except YiemAgentError as exc:  # a typed error that names its cause
            assert str(exc).strip()

    def teardown(self):
        try:
            if self.agent is not None:
                self.settle()
        finally:
            if self.agent is not None:
                shutdown(self.agent, timeout=WAIT)
            if self.directory is not None:
                shutil.rmtree(self.directory, ignore_errors=True)
        assert tool_pool_is_idle(), "a tool call still running after shutdown"
        left = [t for t in threading.enumerate() if t not in self.threads_before and not shared_thread(t)]
        for thread in left:
            thread.join(WAIT)
        assert not [t.name for t in left if t.is_alive()], "threads left behind after shutdown"


DEEP = settings.default.max_examples >= 1000
CombinationMachine.TestCase.settings = settings(
    settings.default,
    max_examples=settings.default.max_examples if DEEP else 120,
    stateful_step_count=50 if DEEP else 35,
)
TestCombinations = pytest.mark.spec("5")(CombinationMachine.TestCase)
