"""A tool made by tool() takes a short way when the arguments name exactly its parameters, and a
scalar return value becomes its text without json's walk (docs/performance.md "A tool from a
function"). Both are held here to the long way: the same function receives the same values
(and types), returns the same result, or fails with the same error."""

from __future__ import annotations

import asyncio
import collections
import copy
import dataclasses
import enum
import functools
import json
import pickle
import sqlite3
import threading
import types
from contextlib import closing
from typing import Any, NamedTuple, Optional, Union

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import EventRecorder
from strategies import json_values, type_specs
from yiemagent import AbortSignal, AgentTool, AgentToolResult, AssistantMessage, SQLiteSession, TextContent, YiemAgent, ask, tool
from yiemagent.errors import ToolError
from yiemagent.events import ToolExecEndEvent
from yiemagent.llm.scripted import ScriptedLLM
from yiemagent.extraction import json_text
from yiemagent.typed import FunctionToolExecute, to_tool_result
from yiemagent.typed._codecs import to_json_value

KINDS = ("keyword", "positional_or_keyword", "positional_only")


def function_of(kinds: list[str], annotations: list[Any], defaults: dict[int, Any], takes_signal: bool, takes_kwargs: bool):
    """A real function with parameters p0..pn of the given kinds, annotations and defaults that records what it receives."""
    namespace: dict[str, Any] = {"received": []}
    only = [i for i, k in enumerate(kinds) if k == "positional_only"]
    either = [i for i, k in enumerate(kinds) if k == "positional_or_keyword"]
    keyword = [i for i, k in enumerate(kinds) if k == "keyword"]

    def written(i: int) -> str:
        if i in defaults:
            namespace[f"default{i}"] = defaults[i]
            return f"p{i}=default{i}"
        return f"p{i}"

    def ordered(group: list[int]) -> list[int]:  # those with a default last
        return [i for i in group if i not in defaults] + [i for i in group if i in defaults]

    positional = ordered(only) + ordered(either)
    for at, i in enumerate(positional):  # Python forbids a positional parameter without a default after one with
        if any(later not in defaults for later in positional[at + 1:]):
            defaults.pop(i, None)
    params = [written(i) for i in positional if i in only] + (["/"] if only else [])
    params += [written(i) for i in positional if i not in only]
    params += (["*"] if keyword or takes_signal else []) + [written(i) for i in keyword] + (["signal=None"] if takes_signal else [])
    params += ["**rest"] if takes_kwargs else []
    exec(f"def f({', '.join(params)}):\n    received.append(dict(locals()))\n    return 'ok'\n", namespace)
    f = namespace["f"]
    f.__annotations__ = {f"p{i}": a for i, a in enumerate(annotations)}
    return f, namespace["received"]


def long_way(execute: FunctionToolExecute) -> FunctionToolExecute:
    """The same execute with its short way taken out."""
    made = FunctionToolExecute(execute.fn, execute.tool_name, execute._parameters, execute._extra)
    made._reserved = execute._reserved
    made._keys = None
    return made


def outcome(execute: FunctionToolExecute, args: dict[str, Any], received: list[dict[str, Any]]) -> tuple[Any, ...]:
    """What a call gives: its result or its error, and what the function received (values with their types)."""
    received.clear()
    try:
        result: Any = execute("c1", args, None, lambda _: None)
    except Exception as exc:
        result = (type(exc), str(exc))
    seen = [{k: (type(v), repr(v)) for k, v in call.items() if k != "signal"} for call in received]
    return result, seen


@given(st.data())
def test_the_short_way_gives_what_the_long_way_gives(data):
    """For functions of every parameter kind, with defaults, an injected signal or **kwargs, and
    arguments that name exactly the parameters, fewer, more, or values of the wrong type: the same
    values reach the function, the same result or error comes back."""
    specs = data.draw(st.lists(type_specs, min_size=0, max_size=3), label="annotations")
    kinds = data.draw(st.lists(st.sampled_from(KINDS), min_size=len(specs), max_size=len(specs)), label="kinds")
    values = [data.draw(spec.values, label=f"p{i}") for i, spec in enumerate(specs)]
    defaults = {i: values[i] for i in data.draw(st.sets(st.integers(0, max(len(specs) - 1, 0)), max_size=len(specs)), label="defaulted") if i < len(specs)}
    takes_signal, takes_kwargs = data.draw(st.booleans(), label="signal"), data.draw(st.booleans(), label="kwargs")
    fn, received = function_of(kinds, [s.annotation for s in specs], defaults, takes_signal, takes_kwargs)
    execute = tool(fn, name="typed").execute
    args = json.loads(json.dumps({f"p{i}": spec.to_json(v) for i, (spec, v) in enumerate(zip(specs, values, strict=True))}))
    for name in data.draw(st.sets(st.sampled_from(sorted(args)), max_size=len(args)) if args else st.just(set()), label="left out"):
        del args[name]
    args.update(data.draw(st.dictionaries(st.sampled_from(["p0", "p1", "p2", "p9", "signal"]), json_values, max_size=2), label="sent as well"))

    assert outcome(execute, args, received) == outcome(long_way(execute), args, received)


