"""A context for tools: ``RunContext`` and ``current_run_context()`` (beyond the spec, docs/api.md "A context for tools, async tools").

The spec's ``execute`` receives only (id, args, signal, onPartialResult) (§3). Beyond it, a
tool or a hook often needs what the run knows: the application's own objects (a database
handle, the user), which run and round this is, the tokens spent so far, the conversation.
``YiemAgent(deps=...)`` gives the application's objects; the run builds a ``RunContext`` for
each batch and each call of it sees it, with its own ``tool_call_id``:

- through ``current_run_context()``, from any ``execute``, ``before_tool_call`` or
  ``after_tool_call`` (a context variable, set in the thread that runs them: the run
  thread, a pool thread of a parallel batch, the thread of a call with ``timeout_s``);
- as an argument of a ``tool()`` function, to a parameter annotated ``RunContext`` (it is
  not in the schema; the model never sends it).

Thread safety: a ``RunContext`` is immutable (``messages`` is a tuple: a snapshot taken when
the batch started, which later messages do not change); each thread sees its own value of
the context variable (``contextvars``).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Optional

from .messages import AgentMessage, LLMUsage

__all__ = ["RunContext", "call_context", "current_run_context", "run_context"]


@dataclass(frozen=True)
class RunContext:
    """What a tool call may know of its run.

    Attributes:
        deps: the agent's ``deps`` (``YiemAgent(deps=...)``), as given; None without.
        run_id: the run's number (1 for the agent's first run), as in the run's events.
        round: the LLM round whose tool calls these are (1-based).
        usage: the run's ``LLMUsage`` so far, this round's reply included.
        messages: a read-only snapshot of the history the batch started from.
        tool_call_id: the id of the call being run; None outside one call.
    """

    deps: Any
    run_id: int
    round: int
    usage: LLMUsage
    messages: tuple[AgentMessage, ...]
    tool_call_id: Optional[str]


_current: contextvars.ContextVar[Optional[RunContext]] = contextvars.ContextVar("yiemagent_run_context", default=None)


def current_run_context() -> Optional[RunContext]:
    """The ``RunContext`` of the tool call this thread is running, or None outside a run's tools and hooks."""
    return _current.get()


@contextmanager
def run_context(context: Optional[RunContext]) -> Iterator[Optional[RunContext]]:
    """Make ``context`` current in this thread for the ``with`` block (the run sets it around a batch)."""
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)


@contextmanager
def call_context(tool_call_id: str) -> Iterator[Optional[RunContext]]:
    """The current context with ``tool_call_id`` set, for one call's PREPARE, EXECUTE and FINALIZE; nothing outside a run."""
    outer = _current.get()
    with run_context(replace(outer, tool_call_id=tool_call_id) if outer is not None else None) as context:
        yield context
