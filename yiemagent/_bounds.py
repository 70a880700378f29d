"""Bounds on what a model or a tool can make the agent keep or repeat (decision 15, docs/failures.md).

``json_safe`` checks that a value is plain JSON that every server and ``json.dumps``
(strict: no NaN, no integer longer than Python writes) accept, within a nesting depth;
``clean_str`` replaces lone surrogates,
which cannot be encoded as UTF-8 and so cannot be sent; ``cap_text`` bounds an error text
that echoes model input, saying what was cut.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ._strict_json import UnreadableNumber, int_digit_limit

__all__ = ["MAX_DEPTH", "MAX_ECHO_CHARS", "NotJSONError", "cap_text", "clean_str", "json_safe", "plain", "preview", "short_repr"]

MAX_DEPTH = 64
"""Deepest nesting of a JSON value kept in the history: far beyond any real tool's
arguments, far below Python's recursion limit (deep values made ``json.dumps`` raise
``RecursionError`` on every later round)."""

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
    if isinstance(value, dict):
        pairs = list(dict.items(value))
        out = {k: plain(v, depth - 1) for k, v in pairs}
        return value if type(value) is dict and all(out[k] is v for k, v in pairs) else out
    items = list(list.__iter__(value))
    copied = [plain(v, depth - 1) for v in items]
    return value if type(value) is list and all(a is b for a, b in zip(copied, items)) else copied


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
        if type(value) is list and all(a is b for a, b in zip(items, value)):
            return value
        return items
    raise NotJSONError(f"{_where(_path)} is a {type(value).__name__}, which is not a JSON value")
