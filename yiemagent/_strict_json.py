"""Reading JSON text from a server or a model: strict, total, and never raising what a caller does not expect.

Beyond the spec: the reader under spec §7 (tool-call arguments) and spec §14 ``llmCall``
(reply bodies). docs/failures.md, "Arguments a model sends".

Python's ``json.loads`` differs from what the wire needs in three ways, each of which
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
("arguments/city is an integer of 5000 digits..."); ``json_safe`` (module ``_safe``)
refuses it, so it never goes back to a server. ``NaN``/``Infinity`` raise, unless
``constants=True`` (tool-call arguments, whose every problem is reported to the model
with its place): then they are read as ``UnreadableNumber`` too. Every failure is a
``ValueError``; nesting too deep for the parser is ``JSONTooDeepError``.

Reading is as fast as ``json.loads`` for text without such numbers: the integer hook is
only installed when the plain reading failed on a long integer.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

__all__ = ["JSONTooDeepError", "UnreadableNumber", "int_digit_limit", "loads_json"]


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


def loads_json(text: str, *, constants: bool = False) -> Any:
    """``text`` parsed as strict JSON; a number it cannot hold becomes an ``UnreadableNumber``.

    Raises:
        json.JSONDecodeError: the text is not JSON (a ``ValueError``).
        JSONTooDeepError: nested deeper than the parser can follow (a ``ValueError``).
        ValueError: ``NaN``/``Infinity``/``-Infinity`` with ``constants=False``.
    """
    parse_constant = _constant if constants else _refuse_constant
    try:
        try:
            return json.loads(text, parse_constant=parse_constant, parse_float=_read_float)
        except (json.JSONDecodeError, _NotJSONConstant):
            raise
        except ValueError:  # int() refused a long integer: read again, long integers kept as text
            return json.loads(text, parse_constant=parse_constant, parse_float=_read_float, parse_int=_read_int)
    except RecursionError:
        raise JSONTooDeepError("JSON nested too deeply to read") from None
