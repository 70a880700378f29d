"""What reaches the sink: lifecycle events, the serialising emitter, the streaming side channel (spec §13).

The three tool events are the spec's. The run and LLM-round events are beyond the spec,
named in its style, so that a user can watch a whole run (docs/events.md lists them all).

An event sink is any callable ``sink(event) -> None``. The library never calls it
directly: it goes through an ``EventEmitter``, which guarantees decision 8 — the sink is
never called from two threads at once, and an exception it raises is logged and dropped.
``tee(*sinks)`` makes one sink of several.

Beyond the spec (docs/tracing.md): every event carries ``time_ns``, when it happened
(``time.time_ns()``, taken in the thread where it happened, before the emitter's lock),
so a sink sees the real start and end of calls that ran in parallel even though it
receives their events one after another. ``time_ns`` is left out of ``==`` and ``repr``:
two events that say the same thing are equal whenever they were made.

Streaming: how a streaming ``llm_call`` hands deltas to the agent, and how the agent
relays them (the second half of this module).

Beyond the spec (docs/streaming.md). ``llm_call(formatted) -> AssistantMessage`` stays
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

The agent's side: the run wraps each ``llm_call`` in ``relay_deltas(...)``, which opens
the side channel (``stream_to``) with a ``DeltaRelay`` as its target (when nobody listens
to the emitter, a target that drops the deltas until someone does, with the same signal). The relay turns each
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

import contextvars
import logging
import operator
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, TypeVar

from .types import AbortSignal, AgentContext, AgentToolResult, AssistantMessage, LLMUsage, built

__all__ = [
    "DELTA_KINDS",
    "AgentRunEndEvent",
    "AgentRunStartEvent",
    "DeltaRelay",
    "EventEmitter",
    "LLMCallEndEvent",
    "LLMCallStartEvent",
    "LLMDeltaEvent",
    "StreamTarget",
    "SubAgentEvent",
    "ToolExecEndEvent",
    "ToolExecStartEvent",
    "ToolExecUpdateEvent",
    "as_emitter",
    "call_unstreamed",
    "current_abort_signal",
    "current_stream",
    "emit_delta",
    "relay_deltas",
    "stream_to",
    "tee",
]

logger = logging.getLogger("yiemagent.events")
# Everything a sink raises is contained (docs/failures.md): SystemExit or any BaseException from a
# sink would otherwise end the run thread, and no response would ever come.
_SINK_ERRORS = (BaseException,)


def _now() -> Any:
    """``time_ns``: when an event happened (docs/tracing.md); out of ``==`` and ``repr``."""
    return field(default_factory=time.time_ns, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ToolExecStartEvent:
    """A tool call is about to be prepared (spec §13 ``toolExecStartEvent``).

    Thread safety: immutable; may be shared between threads.
    """

    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    time_ns: int = _now()


@dataclass(frozen=True, slots=True)
class ToolExecUpdateEvent:
    """A running tool reported a partial result (spec §13 ``toolExecUpdateEvent``).

    Thread safety: immutable; may be shared between threads.
    """

    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    partial_result: Any
    time_ns: int = _now()


@dataclass(frozen=True, slots=True)
class ToolExecEndEvent:
    """A tool call has its final result (spec §13 ``toolExecEndEvent``).

    Thread safety: immutable; may be shared between threads.
    """

    tool_call_id: str
    tool_name: str
    result: AgentToolResult
    is_error: bool
    time_ns: int = _now()


@dataclass(frozen=True, slots=True)
class AgentRunStartEvent:
    """A run of ``_process_message`` began (beyond the spec).

    ``run_id`` counts runs from 1 for this agent; ``new_messages`` is how many queued
    messages the run took into the history at its start.

    Thread safety: immutable; may be shared between threads.
    """

    run_id: int
    new_messages: int
    time_ns: int = _now()


@dataclass(frozen=True, slots=True)
class AgentRunEndEvent:
    """A run ended; ``response`` is what was put on the output channel (beyond the spec).

    ``usage`` is the sum over the run's LLM rounds (docs/api.md "Events"; decision 13); a
    round whose call failed adds nothing.

    Thread safety: immutable; may be shared between threads.
    """

    run_id: int
    response: AssistantMessage
    rounds: int
    duration_s: float
    usage: LLMUsage = field(default_factory=LLMUsage)
    time_ns: int = _now()


@dataclass(frozen=True, slots=True)
class LLMCallStartEvent:
    """An LLM round is starting (beyond the spec); ``round`` counts from 1 within the run.

    ``model`` and ``provider`` name what the round asks for, as far as the agent knows
    (``YiemAgent(model=LLMModel(...))``, else the ``model`` and ``provider`` attributes of
    ``llm_call``, which the clients have), or None. ``context`` is the ``AgentContext`` the
    request was formatted from (its ``messages`` are that round's own list), for a sink
    that records what was sent (docs/tracing.md); it is left out of ``==`` and ``repr``.

    Thread safety: immutable; may be shared between threads (the context must not be changed).
    """

    run_id: int
    round: int
    message_count: int
    model: Optional[str] = None
    provider: Optional[str] = None
    context: Optional[AgentContext] = field(default=None, compare=False, repr=False)
    time_ns: int = _now()


@dataclass(frozen=True, slots=True)
class LLMCallEndEvent:
    """An LLM round ended (beyond the spec).

    ``response`` is None when the call failed; ``error`` then says why and ``error_type``
    names the kind of failure in one word: the class name of what ``llm_call`` raised
    (``"LLMError"``, ``"TimeoutError"``…), ``"aborted"`` when the run was aborted during
    the call, ``"invalid_reply"`` when the reply could not be used (decision 15).

    Thread safety: immutable; may be shared between threads.
    """

    run_id: int
    round: int
    duration_s: float
    response: Optional[AssistantMessage]
    usage: Optional[LLMUsage]
    error: Optional[str]
    error_type: Optional[str] = None
    time_ns: int = _now()


@dataclass(frozen=True, slots=True)
class LLMDeltaEvent:
    """A fragment of a streamed LLM reply arrived (beyond the spec; docs/streaming.md).

    ``kind`` is ``"text"`` or ``"thinking"``. The deltas of one round come after its
    ``LLMCallStartEvent`` and before its ``LLMCallEndEvent``; joined, the deltas of a
    kind equal that kind's text in the round's final ``AssistantMessage``. Tool-call
    fragments are never sent as deltas.

    Thread safety: immutable; may be shared between threads.
    """

    run_id: int
    round: int
    kind: str
    text: str
    time_ns: int = _now()


@dataclass(frozen=True, slots=True)
class SubAgentEvent:
    """An event of a sub-agent's run, as the parent's sink sees it (beyond the spec; docs/api.md "Agents as tools").

    ``tool_call_id`` is the parent's call of the ``agent_tool`` whose sub-agent emitted
    ``event``; a sub-agent of a sub-agent nests one ``SubAgentEvent`` in another. They come
    between the call's ``ToolExecStartEvent`` and ``ToolExecEndEvent``, through the
    parent's emitter (decision 8: never two sink calls at once, also for sub-agents run in
    parallel).

    Thread safety: immutable; may be shared between threads.
    """

    tool_call_id: str
    event: Any


class EventEmitter:
    """Delivers events to a user's sink one at a time, containing its failures.

    Spec: §13 "Event Sink"; decision 8.

    Calling the emitter calls the sink under a lock, so events from tool threads in a
    parallel batch never overlap. A sink that raises — anything, ``SystemExit`` included —
    is logged (``yiemagent.events`` logger, with the traceback) and the event is dropped;
    the pipeline goes on. Only a ``KeyboardInterrupt`` in the main thread propagates.

    Beyond the spec, ``tap(fn)`` adds a listener of the library's own (a ``RunStream``,
    docs/streaming.md "Iterating over a run"): called after the sink under the same lock,
    so it sees every event in the sink's order, also when the sink raised. A tap must not
    raise nor block.

    Thread safety: callable from any thread; ``_lock`` serialises calls into the sink and
    the taps. A sink must not block for long: it holds up every thread that emits.
    ``_sink`` and ``_taps`` (a tuple) are replaced whole under ``_taps_lock`` (never waiting
    for a sink call), which also keeps ``_listened`` in step with them: read in one step.
    ``_taps_lock`` is an ``RLock``, so a signal handler may set the sink whatever the thread
    it interrupts was doing with the taps.
    """

    __slots__ = ("_sink", "_lock", "_taps", "_taps_lock", "_listened")

    def __init__(self, sink: Optional[Callable[[Any], Any]]) -> None:
        # held for the whole duration of one sink call: the sink is never re-entered
        self._lock = threading.RLock()
        self._taps: tuple[Callable[[Any], None], ...] = ()
        # guards replacing _sink and _taps, and _listened with them; an RLock: a signal handler that
        # sets the sink while this thread holds it (stopping a tap) nests instead of waiting for ever
        self._taps_lock = threading.RLock()
        self._sink = sink
        self._listened = sink is not None  # whether anyone listens: ``listened``

    @property
    def sink(self) -> Optional[Callable[[Any], Any]]:
        """The user's sink (spec §13), or None; set it to replace it."""
        return self._sink

    @sink.setter
    def sink(self, sink: Optional[Callable[[Any], Any]]) -> None:
        with self._taps_lock:
            self._sink = sink
            # from the fields, not from ``sink``, and with no call in between (where CPython runs a
            # pending signal handler): a handler that set the sink meanwhile, nested in the
            # ``RLock`` as this store frees the old sink, is what counts
            self._listened = self._sink is not None or self._taps != ()

    def __call__(self, event: Any) -> None:
        sink, taps = self._sink, self._taps
        if sink is None and not taps:
            return
        with self._lock:
            if sink is not None:
                try:
                    sink(event)
                except _SINK_ERRORS:
                    if _reraise_ctrl_c():
                        raise  # a real Ctrl-C in a script that drives the pipeline itself
                    logger.exception("event sink %r raised on %s; the event was dropped", sink, type(event).__name__)
            for tap in taps:
                tap(event)

    # Whether an event emitted now would reach anyone (a sink or a tap): else the caller need not
    # build it. A caller that skips an event when this is False changes nothing anyone sees: the
    # emitter would have dropped it (docs/performance.md "W1": tracing not in play costs nothing).
    # Kept as the sink and the taps change and read in C: the run reads it several times a round,
    # where a ``def`` property is a Python call each time (docs/performance.md "Frames a run no longer makes").
    if TYPE_CHECKING:  # what a type checker reads: a bool

        @property
        def listened(self) -> bool:
            """Whether an event emitted now would reach anyone (a sink or a tap)."""

    else:
        listened = property(operator.attrgetter("_listened"), doc="Whether an event emitted now would reach anyone (a sink or a tap).")

    def tap(self, fn: Callable[[Any], None]) -> Callable[[], None]:
        """Call ``fn(event)`` for every event from now on, after the sink; returns the function that stops it."""
        with self._taps_lock:
            self._taps = (*self._taps, fn)
            self._listened = True

        def untap() -> None:
            with self._taps_lock:
                self._taps = tuple(t for t in self._taps if t is not fn)
                self._listened = self._sink is not None or self._taps != ()  # as in the sink's setter

        return untap