def test_the_short_way_is_taken_only_where_every_parameter_is_the_models_by_keyword():
    def plain(a: int, *, b: str = "x") -> str:
        return b * a

    def positional_only(a: int, /) -> int:
        return a

    def signalled(a: int, signal: AbortSignal) -> int:
        return a

    def extra(a: int, **rest: int) -> int:
        return a

    assert tool(plain).execute._keys == {"a": None, "b": None}.keys()
    assert [tool(f).execute._keys for f in (positional_only, signalled, extra)] == [None, None, None]
    assert tool(functools.partial(plain, b="y")).execute._keys == {"a": None}.keys()  # a bound keyword is not the model's


def test_the_short_way_decodes_each_argument_and_passes_text_as_it_is():
    """An integer sent as 3.0 arrives as int 3 (the codec's decode runs); a str arrives as the very object sent."""
    got = []

    def f(n: int, s: str, x: float) -> str:
        got.append((n, s, x))
        return "ok"

    execute = tool(f).execute
    assert execute._by_keyword[1] == ("s", None)
    text = "".join(["t", "ext"])
    assert execute("c", {"s": text, "x": 2, "n": 3.0}, None, None) == AgentToolResult([TextContent("ok")])
    assert got == [(3, "text", 2.0)] and type(got[0][0]) is int and type(got[0][2]) is float and got[0][1] is text


def test_the_short_way_awaits_an_async_function():
    async def f(a: int) -> int:
        return a + 1

    assert tool(f).execute("c", {"a": 1}, None, None) == AgentToolResult([TextContent("2")])


class Colour(enum.IntEnum):
    RED = 1


@given(st.none() | st.booleans() | st.integers() | st.integers(-(2**70), 2**70) | st.text())
def test_a_scalar_returned_becomes_the_text_json_gives_it(value):
    """What to_tool_result makes for str, int, bool and None without json's walk is what the long way made."""
    expected = AgentToolResult([TextContent(value if isinstance(value, str) else json_text(to_json_value(value)))])
    made = to_tool_result(value)
    assert made == expected and dataclasses.asdict(made) == dataclasses.asdict(expected) and repr(made) == repr(expected)
    assert vars(made.content[0]) == vars(expected.content[0]) and made.details == {} and made.details is not to_tool_result(value).details


@pytest.mark.parametrize(("value", "text"), [(Colour.RED, "1"), (True, "true"), (False, "false"), (None, "null"), (1, "1"), (0, "0"), (1.5, "1.5"), (10**30, str(10**30))])
def test_scalars_and_their_subclasses_become_their_json_text(value, text):
    """An IntEnum (an int subclass) is its value's text by the long way; True is "true", never 1's text, though True == 1."""
    assert to_tool_result(value).content[0].text == text


def test_a_returned_result_or_block_is_kept_and_an_unwritable_float_still_fails():
    result = AgentToolResult([TextContent("a")], details={"k": 1}, terminate=True)
    assert to_tool_result(result) is result
    assert to_tool_result(TextContent("b")) == AgentToolResult([TextContent("b")])
    with pytest.raises(ValueError):
        to_tool_result(float("nan"))


def test_an_optional_argument_left_out_takes_the_long_way_and_its_default():
    calls: list[Optional[list[int]]] = []

    def f(a: int, seen: Optional[list[int]] = None, more: list[int] = []) -> str:  # noqa: B006 - a default a call could change, copied per call
        more.append(a)
        calls.append(list(more))
        return "ok"

    execute = tool(f).execute
    execute("c", {"a": 1}, None, None)
    execute("c", {"a": 2}, None, None)
    execute("c", {"a": 3, "seen": None, "more": [7]}, None, None)
    assert calls == [[1], [2], [7, 3]]


# --- what else a tool made by tool() meets: copies, callers, callables of every kind, a real run ---


def add(a: int, b: int) -> int:
    return a + b


