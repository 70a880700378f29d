"""Content blocks and conversation messages (spec §19 "Message Types").

Every message is a frozen dataclass serialisable with dataclasses-json: ``to_json()``,
``from_json()``, ``to_dict()``, ``from_dict()``. A content list may hold content objects
(``TextContent``, ``ImageContent``) and, in an ``AssistantMessage``, the raw tool-call
blocks of spec §7 (plain dicts with string keys); all of them survive a JSON round trip.

Messages are values: once appended to a conversation they are never changed, which is
what lets ``prepare_context`` share them instead of deep-copying the history (spec §14,
see docs/conformance.md). Their content lists are read-only by convention.

Thread safety: instances are immutable and may be shared between threads freely.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Any, Optional

from dataclasses_json import DataClassJsonMixin, config

__all__ = [
    "AgentMessage",
    "ApprovalMessage",
    "AssistantMessage",
    "ImageContent",
    "LLMModel",
    "LLMUsage",
    "MessageContent",
    "TextContent",
    "ToolResultMessage",
    "UsageLimits",
    "UsageMeter",
    "UserMessage",
    "add_usage",
    "content_from_dict",
    "message_from_dict",
    "text_of",
    "utc_now",
]


def utc_now() -> datetime:
    """The timestamp every message and result carries: timezone-aware UTC."""
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
    """Plain text (spec §19 ``textContent``).

    Thread safety: immutable; may be shared between threads.
    """

    text: str
    type: str = field(default="text", init=False)


@dataclass(frozen=True)
class ImageContent(MessageContent):
    """An image as base64 ``data`` with its ``mime_type`` (spec §19 ``imageContent``).

    Thread safety: immutable; may be shared between threads.
    """

    data: str
    mime_type: str
    type: str = field(default="image", init=False)


def content_from_dict(block: Any) -> Any:
    """Rebuild one content block from its JSON form.

    ``{"type": "text"}`` and ``{"type": "image"}`` become content objects; any other
    dict (a raw tool-call block of spec §7, a provider's "thinking" block, a text that
    carries more than its text, such as Anthropic's ``citations``) stays a dict, exactly
    as it was.
    """
    if isinstance(block, dict):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str) and block.keys() <= {"type", "text"}:
            return TextContent(block["text"])
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
    response the same way).
    """
    parts = []
    for block in blocks:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "\n".join(parts)


@dataclass(frozen=True)
class LLMUsage(DataClassJsonMixin):
    """Token counts of one LLM call, or of a tool that called an LLM (spec §19 ``llmUsage``).

    Decision 13 fixes what the counts mean, whatever the provider: ``input_tokens``
    counts every prompt token, cached ones included (``cache_read_tokens`` and
    ``cache_write_tokens`` are parts of it); ``output_tokens`` counts every generated
    token, reasoning included (``reasoning_tokens`` is part of it);
    ``total_tokens == input_tokens + output_tokens``.

    Thread safety: immutable; may be shared between threads.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int = 0


# --- usage sums (decision 13) ------------------------------------------------------
# ``LLMCallEndEvent.usage`` is one round's; ``AgentRunEndEvent.usage`` the sum over the run's
# rounds; ``agent.usage`` the sum over all of the agent's runs. Summing is field by field, every
# field: under decision 13 each count is a count of tokens of one kind, so the counts of several
# rounds add up and ``total_tokens == input_tokens + output_tokens`` holds for the sum whenever it
# holds for each round. Only LLM rounds count: a tool's own ``usage`` stays on its result.

_USAGE_FIELDS = tuple(f.name for f in fields(LLMUsage))


def add_usage(total: LLMUsage, more: Optional[LLMUsage]) -> LLMUsage:
    """``total`` plus ``more``, field by field; ``more=None`` (a round that reported none) adds nothing.

    A count that is not an int (a client that put None or a float there) counts as 0
    when it is None and is truncated to int otherwise, so a careless client cannot make
    the sum raise.
    """
    if more is None:
        return total
    return LLMUsage(**{name: getattr(total, name) + _count(getattr(more, name, 0)) for name in _USAGE_FIELDS})


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


@dataclass(frozen=True)
class UsageLimits:
    """Caps on what one run may spend (beyond the spec; docs/api.md "Agents as tools, fallback models, usage limits").

    Each limit is None (no limit) or an int of at least 0. A run whose summed usage (or
    whose count of tool calls run) passes a limit — goes above it — ends after that
    round, with every tool call of the round answered: ``stop_reason == "usage_limit"``
    and an ``error_message`` naming the limit and the count. They stand beside
    ``max_rounds`` (decision 12), which still applies. Like ``max_rounds``, the limits
    are per run: ``continue_agent`` starts a run with a fresh allowance.

    Raises:
        TypeError: a limit that is not an int (a bool is refused too).
        ValueError: a negative limit.

    Thread safety: immutable; may be shared between threads.
    """

    max_input_tokens: Optional[int] = None
    max_output_tokens: Optional[int] = None
    max_total_tokens: Optional[int] = None
    max_tool_calls: Optional[int] = None

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


@dataclass(frozen=True)
class UserMessage(AgentMessage):
    """What the user said (spec §19 ``userMessage``).

    Thread safety: immutable; may be shared between threads. Content lists are read-only by convention.
    """

    content: list[Any] = field(metadata=_CONTENT)
    timestamp: datetime = field(default_factory=utc_now, metadata=_TIMESTAMP)
    role: str = field(default="user", init=False)


@dataclass(frozen=True)
class AssistantMessage(AgentMessage):
    """One reply of the LLM (spec §19 ``assistantMessage``).

    ``content`` holds ``TextContent`` blocks and the raw tool-call blocks of spec §7, and
    the provider's blocks kept as they came (thinking; Anthropic's server-tool blocks and
    texts with citations, docs/streaming.md "Server tools").
    ``stop_reason`` is one of "stop", "length", "tool_use", "content_filter", "error",
    "aborted", "pause_turn" (the server paused its own tool loop: the run sends the turn
    again) or "tool_use_terminated" (the agent's own final response, spec §10).

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
        raises ``IndexError``). Text blocks are ``TextContent`` and plain ``{"type": "text"}``
        dicts (a text with citations); tool calls and thinking are left out.
        """
        parts: list[str] = []
        for block in self.content if isinstance(self.content, (list, tuple)) else []:
            if isinstance(block, TextContent) and isinstance(block.text, str):
                parts.append(block.text)
            elif isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "".join(parts)


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


_MESSAGE_TYPES: dict[str, type[AgentMessage]] = {
    "user": UserMessage,
    "assistant": AssistantMessage,
    "tool": ToolResultMessage,
    "approval": ApprovalMessage,
}


def message_from_dict(data: dict[str, Any]) -> AgentMessage:
    """Rebuild any message from ``to_dict()`` output, choosing the type by ``role``.

    Raises:
        ValueError: the role is not one of "user", "assistant", "tool", "approval".
    """
    role = data.get("role")
    message_type = _MESSAGE_TYPES.get(role)  # type: ignore[arg-type]
    if message_type is None:
        raise ValueError(f"cannot rebuild a message with role {role!r}: expected one of {sorted(_MESSAGE_TYPES)}")
    return message_type.from_dict(data)
