"""tool(): an AgentTool from a typed function (API.md "Second push", "Tools from plain Python functions")."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import functools
import inspect
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, NewType, Optional, TypedDict, Union

import jsonschema
import pytest

from helpers import ASSISTANT, PARALLEL, ROOT, SEQUENTIAL, EventRecorder, context_with
from yiemagent import (
    AbortSignal,
    AgentTool,
    AgentToolCall,
    AgentToolResult,
    ImageContent,
    TextContent,
    ToolDefinitionError,
    ToolError,
    ToolExecUpdateEvent,
    execute_tool_calls,
    tool,
)


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


@dataclasses.dataclass(frozen=True)
class Tag:
    name: str


@dataclasses.dataclass
class Route:
    points: list[Point]
    color: Color
    tags: frozenset[Tag] = frozenset()


class Address(TypedDict):
    street: str
    zip: Optional[str]


class Person(TypedDict, total=False):
    name: str
    address: Address


class Pair(NamedTuple):
    left: int
    right: str = "r"


@dataclasses.dataclass
class Node:
    value: int
    children: list[Node]


def call(t: AgentTool, args: dict[str, Any], signal: Optional[AbortSignal] = None, on_partial=lambda r: None) -> AgentToolResult:
    return t.execute("call_1", args, signal, on_partial)


def run_batch(t: AgentTool, args: dict[str, Any], recorder: Optional[EventRecorder] = None):
    """One call of ``t`` through the real pipeline; returns (text, is_error)."""
    batch = execute_tool_calls(context_with(t), ASSISTANT, [AgentToolCall("c1", t.name, args)], SEQUENTIAL, None, recorder or EventRecorder())
    message = batch.messages[0]
    return message.content[0].text, message.is_error


def schema_of(annotation: Any, **param: Any) -> dict[str, Any]:
    """The property schema ``tool()`` makes for a one-parameter function annotated ``annotation``."""

    def f(x):
        return ""

    f.__annotations__ = {"x": annotation}
    if "default" in param:
        f.__defaults__ = (param["default"],)
    t = tool(f)
    jsonschema.Draft202012Validator.check_schema(t.input_schema)
    return t.input_schema["properties"]["x"]


# --- the three forms, names, labels, descriptions ---------------------------------------------


def price(item: str, quantity: int = 1) -> str:
    """Look up the price of an item."""
    return f"{quantity} x {item}: 3.50"


def test_bare_options_and_call_forms_make_equivalent_tools():
    """@tool, @tool(...) and tool(fn) each give an AgentTool with the same schema and behaviour."""
    bare = tool(price)
    with_options = tool(name="price2", parallel=True)(price)

    @tool
    def decorated(item: str, quantity: int = 1) -> str:
        """Look up the price of an item."""
        return price(item, quantity)

    for t in (bare, with_options, decorated):
        assert isinstance(t, AgentTool)
        assert t.input_schema == bare.input_schema
        assert call(t, {"item": "tea", "quantity": 2}).content == [TextContent("2 x tea: 3.50")]
    assert (bare.name, with_options.name, decorated.name) == ("price", "price2", "decorated")
    assert (bare.parallel_tool_execute, with_options.parallel_tool_execute) == (False, True)


def test_name_label_and_description_defaults():
    """The name is fn.__name__, the label that name in words, the description the docstring's text."""
    t = tool(price)
    assert (t.name, t.label, t.description) == ("price", "Price", "Look up the price of an item.")

    def getUnitPrice_now(item: str) -> str:
        return item

    assert tool(getUnitPrice_now).label == "Get unit price now"
    assert tool(price, name="get-price").label == "Get price"
    assert tool(price, name="p", label="The price", description="Prices.").label == "The price"
    assert tool(price, description="Prices.").description == "Prices."


def test_the_decorator_with_options_keeps_the_label_and_the_description():
    """@tool(label=..., description=...) gives the tool those texts, not the defaults from the name and the docstring."""

    @tool(label="Price check", description="Prices of the shop's items.")
    def quote(item: str) -> str:
        """Look up the price of an item."""
        return item

    assert (quote.name, quote.label, quote.description) == ("quote", "Price check", "Prices of the shop's items.")


def test_a_name_without_letters_or_digits_is_its_own_label():
    """A name of only '_' or '-' has no words: the label is the name itself, never empty."""
    assert tool(price, name="_").label == "_"
    assert tool(price, name="--").label == "--"


