"""The JSON form of one message, shared by ``save_history``/``load_history`` and ``SQLiteSession``.

A message's own fields take the form ``to_dict()`` gives them (API.md "Content and
messages"): ``role``, content blocks as ``{"type": "text", "text": ...}`` /
``{"type": "image", "data": ..., "mime_type": ...}``, ``timestamp`` an ISO 8601 string
with its offset, ``usage`` a dict of counts. Values of free form — ``details``, the raw
tool-call blocks of spec §7 — go through ``encode_value``, which keeps what plain JSON
would lose, as a tagged object ``{"$type": <tag>, ...}``:

============== ================================================ ======================
value          JSON                                             comes back as
============== ================================================ ======================
datetime       ``{"$type": "datetime", "value": iso}``          datetime (same offset)
date, time     ``{"$type": "date"|"time", "value": iso}``       date, time
bytes          ``{"$type": "bytes", "base64": ...}``            bytes
tuple          ``{"$type": "tuple", "items": [...]}``           tuple
set, frozenset ``{"$type": "set"|"frozenset", "items": [...]}`` set, frozenset
dict with a    ``{"$type": "map", "items": [[k, v], ...]}``     dict, keys as they were
non-str key or
a "$type" key
content, usage ``{"$type": "content"|"usage", "value": {...}}`` TextContent, ImageContent, LLMUsage
anything else  ``{"$type": "repr", "value": repr(x)}``          the repr string (lossy)
============== ================================================ ======================

The last row is what makes encoding total: whatever a tool puts in ``details``, storing
the message never fails (decision 15's promise, for the session). NaN and infinities
are written as Python's json module writes them.

Decoding checks every field and raises ``MessageFormatError`` naming the entry (the
caller says which: ``messages[3]``, a session's row) and the field.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import MISSING, fields
from datetime import date, datetime, time
from typing import Any, Callable

from ..errors import MessageFormatError
from ..messages import (
    AgentMessage,
    AssistantMessage,
    ImageContent,
    LLMUsage,
    MessageContent,
    TextContent,
    ToolResultMessage,
    UserMessage,
    content_from_dict,
)

__all__ = ["decode_value", "encode_value", "message_from_data", "message_from_json", "message_to_data", "message_to_json"]

TAG = "$type"
_USAGE_FIELDS = frozenset(f.name for f in fields(LLMUsage))
_TYPES: dict[str, type[AgentMessage]] = {"user": UserMessage, "assistant": AssistantMessage, "tool": ToolResultMessage}
MAX_DEPTH = 200  # values nested deeper are stored as a repr tag (Python's recursion limit is near 1000)
_OPTIONAL_STR = {"api", "provider", "model", "stop_reason", "error_message"}


def encode_value(value: Any) -> Any:
    """A JSON-ready form of ``value`` that ``decode_value`` turns back into it (see the table above).

    Total, as the module says: a container that holds itself, or one nested more than
    ``MAX_DEPTH`` levels deep (where Python's recursion would give out), is stored as a
    ``repr`` tag saying so, rather than making the store raise ``RecursionError``.
    """
    return _encode(value, 0, set())


def _encode(value: Any, depth: int, active: set[int]) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    container = isinstance(value, (list, dict, tuple, set, frozenset))
    if container:
        if id(value) in active:
            return {TAG: "repr", "value": f"<the enclosing {type(value).__name__}, which contains itself>"}
        if depth >= MAX_DEPTH:
            return {TAG: "repr", "value": f"<a {type(value).__name__} nested more than {MAX_DEPTH} levels deep>"}
        active.add(id(value))
    try:
        return _encode_one(value, depth + 1, active)
    finally:
        if container:
            active.discard(id(value))


def _encode_one(value: Any, depth: int, active: set[int]) -> Any:
    def encode(item: Any) -> Any:
        return _encode(item, depth, active)

    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and TAG not in value:
            return {k: encode(v) for k, v in value.items()}
        return {TAG: "map", "items": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {TAG: "tuple", "items": [encode(v) for v in value]}
    if isinstance(value, (set, frozenset)):
        return {TAG: "frozenset" if isinstance(value, frozenset) else "set", "items": [encode(v) for v in value]}
    if isinstance(value, datetime):  # before date: a datetime is a date
        return {TAG: "datetime", "value": value.isoformat()}
    if isinstance(value, (date, time)):
        return {TAG: "date" if isinstance(value, date) else "time", "value": value.isoformat()}
    if isinstance(value, (bytes, bytearray)):
        return {TAG: "bytes", "base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, MessageContent):
        return {TAG: "content", "value": value.to_dict()}
    if isinstance(value, LLMUsage):
        return {TAG: "usage", "value": value.to_dict()}
    try:
        text = repr(value)
    except Exception as exc:  # a repr that raises (or recurses without end) must not stop the store
        text = f"<{type(value).__name__} whose repr raised {type(exc).__name__}>"
    return {TAG: "repr", "value": text}


def _decode_tagged(data: dict[str, Any]) -> Any:
    tag = data[TAG]
    if tag == "map":
        return {_hashable(decode_value(k)): decode_value(v) for k, v in _items(data, pairs=True)}
    if tag in ("tuple", "set", "frozenset"):
        items = [decode_value(v) for v in _items(data)]
        return tuple(items) if tag == "tuple" else set(map(_hashable, items)) if tag == "set" else frozenset(map(_hashable, items))
    if tag in _FROM_ISO:
        return _iso(_FROM_ISO[tag], data.get("value"), tag)
    if tag == "bytes":
        try:
            return base64.b64decode(data["base64"], validate=True)
        except (KeyError, TypeError, binascii.Error) as exc:
            raise MessageFormatError(f"a 'bytes' value without valid base64: {exc}") from None
    if tag == "content":
        block = content_from_dict(decode_value(data.get("value")))
        if not isinstance(block, MessageContent):
            raise MessageFormatError(f"a 'content' value that is not a text or image block: {data.get('value')!r:.80}")
        return block
    if tag == "usage":
        return _usage(data.get("value"))
    if tag == "repr":
        return _expect(data.get("value"), str, "a 'repr' value")
    raise MessageFormatError(f"unknown tagged value {tag!r}; expected one of map, tuple, set, frozenset, datetime, date, time, bytes, content, usage, repr")


_FROM_ISO: dict[str, Callable[[str], Any]] = {"datetime": datetime.fromisoformat, "date": date.fromisoformat, "time": time.fromisoformat}


def decode_value(value: Any) -> Any:
    """The inverse of ``encode_value``. Raises ``MessageFormatError`` on a malformed tagged value."""
    if isinstance(value, list):
        return [decode_value(v) for v in value]
    if isinstance(value, dict):
        if TAG in value:
            return _decode_tagged(value)
        return {k: decode_value(v) for k, v in value.items()}
    return value


def _items(data: dict[str, Any], pairs: bool = False) -> list[Any]:
    items = data.get("items")
    if not isinstance(items, list) or (pairs and not all(isinstance(p, list) and len(p) == 2 for p in items)):
        raise MessageFormatError(f"a {data[TAG]!r} value whose 'items' is not a list{' of [key, value] pairs' if pairs else ''}")
    return items


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        raise MessageFormatError(f"a dict key or set item that cannot be hashed: {value!r:.80}") from None
    return value


def _iso(parse: Callable[[str], Any], value: Any, what: str) -> Any:
    try:
        return parse(_expect(value, str, f"a {what!r} value"))
    except ValueError as exc:
        raise MessageFormatError(f"a {what!r} value that is not ISO 8601: {value!r} ({exc})") from None


def _expect(value: Any, kind: type, what: str) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MessageFormatError(f"{what} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _usage(value: Any) -> LLMUsage:
    data = _expect(value, dict, "'usage'")
    unknown = set(data) - _USAGE_FIELDS
    if unknown:
        raise MessageFormatError(f"'usage' has unknown counts {sorted(unknown)}; expected some of {sorted(_USAGE_FIELDS)}")
    return LLMUsage(**{k: _expect(v, int, f"'usage.{k}'") for k, v in data.items()})


def message_to_data(message: AgentMessage) -> dict[str, Any]:
    """The JSON-ready dict of one message (the module docstring says the form)."""
    data: dict[str, Any] = {"role": message.role}  # type: ignore[attr-defined]
    for f in fields(message):  # type: ignore[arg-type]
        value = getattr(message, f.name)
        if f.name == "role":
            continue
        if f.name == "timestamp":
            data[f.name] = value.isoformat() if isinstance(value, datetime) else encode_value(value)
        elif f.name == "content":
            data[f.name] = [b.to_dict() if isinstance(b, MessageContent) else encode_value(b) for b in value]
        elif f.name == "usage" and isinstance(value, LLMUsage):
            data[f.name] = value.to_dict()
        else:
            data[f.name] = encode_value(value)
    return data


def message_to_json(message: AgentMessage) -> str:
    """One message as a JSON text (compact, UTF-8 kept as it is)."""
    return json.dumps(message_to_data(message), ensure_ascii=False, separators=(",", ":"))


def _block(raw: Any, index: int) -> Any:
    block = content_from_dict(decode_value(raw))
    bad_image = isinstance(block, ImageContent) and not (isinstance(block.data, str) and isinstance(block.mime_type, str))
    cited_text = isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)  # a text with more (citations)
    if bad_image or (isinstance(raw, dict) and raw.get("type") in ("text", "image") and not isinstance(block, (TextContent, ImageContent)) and not cited_text):
        raise MessageFormatError(f"content[{index}] is a {raw.get('type')!r} block with missing or wrong fields")
    return block


def _field(name: str, value: Any) -> Any:
    if name == "content":
        return [_block(b, i) for i, b in enumerate(_expect(value, list, "'content'"))]
    if name == "timestamp":
        return _iso(datetime.fromisoformat, value, "timestamp")
    if name == "usage":
        return None if value is None else _usage(value)
    if name in _OPTIONAL_STR:
        return None if value is None else _expect(value, str, repr(name))
    if name in ("tool_call_id", "tool_name"):
        return _expect(value, str, repr(name))
    if name == "is_error":
        return _expect(value, bool, "'is_error'")
    if name == "added_tool_names":
        return None if value is None else [_expect(n, str, "'added_tool_names' items") for n in _expect(value, list, "'added_tool_names'")]
    return decode_value(value)  # details


def message_from_data(data: Any, where: str) -> AgentMessage:
    """Rebuild one message from ``message_to_data`` output, checking every field.

    Raises:
        MessageFormatError: naming ``where`` and what is wrong.
    """
    try:
        if not isinstance(data, dict):
            raise MessageFormatError(f"is {type(data).__name__}; expected a message object")
        role = data.get("role")
        cls = _TYPES.get(role) if isinstance(role, str) else None
        if cls is None:
            raise MessageFormatError(f"has role {data.get('role')!r}; expected one of {sorted(_TYPES)}")
        known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
        unknown = set(data) - set(known)
        if unknown:
            raise MessageFormatError(f"has unknown fields {sorted(unknown)} for a {data['role']!r} message")
        kwargs = {}
        for name, f in known.items():
            if name == "role":
                continue
            if name not in data:
                if f.default is MISSING and f.default_factory is MISSING:
                    raise MessageFormatError(f"has no {name!r}")
                continue
            kwargs[name] = _field(name, data[name])
        return cls(**kwargs)
    except MessageFormatError as exc:
        raise MessageFormatError(f"{where}: {exc}") from None
    except RecursionError:
        raise MessageFormatError(f"{where}: nested too deeply to read") from None


def message_from_json(text: "str | bytes", where: str) -> AgentMessage:
    """Rebuild one message from ``message_to_json`` output; ``MessageFormatError`` names ``where``."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
        raise MessageFormatError(f"{where}: not JSON ({exc})") from None
    return message_from_data(data, where)