def as_emitter(sink: Any) -> EventEmitter:
    """Wrap a sink in an ``EventEmitter``, or return it if it already is one."""
    return sink if isinstance(sink, EventEmitter) else EventEmitter(sink)


def _reraise_ctrl_c() -> bool:
    """True when the exception being handled is a real Ctrl-C in the main thread: it must stop the caller."""
    return threading.current_thread() is threading.main_thread() and sys.exc_info()[0] is KeyboardInterrupt


class _Tee:
    """The sink ``tee`` returns: calls each of ``sinks`` in turn, containing each one's failure.

    Thread safety: ``sinks`` is an immutable tuple; the sinks are called one after another
    in the calling thread (an agent's emitter never calls one sink from two threads at once).
    """

    __slots__ = ("sinks",)

    def __init__(self, sinks: tuple[Callable[[Any], Any], ...]) -> None:
        self.sinks = sinks

    def __call__(self, event: Any) -> None:
        for sink in self.sinks:
            try:
                sink(event)
            except _SINK_ERRORS:
                if _reraise_ctrl_c():
                    raise
                logger.exception("event sink %r raised on %s; the event was dropped for it, the other sinks still get it", sink, type(event).__name__)

    def __repr__(self) -> str:
        return f"tee({', '.join(map(repr, self.sinks))})"


