"""Token usage summed over a run and over an agent's life (API.md "Usage", decision 13).

``LLMCallEndEvent.usage`` is one round's; ``AgentRunEndEvent.usage`` is the sum over the
run's LLM rounds; ``agent.usage`` the sum over all of the agent's runs. Summing is field
by field, every field (``reasoning_tokens`` too): under decision 13 each count is a count
of tokens of one kind, so the counts of several rounds add up and
``total_tokens == input_tokens + output_tokens`` still holds for the sum whenever it holds
for each round. Only LLM rounds count: a tool's own ``usage`` (a tool that called an LLM)
stays on its ``ToolResultMessage``.
"""

from __future__ import annotations

import threading
from dataclasses import fields
from typing import Optional

from .messages import LLMUsage

__all__ = ["UsageMeter", "add_usage"]

_FIELDS = tuple(f.name for f in fields(LLMUsage))


def add_usage(total: LLMUsage, more: Optional[LLMUsage]) -> LLMUsage:
    """``total`` plus ``more``, field by field; ``more=None`` (a round that reported none) adds nothing.

    A count that is not an int (a client that put None or a float there) counts as 0
    when it is None and is truncated to int otherwise, so a careless client cannot make
    the sum raise.
    """
    if more is None:
        return total
    return LLMUsage(**{name: getattr(total, name) + _count(getattr(more, name, 0)) for name in _FIELDS})


def _count(value: object) -> int:
    if isinstance(value, bool) or value is None:
        return 0
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return 0


class UsageMeter:
    """A running sum of ``LLMUsage`` that several threads may add to (``agent.usage``).

    Thread safety: ``add`` and ``total`` may be called from any thread; ``_lock`` guards
    ``_total`` (the read-modify-write of ``add`` must not interleave).
    """

    __slots__ = ("_lock", "_total")

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _total
        self._total = LLMUsage()

    def add(self, usage: Optional[LLMUsage]) -> None:
        with self._lock:
            self._total = add_usage(self._total, usage)

    @property
    def total(self) -> LLMUsage:
        with self._lock:
            return self._total
