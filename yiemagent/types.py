"""The records of the lifecycle, in the order of spec §19 "Appendix: Type Reference" (the seed's type.jl).

1. Message Types (§19): content blocks, the four messages, the usage sums of decision 13.
   Every message is a frozen dataclass serialisable with dataclasses-json: ``to_json()``,
   ``from_json()``, ``to_dict()``, ``from_dict()``. A content list may hold content objects
   (``TextContent``, ``ImageContent``) and, in an ``AssistantMessage``, the raw tool-call
   blocks of spec §7 (plain dicts with string keys); all of them survive a JSON round trip.
   Messages are values: once appended to a conversation they are never changed, which is
   what lets ``prepare_context`` share them instead of deep-copying the history (spec §14,
   see docs/conformance.md). Their content lists are read-only by convention.
2. Tool Types: §3 (agentTool, agentToolResult), §7 (agentToolCall), §10 (agentToolCallBatch).
3. Context & Config Types: the abort signal, §14 (beforeToolCallContext,
   afterToolCallContext), agentContext, agentState, agentLoopConfig; beyond the spec, beside
   the hooks' contexts, ``RunContext``: what a tool call sees of its run (``current_run_context()``).
4. Lifecycle Outcome Types: §8 (preparedToolCall, immediateOutcome, executedOutcome,
   finalizedOutcome).

Thread safety: messages and the frozen records are immutable and may be shared between
threads freely; the mutable ones (``AbortSignal``, ``AgentState``) say who owns them.
"""

from __future__ import annotations

import base64
import binascii
import contextvars
import copy
import enum
import logging
import numbers
import operator
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import date, datetime, time, timedelta, timezone
from typing import TYPE_CHECKING, Any, Optional, TypeGuard, TypeVar, Union

from dataclasses_json import DataClassJsonMixin, config

from ._format_cache import FrozenDict, FrozenList, History, freeze
from .errors import RunFailedError, ToolDefinitionError

__all__ = [
    "AbortSignal",
    "AfterToolCallContext",
    "AgentContext",
    "AgentLoopConfig",
    "AgentMessage",
    "AgentState",
    "AgentTool",
    "AgentToolCall",
    "AgentToolCallBatch",
    "AgentToolResult",
    "ApprovalMessage",
    "AssistantMessage",
    "BeforeToolCallContext",
    "Citation",
    "CompactionMessage",
    "ExecutedOutcome",
    "FAILED_RUN_STOP_REASONS",
    "FinalizedOutcome",
    "ImageContent",
    "ImmediateOutcome",
    "LLMModel",
    "LLMUsage",
    "MessageContent",
    "PendingApproval",
    "PreparedToolCall",
    "RunContext",
    "TextContent",
    "ToolResultMessage",
    "UsageLimits",
    "UsageMeter",
    "UserMessage",
    "add_usage",
    "call_context",
    "content_from_dict",
    "current_run_context",
    "message_from_dict",
    "run_context",
    "enter_run_context",
    "run_context_later",
    "enter_call_context",
    "leave_run_context",
    "text_of",
    "utc_now",
]


# --- 1. Message Types (spec §19) ----------------------------------------------------


_T = TypeVar("_T")
_new = object.__new__


def built(cls: type[_T], **fields: Any) -> _T:
    """An instance of the frozen dataclass ``cls`` as its own ``__init__`` leaves it, each field given, set in one step.

    For the objects a round or a session read makes by the thousand (a stored message, a
    tool call, a tool result: docs/performance.md): ``__init__`` sets a frozen dataclass's
    fields one ``object.__setattr__`` at a time, which was a third of the building. The
    caller gives every field ``__init__`` would set, in the class's order, already checked;
    no ``__post_init__`` runs. The price: the instance keeps its fields in a dict of its own
    (about 180 bytes more than ``__init__``'s).
    """
    made = _new(cls)
    made.__dict__.update(fields)
    return made


def utc_now() -> datetime:
    """The timestamp every message and result carries: timezone-aware UTC.

    A ``def`` that reads this module's ``datetime`` at each call, not a callable bound to
    ``datetime.now`` at import: a test that freezes time (freezegun, a patched
    ``yiemagent.types.datetime``) replaces that name, and its timestamps follow
    (docs/performance.md "Frames a run no longer makes").
    """
    return datetime.now(timezone.utc)


def _encode_timestamp(value: datetime) -> str:
    return value.isoformat()


def _decode_timestamp(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


_TIMESTAMP = config(encoder=_encode_timestamp, decoder=_decode_timestamp)


class MessageContent(DataClassJsonMixin):
    """Abstract base of content blocks (spec §19 ``messageContent``)."""

    __slots__ = ()


@dataclass(frozen=True)
class TextContent(MessageContent):
    """Plain text (spec §19 ``textContent``), with the citations the provider sent beside it.

    ``citations`` (beyond the spec, shared/spec/API.md "Today's models, turn after turn": "Text
    with citations stays TextContent, the citations ride beside it") is None for text
    without any; else the provider's citation objects as it sent them, one ``TextContent``
    per text block it sent (docs/streaming.md "Server tools"): Anthropic's
    ``web_search_result_location``, ``char_location``... with ``cited_text``, ``url``,
    ``title`` and the ``encrypted_index`` it requires back. A list, even empty, marks the
    block as a segment of a text the provider split where a citation starts or ends: a
    segment directly after another is read as the same text (``text_of``), so the text
    reads as the model wrote it. The JSON form carries the key only when it is not None.

    Thread safety: immutable; may be shared between threads (``citations`` is read-only
    by convention, as content lists are).
    """

    text: str
    citations: Optional[list[Any]] = field(default=None, hash=False, metadata=config(exclude=lambda value: value is None))
    type: str = field(default="text", init=False)

    def __repr__(self) -> str:
        cited = "" if self.citations is None else f", citations={self.citations!r}"
        return f"TextContent(text={self.text!r}{cited}, type={self.type!r})"  # the form it had before citations, for text without any

    @property
    def is_segment(self) -> bool:
        """Whether this block is a segment of a text the provider split at its citations (``citations`` is a list)."""
        return isinstance(self.citations, list)


@dataclass(frozen=True)
class ImageContent(MessageContent):
    """An image as base64 ``data`` with its ``mime_type`` (spec §19 ``imageContent``).

    Thread safety: immutable; may be shared between threads.
    """

    data: str
    mime_type: str
    type: str = field(default="image", init=False)


_MEDIA_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]*/[A-Za-z0-9][A-Za-z0-9.+_-]*")


def is_base64(data: Any) -> TypeGuard[str]:
    """Whether ``data`` is a str of strict base64 (RFC 4648 alphabet and padding, no whitespace): an ``ImageContent``'s data that can be sent (docs/api.md "Images")."""
    if not isinstance(data, str) or not data.isascii():
        return False
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def is_media_type(text: Any) -> TypeGuard[str]:
    """Whether ``text`` is a bare ``type/subtype`` (RFC 6838 names, no parameters): an ``ImageContent``'s mime_type that can stand in a ``data:`` URL."""
    return isinstance(text, str) and _MEDIA_TYPE.fullmatch(text) is not None


