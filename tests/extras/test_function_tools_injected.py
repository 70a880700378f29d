"""tool(): the parameters the pipeline fills in are never the model's (docs/conformance.md, "Tools from functions").

A model sends whatever keys it likes; with ``**kwargs`` those keys reach the function. A
key named like ``signal``, ``on_partial_result``, a keyword a ``functools.partial`` binds or
a bound method's ``self`` must neither replace what the pipeline or the tool's definition
passes nor reach ``**kwargs``: the call is an error result naming the key.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import ASSISTANT, SEQUENTIAL, EventRecorder, context_with
from strategies import json_values
from yiemagent import AbortSignal, AgentToolCall, RunContext, ToolDefinitionError, ToolError, ToolExecUpdateEvent, execute_tool_calls, tool

RESERVED = ("signal", "on_partial_result")


def run_batch(made, args):
    """One call through the real pipeline: (text, is_error, the events)."""
    recorder = EventRecorder()
    batch = execute_tool_calls(context_with(made), ASSISTANT, [AgentToolCall("c1", made.name, args)], SEQUENTIAL, None, recorder)
    return batch.messages[0].content[0].text, batch.messages[0].is_error, recorder.events


class Holder:
    def method(self, n: int = 0, *, signal: AbortSignal, **extra: Any) -> str:
        return report(self=self, signal=signal, extra=extra)


def report(**got: Any) -> str:
    SEEN.append(got)
    return "ran"


SEEN: list[dict[str, Any]] = []


def explicit(n: int = 0, *, signal: AbortSignal, on_partial_result: Callable[[Any], None], **extra: Any) -> str:
    on_partial_result("progress")
    return report(signal=signal, on_partial_result=on_partial_result, extra=extra)


def positional_only(signal, on_partial_result, /, n: int = 0, **extra: Any) -> str:
    on_partial_result("progress")
    return report(signal=signal, on_partial_result=on_partial_result, extra=extra)


def only_kwargs(**extra: Any) -> str:
    return report(extra=extra)


def configured(db: str, n: int = 0, signal: Optional[AbortSignal] = None, **extra: Any) -> str:
    return report(db=db, signal=signal, extra=extra)


HOLDER = Holder()
SHAPES = {
    "keyword-only": (explicit, {}),
    "positional-only": (positional_only, {}),
    "only **kwargs": (only_kwargs, {}),
    "partial": (functools.partial(configured, db="production"), {"db": "production"}),
    "bound method": (HOLDER.method, {"self": HOLDER}),
}


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
@pytest.mark.parametrize("key", RESERVED)
def test_a_model_argument_named_like_a_pipeline_parameter_is_an_error_result_naming_it(shape, key):
    """{"signal": "x"} or {"on_partial_result": 42} sent to a **kwargs tool is an error result naming the key; the function never runs."""
    made = tool(SHAPES[shape][0], name="t")
    SEEN.clear()
    text, is_error, _ = run_batch(made, {"n": 1, key: "x" if key == "signal" else 42})
    assert is_error and repr(key) in text
    assert SEEN == []
    with pytest.raises(ToolError, match=f"'{key}' cannot be sent as argument"):
        made.execute("c1", {key: "x"}, None, lambda partial: None)  # also when called without the pipeline's validation
    assert SEEN == []


@pytest.mark.parametrize("shape, key", [("partial", "db"), ("bound method", "self")])
def test_a_model_argument_named_like_a_bound_parameter_cannot_replace_it(shape, key):
    """A keyword a partial binds (the database) or a bound method's self is the tool's definition, not the model's, also through **kwargs."""
    fn, fixed = SHAPES[shape]
    made = tool(fn, name="t")
    SEEN.clear()
    text, is_error, _ = run_batch(made, {key: "evil"})
    assert is_error and repr(key) in text and SEEN == []
    assert run_batch(made, {"n": 1, "other": 2})[:2] == ("ran", False)
    assert SEEN[-1][key] is fixed[key] and SEEN[-1]["extra"] == {"other": 2}


@pytest.mark.parametrize("shape, key", [("partial", "db"), ("bound method", "self")])
def test_a_direct_call_cannot_replace_a_bound_parameter_either(shape, key):
    """execute called by hand (no schema validation before it): a partial's keyword or a bound method's self is refused by name, the function never runs."""
    made = tool(SHAPES[shape][0], name="t")
    SEEN.clear()
    with pytest.raises(ToolError) as raised:
        made.execute("c1", {key: "evil", "n": 1}, None, lambda partial: None)
    assert str(raised.value) == (
        f"Tool 't': {key!r} cannot be sent as argument(s): passed in by the pipeline or fixed by the tool's definition; leave it out"
    )
    assert SEEN == []


