"""An estimate of a request's input tokens, with no tokenizer download (docs/api.md "Long conversations").

``count_tokens`` counts what a request sends: the system prompt, each message's text,
the tool calls an assistant made (their names and arguments), tool results, images, and
the tool definitions (name, description, input schema). No tokenizer is loaded: none can
be fetched at run time and users should not need one. Text is cut into the pieces a BPE
tokenizer's pre-tokenizer makes (words, numbers, punctuation, whitespace, other scripts)
and each piece costs what the common BPE vocabularies charge for it on average; the
error measured against real tokenizers is in docs/api.md "count_tokens: how close".

Images cost what Anthropic documents (width * height / 750 tokens, after scaling the
long edge to 1568 pixels, at most 1600 tokens), the size read from the PNG, JPEG, GIF or
WebP header; an image whose size cannot be read costs ``IMAGE_TOKENS_UNKNOWN`` (1600, the
most either provider charges for one image of usual shape).

``calibrate``: an ``AssistantMessage`` in ``messages`` whose ``usage.input_tokens``
counted exactly the messages before it (with the system prompt and the tools): that count
is taken as it is, and only the calibrating message and those after it are estimated.

Thread safety: pure functions; may be called from any thread.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
from collections.abc import Iterable, Sequence
from typing import Any, Optional

from ._failures import user_code_errors
from .types import AgentMessage, AgentTool, AssistantMessage, ImageContent, TextContent

__all__ = ["IMAGE_TOKENS_UNKNOWN", "count_tokens", "estimate_text_tokens", "reply_tokens"]

IMAGE_TOKENS_UNKNOWN = 1600
"""An image whose size cannot be read: Anthropic's most for one image (docs: "about 1,600 tokens")."""

_IMAGE_MAX_TOKENS = 1600
_IMAGE_LONG_EDGE = 1568

MESSAGE_OVERHEAD = 4
"""Tokens of a message's framing (role, separators): OpenAI's chat format spends 3-4 per message."""

REQUEST_OVERHEAD = 3
"""Tokens every request adds (the reply's priming in OpenAI's chat format)."""

TOOL_OVERHEAD = 8
"""Tokens of a tool definition's framing, beside its name, description and schema."""

# keys whose values a provider does not count as input tokens, or sends opaque: a thinking
# block's signature, an encrypted reasoning item (they are long base64 that would be
# counted as text otherwise)
_OPAQUE_KEYS = frozenset({"signature", "encrypted_content", "thought_signature", "redacted_thinking"})

_PIECES = re.compile(
    r"(?P<word>[A-Za-z]+)|(?P<digits>[0-9]+)|(?P<space>\s+)|(?P<cjk>[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]+)"
    r"|(?P<other>[^\x00-\x7f\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\s]+)|(?P<punct>[^A-Za-z0-9\s\x80-\U0010ffff]+)"
)


def estimate_text_tokens(text: str) -> int:
    """The estimated tokens of ``text``: a sum over the pieces a BPE pre-tokenizer makes.

    A word costs one token up to 8 letters, then one more per 6; digits one per 3 (the
    tokenizers split numbers so); a run of punctuation one per 2 characters; whitespace
    nothing when it is one space (it joins the next word), else one per 8 characters;
    Chinese, Japanese and Korean characters one each; other scripts one per 2 characters.
    """
    total = 0
    for match in _PIECES.finditer(text):
        kind, piece = match.lastgroup, match.group()
        n = len(piece)
        if kind == "word":
            total += 1 + max(0, n - 3) // 6
        elif kind == "digits":
            total += (n + 2) // 3
        elif kind == "space":
            total += 0 if piece == " " else (n + 7) // 8
        elif kind == "cjk":
            total += n
        elif kind == "other":
            total += (n + 1) // 2
        else:
            total += (n + 1) // 2
    return total


def count_tokens(
    messages: Sequence[AgentMessage],
    *,
    system_prompt: str = "",
    tools: Optional[Iterable[AgentTool]] = None,
    calibrate: Optional[AssistantMessage] = None,
) -> int:
    """The estimated input tokens of a request sending ``messages`` (docs/api.md "Long conversations").

    Counts the system prompt, every message (text, tool calls with their names and
    arguments, tool results, images, any other content block by its strings) and
    ``tools`` (a list of ``AgentTool``: name, description, input schema). With
    ``calibrate`` (an ``AssistantMessage`` of ``messages`` whose ``usage.input_tokens``
    counted exactly the messages before it, the system prompt and the tools), the result
    is that count plus the estimate of the calibrating message and those after it.

    Raises:
        ValueError: ``calibrate`` is not in ``messages``, or has no ``usage``.
    """
    if calibrate is not None:
        start = _index_of(messages, calibrate)
        counted = getattr(calibrate.usage, "input_tokens", None)
        if not isinstance(counted, int) or isinstance(counted, bool) or counted < 0:
            raise ValueError(f"count_tokens(calibrate=...): the message has no usage.input_tokens to calibrate on, got {counted!r}")
        return counted + sum(message_tokens(m) for m in messages[start:])
    total = REQUEST_OVERHEAD + (estimate_text_tokens(system_prompt) + MESSAGE_OVERHEAD if system_prompt else 0)
    total += sum(message_tokens(m) for m in messages)
    for tool in tools or ():
        total += TOOL_OVERHEAD + estimate_text_tokens(tool.name) + estimate_text_tokens(tool.description)
        total += _value_tokens(tool.input_schema)
    return total