def data_url(mime_type: str, data: str) -> str:
    """The ``data:`` URL of a base64 image, as OpenAI's ``image_url`` part takes it."""
    return f"data:{mime_type};base64,{data}"


def split_data_url(url: Any) -> Optional[tuple[str, str]]:
    """``(mime_type, data)`` of a base64 ``data:`` URL; None for any other URL."""
    if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url:
        return None
    mime_type, data = url[5:].split(";base64,", 1)
    return mime_type, data


def content_from_dict(block: Any) -> Any:
    """Rebuild one content block from its JSON form.

    ``{"type": "text"}`` (with ``citations``: a list of objects, or null) and
    ``{"type": "image"}`` become content objects; any other dict (a raw tool-call block of
    spec §7, a provider's "thinking" block, a text that carries other keys or citations
    that are not objects) stays a dict, exactly as it was.
    """
    if isinstance(block, dict):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str) and block.keys() <= {"type", "text", "citations"}:
            citations = block.get("citations")
            if citations is None or (isinstance(citations, list) and all(isinstance(c, dict) for c in citations)):
                return TextContent(block["text"], citations)
        if kind == "image" and "data" in block and "mime_type" in block:
            return ImageContent(block["data"], block["mime_type"])
    return block


def _encode_content(blocks: list[Any]) -> list[Any]:
    return [b.to_dict() if isinstance(b, MessageContent) else b for b in blocks]


def _decode_content(blocks: list[Any]) -> list[Any]:
    return [content_from_dict(b) for b in blocks]


# The annotation must not be the bare ``list``: dataclasses-json skips a field's decoder
# when ``type(value) is annotation``, and then text blocks would come back as dicts.
_CONTENT = config(encoder=_encode_content, decoder=_decode_content)


def text_of(blocks: list[Any]) -> str:
    """The text of a content list: its text blocks joined by newlines.

    Dict blocks that carry a string ``"text"`` count too (spec §10 builds the final
    response the same way). A segment directly after a segment (``TextContent.is_segment``:
    one text the provider split at its citations) is joined as it is.
    """
    return join_text(blocks, lambda block: block["text"] if isinstance(block, dict) and isinstance(block.get("text"), str) else None)


def join_text(blocks: list[Any], text: Callable[[Any], Optional[str]]) -> str:
    """The texts of ``blocks`` joined by newlines: ``TextContent``'s, and ``text(block)`` of any other (None: not a text).

    A segment directly after a segment (``TextContent.is_segment``, a text the provider
    split where a citation starts or ends) continues it, joined as it is, so the text
    reads as the model wrote it (docs/streaming.md "Server tools").
    """
    parts: list[list[str]] = []
    previous: Any = None
    for block in blocks:
        piece = block.text if isinstance(block, TextContent) else text(block)
        if piece is not None:
            if parts and isinstance(block, TextContent) and block.is_segment and isinstance(previous, TextContent) and previous.is_segment:
                parts[-1].append(piece)
            else:
                parts.append([piece])
        previous = block
    return "\n".join("".join(part) for part in parts)


