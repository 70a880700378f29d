"""Schemas made from Python types (``typed/_codecs.py``, README "Tools from functions").

What ``tool()`` sends the model for a parameter's annotation, and what it refuses at
decoration: pydantic models with their ``$defs`` written inline (references refused when
recursive or dangling), ``Annotated`` descriptions (also on dataclass and TypedDict
fields, and on dict keys), TypedDict ``Required``/``NotRequired``, ``NewType``, forward
references in dataclasses, set members that must be hashable, and the exact messages of
the types JSON Schema cannot express (docs/conformance.md, "schema from the annotations"
and "a type JSON Schema cannot express").
"""

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, NewType, NotRequired, Optional, Required, TypedDict

import pydantic
import pytest

from yiemagent import ToolDefinitionError, tool
from yiemagent.typed._codecs import InexpressibleType, codec_for


def take_tool(annotation: Any):
    """``tool()`` of a function ``take(x)`` whose one parameter is annotated ``annotation``; it returns ``repr(x)``."""

    def take(x):
        """Take x."""
        return repr(x)

    take.__annotations__ = {"x": annotation, "return": str}
    return tool(take)


def schema_of(annotation: Any) -> dict:
    """The schema the model sees for a parameter annotated ``annotation``."""
    return take_tool(annotation).input_schema["properties"]["x"]


def refusal(annotation: Any) -> str:
    """The ``ToolDefinitionError`` message of ``tool()`` for a parameter annotated ``annotation``."""
    with pytest.raises(ToolDefinitionError) as raised:
        take_tool(annotation)
    return str(raised.value)


def call(annotation: Any, value: Any) -> str:
    """What ``take`` received (its repr) when the model sends ``{"x": value}``."""
    result = take_tool(annotation).execute("c1", {"x": value}, None, lambda partial: None)
    return result.content[0].text


# --- types used below -------------------------------------------------------------------


@dataclass(frozen=True)
class Address:
    city: str


@dataclass
class Pin:
    code: Annotated[int, "the four digits"]


@dataclass
class Later:
    where: "Address2"  # a forward reference, resolved from this module


@dataclass(frozen=True)
class Address2:
    street: str


@dataclass
class Dangling:
    where: "Missing"  # noqa: F821 -- a forward reference nothing resolves


class Order(TypedDict, total=False):
    sku: Required[str]
    note: NotRequired[Annotated[str, "a note for the cook"]]
    deliver_to: NotRequired[Address]


Home = NewType("Home", Address)


class Row:
    """A plain class that happens to have a ``_fields`` attribute: it is no NamedTuple."""

    _fields = ("a", "b")


class Inner(pydantic.BaseModel):
    n: int


class Middle(pydantic.BaseModel):
    inner: Inner = pydantic.Field(description="the inner one")
    maybe: Optional[Inner] = None


class Outer(pydantic.BaseModel):
    middle: Middle
    items: list[Inner]


class Node(pydantic.BaseModel):
    value: int
    next: Optional["Node"] = None


class FrozenTag(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True)
    label: str


class NoSchema(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    convert: Callable[[int], int]


def hand_written(name: str, schema: dict) -> type:
    """A pydantic model whose ``model_json_schema()`` is ``schema``, written by hand (pydantic lets a model override it)."""

    def model_json_schema(cls, *args, **kwargs):
        return json.loads(json.dumps(schema))

    return type(name, (pydantic.BaseModel,), {"__annotations__": {"n": int}, "model_json_schema": classmethod(model_json_schema)})


INNER = {"properties": {"n": {"title": "N", "type": "integer"}}, "required": ["n"], "title": "Inner", "type": "object"}
RECURSIVE = "it refers to itself; recursive types are not supported (the schema is written inline)"


# --- pydantic models: $defs written inline ----------------------------------------------


def test_a_pydantic_models_definitions_are_written_inline():
    """Every ``$ref`` of a nested model (in properties, array items, anyOf, beside a description) is replaced by its definition; no ``$defs`` remain (module docstring: "$defs inlined")."""
    middle = {
        "properties": {
            "inner": {**INNER, "description": "the inner one"},
            "maybe": {"anyOf": [INNER, {"type": "null"}], "default": None},
        },
        "required": ["inner"],
        "title": "Middle",
        "type": "object",
    }
    assert schema_of(Outer) == {
        "properties": {"middle": middle, "items": {"items": INNER, "title": "Items", "type": "array"}},
        "required": ["middle", "items"],
        "title": "Outer",
        "type": "object",
    }


def test_a_pydantic_model_with_nested_models_arrives_validated_as_the_model():
    """The inlined schema's arguments reach the function as the pydantic model, nested models included."""
    received = call(Outer, {"middle": {"inner": {"n": 1}, "maybe": {"n": 2}}, "items": [{"n": 3}]})
    assert received == repr(Outer(middle=Middle(inner=Inner(n=1), maybe=Inner(n=2)), items=[Inner(n=3)]))


def test_a_recursive_pydantic_model_is_refused_naming_it():
    """A model that contains itself cannot be written inline: ToolDefinitionError naming the model (module docstring, "Deviation")."""
    assert refusal(Node) == f"tool 'take': parameter 'x' has type Node, which cannot be a tool argument: {RECURSIVE}"
    assert refusal(list[Node]) == f"tool 'take': parameter 'x' has type Node (in list[{__name__}.Node]), which cannot be a tool argument: {RECURSIVE}"


def test_a_reference_beside_a_reference_is_written_inline_too():
    """A ``$ref`` among the keys beside another ``$ref`` (a hand-written schema) is replaced by its definition as well."""
    model = hand_written("SeeAlso", {"type": "object", "properties": {"inner": {"$ref": "#/$defs/Inner", "x-see": {"$ref": "#/$defs/Inner"}}}, "$defs": {"Inner": INNER}})
    assert schema_of(model) == {"type": "object", "properties": {"inner": {**INNER, "x-see": INNER}}}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"inner": {"$ref": "#/$defs/Inner", "x-see": {"$ref": "#/$defs/Missing"}}}, "$defs": {"Inner": INNER}},
        {"type": "object", "properties": {"n": {"$ref": "#/$defs/Missing"}}},
    ],
    ids=["beside-a-ref", "no-defs-at-all"],
)
def test_a_reference_to_no_definition_is_refused_naming_the_model(schema):
    """A ``$ref`` the schema has no definition for is refused (ToolDefinitionError naming the model), not sent dangling to the model."""
    model = hand_written("Dangles", schema)
    assert refusal(model) == f"tool 'take': parameter 'x' has type Dangles, which cannot be a tool argument: {RECURSIVE}"