def tee(*sinks: Optional[Callable[[Any], Any]]) -> Callable[[Any], None]:
    """One event sink that calls each of ``sinks`` in turn, in the order given (beyond the spec).

    For an agent watched by several sinks — the console printer and a tracer
    (``tee(ConsolePrinter(), OTelSink())``, docs/tracing.md). A sink that raises (anything,
    ``SystemExit`` included) is logged on the ``yiemagent.events`` logger with its
    traceback and the others still get the event; only a real Ctrl-C in the main thread
    propagates. ``None`` entries are skipped, so an optional sink can be passed as it is.

    Raises:
        TypeError: a sink is neither callable nor None.
    """
    for index, sink in enumerate(sinks):
        if sink is not None and not callable(sink):
            raise TypeError(f"tee() sink {index} is not callable: {type(sink).__name__}: {sink!r:.80}")
    return _Tee(tuple(s for s in sinks if s is not None))


# --- streaming: the side channel a streaming llm_call emits into (docs/streaming.md) ---

_stream_logger = logging.getLogger("yiemagent.stream")

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


# what the LLM call running in a context streams to: a ``StreamTarget`` (``stream_to``), or the
# agent's round (``relay_deltas``), which makes its target only when the call asks for it
_target: contextvars.ContextVar[Optional[StreamTarget | relay_deltas]] = contextvars.ContextVar("yiemagent_stream_target", default=None)


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
    target = _target.get()
    return target.stream_target() if isinstance(target, relay_deltas) else target


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


