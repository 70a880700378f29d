"""The JSON form of one message, shared by ``save_history``/``load_history`` and ``SQLiteSession``.

A message's own fields take the form ``to_dict()`` gives them (spec §19 "Message Types";
docs/sessions.md "The JSON form"): ``role``, content blocks as ``{"type": "text", "text": ...}`` /
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
an int of more ``{"$type": "int", "hex": "-0x1f..."}``            int
than 1,920 bits
content, usage ``{"$type": "content"|"usage", "value": {...}}`` TextContent, ImageContent, LLMUsage
anything else  ``{"$type": "repr", "value": repr(x)}``          the repr string (lossy)
============== ================================================ ======================

The last row is what makes encoding total: whatever a tool puts in ``details``, storing
the message never fails (docs/sessions.md). Two more things would make ``json`` raise and
are kept instead: a str holding a lone surrogate (``"\ud800"``, as a value or a key) makes
the whole document ASCII, the surrogate written as the escape ``\ud800``, which ``json``
reads back as the same str (``utf8_json``); an int too long for Python's int-to-str limit
(4,300 digits by default, 640 at the lowest setting) is written in hex, which has no
limit. NaN and infinities are written as Python's json module writes them.

Decoding checks every field and raises ``MessageFormatError`` naming the entry (the
caller says which: ``messages[3]``, a session's row) and the field.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import zlib
from dataclasses import MISSING, fields
from collections.abc import Callable
from datetime import date, datetime, time
from typing import Any, Optional, cast

from .._bounds import short_repr
from ..errors import MessageFormatError
from ..types import (
    AgentMessage,
    ApprovalMessage,
    AssistantMessage,
    CompactionMessage,
    ImageContent,
    LLMUsage,
    MessageContent,
    TextContent,
    ToolResultMessage,
    UserMessage,
    content_from_dict,
)
from ..normalize import normalize_message
from ..typed._codecs import to_json_value
from ._stored import loads_row, parse_stamp, read_stored

__all__ = [
    "decode_value",
    "encode_value",
    "message_from_data",
    "message_from_json",
    "message_to_data",
    "message_to_json",
    "message_to_row",
    "row_mark",
    "read_fields",
    "utf8_json",
]

logger = logging.getLogger("yiemagent.history")

TAG = "$type"
_USAGE_FIELDS = frozenset(f.name for f in fields(LLMUsage))
_TYPES: dict[str, type[AgentMessage]] = {"user": UserMessage, "assistant": AssistantMessage, "tool": ToolResultMessage, "approval": ApprovalMessage, "compaction": CompactionMessage}
MAX_DEPTH = 200  # values nested deeper are stored as a repr tag (Python's recursion limit is near 1000)
_OPTIONAL_STR = {"api", "provider", "model", "stop_reason", "error_message"}
# Ints of at most this many bits (578 decimal digits) stay JSON numbers: Python converts an
# int to or from decimal text only up to sys.get_int_max_str_digits() digits (4,300 by
# default, never below 640 when limited), so a longer one is written in hex (no limit).
_PLAIN_INT_BITS = 1920


def encode_value(value: Any) -> Any:
    """A JSON-ready form of ``value`` that ``decode_value`` turns back into it (see the table above).

    Total, as the module says: a container that holds itself, or one nested more than
    ``MAX_DEPTH`` levels deep (where Python's recursion would give out), is stored as a
    ``repr`` tag saying so, rather than making the store raise ``RecursionError``.
    """
    return _encode(value, 0, set())


def _encode(value: Any, depth: int, active: set[int]) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _PLAIN_INT_BITS:
        return {TAG: "int", "hex": hex(value)}
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
    except Exception:  # a value whose own methods raise (an isoformat, a dict's items()): kept as its repr
        return _repr_tag(value)
    finally:
        if container:
            active.discard(id(value))


def _repr_tag(value: Any) -> dict[str, str]:
    try:
        text = repr(value)
    except Exception as exc:  # a repr that raises (or recurses without end) must not stop the store
        text = f"<{type(value).__name__} whose repr raised {type(exc).__name__}>"
    return {TAG: "repr", "value": text}


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
    if isinstance(value, (TextContent, ImageContent)) and _plain_block(value.to_dict()):
        return {TAG: "content", "value": value.to_dict()}
    if isinstance(value, LLMUsage) and (counts := _usage_counts(value)) is not None:
        return {TAG: "usage", "value": counts}
    return _repr_tag(value)  # what decoding could not rebuild as it was, e.g. TextContent(5)


def _plain_block(data: dict[str, Any]) -> bool:
    """Whether a text or image block's fields are strs, as ``_block`` reads them back."""
    return all(isinstance(v, str) for k, v in data.items() if k != "type")


def _usage_counts(usage: LLMUsage) -> "dict[str, int] | None":
    """``usage.to_dict()`` when every count is an int that stays a JSON number, else None."""
    counts = usage.to_dict()
    if all(type(v) is int and v.bit_length() <= _PLAIN_INT_BITS for v in counts.values()):
        return cast("dict[str, int]", counts)  # each value was just checked to be an int
    return None


def _decode_tagged(data: dict[str, Any]) -> Any:
    tag = data[TAG]
    if not isinstance(tag, str):  # {"$type": []}: no tag this form writes (a list would not even hash)
        tag = short_repr(tag, 80)
    if tag == "int":
        digits = _expect(data.get("hex"), str, "an 'int' value's 'hex'")
        try:
            return int(digits, 16)
        except ValueError:
            raise MessageFormatError(f"an 'int' value that is not hex: {digits!r:.80}") from None
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
        except (KeyError, TypeError, ValueError) as exc:  # binascii.Error, or a str that is not ASCII
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
    raise MessageFormatError(f"unknown tagged value {tag!r}; expected one of map, tuple, set, frozenset, int, datetime, date, time, bytes, content, usage, repr")


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
    """The JSON-ready dict of one message (the module docstring says the form).

    The message is first made what ``message_from_data`` reads back (``_as_an_agent_holds``):
    a str content becomes a text block, and a message no agent would take is refused here
    rather than stored unreadable. A message from an agent's history is stored as it is.

    Raises:
        MessageFormatError: the message cannot be sent to an LLM (e.g. a UserMessage whose
            content holds an int); the text names the field.
    """
    message = _as_an_agent_holds(message)
    data: dict[str, Any] = {"role": message.role}
    for f in fields(message):  # type: ignore[arg-type]
        value = getattr(message, f.name)
        if f.name == "role" or (f.name == "output" and value is None):  # no answer: the form stays what it was
            continue
        if f.name == "timestamp":
            data[f.name] = value.isoformat() if isinstance(value, datetime) else encode_value(value)
        elif f.name == "content":
            data[f.name] = [_block_data(b) for b in value]
        elif f.name == "usage" and isinstance(value, LLMUsage):
            data[f.name] = _usage_counts(value)
            if data[f.name] is None:  # counts that are not ints (a tool's LLMUsage(1.5)) would not load again
                logger.warning("a %s message's usage %r has counts that are not ints; stored without its usage", message.role, value)
        elif f.name == "output" and value is not None:  # a typed answer: its JSON form (docs/api.md "Typed answers")
            try:
                data[f.name] = to_json_value(value)
            except (TypeError, ValueError):
                data[f.name] = encode_value(value)
        else:
            data[f.name] = encode_value(value)
    return data


def _block_data(block: Any) -> Any:
    """One content block's stored form: a content object's ``to_dict()``, a dict block encoded.

    A text's citations are a provider's JSON: encoded as a dict block is, so that a
    ``"$type"`` key in one comes back as it was rather than being read as a tag.
    """
    if isinstance(block, TextContent) and block.citations:
        return encode_value(block.to_dict())
    return block.to_dict() if isinstance(block, MessageContent) else encode_value(block)


def _as_an_agent_holds(message: AgentMessage) -> AgentMessage:
    """``message`` checked as the agent checks what enters its history (``normalize_message``, decision 15).

    A ``UserMessage`` always goes through the check: it is the one that may be refused
    (``MessageFormatError`` naming the block). Any other message only when a glance shows
    it needs it (a block that is not an object, or not a text or image block with str
    fields, a usage that is not an ``LLMUsage``, a timestamp that is not a ``datetime``,
    which the check reads or refuses as the agent does, a reply's field of the wrong type):
    the check only mends those, it costs more than the rest of storing a reply, and loading
    checks the message whole anyway.
    """
    if isinstance(message, (UserMessage, ApprovalMessage, CompactionMessage)):
        return normalize_message(message)
    content = message.content  # type: ignore[attr-defined]
    usage = message.usage  # type: ignore[attr-defined]
    if (
        not isinstance(content, list)
        or not all(_stored_as_it_is(b) for b in content)
        or (usage is not None and not isinstance(usage, LLMUsage))
        or not isinstance(message.timestamp, datetime)
        or (isinstance(message, AssistantMessage) and any(not isinstance(getattr(message, n), (str, type(None))) for n in _OPTIONAL_STR))
    ):
        return normalize_message(message)
    return message


def _stored_as_it_is(block: Any) -> bool:
    """Whether a reply's or a tool result's block can be written as it is (else the check mends it first).

    A dict goes through ``encode_value``; a text or image block with str fields is its
    ``to_dict()``. Anything else the check mends or vets: a ``TextContent(5)`` or an
    ``ImageContent`` whose data is not a str, written as it is, would be refused by loading
    (``_block``), and a content type of the caller's own has a ``to_dict()`` that may raise
    or hold what JSON cannot (the check drops such a block). docs/sessions.md: a message an
    agent would take is never written in a form that cannot be loaded.
    """
    if isinstance(block, TextContent):
        return isinstance(block.text, str) and block.citations is None  # citations are vetted by the check
    if isinstance(block, ImageContent):
        return isinstance(block.data, str) and isinstance(block.mime_type, str)
    return isinstance(block, dict)


def utf8_json(data: Any, **options: Any) -> bytes:
    """``json.dumps(data, **options)`` as UTF-8, whatever strs ``data`` holds.

    Non-ASCII text is written as it is; a document holding a lone surrogate (which UTF-8
    cannot encode) is written all in ASCII instead, the surrogate as its ``\\udXXX``
    escape, which ``json.loads`` reads back as the very same str.
    """
    text = json.dumps(data, ensure_ascii=False, **options)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(data, ensure_ascii=True, **options).encode("ascii")


def message_to_json(message: AgentMessage) -> bytes:
    """One message as compact JSON in UTF-8 (``utf8_json``); raises as ``message_to_data`` does."""
    return utf8_json(message_to_data(message), separators=(",", ":"))


# A row leaves out what reading it gives anyway (docs/sessions.md "Rows and their mark"):
# the fields at their defaults, zero counts, a total that is input + output
_ROW_DEFAULTS: tuple[tuple[str, Any], ...] = (
    ("api", None), ("provider", None), ("model", None), ("stop_reason", None), ("error_message", None), ("usage", None),
    ("details", {}), ("added_tool_names", None), ("is_error", False), ("arguments", {}), ("reason", ""),
)
_UTC_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d{6})?\+00:00", re.ASCII)


