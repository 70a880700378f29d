"""What a ``tool()`` function's parameters receive when the model does not send them.

Beyond the spec: the machinery under ``tool()`` (docs/conformance.md, "Tools from
functions"). Three kinds of parameter are filled in here, never by the model:

- the pipeline's (spec §3 execute's ``signal`` and ``onPartialResult``): ``INJECTED`` is
  the one table of them. A name in it is left out of the schema, filled in on each call,
  and never taken from the model, also through ``**kwargs``.
- the run's context: a parameter annotated ``RunContext`` (``RUN_CONTEXT``) receives the
  call's ``current_run_context()`` (types.py), whatever its name; it is left out of the
  schema and never taken from the model.
- defaults. The schema shows the model a parameter's default; whatever an earlier call did
  to that object, the next call that leaves the argument out must receive the default the
  schema promised. So a default is shared only when no call can change it (None, a
  number, a string, bytes, an Enum member, a tuple or frozenset of such values, ...) or
  when it has no state to change (a sentinel such as ``object()`` or
  ``dataclasses.MISSING``: copying it would break ``x is MISSING``); any other default is
  deep-copied once per call that leaves the argument out. The choice is made once, at
  decoration, so the common immutable case costs nothing per call.

Thread safety: the table is constant; a copier only reads the original default, which no
call ever receives, so copies may be made in several threads at once.
"""

from __future__ import annotations

import copy
import copyreg
import datetime as dt
import decimal
import enum
import fractions
import functools
import pathlib
import re
import types
import typing
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple, Optional

from ..types import AbortSignal, RunContext, current_run_context

__all__ = ["INJECTED", "PIPELINE_PARAMETERS", "RUN_CONTEXT", "Injected", "admits", "fresh_default", "is_immutable", "wants_run_context"]


class Injected(NamedTuple):
    """A parameter the pipeline fills in: what a call passes, and what that value is (for the annotation check)."""

    fill: Callable[[Optional[AbortSignal], Callable[[Any], None]], Any]  # (signal, on_partial_result) -> value
    kind: type  # the class of the value, as admits() checks it
    what: str  # in words, for error messages


INJECTED: dict[str, Injected] = {
    "signal": Injected(lambda signal, on_partial_result: signal if signal is not None else AbortSignal(), AbortSignal, "the call's AbortSignal"),
    "on_partial_result": Injected(lambda signal, on_partial_result: on_partial_result, types.FunctionType, "a callback for partial results"),
}
PIPELINE_PARAMETERS = tuple(INJECTED)

RUN_CONTEXT = Injected(lambda signal, on_partial_result: current_run_context(), RunContext, "the run's RunContext")
"""A parameter annotated ``RunContext`` (or ``Optional[RunContext]``), whatever its name: the call's
``current_run_context()`` (types.py), None when ``execute`` is called outside a run."""


def wants_run_context(annotation: Any) -> bool:
    """Whether a parameter's annotation asks for the ``RunContext``: ``RunContext``, ``Optional[RunContext]``, ``Annotated[...]`` of those."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = annotation.__origin__
    if annotation is RunContext:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return len(args) == 1 and args[0] is RunContext
    return False


def admits(annotation: Any, kind: type) -> bool:
    """Whether ``annotation`` admits a value of class ``kind``: False only for a plain
    contradiction (``signal: str``); a typing form this cannot judge is admitted."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = annotation.__origin__
    origin = typing.get_origin(annotation)
    if annotation is Any or origin is typing.Literal or annotation is None or annotation is type(None):
        return annotation is Any
    if origin is typing.Union or origin is types.UnionType:
        return any(admits(arg, kind) for arg in typing.get_args(annotation))
    annotation = origin if origin is not None else annotation
    if not isinstance(annotation, type):
        return True
    try:
        return issubclass(kind, annotation)
    except TypeError:  # a Protocol that is not runtime-checkable, and kin
        return True


# Types whose instances no call can change (exact types: a subclass may add a __dict__).
_IMMUTABLE_TYPES = frozenset(
    {
        type(None), bool, int, float, complex, str, bytes, range, type(Ellipsis), type(NotImplemented),
        decimal.Decimal, fractions.Fraction, dt.date, dt.datetime, dt.time, dt.timedelta, dt.timezone,
        uuid.UUID, pathlib.PurePosixPath, pathlib.PureWindowsPath, pathlib.PosixPath, pathlib.WindowsPath,
        re.Pattern,
    }
)
_MAX_DEPTH = 100  # deeper tuples are copied rather than walked


def is_immutable(value: Any, depth: int = 0) -> bool:
    """True when no code holding ``value`` can change it: an immutable scalar, an Enum
    member, or a tuple, frozenset or NamedTuple of immutable values."""
    kind = type(value)
    if kind in _IMMUTABLE_TYPES or isinstance(value, enum.Enum):
        return True
    if kind is tuple or kind is frozenset or (isinstance(value, tuple) and hasattr(kind, "_fields") and not hasattr(value, "__dict__")):
        return depth < _MAX_DEPTH and all(is_immutable(item, depth + 1) for item in value)
    return False


def _stateless(value: Any) -> bool:
    """True for an object with no state of its own, which pickling would rebuild from its class alone."""
    if hasattr(type(value), "__deepcopy__"):
        return False
    try:
        reduced = value.__reduce_ex__(4)
    except Exception:  # not picklable; the caller's deepcopy has already succeeded, so it copies another way
        return False
    return (
        isinstance(reduced, tuple)
        and len(reduced) >= 2
        and reduced[0] is copyreg.__newobj__  # type: ignore[attr-defined]  # typeshed does not declare it; pickle's protocol 2+ reduces with it
        and reduced[1] == (type(value),)
        and all(part is None for part in reduced[2:])
    )


def fresh_default(value: Any) -> Optional[Callable[[], Any]]:
    """How a call that leaves the argument out gets ``value``: None when the default
    itself may be passed (immutable, stateless, or handed back by ``deepcopy`` as it is:
    functions, classes), else a function that returns a fresh deep copy.

    Raises:
        Exception: whatever ``copy.deepcopy(value)`` raises (``TypeError: cannot pickle
            'generator' object``, a lock, an open file): ``tool()`` turns it into a
            ``ToolDefinitionError`` naming the parameter.
    """
    if is_immutable(value):
        return None
    if copy.deepcopy(value) is value or _stateless(value):
        return None
    return functools.partial(copy.deepcopy, value)
