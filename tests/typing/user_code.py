"""A user's code as ``mypy --strict`` reads it (``make lint``): what it reads of the library has its type, not ``Any``.

Not a pytest module: ``make lint`` type-checks it beside the package. Fields the library
makes in C for speed (docs/performance.md "Frames a run no longer makes") still read as
their declared types here.
"""

from __future__ import annotations

from yiemagent import AbortSignal
from yiemagent.events import EventEmitter


def stopped(signal: AbortSignal) -> bool:
    return signal.aborted


def heard(emitter: EventEmitter) -> bool:
    return emitter.listened
