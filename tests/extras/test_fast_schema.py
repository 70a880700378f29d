"""The fast argument check gives jsonschema's verdict (docs/performance.md "W1"; spec §8.1, decision 4)."""

from __future__ import annotations

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from yiemagent._fast_schema import compile_fast_check
from yiemagent.pipeline import validate_required_args

NAMES = st.sampled_from(["a", "b", "city", "units", "x"])
TYPES = st.sampled_from(["object", "array", "string", "boolean", "null", "integer", "number"])
ANNOTATIONS = st.fixed_dictionaries({}, optional={"description": st.text(max_size=5), "title": st.just("t"), "format": st.just("date"), "default": st.integers()})


def _schemas() -> st.SearchStrategy:
    leaf = st.one_of(
        st.just({}),
        st.booleans(),
        st.builds(lambda t, a: {"type": t, **a}, TYPES, ANNOTATIONS),
        st.builds(lambda ts: {"type": ts}, st.lists(TYPES, min_size=1, max_size=3)),
        st.builds(lambda e: {"enum": e}, st.lists(st.sampled_from(["metric", "imperial", "1", "", "True"]), min_size=1, max_size=3)),
        st.builds(lambda t, e: {"type": t, "enum": e}, TYPES, st.lists(st.sampled_from(["metric", "imperial"]), min_size=1)),
    )

    def extend(children: st.SearchStrategy) -> st.SearchStrategy:
        objects = st.builds(
            lambda props, required, extra, typed: {
                **({"type": "object"} if typed else {}),
                "properties": props,
                **({"required": required} if required is not None else {}),
                **({"additionalProperties": extra} if extra is not None else {}),
            },
            st.dictionaries(NAMES, children, max_size=3),
            st.none() | st.lists(NAMES, max_size=3),
            st.none() | st.booleans() | children,
            st.booleans(),
        )
        arrays = st.builds(lambda item, typed: {**({"type": "array"} if typed else {}), "items": item}, children, st.booleans())
        return objects | arrays

    return st.recursive(leaf, extend, max_leaves=8)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([1.0, 2.5, 0.0])
    | st.sampled_from(["metric", "imperial", "1", "", "True", "Tokyo"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(NAMES, children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=600)
@given(_schemas(), JSON_VALUES)
def test_the_fast_check_gives_jsonschemas_verdict(schema, value):
    """For every schema of the common shapes and any JSON value, the fast check's verdict is jsonschema's."""
    check = compile_fast_check(schema)
    assert check is not None, schema
    assert check(value) == jsonschema.Draft202012Validator(schema).is_valid(value)


@settings(max_examples=300)
@given(st.lists(TYPES, min_size=1, max_size=2), JSON_VALUES)
def test_each_type_keyword_gives_jsonschemas_verdict(types, value):
    """Each JSON type name, alone or in a list, admits what jsonschema admits (1.0 is an integer, True is not a number)."""
    for schema in ({"type": types[0]}, {"type": types}, {"type": "object", "properties": {"a": {"type": types}}}):
        check = compile_fast_check(schema)
        assert check is not None
        assert check(value) == jsonschema.Draft202012Validator(schema).is_valid(value), schema
        assert check({"a": value}) == jsonschema.Draft202012Validator(schema).is_valid({"a": value}), schema


@given(st.sampled_from([
    {"type": "string", "minLength": 2},
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}},
    {"type": "object", "patternProperties": {"^x": {}}},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
    {"enum": [1, 2]},
    {"$ref": "#/$defs/a", "$defs": {"a": {}}},
    {"type": "strin"},
]))
def test_a_schema_beyond_the_common_shapes_is_left_to_jsonschema(schema):
    """A schema with any keyword the fast check does not model gets no fast check (jsonschema alone decides)."""
    assert compile_fast_check(schema) is None


def test_invalid_arguments_are_named_by_jsonschema():
    """Arguments the fast check refuses get jsonschema's error text, naming the field (decision 4)."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}
    assert validate_required_args({"city": "Tokyo"}, schema) is None
    problem = validate_required_args({"city": 5}, schema)
    assert problem is not None and problem.startswith("city: 5 is not of type 'string'")
    assert "'city' is a required property" in (validate_required_args({}, schema) or "")


def test_valid_arguments_never_reach_jsonschemas_error_listing(monkeypatch):
    """Valid arguments of a common-shape schema are checked without jsonschema's iter_errors (compiled once, checked cheaply)."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    listed = []
    original = jsonschema.Draft202012Validator.iter_errors

    def counting(self, *args, **kwargs):
        listed.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(jsonschema.Draft202012Validator, "iter_errors", counting)
    for _ in range(3):
        assert validate_required_args({"city": "Tokyo"}, schema) is None
    assert listed == []
    assert validate_required_args({"city": 1}, schema) is not None
    assert len(listed) == 1



@settings(max_examples=300)
@given(
    st.one_of(TYPES, st.lists(TYPES, min_size=1, max_size=3)),
    st.lists(st.sampled_from(["metric", "imperial", "1"]), min_size=1, max_size=2),
    st.booleans(),
    st.sampled_from(["metric", "imperial", "1", 1, None, {}, {"city": "x"}, []]),
)
def test_a_type_beside_an_enum_or_properties_gives_jsonschemas_verdict(types, members, with_enum, value):
    """A type the fast check leaves to the enum or the object check beside it (an enum of strings, "type": "object" with properties) still counts as in jsonschema."""
    schema = {"type": types, "enum": members} if with_enum else {"type": types, "properties": {"city": {"type": "string"}}, "required": ["city"]}
    check = compile_fast_check(schema)
    assert check is not None, schema
    assert check(value) == jsonschema.Draft202012Validator(schema).is_valid(value)