# --- the agent's side: one round's deltas become LLMDeltaEvents ----------------------


class DeltaRelay:
    """The ``on_delta(kind, text)`` of one LLM round: emits an ``LLMDeltaEvent`` per delta.

    ``StreamTarget.emit`` has already refused unknown kinds and skipped empty text. The
    sink is called outside the round's stream (as ``call_unstreamed`` would), in one copy
    of the context the round's first delta came in, made then and kept for the round's
    other deltas: a copy per delta cost as much as the rest of the relay.

    Thread safety: called from the thread running ``llm_call`` or any thread carrying its
    context; ``_lock`` guards ``_open`` and ``_quiet`` (a context is entered by one thread at
    a time), so a delta racing ``close()`` is either delivered before the close returns or
    dropped — never after the round's end event.
    """

    __slots__ = ("_emit", "_run_id", "_round", "_signal", "_lock", "_open", "_quiet")

    def __init__(self, emit: EventEmitter, run_id: int, round: int, signal: Optional[AbortSignal] = None) -> None:
        self._emit = emit
        self._run_id = run_id
        self._round = round
        self._signal = signal
        self._lock = threading.Lock()  # guards _open and _quiet
        self._open = True
        self._quiet: Optional[contextvars.Context] = None  # the context the sink is called in

    def __call__(self, kind: str, text: str) -> None:
        with self._lock:
            if not self._open:
                _stream_logger.debug("a %s delta of run %d round %d after llm_call returned was dropped", kind, self._run_id, self._round)
                return
            if self._signal is not None and self._signal.aborted:
                _stream_logger.debug("a %s delta of run %d round %d after the abort was dropped", kind, self._run_id, self._round)
                return
            # the sink runs outside the round's stream: a streaming LLM call it makes itself
            # would emit into this relay and wait for ever on _lock, which this thread holds
            quiet = self._quiet
            if quiet is None:
                quiet = self._quiet = contextvars.copy_context()
                quiet.run(_target.set, None)
            quiet.run(self._emit, LLMDeltaEvent(self._run_id, self._round, kind, text))

    def close(self) -> None:
        with self._lock:
            self._open = False


