"""tool(): the model's JSON decoded into the declared Python types, and values encoded back to JSON (README "Tools from functions").

``typed/_codecs.py`` compiles each annotation into a JSON Schema and a decoder; a tool's
return value goes back to the model as JSON text (``to_tool_result``). These tests pin
what a user of ``tool()`` sees: the schema the model is sent, the value the function
receives, the JSON text of a result, and the exact text of each refusal.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import enum
import math
import uuid
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, Optional, TypedDict, TypeVar, Union

import pydantic
import pytest

from yiemagent import AgentTool, ToolDefinitionError, tool


def call(t: AgentTool, **args: Any) -> str:
    """Call the tool as the pipeline does (after validation) and return the result's text."""
    return t.execute("call_1", args, None, lambda partial: None).content[0].text


def received(annotation: Any, value: Any) -> Any:
    """What a one-parameter function annotated ``annotation`` receives when the model sends ``value``."""
    seen = []

    def f(x):  # the annotation is set below: a local class cannot be named in a string annotation
        seen.append(x)
        return ""

    f.__annotations__["x"] = annotation
    call(tool(f), x=value)
    return seen[0]


def schema_of(annotation: Any) -> dict[str, Any]:
    """The JSON Schema the model is sent for a parameter annotated ``annotation``."""

    def f(x):
        return ""

    f.__annotations__["x"] = annotation
    return tool(f).input_schema["properties"]["x"]


def refusal(annotation: Any) -> str:
    """The ToolDefinitionError text for a parameter annotated ``annotation``."""

    def f(x):
        return ""

    f.__annotations__["x"] = annotation
    with pytest.raises(ToolDefinitionError) as raised:
        tool(f)
    return str(raised.value)


def returned(value: Any) -> str:
    """The JSON text the model reads when a tool returns ``value``."""
    return call(tool(lambda: value, name="f"))


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    """An int-valued Enum: its default is sent as a plain int."""

    LOW = 1
    HIGH = 2


class Ratio(float, enum.Enum):
    HALF = 0.5
    WHOLE = 1.0


class Maybe(enum.Enum):
    NOTHING = None
    SOMETHING = "something"


class Empty(enum.Enum):
    pass


class Raw(enum.Enum):
    BYTES = b"x"


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int


@dataclasses.dataclass(frozen=True)
class Pair:
    b: int
    a: int


@dataclasses.dataclass
class Node:
    value: int
    children: list[Node]


class Leaf(NamedTuple):
    name: str


class Branch(NamedTuple):
    leaf: Leaf
    weight: int = 1


class Tree(NamedTuple):
    name: str
    children: list[Tree]


class Movie(TypedDict):
    title: str


class Holder:
    class Thing:
        """A nested class: named by its qualified name."""


# --- decoding: the value the function receives ---


def test_a_whole_number_written_with_a_fraction_reaches_an_int_parameter_as_an_int():
    """JSON Schema counts 3.0 as an integer: an ``int`` parameter receives the int 3, and an int as it is."""
    assert [(v, type(v)) for v in (received(int, 3.0), received(int, 7))] == [(3, int), (7, int)]


def test_int_or_float_gets_a_fraction_written_number_as_a_float_and_an_integer_as_an_int():
    """``int | float``: 3.0 passes both branches and goes to ``float`` (the module docstring's fraction rule); 3 goes to ``int``."""
    assert [(v, type(v)) for v in (received(Union[int, float], 3.0), received(Union[int, float], 3))] == [(3.0, float), (3, int)]
    assert [(v, type(v)) for v in (received(Union[float, int], 3.0), received(Union[float, int], 3))] == [(3.0, float), (3.0, float)]


def test_null_goes_to_the_first_branch_that_accepts_it_in_declared_order():
    """A union decodes with the first branch whose schema the value passes (module docstring; docs/conformance.md):
    ``Optional[Maybe]`` where Maybe has a member whose value is None hands null to Maybe, ``Union[None, Maybe]`` to None."""
    assert received(Optional[Maybe], None) is Maybe.NOTHING
    assert received(Union[None, Maybe], None) is None
    assert received(Optional[Maybe], "something") is Maybe.SOMETHING
    assert received(Optional[int], None) is None