row_mark: Callable[[bytes], int] = zlib.crc32  # zlib's own function: no call of ours around it, once a row read back
"""The mark of a row whose writer checked it: the CRC-32 of its body, so that an edited body no longer carries it."""


def _plain_text(block: Any) -> bool:
    """Whether a stored block is a text block and nothing more (``{"type": "text", "text": str}``): a row writes it as its text."""
    return type(block) is dict and len(block) == 2 and block.get("type") == "text" and type(block.get("text")) is str


def message_to_row(message: AgentMessage) -> "tuple[bytes, Optional[int]]":
    """A session row of ``message``: its compact JSON form (UTF-8, ``utf8_json``) and its mark, or None.

    The form is ``message_to_data``'s without what reading it gives back anyway: fields
    at their defaults, zero counts in ``usage`` and a total that is ``input + output``; a
    UTC timestamp is written in ISO 8601's basic form (``20261206T090204.633046Z``,
    ``parse_stamp``); a content of one text block (no citations) is written as its text
    (``"content": "hi"``, schema 3). Every reader of the JSON form reads it.

    The mark (``row_mark`` of the body) is given when the fast reader of the stored form
    takes the row (``_stored.read_stored``): then the row is what the check of decision 15
    keeps as it is, and a session that finds the mark with the body it was computed from
    builds the message without checking it again (``_stored.read_marked``). Any other row
    (details holding tagged values, say) is unmarked, and checked each time it is read.

    Raises:
        MessageFormatError: as ``message_to_data`` does.
    """
    data = message_to_data(message)
    for name, default in _ROW_DEFAULTS:
        if name in data and data[name] == default and type(data[name]) is type(default):
            del data[name]
    usage = data.get("usage")
    if usage is not None:
        total = usage["input_tokens"] + usage["output_tokens"]
        data["usage"] = {k: v for k, v in usage.items() if v and not (k == "total_tokens" and v == total)}
    content = data.get("content")
    if type(content) is list and len(content) == 1 and _plain_text(content[0]):
        data["content"] = content[0]["text"]
    stamp = data.get("timestamp")
    match = _UTC_ISO.fullmatch(stamp) if type(stamp) is str else None
    if match is not None:
        year, month, day, hour, minute, second, fraction = match.groups()
        data["timestamp"] = f"{year}{month}{day}T{hour}{minute}{second}{fraction or '.000000'}Z"
    body = utf8_json(data, separators=(",", ":"))
    return body, (row_mark(body) if read_stored(loads_row(body)) is not None else None)


