"""The agent side of streaming: deltas of one LLM round reach the sink as ``LLMDeltaEvent``.

Beyond the spec (API.md "Streaming"; issue 14). The run wraps each ``llm_call`` in
``relay_deltas(...)``, which opens the side channel of ``yiemagent.streaming``
(``stream_to``) with a ``DeltaRelay`` as its target. The relay turns each
``emit_delta(kind, text)`` of the client into ``LLMDeltaEvent(run_id, round, kind, text)``
and hands it to the agent's ``EventEmitter``, so that:

- the deltas of a round come after its ``LLMCallStartEvent`` (emitted before the block)
  and before its ``LLMCallEndEvent`` (emitted after it): the relay is closed when
  ``llm_call`` returns or raises, and a delta sent later — by a thread the client left
  running — is dropped, as a partial result after ``execute`` returned is (decision 8);
- a delta sent after the run's abort signal fired is dropped too: the user asked the run
  to stop, and the reply will not be kept (the run ends "aborted");
- the sink is never called from two threads at once (decision 8), even when a client
  emits from a thread of its own that carries the call's context: the emitter's lock
  serialises every call into the sink.

Deltas are for the user's eyes only. What enters the history, and the only thing a tool
call is ever run from, is the complete ``AssistantMessage`` that ``llm_call`` returns
(decision 14).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

from .events import EventEmitter, LLMDeltaEvent
from .streaming import call_unstreamed, stream_to
from .tooling import AbortSignal

__all__ = ["DeltaRelay", "relay_deltas"]

logger = logging.getLogger("yiemagent.stream")


class DeltaRelay:
    """The ``on_delta(kind, text)`` of one LLM round: emits an ``LLMDeltaEvent`` per delta.

    ``StreamTarget.emit`` has already refused unknown kinds and skipped empty text.

    Thread safety: called from the thread running ``llm_call`` or any thread carrying its
    context; ``_lock`` guards ``_open``, so a delta racing ``close()`` is either delivered
    before the close returns or dropped — never after the round's end event.
    """

    __slots__ = ("_emit", "_run_id", "_round", "_signal", "_lock", "_open")

    def __init__(self, emit: EventEmitter, run_id: int, round: int, signal: Optional[AbortSignal] = None) -> None:
        self._emit = emit
        self._run_id = run_id
        self._round = round
        self._signal = signal
        self._lock = threading.Lock()  # guards _open
        self._open = True

    def __call__(self, kind: str, text: str) -> None:
        with self._lock:
            if not self._open:
                logger.debug("a %s delta of run %d round %d after llm_call returned was dropped", kind, self._run_id, self._round)
                return
            if self._signal is not None and self._signal.aborted:
                logger.debug("a %s delta of run %d round %d after the abort was dropped", kind, self._run_id, self._round)
                return
            # the sink runs outside the round's stream: a streaming LLM call it makes itself
            # would emit into this relay and wait for ever on _lock, which this thread holds
            call_unstreamed(self._emit, LLMDeltaEvent(self._run_id, self._round, kind, text))

    def close(self) -> None:
        with self._lock:
            self._open = False


@contextmanager
def relay_deltas(emit: EventEmitter, run_id: int, round: int, signal: Optional[AbortSignal] = None) -> Iterator[DeltaRelay]:
    """Around one ``llm_call``: its deltas reach ``emit`` until the block ends; the client sees ``signal``."""
    relay = DeltaRelay(emit, run_id, round, signal)
    try:
        with stream_to(relay, signal):
            yield relay
    finally:
        relay.close()