def test_a_direct_call_with_a_value_no_branch_takes_names_the_union():
    """``execute`` called directly (no schema validation before it): a value that no branch takes, null included, is a ValueError naming the union."""
    for value, text in [([1], "[1] matches none of Union[int, str]"), (None, "None matches none of Union[int, str]")]:
        with pytest.raises(ValueError) as raised:
            received(Union[int, str], value)
        assert str(raised.value) == text


def test_a_direct_call_with_a_value_outside_a_literal_names_the_choices():
    """``execute`` called directly with a value the Literal does not list: a ValueError naming the value and the choices."""
    with pytest.raises(ValueError) as raised:
        received(Literal["a", "b"], "c")
    assert str(raised.value) == "'c' is not one of ['a', 'b']"


def test_a_literal_of_enum_members_is_sent_as_their_values_and_decoded_to_the_members():
    """``Literal[Color.RED, Color.GREEN]``: the model sees the values, the function receives the member."""
    assert schema_of(Literal[Color.RED, Color.GREEN]) == {"enum": ["red", "green"], "type": "string"}
    assert received(Literal[Color.RED, Color.GREEN], "green") is Color.GREEN


def test_containers_of_classes_decode_each_member():
    """A dict of dataclasses, a tuple holding a dataclass, nested NamedTuples and Enum keys all arrive as the declared types."""
    assert received(dict[str, Point], {"a": {"x": 1, "y": 2}}) == {"a": Point(1, 2)}
    assert received(tuple[Point, int], [{"x": 1, "y": 2}, 3]) == (Point(1, 2), 3)
    assert received(Branch, {"leaf": {"name": "l"}}) == Branch(Leaf("l"), 1)
    decoded = received(dict[Color, int], {"red": 1})
    assert decoded == {Color.RED: 1} and type(next(iter(decoded))) is Color


def test_the_empty_tuple_type_receives_the_empty_tuple():
    """``tuple[()]``: the schema admits only ``[]``, and the function receives ``()``."""
    assert schema_of(tuple[()]) == {"type": "array", "maxItems": 0}
    assert received(tuple[()], []) == ()


def test_a_collections_namedtuple_without_annotations_takes_any_json_in_each_field():
    """``collections.namedtuple("P", "a b")`` has no annotations: each field is any JSON value (``{}``)."""
    P = collections.namedtuple("P", "a b")
    assert schema_of(P) == {"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": False, "required": ["a", "b"]}
    assert received(P, {"a": [1], "b": None}) == P([1], None)


def test_a_dataclass_field_with_no_annotation_left_takes_any_json():
    """A dataclass field that the class's annotations no longer name (removed after ``@dataclass``) is any JSON value."""

    @dataclasses.dataclass
    class Loose:
        a: int

    del Loose.__annotations__["a"]
    assert schema_of(Loose) == {"type": "object", "properties": {"a": {}}, "additionalProperties": False, "required": ["a"]}
    assert received(Loose, {"a": "text"}) == Loose("text")


# --- set members must be hashable ---


@pytest.mark.parametrize(
    "annotation, sent, expected",
    [
        (set[tuple[int, ...]], [[1, 2]], {(1, 2)}),
        (set[tuple[int, str]], [[1, "a"]], {(1, "a")}),
        (set[Leaf], [{"name": "l"}], {Leaf("l")}),
        (frozenset[Point], [{"x": 1, "y": 2}], frozenset({Point(1, 2)})),
    ],
    ids=["tuple-of-int", "fixed-tuple", "namedtuple", "frozen-dataclass"],
)
def test_a_set_of_hashable_values_is_a_set_of_the_decoded_values(annotation, sent, expected):
    """Tuples of hashable items, NamedTuples and frozen dataclasses can be set members: the function receives the set."""
    assert received(annotation, sent) == expected


