"""Hypothesis properties of batches: ordering, termination, errors as results (spec §8-§12)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import ASSISTANT, WAIT, EventRecorder, context_with, make_tool, text_result
from strategies import KINDS, RUNS, json_objects, json_values, modes, plans
from yiemagent import (
    AgentLoopConfig,
    AgentToolCall,
    AgentToolResult,
    ToolExecEndEvent,
    ToolExecStartEvent,
    execute_tool_calls,
)



def build(plan, mode, finish_order):
    """Tools, calls and config for a plan; in parallel mode executing calls finish in ``finish_order``."""
    running = [i for i, kind in enumerate(plan) if kind in RUNS]
    order = [running[k] for k in finish_order if k < len(running)] if mode == "parallel" else []
    finished = {i: threading.Event() for i in running}

    def wait_for_turn(index):
        if index in order:
            position = order.index(index)
            if position > 0:
                assert finished[order[position - 1]].wait(WAIT)

    def execute(tool_call_id, args, signal, on_partial_result):
        index = int(tool_call_id[1:])
        kind = plan[index]
        try:
            wait_for_turn(index)
            on_partial_result(index)
            if kind == "raises":
                raise RuntimeError(f"tool {index} failed")
            if kind == "wrong_type":
                return {"not": "a result"}
            return text_result(f"result {index}", terminate=(kind == "ok_terminate"))
        finally:
            finished[index].set()

    def before(ctx, signal):
        kind = plan[int(ctx.tool_call.id[1:])]
        if kind == "before_raises":
            raise ValueError("hook bug")
        if kind == "blocked":
            return {"block": True, "reason": "not allowed"}
        return None

    def after(ctx, signal):
        if plan[int(ctx.tool_call.id[1:])] == "after_raises":
            raise KeyError("after bug")
        return None

    tool = make_tool("work", execute, schema={"type": "object", "properties": {"n": {"type": "integer"}}}, parallel=True)
    calls = []
    for i, kind in enumerate(plan):
        name = "missing" if kind == "unknown" else "work"
        args = {"n": "not a number"} if kind == "invalid_args" else {"n": i}
        error = "the arguments are not valid JSON" if kind == "bad_json" else None
        calls.append(AgentToolCall(f"c{i}", name, args, "function", error))
    config = AgentLoopConfig(before_tool_call=before, after_tool_call=after, tool_execution=mode)
    return context_with(tool), calls, config


@pytest.mark.spec("8.1")
@pytest.mark.spec("2")
@pytest.mark.spec("9")
@given(plans, modes, st.permutations(range(10)))
def test_every_call_gets_exactly_one_result_in_call_order(plan, mode, finish_order):
    """Property (ordering, error-as-result): one result per call, same ids, call order, errors flagged, no exception."""
    ctx, calls, config = build(plan, mode, finish_order)
    recorder = EventRecorder()
    batch = execute_tool_calls(ctx, ASSISTANT, calls, config, None, recorder)
    assert [m.tool_call_id for m in batch.messages] == [c.id for c in calls]
    for kind, msg in zip(plan, batch.messages):
        assert msg.is_error == (kind not in ("ok", "ok_terminate")), (kind, msg)
        assert isinstance(msg.content[0].text, str) and msg.content[0].text
    for call in calls:
        events = recorder.for_call(call.id)
        assert isinstance(events[0], ToolExecStartEvent) and isinstance(events[-1], ToolExecEndEvent)
        assert sum(isinstance(e, (ToolExecStartEvent, ToolExecEndEvent)) for e in events) == 2
    assert recorder.overlaps == 0


@pytest.mark.spec("10")
@given(plans, modes)
def test_batch_terminates_iff_non_empty_and_every_result_asks(plan, mode):
    """Property (termination): terminate iff the batch is non-empty and every call asked; errors never do."""
    ctx, calls, config = build(plan, mode, [])
    batch = execute_tool_calls(ctx, ASSISTANT, calls, config, None, None)
    assert batch.terminate == (bool(plan) and all(kind == "ok_terminate" for kind in plan))


@pytest.mark.spec("12")
@given(st.lists(json_values | json_objects, max_size=5), modes)
def test_arbitrary_json_arguments_never_raise_out_of_the_pipeline(arguments, mode):
    """Property: any JSON value as arguments yields one result per call and no exception."""
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    tool = make_tool("strict", schema=schema, parallel=True)
    calls = [AgentToolCall(f"c{i}", "strict", value) for i, value in enumerate(arguments)]  # type: ignore[arg-type]
    batch = execute_tool_calls(context_with(tool), ASSISTANT, calls, AgentLoopConfig(tool_execution=mode), None, None)
    assert len(batch.messages) == len(arguments)
    for value, msg in zip(arguments, batch.messages):
        valid = isinstance(value, dict) and isinstance(value.get("a"), str)
        assert msg.is_error != valid


@pytest.mark.spec("12")
@given(st.lists(st.sampled_from(KINDS), min_size=1, max_size=6))
def test_results_are_agent_tool_results(plan):
    """Property: every finalized result is an AgentToolResult with text the model can read."""
    ctx, calls, config = build(plan, "sequential", [])
    recorder = EventRecorder()
    execute_tool_calls(ctx, ASSISTANT, calls, config, None, recorder)
    for end in recorder.of_type(ToolExecEndEvent):
        assert isinstance(end.result, AgentToolResult)