class relay_deltas:  # noqa: N801  used as a function: ``with relay_deltas(emit, run_id, round, signal):``
    """Around one ``llm_call``: its deltas reach ``emit`` until the block ends; the client sees ``signal``.

    ``stream_to`` of this round and closing its relay after, as a class rather than a
    generator: it is entered once per LLM round, and a round pays only for what its call
    asks for (docs/performance.md "W1", "The stream target"). The block sets the stream's
    context variable to this object and resets it at the end: nothing else is made for a
    call that never asks. ``current_stream()`` makes the round's ``StreamTarget`` the first
    time it is called (``stream_target``; its ``on_delta`` is this object);
    ``emit_delta`` and ``current_abort_signal()`` read this object as they would that target
    (``emit``, ``signal``). A target asked for late — mid-round, or after the end by a thread
    carrying a copy of the round's context — is still the round's: valid, and closed with
    the round (a delta after the end is dropped).

    A delta is dropped while nobody listens to ``emit`` (``EventEmitter.listened``); the
    first one somebody listens to makes the round's ``DeltaRelay``, which takes it and the
    rest of the round's deltas (a sink set or a stream tapped mid-round gets the rest of
    the round's deltas). A call that streams nothing, or streams to nobody, makes no relay.

    Thread safety: a delta may come from any thread carrying the call's context. The relay
    is made under ``_late_relays`` (one per round, whichever thread comes first); the
    block's end takes no lock: it sets ``_over`` and then reads ``_relay``, while the maker
    stores ``_relay`` and then reads ``_over`` again, so (attribute reads and writes being
    atomic and in program order) at least one of the two sees the other's write and closes
    the relay before a delta passes it: a delta never reaches the sink after the round has
    ended, and a round ends without taking a lock (docs/performance.md "W1"). Two threads
    asking for the target at once may each make one: equal (same ``on_delta`` and
    ``signal``), and either serves.
    """

    __slots__ = ("_emit", "_run_id", "_round", "signal", "_relay", "_over", "_stream", "_token")
    _token: contextvars.Token[Optional[StreamTarget | relay_deltas]]  # set by __enter__, which runs before __exit__ can

    def __init__(self, emit: EventEmitter, run_id: int, round: int, signal: Optional[AbortSignal] = None) -> None:
        self._emit = emit
        self._run_id = run_id
        self._round = round
        self.signal = signal  # what current_abort_signal() reads, as it reads a StreamTarget's
        self._relay: Optional[DeltaRelay] = None  # made by the first delta somebody listens to
        self._over = False  # the block has ended: no relay is made any more, one made meanwhile is closed
        self._stream: Optional[StreamTarget] = None  # made when the call first asks for it (current_stream)

    def __enter__(self) -> None:
        self._token = _target.set(self)

    def stream_target(self) -> StreamTarget:
        """The round's ``StreamTarget``, made the first time the call asks for it (``current_stream``)."""
        target = self._stream
        if target is None:
            target = self._stream = built(StreamTarget, on_delta=self, signal=self.signal)
        return target

    def emit(self, kind: str, text: str) -> None:
        """``emit_delta`` in this round: what the round's ``StreamTarget.emit`` does."""
        self.stream_target().emit(kind, text)

    def __call__(self, kind: str, text: str) -> None:
        """The round's ``on_delta``: dropped while nobody listens; the first delta somebody listens to makes the relay."""
        if not self._emit.listened:
            return
        relay = self._relay
        if relay is None:
            with _late_relays:
                relay = self._relay
                if relay is None:
                    if self._over:
                        _stream_logger.debug("a %s delta of run %d round %d after llm_call returned was dropped", kind, self._run_id, self._round)
                        return
                    relay = self._relay = DeltaRelay(self._emit, self._run_id, self._round, self.signal)
                    if self._over:  # read again after the store: the block ended meanwhile and may not have seen this relay
                        relay.close()  # so the delta is dropped, as after the end
        relay(kind, text)

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        try:
            _target.reset(self._token)
        finally:
            self._over = True  # first; then the relay, which a late delta may have made before this (see the class)
            relay = self._relay
            if relay is not None:
                relay.close()


_late_relays = threading.Lock()  # one relay per round: taken by the first delta somebody listens to, never by the round's end