_REPLY_OPTIONS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def reply_tokens(llm_call: Any) -> Optional[int]:
    """The tokens an ``llm_call`` lets a reply take, or None when it does not say (docs/sessions.md "Long conversations").

    Its ``max_tokens`` attribute (a client's, or ``FallbackLLM``'s: the largest of its
    clients'), else the ``max_tokens``, ``max_completion_tokens`` or ``max_output_tokens``
    of its ``options``: the first that is a positive int. A window must leave that room
    for the reply beside the request.
    """
    try:
        options = getattr(llm_call, "options", None)
        candidates = [getattr(llm_call, "max_tokens", None)]
        if isinstance(options, dict):
            candidates += [options.get(name) for name in _REPLY_OPTIONS]
    except user_code_errors():  # a property of user code that raises says nothing
        return None
    return next((v for v in candidates if isinstance(v, int) and not isinstance(v, bool) and v > 0), None)


def message_tokens(message: AgentMessage) -> int:
    """The estimated tokens of one message: its framing and its content (tool results: their id and name too)."""
    total = MESSAGE_OVERHEAD
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return total + estimate_text_tokens(content)
    for block in content or ():
        total += _block_tokens(block)
    call_id = getattr(message, "tool_call_id", None)
    if isinstance(call_id, str):  # a tool result carries its call's id (and Anthropic its name)
        total += estimate_text_tokens(call_id)
    return total


def _index_of(messages: Sequence[AgentMessage], wanted: AssistantMessage) -> int:
    for i in range(len(messages) - 1, -1, -1):  # the same message object, else an equal one
        if messages[i] is wanted:
            return i
    for i in range(len(messages) - 1, -1, -1):
        if messages[i] == wanted:
            return i
    raise ValueError("count_tokens(calibrate=...): the message is not one of the messages")


def _block_tokens(block: Any) -> int:
    if isinstance(block, TextContent):
        return estimate_text_tokens(block.text)
    if isinstance(block, ImageContent):
        return image_tokens(block.data)
    if isinstance(block, dict):
        if block.get("type") == "image" and isinstance(block.get("data"), str):
            return image_tokens(block["data"])
        return _value_tokens({k: v for k, v in block.items() if k != "type"})
    return _value_tokens(block)


def _value_tokens(value: Any) -> int:
    """Strings by their text, containers by their parts and keys (JSON's framing at one token per entry)."""
    if isinstance(value, str):
        return estimate_text_tokens(value)
    if isinstance(value, dict):
        return sum(
            1 + estimate_text_tokens(str(k)) + _value_tokens(v) for k, v in value.items() if k not in _OPAQUE_KEYS
        )
    if isinstance(value, (list, tuple)):
        return sum(1 + _value_tokens(v) for v in value)
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, (int, float)):
        return estimate_text_tokens(str(value))
    if hasattr(value, "__dataclass_fields__"):  # a content block of another kind: its fields
        return _value_tokens({k: getattr(value, k, None) for k in value.__dataclass_fields__ if k != "type"})
    return estimate_text_tokens(str(value))


# --- images ----------------------------------------------------------------------------


def image_tokens(data: str) -> int:
    """Anthropic's documented cost of an image (width * height / 750 after scaling), from its base64 header."""
    size = image_size(data)
    if size is None:
        return IMAGE_TOKENS_UNKNOWN
    width, height = size
    scale = min(1.0, _IMAGE_LONG_EDGE / max(width, height, 1))
    return max(1, min(_IMAGE_MAX_TOKENS, math.ceil(width * scale * height * scale / 750)))


def image_size(data: str) -> Optional[tuple[int, int]]:
    """(width, height) from a base64 PNG, GIF, JPEG or WebP header; None if it cannot be read."""
    try:
        head = base64.b64decode(data[:65536] + "=" * (-len(data[:65536]) % 4), validate=False)
    except (binascii.Error, ValueError):
        return None
    try:
        if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR":
            return struct.unpack(">II", head[16:24])
        if head[:6] in (b"GIF87a", b"GIF89a"):
            return struct.unpack("<HH", head[6:10])
        if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
            return _webp_size(head)
        if head[:2] == b"\xff\xd8":
            return _jpeg_size(head)
    except struct.error:
        return None
    return None


def _webp_size(head: bytes) -> Optional[tuple[int, int]]:
    chunk = head[12:16]
    if chunk == b"VP8X":
        return 1 + int.from_bytes(head[24:27], "little"), 1 + int.from_bytes(head[27:30], "little")
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", head[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L":
        bits = int.from_bytes(head[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    return None


def _jpeg_size(head: bytes) -> Optional[tuple[int, int]]:
    i = 2
    while i + 9 < len(head):
        if head[i] != 0xFF:
            return None
        marker = head[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
            continue
        length = struct.unpack(">H", head[i + 2 : i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start of frame: its size
            height, width = struct.unpack(">HH", head[i + 5 : i + 9])
            return width, height
        i += 2 + length
    return None
