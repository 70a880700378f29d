"""tool(): a default is the same at every call that leaves the argument out (docs/conformance.md, "Tools from functions").

The schema shows the model each default; whatever an earlier call did to that object, the
next call must receive what the schema promised. Any default a call could change is
copied for each call that omits it; an immutable or stateless one is passed as it is.
"""

from __future__ import annotations

import copy
import copyreg
import dataclasses
import enum
import functools
import threading
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from yiemagent import ToolDefinitionError, tool


def run(made, args=None):
    return made.execute("call", args or {}, None, lambda partial: None).content[0].text


@dataclasses.dataclass
class Options:
    tags: list[str]
    depth: int = 1


class Counter:
    """A plain object with state of its own."""

    def __init__(self) -> None:
        self.calls = 0


def test_a_dataclass_default_is_fresh_for_each_call_that_omits_it():
    """A dataclass instance default changed by one call was what the next call received."""

    def tag(label: str, options: Options = Options(["base"])) -> str:  # noqa: B008 - the point of the test
        options.tags.append(label)
        options.depth += 1
        return f"{options.tags} {options.depth}"

    made = tool(tag)
    assert made.input_schema["properties"]["options"]["default"] == {"tags": ["base"], "depth": 1}
    assert [run(made, {"label": "a"}) for _ in range(2)] == ["['base', 'a'] 2"] * 2


def test_a_tuple_holding_a_list_and_a_plain_object_are_fresh_for_each_call():
    """A tuple is immutable but the list inside it is not; an object with a __dict__ is state too."""

    def remember(item: int, seen: Any = ([],), counter: Any = Counter()) -> str:  # noqa: B008
        seen[0].append(item)
        counter.calls += 1
        return f"{seen} {counter.calls}"

    made = tool(remember)
    assert [run(made, {"item": 1}) for _ in range(3)] == ["([1],) 1"] * 3


def test_a_positional_only_mutable_default_is_fresh_and_keeps_later_arguments_in_place():
    """A positional-only default is copied too, and the arguments after it stay in their positions."""

    def add(seen: Any = (Options([]),), b: int = 0, /) -> str:  # noqa: B008
        seen[0].tags.append(str(b))
        return str(seen[0].tags)

    made = tool(add)
    assert [run(made, {"b": 5}) for _ in range(2)] == ["['5']", "['5']"]


class Color(enum.Enum):
    RED = "red"


MISSING = object()


class _Sentinel:
    def __repr__(self) -> str:
        return "<unset>"


UNSET = _Sentinel()


def keep(x: int) -> int:
    return x


IMMUTABLE = [None, True, 3, 2.5, 1j, "text", b"raw", Color.RED, (1, ("a", None)), frozenset({1, 2}), range(3), MISSING, UNSET, keep, int]


@pytest.mark.parametrize("default", IMMUTABLE, ids=[f"{i}-{type(d).__name__}" for i, d in enumerate(IMMUTABLE)])
def test_an_immutable_or_stateless_default_is_passed_as_it_is(default):
    """None, numbers, strings, bytes, Enum members, tuples/frozensets of those, sentinels, functions and classes are not copied: 'x is MISSING' still works."""
    received = []

    def f(x: Any = default) -> str:
        received.append(x)
        return ""

    def g(x: Any = default, /) -> str:
        received.append(x)
        return ""

    run(tool(f))
    run(tool(g))
    assert received[0] is default and received[1] is default


class CountedCopies:
    copies = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> "CountedCopies":
        CountedCopies.copies += 1
        return CountedCopies()


def test_a_default_is_copied_once_per_call_that_omits_it_and_never_when_the_model_sends_it():
    """One deepcopy per call that leaves the argument out, none for a call that sends it."""

    def f(x: Any = CountedCopies()) -> str:  # noqa: B008
        return ""

    made = tool(f)
    CountedCopies.copies = 0
    run(made)
    run(made)
    run(made, {"x": 1})
    assert CountedCopies.copies == 2


def _generator():
    yield 1


UNCOPYABLE = [
    ("generator", _generator()),
    ("lock", threading.Lock()),
    ("dict holding a lock", {"guard": threading.Lock()}),
]


@pytest.mark.parametrize("what, default", UNCOPYABLE, ids=[w for w, _ in UNCOPYABLE])
def test_a_default_that_cannot_be_copied_is_a_definition_error_naming_the_parameter(what, default):
    """A generator (exhausted by the first call), a lock or anything deepcopy refuses fails at decoration, not at a later call."""

    def f(n: int, resource: Any = default) -> str:
        return ""

    with pytest.raises(ToolDefinitionError, match=r"tool 'f': the default of parameter 'resource' \(\w+\) cannot be copied \(TypeError"):
        tool(f)


def test_a_shared_resource_bound_with_partial_is_not_copied():
    """The way out the error names: a keyword bound by functools.partial is configuration, shared and not copied."""
    lock = threading.Lock()
    received = []

    def f(n: int, resource: Any = None) -> str:
        received.append(resource)
        return ""

    run(tool(functools.partial(f, resource=lock), name="f"), {"n": 1})
    assert received == [lock] and received[0] is lock


# --- the invariant -------------------------------------------------------------------------


@dataclasses.dataclass
class Box:
    items: Any


leaves = st.integers(-5, 5) | st.text(max_size=3) | st.none()
nested_mutable = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.text(max_size=3), children, max_size=3),
        st.sets(st.integers(-5, 5) | st.text(max_size=3), max_size=3),
        st.lists(children, max_size=3).map(tuple),
        children.map(Box),
        st.binary(max_size=3).map(bytearray),
    ),
    max_leaves=8,
)


