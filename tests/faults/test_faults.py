"""The agent under faults and hostile input (docs/failures.md; decisions 15 and 16): one test per class of failure."""

from __future__ import annotations

import gc
import json
import threading
import time
import warnings

import pytest

from helpers import ROOT, WAIT, BareHost, ResultFailsOnceHost, StrictLLM, call, calls_reply, check_wire, make_agent, make_tool, text_result
from yiemagent import (
    AgentClosedError,
    AgentTool,
    AgentToolResult,
    AssistantMessage,
    MessageFormatError,
    TextContent,
    ToolDefinitionError,
    ToolResultMessage,
    ToolSchemaError,
    ToolStore,
    UserMessage,
    YiemAgent,
    abort,
    continue_agent,
    follow_up,
    register_tool,
    run_agent,
    shutdown,
    take_response,
)
from yiemagent.llm import ScriptedLLM



class Gate:
    """An llm_call that blocks until opened; ``entered`` is set when a call is waiting."""

    def __init__(self, reply="ok"):
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.reply = reply

    def __call__(self, formatted):
        self.entered.set()
        assert self.opened.wait(WAIT), "the test never opened the gate"
        return AssistantMessage([TextContent(self.reply)], stop_reason="stop")


def user_texts(history):
    return [m.content[0].text for m in history if isinstance(m, UserMessage)]


# --- 1. Nothing lost (decision 16) ----------------------------------------------------


@pytest.mark.parametrize("send, room", [(run_agent, 16), (follow_up, 16 + 1 + 32)], ids=["run_agent", "follow_up"])
def test_a_send_blocked_on_a_full_channel_raises_when_shutdown_begins(send, room):
    """Decision 16: a send blocked on a full channel when shutdown began raises; every accepted message is returned."""
    gate = Gate()
    agent = make_agent(gate)
    run_agent(agent, "first")
    assert gate.entered.wait(WAIT)
    accepted = [f"m{i}" for i in range(room)]
    for text in accepted:
        send(agent, text)
    outcome = []

    def blocked_sender():
        try:
            send(agent, "one too many")
            outcome.append("accepted")
        except AgentClosedError:
            outcome.append("refused")

    sender = threading.Thread(target=blocked_sender)
    sender.start()
    sender.join(0.05)  # most often it is now blocked; either way it must be refused, never lost
    closer = threading.Thread(target=lambda: outcome.append(shutdown(agent, timeout=WAIT)))
    closer.start()
    sender.join(WAIT)
    assert not sender.is_alive() and outcome[0] == "refused"
    gate.opened.set()
    closer.join(WAIT)
    returned = [m["content"] for m in outcome[1]]
    assert returned == accepted
    assert user_texts(agent.history()) == ["first"]


@pytest.mark.parametrize(
    "send, why",
    [
        (run_agent, "the agent has been shut down; it takes no more messages"),
        (follow_up, "the agent has been shut down; it takes no more messages"),
        (lambda agent, _: continue_agent(agent), "the agent has been shut down; it cannot continue"),
    ],
    ids=["run_agent", "follow_up", "continue"],
)
def test_every_send_after_shutdown_raises(send, why):
    """Decision 16: after shutdown, run_agent, follow_up and continue_agent raise AgentClosedError saying so."""
    agent = make_agent(StrictLLM())
    run_agent(agent, "hi")
    take_response(agent, timeout=WAIT)
    shutdown(agent, timeout=WAIT)
    with pytest.raises(AgentClosedError) as raised:
        send(agent, "late")
    assert str(raised.value) == why


def test_take_response_returns_what_is_left_then_raises():
    """Decision 16: after shutdown, take_response returns the responses still queued, then raises AgentClosedError."""
    agent = make_agent(StrictLLM())
    run_agent(agent, "hi")
    assert agent.wait_until_idle(WAIT)
    shutdown(agent, timeout=WAIT)
    assert take_response(agent).content[0].text == "done"
    with pytest.raises(AgentClosedError) as raised:
        take_response(agent)  # no timeout: it must not block for ever
    assert str(raised.value) == "the agent has been shut down and every response was taken"


