"""What both clients read off the wire the same way: errors in a body, token counts, text parts.

Beyond the spec (docs/conformance.md decisions 13 and 14). Parsers raise ``ReplyError`` for a reply
that cannot be used whole; the transport turns it into an ``LLMError`` naming the URL,
with the server's words masked (see ``_secrets``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, Optional
from urllib.parse import urlsplit, urlunsplit

from .._bounds import loads_json
from ..types import AssistantMessage, join_text

__all__ = [
    "RETRYABLE_STATUSES",
    "Emit",
    "ReplyError",
    "content_text",
    "context_overflow",
    "error_code",
    "join_url",
    "loads_json",
    "message_text",
    "payload_error",
    "require_object",
    "server_message",
    "token_count",
    "unsendable",
    "SENDABLE_MIME_TYPES",
]

Emit = Callable[[str, str], None]  # emit(kind, text): where a stream reader hands its deltas

RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
# Error types that a provider sends inside a 200 body or stream, and the HTTP status each stands for.
_ERROR_TYPE_STATUS = {
    "overloaded_error": 529,  # Anthropic
    "api_error": 500,  # Anthropic
    "rate_limit_error": 429,  # Anthropic
    "server_error": 500,  # OpenAI, OpenRouter
    "rate_limit_exceeded": 429,
    "timeout": 408,
}
# The "request longer than the context" answers (docs/failures.md "The history outgrew the context"):
# error codes, and the words of providers that send no such code (tests/fixtures/README.md "A request longer than the context").
_OVERFLOW_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})  # OpenAI, llama.cpp
_OVERFLOW_WORDS = re.compile(
    r"prompt is too long"  # Anthropic: "prompt is too long: 213462 tokens > 200000 maximum"
    r"|exceeds the context window"  # OpenAI: "Your input exceeds the context window of this model"
    r"|maximum context length is \d+"  # OpenAI, vLLM, OpenRouter: "This model's maximum context length is 8192 tokens"
    r"|exceeds the available context size"  # llama.cpp
    r"|input token count.{0,40} exceeds the maximum number of tokens"  # Gemini
    r"|maximum prompt length is \d+"  # xAI: "This model's maximum prompt length is 131072 but the request contains 537812 tokens"
    r"|too large for model with \d+ maximum context length"  # Mistral: "Prompt contains X tokens ... too large for model with Y maximum context length"
    r"|context[_ ]length[_ ]exceeded",
    re.IGNORECASE,
)
SENDABLE_MIME_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The image types both OpenAI's chat completions and Anthropic's Messages API document (docs/api.md "Images")."""
_MB = 1024 * 1024
# A count beyond this is not a token count (no context holds 10**12 tokens).
_MAX_TOKENS = 10**12
_MAX_TOKEN_DIGITS = len(str(_MAX_TOKENS - 1))  # a count below _MAX_TOKENS has at most 12 digits


class ReplyError(ValueError):
    """A reply that cannot be used whole (decision 14): not the protocol, an error inside it, cut short.

    ``retryable`` says whether asking again may help; ``status`` is the HTTP status the
    error stands for (a 200 body's own error code), when known.
    """

    def __init__(self, message: str, *, retryable: bool = False, status: Optional[int] = None, overflow: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.overflow = overflow  # the provider said the request is longer than the context (``context_overflow``)


def join_url(base_url: str, path: str) -> str:
    """``path`` appended to the path of ``base_url``, its query kept after it.

    Azure's endpoints take ``?api-version=…`` (and some gateways ``?key=…``) on the base
    URL: appending the path to the whole text put it inside the query's value.
    """
    parts = urlsplit(base_url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + path))


def require_object(value: Any, what: str) -> dict[str, Any]:
    """``value`` if it is a JSON object, else a ``ReplyError`` naming ``what`` and what came instead."""
    if not isinstance(value, dict):
        raise ReplyError(f"{what} is not a JSON object but {type(value).__name__} {_preview(value)}")
    return value


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def token_count(raw: dict[str, Any], *keys: str) -> int:
    """The first of ``keys`` present in ``raw`` as a token count; 0 when none is.

    Raises:
        ReplyError: the value is not a non-negative whole number below 10**12 (a bool,
            a fraction, NaN, infinity, ``1e400``, a negative number, text that is not digits).
    """
    for key in keys:
        value = raw.get(key)
        if value is None:
            continue
        if isinstance(value, str) and _is_count_text(digits := value.strip()):
            value = int(digits)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _MAX_TOKENS:
            raise ReplyError(f"usage field {key!r} is not a token count: {_preview(value)}")
        return value
    return 0


def _is_count_text(text: str) -> bool:
    """ASCII digits ``int`` reads below the digit limit: ``str.isdigit`` also admits "²" and "٣", which ``int``
    refuses or reads, and a 5,000-digit run ``int`` refuses (past ``sys.get_int_max_str_digits``)."""
    return text.isascii() and text.isdigit() and len(text.lstrip("0")) <= _MAX_TOKEN_DIGITS


