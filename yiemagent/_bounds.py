"""JSON at the edges: what the agent reads from a server or a model, and what it keeps or repeats (decision 15, docs/failures.md).

Reading, beyond the spec: the reader under spec §7 (tool-call arguments) and spec §14
``llmCall`` (reply bodies); docs/failures.md, "Arguments a model sends". Python's ``json.loads`` differs from what the wire needs in three ways, each of which
once ended a run with "LLM call failed":

- it accepts ``NaN``, ``Infinity`` and ``-Infinity``, which are not JSON (RFC 8259 §6)
  and which no strict encoder writes back;
- it raises a bare ``ValueError`` ("Exceeds the limit (4300 digits) for integer string
  conversion") for an integer longer than ``sys.get_int_max_str_digits()``, and turns
  ``1e400`` into a float infinity; both are valid JSON (RFC 8259 §6 lets a reader limit
  the range of numbers, it does not make the text invalid);
- it raises ``RecursionError``, which is not a ``ValueError``, for deep nesting.

``loads_json`` reads a number it cannot hold faithfully (an integer past the digit limit,
a float beyond a double) as an ``UnreadableNumber`` that keeps the number's text, so that
a reply holding one is still read and the one place that holds it can be named
("arguments/city is an integer of 5000 digits..."); ``json_safe`` (below)
refuses it, so it never goes back to a server. ``NaN``/``Infinity`` raise, unless
``constants=True`` (tool-call arguments, whose every problem is reported to the model
with its place): then they are read as ``UnreadableNumber`` too. Every failure is a
``ValueError``; nesting too deep for the parser is ``JSONTooDeepError``.

Reading is as fast as ``json.loads`` for text without such numbers: the integer hook is
only installed when the plain reading failed on a long integer.

Bounds. ``json_safe`` checks that a value is plain JSON that every server and
``json.dumps`` (strict: no NaN, no integer longer than Python writes) accept, within a
nesting depth; ``clean_str`` replaces lone surrogates, which cannot be encoded as UTF-8
and so cannot be sent; ``cap_text`` bounds an error text
that echoes model input, saying what was cut.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any

__all__ = [
    "JSONTooDeepError",
    "MAX_ARGUMENTS_DEPTH",
    "MAX_DEPTH",
    "MAX_ECHO_CHARS",
    "NotJSONError",
    "UnreadableNumber",
    "cap_text",
    "clean_str",
    "int_digit_limit",
    "json_safe",
    "loads_json",
    "plain",
    "preview",
    "short_repr",
]

# Reading: strict, total JSON.


class JSONTooDeepError(ValueError):
    """JSON nested deeper than the parser can follow (Python's ``RecursionError``)."""


class _NotJSONConstant(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity`` in text read with ``constants=False``."""


class UnreadableNumber:
    """A JSON number kept as its text because this process cannot hold it as it was sent.

    ``text`` is the number as it came (cut to 80 characters), ``reason`` says why:
    "an integer of 5000 digits, more than the 4300 digits Python reads", "the number
    1e400, which does not fit a float", "NaN, which JSON cannot carry".

    Thread safety: immutable; may be shared.
    """

    __slots__ = ("reason", "text")
    text: str
    reason: str

    def __init__(self, text: str, reason: str) -> None:
        object.__setattr__(self, "text", text[:80])
        object.__setattr__(self, "reason", reason)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("UnreadableNumber is immutable")

    def __repr__(self) -> str:
        return f"<{self.reason}>"


def int_digit_limit() -> int:
    """The most digits ``int()`` reads from text here (0: no limit; Python 3.10 has none)."""
    get_limit = getattr(sys, "get_int_max_str_digits", None)
    return get_limit() if get_limit is not None else 0


def _read_int(text: str) -> Any:
    try:
        return int(text)
    except ValueError:  # more digits than sys.get_int_max_str_digits() allows
        digits = len(text.lstrip("-"))
        return UnreadableNumber(text, f"an integer of {digits} digits, more than the {int_digit_limit()} digits Python reads")


def _read_float(text: str) -> Any:
    value = float(text)
    if math.isfinite(value):
        return value
    return UnreadableNumber(text, f"the number {text[:40]}, which does not fit a float")


def _constant(name: str) -> Any:
    return UnreadableNumber(name, f"{name}, which JSON cannot carry")


def _refuse_constant(name: str) -> Any:
    raise _NotJSONConstant(f"{name} is not JSON")


# The four readers, built once: ``json.loads`` with hooks builds a new decoder at every call.
_READERS = {
    (constants, long_ints): json.JSONDecoder(
        parse_constant=_constant if constants else _refuse_constant,
        parse_float=_read_float,
        parse_int=_read_int if long_ints else None,  # None: int, the decoder's default
    )
    for constants in (False, True)
    for long_ints in (False, True)
}


_SCANNERS: dict[bool, Callable[[str, int], tuple[Any, int]]] = {constants: _READERS[constants, False].scan_once for constants in (False, True)}  # type: ignore[attr-defined]  # undeclared in typeshed


def loads_json(text: "str | bytes", *, constants: bool = False) -> Any:
    """``text`` parsed as strict JSON; a number it cannot hold becomes an ``UnreadableNumber``.

    Raises:
        json.JSONDecodeError: the text is not JSON (a ``ValueError``).
        JSONTooDeepError: nested deeper than the parser can follow (a ``ValueError``).
        ValueError: ``NaN``/``Infinity``/``-Infinity`` with ``constants=False``.
        TypeError: ``text`` is neither str nor UTF-8 bytes (as ``json.loads``).
    """
    if not isinstance(text, str):
        text = text.decode(json.detect_encoding(text), "surrogatepass") if isinstance(text, (bytes, bytearray)) else text
    elif text[:1] == "{" and text[-1:] == "}":  # the common case, a bare object: json's C scanner alone, without decode's steps around it
        try:
            value, end = _SCANNERS[constants](text, 0)
            if end == len(text):
                return value
        except (StopIteration, ValueError, RecursionError):
            pass  # read again below, which raises what decode raises
    try:
        try:
            return _READERS[constants, False].decode(text)
        except (json.JSONDecodeError, _NotJSONConstant):
            raise
        except ValueError:  # int() refused a long integer: read again, long integers kept as text
            return _READERS[constants, True].decode(text)
    except RecursionError:
        raise JSONTooDeepError("JSON nested too deeply to read") from None


# Bounds on what is kept and repeated.

MAX_DEPTH = 64
"""Deepest nesting of a JSON value kept in the history: far beyond any real tool's
arguments, far below Python's recursion limit (deep values made ``json.dumps`` raise
``RecursionError`` on every later round)."""

MAX_ARGUMENTS_DEPTH = MAX_DEPTH - 4
"""Deepest nesting of a tool call's arguments. They are kept inside a content block, at
most four levels down (``{"type": "tool_calls", "tool_calls": [{"function": {"arguments":
...}}]}``), and the whole block is held to ``MAX_DEPTH`` (docs/failures.md, "Arguments a
model sends"): arguments checked against ``MAX_DEPTH`` alone made a block up to four levels
deeper than the bound."""

MAX_ECHO_CHARS = 2000
"""Longest error text that echoes model input; the rest is cut, with a note."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_SHORT_INT_BITS = 2000
"""An int of at most this many bits has fewer than 640 digits, the lowest limit Python
allows for ``int``/``str`` conversion: it can always be written as JSON."""


class NotJSONError(ValueError):
    """A value that cannot be sent as JSON; the message says where and why."""


def clean_str(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (the same object when it has none)."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub("\ufffd", text)


def json_copy(value: Any) -> Any:
    """A JSON value in containers of its own (dicts and lists copied all the way down; leaves shared, being immutable).

    What a tool receives is never the tool call's own object, which the history holds: a
    tool that changed its arguments in place would change the model's message (spec §8.2).
    """
    if type(value) is dict:  # copied in C, then each container inside replaced by its own copy
        copied = value.copy()
        for k, v in value.items():
            if isinstance(v, (dict, list)):
                copied[k] = json_copy(v)
        return copied
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    return value


def cap_text(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """``text`` cut to ``limit`` characters, ending with a note of how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters cut]"


def short_repr(value: Any, limit: int = 200) -> str:
    """``repr(value)`` bounded in length, computed without building the repr of a huge str.

    Never raises: a value whose repr raises (an int past Python's digit limit inside it,
    a hostile ``__repr__``) is shown by its type and the error.
    """
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... [{len(value) - limit} more characters cut]"
    try:
        text = repr(value)
    except Exception:  # repr of a foreign object may raise anything
        text = f"<{type(value).__name__} object>"
    return cap_text(text, limit)


def plain(value: Any, depth: int = 4) -> Any:
    """``value`` with every dict and list subclass, ``depth`` levels deep, copied into a plain one.

    A subclass may answer differently each time it is read (a hostile or lazy mapping);
    a plain copy is read the same way by everything that reads it after. Returns the
    very same object when it holds no subclass.
    """
    if depth < 0 or not isinstance(value, (dict, list)):
        return value
    if _only_plain(value, depth):  # the common case: nothing to copy, one walk
        return value
    if isinstance(value, dict):
        pairs = list(dict.items(value))
        out = {k: plain(v, depth - 1) for k, v in pairs}
        return value if type(value) is dict and all(out[k] is v for k, v in pairs) else out
    items = list(list.__iter__(value))
    copied = [plain(v, depth - 1) for v in items]
    return value if type(value) is list and all(a is b for a, b in zip(copied, items, strict=True)) else copied


def _only_plain(value: Any, depth: int) -> bool:
    """True when ``value`` holds no dict or list subclass ``depth`` levels deep (``plain`` would return it as it is)."""
    kind = type(value)
    if kind is dict:
        return depth <= 0 or all(_only_plain(v, depth - 1) for v in value.values())
    if kind is list:
        return depth <= 0 or all(_only_plain(v, depth - 1) for v in value)
    return not isinstance(value, (dict, list))


def preview(value: Any, depth: int = 6, width: int = 200) -> Any:
    """A small copy of a JSON-like value to show in an error text: long strings and
    containers cut (with "..."), nesting cut below ``depth``. Never copies a long string whole."""
    if isinstance(value, str):
        return value if len(value) <= width else f"{value[:width]}... [{len(value) - width} more characters cut]"
    if isinstance(value, (dict, list, tuple)):
        if depth <= 0:
            return "..."
        if isinstance(value, dict):
            pairs = list(value.items())
            out = {str(k)[:width]: preview(v, depth - 1, width) for k, v in pairs[:20]}
            if len(pairs) > 20:
                out["..."] = f"{len(pairs) - 20} more keys"
            return out
        items = [preview(v, depth - 1, width) for v in list(value)[:20]]
        return items + ([f"... {len(value) - 20} more items"] if len(value) > 20 else [])
    return value


def _where(path: str) -> str:
    return path or "the value"


def _check_int(value: int, path: str) -> None:
    """Raise ``NotJSONError`` for an int too long to be written as decimal text here."""
    if value.bit_length() <= _SHORT_INT_BITS:
        return
    try:
        int.__repr__(value)
    except ValueError:  # more digits than sys.get_int_max_str_digits(): json.dumps raises the same
        digits = int(value.bit_length() * 0.30103) + 1
        raise NotJSONError(
            f"{_where(path)} is an integer of about {digits} digits, more than the {int_digit_limit()} digits Python writes"
        ) from None


def _check_text(text: str, path: str, what: str) -> None:
    match = _SURROGATE.search(text) if not text.isascii() else None
    if match is not None:
        code = f"U+{ord(match.group()):04X}"
        raise NotJSONError(f"{_where(path)} holds {what}a lone surrogate ({code}) at position {match.start()}, which UTF-8 cannot encode")


def _plainly_json(value: Any, room: int) -> bool:
    """True when ``json_safe`` would return ``value`` itself: plain dicts and lists within ``room`` levels, str keys,
    and only clean strings, short ints, finite floats, bools and None. False says nothing: ``json_safe`` looks again."""
    kind = type(value)
    if kind is str:
        return value.isascii() or _SURROGATE.search(value) is None
    if value is None or kind is bool:
        return True
    if kind is int:
        return bool(value.bit_length() <= _SHORT_INT_BITS)
    if kind is float:
        return math.isfinite(value)
    if room <= 0:
        return False
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not (key.isascii() or _SURROGATE.search(key) is None) or not _plainly_json(item, room - 1):
                return False
        return True
    if kind is list:
        for item in value:
            if not _plainly_json(item, room - 1):
                return False
        return True
    return False


def json_safe(value: Any, *, max_depth: int = MAX_DEPTH, strict_text: bool = False, _path: str = "", _depth: int = 0) -> Any:
    """``value`` as strict JSON: tuples become lists, strings lose lone surrogates.

    Returns the very same object when nothing had to change, so a clean value costs one
    walk and no copy. With ``strict_text`` a lone surrogate (in a string or a key) is an
    error instead of becoming U+FFFD: tool-call arguments run as the model sent them or
    not at all (decision 14, docs/failures.md).

    Raises:
        NotJSONError: a float that is NaN or infinite, an int too long to write (past
            ``sys.get_int_max_str_digits()``), an ``UnreadableNumber``, a key that is not
            a str, a value that is not JSON (a set, bytes, an object), nesting deeper than
            ``max_depth``, or with ``strict_text`` a lone surrogate; the message names the
            place, like ``arguments/a/0``.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        _check_int(value, _path)
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJSONError(f"{_where(_path)} is {value!r}, which JSON cannot carry")
        return value
    if isinstance(value, str):
        if strict_text:
            _check_text(value, _path, "")
            return value
        return clean_str(value)
    if isinstance(value, UnreadableNumber):
        raise NotJSONError(f"{_where(_path)} is {value.reason}")
    if _depth == 0 and _plainly_json(value, max_depth):  # the common case: one walk, no path built
        return value
    if _depth >= max_depth:
        raise NotJSONError(f"{_where(_path)} is nested deeper than {max_depth} levels")
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        changed = False
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotJSONError(f"{_where(_path)} has a key that is not a string: {short_repr(key, 60)}")
            if strict_text:
                _check_text(key, _path, f"a key {short_repr(clean_str(key), 40)} with ")
            clean_key = clean_str(key)
            where = f"{_path}/{clean_key[:40]}" if _path else clean_key[:40]
            clean = json_safe(item, max_depth=max_depth, strict_text=strict_text, _path=where, _depth=_depth + 1)
            changed = changed or clean is not item or clean_key is not key
            out[clean_key] = clean
        return value if not changed and type(value) is dict else out
    if isinstance(value, (list, tuple)):
        items = [
            json_safe(item, max_depth=max_depth, strict_text=strict_text, _path=f"{_path}/{i}" if _path else str(i), _depth=_depth + 1)
            for i, item in enumerate(value)
        ]
        if type(value) is list and all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items
    raise NotJSONError(f"{_where(_path)} is a {type(value).__name__}, which is not a JSON value")