def test_a_taker_already_waiting_is_woken_by_shutdown():
    """Decision 16: a take_response waiting without a timeout when shutdown ran is woken and raises."""
    agent = make_agent(StrictLLM())
    started = threading.Event()
    outcome = []

    def taker():
        started.set()
        try:
            outcome.append(take_response(agent))
        except AgentClosedError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=taker)
    thread.start()
    assert started.wait(WAIT)
    shutdown(agent, timeout=WAIT)
    thread.join(WAIT)
    assert not thread.is_alive() and isinstance(outcome[0], AgentClosedError)


def test_shutdown_racing_senders_loses_nothing():
    """Decision 16: with 4 threads sending while shutdown runs, each message is in the history or returned, once."""
    agent = make_agent(StrictLLM())
    start = threading.Barrier(5)
    accepted: list = []
    lock = threading.Lock()

    def sender(p):
        start.wait(WAIT)
        for i in range(200):
            text = f"p{p}-{i}"
            try:
                (run_agent if i % 2 else follow_up)(agent, text)
            except AgentClosedError:
                return
            with lock:
                accepted.append(text)

    threads = [threading.Thread(target=sender, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    start.wait(WAIT)
    returned = [m["content"] for m in shutdown(agent, timeout=WAIT)]
    for t in threads:
        t.join(WAIT)
        assert not t.is_alive()
    processed = user_texts(agent.history())
    assert sorted(processed + returned) == sorted(accepted)


def test_take_response_after_the_loop_died_raises_instead_of_waiting():
    """A loop thread that died closes the output too: take_response without a timeout raises, naming the cause."""
    agent = make_agent(StrictLLM())
    try:

        def broken():
            raise RuntimeError("bug in the loop")

        agent._core._next_action = broken
        agent._core.ring()
        agent._core._thread.join(WAIT)
        with pytest.raises(AgentClosedError) as raised:
            take_response(agent)
        assert str(raised.value) == "the agent's loop thread has stopped (see the 'yiemagent.agent' log); it takes no more messages"
    finally:
        shutdown(agent, timeout=WAIT)


# --- 2. Nothing hung --------------------------------------------------------------------


@pytest.mark.parametrize("where", ["tool", "parallel tool", "timed tool", "before_tool_call", "after_tool_call", "sink", "llm_call"])
def test_shutdown_called_from_inside_the_run_returns_at_once(where):
    """shutdown() from a tool, a hook, the sink or llm_call does not wait for its own run; the response still comes."""
    holder = {}
    seen = []

    def inside(*_):
        if not seen:
            seen.append(shutdown(holder["agent"], timeout=WAIT))

    def execute(i, a, s, p):
        if where.endswith("tool"):
            inside()
        return text_result("ran")

    def llm(formatted):
        if where == "llm_call":
            inside()
        if formatted["messages"][-1]["role"] == "tool":
            return AssistantMessage([TextContent("finished")], stop_reason="stop")
        return calls_reply(call("c1", "work", {}), call("c2", "work", {}))

    hooks = {"before_tool_call": inside if where == "before_tool_call" else None, "after_tool_call": inside if where == "after_tool_call" else None}
    sink = (lambda event: inside()) if where == "sink" else None
    tool = make_tool("work", execute, parallel=where == "parallel tool", timeout_s=WAIT if where == "timed tool" else None)
    agent = make_agent(llm, tool, sink=sink, parallel_tool_execute=where == "parallel tool", **hooks)
    holder["agent"] = agent
    run_agent(agent, "go")
    response = take_response(agent, timeout=WAIT)
    assert seen == [[]], "shutdown returned, with nothing queued"
    assert response.stop_reason in ("stop", "tool_use"), response
    agent._core._thread.join(WAIT)
    assert not agent._core._thread.is_alive(), "the loop ended after the run"
    with pytest.raises(AgentClosedError):
        run_agent(agent, "late")


EVENT_NAMES = ["AgentRunStartEvent", "LLMCallStartEvent", "LLMCallEndEvent", "ToolExecStartEvent", "ToolExecUpdateEvent", "ToolExecEndEvent", "AgentRunEndEvent"]


@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt, GeneratorExit, RuntimeError])
@pytest.mark.parametrize("event_name", EVENT_NAMES)
def test_a_sink_raising_anything_on_any_event_never_strands_the_run(event_name, exc_type):
    """A sink raising any BaseException on any event: the response comes, every call has one result, the next run works."""

    def sink(event):
        if type(event).__name__ == event_name:
            raise exc_type("sink failed")

    def execute(i, a, s, on_partial):
        on_partial("half")
        return text_result("ran")

    llm = StrictLLM(calls_reply(call("c1", "work", {}), call("c2", "work", {})), AssistantMessage([TextContent("answer")]))
    with make_agent(llm, make_tool("work", execute), sink=sink) as agent:
        run_agent(agent, "go")
        assert take_response(agent, timeout=WAIT).content[0].text == "answer"
        results = [m.tool_call_id for m in agent.history() if isinstance(m, ToolResultMessage)]
        assert results == ["c1", "c2"]
        run_agent(agent, "again")
        assert take_response(agent, timeout=WAIT).content[0].text == "done"