@dataclass(frozen=True)
class LLMUsage(DataClassJsonMixin):
    """Token counts of one LLM call, or of a tool that called an LLM (spec §19 ``llmUsage``).

    Decision 13 fixes what the counts mean, whatever the provider: ``input_tokens``
    counts every prompt token, cached ones included (``cache_read_tokens`` and
    ``cache_write_tokens`` are parts of it); ``output_tokens`` counts every generated
    token, reasoning included (``reasoning_tokens`` is part of it);
    ``total_tokens == input_tokens + output_tokens``. A usage built without its total (0 or
    None: a custom client that set only the input and output counts, a history stored so)
    gets ``input_tokens + output_tokens`` as its total here, so that sums and
    ``UsageLimits(max_total_tokens=)`` see those tokens; a total that is given stays.

    Thread safety: immutable; may be shared between threads.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int = 0

    def __post_init__(self) -> None:
        if not _count(self.total_tokens):  # decision 13: the total is the input and output counts' sum
            object.__setattr__(self, "total_tokens", _count(self.input_tokens) + _count(self.output_tokens))


# --- usage sums (decision 13) ------------------------------------------------------
# ``LLMCallEndEvent.usage`` is one round's; ``AgentRunEndEvent.usage`` the sum over the run's
# rounds; ``agent.usage`` the sum over all of the agent's runs. Summing is field by field, every
# field: under decision 13 each count is a count of tokens of one kind, so the counts of several
# rounds add up and ``total_tokens == input_tokens + output_tokens`` holds for the sum whenever it
# holds for each round. Only LLM rounds count: a tool's own ``usage`` stays on its result.

_USAGE_FIELDS = tuple(f.name for f in fields(LLMUsage))


_fields_of = operator.attrgetter(*_USAGE_FIELDS)  # an LLMUsage's counts as a tuple, in the fields' order


def add_usage(total: LLMUsage, more: Optional[LLMUsage]) -> LLMUsage:
    """``total`` plus ``more``, field by field; ``more=None`` (a round that reported none) adds nothing.

    A part without a total counts ``input + output`` for it (decision 13, ``_counts``). A
    count that is not an int (a client that put None or a float there) counts as 0
    when it is None and is truncated to int otherwise, so a careless client cannot make
    the sum raise.

    Two ``LLMUsage`` whose counts are all ints (what every client in this package makes)
    are summed at once, without ``_counts``' dicts, the sum made without its ``__init__``
    (docs/performance.md "Usage sums"): what ``_summed`` gives them, which every other
    pair takes.
    """
    if more is None:
        return total
    if type(total) is LLMUsage and type(more) is LLMUsage:
        a, b = _fields_of(total), _fields_of(more)
        if set(map(type, a + b)) == _INTS_ONLY:
            inputs, outputs, read, written, _, reasoning = map(operator.add, a, b)
            summed_total = (a[4] or a[0] + a[1]) + (b[4] or b[0] + b[1])  # each part's total as _counts reads it
            return built(
                LLMUsage, input_tokens=inputs, output_tokens=outputs, cache_read_tokens=read, cache_write_tokens=written,
                total_tokens=summed_total or inputs + outputs, reasoning_tokens=reasoning,  # as __post_init__ leaves the sum
            )
    return _summed(total, more)


_INTS_ONLY = {int}


def _summed(total: object, more: object) -> LLMUsage:
    """``add_usage`` of any two usages, each count read by ``_counts``."""
    base, added = _counts(total), _counts(more)
    return LLMUsage(**{name: base[name] + added[name] for name in _USAGE_FIELDS})


def _counts(usage: object) -> dict[str, int]:
    """Each count of ``usage`` as an int, its total ``input + output`` when it has none (decision 13).

    An ``LLMUsage`` has its total already (``__post_init__``); another object with the same
    counts (a client's own usage type) may not.
    """
    counts = {name: _count(getattr(usage, name, 0)) for name in _USAGE_FIELDS}
    if not counts["total_tokens"]:
        counts["total_tokens"] = counts["input_tokens"] + counts["output_tokens"]
    return counts


def _count(value: Any) -> int:
    if isinstance(value, bool) or value is None:
        return 0
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return 0


NO_USAGE = LLMUsage()
"""The usage of nothing: where a run's and an agent's sums start (one object, immutable, shared)."""


class UsageMeter:
    """A running sum of ``LLMUsage`` that several threads may add to (``agent.usage``).

    Thread safety: ``add`` and ``total`` may be called from any thread; ``_lock`` guards
    ``_total`` (the read-modify-write of ``add`` must not interleave).
    """

    __slots__ = ("_lock", "_total")

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _total
        self._total = NO_USAGE

    def add(self, usage: Optional[LLMUsage]) -> None:
        with self._lock:
            self._total = add_usage(self._total, usage)

    @property
    def total(self) -> LLMUsage:
        with self._lock:
            return self._total


@dataclass(frozen=True)
class UsageLimits:
    """Caps on what one run may spend (beyond the spec; docs/api.md "Limits that are caps", decision 20).

    Each limit is None (no limit) or an int of at least 0. A limit is a cap, not a
    report: nothing beyond it is run or sent (``limits.py``). ``max_tool_calls``: no call
    past it runs; such calls are answered with an error result naming the limit and the
    run ends after that batch. ``max_requests``: no LLM request past it is sent.
    ``max_input_tokens`` and ``max_total_tokens``: a request whose estimated input
    (``count_tokens``) would pass them is not sent; and a run whose summed usage passes a
    token limit (a reply's tokens are known only once it came) ends after that round.
    Every way, every tool call is answered, ``stop_reason == "usage_limit"`` and the
    ``error_message`` names the limit and the count. They stand beside ``max_rounds``
    (decision 12), which still applies. Like ``max_rounds``, the limits are per run:
    ``continue_agent`` starts a run with a fresh allowance.

    Raises:
        TypeError: a limit that is not an int (a bool is refused too).
        ValueError: a negative limit.

    Thread safety: immutable; may be shared between threads.
    """

    max_input_tokens: Optional[int] = None
    max_output_tokens: Optional[int] = None
    max_total_tokens: Optional[int] = None
    max_tool_calls: Optional[int] = None
    max_requests: Optional[int] = None

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"UsageLimits({item.name}=...) must be an int or None, got {type(value).__name__}")
            if value < 0:
                raise ValueError(f"UsageLimits({item.name}=...) must be at least 0 (or None for no limit), got {value}")

    def passed(self, usage: LLMUsage, tool_calls: int) -> Optional[str]:
        """The first limit ``usage`` and ``tool_calls`` go above, said with its count ("max_total_tokens=100 (used 130)"); None if none."""
        counts = (
            ("max_input_tokens", usage.input_tokens, "input tokens"),
            ("max_output_tokens", usage.output_tokens, "output tokens"),
            ("max_total_tokens", usage.total_tokens, "tokens in all"),
            ("max_tool_calls", tool_calls, "tool calls"),
        )
        for name, count, what in counts:
            limit = getattr(self, name)
            if limit is not None and count > limit:
                return f"{name}={limit} ({count} {what} used)"
        return None



@dataclass(frozen=True)
class LLMModel(DataClassJsonMixin):
    """Which model a client talks to (spec §19 ``llmModel``, "LLM model config").

    Thread safety: immutable; may be shared between threads.
    """

    name: str
    provider: str = ""
    api: str = ""
    base_url: str = ""
    context_window: Optional[int] = None
    max_tokens: Optional[int] = None


class AgentMessage(DataClassJsonMixin):
    """Abstract base of conversation messages (spec §19 ``agentMessage``)."""

    __slots__ = ()
    # what every message has (each subclass's dataclass fields; declared here for type checkers only)
    role: str
    timestamp: datetime


@dataclass(frozen=True)
class UserMessage(AgentMessage):
    """What the user said (spec §19 ``userMessage``).

    Thread safety: immutable; may be shared between threads. Content lists are read-only by convention.
    """

    content: list[Any] = field(metadata=_CONTENT)
    timestamp: datetime = field(default_factory=utc_now, metadata=_TIMESTAMP)
    role: str = field(default="user", init=False)


@dataclass(frozen=True)
class Citation:
    """One source a reply cites (shared/spec/API.md "Today's models, turn after turn"; docs/api.md "Citations").

    ``url`` and ``title`` name the source (None where the provider gives none: an
    Anthropic document has a title and no URL); ``cited_text`` is the text quoted from the
    source (Anthropic's ``cited_text``; None for OpenAI's ``url_citation``, which quotes
    nothing); ``start``/``end`` are offsets in ``AssistantMessage.text`` of the words that
    cite it: OpenAI's ``start_index``/``end_index`` (kept within the text), and for
    Anthropic the span of the cited text block.

    Thread safety: immutable; may be shared between threads.
    """

    url: Optional[str]
    title: Optional[str]
    cited_text: Optional[str]
    start: int
    end: int


def _str_or_none(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


def _offset(value: Any, length: int) -> int:
    """An offset a provider sent, as an int within ``0..length`` (0 for what is not an int)."""
    return min(max(value, 0), length) if isinstance(value, int) and not isinstance(value, bool) else 0


def citation_of(raw: Any, start: int, text: str) -> Optional[Citation]:
    """The ``Citation`` of one citation object a provider sent beside ``text`` (a text block that starts at ``start`` in the reply's text); None for what is not one.

    OpenAI's ``{"type": "url_citation", "url_citation": {url, title, start_index,
    end_index}}`` (chat completions; the Responses API has the fields flat) cites the
    words between its indices in that text; any other object is Anthropic's (``url`` or a
    search result's ``source``; ``title`` or ``document_title``; ``cited_text``), citing
    the whole block.
    """
    if not isinstance(raw, dict):
        return None
    if raw.get("type") == "url_citation":
        nested = raw.get("url_citation")
        inner: dict[Any, Any] = nested if isinstance(nested, dict) else raw
        begin = _offset(inner.get("start_index"), len(text))
        end = max(_offset(inner.get("end_index", len(text)), len(text)), begin)
        return Citation(_str_or_none(inner.get("url")), _str_or_none(inner.get("title")), None, start + begin, start + end)
    url = _str_or_none(raw.get("url")) or _str_or_none(raw.get("source"))
    title = _str_or_none(raw.get("title")) or _str_or_none(raw.get("document_title"))
    return Citation(url, title, _str_or_none(raw.get("cited_text")), start, start + len(text))


# The stop reasons of a run that did not do what it was asked (docs/api.md "A run that fails
# says so"): ``ask`` and ``stream`` raise ``RunFailedError`` for them, the OTel sink marks the
# run's span ERROR (docs/tracing.md "Status"). "awaiting_approval" is not one: the run waits
# for a person (decision 18); nor "content_filter" or "length", which carry an answer.
FAILED_RUN_STOP_REASONS = frozenset({"error", "max_rounds", "usage_limit", "output_invalid", "refusal", "aborted"})


@dataclass(frozen=True)
class AssistantMessage(AgentMessage):
    """One reply of the LLM (spec §19 ``assistantMessage``).

    ``content`` holds ``TextContent`` blocks (with the citations the provider sent beside
    each), the raw tool-call blocks of spec §7, and the provider's blocks kept as they came
    (thinking; Anthropic's server-tool blocks, docs/streaming.md "Server tools").
    ``stop_reason`` is one of "stop", "length", "tool_use", "content_filter", "error",
    "aborted", "pause_turn" (the server paused its own tool loop: the run sends the turn
    again), "refusal" (the model refused: its words in ``refusal``, a
    ``{"type": "refusal", "refusal": ...}`` block) or "tool_use_terminated" (the agent's
    own final response, spec §10).

    Thread safety: immutable; may be shared between threads. Content lists are read-only by convention.
    """

    content: list[Any] = field(metadata=_CONTENT)
    api: Optional[str] = None
    provider: Optional[str] = None
    model: Optional[str] = None
    usage: Optional[LLMUsage] = None
    stop_reason: Optional[str] = None
    error_message: Optional[str] = None
    timestamp: datetime = field(default_factory=utc_now, metadata=_TIMESTAMP)
    role: str = field(default="assistant", init=False)
    output: Any = None  # beyond the spec: the typed answer (docs/api.md "Typed answers"); None without output_type

    @property
    def text(self) -> str:
        """The reply's text blocks joined (beyond the spec, docs/api.md "Reading a reply"); "" when there are none.

        Safe on any reply, also a failed one whose content is empty (where ``content[0].text``
        raises ``IndexError``). Text blocks are ``TextContent`` (a text split at its citations
        reads whole) and plain ``{"type": "text"}`` dicts; tool calls and thinking are left out.
        """
        parts: list[str] = []
        for block in self.content if isinstance(self.content, (list, tuple)) else []:
            if isinstance(block, TextContent) and isinstance(block.text, str):
                parts.append(block.text)
            elif isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "".join(parts)

    @property
    def refusal(self) -> Optional[str]:
        """The model's refusal (shared/spec/API.md "Today's models, turn after turn"): its ``refusal`` blocks' words joined; None when it did not refuse.

        A reply that refuses has ``stop_reason`` "refusal" (docs/streaming.md "Refusals").
        """
        words = [b["refusal"] for b in self.content if isinstance(b, dict) and b.get("type") == "refusal" and isinstance(b.get("refusal"), str)] if isinstance(self.content, (list, tuple)) else []
        return "".join(words) if words else None

    @property
    def citations(self) -> list[Citation]:
        """The sources the reply cites, in the order of its text (shared/spec/API.md "Today's models, turn after turn"; docs/api.md "Citations").

        Built from the citation objects each text block carries as the provider sent them
        (``TextContent.citations``: OpenAI's ``url_citation`` annotations, Anthropic's
        ``citations``), each with its span in ``text``; [] when there are none.
        """
        found: list[Citation] = []
        start = 0
        for block in self.content if isinstance(self.content, (list, tuple)) else []:
            if isinstance(block, TextContent) and isinstance(block.text, str):
                for raw in block.citations if isinstance(block.citations, list) else []:
                    citation = citation_of(raw, start, block.text)
                    if citation is not None:
                        found.append(citation)
                start += len(block.text)
            elif isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                start += len(block["text"])  # counted as ``text`` counts it
        return found

    def raise_for_failure(self) -> "AssistantMessage":
        """This reply, or ``RunFailedError`` when its run failed (beyond the spec, docs/api.md "A run that fails says so").

        A run failed when ``stop_reason`` is in ``FAILED_RUN_STOP_REASONS``; like
        ``requests``' ``raise_for_status``, for a reply taken with ``take_response`` or
        ``check=False``.

        Raises:
            RunFailedError: the run failed; its ``reply`` is this message.
        """
        if self.stop_reason in FAILED_RUN_STOP_REASONS:
            raise RunFailedError(self)
        return self


@dataclass(frozen=True)
class ToolResultMessage(AgentMessage):
    """A tool's answer to one tool call, as it enters the history (spec §11).

    Decision 3: ``role`` is "tool" (the spec shows both "tool" and "toolResult").

    Thread safety: immutable; may be shared between threads. Content lists are read-only by convention.
    """

    tool_call_id: str
    tool_name: str
    content: list[Any] = field(metadata=_CONTENT)
    details: Any = field(default_factory=dict)
    usage: Optional[LLMUsage] = None
    added_tool_names: Optional[list[str]] = None
    is_error: bool = False
    timestamp: datetime = field(default_factory=utc_now, metadata=_TIMESTAMP)
    role: str = field(default="tool", init=False)


APPROVAL_DECISIONS = ("deferred", "approved", "rejected", "resumed")


@dataclass(frozen=True)
class ApprovalMessage(AgentMessage):
    """One step of a deferred tool call's approval, kept in the history, never sent to an LLM.

    Beyond the spec (docs/api.md "Approvals that wait for a person", decision 18). The
    history holds the pending state, so a session carries it to another process:
    ``decision`` is "deferred" (``before_tool_call`` deferred the call; ``arguments`` are
    the call's, ``reason`` the hook's), "approved" (``arguments``: those it will run with),
    "rejected" (``reason``: the text of its error result) or "resumed" (an approved call
    starts running: a crash from here on leaves it lost, not pending). The formatter sends
    no message for it; ``yiemagent.approvals`` reads it.

    Thread safety: immutable; may be shared between threads.
    """

    tool_call_id: str
    tool_name: str
    decision: str
    arguments: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    timestamp: datetime = field(default_factory=utc_now, metadata=_TIMESTAMP)
    role: str = field(default="approval", init=False)


@dataclass(frozen=True)
class CompactionMessage(AgentMessage):
    """A summary that stands for the oldest messages of the history, kept in it, never sent as it is.

    Beyond the spec (docs/sessions.md "Long conversations", shared/spec/API.md "Long
    conversations"). ``SummarizeHistory`` appends one when it summarises: ``summary`` is the
    model's summary, ``through`` how many stored messages, from the first, it replaces.
    The history keeps every message (sessions are append-only); a request carries the
    latest summary with the messages from ``through`` on instead of the messages before.
    The formatter sends no message for it; ``yiemagent.context`` reads it.

    Thread safety: immutable; may be shared between threads.
    """

    summary: str
    through: int
    timestamp: datetime = field(default_factory=utc_now, metadata=_TIMESTAMP)
    role: str = field(default="compaction", init=False)


_MESSAGE_TYPES: dict[str, type[AgentMessage]] = {
    "user": UserMessage,
    "assistant": AssistantMessage,
    "tool": ToolResultMessage,
    "approval": ApprovalMessage,
    "compaction": CompactionMessage,
}


def message_from_dict(data: dict[str, Any]) -> AgentMessage:
    """Rebuild any message from ``to_dict()`` output, choosing the type by ``role``.

    Raises:
        ValueError: the role is not one of "user", "assistant", "tool", "approval", "compaction".
    """
    role = data.get("role")
    message_type = _MESSAGE_TYPES.get(role)  # type: ignore[arg-type]
    if message_type is None:
        raise ValueError(f"cannot rebuild a message with role {role!r}: expected one of {sorted(_MESSAGE_TYPES)}")
    return message_type.from_dict(data)


# --- 2.-4. Tool, Context & Config and Lifecycle Outcome Types (spec §19) ----------------


class AbortSignal:
    """A flag that asks running work to stop (spec §19 ``abortSignal``).

    ``aborted`` turns true once and stays true. Tools check it, or block on ``wait()``,
    to stop early. ``child()`` makes a signal that fires when this one fires and may also
    fire on its own; the pipeline gives a tool with a timeout such a child, so that its
    timeout stops that tool alone and an abort still reaches it.

    Thread safety: every method may be called from any thread. ``_lock`` guards
    ``_children``, ``_callbacks``, ``_event`` and the transition to aborted; the flag is
    ``_fired`` (read in one step). The ``threading.Event`` that ``wait`` blocks on is made
    by the first ``wait`` that finds the signal not fired, under ``_lock``, and set by
    ``abort`` if made: a run's signal that nobody waits on costs no event (docs/performance.md
    "The run's own cost").
    """

    __slots__ = ("_event", "_fired", "_lock", "_children", "_callbacks", "reason")

    def __init__(self) -> None:
        self._event: Optional[threading.Event] = None  # made by the first wait before the signal fires
        self._fired = False  # set once, under _lock, before _event: ``aborted`` reads it in one step, checked several times a round
        # guards _children, _callbacks, _event and the one-way transition of _fired
        self._lock = threading.Lock()
        self._children: set[AbortSignal] = set()
        self._callbacks: list[Callable[[], Any]] = []
        self.reason: Optional[str] = None

    if TYPE_CHECKING:  # what a type checker reads: a bool

        @property
        def aborted(self) -> bool:
            """True once ``abort()`` was called on this signal or on its parent."""

    else:  # read-only, and read in C: the run reads it several times a round, where a ``def``
        # property is a Python call each time (docs/performance.md "Frames a run no longer makes")
        aborted = property(operator.attrgetter("_fired"), doc="True once ``abort()`` was called on this signal or on its parent.")

    def abort(self, reason: Optional[str] = None) -> None:
        """Fire the signal, and every child of it; later calls do nothing."""
        with self._lock:
            if self._fired:
                return
            self.reason = reason
            self._fired = True  # before the event: a thread woken by wait() finds it set
            if self._event is not None:
                self._event.set()
            children, self._children = self._children, set()
            callbacks, self._callbacks = self._callbacks, []
        for child in children:
            child.abort(reason)
        for callback in callbacks:
            _run_abort_callback(callback)

    def on_abort(self, callback: Callable[[], Any]) -> Callable[[], None]:
        """Call ``callback()`` once when the signal fires (at once, here, if it already has).

        The callback runs in the thread that calls ``abort()``: keep it short and
        non-blocking (close a socket, set an event). An exception it raises is logged.
        Returns a function that unregisters the callback; call it when the work the
        callback would stop is over, so a long-lived signal does not grow.
        """
        with self._lock:
            if not self._fired:
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        _run_abort_callback(callback)
        return lambda: None

    def _forget(self, callback: Callable[[], Any]) -> None:
        with self._lock:
            try:
                self._callbacks.remove(callback)
            except ValueError:
                pass

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until the signal fires or ``timeout`` seconds pass; return ``aborted``.

        The flag is read first, in one step: a thread that read ``aborted`` as true is told
        True, also while ``abort`` is still running. Else, under ``_lock``, where ``abort``
        sets it, it is read again (fired since: ``abort`` found no event to set), then the
        event is made, if no earlier wait made it, for ``abort`` to set.
        """
        if self._fired:
            return True
        with self._lock:
            if self._fired:
                return True
            event = self._event
            if event is None:
                event = self._event = threading.Event()
        return event.wait(timeout)

    def child(self) -> AbortSignal:
        """A new signal that fires when this one does (at once if it already has)."""
        child = AbortSignal()
        with self._lock:
            if not self._fired:
                self._children.add(child)
                return child
        child.abort(self.reason)
        return child

    def release(self, child: AbortSignal) -> None:
        """Forget a child that is no longer in use, so a long-lived signal does not grow."""
        with self._lock:
            self._children.discard(child)

    def __repr__(self) -> str:
        return f"AbortSignal(aborted={self.aborted})"


def _run_abort_callback(callback: Callable[[], Any]) -> None:
    try:
        callback()
    except Exception:
        logging.getLogger("yiemagent.tooling").exception("abort callback %r raised", callback)


@dataclass(frozen=True)
class AgentToolResult:
    """What a tool returns (spec §3 "Returns — agentToolResult").

    ``terminate`` asks the agent loop to stop after this batch; the batch stops only when
    every result in it asks (spec §10).

    Thread safety: immutable; may be shared between threads.
    """

    content: list[Any]
    details: Any = field(default_factory=dict)
    usage: Optional[LLMUsage] = None
    terminate: bool = False


@dataclass(frozen=True)
class AgentToolCall:
    """One tool call made by the LLM (spec §7 ``agentToolCall``).

    ``arguments_error`` is beyond the spec: extraction sets it when the model sent
    arguments that are not a JSON object (decision 2); ``prepare_tool_call`` then answers
    the call with an error result instead of running the tool.

    Thread safety: immutable; may be shared between threads.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    type: str = "function"
    arguments_error: Optional[str] = None


def _require_callable(tool_name: str, field_name: str, value: Any, optional: bool) -> None:
    if value is None and optional:
        return
    if not callable(value):
        raise ToolDefinitionError(f"tool {tool_name!r}: {field_name} must be callable, got {type(value).__name__}")


@dataclass(eq=False)
class AgentTool:
    """A tool the LLM can call (spec §3 ``agentTool``).

    ``execute(tool_call_id, args, signal, on_partial_result) -> AgentToolResult`` does the
    work; ``prepare_arguments(args) -> dict`` may rewrite the arguments before validation;
    ``validate_required_args(args) -> str | None`` replaces the default schema validation
    (None means valid). ``parallel_tool_execute`` lets the tool run beside others in a
    parallel batch (spec §9).

    ``timeout_s`` is beyond the spec: a call that runs longer becomes an error result
    naming the limit, and the call's signal fires so a cooperative tool stops. A tool
    that ignores its signal cannot be killed: its (daemon) thread is abandoned and runs
    on until ``execute`` returns; its result and any later partial results are dropped.

    ``requires_approval`` is beyond the spec (decision 18): each call of the tool waits for a
    person, as if ``before_tool_call`` had answered ``{"defer": True, "reason": ...}``, unless
    ``before_tool_call`` decides for that call (any dict it returns, ``{}`` to allow; None
    leaves the decision to this flag). docs/api.md "Approvals in fewer lines".

    The schema is checked as JSON Schema by ``register_tool``; the other fields are
    checked here, at construction.

    Raises:
        ToolDefinitionError: a field has the wrong type (a name that is not a non-empty
            string, an ``execute`` that is not callable, a non-positive timeout).

    Thread safety: treat a tool as immutable once registered; it is read from the loop
    thread and, in parallel batches, from tool threads.
    """

    name: str
    label: str
    description: str
    input_schema: dict[str, Any]
    execute: Callable[..., AgentToolResult]
    prepare_arguments: Optional[Callable[[dict[str, Any]], dict[str, Any]]] = None
    validate_required_args: Optional[Callable[[dict[str, Any]], Optional[str]]] = None
    parallel_tool_execute: bool = False
    timeout_s: Optional[float] = None
    requires_approval: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ToolDefinitionError(f"a tool's name must be a non-empty string, got {self.name!r}")
        if any(c.isspace() or not c.isprintable() for c in self.name):
            # LLM APIs take names like ^[a-zA-Z0-9_-]{1,64}$; a space is the common slip
            raise ToolDefinitionError(f"tool name {self.name!r} contains whitespace or control characters; use letters, digits, '_' or '-'")
        for field_name in ("label", "description"):
            if not isinstance(getattr(self, field_name), str):
                raise ToolDefinitionError(f"tool {self.name!r}: {field_name} must be a string")
        if not isinstance(self.input_schema, Mapping):
            raise ToolDefinitionError(
                f"tool {self.name!r}: input_schema must be a dict (a JSON Schema), got {type(self.input_schema).__name__}"
            )
        _require_callable(self.name, "execute", self.execute, optional=False)
        _require_callable(self.name, "prepare_arguments", self.prepare_arguments, optional=True)
        _require_callable(self.name, "validate_required_args", self.validate_required_args, optional=True)
        if self.timeout_s is not None and (
            isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, numbers.Real) or not self.timeout_s > 0
        ):
            raise ToolDefinitionError(f"tool {self.name!r}: timeout_s must be a positive number of seconds, got {self.timeout_s!r}")
        if not isinstance(self.requires_approval, bool):
            raise ToolDefinitionError(f"tool {self.name!r}: requires_approval must be True or False, got {self.requires_approval!r}")


@dataclass
class AgentContext:
    """What one LLM round sees: system prompt, messages, tools (spec §19 ``agentContext``).

    Thread safety: built for one LLM round by the run thread; in a parallel batch tool threads read it and must not change it.
    """

    system_prompt: str
    messages: list[AgentMessage]
    tools: Mapping[str, AgentTool]


DEFAULT_SYSTEM_PROMPT = "You are helpful assistant."  # spec §1 Step 2.5, word for word


@dataclass
class AgentState:
    """The agent's mutable runtime state (spec §19 ``agentState``).

    Thread safety: owned by the agent; see ``YiemAgent`` for which thread writes what.
    """

    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    model: Optional[LLMModel] = None
    tools: Mapping[str, AgentTool] = field(default_factory=dict)
    messages: list[AgentMessage] = field(default_factory=History)  # a list that counts its edits (docs/performance.md)
    pending_tool_calls: set[str] = field(default_factory=set)
    active_run: bool = False
    error_message: Optional[str] = None


_TOOL_EXECUTION_MODES = ("sequential", "parallel")


@dataclass(frozen=True)
class AgentLoopConfig:
    """Hooks and the execution mode for one batch (spec §19 ``agentLoopConfig``).

    ``before_tool_call(ctx, signal) -> None | dict`` may block a call;
    ``after_tool_call(ctx, signal) -> None | dict`` may replace parts of its result
    (spec §14). ``tool_execution`` is "sequential" or "parallel" (spec §9).

    Thread safety: immutable; may be shared between threads.
    """

    before_tool_call: Optional[Callable[..., Any]] = None
    after_tool_call: Optional[Callable[..., Any]] = None
    tool_execution: str = "sequential"

    def __post_init__(self) -> None:
        if self.tool_execution not in _TOOL_EXECUTION_MODES:
            raise ValueError(f"tool_execution must be one of {_TOOL_EXECUTION_MODES}, got {self.tool_execution!r}")


@dataclass(frozen=True)
class BeforeToolCallContext:
    """What ``before_tool_call`` sees (spec §14 ``beforeToolCallContext``).

    Thread safety: immutable; may be shared between threads.
    """

    assistant_message: AssistantMessage
    tool_call: AgentToolCall
    args: dict[str, Any]
    context: AgentContext


@dataclass(frozen=True)
class AfterToolCallContext:
    """What ``after_tool_call`` sees (spec §14 ``afterToolCallContext``).

    Thread safety: immutable; may be shared between threads.
    """

    assistant_message: AssistantMessage
    tool_call: AgentToolCall
    args: dict[str, Any]
    result: AgentToolResult
    is_error: bool
    context: AgentContext


# --- beyond the spec: a context for tools (docs/api.md "A context for tools, async tools") ---
# The spec's ``execute`` receives only (id, args, signal, onPartialResult) (§3). Beyond it, a
# tool or a hook often needs what the run knows: the application's own objects (a database
# handle, the user), which run and round this is, the tokens spent so far, the conversation.
# ``YiemAgent(deps=...)`` gives the application's objects; the run builds a ``RunContext`` for
# each batch and each call of it sees it, with its own ``tool_call_id``:
#
# - through ``current_run_context()``, from any ``execute``, ``before_tool_call`` or
#   ``after_tool_call`` (a context variable, set in the thread that runs them: the run
#   thread, a pool thread of a parallel batch, the thread of a call with ``timeout_s``);
# - as an argument of a ``tool()`` function, to a parameter annotated ``RunContext`` (it is
#   not in the schema; the model never sends it).
#
# Thread safety: a ``RunContext`` is immutable. ``messages`` is a tuple of read-only copies of the
# history the batch started from (below): later messages do not change it, and a tool
# cannot change the history through it (a content list or a tool-call dict refuses any change,
# ``TypeError``). The copies are made the first time ``messages`` is read in the batch, once for
# all its calls, so a batch whose tools never read it costs no copy; each thread sees its own
# value of the context variable (``contextvars``).


# What a RunContext shows of the history: read-only copies of its messages. The messages are frozen
# dataclasses, but their content lists, tool-call dicts, arguments and details are plain
# containers: a tool that changed one in place would change the agent's history behind its back
# (``agent.history()`` and a session's copy no longer what the next request sends). So a tool sees
# a copy of each message whose lists and dicts refuse every change with a ``TypeError``
# (``_format_cache.freeze``'s read-only containers: still a ``list`` and a ``dict`` to everything
# that reads them, ``json.dumps`` included; any copy of one is plain and changeable); immutable
# values are shared, any other object (a typed answer's value, a pydantic model) is a deep copy.
# ``MessagesSnapshot`` makes the copies the first time it is read, once for a batch: a batch whose
# tools never read ``RunContext.messages`` costs no copy (a capability not in play costs a run nothing).

_SNAPSHOT_READ_ONLY = (
    "RunContext.messages is a read-only snapshot of the history (types.py RunContext): changing it would change "
    "the agent's history behind its back. Copy what you need to change: list(...), dict(...), copy.deepcopy(...)"
)


class ReadOnlyDict(FrozenDict):
    """A dict of a ``RunContext`` snapshot: refuses every change, saying so. Immutable; may be shared between threads."""

    __slots__ = ()
    why_read_only = _SNAPSHOT_READ_ONLY


class ReadOnlyList(FrozenList):
    """A list of a ``RunContext`` snapshot: refuses every change, saying so. Immutable; may be shared between threads."""

    __slots__ = ()
    why_read_only = _SNAPSHOT_READ_ONLY


_SNAPSHOT_KINDS = (ReadOnlyDict, ReadOnlyList)
_SHARED = (str, bytes, int, float, bool, type(None), date, time, timedelta, enum.Enum)
"""Field values that cannot change: a read-only copy shares them."""


def _read_only_field(value: Any) -> Any:
    if isinstance(value, _SHARED):
        return value
    if isinstance(value, (dict, list)) or type(value) is tuple:
        return freeze(value, _SNAPSHOT_KINDS)  # content lists, tool-call dicts, arguments, details: JSON-like (decision 15)
    params = getattr(type(value), "__dataclass_params__", None)  # a dataclass instance's (not a dataclass class's: its type is type)
    if params is not None and params.frozen and all(isinstance(getattr(value, f.name), _SHARED) for f in fields(value)):
        return value  # LLMUsage and the like: frozen all the way down
    try:
        return copy.deepcopy(value)  # a typed answer's value (docs/api.md "Typed answers")
    except Exception:  # an object deepcopy refuses (it holds a lock, a handle): shared, the one thing left to do
        return value


def read_only_message(message: Any) -> Any:
    """A copy of ``message`` (a message dataclass) whose fields cannot be changed in place; equal to it (``==``)."""
    copied = copy.copy(message)
    for f in fields(message):
        object.__setattr__(copied, f.name, _read_only_field(getattr(message, f.name)))
    return copied


class MessagesSnapshot:
    """The history a batch started from, as read-only copies made on first read (``RunContext.messages``).

    Keeps the sequence it is given and its length then: messages appended to it later are
    not part of the snapshot. Thread safety: ``messages`` may be called from any thread (a
    lock makes the one copy).
    """

    __slots__ = ("_source", "_count", "_messages", "_lock")

    def __init__(self, source: Sequence[Any]) -> None:
        self._source: Optional[Sequence[Any]] = source
        self._count = len(source)
        self._messages: Optional[tuple[Any, ...]] = None
        self._lock = threading.Lock()  # guards the one copy

    def messages(self) -> tuple[Any, ...]:
        """The read-only copies, made on the first call; the very same tuple for every later call."""
        made = self._messages
        if made is not None:
            return made
        with self._lock:
            if self._messages is None:
                source = self._source if self._source is not None else ()
                self._messages = tuple(read_only_message(m) if is_dataclass(m) else m for m in source[: self._count])
                self._source = None  # the batch's copy of the history is no longer held
            return self._messages


class _SnapshotField:
    """``RunContext.messages``: stored as a ``MessagesSnapshot`` (any sequence given is wrapped in one), read as its copies.

    A data descriptor, so the dataclass's own ``__init__`` (and ``dataclasses.replace``) go
    through it, and the field keeps its place in the signature and in ``fields()``; the
    copies are made only when the field is read.
    """

    def __set__(self, context: Any, value: Any) -> None:
        context.__dict__["_messages_snapshot"] = value if isinstance(value, MessagesSnapshot) else MessagesSnapshot(tuple(value))

    def __get__(self, context: Any, owner: Any = None) -> tuple[AgentMessage, ...]:
        if context is None:
            raise AttributeError("messages")  # no class-level default (the dataclass takes the field as required)
        snapshot: MessagesSnapshot = context.__dict__["_messages_snapshot"]
        return snapshot.messages()


@dataclass(frozen=True)
class RunContext:
    """What a tool call may know of its run.

    Attributes:
        deps: the agent's ``deps`` (``YiemAgent(deps=...)``), as given; None without.
        run_id: the run's number (1 for the agent's first run), as in the run's events.
        round: the LLM round whose tool calls these are (1-based); 0 for approved calls a run
            resumes before its first round (approvals.py ``start_of_run``).
        usage: the run's ``LLMUsage`` so far, this round's reply included.
        messages: a read-only snapshot of the history the batch started from: a tuple of
            copies whose lists and dicts refuse changes (``TypeError``), made on first read.
            Given any sequence of messages (the run gives its ``MessagesSnapshot``, shared by
            the calls of a batch). Left out of ``repr`` and ``==``.
        tool_call_id: the id of the call being run; None outside one call.
    """

    deps: Any
    run_id: int
    round: int
    usage: LLMUsage
    messages: tuple[AgentMessage, ...] = field(repr=False, compare=False)
    tool_call_id: Optional[str]

    def for_call(self, tool_call_id: str) -> RunContext:
        """This context for one call of its batch: the same snapshot (not copied again), with ``tool_call_id`` set."""
        return RunContext(self.deps, self.run_id, self.round, self.usage, self.__dict__["_messages_snapshot"], tool_call_id)


RunContext.messages = _SnapshotField()  # type: ignore[assignment]  # after the dataclass read its fields


class _CallScope:
    """The ``RunContext`` of one tool call, made only if something asks for it (``current_run_context``).

    ``outer`` is the context the call belongs to: the batch's (a ``RunContext``, or a
    ``_BatchScope`` not made yet) or an enclosing call's scope. A tool that never asks for
    its context costs a run no ``RunContext`` per call, nor per batch (docs/performance.md
    "W1"). Thread safety: used by the thread running the call; two threads resolving it at
    once make equal contexts, one kept.
    """

    __slots__ = ("outer", "tool_call_id", "resolved")

    def __init__(self, outer: RunScope, tool_call_id: str) -> None:
        self.outer = outer
        self.tool_call_id = tool_call_id
        self.resolved: Optional[RunContext] = None

    def resolve(self) -> RunContext:
        if self.resolved is None:
            outer = self.outer
            self.resolved = (outer if isinstance(outer, RunContext) else outer.resolve()).for_call(self.tool_call_id)
        return self.resolved


class _BatchScope:
    """The ``RunContext`` of a batch (its ``tool_call_id`` None), made by ``make`` when a call first asks (``run_context_later``).

    Never the context variable's value in a run: the run hands it to its batch, and each
    call's scope holds it (``enter_call_context``, ``call_context``), so a batch sets the
    variable once per call and not once more for itself (docs/performance.md "W1"). A call
    scope, and so a thread started with a copy of the call's context, keeps the scope of its
    own batch whatever batch runs later. Thread safety: the calls of a parallel batch may
    ask at once from their threads; one lock makes the one context they all share (its
    snapshot copied once).
    """

    __slots__ = ("make", "resolved")

    def __init__(self, make: Callable[[], RunContext]) -> None:
        self.make = make
        self.resolved: Optional[RunContext] = None

    def resolve(self) -> RunContext:
        if self.resolved is None:
            with _resolving:
                if self.resolved is None:
                    self.resolved = self.make()
        return self.resolved


RunScope = Union[RunContext, _CallScope, _BatchScope]
"""What the context variable holds in a run's tools and hooks: a context made, or a scope that makes it when asked."""