def test_a_callable_objects_self_is_not_the_models_to_send():
    """The self of a callable instance's __call__ is hidden from its signature; sent by the model it is refused as not the model's."""

    class Doubler:
        def __call__(self, n: int) -> int:
            return 2 * n

    made = tool(Doubler(), name="double")
    with pytest.raises(ToolError) as raised:
        made.execute("c1", {"n": 1, "self": 0}, None, lambda partial: None)
    assert str(raised.value) == (
        "Tool 'double': 'self' cannot be sent as argument(s): passed in by the pipeline or fixed by the tool's definition; leave it out"
    )


def test_a_positional_only_run_context_parameter_is_passed_by_position():
    """f(ctx: RunContext, /, n): the context (None outside a run) goes in the first place, the model's n after it."""
    def count(ctx: Optional[RunContext], /, n: int) -> str:
        return f"{ctx!r} {n}"

    made = tool(count)
    assert made.input_schema["properties"] == {"n": {"type": "integer"}}
    assert made.execute("c1", {"n": 3}, None, lambda partial: None).content[0].text == "None 3"


def test_the_schema_of_a_kwargs_tool_says_which_names_the_model_cannot_send():
    """propertyNames excludes the pipeline's parameters and the bound ones, so a validating client knows before it calls."""
    assert tool(only_kwargs).input_schema["propertyNames"] == {"not": {"enum": ["on_partial_result", "signal"]}}
    assert tool(functools.partial(configured, db="x"), name="c").input_schema["propertyNames"] == {"not": {"enum": ["db", "on_partial_result", "signal"]}}
    assert tool(HOLDER.method).input_schema["propertyNames"] == {"not": {"enum": ["on_partial_result", "self", "signal"]}}
    assert "propertyNames" not in tool(lambda signal, n=1: "", name="closed").input_schema  # additionalProperties is false already


def test_without_kwargs_a_pipeline_parameter_sent_by_the_model_is_refused_too():
    """A closed tool refuses "signal" as an unknown argument (the schema is closed), naming it."""

    def closed(n: int, signal: AbortSignal) -> str:
        return "ran"

    text, is_error, _ = run_batch(tool(closed), {"n": 1, "signal": True})
    assert is_error and "'signal' was unexpected" in text
    with pytest.raises(ToolError, match="'signal' cannot be sent"):
        tool(closed).execute("c1", {"n": 1, "signal": True}, None, lambda partial: None)


@pytest.mark.parametrize("annotation", [str, bool, int, Optional[str], "list[int]"])
def test_a_pipeline_parameter_annotated_with_a_type_it_never_gets_is_a_definition_error(annotation):
    """signal: str would receive an AbortSignal; the decoration says so, naming the parameter."""

    def f(signal) -> str:
        return ""

    f.__annotations__ = {"signal": annotation}
    with pytest.raises(ToolDefinitionError, match="parameter 'signal' is filled in by the pipeline"):
        tool(f)

    def g(on_partial_result: int) -> str:
        return ""

    with pytest.raises(ToolDefinitionError, match="parameter 'on_partial_result' is filled in by the pipeline"):
        tool(g)


def test_pipeline_parameters_annotated_as_what_they_get_are_accepted():
    """AbortSignal, Optional[AbortSignal], Any, object, Callable and no annotation all fit."""

    def f(signal: Optional[AbortSignal], on_partial_result: Callable[[Any], None]) -> str:
        return ""

    def g(signal: Any, on_partial_result: object) -> str:
        return ""

    def h(signal: AbortSignal, on_partial_result: Optional[Callable[..., Any]] = None) -> str:
        return ""

    for fn in (f, g, h):
        assert tool(fn).input_schema["properties"] == {}


reserved_heavy_keys = st.sampled_from(["signal", "on_partial_result", "db", "self", "n", "other"]) | st.text(max_size=6)


@given(shape=st.sampled_from(list(SHAPES)), args=st.dictionaries(reserved_heavy_keys, json_values, max_size=5))
def test_whatever_the_model_sends_the_pipeline_parameters_the_function_gets_are_the_pipelines(shape, args):
    """For any model arguments and any signature, the function receives the pipeline's signal and callback and the bound values, or does not run and the error names a key the model may not send."""
    fn, fixed = SHAPES[shape]
    made = tool(fn, name="t")
    SEEN.clear()
    text, is_error, events = run_batch(made, args)
    forbidden = sorted(set(args) & (set(RESERVED) | set(fixed)))
    if not SEEN:
        assert is_error
        assert forbidden or "n" in args, (text, args)  # only a forbidden key or a bad n stops it
        if forbidden:
            assert any(repr(k) in text for k in forbidden)
        return
    assert not forbidden and not is_error
    got = SEEN[0]
    if "signal" in got:
        assert isinstance(got["signal"], AbortSignal)
    if "on_partial_result" in got:
        assert [e.partial_result for e in events if isinstance(e, ToolExecUpdateEvent)] == ["progress"]
    for key, value in fixed.items():
        assert got[key] is value
    assert not set(got["extra"]) & (set(RESERVED) | set(fixed))
    named = set() if shape == "only **kwargs" else {"n"}
    assert got["extra"] == {k: v for k, v in args.items() if k not in named}
