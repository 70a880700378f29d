"""Read-only dicts and lists: the cached wire form of a message (issue 12, docs/performance.md).

``format_msg_for_llm`` hands the same wire dict of a message to every request that holds
the message. If a caller could change it in place, the next request would carry the
change; so those dicts, and the lists and dicts inside them, are read-only. They are
real ``dict`` and ``list`` subclasses: ``json``, ``requests``, ``==`` and ``isinstance``
treat them as the plain containers they equal. Every way of copying one gives a plain,
editable container: ``dict(d)``, ``{**d}``, ``d.copy()``, ``list(l)``, ``l[:]``,
``copy.copy``, ``copy.deepcopy``, ``pickle``.

Thread safety: immutable once built; may be shared between threads.
"""

from __future__ import annotations

import copy
from typing import Any, NoReturn

__all__ = ["FrozenDict", "FrozenList", "freeze"]

_READ_ONLY = (
    "a message dict made by format_msg_for_llm is read-only: it is cached and shared by every "
    "request that holds the message (docs/performance.md). Build a new one instead, e.g. "
    "{**message, 'content': ...}, or edit copy.deepcopy(formatted)"
)


def _read_only(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(_READ_ONLY)


class FrozenDict(dict):  # type: ignore[type-arg]
    """A ``dict`` that refuses every change; its copies are plain dicts."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __copy__(self) -> dict[Any, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        return {copy.deepcopy(k, memo): copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


class FrozenList(list):  # type: ignore[type-arg]
    """A ``list`` that refuses every change; its copies are plain lists."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _read_only
    append = clear = extend = insert = pop = remove = reverse = sort = _read_only

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(v, memo) for v in self]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


def freeze(value: Any) -> Any:
    """A read-only deep copy of a JSON-like value: dicts and lists inside tuples too.

    Tuples stay tuples and other objects stay as they are, so the copy equals the value
    (``==``) and serialises to the same JSON.
    """
    if isinstance(value, dict):
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return FrozenList([freeze(v) for v in value])
    if isinstance(value, tuple):
        return tuple(freeze(v) for v in value)
    return value