_resolving = threading.Lock()  # makes a _BatchScope's one context (rarely taken: only when a tool asks)
_current: contextvars.ContextVar[Optional[RunScope]] = contextvars.ContextVar("yiemagent_run_context", default=None)


def current_run_context() -> Optional[RunContext]:
    """The ``RunContext`` of the tool call this thread is running, or None outside a run's tools and hooks."""
    value = _current.get()
    return value if value is None or isinstance(value, RunContext) else value.resolve()


@contextmanager
def run_context(context: Optional[RunContext]) -> Iterator[Optional[RunContext]]:
    """Make ``context`` current in this thread for the ``with`` block (the run sets it around a batch)."""
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)


def enter_run_context(context: Optional[RunContext]) -> contextvars.Token[Optional[RunScope]]:
    """``run_context`` without the ``with`` block, for the run's hot path: returns what ``leave_run_context`` takes."""
    return _current.set(context)


def run_context_later(make: Callable[[], RunContext]) -> _BatchScope:
    """A batch's context, made by ``make()`` only when a tool or hook of the batch first asks (once, shared by its calls).

    Given to the batch (batch.py ``execute_tool_calls_within``): each call's scope is made
    on it, and the context variable is set for the calls alone.
    """
    return _BatchScope(make)


leave_run_context: Callable[[contextvars.Token[Optional[RunScope]]], None] = _current.reset
"""What ``enter_run_context`` or ``enter_call_context`` set, undone with its token: the context variable's own ``reset``, called in C."""