@pytest.mark.parametrize(
    "annotation, members",
    [
        (set[tuple[dict[str, int], ...]], "tuple[dict[str, int], ...]"),
        (set[tuple[int, dict[str, int]]], "tuple[int, dict[str, int]]"),
        (set[dict[str, int]], "dict[str, int]"),
        (set[Union[int, dict[str, int]]], "Union[int, dict[str, int]]"),
    ],
    ids=["tuple-of-dict", "fixed-tuple-with-dict", "dict", "union-with-dict"],
)
def test_a_set_of_unhashable_values_is_refused_at_definition(annotation, members):
    """A set whose members would be dicts (a dict, a tuple or union holding one) is refused when the tool is made."""
    assert refusal(annotation) == (
        f"tool 'f': parameter 'x' has type set[{members}], which cannot be a tool argument: its members ({members}) are not hashable"
    )


def test_a_set_of_typeddicts_is_refused_at_definition():
    """A TypedDict decodes to a dict, which cannot be a set member (a class inside a generic is written with its module)."""
    assert refusal(set[Movie]) == (
        f"tool 'f': parameter 'x' has type set[{__name__}.Movie], which cannot be a tool argument: its members (Movie) are not hashable"
    )


# --- the schema of choices ---


@pytest.mark.parametrize(
    "annotation, schema",
    [
        (Literal[True, False], {"enum": [True, False], "type": "boolean"}),
        (Literal[1.5, 2.5], {"enum": [1.5, 2.5], "type": "number"}),
        (Literal[1, 2], {"enum": [1, 2], "type": "integer"}),
        (Literal[None], {"enum": [None], "type": "null"}),
        (Literal["a", 1], {"enum": ["a", 1]}),
        (Ratio, {"enum": [0.5, 1.0], "type": "number"}),
    ],
    ids=["boolean", "number", "integer", "null", "mixed", "float-enum"],
)
def test_choices_of_one_json_kind_carry_that_type(annotation, schema):
    """A Literal or Enum whose values share one JSON kind states it as ``type``; mixed kinds state none."""
    assert schema_of(annotation) == schema


def test_a_float_choice_decodes_to_itself():
    """``Literal[1.5, 2.5]`` hands back the chosen float."""
    assert received(Literal[1.5, 2.5], 2.5) == 2.5


# --- refusals at definition: the exact text ---


@pytest.mark.parametrize(
    "annotation, text",
    [
        (Literal[b"x"], "has type Literal[b'x'], which cannot be a tool argument: its value b'x' is not a JSON string, number, boolean or null"),
        (Literal[math.nan], "has type Literal[nan], which cannot be a tool argument: its value nan is not a JSON string, number, boolean or null"),
        (Raw, "has type Raw, which cannot be a tool argument: its value b'x' is not a JSON string, number, boolean or null"),
        (Empty, "has type Empty, which cannot be a tool argument: an Enum with no members has no value to send"),
        (
            Node,
            "has type Node, which cannot be a tool argument: it refers to itself; recursive types are not supported (the schema is written inline)",
        ),
        (
            Tree,
            "has type Tree, which cannot be a tool argument: it refers to itself; recursive types are not supported (the schema is written inline)",
        ),
        (
            dict[int, str],
            "has type dict[int, str], which cannot be a tool argument: its keys are int; JSON object keys are strings (use str, a str Literal or a str Enum)",
        ),
        (
            dict[Point, str],
            f"has type dict[{__name__}.Point, str], which cannot be a tool argument: its keys are Point; JSON object keys are strings (use str, a str Literal or a str Enum)",
        ),
        (Callable[[int], str], "has type Callable[[int], str], which cannot be a tool argument: JSON Schema cannot express it"),
        (TypeVar("T"), "has type ~T, which cannot be a tool argument: JSON Schema cannot express it"),
        (Holder.Thing, "has type Holder.Thing, which cannot be a tool argument: JSON Schema cannot express it"),
    ],
    ids=["bytes-literal", "nan-literal", "bytes-enum", "empty-enum", "recursive-dataclass", "recursive-namedtuple", "int-keys", "dataclass-keys", "callable", "typevar", "nested-class"],
)
def test_a_type_with_no_json_schema_is_refused_naming_it_and_why(annotation, text):
    """The ToolDefinitionError names the parameter, the type as a reader writes it (``typing.`` left out, a nested class by its qualified name) and the reason."""
    assert refusal(annotation) == f"tool 'f': parameter 'x' {text}"


