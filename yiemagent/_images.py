"""Images on the wire: what a provider takes, and the note sent in place of one it would refuse (docs/api.md "Images").

Spec §19 ``imageContent`` is base64 ``data`` with its ``mime_type``. What enters the history
is checked once (``normalize``: data that is not base64 becomes a text note, decision 15);
what a provider takes is checked by its client as it builds the request, since the caps
differ: OpenAI's chat completions and Anthropic's Messages API both take PNG, JPEG, GIF
and WebP, Anthropic at most 5 MB of base64 per image, OpenAI 20 MB. An image past either
rule goes as a line of text naming the rule, so that the request is one the provider
accepts (a 400 there would fail every later request of the conversation).

Pure functions; safe from any thread.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, Optional, TypeGuard

__all__ = ["SENDABLE_MIME_TYPES", "data_url", "is_base64", "is_media_type", "split_data_url", "unsendable"]

SENDABLE_MIME_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The image types both OpenAI's chat completions and Anthropic's Messages API document."""

_MB = 1024 * 1024
_MEDIA_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]*/[A-Za-z0-9][A-Za-z0-9.+_-]*")


def is_base64(data: Any) -> TypeGuard[str]:
    """Whether ``data`` is a str of strict base64 (RFC 4648 alphabet and padding, no whitespace)."""
    if not isinstance(data, str) or not data.isascii():
        return False
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def is_media_type(text: Any) -> TypeGuard[str]:
    """Whether ``text`` is a bare ``type/subtype`` (RFC 6838 names, no parameters): what can stand in a ``data:`` URL unchanged."""
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


def unsendable(mime_type: str, data: str, max_bytes: int, provider: str) -> Optional[str]:
    """The note to send instead of an image ``provider`` would refuse (its type, or past ``max_bytes`` of base64); None when it takes it."""
    if mime_type not in SENDABLE_MIME_TYPES:
        return f"[an image of type {mime_type} was not sent: {provider} takes only {', '.join(SENDABLE_MIME_TYPES)}]"
    if len(data) > max_bytes:
        return f"[a {mime_type} image of {len(data) / _MB:.1f} MB was not sent: {provider} takes at most {max_bytes // _MB} MB of base64 per image]"
    return None