def enter_call_context(tool_call_id: str, outer: Optional[RunScope] = None) -> Optional[contextvars.Token[Optional[RunScope]]]:
    """``call_context`` entered once, for a call whose three phases run in one step (batch.py ``_plain_call``).

    ``outer``: the batch's scope (``run_context_later``), or None for the context current in
    this thread. Returns the token for ``leave_run_context``, or None outside a run (nothing
    entered). The call's ``RunContext`` is made when first asked for, as with ``call_context``.
    """
    if outer is None:
        outer = _current.get()
        if outer is None:
            return None
    return _current.set(_CallScope(outer, tool_call_id))


class call_context:  # noqa: N801  used as a function: ``with call_context(call_id):``
    """The current context with ``tool_call_id`` set, for one call's PREPARE, EXECUTE and FINALIZE; nothing outside a run.

    ``outer``: the batch's scope (``run_context_later``), or None for the context current
    in the thread that first enters. A class, not a generator: a batch enters one per call
    twice (PREPARE, then EXECUTE and FINALIZE, maybe in a tool thread), and outside a run it
    only reads the context variable. The call's ``RunContext`` is made when first asked for
    (``_CallScope``), once for both phases. Thread safety: entered by one thread at a time.
    """

    __slots__ = ("_tool_call_id", "_outer", "_token", "_scope")

    def __init__(self, tool_call_id: str, outer: Optional[RunScope] = None) -> None:
        self._tool_call_id = tool_call_id
        self._outer = outer
        self._token: Optional[contextvars.Token[Optional[RunScope]]] = None
        self._scope: Optional[_CallScope] = None

    def __enter__(self) -> None:
        scope = self._scope
        if scope is None:
            outer = self._outer if self._outer is not None else _current.get()
            if outer is None:
                return
            scope = self._scope = _CallScope(outer, self._tool_call_id)
        self._token = _current.set(scope)

    def __exit__(self, *exc_info: Any) -> None:
        if self._token is not None:
            _current.reset(self._token)
            self._token = None


