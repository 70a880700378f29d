"""JSON Schema on jsonschema: checking a tool's input_schema (registry.py), the compiled-validator
cache and the text of a validation error (pipeline.py; spec §8.1 "Validate arguments"; decision 4). The tests the mutation run
asked for: each pins a part of the error text the model reads, or the cache's identity."""

from __future__ import annotations

import warnings
from collections import OrderedDict

import pytest
from jsonschema import Draft202012Validator

import yiemagent.pipeline as pipeline_module
from yiemagent.errors import ToolSchemaError
from yiemagent.pipeline import compiled_validator, validate_required_args
from yiemagent.registry import check_input_schema

OBJECT = {"type": "object"}


def schema_error(schema) -> str:
    with pytest.raises(ToolSchemaError) as info:
        check_input_schema("t", schema)
    return str(info.value)


@pytest.mark.spec("8.1")
def test_a_schema_that_is_not_a_dict_is_refused_naming_its_type():
    assert schema_error([1]) == "tool 't': input_schema must be a JSON object (dict), got list"


@pytest.mark.spec("8.1")
def test_a_schema_error_at_the_top_level_is_placed_at_the_root():
    """Draft 4's metaschema makes ``exclusiveMinimum`` depend on ``minimum``: an error of the schema object itself."""
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object", "exclusiveMinimum": True}
    assert schema_error(draft4) == (
        "tool 't': input_schema is not a valid JSON Schema at (root): 'minimum' is a dependency of 'exclusiveMinimum'"
    )


