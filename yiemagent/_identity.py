"""Does one list begin with the very same objects as another? (issue 12, docs/performance.md)

``format_msg_for_llm`` reuses the previous request's wires when the new history begins
with the previous history's message objects — the same objects, not equal ones (``1 ==
True``, yet they serialise differently). Checking that with ``operator.is_`` costs an
interpreter call per message (~14 ns), which at 1,000 messages is most of a round's cost.

On CPython the check is a byte comparison instead: a list's items are an array of object
pointers, and two lists begin with the same objects exactly when their arrays begin with
the same bytes. ``identity_key`` copies that array into ``bytes`` (a memcpy) and
``begins_with`` compares with ``bytes.startswith`` (a memcmp). The array is found through
``list.__basicsize__`` (``PyListObject`` is ``PyObject_VAR_HEAD``, ``ob_item``,
``allocated``: its layout in CPython's headers since 2.x, free-threaded builds included),
and a self-test at import compares the bytes with ``struct.pack`` of ``id()``s. On another
interpreter, without ctypes, or if the self-test fails, the pure check is used. Equal
pointers mean the same objects only while those objects are alive: the caller keeps both
lists.

Only lists the caller owns and nobody else changes may be given (a list changed while its
array is copied could be read half-resized): ``format_msg_for_llm`` passes its own
snapshots.

Thread safety: stateless functions; safe from any thread on lists no other thread changes.
"""

from __future__ import annotations

import logging
import struct
import sys
from operator import is_
from typing import Any, Optional

try:
    import ctypes
except ImportError:  # a build without _ctypes: the pure check below
    ctypes = None  # type: ignore[assignment]

__all__ = ["begins_with", "identity_key", "POINTER_BYTES_IN_USE"]

logger = logging.getLogger("yiemagent.formatting")

_POINTER = struct.calcsize("P")
_OB_ITEM = list.__basicsize__ - 2 * _POINTER  # the offset of PyListObject.ob_item


def _pointer_bytes(items: list[Any]) -> bytes:
    """The item pointers of a list (CPython), as bytes."""
    if not items:
        return b""
    array = ctypes.c_void_p.from_address(id(items) + _OB_ITEM).value
    return ctypes.string_at(array, len(items) * _POINTER)


def _self_test() -> bool:
    if ctypes is None or sys.implementation.name != "cpython":
        return False
    probe = [object(), object(), object()]
    try:
        return _pointer_bytes(probe) == struct.pack(f"{len(probe)}P", *map(id, probe))
    except (ValueError, TypeError, OSError, ctypes.ArgumentError):
        return False


POINTER_BYTES_IN_USE = _self_test()
if not POINTER_BYTES_IN_USE:
    logger.info("list pointers cannot be read here (%s): the identity check runs item by item", sys.implementation.name)


def identity_key(items: list[Any]) -> Optional[bytes]:
    """What ``begins_with`` needs besides the list: its pointer array, or None where unavailable."""
    return _pointer_bytes(items) if POINTER_BYTES_IN_USE else None


def begins_with(items: list[Any], items_key: Optional[bytes], prefix: list[Any], prefix_key: Optional[bytes]) -> bool:
    """True when ``items[:len(prefix)]`` holds the very same objects as ``prefix``, in order.

    Both lists must be alive (held by the caller) for pointers to name objects. The keys
    are ``identity_key`` of each list; with None the check goes item by item.
    """
    if items_key is not None and prefix_key is not None:
        return items_key.startswith(prefix_key)
    return len(prefix) <= len(items) and all(map(is_, prefix, items))
