"""The bounds on what models, tools and servers send (decision 15, ``yiemagent/_bounds.py``).

The agent's own tests reach these helpers through whole runs, where a bound that is off by
one, or a message that names the wrong place, still lets the run pass. Here each bound is
checked at its edge, and each refusal by the text that tells the model or the caller where
the problem is.
"""

from __future__ import annotations

import json
import sys

import pytest

from yiemagent._bounds import MAX_DEPTH, JSONTooDeepError, NotJSONError, UnreadableNumber, clean_str, int_digit_limit, json_copy, json_safe, loads_json, plain, preview, short_repr

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


@pytest.mark.parametrize(("plain_wrap", "sub_wrap"), [(lambda v: [v], lambda v: _List([v])), (lambda v: {"k": v}, lambda v: _Dict(k=v))], ids=["list", "dict"])
def test_plain_finds_a_subclass_held_by_plain_containers_at_its_last_level_and_not_below(plain_wrap, sub_wrap):
    """Inside four plain containers a subclass is on the last level plain copies (depth 4): it comes back plain; one level lower the value comes back as it is, the very object."""
    plain_type = list if plain_wrap(1).__class__ is list else dict
    subclass = type(sub_wrap(1))
    assert _types_down(plain(_nested(4, plain_wrap, sub_wrap(1)))) == [plain_type] * 5
    below = _nested(5, plain_wrap, sub_wrap(1))
    assert plain(below) is below and _types_down(below) == [plain_type] * 5 + [subclass]


@pytest.mark.parametrize("depth", [0, 1, 4])
@pytest.mark.parametrize("wrap", [lambda v: [v], lambda v: {"k": v}], ids=["list", "dict"])
def test_plain_reads_no_deeper_than_its_depth_so_a_value_nested_far_deeper_comes_back_as_it_is(wrap, depth):
    """A value nested 900 levels (a model's raw reply, say) is looked at only ``depth`` levels down: the very value comes back, with no walk to its bottom that would exhaust the recursion limit."""
    deep = _nested(900, wrap)
    assert plain(deep, depth) is deep


# --- short_repr: a value named in an error text or a warning -------------------------------


def test_short_repr_cuts_a_long_string_to_200_characters_before_its_repr():
    """By default a string longer than 200 characters is shown as the repr of its first 200, saying how many more were cut."""
    assert short_repr("x" * 300) == repr("x" * 200) + "... [100 more characters cut]"
    assert short_repr("x" * 198) == repr("x" * 198)


def test_short_repr_counts_only_characters_really_cut():
    """A string of exactly the limit is not cut before its repr (no "0 more characters cut"): its repr, two quotes longer, is cut like any other."""
    assert short_repr("abc", 3) == "'ab... [2 more characters cut]"


# --- clean_str: text that can be encoded as UTF-8 ---------------------------------------


def test_clean_str_gives_back_the_very_string_when_it_has_no_lone_surrogate():
    """Text without a lone surrogate comes back as the same object, non-ASCII text and a str subclass included; one with a lone surrogate has it replaced."""

    class Text(str):
        pass

    for text in ("plain", "h\u00e9llo \U0001f600", Text("h\u00e9llo")):
        assert clean_str(text) is text
    assert clean_str(Text("h\u00e9\ud800")) == "h\u00e9\ufffd"


# --- json_safe: what is kept and sent again is strict JSON; a refusal names the place ------


@pytest.mark.parametrize("make_dict", [dict, _Dict], ids=["dict", "dict subclass"])
def test_json_copy_copies_every_dict_and_list_all_the_way_down_and_shares_the_leaves(make_dict):
    """What a tool receives (spec §8.2) is equal to the arguments, with every dict and list its own (a dict subclass copied into a plain dict); strings and numbers are shared."""
    leaf = "x" * 100
    arguments = make_dict(a=[make_dict(b=[leaf, 1.5])], c=make_dict(d=make_dict()), e=leaf)
    copied = json_copy(arguments)
    assert copied == arguments and type(copied) is dict

    def containers(value):
        if isinstance(value, dict):
            return [value, *(c for v in value.values() for c in containers(v))]
        if isinstance(value, list):
            return [value, *(c for v in value for c in containers(v))]
        return []

    assert not {id(c) for c in containers(copied)} & {id(c) for c in containers(arguments)}
    assert copied["e"] is leaf and copied["a"][0]["b"][0] is leaf