def _block(raw: Any, index: int) -> Any:
    block = content_from_dict(decode_value(raw))
    bad_image = isinstance(block, ImageContent) and not (isinstance(block.data, str) and isinstance(block.mime_type, str))
    cited_text = isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)  # a text with more (citations)
    if bad_image or (isinstance(raw, dict) and raw.get("type") in ("text", "image") and not isinstance(block, (TextContent, ImageContent)) and not cited_text):
        raise MessageFormatError(f"content[{index}] is a {raw.get('type')!r} block with missing or wrong fields")
    if not isinstance(block, (TextContent, ImageContent, dict)):  # what message_to_data writes is always an object
        raise MessageFormatError(f"content[{index}] is {type(block).__name__} {short_repr(block, 60)}; expected a content block (a JSON object)")
    return block


def _field(name: str, value: Any) -> Any:
    if name == "content":
        if isinstance(value, str):  # a row's one text block, written as its text (message_to_row)
            return [TextContent(value)]
        return [_block(b, i) for i, b in enumerate(_expect(value, list, "'content'"))]
    if name == "timestamp":
        return _iso(parse_stamp, value, "timestamp")
    if name == "usage":
        return None if value is None else _usage(value)
    if name in _OPTIONAL_STR:
        return None if value is None else _expect(value, str, repr(name))
    if name in ("tool_call_id", "tool_name", "decision", "reason", "summary"):
        return _expect(value, str, repr(name))
    if name == "through":
        return _expect(value, int, "'through'")
    if name == "is_error":
        return _expect(value, bool, "'is_error'")
    if name == "added_tool_names":
        return None if value is None else [_expect(n, str, "'added_tool_names' items") for n in _expect(value, list, "'added_tool_names'")]
    return decode_value(value)  # details


