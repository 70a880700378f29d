"""How a streaming ``llm_call`` hands deltas to the agent, and learns of an abort.

Beyond the spec (API.md "Streaming"). ``llm_call(formatted) -> AssistantMessage`` stays
the one interface between the agent and an LLM; streaming adds a side channel, held in a
``contextvars.ContextVar`` for the duration of one call:

- the run wraps each ``llm_call`` in ``stream_to(on_delta, signal)``;
- a client that streams calls ``emit_delta(kind, text)`` for every text or thinking
  fragment as its bytes arrive (it does nothing when no one listens), and may call
  ``current_abort_signal()`` to learn the run's ``AbortSignal``, so that an abort can
  close its connection and stop reading at once.

A custom ``llm_call`` needs nothing more to stream: call ``emit_delta`` from the thread
that ``llm_call`` was called in. Work it hands to another thread must carry the context
along (``contextvars.copy_context().run(...)``), or capture ``current_stream()`` first and
call its ``emit``. Deltas are shown to the user only; the reply that enters the history is
the ``AssistantMessage`` the call returns (decision 14: a tool call runs only from it).

Thread safety: the variable is per thread (each thread starts with an empty context),
so two agents streaming at once never see each other's target. ``emit_delta`` may be
called from any thread that holds the context; the agent's emitter serialises the sink.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Optional, TypeVar

from .tooling import AbortSignal

__all__ = ["DELTA_KINDS", "StreamTarget", "call_unstreamed", "current_abort_signal", "current_stream", "emit_delta", "stream_to"]

DELTA_KINDS = ("text", "thinking")
_T = TypeVar("_T")


@dataclass(frozen=True)
class StreamTarget:
    """Where the deltas of the current LLM call go, and the signal that aborts it."""

    on_delta: Callable[[str, str], None]
    signal: Optional[AbortSignal] = None

    def emit(self, kind: str, text: str) -> None:
        if kind not in DELTA_KINDS:
            raise ValueError(f"delta kind must be one of {DELTA_KINDS}, got {kind!r}")
        if text:
            self.on_delta(kind, text)


_target: contextvars.ContextVar[Optional[StreamTarget]] = contextvars.ContextVar("yiemagent_stream_target", default=None)


@contextmanager
def stream_to(on_delta: Callable[[str, str], None], signal: Optional[AbortSignal] = None) -> Iterator[StreamTarget]:
    """Send the deltas of the LLM call made inside the ``with`` block to ``on_delta(kind, text)``."""
    target = StreamTarget(on_delta, signal)
    token = _target.set(target)
    try:
        yield target
    finally:
        _target.reset(token)


def current_stream() -> Optional[StreamTarget]:
    """The target of the LLM call running in this context, or None when no one listens."""
    return _target.get()


def emit_delta(kind: str, text: str) -> None:
    """Hand one ``"text"`` or ``"thinking"`` fragment to whoever listens; else do nothing."""
    target = _target.get()
    if target is not None:
        target.emit(kind, text)


def current_abort_signal() -> Optional[AbortSignal]:
    """The abort signal of the run whose LLM call is running in this context, if any."""
    target = _target.get()
    return target.signal if target is not None else None


def call_unstreamed(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` outside any stream: what it emits goes nowhere, and it sees no abort signal.

    For calling a sink with a delta: a sink that makes an LLM call of its own (a streaming
    client) would otherwise emit into the very round it is being told about, re-entering
    the relay that is calling it.
    """
    return contextvars.copy_context().run(_unstreamed, fn, args)


def _unstreamed(fn: Callable[..., _T], args: tuple[Any, ...]) -> _T:
    _target.set(None)  # in the copied context only
    return fn(*args)