def test_description_is_empty_without_a_docstring_and_keeps_further_paragraphs():
    """No docstring gives description ""; a docstring's paragraphs before Args are all kept."""

    def bare(a: int) -> str:
        return ""

    def documented(a: int) -> str:
        """Summary line.

        More words for the model.

        Args:
            a: the number.
        """
        return ""

    assert tool(bare).description == ""
    assert tool(documented).description == "Summary line.\n\nMore words for the model."


def test_a_docstring_of_parameters_only_gives_an_empty_description():
    """A reST docstring with no summary, only ':param' lines: the description is "" and the parameter is still described."""

    def scale(a: int) -> str:
        """:param a: The number to scale."""
        return ""

    made = tool(scale)
    assert made.description == ""
    assert made.input_schema["properties"]["a"] == {"type": "integer", "description": "The number to scale."}


@pytest.mark.parametrize("bad", ["", "has space", "a.b", "x" * 65, "naïve"])
def test_invalid_tool_names_are_refused(bad):
    """A name LLM APIs would reject raises ToolDefinitionError at decoration, naming it."""
    with pytest.raises(ToolDefinitionError, match="is not valid"):
        tool(price, name=bad)


def test_a_lambda_needs_a_name_and_a_string_is_not_a_function():
    """'<lambda>' is not a valid tool name; @tool("x") says to write name="x"."""
    with pytest.raises(ToolDefinitionError, match="'<lambda>' is not valid"):
        tool(lambda a: a)
    assert tool(lambda a: str(a), name="echo").name == "echo"
    with pytest.raises(ToolDefinitionError, match=r"@tool\(name='price'\)"):
        tool("price")
    with pytest.raises(ToolDefinitionError, match="needs a function"):
        tool(42)


def test_async_functions_and_async_callables_are_tools():
    """An async def function and an instance with an async __call__ are both tools; each call is awaited (docs/api.md)."""

    async def fetch(url: str) -> str:
        return url

    class Fetcher:
        async def __call__(self, url: str) -> str:
            return url.upper()

    assert tool(fetch).execute("c1", {"url": "a"}, None, lambda p: None).content[0].text == "a"
    assert tool(Fetcher(), name="fetch").execute("c1", {"url": "a"}, None, lambda p: None).content[0].text == "A"


# --- docstring styles ---------------------------------------------------------------------------


def google(city: str, days: int = 1) -> str:
    """Forecast the weather.

    Args:
        city: The city to forecast.
        days: How many days ahead.
    """
    return city


def numpy(city: str, days: int = 1) -> str:
    """Forecast the weather.

    Parameters
    ----------
    city : str
        The city to forecast.
    days : int
        How many days ahead.
    """
    return city


def rest(city: str, days: int = 1) -> str:
    """Forecast the weather.

    :param city: The city to forecast.
    :param days: How many days ahead.
    """
    return city


@pytest.mark.parametrize("fn", [google, numpy, rest], ids=["google", "numpy", "rest"])
def test_parameter_descriptions_come_from_each_docstring_style(fn):
    """Google, NumPy and reST docstrings all give the same descriptions and summary."""
    t = tool(fn)
    assert t.description == "Forecast the weather."
    assert t.input_schema["properties"]["city"] == {"type": "string", "description": "The city to forecast."}
    assert t.input_schema["properties"]["days"] == {"type": "integer", "description": "How many days ahead.", "default": 1}


def test_a_docstring_the_parser_cannot_read_is_the_whole_description(monkeypatch):
    """When docstring-parser fails (ParseError when no style fits), the docstring is used whole and the tool is still made."""
    import docstring_parser

    def refuse(text, *args, **kwargs):
        raise docstring_parser.ParseError("no style fits")

    monkeypatch.setattr(docstring_parser, "parse", refuse)
    t = tool(google)
    assert t.description == inspect.getdoc(google)
    assert "description" not in t.input_schema["properties"]["city"]


def test_annotated_description_wins_over_the_docstring():
    """Annotated[T, "text"] describes the parameter even when the docstring does too."""

    def f(city: Annotated[str, "From the annotation."]) -> str:
        """Do it.

        Args:
            city: From the docstring.
        """
        return city

    assert tool(f).input_schema["properties"]["city"]["description"] == "From the annotation."


