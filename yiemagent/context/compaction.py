"""Compaction: what a request carries once the history outgrows the context window (docs/sessions.md "Long conversations").

Spec: §14 ``prepareContext`` is where a round decides what it sends ("filter tools, inject
context"); shared/spec/API.md "Long conversations" names the parts. Compaction is a step
of the run (``run.py`` ``RunSteps.compact``), there only when the agent has a
``compaction``: after ``prepare_context``, before the request is formatted, and once more
after a ``ContextOverflowError``.

What is sent is cut at whole **units**: a user message, or an assistant message together
with every message up to the last result of its tool calls (approval steps and
compaction markers inside ride along, and are never sent). A cut therefore never parts a
call from its result. A **cut** is where what is sent begins: the start of a unit that is
a user message, so the first message after the system prompt is a user message.

- ``TrimHistory(keep_last_tokens)``: when a request's estimate passes the room (the window
  less the reply's room), the cut moves to the oldest user message after which the
  messages estimate at most ``keep_last_tokens`` (and fit). The cut stays there until the
  request outgrows the room again, so the prefix of what is sent stays the same from
  request to request (what a provider's prompt cache needs). Where the cut is follows from
  the history alone (as if checked before each unit), so an agent that loads the session
  sends the same messages.
- ``SummarizeHistory(keep_last_tokens, llm_call=None, instructions=None)``: the same cut,
  but the messages left out are summarised by the model (with the summary before them)
  and the summary is stored as a ``CompactionMessage(summary, through)`` in the history;
  requests then carry the summary (at the head of the first user message sent) and the
  messages from ``through`` on. The markers are in the history, so an agent that loads the
  session sends the same. The summary request itself is ``_summary.py``'s.

When even the newest turn is too long, the oldest units after its user message are left
out of that request (its user message, the unit holding the newest user message and the
last unit always stay); when that is not enough the run ends ``stop_reason "error"``
naming the overflow. The estimate is ``tokens.count_tokens``'s, per message, kept as
running sums on the compactor (incremental: a round estimates only the messages new since
the last; docs/performance.md "Compaction").

Thread safety: a ``Compactor`` belongs to one agent and is used by its run thread only
(one run at a time); the strategies are immutable values that may be shared.
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, Optional, Union

from .._format_cache import HistorySnapshot
from ..extraction import extract_tool_calls
from ..tokens import MESSAGE_OVERHEAD as MESSAGE_FRAME, count_tokens, estimate_text_tokens, message_tokens, reply_tokens
from ..types import AgentContext, AgentMessage, AssistantMessage, CompactionMessage, LLMModel, TextContent, ToolResultMessage, UserMessage
from ._summary import _CUT_MARK, DEFAULT_INSTRUCTIONS, SUMMARY_HEADER, _chunks, _cut_to, _line, _prefix_within, _summary_reply, _summary_room

__all__ = ["Compactor", "SummarizeHistory", "TrimHistory", "make_compactor", "OVERFLOW"]

logger = logging.getLogger("yiemagent.context")

OVERFLOW = "context overflow"
"""How the error of a run that nothing could make fit begins (docs/failures.md "The history outgrew the context")."""

_OVERFLOW_SHRINK = 0.75
"""After a ContextOverflowError the room is taken as this share of what it was (the estimate was short)."""

_LEAST_SHARE = 0.5
"""The least share of the room the overflows leave: the estimate is taken as at most twice short. A
message the server refuses whatever is cut (it alone overflows) would otherwise shrink the room
with each run until nothing fits."""


def _check_keep(value: Any, owner: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}(keep_last_tokens=...) expects an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{owner}(keep_last_tokens=...) must be at least 1, got {value}")
    return value


@dataclass(frozen=True)
class TrimHistory:
    """Leave the oldest turns out of what is sent, keeping about ``keep_last_tokens`` of the newest (docs/sessions.md "Long conversations").

    Thread safety: immutable; may be shared between agents.
    """

    keep_last_tokens: int

    def __post_init__(self) -> None:
        _check_keep(self.keep_last_tokens, "TrimHistory")


@dataclass(frozen=True)
class SummarizeHistory:
    """Have the model summarise the oldest turns; keep about ``keep_last_tokens`` of the newest as they are (docs/sessions.md "Long conversations").

    ``llm_call``: what summarises (the agent's ``llm_call`` when None); ``instructions``:
    the system prompt of the summary request (``DEFAULT_INSTRUCTIONS`` when None).

    Thread safety: immutable; may be shared between agents (its ``llm_call`` then is too).
    """

    keep_last_tokens: int
    _: KW_ONLY
    llm_call: Optional[Callable[[dict[str, Any]], Any]] = None
    instructions: Optional[str] = None

    def __post_init__(self) -> None:
        _check_keep(self.keep_last_tokens, "SummarizeHistory")
        if self.llm_call is not None and not callable(self.llm_call):
            raise TypeError(f"SummarizeHistory(llm_call=...) expects a callable or None, got {type(self.llm_call).__name__}")
        if self.instructions is not None and not isinstance(self.instructions, str):
            raise TypeError(f"SummarizeHistory(instructions=...) expects a str or None, got {type(self.instructions).__name__}")


Strategy = Union[TrimHistory, SummarizeHistory]


def make_compactor(compaction: Any, context_window: Any, model: Optional[LLMModel]) -> Optional["Compactor"]:
    """The agent's compactor for ``YiemAgent(context_window=..., compaction=...)``, or None when it has no compaction.

    The window is ``context_window``, else the ``context_window`` of the agent's ``model``.

    Raises:
        TypeError: ``compaction`` is not a strategy, or ``context_window`` not an int.
        ValueError: a window below 16 tokens, a compaction without a window, or a window without a compaction.
    """
    if context_window is not None and (isinstance(context_window, bool) or not isinstance(context_window, int)):
        raise TypeError(f"YiemAgent(context_window=...) expects an int or None, got {type(context_window).__name__}")
    if compaction is None:
        if context_window is not None:
            raise ValueError("YiemAgent(context_window=...) needs compaction=TrimHistory(...) or SummarizeHistory(...): what to send once the history outgrows it")
        return None
    if not isinstance(compaction, (TrimHistory, SummarizeHistory)):
        raise TypeError(f"YiemAgent(compaction=...) expects TrimHistory, SummarizeHistory or None, got {type(compaction).__name__}")
    window = context_window if context_window is not None else getattr(model, "context_window", None)
    if not isinstance(window, int) or isinstance(window, bool):
        raise ValueError("YiemAgent(compaction=...) needs a context window: context_window=..., or a model=LLMModel(...) that has one")
    if window < 16:
        raise ValueError(f"YiemAgent(context_window=...) must be at least 16 tokens, got {window}")
    return Compactor(compaction, window)


# --- what the compactor knows of a history, grown message by message ------------------


class _Track:
    """Running sums and unit starts of one message list, extended with each new message (incremental).

    ``sums[i]``: the estimated tokens of ``messages[:i]``; ``starts``: every unit's first
    index; ``user_starts``: those that are a user message (the possible cuts);
    ``last_user``: the newest user message's index (-1); ``compaction``: the newest
    ``CompactionMessage`` and its index; ``cut``: ``TrimHistory``'s cut, as checked before
    each unit. Run thread only.
    """

    __slots__ = ("key", "source", "edits", "items", "sums", "starts", "user_starts", "last_user", "open_calls", "compaction", "cut")

    def __init__(self, key: tuple[Any, ...], source: Any, edits: int) -> None:
        self.key, self.source, self.edits = key, source, edits
        self.items: list[Any] = []  # the messages seen, as references (to tell an edit of a plain list)
        self.sums = [0]
        self.starts: list[int] = []
        self.user_starts: list[int] = []
        self.last_user = -1
        self.open_calls: set[str] = set()  # calls of the current assistant unit still without a result
        self.compaction: Optional[tuple[int, CompactionMessage]] = None
        self.cut = 0


def _sent_tokens(message: AgentMessage) -> int:
    """A message's estimate; 0 for what is never sent (approval steps, compaction markers, unknown kinds)."""
    if isinstance(message, (UserMessage, AssistantMessage, ToolResultMessage)):
        return message_tokens(message)
    return 0


def _call_ids(message: AssistantMessage) -> set[str]:
    return {call.id for call in extract_tool_calls(message)[1]}


class Compactor:
    """One agent's compaction (``YiemAgent(compaction=...)``): decides what each request of a long conversation sends.

    Thread safety: the agent's run thread only (one run at a time); see the module docstring.
    """

    def __init__(self, strategy: Strategy, window: int) -> None:
        self.strategy = strategy
        self.window = window
        self.shrink = 1.0  # lowered after each ContextOverflowError (the estimate fell short of the server's count)
        self._track: Optional[_Track] = None
        self._fixed: tuple[Any, int] = ((), 0)  # (system prompt and tools, their estimate)
        self._merged: Optional[tuple[CompactionMessage, AgentMessage, int, UserMessage]] = None

    # --- the step ------------------------------------------------------------------

    def compact(self, host: Any, run: Any, ctx: AgentContext, overflowed: bool, max_requests: Optional[int] = None) -> Union[AgentContext, AssistantMessage]:
        """The context to send (``ctx`` itself when it fits), or the response that ends the run (nothing can fit).

        ``run``: the ``run.Run`` (its signal, usage and ``side_requests``); ``max_requests``:
        the run's cap (decision 20), which a summary request leaves room under for the round's own.

        ``overflowed``: the server refused the request ``ctx`` became as too long
        (``ContextOverflowError``): the room shrinks for this agent from now on (to half at
        least), and the request is made again with at most three quarters of the messages'
        estimate (the response that ends the run when none that small can be sent). May
        append a ``CompactionMessage`` (``host.append``).
        """
        if overflowed:
            self.shrink = max(_LEAST_SHARE, self.shrink * _OVERFLOW_SHRINK)
        messages = ctx.messages
        room = self._reply_room(host.llm_call)
        limit = int((self.window - room) * self.shrink)
        fixed = self._fixed_tokens(ctx)
        if overflowed:  # the messages sent again are fewer than those refused, whatever the room
            limit = min(limit, fixed + int(sum(map(_sent_tokens, messages)) * _OVERFLOW_SHRINK))
        keep = self.strategy.keep_last_tokens
        track = self._track_of(messages, (limit, fixed, keep))
        n = len(messages)
        summary: Optional[CompactionMessage] = None
        if isinstance(self.strategy, SummarizeHistory):
            cut, summary = self._summary_cut(track, messages)
            summary_tokens = self._summary_tokens(summary)
            if fixed + summary_tokens + track.sums[n] - track.sums[cut] > limit:
                new_cut = _cut_for(track, n, cut, min(keep, limit - fixed - _summary_room(limit)))
                if new_cut > cut:
                    made = self._summarise(host, run, messages, cut, new_cut, summary, limit, room, max_requests)
                    cut, summary = new_cut, made  # a failed summary: the messages before the cut are left out of this request
        else:
            _check_cut(track, n, limit - fixed, min(keep, limit - fixed))
            cut = track.cut
        if cut == 0 and summary is None and fixed + track.sums[n] <= limit:
            return ctx  # nothing to leave out: the request goes as prepared (the formatting cache's shortcut kept)
        chosen = self._fit(track, messages, cut, summary, limit - fixed)
        if chosen is None:
            least = self._least(track, messages, cut)
            why = (
                f"{OVERFLOW}: the request does not fit context_window={self.window}: the system prompt, the tools and "
                f"the newest messages that cannot be left out are about {fixed + least} tokens, and {limit} are left "
                f"for the input after {room} for the reply"
            )
            logger.warning("run ended: %s", why)
            return AssistantMessage([], stop_reason="error", error_message=why)
        if overflowed:
            logger.info("context overflow: the request is made again with %d of the %d messages", len(chosen), n)
        return AgentContext(ctx.system_prompt, chosen, ctx.tools)

    # --- the room --------------------------------------------------------------------

    def _reply_room(self, llm_call: Any) -> int:
        """The request's ``max_tokens`` (``tokens.reply_tokens``), else a quarter of the window (shared/spec/API.md "Long conversations")."""
        asked = reply_tokens(llm_call)
        return asked if asked is not None and asked < self.window else self.window // 4

    def _fixed_tokens(self, ctx: AgentContext) -> int:
        """The estimate of the system prompt, the tools and the request's framing (recomputed when they change)."""
        key = (ctx.system_prompt, tuple(map(id, ctx.tools.values())))
        if self._fixed[0] != key:
            self._fixed = (key, count_tokens([], system_prompt=ctx.system_prompt, tools=list(ctx.tools.values())))
        return self._fixed[1]

    # --- the running sums --------------------------------------------------------------

    def _track_of(self, messages: Sequence[AgentMessage], key: tuple[Any, ...]) -> _Track:
        """The track of ``messages``: the last one grown by the new messages when only messages were added since, else a new one."""
        track = self._track
        lineage = messages.lineage if isinstance(messages, HistorySnapshot) else None
        source, edits = (lineage.source, lineage.edits) if lineage is not None else (None, -1)
        grown = (
            track is not None
            and track.key == key
            and len(track.items) <= len(messages)
            and (
                (source is not None and track.source is source and track.edits == edits)
                or all(a is b for a, b in zip(track.items, messages, strict=False))  # a plain list: checked by identity (docs/performance.md "Compaction")
            )
        )
        if not grown:
            track = _Track(key, source, edits)
        assert track is not None
        track.source, track.edits = source, edits
        _grow(track, messages, self.strategy if isinstance(self.strategy, TrimHistory) else None)
        self._track = track
        return track

    # --- summaries --------------------------------------------------------------------

    def _summary_cut(self, track: _Track, messages: Sequence[AgentMessage]) -> tuple[int, Optional[CompactionMessage]]:
        """The cut and summary of the newest ``CompactionMessage``: the first user unit at or after its ``through``."""
        if track.compaction is None:
            return 0, None
        at, marker = track.compaction
        through = min(marker.through, at)  # a marker replaces only messages before it
        i = bisect_left(track.user_starts, through)
        if i == len(track.user_starts):
            return 0, None
        return track.user_starts[i], marker

    def _summary_tokens(self, summary: Optional[CompactionMessage]) -> int:
        return 0 if summary is None else MESSAGE_FRAME + estimate_text_tokens(SUMMARY_HEADER) + estimate_text_tokens(summary.summary)

    def _summarise(
        self, host: Any, run: Any, messages: Sequence[AgentMessage], cut: int, new_cut: int,
        before: Optional[CompactionMessage], limit: int, room: int, max_requests: Optional[int],
    ) -> Optional[CompactionMessage]:
        """Summarise ``messages[cut:new_cut]`` (after the summary ``before``), store the marker, and return it; None when the model failed."""
        strategy = self.strategy
        assert isinstance(strategy, SummarizeHistory)
        llm_call = strategy.llm_call or host.llm_call
        words = max(30, _summary_room(limit) * 3 // 4)
        instructions = strategy.instructions if strategy.instructions is not None else f"{DEFAULT_INSTRUCTIONS} Write at most {words} words."
        budget = max(64, limit - estimate_text_tokens(instructions) - 16)
        lines = [_line(m, budget // 2) for m in messages[cut:new_cut]]
        summary = before.summary if before is not None else ""
        summary_room = _summary_room(limit)  # the summary so far is cut to it: a model may answer one far longer than asked
        for chunk in _chunks([line for line in lines if line], max(32, budget - summary_room - 16)):  # room for the summary each chunk gives
            so_far = f"The summary so far:\n{_cut_to(summary, summary_room)}\n\n" if summary else ""
            request = {"messages": [{"role": "system", "content": instructions}, {"role": "user", "content": f"{so_far}The conversation:\n{chunk}"}]}
            text, why = _summary_reply(llm_call, request, run, max_requests)
            if text is None:
                logger.warning("the summary could not be made (%s): the oldest messages are left out of this request instead", why)
                return None
            summary = text
        marker = CompactionMessage(summary, new_cut)
        host.append(marker)
        logger.info("summarised %d message(s) into %d tokens", new_cut - cut, estimate_text_tokens(summary))
        return marker

    def _with_summary(self, first: AgentMessage, summary: CompactionMessage, chars: int) -> UserMessage:
        """``first`` (a user message) with the summary at the head of its first text (a message of one text stays one), the summary cut to ``chars``; the same object while nothing changed."""
        merged = self._merged
        if merged is not None and merged[0] is summary and merged[1] is first and merged[2] == chars:
            return merged[3]
        text = summary.summary if chars >= len(summary.summary) else summary.summary[:chars] + _CUT_MARK
        content = list(first.content) if isinstance(first, UserMessage) else []
        head = f"{SUMMARY_HEADER}\n{text}"
        if content and isinstance(content[0], TextContent) and not content[0].citations:  # one text: servers whose template takes only a str
            content[0] = TextContent(f"{head}\n\n{content[0].text}")
        else:
            content.insert(0, TextContent(head))
        message = UserMessage(content, timestamp=first.timestamp)
        self._merged = (summary, first, chars, message)
        return message

    # --- what is sent -----------------------------------------------------------------

    def _fit(
        self, track: _Track, messages: Sequence[AgentMessage], cut: int, summary: Optional[CompactionMessage], room: int
    ) -> Optional[list[AgentMessage]]:
        """The messages to send from ``cut`` (with the summary), leaving out the fewest units of the newest turn; None when nothing fits."""
        n = len(messages)
        if track.sums[n] - track.sums[cut] + self._summary_tokens(summary) <= room:  # all from the cut: no unit to look at
            chosen: list[AgentMessage] = list(messages[cut:n])
            if summary is not None and chosen:
                chosen[0] = self._with_summary(chosen[0], summary, len(summary.summary))
            return chosen
        i = bisect_right(track.user_starts, max(track.last_user, cut)) - 1  # from the newest turn that can come first
        cut = max(cut, track.user_starts[i]) if i >= 0 else cut
        units = _units_from(track, cut, n)
        if not units:
            return list(messages[cut:])
        keep = _required(track, units)
        dropped: set[int] = set()
        total = track.sums[n] - track.sums[cut]
        with_summary = self._summary_tokens(summary)
        for position in range(len(units)):
            if total + with_summary <= room:
                break
            if position in keep:
                continue
            start, end = units[position]
            dropped.add(position)
            total -= track.sums[end] - track.sums[start]
        chars = len(summary.summary) if summary is not None else 0
        if summary is not None and total + with_summary > room:  # the summary is cut (or left out) before a needed message is
            frame = MESSAGE_FRAME + estimate_text_tokens(SUMMARY_HEADER) + estimate_text_tokens(_CUT_MARK)
            chars = _prefix_within(summary.summary, room - total - frame)
            with_summary = frame + estimate_text_tokens(summary.summary[:chars]) if chars else 0
            if total + with_summary > room:
                chars, with_summary = 0, 0
            summary = summary if chars else None
        if total + with_summary > room:
            return None
        chosen = []
        for position, (start, end) in enumerate(units):
            if position not in dropped:
                chosen.extend(messages[start:end])
        if summary is not None:
            first = chosen[0]
            merged = self._with_summary(first, summary, chars)
            chosen[0] = merged
        return chosen

    def _least(self, track: _Track, messages: Sequence[AgentMessage], cut: int) -> int:
        """The estimate of the units that cannot be left out (for the error that names the overflow)."""
        i = bisect_right(track.user_starts, max(track.last_user, cut)) - 1
        cut = max(cut, track.user_starts[i]) if i >= 0 else cut
        units = _units_from(track, cut, len(messages))
        return sum(track.sums[units[p][1]] - track.sums[units[p][0]] for p in _required(track, units)) if units else 0


def _grow(track: _Track, messages: Sequence[AgentMessage], trim: Optional[TrimHistory]) -> None:
    """Extend ``track`` with the messages after those it has seen (and move ``TrimHistory``'s cut as it would have moved)."""
    start = len(track.items)
    if start == len(messages):
        return
    limit, fixed, keep = track.key
    new = messages[start:]
    track.items.extend(new)
    sums = track.sums
    total = sums[-1]
    for index, message in enumerate(new, start):
        opens = not track.open_calls
        if isinstance(message, UserMessage):
            track.last_user = index
        elif isinstance(message, ToolResultMessage):
            opens = opens and not isinstance(message.tool_call_id, str)  # a result whose call is open belongs to its unit
            track.open_calls.discard(message.tool_call_id)
        elif not isinstance(message, AssistantMessage):  # approval steps, markers: never sent, part of the unit they are in
            opens = False
            if isinstance(message, CompactionMessage):
                track.compaction = (index, message)
        if isinstance(message, AssistantMessage):
            calls = _call_ids(message)
            track.open_calls |= calls
        if opens:
            if trim is not None:  # TrimHistory: the request that would have ended here
                _check_cut(track, index, limit - fixed, min(keep, limit - fixed))
            track.starts.append(index)
            if isinstance(message, UserMessage):
                track.user_starts.append(index)
        total += _sent_tokens(message)
        sums.append(total)


def _check_cut(track: _Track, end: int, room: int, target: int) -> None:
    """``TrimHistory``: move the cut when ``messages[cut:end]`` passes ``room``, to keep at most ``target`` (at least the newest user unit)."""
    if track.sums[end] - track.sums[track.cut] > room:
        track.cut = _cut_for(track, end, track.cut, target)


def _cut_for(track: _Track, end: int, cut: int, target: int) -> int:
    """The oldest user unit in ``[cut, end)`` after which ``messages[:end]`` estimates at most ``target``; else the newest such unit."""
    starts = track.user_starts
    lo, hi = bisect_left(starts, cut), bisect_left(starts, end)
    if lo >= hi:
        return cut
    wanted = track.sums[end] - target
    i = bisect_left(track.sums, wanted, 0, end + 1)  # the first index whose prefix sum is at least ``wanted``
    j = bisect_left(starts, i, lo, hi)
    return starts[j] if j < hi else starts[hi - 1]


def _units_from(track: _Track, cut: int, n: int) -> list[tuple[int, int]]:
    """The units of ``messages[cut:n]`` as ``(start, end)``, from the unit starts recorded."""
    starts = track.starts
    first = bisect_left(starts, cut)
    bounds = starts[first:]
    if not bounds or bounds[0] != cut:
        bounds = [cut, *bounds]
    return [(b, bounds[i + 1] if i + 1 < len(bounds) else n) for i, b in enumerate(bounds) if b < n]


def _required(track: _Track, units: list[tuple[int, int]]) -> set[int]:
    """The units never left out: the first (a user message), the one holding the newest user message, the last."""
    required = {0, len(units) - 1}
    if track.last_user >= units[0][0]:
        required.add(bisect_right([u[0] for u in units], track.last_user) - 1)
    return required


# --- the transcript a summary is made from --------------------------------------------