def test_json_safe_gives_plain_json_back_as_it_is_and_replaces_lone_surrogates():
    """None, bools, numbers and clean strings come back as they are; a lone surrogate becomes U+FFFD unless strict_text is asked for."""
    for value in (None, True, 0, 1.5, "text", {"a": [None, False]}):
        assert json_safe(value) is value
    assert json_safe("a\ud800") == "a\ufffd"
    assert json_safe({"k\udc00": ["\ud800"]}) == {"k\ufffd": ["\ufffd"]}


def test_json_safe_copies_tuples_into_lists_at_any_level_and_leaves_the_original():
    """A tuple, at the top or inside a dict or list, comes back as a list in a new container; the value passed in is unchanged."""
    value = {"a": (1, 2), "b": "c"}
    copied = json_safe(value)
    assert copied == {"a": [1, 2], "b": "c"} and type(copied["a"]) is list
    assert value == {"a": (1, 2), "b": "c"}
    assert json_safe((1, 2)) == [1, 2] and type(json_safe((1, 2))) is list
    assert json_safe([(1,)]) == [[1]] and type(json_safe([(1,)])[0]) is list


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (float("nan"), "the value is nan, which JSON cannot carry"),
        ([float("nan")], "0 is nan, which JSON cannot carry"),
        ({"a": [float("inf")]}, "a/0 is inf, which JSON cannot carry"),
        ({"k" * 50: float("nan")}, "k" * 40 + " is nan, which JSON cannot carry"),
        ({"a": {"k" * 50: float("nan")}}, "a/" + "k" * 40 + " is nan, which JSON cannot carry"),
        ({1, 2}, "the value is a set, which is not a JSON value"),
        ({"a": {1}}, "a is a set, which is not a JSON value"),
        ({1: 2}, "the value has a key that is not a string: 1"),
        ({"a": {1: 2}}, "a has a key that is not a string: 1"),
        ({10**100: 1}, "the value has a key that is not a string: 1" + "0" * 59 + "... [41 more characters cut]"),
    ],
    ids=["nan", "in-list", "nested", "long-key", "long-key-nested", "set", "set-nested", "int-key", "int-key-nested", "long-int-key"],
)
def test_json_safe_names_the_place_and_the_value_it_refuses(value, message):
    """The refusal says where (keys cut to 40 characters, list places by index, "the value" at the top) and what, a key's repr cut to 60."""
    with pytest.raises(NotJSONError) as refused:
        json_safe(value)
    assert str(refused.value) == message


def test_json_safe_strict_text_refuses_a_lone_surrogate_in_a_list_or_a_key_by_its_place():
    """With strict_text a lone surrogate is refused wherever it is, naming the place, the code point and its position; a key is shown cut to 40 characters."""
    with pytest.raises(NotJSONError, match=r"^0 holds a lone surrogate \(U\+D800\) at position 1, which UTF-8 cannot encode$"):
        json_safe(["a\ud800"], strict_text=True)
    key = "\ud800" + "x" * 50
    with pytest.raises(NotJSONError) as refused:
        json_safe({key: 1}, strict_text=True)
    shown = repr("\ufffd" + "x" * 39) + "... [11 more characters cut]"
    assert str(refused.value) == f"the value holds a key {shown} with a lone surrogate (U+D800) at position 0, which UTF-8 cannot encode"


