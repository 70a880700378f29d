"""Properties of tool(): generated schemas are valid JSON Schema, admit every value of the annotated
types, and the function receives each value as the type it declared."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jsonschema
from hypothesis import given
from hypothesis import strategies as st

from helpers import ASSISTANT, SEQUENTIAL, EventRecorder, context_with
from strategies import matches_annotation, type_specs
from yiemagent import AgentToolCall, execute_tool_calls, tool
from yiemagent.typed._codecs import to_json_value


def function_of(annotations: list[Any], defaults: dict[int, Any]):
    """A real function with keyword-only parameters p0..pn of the given annotations (and defaults) that records what it receives."""
    namespace: dict[str, Any] = {"received": {}}
    params = []
    for i in range(len(annotations)):
        if i in defaults:
            namespace[f"default{i}"] = defaults[i]
            params.append(f"p{i}=default{i}")
        else:
            params.append(f"p{i}")
    exec(f"def f(*, {', '.join(params)}):\n    received.update(locals())\n    return 'ok'\n", namespace)
    f = namespace["f"]
    f.__annotations__ = {f"p{i}": a for i, a in enumerate(annotations)}
    return f, namespace["received"]


def holds_mutable(value: Any) -> bool:
    """Whether a call could change ``value`` in place: it is or holds a list, dict, set or (non-frozen) dataclass."""
    if isinstance(value, (list, dict, set, bytearray)):
        return True
    if dataclasses.is_dataclass(value):
        return not type(value).__dataclass_params__.frozen or any(holds_mutable(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, (tuple, frozenset)):
        return any(holds_mutable(item) for item in value)
    return False


@given(st.data())
def test_values_of_annotated_types_validate_and_arrive_as_the_declared_types(data):
    """Any value of any supported annotation, sent as JSON, passes the generated schema and reaches the function as that type."""
    specs = data.draw(st.lists(type_specs, min_size=1, max_size=3), label="annotations")
    values = [data.draw(spec.values, label=f"p{i}") for i, spec in enumerate(specs)]
    fn, received = function_of([s.annotation for s in specs], {})
    t = tool(fn, name="typed")
    jsonschema.Draft202012Validator.check_schema(t.input_schema)
    args = json.loads(json.dumps({f"p{i}": spec.to_json(v) for i, (spec, v) in enumerate(zip(specs, values))}))
    jsonschema.validate(args, t.input_schema)

    batch = execute_tool_calls(context_with(t), ASSISTANT, [AgentToolCall("c1", "typed", args)], SEQUENTIAL, None, EventRecorder())
    assert [(m.content[0].text, m.is_error) for m in batch.messages] == [("ok", False)]
    for i, (spec, value) in enumerate(zip(specs, values)):
        got = received[f"p{i}"]
        assert got == value
        assert matches_annotation(got, spec.annotation), (got, spec.annotation)
        assert to_json_value(got) == to_json_value(value)


@given(st.data())
def test_defaults_validate_against_their_own_schema_and_are_passed_when_omitted(data):
    """A default drawn from the parameter's type is the schema's "default", validates there, and is what an omitted argument gives."""
    spec = data.draw(type_specs, label="annotation")
    default = data.draw(spec.values, label="default")
    fn, received = function_of([spec.annotation], {0: default})
    t = tool(fn, name="typed")
    jsonschema.Draft202012Validator.check_schema(t.input_schema)
    prop = t.input_schema["properties"]["p0"]
    assert "required" not in t.input_schema
    jsonschema.validate(prop["default"], prop)
    t.execute("c1", {}, None, lambda r: None)
    assert received["p0"] == default
    # a default a call could change is a fresh copy each call; an immutable one is passed as it is
    assert (received["p0"] is default) == (not holds_mutable(default))
    t.execute("c1", {"p0": json.loads(json.dumps(prop["default"]))}, None, lambda r: None)
    assert received["p0"] == default  # the schema's default decodes back to the function's default