def test_a_model_pydantic_cannot_write_a_schema_for_is_refused_with_pydanticss_reason():
    """pydantic's own error (a Callable field) becomes ToolDefinitionError naming the model and pydantic's reason."""
    with pytest.raises(pydantic.errors.PydanticInvalidForJsonSchema) as pydantic_error:
        NoSchema.model_json_schema()
    reason = f"PydanticInvalidForJsonSchema: {pydantic_error.value}"
    assert refusal(NoSchema) == f"tool 'take': parameter 'x' has type NoSchema, which cannot be a tool argument: pydantic cannot write its JSON Schema ({reason})"


def test_without_pydantic_imported_a_plain_class_is_still_refused(monkeypatch):
    """pydantic is optional and never imported by yiemagent: with no ``pydantic`` module loaded, an unmapped class is a ToolDefinitionError."""
    monkeypatch.delitem(sys.modules, "pydantic")
    assert refusal(Row) == "tool 'take': parameter 'x' has type Row, which cannot be a tool argument: JSON Schema cannot express it"


# --- sets: members must be hashable ------------------------------------------------------


@pytest.mark.parametrize(
    ("annotation", "shown", "members"),
    [
        (set, "set", "Any"),
        (set[Any], "set[Any]", "Any"),
        (set[list[int]], "set[list[int]]", "list[int]"),
        (set[set[int]], "set[set[int]]", "set[int]"),
        (frozenset[dict[str, int]], "frozenset[dict[str, int]]", "dict[str, int]"),
        (set[Annotated[list[int], "numbers"]], "set[Annotated[list[int], 'numbers']]", "Annotated[list[int], 'numbers']"),
        (set[Inner], f"set[{__name__}.Inner]", "Inner"),
    ],
    ids=["bare-set", "any", "list", "set", "dict", "annotated-list", "pydantic-not-frozen"],
)
def test_a_set_of_unhashable_members_is_refused_naming_them(annotation, shown, members):
    """A set's members must be hashable (lists, sets, dicts, Any and unfrozen pydantic models are not): ToolDefinitionError naming the set and its members."""
    assert refusal(annotation) == f"tool 'take': parameter 'x' has type {shown}, which cannot be a tool argument: its members ({members}) are not hashable"


@pytest.mark.parametrize(
    ("annotation", "value", "received"),
    [
        (set[frozenset[int]], [[1, 2], [3]], {frozenset({1, 2}), frozenset({3})}),
        (set[Annotated[int, "a number"]], [1, 2], {1, 2}),
        (frozenset[FrozenTag], [{"label": "a"}], frozenset({FrozenTag(label="a")})),
        (set[Address], [{"city": "Oslo"}], {Address(city="Oslo")}),
    ],
    ids=["frozensets", "annotated-int", "frozen-pydantic", "frozen-dataclass"],
)
def test_a_set_of_hashable_members_is_accepted_and_decoded(annotation, value, received):
    """Frozensets, annotated ints, frozen pydantic models and frozen dataclasses are hashable: the set parameter is accepted and arrives as a set of them."""
    assert schema_of(annotation)["uniqueItems"] is True
    assert call(annotation, value) == repr(received)