def message_from_data(data: Any, where: str) -> AgentMessage:
    """Rebuild one message from ``message_to_data`` output, checking every field.

    The message comes back as the agent would hold it, checked once (``normalize_message``,
    decision 15), so an agent starting from it need not check it again: the stored form
    of a message that check keeps is read by ``_stored.read_stored`` (one pass, the same
    message; docs/performance.md), anything else field by field (``read_fields``). The
    message may share the lists and dicts of ``data``.

    Raises:
        MessageFormatError: naming ``where`` and what is wrong.
    """
    message = read_stored(data)
    return message if message is not None else read_fields(data, where)


def read_fields(data: Any, where: str) -> AgentMessage:
    """``message_from_data`` the long way, for any stored form: field by field, then ``normalize_message``."""
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
        # checked as the agent checks what enters its history (decision 15), so that a bad
        # block is named here, with the file or row, and an agent need not check it again
        return normalize_message(cls(**kwargs))
    except MessageFormatError as exc:
        raise MessageFormatError(f"{where}: {exc}") from None
    except RecursionError:
        raise MessageFormatError(f"{where}: nested too deeply to read") from None


def message_from_json(text: "str | bytes", where: str) -> AgentMessage:
    """Rebuild one message from ``message_to_json`` output; ``MessageFormatError`` names ``where``."""
    try:
        data = loads_row(text)
    except (TypeError, ValueError, RecursionError) as exc:
        raise MessageFormatError(f"{where}: not JSON ({exc})") from None
    return message_from_data(data, where)