def mutate(value: Any) -> None:
    """Change every mutable container reachable from ``value``, in place."""
    if isinstance(value, list):
        for item in value:
            mutate(item)
        value.append("changed")
    elif isinstance(value, dict):
        for item in value.values():
            mutate(item)
        value["changed"] = True
    elif isinstance(value, set):
        value.add("changed")
    elif isinstance(value, bytearray):
        value.extend(b"!")
    elif isinstance(value, tuple):
        for item in value:
            mutate(item)
    elif isinstance(value, Box):
        mutate(value.items)
        value.items = "changed"


@given(default=nested_mutable)
def test_a_call_that_changes_its_default_does_not_change_the_next_calls(default):
    """For any default built from nested mutable values, each call that omits the argument receives a value equal to the default as written."""
    as_written = copy.deepcopy(default)
    received = []

    def f(x: Any = default) -> str:
        received.append(copy.deepcopy(x))
        mutate(x)
        return ""

    made = tool(f)
    for _ in range(3):
        run(made)
    assert received == [as_written] * 3
    assert default == as_written


# --- which defaults are immutable: named tuples, tuple subclasses, deep tuples ---------------


class Place(NamedTuple):
    name: str
    at: frozenset


class TaggedPlace(Place):
    """A NamedTuple's subclass without __slots__: its instances have a __dict__, state a call can change."""


class Pair(tuple):
    """A tuple subclass: its instances have a __dict__ too."""


def nested(levels: int, leaf: Any) -> Any:
    for _ in range(levels):
        leaf = (leaf,)
    return leaf


def received_by_two_calls(default: Any) -> list[Any]:
    received = []

    def f(x: Any = default) -> str:
        received.append(x)
        return ""

    made = tool(f)
    run(made)
    run(made)
    return received


@pytest.mark.parametrize(
    "default",
    [Place("home", frozenset({1})), (Place("a", frozenset()),), nested(99, frozenset({1}))],
    ids=["namedtuple", "tuple-of-namedtuple", "99-deep"],
)
def test_a_named_tuple_or_a_tuple_nested_up_to_99_deep_of_immutable_values_is_passed_as_it_is(default):
    """A NamedTuple of immutable values is immutable (deepcopy would still make a new one), and so is a
    tuple nested 99 deep around a frozenset: each call receives the default itself."""
    first, second = received_by_two_calls(default)
    assert first is default and second is default


def test_a_tuple_nested_100_deep_is_copied_rather_than_walked():
    """Tuples are walked to a depth of 100 (_parameter_fill._MAX_DEPTH); a deeper default is deep-copied for each call."""
    default = nested(100, frozenset({1}))
    first, second = received_by_two_calls(default)
    assert first == default and second == default
    assert first is not default and second is not default and first is not second


@pytest.mark.parametrize("default", [TaggedPlace("home", frozenset()), Pair((1, 2))], ids=["namedtuple-subclass", "tuple-subclass"])
def test_a_tuple_subclass_with_a_dict_is_fresh_for_each_call(default):
    """An attribute one call sets on a tuple subclass's instance is not on the next call's default."""
    seen = []

    def f(x: Any = default) -> str:
        seen.append(getattr(x, "note", None))
        x.note = "changed"
        return ""

    made = tool(f)
    run(made)
    run(made)
    assert seen == [None, None]
    assert not hasattr(default, "note")


# --- stateless objects: judged by the reduction copy.deepcopy uses ---------------------------


class ShortSentinel:
    """Pickled as its class alone, in pickle's short two-item form."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (copyreg.__newobj__, (ShortSentinel,))


class ProtocolSentinel:
    """Stateless at pickle protocol 4, the one copy.deepcopy reduces with; a later protocol would carry state."""

    def __reduce_ex__(self, protocol: int) -> tuple[Any, ...]:
        state = None if protocol <= 4 else {"protocol": protocol}
        return (copyreg.__newobj__, (ProtocolSentinel,), state, None, None)


@pytest.mark.parametrize("default", [ShortSentinel(), ProtocolSentinel()], ids=["two-item-reduction", "protocol-4"])
def test_an_object_deepcopy_rebuilds_from_its_class_alone_is_passed_as_it_is(default):
    """A sentinel whose reduction (at deepcopy's protocol 4, in either form pickle allows) is its class alone is shared: 'x is DEFAULT' works."""
    first, second = received_by_two_calls(default)
    assert first is default and second is default


class Registered:
    """State of its own; it refuses pickling itself, but copyreg registers how to copy it (as for a class one does not own)."""

    def __init__(self, items: list[int]) -> None:
        self.items = items

    def __reduce_ex__(self, protocol: int) -> Any:
        raise TypeError("Registered refuses pickling")


def test_a_default_copied_through_copyreg_is_fresh_for_each_call():
    """deepcopy copies it through copyreg although its own reduction raises: it has state, so each call gets a fresh copy."""
    copyreg.pickle(Registered, lambda value: (Registered, (list(value.items),)))
    try:
        default = Registered([1])
        seen = []

        def f(x: Any = default) -> str:
            seen.append(list(x.items))
            x.items.append(2)
            return ""

        made = tool(f)
        run(made)
        run(made)
    finally:
        del copyreg.dispatch_table[Registered]
    assert seen == [[1], [1]] and default.items == [1]
