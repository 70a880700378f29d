"""tool(): a default is the same at every call that leaves the argument out (docs/conformance.md, "Tools from functions").

The schema shows the model each default; whatever an earlier call did to that object, the
next call must receive what the schema promised. Any default a call could change is
copied for each call that omits it; an immutable or stateless one is passed as it is.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import threading
from typing import Any

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
