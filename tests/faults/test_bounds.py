"""The bounds on what models, tools and servers send (decision 15, ``yiemagent/_bounds.py``).

The agent's own tests reach these helpers through whole runs, where a bound that is off by
one, or a message that names the wrong place, still lets the run pass. Here each bound is
checked at its edge, and each refusal by the text that tells the model or the caller where
the problem is.
"""

from __future__ import annotations

import pytest

from yiemagent._bounds import plain, preview

# --- preview: the received arguments a schema error shows the model (pipeline) -----------


def _nested(levels: int, wrap, leaf: object = 1) -> object:
    """``leaf`` inside ``levels`` containers made by ``wrap``."""
    value = leaf
    for _ in range(levels):
        value = wrap(value)
    return value


def test_preview_cuts_a_string_longer_than_the_width_and_says_how_much():
    """A string of exactly 200 characters is shown whole; one more and it is cut to 200, saying 1 more was cut."""
    assert preview("x" * 200) == "x" * 200
    assert preview("x" * 201) == "x" * 200 + "... [1 more characters cut]"


@pytest.mark.parametrize(
    ("wrap", "shown_as"),
    [(lambda v: [v], lambda v: [v]), (lambda v: (v,), lambda v: [v]), (lambda v: {"k": v}, lambda v: {"k": v})],
    ids=["list", "tuple", "dict"],
)
def test_preview_shows_six_levels_of_nesting_and_cuts_the_seventh(wrap, shown_as):
    """Six nested containers are shown whole (a tuple as a list); a seventh is replaced by "..."."""
    assert preview(_nested(6, wrap)) == _nested(6, shown_as)
    assert preview(_nested(7, wrap)) == _nested(6, shown_as, leaf="...")


@pytest.mark.parametrize(("wrap"), [lambda v: [v], lambda v: {"k": v}], ids=["list", "dict"])
def test_preview_keeps_its_width_at_every_level(wrap):
    """A width given for the whole preview cuts a string nested inside lists and dicts too."""
    assert preview(_nested(3, wrap, leaf="abcdef"), width=3) == _nested(3, wrap, leaf="abc... [3 more characters cut]")


def test_preview_shows_twenty_keys_and_counts_the_rest():
    """A dict of 20 keys is shown whole; from 21 keys on, the first 20 are shown and a "..." key counts the rest."""
    keys = {f"k{i}": i for i in range(25)}
    twenty = dict(list(keys.items())[:20])
    assert preview(twenty) == twenty
    assert preview(dict(list(keys.items())[:21])) == {**twenty, "...": "1 more keys"}
    assert preview(keys) == {**twenty, "...": "5 more keys"}


def test_preview_shows_twenty_items_and_counts_the_rest():
    """A list of 20 items is shown whole; from 21 items on, the first 20 are shown and a last item counts the rest."""
    items = [[i] for i in range(25)]
    assert preview(items[:20]) == items[:20]
    assert preview(items[:21]) == items[:20] + ["... 1 more items"]
    assert preview(items) == items[:20] + ["... 5 more items"]


# --- plain: a reply's containers read once, as plain dicts and lists (normalize) ----------


class _Dict(dict):
    """A dict subclass: one that could answer differently each time it is read."""


class _List(list):
    """A list subclass, likewise."""


def _types_down(value: object) -> list[type]:
    """The type of each container down a chain of one-item lists or one-key dicts."""
    types = []
    while isinstance(value, (dict, list)):
        types.append(type(value))
        value = next(iter(value.values())) if isinstance(value, dict) else value[0]
    return types


def test_plain_copies_a_subclass_into_a_plain_dict_or_list_with_the_same_items():
    """A dict or list subclass, at the top or inside a plain container, comes back as a plain dict or list holding the same items."""
    for value, plain_type in [(_Dict(a=1), dict), (_List([1]), list)]:
        copied = plain(value)
        assert type(copied) is plain_type and copied == value
        inside = plain({"k": value})
        assert type(inside["k"]) is plain_type and inside == {"k": value}
        inside = plain([value])
        assert type(inside[0]) is plain_type and inside == [value]


def test_plain_returns_the_very_value_when_it_holds_no_subclass():
    """A value of plain dicts and lists is given back as the same object, not copied."""
    value = {"a": [1, {"b": [2]}], "c": "d"}
    assert plain(value) is value
    assert plain(value["a"]) is value["a"]
    assert plain("text") == "text"


@pytest.mark.parametrize("wrap", [lambda v: _List([v]), lambda v: _Dict(k=v)], ids=["list", "dict"])
def test_plain_copies_subclasses_down_to_its_depth_and_no_further(wrap):
    """With the default depth 4, the top container and four levels below it are made plain; the sixth level is left as it is."""
    subclass = type(wrap(1))
    plain_type = list if subclass is _List else dict
    assert _types_down(plain(_nested(6, wrap))) == [plain_type] * 5 + [subclass]
    assert _types_down(plain(_nested(6, wrap), 1)) == [plain_type] * 2 + [subclass] * 4