def test_a_tool_made_by_tool_deep_copies_and_pickles_as_before_and_its_copy_takes_the_short_way():
    """A tool() tool deep-copies and pickles (a keys view would refuse both), so a function whose default is such a tool is still a tool."""
    made = tool(add)
    for copied in (copy.deepcopy(made).execute, pickle.loads(pickle.dumps(made)).execute, pickle.loads(pickle.dumps(made.execute))):
        assert copied._keys == {"a", "b"} and copied("c", {"a": 1, "b": 2}, None, None) == AgentToolResult([TextContent("3")])

    def delegate(q: str, via: Any = made) -> str:  # each call that leaves via out gets a deep copy of the default
        return q

    assert tool(delegate).execute("c", {"q": "x"}, None, None) == AgentToolResult([TextContent("x")])


@pytest.mark.parametrize("args", [None, [("a", 1), ("b", 2)], "ab", ("a", "b"), collections.OrderedDict(a=1, b=2), types.MappingProxyType({"a": 1, "b": 2})])
def test_arguments_given_as_anything_but_a_dict_fail_or_pass_as_the_long_way_does(args):
    """A direct caller's arguments that are no dict (None, pairs, a string) fail with the long way's error, never an AttributeError of the short way's."""
    execute = tool(add).execute
    assert outcome(execute, args, []) == outcome(long_way(execute), args, [])