@pytest.mark.parametrize(
    ("annotation", "hashable"),
    [
        (Any, False),
        (list[int], False),
        (set[int], False),
        (frozenset[int], True),
        (Annotated[int, "n"], True),
        (Annotated[list[int], "n"], False),
        (FrozenTag, True),
        (Inner, False),
    ],
)
def test_a_codecs_hashable_flag_is_a_bool(annotation, hashable):
    """``Codec.hashable`` (declared ``bool``) says exactly whether decoded values can be set members."""
    assert codec_for(annotation).hashable is hashable


# --- Annotated, TypedDict markers, NewType, forward references ---------------------------


def test_annotated_text_on_a_dataclass_field_is_its_description():
    """``Annotated[T, "text"]`` on a dataclass field puts ``"description": "text"`` on that property."""
    assert schema_of(Pin) == {
        "type": "object",
        "properties": {"code": {"type": "integer", "description": "the four digits"}},
        "additionalProperties": False,
        "required": ["code"],
    }


def test_required_and_not_required_typeddict_keys():
    """``Required``/``NotRequired`` mark which keys the model must send; the types inside them (annotated, a dataclass) are compiled as usual."""
    assert schema_of(Order) == {
        "type": "object",
        "properties": {
            "sku": {"type": "string"},
            "note": {"type": "string", "description": "a note for the cook"},
            "deliver_to": {"type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": False, "required": ["city"]},
        },
        "additionalProperties": False,
        "required": ["sku"],
    }
    received = call(Order, {"sku": "tea", "deliver_to": {"city": "Oslo"}})
    assert received == repr({"sku": "tea", "deliver_to": Address(city="Oslo")})


def test_a_newtype_has_its_supertypes_schema_and_value():
    """``NewType("Home", Address)`` is sent as Address's schema and arrives as an Address."""
    assert schema_of(Home) == {"type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": False, "required": ["city"]}
    assert call(Home, {"city": "Bergen"}) == repr(Address(city="Bergen"))


def test_annotated_dict_keys_are_strings_without_property_names():
    """``dict[Annotated[str, "text"], V]`` has string keys like ``dict[str, V]``: no ``propertyNames`` constraint is sent."""
    assert schema_of(dict[Annotated[str, "a city"], int]) == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert call(dict[Annotated[str, "a city"], int], {"Oslo": 1}) == repr({"Oslo": 1})


def test_a_dict_with_non_string_keys_is_refused_naming_it():
    """JSON object keys are strings: ``dict[int, str]`` is ToolDefinitionError naming the dict and its key type."""
    assert refusal(dict[int, str]) == (
        "tool 'take': parameter 'x' has type dict[int, str], which cannot be a tool argument: "
        "its keys are int; JSON object keys are strings (use str, a str Literal or a str Enum)"
    )


def test_a_dataclass_forward_reference_is_resolved():
    """A dataclass field annotated with a name defined later in its module is resolved and written inline."""
    street = {"type": "object", "properties": {"street": {"type": "string"}}, "additionalProperties": False, "required": ["street"]}
    assert schema_of(Later) == {"type": "object", "properties": {"where": street}, "additionalProperties": False, "required": ["where"]}


def test_a_dataclass_forward_reference_nothing_resolves_is_refused():
    """A dataclass whose annotation names nothing is ToolDefinitionError naming the dataclass and the NameError."""
    assert refusal(Dangling) == (
        "tool 'take': parameter 'x' has type Dangling, which cannot be a tool argument: "
        "its annotations cannot be resolved (NameError: name 'Missing' is not defined)"
    )


def test_a_plain_class_with_a_fields_attribute_is_no_namedtuple():
    """Only a tuple subclass with ``_fields`` is a NamedTuple; a plain class with that attribute is refused like any unmapped class."""
    assert refusal(Row) == "tool 'take': parameter 'x' has type Row, which cannot be a tool argument: JSON Schema cannot express it"


def test_inexpressible_type_names_the_type_and_why():
    """``codec_for`` raises InexpressibleType whose text is "<type>: <why>" (its docstring: "the exception names that type and why")."""
    with pytest.raises(InexpressibleType) as raised:
        codec_for(Callable[[int], str])
    assert str(raised.value) == "Callable[[int], str]: JSON Schema cannot express it"
    assert raised.value.why == "JSON Schema cannot express it"


class HashHidingMeta(type(pydantic.BaseModel)):
    """A metaclass on which looking up ``__hash__`` raises AttributeError (a class may hide any attribute)."""

    def __getattribute__(cls, name):
        if name == "__hash__":
            raise AttributeError(name)
        return super().__getattribute__(name)


class HashHidden(pydantic.BaseModel, metaclass=HashHidingMeta):
    n: int


def test_a_pydantic_model_whose_class_hides_hash_is_taken_as_unhashable():
    """A model class without a visible ``__hash__`` is still a parameter (decoration does not fail), and a set of it is refused as unhashable."""
    assert call(HashHidden, {"n": 1}) == repr(HashHidden(n=1))
    assert refusal(set[HashHidden]) == f"tool 'take': parameter 'x' has type set[{__name__}.HashHidden], which cannot be a tool argument: its members (HashHidden) are not hashable"
