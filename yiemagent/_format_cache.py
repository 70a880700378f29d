"""The formatting cache: what lets a round reuse the wire dicts of messages it sent before (docs/performance.md).

Spec: §14 formatMsgForLLM converts the whole conversation every round; the cache makes
that cost grow with what is new, not with the length of the history, and stays exact.

Read-only dicts and lists are the cached wire form of a message. ``format_msg_for_llm``
hands the same wire dict of a message to every request that holds the message. If a
caller could change it in place, the next request would carry the change; so those
dicts, and the lists and dicts inside them, are read-only. They are real ``dict`` and
``list`` subclasses: ``json``, ``requests``, ``==`` and ``isinstance`` treat them as the
plain containers they equal. Every way of copying one gives a plain, editable
container: ``dict(d)``, ``{**d}``, ``d.copy()``, ``list(l)``, ``l[:]``, ``copy.copy``,
``copy.deepcopy``, ``pickle``. Immutable once built; may be shared between threads.

A message's wire dict is made once and remembered on the message (``_MessageCache``): messages
are values, so their wire form cannot change. The latest request's wires are remembered on
the agent's ``History`` (``_LatestRequest``) and reused while the history only grew: a
``HistorySnapshot`` that kept its lineage says so in O(1) (below).

The history list and its snapshot:

``format_msg_for_llm`` reuses the previous request's wire dicts when the new request's
messages begin with the previous request's very same message objects. Checking that by
comparing the two lists costs an interpreter call per message, every round. These two
``list`` subclasses let it know instead, in O(1):

- ``History`` is ``state.messages``. It counts its edits: every change other than adding
  at the end (``append``, ``extend``, ``+=``) bumps ``edits``. So if a history's ``edits``
  is the same at two moments, the list at the later moment begins with the very same
  objects the list held at the earlier one.
- ``HistorySnapshot`` is ``ctx.messages`` as the default ``prepare_context`` makes it: a
  copy of a ``History`` that records its ``lineage`` — the source, its ``edits`` and the
  snapshot's length. Any change to the snapshot itself (a hook adding a reminder, say)
  drops the lineage, since the snapshot then no longer is a prefix of its source.

Both are real lists: ``==``, ``json``, slicing, ``isinstance`` treat them as lists, and a
slice, ``+``, ``list(...)`` or ``.copy()`` of one is a plain list. ``copy.copy``,
``copy.deepcopy`` and ``pickle`` give a fresh ``History`` (a count of its own, nothing
cached on it) or, for a snapshot, a plain list.

Spec: §19 ``agentState.messages`` (the history) and §14 prepareContext (the round's copy
of it). Deviation: both are ``list`` subclasses rather than plain lists; everything that
reads a list reads them alike, and a plain list still works in either place (the
formatter then takes the slower, exact path: docs/performance.md).

What counting cannot see: a change made by calling ``list``'s own methods on the class
(``list.__setitem__(history, 0, m)``) or by C code writing into the list directly
(``heapq`` does). Nothing in yiemagent does either.

Thread safety: one writer at a time (the agent's rule: the run thread during a run, the
caller only while the agent is idle); any thread may take a snapshot meanwhile. An edit
bumps ``edits`` before and after the change (odd while it is under way), and a snapshot
keeps its lineage only if it read the same even count before and after copying the
items — a sequence lock without a lock, so a snapshot never claims a lineage for items
copied in the middle of an edit. A snapshot's lineage is dropped before the snapshot is
changed, so a reader that reads the items first and the lineage last never pairs a
lineage with changed items.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, Optional


__all__ = ["APPENDING_METHODS", "EDITING_METHODS", "FrozenDict", "FrozenList", "History", "HistorySnapshot", "Lineage", "freeze", "history_wires", "snapshot"]


Message = Any  # a conversation message (types.py): the cache reads only its identity and its __dict__

_READ_ONLY = (
    "a message dict made by format_msg_for_llm is read-only: it is cached and shared by every "
    "request that holds the message (docs/performance.md). Build a new one instead, e.g. "
    "{**message, 'content': ...}, or edit copy.deepcopy(formatted)"
)


def _read_only(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(self.why_read_only)


class FrozenDict(dict[Any, Any]):
    """A ``dict`` that refuses every change; its copies are plain dicts. ``why_read_only`` is the ``TypeError``'s text."""

    __slots__ = ()
    why_read_only = _READ_ONLY
    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __copy__(self) -> dict[Any, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        return {copy.deepcopy(k, memo): copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


class FrozenList(list[Any]):
    """A ``list`` that refuses every change; its copies are plain lists. ``why_read_only`` is the ``TypeError``'s text."""

    __slots__ = ()
    why_read_only = _READ_ONLY
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _read_only
    append = clear = extend = insert = pop = remove = reverse = sort = _read_only

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(v, memo) for v in self]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


_set_item = dict.__setitem__  # fills a read-only dict while freeze makes it, before anyone holds it
_LEAVES = frozenset({str, int, float, bool, type(None)})
"""Values ``freeze`` keeps as they are (exact types: a subclass of dict or list is looked at)."""


def freeze(value: Any, kinds: tuple[type[FrozenDict], type[FrozenList]] = (FrozenDict, FrozenList)) -> Any:
    """A read-only deep copy of a JSON-like value: dicts and lists inside tuples too.

    Tuples stay tuples and other objects stay as they are, so the copy equals the value
    (``==``) and serialises to the same JSON. ``kinds``: the read-only dict and list classes
    to make (a subclass says why in its own words: ``types.py`` ReadOnlyDict, ReadOnlyList for ``RunContext.messages``).
    """
    if type(value) is dict:  # copied in C, then each container inside replaced by its frozen copy
        frozen = kinds[0](value)
        for k, v in value.items():
            if type(v) not in _LEAVES:  # a str, number, bool or None (most values) is kept as it is
                _set_item(frozen, k, freeze(v, kinds))
        return frozen
    if isinstance(value, dict):  # a subclass: read through its own items()
        return kinds[0]({k: v if type(v) in _LEAVES else freeze(v, kinds) for k, v in value.items()})
    if isinstance(value, list):
        return kinds[1]([v if type(v) in _LEAVES else freeze(v, kinds) for v in value])
    if isinstance(value, tuple):
        return tuple(freeze(v, kinds) for v in value)
    return value


# --- the history list, and the snapshot one round sees ---------------------------------

# Every list method that changes the list in place besides append / extend / __iadd__
# (which only add at the end). tests/extras/test_format_cache.py checks this against dir(list).
EDITING_METHODS = ("__init__", "__setitem__", "__delitem__", "__imul__", "insert", "pop", "remove", "clear", "sort", "reverse")
APPENDING_METHODS = ("append", "extend", "__iadd__")


def _counted(name: str) -> Callable[..., Any]:
    base = getattr(list, name)

    def edit(self: "History", *args: Any, **kwargs: Any) -> Any:
        self.edits += 1  # odd: an edit is under way
        try:
            return base(self, *args, **kwargs)
        finally:
            self.edits += 1  # even again (also when the edit raised: it may have changed part)

    edit.__name__ = name
    edit.__doc__ = f"``list.{name}``, counted as an edit (it may change what is already in the list)."
    return edit


class History(list[Any]):
    """``state.messages``: a list that counts every change other than adding at the end.

    ``edits`` is even, and grows by 2 with each call of a method that may change,
    remove or move what is already in the list (``EDITING_METHODS``: item and slice
    assignment and deletion, ``insert``, ``pop``, ``remove``, ``clear``, ``sort``,
    ``reverse``, ``*=``). ``append``, ``extend`` and ``+=`` keep it: they only add at the
    end. ``format_msg_for_llm`` keeps its record of the latest request on the list (a
    private attribute), so the record lives and dies with the history.
    """

    edits = 0  # class default; an instance's own count appears with its first edit

    if TYPE_CHECKING:  # list's own signature: mypy cannot read one from _counted's result

        def __init__(self, iterable: Iterable[Any] = (), /) -> None: ...

    else:
        __init__ = _counted("__init__")  # called again on a list, it replaces the contents
    __setitem__ = _counted("__setitem__")  # items and slices alike
    __delitem__ = _counted("__delitem__")
    __imul__ = _counted("__imul__")
    insert = _counted("insert")
    pop = _counted("pop")
    remove = _counted("remove")
    clear = _counted("clear")
    sort = _counted("sort")
    reverse = _counted("reverse")

    def __copy__(self) -> "History":
        return History(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> "History":
        return History(copy.deepcopy(list(self), memo))

    def __reduce__(self) -> tuple[Any, ...]:
        return (History, (list(self),))


_new_tuple = tuple.__new__  # a NamedTuple (a snapshot's Lineage) made once a round, without its Python __new__ (docs/performance.md "W1")


class Lineage(NamedTuple):
    """Where a snapshot came from: it equals ``source[:length]`` while ``source.edits == edits``."""

    source: History
    edits: int
    length: int


def _dropping(name: str) -> Callable[..., Any]:
    base = getattr(list, name)

    def change(self: "HistorySnapshot", *args: Any, **kwargs: Any) -> Any:
        self.lineage = None  # first: a reader that finds the lineage afterwards read the items before
        return base(self, *args, **kwargs)

    change.__name__ = name
    change.__doc__ = f"``list.{name}``; the snapshot no longer is a prefix of its source, so its lineage is dropped."
    return change


class HistorySnapshot(list[Any]):
    """A copy of a history for one LLM round (``ctx.messages``), recording its ``lineage``.

    ``lineage`` is None when the source is not a ``History`` (a plain list), when an edit
    of the source was under way while copying, or once the snapshot itself was changed
    by any method (``EDITING_METHODS`` and ``APPENDING_METHODS`` alike).
    """

    lineage: Optional[Lineage] = None

    def __init__(self, source: Any = ()) -> None:
        self.lineage = None  # first, also when called again on a snapshot: the items change below
        copied = snapshot(source)
        list.__init__(self, copied)
        self.lineage = copied.lineage  # last: a reader never pairs it with items not yet copied

    __setitem__ = _dropping("__setitem__")
    __delitem__ = _dropping("__delitem__")
    __imul__ = _dropping("__imul__")
    __iadd__ = _dropping("__iadd__")
    insert = _dropping("insert")
    pop = _dropping("pop")
    remove = _dropping("remove")
    clear = _dropping("clear")
    sort = _dropping("sort")
    reverse = _dropping("reverse")
    append = _dropping("append")
    extend = _dropping("extend")

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return copy.deepcopy(list(self), memo)

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


_new_list = list.__new__  # a snapshot, and a message's cache (_new_object), made without a Python __init__ call
_extend = list.extend
_list_items = list.__iter__  # a History subclass's items as the list holds them, whatever its own __iter__ and __len__ do
_new_object = object.__new__


def snapshot(source: Any) -> HistorySnapshot:
    """``HistorySnapshot(source)``, made without a Python ``__init__`` call (``prepare_context`` makes one a round: docs/performance.md "W1").

    The items are copied in one pass (``list.extend`` with the list's own C iterator: no
    Python code between two items), straight into the snapshot: no intermediate slice to
    fill and then free, two passes fewer over every message of the history a round
    (docs/performance.md "Long conversations: a round's passes over the history"). A
    subclass of ``History`` is read through ``list.__iter__`` too: its own ``__iter__`` or
    ``__len__`` (Python code, which may give other items than the list holds) never makes a
    copy that claims a lineage. A ``History``'s copy gets its lineage if the source's
    ``edits`` was the same even count before and after (the sequence lock of this module's
    docstring); anything else is copied as it is, without a lineage.
    """
    made = _new_list(HistorySnapshot)
    if not isinstance(source, History):
        _extend(made, source)
        return made
    before = source.edits
    _extend(made, source if type(source) is History else _list_items(source))  # History's own iterator is list's
    if before == source.edits and before % 2 == 0:
        made.lineage = _new_tuple(Lineage, (source, before, len(made)))  # Lineage(...) without namedtuple's Python __new__
    return made


# --- the cache of wire dicts ----------------------------------------------------------

class _MessageCache:
    """What ``format_msg_for_llm`` remembers about one message; never part of its value.

    Kept in a private attribute of the message, so it lives and dies with the message.
    ``wire`` is the message's read-only wire dict (``_SKIP`` for a kind of message that is
    not sent), None until first needed. A copy of the message (``copy.deepcopy``,
    ``pickle``) starts with an empty cache; ``copy.copy`` shares it, which is right since
    the copy holds the very same field objects.

    ``calls`` is what ``extract_tool_calls`` read from an assistant message (its arguments
    parsed once: ``normalize_reply`` reads them, the formatter, approvals and tracing reuse
    them; docs/performance.md "W1"), None until first read.

    Thread safety: any thread may read or set ``wire`` or ``calls`` (one attribute store,
    atomic); two threads that fill one at once compute equal values.
    """

    __slots__ = ("wire", "calls")

    def __init__(self, wire: Any = None, calls: Optional[tuple[Any, ...]] = None) -> None:
        self.wire: Any = wire
        self.calls: Optional[tuple[Any, ...]] = calls  # extraction.extract_tool_calls's calls of the message, once read

    def __deepcopy__(self, memo: dict[int, Any]) -> "_MessageCache":
        return _MessageCache()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_MessageCache, ())


# The latest request made from a ``History``, kept on it (``_LATEST_ATTR``): a plain tuple (one
# made a round, without a NamedTuple's ``__new__``) ``(edits, length, wires, size)``, where
# ``wires[:size]`` are the wires of ``history[:length]`` as they were when its ``edits`` was
# ``edits`` (see ``history_wires``). ``wires`` only ever grows at its end (the next request
# from the same history appends its new wires to it instead of copying it), so
# ``wires[:size]`` never changes; entries past ``size`` belong to a later record or to none.
_LatestRequest = tuple[int, int, list[dict[str, Any]], int]


_CACHE_ATTR = "_yiemagent_cache"  # on a message: its _MessageCache
_LATEST_ATTR = "_yiemagent_latest_request"  # on a History: its latest request's record (_LatestRequest)
_SKIP = FrozenDict()  # the cached "wire" of a message that is not sent (an unknown AgentMessage subclass)


def _cache_of(msg: Message, wire: Any = None, calls: Optional[tuple[Any, ...]] = None) -> Optional[_MessageCache]:
    """The message's cache, made (holding ``wire`` and ``calls``) when it has none; None for an entry that cannot hold one."""
    cache = getattr(msg, _CACHE_ATTR, None)
    if cache is None:
        cache = _new_object(_MessageCache)  # _MessageCache(wire, calls) without its Python __init__ call (a new message's, twice a round)
        cache.wire = wire
        cache.calls = calls
        try:
            object.__setattr__(msg, _CACHE_ATTR, cache)  # frozen dataclass: bypass its __setattr__
        except AttributeError:  # an entry with no __dict__ (no AgentMessage: those all have one): not cached
            return None
    return cache


def cached_calls(msg: Any) -> Optional[tuple[Any, ...]]:
    """The tool calls ``extract_tool_calls`` read from ``msg`` before, or None (docs/performance.md "W1")."""
    cache = getattr(msg, _CACHE_ATTR, None)
    return cache.calls if cache is not None else None


def remember_calls(msg: Any, calls: tuple[Any, ...]) -> None:
    """Keep ``extract_tool_calls``'s calls of ``msg`` with it (a message is a frozen value: they cannot go stale)."""
    cache = getattr(msg, _CACHE_ATTR, None)
    if cache is not None:
        cache.calls = calls
    else:  # a new message (a reply normalize_reply just read): its cache made holding them, in one call
        _cache_of(msg, calls=calls)


def _wire_of(msg: Message, convert: Callable[[Message], Optional[dict[str, Any]]]) -> dict[str, Any]:
    """The read-only wire dict of one message, made by ``convert`` on first use and then remembered.

    ``convert`` gives a plain dict, frozen here, or a ``FrozenDict`` it built read-only all
    the way down itself (formatting's common shapes), kept as it is.
    """
    cache = getattr(msg, _CACHE_ATTR, None)
    wire = cache.wire if cache is not None else None
    if wire is None:
        plain = convert(msg)
        wire = _SKIP if plain is None else plain if type(plain) is FrozenDict else freeze(plain)
        if cache is None:  # made now holding the wire, or the one convert made meanwhile (reading the calls)
            cache = _cache_of(msg, wire=wire)
        if cache is not None:
            cache.wire = wire
    return wire


def history_wires(given: Any, convert: Callable[[Message], Optional[dict[str, Any]]], request: list[Any]) -> list[Any]:
    """``request`` with the wire dicts of a context's messages appended, in order; ``convert`` makes a message's (None: not sent; a wire is never empty).

    When ``given`` is a ``HistorySnapshot`` that still has its lineage (the default
    ``prepare_context`` made it and nobody changed it), and its source ``History`` holds a
    record of its latest request made at the same ``edits`` count and no longer than
    ``given``, then ``given`` begins with that request's very messages (only appends
    happened in between: ``History``), so its wires are reused and only the
    messages after it are looked at. Otherwise — a plain list, a changed snapshot, a
    history edited since — every wire comes from each message's own cache: one dict
    lookup per message, still exact. The record is replaced by this request's whenever
    ``given`` has a lineage. Nothing here compares messages: the edit count says it all.

    One copy of the history's wires a round, into ``request`` (the caller's list, which no
    record shares): the new record keeps the old record's list with this request's new wires
    appended to it, if that list held exactly the old record's ``size`` wires just before
    (its length after appending says so: a list only grows). Otherwise another request
    appended to it since the old record was read (another thread's, or one made while this
    one converted a message), and the new record gets a copy of this request's wires: the
    entries a record counts never change, and a request takes only those.
    """
    lineage = given.lineage if isinstance(given, HistorySnapshot) else None
    start = len(request)
    shared: Optional[list[dict[str, Any]]] = None  # the record's list, while this request may keep it (its size: the record's)
    new = given
    if lineage is not None:
        source, edits, length = lineage
        latest = getattr(source, _LATEST_ATTR, None)
        if latest is not None:
            latest_edits, latest_length, shared, size = latest
            if latest_edits == edits and latest_length <= length:
                request += shared
                del request[start + size :]  # what another request appended to the record's list since it was made
                new = given[latest_length:length]
            else:
                shared = None
    for msg in new:
        wire = _wire_of(msg, convert)
        if wire:  # _SKIP, the one empty wire (a message's wire always has its "role"), is a message not sent
            request.append(wire)
    # the lineage is read again last: a snapshot changed meanwhile has dropped it (first thing)
    if lineage is not None and given.lineage is lineage:
        total = len(request) - start
        if shared is not None:
            shared += request[start + size :]
            if len(shared) != total:  # the list had grown past size (another request appended to it): not ours there
                shared = None
        record: _LatestRequest = (edits, length, shared if shared is not None else request[start:], total)
        setattr(source, _LATEST_ATTR, record)
    return request
