"""Where a sub-run's usage goes: into the run whose tool started it (docs/api.md "Agents as tools").

An ``agent_tool`` call's sub-agent reports its usage in its ``AgentRunEndEvent``; the
call's reporter (pipeline.py ``_PartialResultReporter``) hands it to the collector of the
run the call belongs to, and so does ``run.add_late_sub_run_usage`` for a sub-run that
ended after its call timed out. A run sets its collector once, as it starts
(run.py ``process_message``): a run whose tools start no sub-run pays one context-variable
read per tool call and nothing per round (docs/performance.md "W1").

Thread safety: the collector is a context variable; tool threads run in a copy of the
run thread's context, so each call reaches its own run's collector. The collector itself
is called from any thread (run.py ``_late_usage_of`` locks).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Optional

from .types import LLMUsage

__all__ = ["add_sub_run_usage", "collecting", "collector", "stop_collecting"]

Collector = Callable[[LLMUsage], None]

_collector: contextvars.ContextVar[Optional[Collector]] = contextvars.ContextVar("yiemagent_sub_run_usage", default=None)


collector: Callable[[], Optional[Collector]] = _collector.get
"""The collector of the run this thread works for, or None outside a run (the context variable's own ``get``, called in C, once a tool call)."""


def collecting(add: Optional[Collector]) -> contextvars.Token[Optional[Collector]]:
    """Make ``add`` this thread's collector; returns the token that ``_collector.reset`` takes back (``stop_collecting``)."""
    return _collector.set(add)


def stop_collecting(token: contextvars.Token[Optional[Collector]]) -> None:
    _collector.reset(token)


def add_sub_run_usage(usage: LLMUsage) -> bool:
    """Hand ``usage`` to this thread's run; False outside a run (the usage is then the caller's to keep)."""
    add = _collector.get()
    if add is None:
        return False
    add(usage)
    return True