def test_a_class_of_the_builtins_module_is_named_by_its_bare_name():
    """A class whose module is ``builtins`` is written by its ``__name__``, as ``int`` is, whatever its ``__qualname__`` says."""
    Thing = type("Thing", (), {"__module__": "builtins", "__qualname__": "Outer.Thing"})
    assert refusal(Thing) == "tool 'f': parameter 'x' has type Thing, which cannot be a tool argument: JSON Schema cannot express it"


# --- encoding: what the model reads back ---


def test_an_enum_default_is_sent_as_its_plain_json_value():
    """The schema's ``default`` is plain JSON data: an IntEnum or float Enum default is its value (int, float), not the member."""

    def f(level: Level = Level.HIGH, ratio: Ratio = Ratio.HALF) -> str:
        return ""

    properties = tool(f).input_schema["properties"]
    defaults = [properties["level"]["default"], properties["ratio"]["default"]]
    assert [(d, type(d)) for d in defaults] == [(2, int), (0.5, float)]


def test_a_default_that_is_not_a_json_number_is_left_out_of_the_schema():
    """NaN and infinite defaults have no JSON form: the schema states no ``default`` for them."""

    def f(a: float = math.inf, b: float = -math.inf, c: float = math.nan, d: float = 1.5) -> str:
        return ""

    properties = tool(f).input_schema["properties"]
    assert [("default" in properties[name]) for name in "abcd"] == [False, False, False, True]


def test_returning_a_float_that_is_not_a_json_number_fails_naming_it():
    """A tool that returns NaN: ``to_tool_result`` raises a ValueError naming the value."""
    with pytest.raises(ValueError) as raised:
        returned(math.nan)
    assert str(raised.value) == "nan is not a JSON number"


def test_returning_a_dict_with_a_key_json_cannot_write_fails_naming_the_key_type():
    """A dict key that is neither a string, a number, None nor an Enum of those: a TypeError naming its type."""
    with pytest.raises(TypeError) as raised:
        returned({(1, 2): "pair"})
    assert str(raised.value) == "a dict key of type tuple has no JSON form"


def test_a_returned_set_is_written_in_a_stable_order():
    """A set is an array sorted by value; when its members cannot be compared (numbers and arrays, objects), by their JSON text with sorted keys."""
    assert returned({10, 9}) == "[9, 10]"
    assert returned({9, 10, (1,)}) == "[10, 9, [1]]"
    assert returned({Pair(b=1, a=2), Pair(b=2, a=1)}) == '[{"b": 2, "a": 1}, {"b": 1, "a": 2}]'


def test_returned_uuids_and_pydantic_models_are_written_as_json_strings_and_objects():
    """A UUID is its text; a pydantic model its JSON mode dump (a datetime field as an ISO string)."""

    class Event(pydantic.BaseModel):
        at: dt.datetime

    assert returned(uuid.UUID(int=1)) == '"00000000-0000-0000-0000-000000000001"'
    assert returned(Event(at=dt.datetime(2026, 1, 2, 3, 4, 5))) == '{"at": "2026-01-02T03:04:05"}'


def test_type_names_leave_out_the_typing_prefix():
    """A refusal inside a typing form names it without ``typing.`` (here ``Optional[...]``)."""
    assert refusal(Optional[Callable[[int], str]]).startswith("tool 'f': parameter 'x' has type Callable[[int], str] (in Optional[Callable[[int], str]])")