def test_abort_ends_the_run_while_a_timed_tool_ignores_its_signal():
    """abort() while a tool with timeout_s ignores its signal: the run ends at once, the call answered "Operation aborted"."""
    entered, release = threading.Event(), threading.Event()

    def stubborn(i, a, signal, p):
        entered.set()
        release.wait(60)  # ignores its signal
        return text_result("too late")

    llm = StrictLLM(calls_reply(call("c1", "stubborn", {})))
    agent = make_agent(llm, make_tool("stubborn", stubborn, timeout_s=60))
    try:
        run_agent(agent, "go")
        assert entered.wait(WAIT)
        abort(agent)
        response = take_response(agent, timeout=WAIT)  # well before the tool's 60 s
        assert response.stop_reason == "aborted"
        result = [m for m in agent.history() if isinstance(m, ToolResultMessage)]
        assert [r.content[0].text for r in result] == ["Operation aborted"]
        run_agent(agent, "next")
        assert take_response(agent, timeout=WAIT).content[0].text == "done"
    finally:
        release.set()
        shutdown(agent, timeout=WAIT)


# --- 3. Nothing poisoned (decision 15) --------------------------------------------------


def nested(depth):
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


POISON_REPLIES = {
    "nesting 1000 deep": calls_reply(call("c1", "work", nested(1000))),
    "nesting 5000 deep as a JSON string": calls_reply(call("c1", "work", "[" * 5000 + "]" * 5000)),
    "NaN in arguments": calls_reply(call("c1", "work", {"x": float("nan")})),
    "NaN in a JSON string": calls_reply(call("c1", "work", '{"x": NaN, "y": Infinity}')),
    "a set in arguments": calls_reply(call("c1", "work", {"s": {1, 2}})),
    "a non-str key": calls_reply(call("c1", "work", {1: "one"})),
    "a lone surrogate": calls_reply(call("c1", "work", {"s": "\ud800"})),
    "content None": AssistantMessage(None),
    "content a str": AssistantMessage("just text"),
    "TextContent(42)": AssistantMessage([TextContent(42)]),
    "a set block": AssistantMessage([{1, 2}]),
    "a thinking block with NaN": AssistantMessage([{"type": "thinking", "x": float("nan")}, TextContent("hm")]),
    "usage of the wrong type": AssistantMessage([TextContent("x")], usage={"input_tokens": 3}),
    "an int id": calls_reply(call(7, "work", {})),
    "a huge id": calls_reply(call("i" * 100_000, "work", {})),
    "a non-str name": calls_reply(call("c1", ["work"], {})),
}