@pytest.mark.spec("8.1")
def test_a_schema_naming_an_unknown_metaschema_is_read_as_draft_2020_12_without_a_warning():
    """An unknown ``$schema`` URI means Draft 2020-12, quietly: jsonschema's own fallback for it warns
    (a DeprecationWarning saying it will become an error) at registration and at each validation."""
    schema = {"$schema": "https://example.com/tool-arguments", "type": "object", "properties": {"n": {"type": "integer"}}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_input_schema("t", schema)
        assert type(compiled_validator(schema)) is Draft202012Validator
        assert validate_required_args({"n": "x"}, schema) == "n: 'x' is not of type 'integer'. Received arguments: {\"n\": \"x\"}"


@pytest.fixture
def small_cache(monkeypatch):
    """A fresh validator cache of 3 entries."""
    monkeypatch.setattr(pipeline_module, "_cache", OrderedDict())
    monkeypatch.setattr(pipeline_module, "_CACHE_SIZE", 3)
    return pipeline_module._cache


def distinct_schemas(n):
    return [{"type": "object", "properties": {f"p{i}": {"type": "integer"}}} for i in range(n)]


def test_each_schema_gets_its_own_validator_compiled_once(small_cache):
    first, second = distinct_schemas(2)
    validator = compiled_validator(first)
    assert validator.schema is first
    other = compiled_validator(second)
    assert other.schema is second
    assert compiled_validator(first) is validator, "the first schema's validator was compiled again"
    assert compiled_validator(second) is other


def test_the_cache_holds_its_size_and_evicts_the_least_recently_used(small_cache):
    schemas = distinct_schemas(4)
    validators = [compiled_validator(s) for s in schemas[:3]]
    assert [compiled_validator(s) for s in schemas[:3]] == validators, "a full cache of 3 keeps all 3"
    compiled_validator(schemas[0])  # now the most recently used
    newest = compiled_validator(schemas[3])  # evicts schemas[1], the least recently used
    assert len(small_cache) == 3
    assert compiled_validator(schemas[3]) is newest, "the entry just added was evicted"
    assert compiled_validator(schemas[0]) is validators[0]
    assert compiled_validator(schemas[2]) is validators[2]
    assert compiled_validator(schemas[1]) is not validators[1], "the least recently used entry was kept"


def test_an_entry_left_by_a_dead_schema_with_the_same_id_is_not_used(small_cache):
    """The cache is keyed by id(); a new schema can get a dead one's id. The identity check
    keeps a stale entry from answering for it."""
    stale_schema, schema = distinct_schemas(2)
    stale = compiled_validator(stale_schema)
    small_cache[id(schema)] = (stale_schema, stale)
    assert compiled_validator(schema).schema is schema


@pytest.mark.spec("8.1")
def test_a_missing_field_of_a_nested_object_is_named_by_its_path():
    """A missing field is named by its path, a bad value deep in the arguments by its path too (``items/1``), and only a "required" error names a field the value lacks."""
    schema = {"type": "object", "properties": {"a": {"type": "object", "required": ["b"]}}}
    assert validate_required_args({"a": {}}, schema).startswith("a/b: 'b' is a required property.")
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer"}}, "opts": {"type": ["string", "null"]}}}
    assert validate_required_args({"items": [1, "x"]}, schema).startswith("items/1: 'x' is not of type 'integer'.")
    assert validate_required_args({"opts": {}}, schema).startswith("opts: {} is not of type 'string', 'null'.")


@pytest.mark.spec("8.1")
@pytest.mark.parametrize(
    "schema, args, field",
    [
        ({"type": "object"}, [], "(arguments)"),
        ({"type": "object", "additionalProperties": False}, {"x": 1}, "(arguments)"),
        ({"type": "object", "minProperties": 2}, {"x": 1}, "(arguments)"),
    ],
    ids=["not-an-object", "additional-property", "too-few-properties"],
)
def test_an_error_about_the_arguments_as_a_whole_names_them_so(schema, args, field):
    assert validate_required_args(args, schema).startswith(f"{field}: ")


@pytest.mark.spec("8.1")
def test_every_problem_is_listed_separated_by_semicolons_up_to_20():
    schema = {"type": "object", "properties": {f"p{i:02}": {"type": "integer"} for i in range(25)}}
    args = {f"p{i:02}": "x" for i in range(25)}
    text = validate_required_args(args, schema)
    listed = text.split(". Received arguments: ")[0].split("; ")
    assert listed == [f"p{i:02}: 'x' is not of type 'integer'" for i in range(20)]


@pytest.mark.spec("8.1")
def test_a_long_problem_is_cut_at_300_characters():
    schema = {"type": "object", "properties": {"s": {"type": "integer"}}}
    text = validate_required_args({"s": "y" * 100 + "z" * 2000}, schema)
    problem = text.split(". Received arguments: ")[0]
    message = problem.removeprefix("s: ")
    assert message.startswith("'" + "y" * 100) and message[:300].endswith("z")
    assert message.endswith(f"... [{len(repr('y' * 100 + 'z' * 2000) + ' is not of type ' + repr('integer')) - 300} more characters cut]")


@pytest.mark.spec("8.1")
def test_the_arguments_shown_are_cut_at_1000_characters():
    schema = {"type": "object", "properties": {"n": {"type": "string"}}}
    args = {"n": 1, **{f"k{i:02}": "v" * 150 for i in range(19)}}
    received = validate_required_args(args, schema).split(". Received arguments: ")[1]
    assert len(received.split("... [")[0]) == 1000
    assert received.endswith("more characters cut]")


@pytest.mark.spec("8.1")
def test_the_arguments_are_shown_as_json_sorted_and_unescaped():
    schema = {"type": "object", "required": ["city"]}
    text = validate_required_args({"zone": "Zürich", "area": "東京"}, schema)
    assert text.endswith('Received arguments: {"area": "東京", "zone": "Zürich"}')


class Odd:
    def __repr__(self):
        return "Odd()"


class Hostile:
    def __repr__(self):
        raise ValueError("no repr for you")


class Unmeasurable(str):
    def __len__(self):
        raise RuntimeError("no length")


class ReprWithoutLength:
    """Its repr is a str subclass that raises when its length is taken."""

    def __repr__(self):
        return Unmeasurable("ReprWithoutLength()")


@pytest.mark.spec("8.1")
@pytest.mark.parametrize("value, shown", [(Odd(), "Odd()"), (Hostile(), "<Hostile object>"), (ReprWithoutLength(), "<ReprWithoutLength object>")])
def test_a_value_json_cannot_hold_is_shown_by_its_repr_or_its_type(value, shown):
    """Arguments a prepare_arguments hook made may hold any object, its repr raising or unmeasurable; the error text still comes out."""
    text = validate_required_args({"a": value}, {"type": "object", "required": ["city"]})
    assert text == f'city: \'city\' is a required property. Received arguments: {{"a": "{shown}"}}'