@pytest.mark.parametrize(("wrap", "place"), [(lambda v: [v], "0"), (lambda v: (v,), "0"), (lambda v: {"k": v}, "k")], ids=["list", "tuple", "dict"])
def test_json_safe_accepts_max_depth_levels_and_refuses_one_more(wrap, place):
    """MAX_DEPTH (64) nested containers are accepted, 65 refused; a max_depth given holds at every level, and the refusal names the place."""
    json_safe(_nested(MAX_DEPTH, wrap))
    with pytest.raises(NotJSONError, match=f"is nested deeper than {MAX_DEPTH} levels$"):
        json_safe(_nested(MAX_DEPTH + 1, wrap))
    json_safe(_nested(3, wrap), max_depth=3)
    with pytest.raises(NotJSONError) as refused:
        json_safe(_nested(4, wrap), max_depth=3)
    assert str(refused.value) == "/".join([place] * 3) + " is nested deeper than 3 levels"


# --- loads_json: strict, total reading -------------------------------------------------------


def test_loads_json_reads_bytes_as_json_loads_does():
    """UTF-8 and UTF-16 bytes (and a bytearray) are read as json.loads reads them, an encoded lone surrogate included; neither text nor bytes is a TypeError."""
    for data in (b'{"a": 1}', bytearray(b'{"a": 1}'), '{"a": 1}'.encode("utf-16"), b'"\xed\xa0\x80"'):
        assert loads_json(data) == json.loads(data)
    with pytest.raises(TypeError):
        loads_json(5)


@pytest.mark.parametrize("text", ['{{"a": 1}', '{ {"a": 1}', '{"a": 1}}', "{}}", '{"a": 1} {"b": 2}'])
def test_loads_json_refuses_an_object_with_a_brace_too_many_as_json_loads_does(text):
    """Text that begins and ends with a brace but is not one JSON object is refused with json's own error, never read from an offset."""
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    with pytest.raises(json.JSONDecodeError):
        loads_json(text)


def test_loads_json_says_when_the_text_is_nested_too_deeply():
    """Nesting deeper than the parser can follow is a JSONTooDeepError (a ValueError) saying so, the text a server's reply error repeats."""
    with pytest.raises(JSONTooDeepError) as refused:
        loads_json("[" * 100_000 + "]" * 100_000)
    assert isinstance(refused.value, ValueError)
    assert str(refused.value) == "JSON nested too deeply to read"


def test_an_unreadable_number_keeps_its_text_cut_and_says_why():
    """An integer past the digit limit, or a float past a double, is kept as its first 80 characters with the reason, the float's text cut to 40 there."""
    long_int = loads_json("1" * 5000)
    assert isinstance(long_int, UnreadableNumber)
    assert long_int.text == "1" * 80
    assert long_int.reason == f"an integer of 5000 digits, more than the {sys.get_int_max_str_digits()} digits Python reads"
    text = "1." + "0" * 50 + "e400"
    huge = loads_json(text)
    assert huge.text == text[:80]
    assert huge.reason == f"the number {text[:40]}, which does not fit a float"


def test_int_digit_limit_is_zero_on_a_python_without_one(monkeypatch):
    """Python 3.10 (which setup.cfg supports) has no sys.get_int_max_str_digits: the limit reads as 0, no limit."""
    assert int_digit_limit() == sys.get_int_max_str_digits()
    monkeypatch.delattr(sys, "get_int_max_str_digits")
    assert int_digit_limit() == 0


def _deepest(leaf: str) -> int:
    """The most lists ``loads_json`` reads around ``leaf``, called from here (Python's recursion limit bounds it)."""
    read, refused = 0, sys.getrecursionlimit() + 1
    while refused - read > 1:
        levels = (read + refused) // 2
        try:
            loads_json("[" * levels + leaf + "]" * levels)
            read = levels
        except JSONTooDeepError:
            refused = levels
    return read


def test_loads_json_reads_an_ordinary_integer_as_deep_as_a_string():
    """An integer within the digit limit is read as deep as a string: no Python hook is called for it (``_bounds``' "Reading": the integer hook is only installed after a long integer)."""
    levels = _deepest('"s"')
    assert 0 < levels <= sys.getrecursionlimit()
    value = loads_json("[" * levels + "7" + "]" * levels)
    for _ in range(levels):
        assert type(value) is list and len(value) == 1
        value = value[0]
    assert value == 7