@pytest.mark.parametrize("reply", list(POISON_REPLIES.values()), ids=list(POISON_REPLIES))
def test_a_bad_reply_never_breaks_the_next_run(reply):
    """Decision 15: after any of these replies the history is one a strict server accepts, and the next run works."""
    llm = StrictLLM(reply)
    with make_agent(llm, make_tool("work")) as agent:
        run_agent(agent, "go")
        first = take_response(agent, timeout=WAIT)
        assert isinstance(first, AssistantMessage)
        run_agent(agent, "next")
        assert take_response(agent, timeout=WAIT).content[0].text == "done"
        assert all(check_wire(r) is None for r in llm.requests)
        [m.to_json() for m in agent.history()]  # and the history serialises (a session can store it)


@pytest.mark.parametrize(
    "content",
    [[TextContent(42)], [TextContent("ok"), {"text": float("inf"), "type": "x"}], [ToolResultMessage], ["plain str"], [TextContent("\udcff")]],
    ids=["TextContent(42)", "inf in a dict block", "a class", "a str", "a lone surrogate"],
)
def test_a_bad_tool_result_never_breaks_the_next_run(content):
    """Decision 15: a tool returning content that cannot be sent again: its result is normalised, the next round works."""
    llm = StrictLLM(calls_reply(call("c1", "bad", {})))
    with make_agent(llm, make_tool("bad", lambda i, a, s, p: AgentToolResult(content))) as agent:
        run_agent(agent, "go")
        assert take_response(agent, timeout=WAIT).content[0].text == "done"
        result = [m for m in agent.history() if isinstance(m, ToolResultMessage)][0]
        assert all(isinstance(b, TextContent) and isinstance(b.text, str) for b in result.content if not isinstance(b, dict))
        assert len(llm.requests) == 2


def test_a_tool_returning_text_42_is_read_as_42():
    """Decision 15: TextContent(42) from a tool reaches the model as the text "42"."""
    llm = StrictLLM(calls_reply(call("c1", "count", {})))
    with make_agent(llm, make_tool("count", lambda i, a, s, p: AgentToolResult([TextContent(42)]))) as agent:
        run_agent(agent, "go")
        take_response(agent, timeout=WAIT)
    assert llm.requests[1]["messages"][-1]["content"] == "42"


def test_a_user_message_with_str_content_keeps_its_text():
    """Decision 15: UserMessage("text") is accepted with its text, which reaches the model."""
    llm = StrictLLM()
    with make_agent(llm) as agent:
        run_agent(agent, UserMessage("hello there"))
        take_response(agent, timeout=WAIT)
    assert llm.requests[0]["messages"][-1] == {"role": "user", "content": "hello there"}


@pytest.mark.parametrize(
    "message",
    [UserMessage(None), UserMessage(42), UserMessage([TextContent(42)]), UserMessage([{"type": "x", "v": float("nan")}]), UserMessage([{1, 2}])],
    ids=["None", "int", "TextContent(42)", "a part holding NaN", "a set"],
)
def test_a_user_message_that_cannot_be_sent_is_refused_at_once(message):
    """Decision 15: a caller's message that cannot be sent raises MessageFormatError in the caller's thread."""
    with make_agent(StrictLLM()) as agent:
        with pytest.raises(MessageFormatError):
            run_agent(agent, message)
        with pytest.raises(MessageFormatError, match=r"messages\[0\]"):
            YiemAgent(llm_call=StrictLLM(), agent_event_sink=None, messages=[message])


def test_an_openai_style_part_holding_nan_is_refused_at_once():
    """Decision 15: run_agent({"role": "user", "content": [part with NaN]}) raises before anything is queued."""
    with make_agent(StrictLLM()) as agent:
        with pytest.raises(MessageFormatError, match="nan"):
            follow_up(agent, {"role": "user", "content": [{"type": "audio", "level": float("nan")}]})
        assert agent.follow_up_channel.empty()


# --- 4. Bounded cost ------------------------------------------------------------------