class Shade(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Point:
    x: int
    y: float = 0.0


class Pair(NamedTuple):
    a: int
    b: str


class Model(pydantic.BaseModel):
    n: int
    tags: list[str] = []


class Holder:
    def method(self, a: int, c: Shade) -> str:
        return f"{a} {c.value}"

    def __call__(self, p: Point, q: Optional[int]) -> Any:
        return [p, q]


def mixed(v: Union[int, str], o: Optional[Point], e: Shade, pairs: list[Pair]) -> Any:
    return {"v": v, "o": o, "e": e, "pairs": pairs, "types": [type(v).__name__, type(o).__name__, type(pairs[0]).__name__ if pairs else None]}


def unwritable(n: int) -> Any:
    return object()


def raising(n: int) -> int:
    raise ValueError(f"boom {n}")


async def later(a: int) -> dict[str, int]:
    return {"a": a}


def three(a: int, b: str, c: float) -> str:
    return f"{a}|{b}|{c!r}"


CALLABLES = [
    (Point, {"x": 1.0, "y": 2}), (Point, {"x": "one", "y": 2}), (Pair, {"a": 1, "b": "s"}), (Model, {"n": 3, "tags": ["a"]}), (Model, {"n": "x", "tags": []}),
    (Holder().method, {"a": 1, "c": "red"}), (Holder().method, {"a": 1, "c": "green"}),
    (Holder(), {"p": {"x": 1}, "q": None}), (Holder(), {"p": {"x": 1, "z": 2}, "q": 2}),
    (mixed, {"v": "s", "o": {"x": 2, "y": 1}, "e": "blue", "pairs": [{"a": 1, "b": "x"}]}), (mixed, {"v": 1.0, "o": None, "e": "red", "pairs": []}),
    (unwritable, {"n": 1}), (raising, {"n": 1}), (later, {"a": 2}),
    (functools.partial(three, 1), {"b": "x", "c": 2}), (functools.partial(three, c=1.5), {"a": 1, "b": "y"}), (functools.partial(functools.partial(three, 1), "z"), {"c": 3}),
]


@pytest.mark.parametrize(("fn", "args"), CALLABLES)
def test_every_kind_of_callable_takes_the_short_way_and_gives_what_the_long_way_gives(fn, args):
    """Classes (dataclass, NamedTuple, pydantic), a bound method, a callable object, partials, an async function,
    Enum/Optional/Union/nested parameters, a decode or a function that raises, a value with no JSON form: the short way
    is taken and gives the long way's result or error."""
    execute = tool(fn, name="probe").execute
    assert execute._keys is not None
    assert outcome(execute, args, []) == outcome(long_way(execute), args, [])


def test_a_real_run_sends_stores_and_reads_back_the_short_ways_results_as_those_made_by_init(tmp_path):
    """Through a real agent run (a parallel batch sharing one execute, a SQLiteSession): the request the model reads
    next, the rows stored, the messages read back and the end events are the same for tool()'s scalar results as for a
    hand-written tool's AgentToolResult([TextContent(json)])."""
    values = {"s": 'héllo "q"', "i": -12, "t": True, "f": False, "n": None, "e": ""}

    def calc(kind: str) -> Any:
        return values[kind]

    def by_hand(tool_call_id: str, args: dict[str, Any], signal: Any, on_partial_result: Any) -> AgentToolResult:
        value = values[args["kind"]]
        return AgentToolResult([TextContent(value if isinstance(value, str) else json.dumps(value))])

    made = tool(calc, parallel=True)
    hand = AgentTool("calc", "Calc", made.description, made.input_schema, by_hand, parallel_tool_execute=True)

    def run(chosen: AgentTool, path: Any) -> tuple[Any, ...]:
        calls = [{"id": f"c{k}", "function": {"name": "calc", "arguments": {"kind": k}}} for k in values]
        llm = ScriptedLLM([AssistantMessage([{"type": "tool_calls", "tool_calls": calls}], stop_reason="tool_use"), "done"])
        sink = EventRecorder()
        session = SQLiteSession(path, "s")
        with YiemAgent(llm_call=llm, agent_event_sink=sink, session=session, tools=[chosen]) as agent:
            ask(agent, "go", timeout=30)
        session.close()
        with closing(sqlite3.connect(path)) as conn:
            bodies = [json.loads(body) for (body,) in conn.execute("SELECT body FROM yiemagent_messages ORDER BY id")]
        with closing(SQLiteSession(path, "s")) as reread:
            messages = [dataclasses.replace(m, timestamp=None) for m in reread.messages()]
        ends = sorted((e.tool_call_id, e.result, repr(e.result), e.is_error) for e in sink.of_type(ToolExecEndEvent))
        return json.dumps(llm.requests[1], sort_keys=True), [{k: v for k, v in b.items() if k != "timestamp"} for b in bodies], messages, ends

    short, long = run(made, tmp_path / "short.db"), run(hand, tmp_path / "hand.db")
    assert short == long
    assert [m["content"] for m in json.loads(short[0])["messages"] if m["role"] == "tool"] == ['héllo "q"', "-12", "true", "false", "null", ""]


def test_a_call_naming_exactly_the_parameters_takes_the_short_way_and_never_walks_them(monkeypatch):
    """The short way is what such a call takes: with the long way's walk emptied, the function still receives its arguments."""
    execute = tool(add).execute
    monkeypatch.setattr(execute, "_parameters", [])  # the long way would now call add() with nothing
    assert execute("c", {"a": 1, "b": 2}, None, None) == AgentToolResult([TextContent("3")])
    with pytest.raises(TypeError):
        execute("c", {"a": 1}, None, None)  # one argument short: the long way, which now passes nothing


def test_a_scalar_returned_takes_no_walk_through_json(monkeypatch):
    """A str, int, bool or None returned becomes its text without to_json_value (the short way); a float still takes it."""
    def walked(value: Any) -> Any:
        raise AssertionError(f"{value!r} went through to_json_value")

    monkeypatch.setattr("yiemagent.typed._execute.to_json_value", walked)
    assert [to_tool_result(v).content[0].text for v in ("s", 7, True, False, None)] == ["s", "7", "true", "false", "null"]
    with pytest.raises(AssertionError, match="went through"):
        to_tool_result(1.5)


class Label(str):
    pass


def test_a_str_subclass_returned_is_its_text_as_one_block():
    """A value of a str subclass (not an exact str) is still one text block holding it, by the long way."""
    made = to_tool_result(Label("tagged"))
    assert made == AgentToolResult([TextContent("tagged")]) and type(made.content[0].text) is Label


def test_a_result_made_the_short_way_holds_every_field_as_init_leaves_it():
    """The result _text_result makes has the fields __init__ sets in its own dict (usage, terminate), not only the class's defaults."""
    assert vars(to_tool_result(3)) == vars(AgentToolResult([TextContent("3")]))


@pytest.mark.parametrize("args", [{"a": 1}, {}], ids=["the short way", "the long way"])
def test_an_async_function_is_cancelled_by_its_calls_signal_either_way(args):
    """The signal the pipeline gives reaches the event loop that awaits an async tool, called the short way or the long way
    (an argument left out): abort cancels it, and the error says why."""
    started = threading.Event()

    async def slow(a: int = 0) -> str:
        started.set()
        await asyncio.sleep(60)
        return "never"

    execute, signal, outcome_ = tool(slow).execute, AbortSignal(), []
    assert execute._keys == {"a"}

    def call() -> None:
        try:
            outcome_.append(execute("c", args, signal, None))
        except Exception as exc:
            outcome_.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    assert started.wait(10)
    signal.abort("stop now")
    thread.join(10)
    assert not thread.is_alive() and isinstance(outcome_[0], ToolError) and "cancelled: stop now" in str(outcome_[0])