@dataclass(frozen=True, slots=True)
class PreparedToolCall:
    """A call that passed preparation: the resolved tool and its validated arguments (spec §8.1).

    Thread safety: immutable; may be shared between threads.
    """

    tool: AgentTool
    tool_call: AgentToolCall
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ImmediateOutcome:
    """A call that ended during preparation, with its (error) result (spec §8.1).

    Thread safety: immutable; may be shared between threads.
    """

    result: AgentToolResult
    is_error: bool


@dataclass(frozen=True, slots=True)
class ExecutedOutcome:
    """The result of ``execute``, before the after-hook (spec §8.2).

    Thread safety: immutable; may be shared between threads.
    """

    result: AgentToolResult
    is_error: bool


@dataclass(frozen=True, slots=True)
class FinalizedOutcome:
    """A call after all three phases (spec §8.3).

    Thread safety: immutable; may be shared between threads.
    """

    tool_call: AgentToolCall
    result: AgentToolResult
    is_error: bool


@dataclass(frozen=True)
class PendingApproval:
    """A tool call that waits for a person's decision (beyond the spec; decision 18).

    ``prepare_tool_call`` returns one when ``before_tool_call`` answers
    ``{"defer": True, "reason": ...}``; ``pending_approvals(agent)`` lists them, read from
    the history (docs/api.md "Approvals that wait for a person").

    Thread safety: immutable; may be shared between threads.
    """

    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    reason: str


@dataclass(frozen=True)
class AgentToolCallBatch:
    """The tool-result messages of one batch, in call order, and whether to stop (spec §10).

    ``deferred`` (beyond the spec, decision 18): the calls ``before_tool_call`` deferred,
    in call order; they have no result in ``messages``, and a batch with any does not
    terminate.

    Thread safety: immutable; may be shared between threads.
    """

    messages: list[ToolResultMessage]
    terminate: bool
    deferred: list[PendingApproval] = field(default_factory=list)