def server_message(body: Any, text: str) -> str:
    """The server's own words from an error body (OpenAI, Anthropic, OpenRouter shapes), else the text."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            message = str(error.get("message") or "")
            metadata = error.get("metadata")
            raw = metadata.get("raw") if isinstance(metadata, dict) else None
            code = error.get("code") or error.get("type")
            parts = [message, f"({raw})" if raw else "", f"[{code}]" if code else ""]
            return " ".join(p for p in parts if p) or text[:500]
        if isinstance(error, str):
            return error
        top = body.get("message")
        if isinstance(top, str):
            return top
    return text[:500].strip() or "(empty body)"


def error_code(body: Any) -> Optional[str]:
    """The ``code`` (or ``type``) of an error body, as text."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = body["error"].get("code") or body["error"].get("type")
        return str(code) if code is not None else None
    return None


def context_overflow(status: Optional[int], body: Any, text: str) -> bool:
    """Whether an error answer says the request is longer than the model's context window.

    The one recogniser of every client, for an error status and for an error inside a 200
    body or stream alike: an error ``code`` or ``type`` that means it (OpenAI
    ``context_length_exceeded``, llama.cpp ``exceed_context_size_error``), or the server's
    words saying it (Anthropic, vLLM, OpenRouter, Gemini, which send no such code). Only a
    4xx other than 429 (a rate limit counted in tokens is not an overflow), or an error
    with no status, can be one; any other answer stays what it is.
    """
    if status is not None and not (400 <= status < 500 and status != 429):
        return False
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        kinds = {body["error"].get("code"), body["error"].get("type")}
        if any(isinstance(kind, str) and kind in _OVERFLOW_CODES for kind in kinds):
            return True
    return _OVERFLOW_WORDS.search(server_message(body, text)) is not None


def payload_error(data: Any, *, forced: bool = False) -> Optional[ReplyError]:
    """The error a 200 body or stream event carries, if any; ``forced`` for an ``event: error``.

    OpenRouter sends ``{"id": ..., "choices": [...], "error": {"code": 502, "message": ...}}``
    mid-stream; Anthropic ``{"type": "error", "error": {"type": "overloaded_error", ...}}``;
    Groq an ``event: error``; the Responses API an ``error`` event whose ``code`` and
    ``message`` may stand at its top level. The status is the error's numeric code (or its
    ``status_code``, or what its type stands for); retrying may help for 408/409/429/5xx/529.
    """
    error = data.get("error") if isinstance(data, dict) else None
    if forced and isinstance(data, dict) and not isinstance(error, dict) and isinstance(data.get("message"), str):
        # the Responses API's error event documents its code and message at its top level; its type names the event
        data = {"error": {key: value for key, value in data.items() if key != "type"}}
        error = data["error"]
    if not forced and (error is None or error == {} or error == ""):
        return None
    status: Optional[int] = None
    if isinstance(error, dict):
        for key in ("code", "status_code", "status"):
            value = error.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
                status = value
                break
        if status is None:
            status = _ERROR_TYPE_STATUS.get(str(error.get("type") or error.get("code") or ""))
    message = server_message(data, str(data)[:500])
    overflow = context_overflow(status, data, message)
    return ReplyError(f"error reported after HTTP 200: {message}", retryable=status in RETRYABLE_STATUSES and not overflow, status=status, overflow=overflow)


def content_text(content: Any, separator: str = "") -> str:
    """The text of an OpenAI-format ``content``: a string, or the ``text`` parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return separator.join(p["text"] for p in content if isinstance(p, dict) and p.get("type", "text") == "text" and isinstance(p.get("text"), str))
    return ""


def message_text(message: AssistantMessage, kind: str) -> str:
    """A reply's text of one kind: its ``"text"`` blocks, or its ``"thinking"`` blocks, joined by newlines.

    Text blocks are ``TextContent`` and ``{"type": "text"}`` dicts; segments of one text
    (an Anthropic text split at its citations, ``TextContent.is_segment``) are joined as
    they are (``types.join_text``). A streaming client's deltas of that kind, joined,
    equal this (docs/streaming.md).
    """
    if kind == "text":
        return join_text(message.content, lambda b: b["text"] if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) else None)
    return "\n".join(
        b["thinking"] for b in message.content if isinstance(b, dict) and b.get("type") == "thinking" and isinstance(b.get("thinking"), str)
    )


def unsendable(mime_type: str, data: str, max_bytes: int, provider: str) -> Optional[str]:
    """The note to send instead of an image ``provider`` would refuse (docs/api.md "Images"); None when it takes it.

    Both APIs take PNG, JPEG, GIF and WebP; each caps an image's size (``max_bytes``, counted
    on its base64 text). An image past either rule goes as this line of text naming the
    rule, so that the request is one the provider accepts: a 400 there would fail every
    later request of the conversation.
    """
    if mime_type not in SENDABLE_MIME_TYPES:
        return f"[an image of type {mime_type} was not sent: {provider} takes only {', '.join(SENDABLE_MIME_TYPES)}]"
    if len(data) > max_bytes:
        return f"[a {mime_type} image of {len(data) / _MB:.1f} MB was not sent: {provider} takes at most {max_bytes // _MB} MB of base64 per image]"
    return None