def test_an_unknown_tool_name_of_10_mb_costs_a_bounded_error_text():
    """An unknown tool name of 10 MB: the name is cut, the error result is short, no suggestion is computed."""
    llm = StrictLLM(calls_reply(call("c1", "getTime" + "x" * 10_000_000, {})))
    with make_agent(llm, make_tool("getTime")) as agent:
        run_agent(agent, "go")
        take_response(agent, timeout=WAIT)
        result = [m for m in agent.history() if isinstance(m, ToolResultMessage)][0]
    text = result.content[0].text
    assert len(text) < 2500 and "not found" in text and "Did you mean" not in text
    assert sum(len(json.dumps(r)) for r in llm.requests) < 100_000, "the name is not sent back whole"


def test_a_plausible_unknown_name_still_gets_a_suggestion():
    """A short misspelt name still gets "Did you mean" (suggestions are bounded, not removed)."""
    llm = StrictLLM(calls_reply(call("c1", "getTme", {})))
    with make_agent(llm, make_tool("getTime")) as agent:
        run_agent(agent, "go")
        take_response(agent, timeout=WAIT)
        result = [m for m in agent.history() if isinstance(m, ToolResultMessage)][0]
    assert "Did you mean 'getTime'?" in result.content[0].text


def test_an_argument_error_does_not_repeat_5_mb_of_arguments():
    """Arguments of 5 MB that fail the schema: the error result is capped with a note of what was cut."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    llm = StrictLLM(calls_reply(call("c1", "strict", {"n": "x" * 5_000_000})))
    with make_agent(llm, make_tool("strict", schema=schema)) as agent:
        run_agent(agent, "go")
        take_response(agent, timeout=WAIT)
        result = [m for m in agent.history() if isinstance(m, ToolResultMessage)][0]
    text = result.content[0].text
    assert len(text) < 2500 and "characters cut" in text and "Invalid arguments for tool 'strict'" in text


# --- 5. Duplicate ids ------------------------------------------------------------------


def test_duplicate_ids_in_one_reply_are_renamed_and_each_answered_once():
    """Two calls of one reply with the same id: the later becomes "<id>_2"; each has one result; a strict server accepts it."""
    llm = StrictLLM(calls_reply(call("dup", "work", {"n": 1}), call("dup", "work", {"n": 2}), call("dup_2", "work", {"n": 3})))
    with make_agent(llm, make_tool("work")) as agent:
        run_agent(agent, "go")
        assert take_response(agent, timeout=WAIT).content[0].text == "done"
        results = [(m.tool_call_id, m.content[0].text) for m in agent.history() if isinstance(m, ToolResultMessage)]
    assert results == [("dup", "work:[('n', 1)]"), ("dup_3", "work:[('n', 2)]"), ("dup_2", "work:[('n', 3)]")]
    sent = [c["id"] for c in llm.requests[1]["messages"][2]["tool_calls"]]
    assert sent == ["dup", "dup_3", "dup_2"]


# --- 6. Threads released ----------------------------------------------------------------


def test_200_dropped_agents_release_their_threads():
    """An agent dropped without shutdown is collected and its threads end (200 agents: back to the baseline)."""
    gc.collect()
    baseline = set(threading.enumerate())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        for _ in range(200):
            agent = YiemAgent(llm_call=StrictLLM(), agent_event_sink=None)
            del agent
        gc.collect()
    deadline = time.monotonic() + WAIT  # one bound for all 400 threads, not WAIT each: a broken release fails in WAIT s
    for thread in set(threading.enumerate()) - baseline:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert set(threading.enumerate()) <= baseline


def test_shutdown_returns_after_the_agents_threads_have_ended():
    """After shutdown returns, neither the loop thread nor the run thread of the agent is alive (30 agents, each
    after a run: the run thread, told to stop as the loop exits, is waited for, not left to end on its own)."""
    for number in range(30):
        agent = make_agent(ScriptedLLM([AssistantMessage([TextContent("hi")], stop_reason="stop")]), session_id=f"threads-{number}", builtin_tools=False)
        run_agent(agent, "go")
        take_response(agent, timeout=WAIT)
        shutdown(agent, timeout=WAIT)
        assert [t.name for t in threading.enumerate() if t.name.startswith(f"yiemagent-threads-{number}-")] == []


def test_a_dropped_agent_warns_and_its_run_is_aborted():
    """Dropping an agent mid-run gives a ResourceWarning naming it, pointing at the code that dropped it (as Python's
    own warnings for unclosed resources do); its run is aborted from a daemon thread of its own and its threads end."""
    entered, release = threading.Event(), threading.Event()
    aborted_in = []

    def slow(i, a, signal, p):
        signal.on_abort(lambda: aborted_in.append((threading.current_thread().name, threading.current_thread().daemon)))
        entered.set()
        signal.wait(WAIT)
        release.set()
        return text_result("stopped")

    agent = make_agent(StrictLLM(calls_reply(call("c1", "slow", {}))), make_tool("slow", slow), session_id="dropped")
    run_agent(agent, "go")
    assert entered.wait(WAIT)
    core = agent._core
    with pytest.warns(ResourceWarning) as caught:
        del agent
        gc.collect()
    [warning] = [w for w in caught if w.category is ResourceWarning]
    assert str(warning.message) == "agent 'yiemagent-dropped' was garbage-collected without shutdown(); its threads are released"
    assert warning.filename == __file__
    assert release.wait(WAIT), "the run's signal fired"
    assert aborted_in == [("yiemagent-dropped-abandon", True)]
    core._thread.join(WAIT)
    core._worker.thread.join(WAIT)
    assert not core._thread.is_alive() and not core._worker.thread.is_alive()


def test_a_dropped_agent_closes_its_channels_aborts_its_run_and_logs_what_it_discarded(caplog):
    """An agent dropped mid-run with messages queued: a ResourceWarning names it, its run is aborted from a thread
    named for it, its channels refuse more (saying why), its run ends "aborted" naming the cause, and the queued
    messages it discarded are counted in a warning."""
    entered = threading.Event()
    aborted_in = []

    def slow(i, a, signal, p):
        signal.on_abort(lambda: aborted_in.append(threading.current_thread().name))
        entered.set()
        signal.wait(WAIT)
        return text_result("stopped")

    agent = make_agent(StrictLLM(calls_reply(call("c1", "slow", {}))), make_tool("slow", slow), session_id="dropped-queued")
    run_agent(agent, "go")
    assert entered.wait(WAIT)
    run_agent(agent, "queued 1")
    follow_up(agent, "queued 2")
    inputs, follow_ups, output = agent.input_channel, agent.follow_up_channel, agent.output_channel
    with pytest.warns(ResourceWarning) as caught:
        del agent
        gc.collect()
    assert [str(w.message) for w in caught if w.category is ResourceWarning and str(w.message).startswith("agent ")] == [
        "agent 'yiemagent-dropped-queued' was garbage-collected without shutdown(); its threads are released"
    ]
    response = output.get(timeout=WAIT)
    assert (response.stop_reason, response.error_message) == ("aborted", "aborted: the agent was garbage-collected without shutdown")
    assert aborted_in == ["yiemagent-dropped-queued-abandon"]
    for thread in threading.enumerate():
        if thread.name == "yiemagent-dropped-queued-abandon":
            thread.join(WAIT)
    for channel in (inputs, follow_ups):
        with pytest.raises(AgentClosedError) as raised:
            channel.put({"role": "user", "content": "late"})
        assert str(raised.value) == "the agent was garbage-collected without shutdown"
    [record] = [r for r in caplog.records if r.name == "yiemagent.agent" and r.levelname == "WARNING"]
    assert record.getMessage() == "an agent dropped without shutdown had 2 queued message(s); they were discarded"


def test_an_agent_still_open_at_interpreter_exit_gives_no_warning():
    """At exit an agent not shut down is not reported as dropped: its daemon threads just stop (no finalizer at exit)."""
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "from yiemagent import YiemAgent\n"
        "from yiemagent.llm import ScriptedLLM\n"
        "agent = YiemAgent(llm_call=ScriptedLLM(), agent_event_sink=None, session_id='open-at-exit')\n"
        "print('made')\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", script],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "made\n", "")


# --- 7. Early, clear errors -------------------------------------------------------------


def test_register_tool_on_an_agent_names_the_store_argument():
    """register_tool(agent, tool) raises at once, pointing to agent.tool_store."""
    with make_agent(StrictLLM()) as agent:
        with pytest.raises(TypeError, match=r"store must be a ToolStore, got YiemAgent \(for an agent, pass agent.tool_store\)"):
            register_tool(agent, make_tool("x"))


@pytest.mark.parametrize(
    "kwargs, text",
    [
        ({"tool_store": {}}, "YiemAgent(tool_store=...) expects a ToolStore or None, got dict: {}"),
        ({"before_tool_call": "nope"}, "YiemAgent(before_tool_call=...) expects a callable or None, got str: 'nope'"),
        ({"after_tool_call": 3}, "YiemAgent(after_tool_call=...) expects a callable or None, got int: 3"),
        ({"prepare_context": 3}, "YiemAgent(prepare_context=...) expects a callable or None, got int: 3"),
        ({"format_msg_for_llm": []}, "YiemAgent(format_msg_for_llm=...) expects a callable or None, got list: []"),
        ({"agent_event_sink": 5}, "YiemAgent(agent_event_sink=...) expects a callable or None, got int: 5"),
        ({"llm_call": None}, "YiemAgent(llm_call=...) expects a callable, got NoneType: None"),
        ({"system_prompt": b"be brief"}, "YiemAgent(system_prompt=...) expects a str, got bytes"),
        ({"usage_limits": {"total_tokens": 10}}, "YiemAgent(usage_limits=...) expects a UsageLimits or None, got dict"),
    ],
    ids=["tool_store", "before_tool_call", "after_tool_call", "prepare_context", "format_msg_for_llm", "agent_event_sink", "llm_call", "system_prompt", "usage_limits"],
)
def test_constructor_names_the_bad_argument(kwargs, text):
    """YiemAgent(...) with an argument of the wrong type raises TypeError naming it, what was expected and what came."""
    args = {"llm_call": StrictLLM(), "agent_event_sink": None, **kwargs}
    with pytest.raises(TypeError) as raised:
        YiemAgent(**args)
    assert str(raised.value) == text


def test_constructor_names_the_history_entry_that_is_not_a_message():
    """messages= holding something other than an AgentMessage raises MessageFormatError naming its index and type."""
    with pytest.raises(MessageFormatError) as raised:
        YiemAgent(llm_call=StrictLLM(), agent_event_sink=None, messages=[UserMessage([TextContent("hi")]), {"role": "user", "content": "x"}])
    assert str(raised.value) == "messages[1] is dict; expected an AgentMessage"


def test_a_tool_name_with_spaces_is_refused():
    """AgentTool(name="get weather") raises ToolDefinitionError (a ValueError) naming the name."""
    with pytest.raises(ValueError, match="'get weather' contains whitespace"):
        make_tool("get weather")
    with pytest.raises(ToolDefinitionError):
        make_tool("tab\tname")


def test_a_top_level_schema_that_is_not_an_object_is_refused():
    """register_tool with input_schema {"type": "string"} raises ToolSchemaError naming the tool and the type."""
    with pytest.raises(ToolSchemaError, match=r"'s'.*must describe an object.*'string'"):
        register_tool(ToolStore(), make_tool("s", schema={"type": "string"}))


def test_a_schema_that_is_not_strict_json_is_refused():
    """register_tool with {"maximum": inf} in its schema raises ToolSchemaError: the schema goes with every request."""
    schema = {"type": "object", "properties": {"n": {"type": "number", "maximum": float("inf")}}}
    with pytest.raises(ToolSchemaError, match=r"'n'.*input_schema/properties/n/maximum is inf"):
        register_tool(ToolStore(), make_tool("n", schema=schema))


def test_a_tool_is_still_an_agent_tool_after_the_checks():
    """The checks do not refuse ordinary names and schemas: letters, digits, '_' and '-'."""
    store = ToolStore()
    tool = register_tool(store, make_tool("get_time-2", schema={"type": "object", "properties": {}}))
    assert isinstance(tool, AgentTool) and "get_time-2" in store.tools


# --- The run's narrow interface -----------------------------------------------------


def test_a_run_needs_only_its_run_host():
    """process_message drives a whole run through RunHost alone: input, LLM round, append."""
    from yiemagent.run import Run, process_message

    host = BareHost(StrictLLM(), [{"role": "user", "content": "hi"}])
    response = process_message(host, Run(1))
    assert response.content[0].text == "done"
    assert [type(m).__name__ for m in host.appended] == ["UserMessage", "AssistantMessage"]


def test_a_run_whose_input_shutdown_took_makes_no_llm_round():
    """A run that starts as shutdown takes its input ends "aborted" without calling the LLM (decision 16)."""
    from yiemagent.run import Run, process_message

    llm = StrictLLM()
    response = process_message(BareHost(llm, [], closing=True), Run(1))
    assert response.stop_reason == "aborted" and "shut down" in response.error_message
    assert llm.requests == []


def test_an_anthropic_tool_use_holding_nan_does_not_break_the_next_request():
    """Decision 15 over real HTTP: a reply whose tool_use input holds NaN is not JSON, so the
    client refuses it (decision 14: an LLMError, never a tool run with made-up arguments); the
    run ends "error", nothing of it enters the history, and the next run's requests are strict JSON."""
    from localserver import LocalServer, Reply

    from yiemagent import AnthropicClient

    def respond(request):
        json.loads(request.body.decode("utf-8"), parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))  # strict, as a server
        if len(server.requests) == 1:
            body = '{"content": [{"type": "tool_use", "id": "toolu_1", "name": "work", "input": {"x": NaN}}], "stop_reason": "tool_use"}'
            return Reply(body=body.encode(), headers={"Content-Type": "application/json"})
        return Reply(body={"content": [{"type": "text", "text": "fine"}], "stop_reason": "end_turn"})

    tool = make_tool("work")
    with LocalServer(respond) as server:
        client = AnthropicClient("m", "k", base_url=server.url, max_retries=0)
        with make_agent(client, tool) as agent:
            run_agent(agent, "go")
            failed = take_response(agent, timeout=WAIT)
            run_agent(agent, "again")
            assert take_response(agent, timeout=WAIT).content[0].text == "fine"
            history = agent.history()
    assert failed.stop_reason == "error" and "NaN is not JSON" in failed.error_message
    assert [m.role for m in history] == ["user", "user", "assistant"]
    assert len(server.requests) == 2


def test_a_failure_inside_a_batch_still_answers_every_call():
    """A bug that escapes the run mid-batch: the run ends "error" and each call of the last reply gets an error result."""
    from yiemagent.run import Run, process_message

    host = ResultFailsOnceHost(StrictLLM(calls_reply(call("c1", "work", {}), call("c2", "work", {}))), ["go"])
    host.state.tools = {"work": make_tool("work")}
    response = process_message(host, Run(1))
    assert response.stop_reason == "error" and "history store failed" in response.error_message
    results = [(m.tool_call_id, m.is_error) for m in host.appended if isinstance(m, ToolResultMessage)]
    assert results == [("c1", True), ("c2", True)]
    check_wire(format_msg_for_llm_of(host))


def format_msg_for_llm_of(host):
    from yiemagent.formatting import format_msg_for_llm, prepare_context

    return format_msg_for_llm(prepare_context(host.state))