PROPERTY_SCHEMAS = st.one_of(
    st.builds(lambda t: {"type": t}, st.sampled_from(["string", "boolean", "object", "array", "integer"])),
    st.builds(lambda e: {"enum": e}, st.lists(st.sampled_from(["metric", "imperial", "1"]), min_size=1, max_size=2)),
    st.builds(lambda t, e: {"type": t, "enum": e}, st.sampled_from(["string", "integer", "boolean"]), st.lists(st.sampled_from(["metric", "imperial"]), min_size=1)),
    st.just({"type": "object", "properties": {"a": {"type": "string"}}}),
)
class _Text(str):
    """A str of another type: the in-place check passes only a value of exactly its type, and asks the property's check about this."""


class _Count(int):
    """An int of another type (as an IntEnum is)."""


PROPERTY_VALUES = st.sampled_from(["metric", "1", "", 1, True, None, ["metric"], {"a": "x"}, {"a": 1}, 3.0, 2.5, _Text("metric"), _Count(1), False, 0])


def _objects_and_values() -> st.SearchStrategy:
    """An object schema of such properties, and a dict whose keys are mostly its properties."""
    properties = st.dictionaries(NAMES, PROPERTY_SCHEMAS, min_size=1, max_size=3)
    return properties.flatmap(lambda props: st.tuples(st.just(props), st.dictionaries(st.sampled_from(sorted(props)) | NAMES, PROPERTY_VALUES, max_size=4)))


@settings(max_examples=600)
@given(_objects_and_values(), st.booleans())
def test_a_property_checked_without_a_call_gives_jsonschemas_verdict(schema_and_value, closed):
    """An object's property checked in place (a value of exactly its string, integer, boolean, array or object type, or in an enum of strings) still gets jsonschema's verdict.

    The values include what the in-place check hands to the property's check: 3.0 for an
    integer, a bool, a subclass of str or int.
    """
    properties, value = schema_and_value
    schema = {"type": "object", "properties": properties, "additionalProperties": not closed}
    check = compile_fast_check(schema)
    assert check is not None, schema
    assert check(value) == jsonschema.Draft202012Validator(schema).is_valid(value)


@given(st.sampled_from(["title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly", "format"]),
       st.sampled_from([None, "https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2020-12/schema#"]),
       st.sampled_from([{}, {"city": "Tokyo"}, {"city": 5}, "Tokyo"]))
def test_a_schema_naming_draft_2020_12_or_holding_annotations_gets_a_fast_check_with_jsonschemas_verdict(annotation, dialect, value):
    """An annotation keyword (at the top and in a property) and a top-level ``$schema`` of draft 2020-12 keep a schema of the common shapes on the fast check."""
    schema = {"type": "object", "properties": {"city": {"type": "string", annotation: "x"}}, "required": ["city"], annotation: "x"}
    if dialect is not None:
        schema["$schema"] = dialect
    check = compile_fast_check(schema)
    assert check is not None, schema
    assert check(value) == jsonschema.Draft202012Validator(schema).is_valid(value)


@given(st.sampled_from([
    {"type": "object", "properties": ["city"]},
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": "city"},
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": [1]},
    {"properties": {"city": 1}},
    {"type": "object", "additionalProperties": 1},
    {"enum": "metric"},
    {"type": []},
    {"type": 1},
    {"items": [{"type": "string"}]},
]))
def test_a_schema_jsonschemas_metaschema_refuses_gets_no_fast_check_and_nothing_raised(schema):
    """A schema the metaschema refuses (a tool made without the registry's check may hold one) gets no fast check, and compiling it raises nothing."""
    assert not jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA).is_valid(schema)
    assert compile_fast_check(schema) is None


@given(st.sampled_from([{"type": "string"}, {"enum": ["metric", "imperial"]}, {"type": ["integer", "null"]}]),
       st.sampled_from(["metric", "Tokyo", 1, 2.0, None, True, []]))
def test_a_property_beyond_the_named_ones_is_admitted_when_it_passes_additional_properties_schema(extra, member):
    """A property the schema does not name is checked against ``additionalProperties``' schema, admitted when it passes it, as jsonschema does."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": extra}
    check = compile_fast_check(schema)
    assert check is not None, schema
    for value in ({"units": member}, {"city": "Tokyo", "units": member}):
        assert check(value) == jsonschema.Draft202012Validator(schema).is_valid(value), value


@given(st.sampled_from([{"type": "string"}, {"enum": ["metric"]}, {"type": "array", "items": {"type": "integer"}}, {"type": "object", "required": ["a"]}]),
       st.booleans(),
       st.sampled_from([[], ["metric"], ["metric", 1], [1, 2.0], [[1], [2.5]], [{"a": 1}, {}], "metric", {"a": 1}, None]))
def test_each_item_of_an_array_is_checked_against_the_items_schema_as_jsonschema_does(items, typed, value):
    """``items`` holds every element of an array to its schema (one failing element refuses the array) and says nothing of a value that is not an array."""
    schema = {"type": "array", "items": items} if typed else {"items": items}
    check = compile_fast_check(schema)
    assert check is not None, schema
    assert check(value) == jsonschema.Draft202012Validator(schema).is_valid(value)
    wrapped = {"type": "object", "properties": {"list": schema}}
    assert compile_fast_check(wrapped)({"list": value}) == jsonschema.Draft202012Validator(wrapped).is_valid({"list": value})