def test_docstring_names_are_matched_exactly_and_without_leading_stars():
    """A parameter named X keeps its description (no letter is stripped); an entry written `*rate`, as for `*args`, describes rate."""

    def fit(X: list[float], *, rate: float = 0.1) -> str:
        """Fit a model.

        Args:
            X: The samples.
            *rate: How fast to learn.
        """
        return ""

    props = tool(fit).input_schema["properties"]
    assert props["X"] == {"type": "array", "items": {"type": "number"}, "description": "The samples."}
    assert props["rate"] == {"type": "number", "description": "How fast to learn.", "default": 0.1}


# --- the schema of each kind of annotation -----------------------------------------------------

SCHEMAS = [
    (str, {"type": "string"}),
    (int, {"type": "integer"}),
    (float, {"type": "number"}),
    (bool, {"type": "boolean"}),
    (None, {"type": "null"}),
    (Any, {}),
    (list[int], {"type": "array", "items": {"type": "integer"}}),
    (Sequence[str], {"type": "array", "items": {"type": "string"}}),
    (tuple[int, str], {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False, "minItems": 2}),
    (tuple[float, ...], {"type": "array", "items": {"type": "number"}}),
    (set[str], {"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
    (dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
    (dict[Literal["a", "b"], int], {"type": "object", "additionalProperties": {"type": "integer"}, "propertyNames": {"enum": ["a", "b"], "type": "string"}}),
    (Optional[int], {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
    (Union[int, str], {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
    (int | list[str], {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "string"}}]}),
    (Literal["c", "f"], {"enum": ["c", "f"], "type": "string"}),
    (Literal[1, "one", None], {"enum": [1, "one", None]}),
    (Color, {"enum": ["red", "green"], "type": "string"}),
    (Level, {"enum": [1, 2], "type": "integer"}),
    (Annotated[int, "How many."], {"type": "integer", "description": "How many."}),
    (list[Annotated[str, "A name."]], {"type": "array", "items": {"type": "string", "description": "A name."}}),
    (tuple[()], {"type": "array", "maxItems": 0}),
    (tuple, {"type": "array", "items": {}}),
    (list, {"type": "array", "items": {}}),
    (dict, {"type": "object", "additionalProperties": {}}),
    (frozenset[int], {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
    (object, {}),
    (NewType("UserId", int), {"type": "integer"}),
    (Path, {"type": "string"}),
    (dt.datetime, {"type": "string", "format": "date-time"}),
    (dt.date, {"type": "string", "format": "date"}),
    (uuid.UUID, {"type": "string", "format": "uuid"}),
    (
        Point,
        {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number", "default": 0.0}}, "required": ["x"], "additionalProperties": False},
    ),
    (
        Address,
        {
            "type": "object",
            "properties": {"street": {"type": "string"}, "zip": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
            "required": ["street", "zip"],
            "additionalProperties": False,
        },
    ),
    (
        Pair,
        {
            "type": "object",
            "properties": {"left": {"type": "integer"}, "right": {"type": "string", "default": "r"}},
            "required": ["left"],
            "additionalProperties": False,
        },
    ),
]


@pytest.mark.parametrize("annotation, expected", SCHEMAS, ids=[repr(a) for a, _ in SCHEMAS])
def test_each_annotation_has_its_json_schema(annotation, expected):
    """Each supported annotation becomes the JSON Schema the table shows, and the whole schema passes check_schema."""
    assert schema_of(annotation) == expected


def test_nested_dataclasses_and_typeddicts_are_written_inline():
    """A dataclass inside a dataclass, a TypedDict inside a TypedDict: nested object schemas."""
    route = schema_of(Route)
    assert route["required"] == ["points", "color"]
    assert route["properties"]["points"]["items"]["properties"]["x"] == {"type": "number"}
    assert route["properties"]["tags"]["items"]["properties"] == {"name": {"type": "string"}}
    person = schema_of(Person)
    assert "required" not in person  # total=False
    assert person["properties"]["address"]["required"] == ["street", "zip"]


def test_defaults_are_not_required_and_appear_in_the_schema():
    """A parameter with a default is optional and its JSON value is the schema's "default"; None also admits null."""

    def f(a: int, b: Color = Color.GREEN, c: tuple[int, int] = (1, 2), d: int = None, e: object = object()) -> str:
        return ""

    schema = tool(f).input_schema
    assert schema["required"] == ["a"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["b"]["default"] == "green"
    assert props["c"]["default"] == [1, 2]
    assert props["d"] == {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}
    assert "default" not in props["e"]  # no JSON form: left out
    assert schema_of(Annotated[int, "How many."], default=None) == {
        "anyOf": [{"type": "integer"}, {"type": "null"}],
        "description": "How many.",
        "default": None,
    }
    assert call(tool(f), {"a": 1, "d": None}).content[0].text == ""


def test_unannotated_parameters_take_any_json_value():
    """No annotation is Any: the property's schema is empty (a default still shown) and the value arrives as sent."""

    def loose(a, b=2) -> str:
        return f"{a!r} {b!r}"

    made = tool(loose)
    assert made.input_schema["properties"] == {"a": {}, "b": {"default": 2}}
    assert call(made, {"a": [1, "x"], "b": None}).content[0].text == "[1, 'x'] None"


def test_a_none_default_admits_null_and_still_decodes_a_value():
    """day: date = None takes null (None) and a date string, decoded into a date as declared."""

    def weekday(day: dt.date = None) -> str:
        return "none" if day is None else day.strftime("%A %Y-%m-%d")

    made = tool(weekday)
    assert made.input_schema["properties"]["day"] == {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}], "default": None}
    assert call(made, {"day": "2024-01-02"}).content[0].text == "Tuesday 2024-01-02"
    assert call(made, {"day": None}).content[0].text == "none"
    assert call(made, {}).content[0].text == "none"


def test_pipeline_parameters_and_partial_keywords_are_not_in_the_schema():
    """signal, on_partial_result and the keywords a partial binds are not arguments the model sees."""

    def f(query: str, signal: AbortSignal, on_partial_result: Callable[[Any], None], db: Callable[[], int]) -> str:
        return query

    t = tool(functools.partial(f, db=lambda: 1), name="search")
    assert list(t.input_schema["properties"]) == ["query"]
    assert t.input_schema["required"] == ["query"]


INEXPRESSIBLE = [
    (Callable[[int], int], r"'x' has type Callable\[\[int\], int\], which cannot be a tool argument: JSON Schema cannot express it"),
    (bytes, "'x' has type bytes"),
    (threading.Lock, "'x' has type "),
    (list[Callable[[], None]], r"'x' has type Callable\[\[\], None\] \(in list"),
    (dict[int, str], "its keys are int"),
    (set[list[int]], "are not hashable"),
    (set[Point], "are not hashable"),
    (Node, "recursive types are not supported"),
    (Literal[1.5j], "is not a JSON string"),
]


@pytest.mark.parametrize("annotation, message", INEXPRESSIBLE, ids=[repr(a) for a, _ in INEXPRESSIBLE])
def test_types_json_schema_cannot_express_raise_at_decoration(annotation, message):
    """A parameter type with no JSON Schema raises ToolDefinitionError naming the tool, the parameter and the type."""

    def f(x):
        return ""

    f.__annotations__ = {"x": annotation}
    with pytest.raises(ToolDefinitionError, match=message) as caught:
        tool(f)
    assert "tool 'f': parameter 'x'" in str(caught.value)


def test_star_args_and_unresolvable_annotations_raise_at_decoration():
    """*args cannot come from named JSON arguments; a forward reference that does not resolve is named."""

    def star(*items: int) -> str:
        return ""

    def forward(x: NoSuchType) -> str:  # noqa: F821
        return ""

    with pytest.raises(ToolDefinitionError, match=r"'\*items'"):
        tool(star)
    with pytest.raises(ToolDefinitionError, match="NoSuchType"):
        tool(forward)


# --- arguments arrive as the declared types ----------------------------------------------------


def test_arguments_are_decoded_into_the_declared_types():
    """A dataclass parameter receives a dataclass (nested), an Enum the member, a tuple a tuple, a set a set, a TypedDict a dict."""
    received = {}

    @tool
    def plan(route: Route, level: Level, pair: tuple[int, str], ids: set[int], person: Person, when: dt.date, nt: Pair, ratio: float) -> str:
        received.update(locals())
        return "ok"

    args = {
        "route": {"points": [{"x": 1, "y": 2.5}, {"x": 0}], "color": "green", "tags": [{"name": "a"}]},
        "level": 2,
        "pair": [3, "b"],
        "ids": [1, 2],
        "person": {"name": "Ann", "address": {"street": "Main", "zip": None}},
        "when": "2024-02-29",
        "nt": {"left": 1},
        "ratio": 2,
    }
    jsonschema.validate(args, plan.input_schema)
    assert call(plan, args).content == [TextContent("ok")]
    assert received["route"] == Route([Point(1.0, 2.5), Point(0.0)], Color.GREEN, frozenset({Tag("a")}))
    assert type(received["route"].points[0].x) is float and type(received["route"].tags) is frozenset
    assert received["level"] is Level.HIGH
    assert received["pair"] == (3, "b")
    assert received["ids"] == {1, 2} and type(received["ids"]) is set
    assert received["person"] == args["person"] and type(received["person"]) is dict
    assert received["when"] == dt.date(2024, 2, 29)
    assert received["nt"] == Pair(1, "r")
    assert type(received["ratio"]) is float


def test_union_takes_the_first_matching_branch_and_a_fraction_prefers_float():
    """int | float gets 3 as an int and 2.5 as a float; Optional[Point] gets a Point or None."""
    seen = []

    @tool
    def f(n: Union[int, float], p: Optional[Point] = None) -> str:
        seen.append((n, p))
        return ""

    call(f, {"n": 3})
    call(f, {"n": 2.5, "p": {"x": 1}})
    call(f, {"n": 1, "p": None})
    assert [(type(n), p) for n, p in seen] == [(int, None), (float, Point(1.0)), (int, None)]


def test_literal_and_enum_keep_booleans_apart_from_numbers():
    """Literal[1, True] hands back the very literal the model chose."""
    seen = []

    @tool
    def f(v: Literal[1, True]) -> str:
        seen.append(v)
        return ""

    call(f, {"v": True})
    call(f, {"v": 1})
    assert [type(v) for v in seen] == [bool, int]


def test_kwargs_type_the_extra_arguments_and_unknown_arguments_are_refused_otherwise():
    """**kwargs: float opens the schema to extra numbers; without it an unknown argument is a ToolError."""

    @tool
    def scores(name: str, **marks: float) -> str:
        return f"{name} {sorted(marks.items())}"

    assert scores.input_schema["additionalProperties"] == {"type": "number"}
    assert call(scores, {"name": "a", "math": 3}).content[0].text == "a [('math', 3.0)]"
    with pytest.raises(ToolError, match="takes no argument"):
        call(tool(price), {"item": "tea", "colour": "red"})


def test_positional_only_parameters_are_passed_by_position():
    """Positional-only parameters (pipeline ones too) are passed in their places, an omitted default keeping later ones in theirs."""

    def f(a: int = 1, b: int = 2, /, *, c: int = 3) -> str:
        return f"{a} {b} {c}"

    assert call(tool(f), {"b": 5, "c": 6}).content[0].text == "1 5 6"

    def g(on_partial_result, signal, n: int, /) -> str:
        on_partial_result(n)
        return f"{signal.aborted} {n}"

    reports = []
    assert call(tool(g), {"n": 7}, on_partial=reports.append).content[0].text == "False 7"
    assert reports == [7]


# --- methods, partials, callable objects --------------------------------------------------------


class Shop:
    def __init__(self, discount: float) -> None:
        self.discount = discount

    def quote(self, amount: float, currency: Literal["EUR", "USD"] = "EUR") -> str:
        """Quote a price after the shop's discount.

        Args:
            amount: The list price.
        """
        return f"{amount * (1 - self.discount):.2f} {currency}"


def test_bound_methods_become_tools_without_self():
    """A bound method's tool has no 'self' parameter and runs on its instance."""
    t = tool(Shop(0.5).quote)
    assert t.name == "quote" and list(t.input_schema["properties"]) == ["amount", "currency"]
    assert t.input_schema["properties"]["amount"]["description"] == "The list price."
    assert call(t, {"amount": 10}).content[0].text == "5.00 EUR"


def test_functools_partial_keeps_the_underlying_name_doc_and_types():
    """A partial's tool is named and described after its function; positional bindings drop parameters too."""

    def convert(rate: float, amount: float, to: str = "EUR") -> str:
        """Convert money."""
        return f"{amount * rate:g} {to}"

    t = tool(functools.partial(functools.partial(convert, 2.0), to="USD"))
    assert (t.name, t.description) == ("convert", "Convert money.")
    assert list(t.input_schema["properties"]) == ["amount"]
    assert call(t, {"amount": 3}).content[0].text == "6 USD"


def test_a_partial_binding_the_first_parameter_keeps_the_later_ones():
    """functools.partial(convert, rate=2.0): rate leaves the schema; the parameters after it stay in it and are passed."""

    def convert(rate: float, amount: float, to: str = "EUR") -> str:
        return f"{amount * rate:g} {to}"

    made = tool(functools.partial(convert, rate=2.0))
    assert made.input_schema["properties"] == {"amount": {"type": "number"}, "to": {"type": "string", "default": "EUR"}}
    assert made.input_schema["required"] == ["amount"]
    assert call(made, {"amount": 3, "to": "USD"}).content[0].text == "6 USD"


def test_callable_objects_need_a_name():
    """An instance with __call__ has no __name__: tool() asks for name= and reads __call__'s types."""

    class Doubler:
        def __call__(self, n: int) -> int:
            return n * 2

    with pytest.raises(ToolDefinitionError, match="pass name="):
        tool(Doubler())
    t = tool(Doubler(), name="double")
    assert t.input_schema["properties"] == {"n": {"type": "integer"}}
    assert call(t, {"n": 4}).content[0].text == "8"


def test_a_dataclass_is_a_tool_that_builds_it_from_its_typed_fields():
    """tool(Point): the schema comes from the class's annotations; the result is the built object's JSON; 'self' is no parameter of it."""
    made = tool(Point)
    assert made.input_schema == {
        "type": "object",
        "properties": {"x": {"type": "number"}, "y": {"type": "number", "default": 0.0}},
        "additionalProperties": False,
        "required": ["x"],
    }
    assert call(made, {"x": 1.5}).content[0].text == '{"x": 1.5, "y": 0.0}'
    with pytest.raises(ToolError) as raised:
        call(made, {"x": 1.5, "self": 0})
    assert str(raised.value) == "Tool 'Point' takes no argument(s) 'self'"


def test_a_named_tuple_is_a_tool_typed_by_its_fields():
    """tool(Pair): a NamedTuple (built by its __new__, no __init__ of its own) is typed by its fields; the result is its JSON object."""
    made = tool(Pair)
    assert made.input_schema["properties"] == {"left": {"type": "integer"}, "right": {"type": "string", "default": "r"}}
    assert call(made, {"left": 1}).content[0].text == '{"left": 1, "right": "r"}'


def test_a_pydantic_model_is_a_tool_typed_by_its_fields_not_by_its_init():
    """pydantic's __init__ takes **data: Any; a field named data keeps its own type, and the result is the model's JSON."""
    import pydantic

    class Upload(pydantic.BaseModel):
        name: str
        data: list[int]

    made = tool(Upload)
    assert made.input_schema["properties"]["data"]["type"] == "array"
    assert made.input_schema["required"] == ["name", "data"]
    assert call(made, {"name": "a", "data": [1, 2]}).content[0].text == '{"name": "a", "data": [1, 2]}'


class Booking(dict):
    """Book a table."""

    day: str  # what it stores: the weekday's name

    def __init__(self, day: dt.date, guests: int = 2) -> None:
        super().__init__(day=day.strftime("%A"), guests=guests)


def test_a_class_with_a_typed_init_is_a_tool_typed_by_its_init():
    """tool(Booking): a plain class's constructor annotations type the schema and decode the arguments (they were ignored: {} for each), over the class's own."""
    made = tool(Booking)
    assert made.input_schema["properties"] == {"day": {"type": "string", "format": "date"}, "guests": {"type": "integer", "default": 2}}
    assert call(made, {"day": "2024-01-02"}).content[0].text == '{"day": "Tuesday", "guests": 2}'
    assert run_batch(made, {"day": "2024-01-02", "guests": "two"}) == (
        """Invalid arguments for tool 'Booking': guests: 'two' is not of type 'integer'. Received arguments: {"day": "2024-01-02", "guests": "two"}""",
        True,
    )


# --- results ------------------------------------------------------------------------------------


RESULTS = [
    ("plain text", "plain text"),
    ({"b": 1, "a": [1.5, None]}, '{"b": 1, "a": [1.5, null]}'),
    (Point(1.0, 2.0), '{"x": 1.0, "y": 2.0}'),
    (Color.RED, '"red"'),
    (Pair(1), '{"left": 1, "right": "r"}'),
    ((1, "a"), '[1, "a"]'),
    ({3, 1, 2}, "[1, 2, 3]"),
    (dt.date(2024, 1, 2), '"2024-01-02"'),
    ({1: "a", None: "b", Color.GREEN: "c"}, '{"1": "a", "null": "b", "green": "c"}'),
    (None, "null"),
    ("ünï", "ünï"),
    ({"city": "Zürich", "sky": "☀"}, '{"city": "Zürich", "sky": "☀"}'),
    (42, "42"),
]


@pytest.mark.parametrize("value, text", RESULTS, ids=[repr(v) for v, _ in RESULTS])
def test_return_values_become_text_results(value, text):
    """A str is one TextContent; anything else its JSON text."""
    t = tool(lambda: value, name="r")
    assert call(t, {}) == AgentToolResult([TextContent(text)])


def test_tool_results_and_content_blocks_are_kept_as_they_are():
    """An AgentToolResult comes back as it is; a content block or a list of them becomes the content."""
    result = AgentToolResult([TextContent("x")], {"k": 1}, terminate=True)
    image = ImageContent("QUJD", "image/png")
    assert call(tool(lambda: result, name="r"), {}) is result
    assert call(tool(lambda: image, name="r"), {}).content == [image]
    assert call(tool(lambda: [TextContent("a"), image], name="r"), {}).content == [TextContent("a"), image]


def test_an_empty_list_is_the_text_of_an_empty_json_array():
    """A function returning [] gives the text "[]" (an empty list holds no content blocks), not a result with no content."""
    assert call(tool(lambda: [], name="r"), {}) == AgentToolResult([TextContent("[]")])


@pytest.mark.parametrize("value, cause", [(object(), "TypeError: a value of type object has no JSON form"), (float("nan"), "ValueError")])
def test_a_value_with_no_json_form_is_an_error_result(value, cause):
    """A return value that has no JSON text becomes an error result naming the cause."""
    text, is_error = run_batch(tool(lambda: value, name="r"), {})
    assert is_error and text.startswith(f"Tool 'r' failed: {cause}")


def test_a_pydantic_model_holding_nan_is_an_error_result_not_invalid_json():
    """pydantic's JSON dump keeps a NaN float; the result would be the invalid JSON text NaN, so the call fails naming the cause."""
    import pydantic

    class Reading(pydantic.BaseModel):
        value: float

    assert call(tool(lambda: Reading(value=1.5), name="r"), {}).content == [TextContent('{"value": 1.5}')]
    text, is_error = run_batch(tool(lambda: Reading(value=float("nan")), name="r"), {})
    assert is_error and text == "Tool 'r' failed: ValueError: Out of range float values are not JSON compliant"


def test_exceptions_become_error_results_through_the_pipeline():
    """What the function raises is an error result; a ToolError speaks in its own words."""

    @tool
    def divide(a: float, b: float) -> float:
        if b == 0:
            raise ToolError("b must not be 0")
        return a / b

    @tool
    def broken() -> str:
        raise KeyError("gone")

    assert run_batch(divide, {"a": 1, "b": 4}) == ("0.25", False)
    assert run_batch(divide, {"a": 1, "b": 0}) == ("Tool 'divide' failed: b must not be 0", True)
    assert run_batch(broken, {}) == ("Tool 'broken' failed: KeyError: 'gone'", True)
    text, is_error = run_batch(divide, {"a": "one"})
    assert is_error and "a: 'one' is not of type 'number'" in text and "b: 'b' is a required property" in text


def test_a_decoding_failure_is_an_error_result():
    """A string that passes the schema but is not a date (formats are not asserted) fails as an error result."""

    @tool
    def on(day: dt.date) -> str:
        return day.isoformat()

    text, is_error = run_batch(on, {"day": "not a date"})
    assert is_error and text.startswith("Tool 'on' failed: ValueError")


# --- what the pipeline passes in ----------------------------------------------------------------


def test_signal_and_on_partial_result_are_passed_in():
    """The function gets the call's signal and a partial-result callback whose reports become update events."""
    seen = {}

    @tool
    def work(steps: int, signal: AbortSignal, on_partial_result) -> str:
        seen["signal"] = signal
        for i in range(steps):
            on_partial_result(f"step {i}")
        return "done"

    recorder = EventRecorder()
    assert run_batch(work, {"steps": 2}, recorder) == ("done", False)
    updates = [e.partial_result for e in recorder.events if isinstance(e, ToolExecUpdateEvent)]
    assert updates == ["step 0", "step 1"]
    assert isinstance(seen["signal"], AbortSignal) and not seen["signal"].aborted
    mine = AbortSignal()
    call(work, {"steps": 0}, signal=mine)
    assert seen["signal"] is mine


def test_timeout_s_reaches_the_tool_and_fires_the_functions_signal():
    """tool(timeout_s=...) is the AgentTool's timeout: an overrun is an error result and the signal the function holds fires."""
    stopped = threading.Event()

    @tool(timeout_s=0.2)
    def slow(signal: AbortSignal) -> str:
        if signal.wait(30):
            stopped.set()
        return "late"

    assert slow.timeout_s == 0.2
    text, is_error = run_batch(slow, {})
    assert is_error and "timed out after 0.2 s" in text
    assert stopped.wait(10)


def test_parallel_tools_run_side_by_side():
    """tool(parallel=True) marks the tool parallel: two calls in a parallel batch meet at a barrier."""
    barrier = threading.Barrier(2, timeout=10)

    @tool(parallel=True)
    def meet(who: str) -> str:
        barrier.wait()
        return who

    assert meet.parallel_tool_execute is True
    calls = [AgentToolCall("c1", "meet", {"who": "a"}), AgentToolCall("c2", "meet", {"who": "b"})]
    batch = execute_tool_calls(context_with(meet), ASSISTANT, calls, PARALLEL, None, EventRecorder())
    assert [(m.content[0].text, m.is_error) for m in batch.messages] == [("a", False), ("b", False)]


def test_execute_exposes_the_original_function():
    """The tool's execute keeps the function, so it can still be called directly."""
    t = tool(price)
    assert t.execute.fn is price and t.execute.__wrapped__ is price
    assert t.execute.fn("tea") == "1 x tea: 3.50"


# --- end to end ---------------------------------------------------------------------------------


def test_a_function_tool_serves_a_real_agent_end_to_end():
    """A scripted model sees the generated schema, calls the function tool with JSON arguments, and reads its result."""
    from yiemagent import YiemAgent, register_tool, run_agent, take_response
    from yiemagent.llm import ScriptedLLM
    from yiemagent.llm.scripted import tool_call_reply

    got = []

    @tool
    def draw_route(route: Route, closed: bool = False) -> dict:
        """Measure a route.

        Args:
            route: The points to visit, in order.
            closed: Whether to come back to the start.
        """
        got.append(route)
        return {"points": len(route.points), "color": route.color, "closed": closed}

    llm = ScriptedLLM(
        [
            tool_call_reply(("c1", "draw_route", '{"route": {"points": [{"x": 1}, {"x": 2, "y": 3}], "color": "red"}}')),
            tool_call_reply(("c2", "draw_route", {"route": {"points": "none"}})),
            "Two points, red.",
        ]
    )
    with YiemAgent(llm_call=llm, agent_event_sink=None) as agent:
        register_tool(agent.tool_store, draw_route)
        run_agent(agent, "Measure my route")
        reply = take_response(agent, timeout=30)
        history = agent.history()

    sent = {t["function"]["name"]: t["function"] for t in llm.requests[0]["tools"]}
    assert sent["draw_route"]["description"] == "Measure a route."
    assert sent["draw_route"]["parameters"] == draw_route.input_schema
    assert sent["draw_route"]["parameters"]["properties"]["route"]["description"] == "The points to visit, in order."
    assert got == [Route([Point(1.0), Point(2.0, 3.0)], Color.RED)]
    results = [(m.content[0].text, m.is_error) for m in history if m.role == "tool"]
    assert results[0] == ('{"points": 2, "color": "red", "closed": false}', False)
    assert results[1][1] is True and "route/points: 'none' is not of type 'array'" in results[1][0]
    assert reply.content[0].text == "Two points, red."


def test_the_short_way_in_adding_tools_md_runs_as_printed(tmp_path):
    """The @tool example of docs/adding-tools.md makes the schema the page shows and answers as it says."""
    import json
    import re
    from pathlib import Path

    page = (ROOT / "docs" / "adding-tools.md").read_text(encoding="utf-8")
    section = page.split("## The short way: a typed function", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    shown = re.search(r"`input_schema` is `(.*?)`;", section, re.S).group(1)
    namespace: dict[str, Any] = {}
    exec(compile(code, "adding-tools.md", "exec"), namespace)
    search = namespace["searchWine"]
    assert search.input_schema == json.loads(" ".join(shown.split()))
    assert (search.parallel_tool_execute, search.timeout_s) == (True, 10)
    assert run_batch(search, {"query": " Cabernet ", "limit": 1}) == ("Found 1 wines: Opus One 2019", False)
    assert run_batch(search, {"query": " "}) == ("Tool 'searchWine' failed: query must not be empty", True)
