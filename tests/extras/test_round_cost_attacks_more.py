"""This evening's cheaper round under more attacks (docs/performance.md "The round's steps and its layers (a fifth pass)"; spec §8, §9, §13, §14).

The record's shared list of wires (formatting), the round's stream target made when asked
(events), the reporter's lock made by a first report (pipeline) and the batch's run context
handed to its calls (run, batch, types): each driven by real runs over many turns, with
threads that outlive their round or batch, and held to what the plain path gives.
"""

from __future__ import annotations

import contextvars
import json
import threading

from helpers import WAIT, make_tool, text_result
from reference_format import reference_format
from yiemagent import AgentContext, AssistantMessage, TextContent, UserMessage, YiemAgent, ask, prepare_context
from yiemagent.events import LLMCallEndEvent, LLMDeltaEvent, ToolExecEndEvent, ToolExecStartEvent, ToolExecUpdateEvent
from yiemagent.formatting import format_msg_for_llm
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.streaming import emit_delta
from yiemagent.types import current_run_context


def _reference(system_prompt, messages, tools) -> str:
    return json.dumps(reference_format(AgentContext(system_prompt, list(messages), tools), None))


def test_requests_stay_exact_while_calls_mutate_theirs_threads_format_snapshots_and_the_history_is_edited_between_runs():
    """Every request a run's llm_call gets, and every request other threads format from snapshots meanwhile, is the reference
    formatter's request of its history, whatever the calls do to theirs and however the history is edited between runs."""
    failures: list = []
    agent_box: list = []
    stop = threading.Event()
    turn = [0]

    def llm_call(formatted):
        state = agent_box[0].state
        if json.dumps(formatted) != _reference(state.system_prompt, state.messages, state.tools):
            failures.append(("run", turn[0]))
        messages = formatted["messages"]  # the call keeps and changes its request's list
        messages.append({"role": "user", "content": "kept by the call"})
        messages.insert(1, messages[-1])
        del messages[2:3]
        messages.reverse()
        turn[0] += 1
        if turn[0] % 3:
            return tool_call_reply((f"c{turn[0]}", "echo", json.dumps({"n": turn[0]})), text=f"t{turn[0]}")
        return AssistantMessage([TextContent(f"done {turn[0]}")], stop_reason="stop")

    def formatter():
        while not stop.is_set():
            ctx = prepare_context(agent_box[0].state)
            expected = _reference(ctx.system_prompt, ctx.messages, ctx.tools)
            formatted = format_msg_for_llm(ctx, None)
            if json.dumps(formatted) != expected:
                failures.append(("thread", len(ctx.messages)))
            formatted["messages"].append({"role": "user", "content": "x"})

    with YiemAgent(llm_call=llm_call, tools=[make_tool("echo")], system_prompt="You are a test.", agent_event_sink=None) as agent:
        agent_box.append(agent)
        threads = [threading.Thread(target=formatter) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            for i in range(60):
                ask(agent, f"q{i}", timeout=WAIT)
                history = agent.state.messages
                edit = i % 6
                if edit == 1:
                    history.pop()
                elif edit == 2:
                    history.insert(1, UserMessage([TextContent(f"inserted {i}")]))
                elif edit == 3:
                    del history[: len(history) // 2]
                elif edit == 4:
                    agent.state.messages = history[-2:]  # compaction replacing the history
                elif edit == 5 and i % 12 == 5:
                    history.clear()
        finally:
            stop.set()
            for t in threads:
                t.join(WAIT)
    assert failures == []


def test_a_thread_left_streaming_by_a_round_never_streams_into_a_later_round_or_after_its_end_event():
    """Deltas a thread started by round N keeps emitting while rounds N+1.. run (and while a sink is set and removed) reach the sink only as round N's and only before round N's end event."""
    received: list = []
    agent_box: list = []
    stop = threading.Event()
    leftovers: list = []

    def sink(event):
        received.append(event)

    def llm_call(formatted):
        agent = agent_box[0]
        context = contextvars.copy_context()

        def keep_emitting():
            n = 0
            while not stop.is_set() and n < 200:
                context.run(emit_delta, "text", "x")
                n += 1

        worker = threading.Thread(target=keep_emitting)
        worker.start()
        leftovers.append(worker)
        emit_delta("text", "own")
        agent.agent_event_sink = None if len(leftovers) % 4 == 0 else sink
        emit_delta("text", "own")
        if len(leftovers) % 5:
            return tool_call_reply((f"c{len(leftovers)}", "echo", "{}"))
        return AssistantMessage([TextContent("done")], stop_reason="stop")

    with YiemAgent(llm_call=llm_call, tools=[make_tool("echo")], agent_event_sink=sink) as agent:
        agent_box.append(agent)
        for i in range(20):
            ask(agent, f"q{i}", timeout=WAIT)
        stop.set()
        for worker in leftovers:
            worker.join(WAIT)
    ended: set = set()
    for event in list(received):
        key = (getattr(event, "run_id", None), getattr(event, "round", None))
        if isinstance(event, LLMCallEndEvent):
            ended.add(key)
        elif isinstance(event, LLMDeltaEvent):
            assert key not in ended, f"a delta of {key} after its end event"


def test_a_tool_reporting_from_threads_while_it_returns_gives_start_updates_end_and_nothing_after():
    """A tool whose threads report partial results as it returns: each call's events are its start, its updates, its end, and no update after the end."""
    received: list = []
    lock = threading.Lock()

    def sink(event):
        with lock:
            received.append(event)

    def execute(tool_call_id, args, signal, on_partial_result):
        go = threading.Event()
        workers = [threading.Thread(target=lambda: (go.wait(WAIT), [on_partial_result({"i": i}) for i in range(5)])) for _ in range(3)]
        for w in workers:
            w.start()
        go.set()
        return text_result("ok")

    turn = [0]

    def llm_call(formatted):
        turn[0] += 1
        if turn[0] % 4:
            return tool_call_reply(*[(f"c{turn[0]}_{k}", "reporter", "{}") for k in range(1 + turn[0] % 3)])
        return AssistantMessage([TextContent("done")], stop_reason="stop")

    with YiemAgent(llm_call=llm_call, tools=[make_tool("reporter", execute, parallel=True)], agent_event_sink=sink, parallel_tool_execute=True) as agent:
        for i in range(40):
            agent.agent_event_sink = sink if i % 3 else None
            ask(agent, f"q{i}", timeout=WAIT)
    by_call: dict = {}
    for event in received:
        if isinstance(event, (ToolExecStartEvent, ToolExecUpdateEvent, ToolExecEndEvent)):
            by_call.setdefault(event.tool_call_id, []).append(type(event).__name__)
    for call_id, kinds in by_call.items():
        if "ToolExecEndEvent" in kinds:
            assert kinds[-1] == "ToolExecEndEvent" and kinds.count("ToolExecEndEvent") == 1, (call_id, kinds)
        if "ToolExecStartEvent" in kinds:
            assert kinds[0] == "ToolExecStartEvent", (call_id, kinds)


def test_a_thread_a_tool_started_reads_its_own_batchs_run_context_after_later_batches_began():
    """A thread started with a copy of a call's context reads that call's RunContext (its id, its round) however many batches later it asks, in both modes and with hooks."""
    seen: list = []
    parked: list = []

    def execute(tool_call_id, args, signal, on_partial_result):
        context = contextvars.copy_context()
        parked.append((tool_call_id, (current_run_context().run_id, current_run_context().round), context))
        return text_result("ok")

    turn = [0]

    def llm_call(formatted):
        turn[0] += 1
        for tool_call_id, rounds, context in parked:  # the batches before this round have ended
            got = []
            t = threading.Thread(target=lambda c=context, g=got: g.append(c.run(current_run_context)))
            t.start()
            t.join(WAIT)
            seen.append((tool_call_id, rounds, got[0].tool_call_id if got[0] else None, (got[0].run_id, got[0].round) if got[0] else None))
        if turn[0] % 4:
            return tool_call_reply(*[(f"c{turn[0]}_{k}", "peek", "{}") for k in range(1 + turn[0] % 2)])
        return AssistantMessage([TextContent("done")], stop_reason="stop")

    hooks = [{}, {"before_tool_call": lambda ctx, signal: None, "after_tool_call": lambda ctx, signal: None}]
    for mode in ("sequential", "parallel"):
        for hook in hooks:
            parked.clear()
            turn[0] = 0
            with YiemAgent(llm_call=llm_call, tools=[make_tool("peek", execute, parallel=mode == "parallel")], parallel_tool_execute=mode == "parallel", agent_event_sink=None, **hook) as agent:
                for i in range(8):
                    ask(agent, f"q{i}", timeout=WAIT)
    assert seen and all(got_id == call_id and got_rounds == rounds for call_id, rounds, got_id, got_rounds in seen), [s for s in seen if s[0] != s[2] or s[1] != s[3]][:5]


def test_a_run_context_first_asked_for_after_the_run_by_a_tools_thread_holds_the_history_its_batch_started_from():
    """RunContext.messages read first by a thread a tool started, after the run ended and the idle history was edited, is still the history the batch started from (types.py RunContext)."""
    parked: list = []

    def execute(tool_call_id, args, signal, on_partial_result):
        parked.append(contextvars.copy_context())  # the tool never asks itself; its thread asks later
        return text_result("ok")

    def names(messages):
        return [m.content[0].text if isinstance(m, UserMessage) else type(m).__name__ for m in messages]

    replies = iter([tool_call_reply(("c1", "peek", "{}")), tool_call_reply(("c2", "peek", "{}")), AssistantMessage([TextContent("done")], stop_reason="stop")])
    with YiemAgent(llm_call=lambda formatted: next(replies), tools=[make_tool("peek", execute)], agent_event_sink=None) as agent:
        ask(agent, "q", timeout=WAIT)
        started_from = [names(agent.state.messages[:2]), names(agent.state.messages[:4])]
        agent.state.messages.clear()  # edited while idle, as the agent allows
        agent.state.messages.append(UserMessage([TextContent("another conversation")]))
        got: list = []
        asker = threading.Thread(target=lambda: got.extend(context.run(current_run_context) for context in parked))
        asker.start()
        asker.join(WAIT)
    assert [c.tool_call_id for c in got] == ["c1", "c2"]
    assert [names(c.messages) for c in got] == started_from


def test_approved_typed_and_limited_runs_over_many_turns_send_exact_requests_and_give_resumed_calls_their_run_context():
    """Runs with a typed answer, approvals and usage limits over many turns: every request is the reference's of its history, and every call (a resumed approved one too) sees its run's RunContext."""
    from yiemagent import UsageLimits, approve, pending_approvals, resume

    failures: list = []
    contexts: list = []
    agent_box: list = []
    turn = [0]

    def execute(tool_call_id, args, signal, on_partial_result):
        context = current_run_context()
        contexts.append((tool_call_id, context.tool_call_id if context else None))
        if tool_call_id.startswith("g"):  # resumed before the run's first round
            contexts.append((context.round, context.messages[-1].decision))
        return text_result("ok")

    def llm_call(formatted):
        state = agent_box[0].state
        if json.dumps(formatted["messages"]) != json.dumps(json.loads(_reference(state.system_prompt, state.messages, state.tools))["messages"]):
            failures.append(turn[0])
        formatted["messages"].clear()
        turn[0] += 1
        step = turn[0] % 4
        if step == 1:
            return tool_call_reply((f"g{turn[0]}", "guarded", "{}"), (f"p{turn[0]}", "plain", "{}"))
        if step == 2:
            return tool_call_reply((f"q{turn[0]}", "plain", "{}"))
        return tool_call_reply((f"f{turn[0]}", "final_result", json.dumps({"answer": f"a{turn[0]}"})))

    guarded = make_tool("guarded", execute, requires_approval=True)
    plain = make_tool("plain", execute)
    with YiemAgent(llm_call=llm_call, tools=[guarded, plain], agent_event_sink=None, output_type=dict[str, str],
                   usage_limits=UsageLimits(max_tool_calls=1000)) as agent:
        agent_box.append(agent)
        for i in range(30):
            reply = ask(agent, f"q{i}", timeout=WAIT, check=False)
            while reply.stop_reason == "awaiting_approval":
                for pending in pending_approvals(agent):
                    approve(agent, pending.tool_call_id)
                reply = resume(agent, timeout=WAIT, check=False)
    assert failures == []
    assert contexts and [c for c in contexts if c[0] != c[1] and c != (0, "resumed")] == []
    assert contexts.count((0, "resumed")) == len([c for c in contexts if str(c[0]).startswith("g")]) > 0


def test_a_streaming_http_client_with_its_sink_set_removed_or_aborted_mid_stream_keeps_each_rounds_deltas_inside_it():
    """OpenAIClient(stream=True) against a real server, the sink set, removed or the run aborted between two chunks:
    a round's deltas reach the sink in order, between its start and end events, and every run ends and the next works."""
    from localserver import LocalServer, Reply
    from yiemagent import LLMCallStartEvent, abort
    from yiemagent.llm import OpenAIClient

    received: list = []
    agent_box: list = []
    action = ["set"]

    def sse(*texts, finish=None) -> bytes:
        events = [{"model": "m", "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}]} for t in texts]
        if finish:
            events.append({"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        return ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + ("data: [DONE]\n\n" if finish else "")).encode()

    def between():
        agent = agent_box[0]
        if action[0] == "set":
            agent.agent_event_sink = received.append
        elif action[0] == "remove":
            agent.agent_event_sink = None
        else:
            abort(agent, "stop")

    body = [sse("A"), between, sse("B", finish="stop")]
    with LocalServer(lambda request: Reply(chunks=body, headers={"Content-Type": "text/event-stream"})) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", stream=True, timeout=WAIT)
        with YiemAgent(llm_call=client, agent_event_sink=None) as agent:
            agent_box.append(agent)
            for i in range(30):
                action[0] = ("set", "remove", "abort")[i % 3]
                agent.agent_event_sink = None if action[0] == "set" else received.append
                reply = ask(agent, f"q{i}", timeout=WAIT, check=False)
                assert reply.stop_reason == ("aborted" if action[0] == "abort" else "stop"), (i, reply)
    rounds: dict = {}
    for event in received:
        key = (getattr(event, "run_id", None), getattr(event, "round", None))
        if isinstance(event, LLMCallStartEvent):
            rounds[key] = "open"
        elif isinstance(event, LLMCallEndEvent):
            rounds[key] = "ended"
        elif isinstance(event, LLMDeltaEvent):
            assert rounds.get(key, "open") == "open", f"a delta of {key} after its end"
    by_round: dict = {}
    for event in received:
        if isinstance(event, LLMDeltaEvent):
            by_round.setdefault(event.run_id, []).append(event.text)
    assert all(texts in (["A"], ["B"], ["A", "B"]) for texts in by_round.values()), by_round


def test_sub_runs_of_parallel_agent_tool_calls_count_once_in_the_parent_run_with_or_without_a_sink():
    """agent_tool calls of parallel batches, their sub-runs' usage handed through each call's reporter: the parent's usage is its rounds' plus every sub-run's, with a sink or none."""
    import dataclasses
    from dataclasses import replace

    from yiemagent import LLMUsage, agent_tool
    from yiemagent.llm import ScriptedLLM

    sub_usage, round_usage = LLMUsage(10, 2, total_tokens=12), LLMUsage(100, 5, total_tokens=105)
    made: list = []

    def make():
        sub = YiemAgent(llm_call=ScriptedLLM([AssistantMessage([TextContent("42")], stop_reason="stop", model="sub", usage=sub_usage)]), agent_event_sink=None)
        made.append(sub)
        return sub

    expert = dataclasses.replace(agent_tool(make, name="expert", description="asks an expert"), parallel_tool_execute=True)
    turn = [0]

    def llm_call(formatted):
        turn[0] += 1
        if turn[0] % 2:
            calls = [(f"c{turn[0]}_{k}", "expert", json.dumps({"task": "six times seven?"})) for k in range(3)]
            return replace(tool_call_reply(*calls), usage=round_usage)
        return AssistantMessage([TextContent("done")], stop_reason="stop", usage=round_usage)

    received: list = []
    with YiemAgent(llm_call=llm_call, tools=[expert], agent_event_sink=None, parallel_tool_execute=True) as agent:
        for i in range(12):
            agent.agent_event_sink = received.append if i % 2 else None
            ask(agent, f"q{i}", timeout=WAIT)
        assert agent.usage.input_tokens == 12 * (2 * 100 + 3 * 10)


def test_a_timed_tool_reporting_from_threads_past_its_timeout_gives_no_update_after_its_end():
    """A tool with timeout_s whose threads keep reporting past its timeout (and past the run): its call's events are start, updates, end, and nothing after."""
    received: list = []
    lock = threading.Lock()
    stop = threading.Event()
    workers: list = []

    def sink(event):
        with lock:
            received.append(event)

    def execute(tool_call_id, args, signal, on_partial_result):
        for _ in range(2):
            w = threading.Thread(target=lambda: [on_partial_result("p") for _ in iter(lambda: stop.is_set(), True)])
            w.start()
            workers.append(w)
        signal.wait(WAIT)  # until the timeout fires its signal
        return text_result("late")

    turn = [0]

    def llm_call(formatted):
        turn[0] += 1
        if turn[0] % 2:
            return tool_call_reply((f"c{turn[0]}", "slow", "{}"))
        return AssistantMessage([TextContent("done")], stop_reason="stop")

    with YiemAgent(llm_call=llm_call, tools=[make_tool("slow", execute, timeout_s=0.02)], agent_event_sink=sink) as agent:
        for i in range(8):
            ask(agent, f"q{i}", timeout=WAIT)
        stop.set()
        for w in workers:
            w.join(WAIT)
    by_call: dict = {}
    with lock:
        for event in received:
            if isinstance(event, (ToolExecStartEvent, ToolExecUpdateEvent, ToolExecEndEvent)):
                by_call.setdefault(event.tool_call_id, []).append(type(event).__name__)
    assert len(by_call) == 8
    for call_id, kinds in by_call.items():
        assert kinds[0] == "ToolExecStartEvent" and kinds[-1] == "ToolExecEndEvent" and kinds.count("ToolExecEndEvent") == 1, (call_id, kinds[-3:])
