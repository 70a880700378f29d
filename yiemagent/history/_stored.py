"""The fast reader of the stored form: a message as ``message_to_data`` writes it, read in one pass.

A documented optimisation beside the reader of record (docs/performance.md "Cost at the
edges"; docs/sessions.md "The JSON form"). ``_json.message_from_data`` reads any stored
form field by field and then checks the message as the agent checks what enters its
history (decision 15, ``normalize_message``): a restart of 10,000 messages spent 70 % of
its time there. Nearly every stored message is in the one form that the library writes
for a message that check leaves as it is: text and image blocks, canonical tool-call
blocks (arguments as an object or as the text a server sent), values without a ``$type``
tag, texts without lone surrogates. ``read_stored``
recognises exactly that form, checks each value inline as it reads it (the checks
``normalize_message`` would make, written out for this form), and builds the message
directly; for anything else it returns None and the reader of record runs, which gives
the message or the refusal naming the entry and the field. Nothing is skipped: what this
reader does not accept goes the long way.

What it gives is what the reader of record gives: tests/extras/test_stored_form.py holds
the two to it for stored data of every kind, valid and mutated (a differential property).
The message may share the lists and dicts of ``data`` (a ``json.loads`` result of its own).

``read_marked`` builds the message of a session row whose writer checked it and marked it
(docs/sessions.md "Rows and their mark"): the form ``read_stored`` takes, without its
checks, since they were made on these very bytes when they were stored. Both read a
content that is a str (a row's one text block, schema 3) as that text block;
``loads_rows`` parses a read's marked rows as one JSON array.

``stored_calls`` reads the tool calls of a message either reader gave back, without
extracting them again: in a message ``normalize_message`` leaves as it is, each raw call
says exactly what ``extract_tool_calls`` reads from it (normalize.py ``_same_call``).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import fields
from datetime import datetime, timezone
from typing import Any, Optional, TypeGuard

from ..extraction import MAX_ID_CHARS, MAX_NAME_CHARS, parse_tool_arguments
from ..normalize import _raw_calls
from ..types import (
    APPROVAL_DECISIONS, AgentMessage, ApprovalMessage, AssistantMessage, CompactionMessage, ImageContent, built, LLMUsage, TextContent, ToolResultMessage,
    UserMessage, is_base64, is_media_type,
)

__all__ = ["loads_row", "loads_rows", "parse_stamp", "read_marked", "read_stored", "stored_calls"]

TAG = "$type"
_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone surrogate, as _bounds.clean_str finds one
_USAGE_FIELDS = frozenset(f.name for f in fields(LLMUsage))
_MAX_DEPTH = 32  # deeper values go the long way (the check's own bound is 64)
_SHORT_INT_BITS = 2000  # _bounds: an int the check writes without asking Python's digit limit
_USER_KEYS = frozenset(("role", "content", "timestamp"))
_ASSISTANT_KEYS = frozenset(("role", "content", "api", "provider", "model", "usage", "stop_reason", "error_message", "timestamp", "output"))
_TOOL_KEYS = frozenset(("role", "tool_call_id", "tool_name", "content", "details", "usage", "added_tool_names", "is_error", "timestamp"))
_APPROVAL_KEYS = frozenset(("role", "tool_call_id", "tool_name", "decision", "arguments", "reason", "timestamp"))
_COMPACTION_KEYS = frozenset(("role", "summary", "through", "timestamp"))


def _clean(text: Any) -> TypeGuard[str]:
    """A str the check keeps as it is: no lone surrogate (``_bounds.clean_str`` would replace it)."""
    return type(text) is str and (text.isascii() or _SURROGATE.search(text) is None)


_SCALARS = frozenset((str, int, float, bool, type(None)))


def _untagged(value: Any, depth: int = 0) -> bool:
    """Whether ``_json.decode_value`` gives ``value`` back as it is: JSON values, no dict holding a ``$type`` key."""
    kind = type(value)
    if kind is dict:
        if depth >= _MAX_DEPTH or TAG in value:
            return False
        items: Any = value.values()
    elif kind is list:
        if depth >= _MAX_DEPTH:
            return False
        items = value
    else:
        return kind in _SCALARS
    for item in items:
        kind = type(item)
        if kind is dict or kind is list:
            if not _untagged(item, depth + 1):
                return False
        elif kind not in _SCALARS:
            return False
    return True


def _plain_json(value: Any, depth: int = 0) -> bool:
    """Whether ``_bounds.json_safe`` (strict or not) gives ``value`` back as it is, and it holds no tag.

    Strs and keys without a lone surrogate, finite floats, ints it writes without asking
    Python's digit limit, plain dicts and lists not nested deeper than ``_MAX_DEPTH``.
    """
    kind = type(value)
    if kind is dict:
        if depth >= _MAX_DEPTH or TAG in value:
            return False
        for key, item in value.items():
            if not _clean(key) or not _plain_json(item, depth + 1):
                return False
        return True
    if kind is list:
        if depth >= _MAX_DEPTH:
            return False
        for item in value:
            if not _plain_json(item, depth + 1):
                return False
        return True
    if kind is str:
        return value.isascii() or _SURROGATE.search(value) is None
    if kind is int:
        bits: int = value.bit_length()
        return bits <= _SHORT_INT_BITS
    if kind is float:
        return math.isfinite(value)
    return value is None or kind is bool


# A session row's UTC timestamp, ISO 8601's basic form (docs/sessions.md "Rows and their mark")
_COMPACT_STAMP = re.compile(r"(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)\.(\d{6})Z", re.ASCII)
_fromisoformat = datetime.fromisoformat


def parse_stamp(text: str) -> datetime:
    """The datetime a stored ``timestamp`` names: ``datetime.fromisoformat``, or the compact UTC form sessions write.

    That form (``20261206T090204.633046Z``) is ISO 8601's basic format, which
    ``fromisoformat`` reads from Python 3.11; on 3.10 it is read here. Raises ``ValueError``.
    """
    try:
        return _fromisoformat(text)
    except ValueError:
        stamp = basic_utc(text)
        if stamp is None:
            raise
        return stamp


def basic_utc(text: str) -> Optional[datetime]:
    """The datetime of a timestamp in the compact form, read without ``fromisoformat`` (Python 3.10's reading); None for any other text."""
    match = _COMPACT_STAMP.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, micro = map(int, match.groups())
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=timezone.utc)


def _stamp(value: Any) -> Optional[datetime]:
    if type(value) is not str:
        return None
    try:
        return parse_stamp(value)
    except ValueError:
        return None


def _usage_ok(value: Any) -> bool:
    return type(value) is dict and value.keys() <= _USAGE_FIELDS and all(type(v) is int for v in value.values())


def _image(block: dict[str, Any]) -> Optional[ImageContent]:
    data, mime_type = block.get("data"), block.get("mime_type")
    if len(block) == 3 and type(data) is str and is_media_type(mime_type) and is_base64(data):
        return ImageContent(data, mime_type)
    return None


def _content(raw: Any) -> Optional[list[Any]]:
    """Text and image blocks only (a user message's, a tool result's), or None; a str is a row's one text block."""
    if type(raw) is not list:
        return [TextContent(raw)] if _clean(raw) else None
    blocks: list[Any] = []
    for block in raw:
        if type(block) is not dict:
            return None
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            if len(block) != 2 or type(text) is not str or not (text.isascii() or _SURROGATE.search(text) is None):
                return None
            blocks.append(TextContent(text))
        elif kind == "image" and (image := _image(block)) is not None:
            blocks.append(image)
        else:
            return None
    return blocks


def _call_ok(entry: dict[str, Any], name: Any, arguments: Any, ids: set[str]) -> bool:
    """A raw call ``extract_tool_calls`` reads as it says (normalize.py ``_same_call``): then the check keeps it.

    Its arguments are a JSON object, or the text of one as an OpenAI-compatible server
    sends them (kept as text; read by ``parse_tool_arguments``, as extraction reads them).
    """
    call_id = entry.get("id")
    if not (_clean(call_id) and 0 < len(call_id) <= MAX_ID_CHARS and call_id not in ids):
        return False  # a missing, long or repeated id is replaced by the check
    ids.add(call_id)
    if not (_clean(name) and len(name) <= MAX_NAME_CHARS):  # a longer name is cut
        return False
    if type(arguments) is str:  # text the parser reads without a problem holds no lone surrogate either
        return parse_tool_arguments(arguments)[1] is None
    return type(arguments) is dict and _plain_json(arguments)


def _calls_ok(block: dict[str, Any], ids: set[str]) -> bool:
    """A ``tool_calls`` block of canonical calls ``{"id", "type": "function", "function": {"name", "arguments"}}``."""
    entries = block.get("tool_calls")
    if len(block) != 2 or type(entries) is not list:
        return False
    for entry in entries:
        function = entry.get("function") if type(entry) is dict and len(entry) == 3 and entry.get("type") == "function" else None
        if type(function) is not dict or len(function) != 2 or not _call_ok(entry, function.get("name"), function.get("arguments"), ids):
            return False
    return True


def _reply_content(raw: Any) -> Optional[list[Any]]:
    """A reply's blocks: text, image and canonical tool-call blocks (kept as they are), or None; a str is a row's one text block."""
    if type(raw) is not list:
        return [TextContent(raw)] if _clean(raw) else None
    out: list[Any] = []
    ids: set[str] = set()  # the calls' ids so far: a repeated one is renamed by the check
    for block in raw:
        if type(block) is not dict:
            return None
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            if len(block) != 2 or type(text) is not str or not (text.isascii() or _SURROGATE.search(text) is None):
                return None
            out.append(TextContent(text))
        elif kind == "tool_calls":
            if not _calls_ok(block, ids):
                return None
            out.append(block)
        elif kind == "tool_call":
            if len(block) != 4 or not _call_ok(block, block.get("name"), block.get("arguments"), ids):
                return None
            out.append(block)
        elif kind == "image" and (image := _image(block)) is not None:
            out.append(image)
        else:
            return None
    return out


# The messages are built as their frozen dataclasses' own __init__ leaves them (every field
# set but ``role``, a class attribute; tests/extras/test_stored_form.py compares the two),
# without its one object.__setattr__ per field: that was a third of the time of this reader.
# The price: each such message keeps its fields in a dict of its own (about 180 bytes more
# than __init__'s inline values); setting them one by one costs a restart of 10,000 about 5 ms.
_new = object.__new__
_built = built  # types.py: as __init__ leaves a message, in one step
_own = object.__setattr__  # a marked row's message gets its __dict__ whole (a frozen dataclass's own __setattr__ refuses)


def _user(data: dict[str, Any]) -> Optional[AgentMessage]:
    if not data.keys() <= _USER_KEYS:
        return None
    content, stamp = _content(data.get("content")), _stamp(data.get("timestamp"))
    if content is None or stamp is None:
        return None
    return _built(UserMessage, content=content, timestamp=stamp)


def _assistant(data: dict[str, Any]) -> Optional[AgentMessage]:
    if not data.keys() <= _ASSISTANT_KEYS:
        return None
    get = data.get
    content, stamp, usage, output = _reply_content(get("content")), _stamp(get("timestamp")), get("usage"), get("output")
    if content is None or stamp is None or not (usage is None or _usage_ok(usage)) or not (output is None or _untagged(output)):
        return None
    api, provider, model, stop_reason, error_message = get("api"), get("provider"), get("model"), get("stop_reason"), get("error_message")
    if not (
        (api is None or _clean(api))
        and (provider is None or _clean(provider))
        and (model is None or _clean(model))
        and (stop_reason is None or _clean(stop_reason))
        and (error_message is None or _clean(error_message))
    ):
        return None
    return _built(
        AssistantMessage,
        content=content,
        api=api,
        provider=provider,
        model=model,
        usage=None if usage is None else LLMUsage(**usage),
        stop_reason=stop_reason,
        error_message=error_message,
        timestamp=stamp,
        output=output,
    )


def _tool(data: dict[str, Any]) -> Optional[AgentMessage]:
    if not data.keys() <= _TOOL_KEYS:
        return None
    get = data.get
    call_id, name, details, usage, names, is_error = get("tool_call_id"), get("tool_name"), get("details", {}), get("usage"), get("added_tool_names"), get("is_error", False)
    content, stamp = _content(get("content")), _stamp(get("timestamp"))
    if content is None or stamp is None or type(call_id) is not str or type(name) is not str or type(is_error) is not bool:
        return None
    if not ((usage is None or _usage_ok(usage)) and _untagged(details) and (names is None or (type(names) is list and all(type(n) is str for n in names)))):
        return None
    return _built(
        ToolResultMessage,
        tool_call_id=call_id,
        tool_name=name,
        content=content,
        details=details,
        usage=None if usage is None else LLMUsage(**usage),
        added_tool_names=names,
        is_error=is_error,
        timestamp=stamp,
    )


def _approval(data: dict[str, Any]) -> Optional[AgentMessage]:
    if not data.keys() <= _APPROVAL_KEYS:
        return None
    get = data.get
    call_id, name, decision, arguments, reason, stamp = get("tool_call_id"), get("tool_name"), get("decision"), get("arguments", {}), get("reason", ""), _stamp(get("timestamp"))
    if stamp is None or type(call_id) is not str or type(name) is not str or type(reason) is not str or type(decision) is not str:
        return None
    if decision not in APPROVAL_DECISIONS or type(arguments) is not dict or not _plain_json(arguments):
        return None
    return ApprovalMessage(call_id, name, decision, arguments, reason, stamp)


def _compaction(data: dict[str, Any]) -> Optional[AgentMessage]:
    if not data.keys() <= _COMPACTION_KEYS:
        return None
    summary, through, stamp = data.get("summary"), data.get("through"), _stamp(data.get("timestamp"))
    if stamp is None or not _clean(summary) or type(through) is not int or through < 0:
        return None
    return CompactionMessage(summary, through, stamp)


_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # undeclared in typeshed; the C scanner json.loads runs (json.decoder.JSONDecoder.raw_decode)


def loads_row(text: "str | bytes") -> Any:
    """``json.loads(text)`` of a stored row, with fewer steps around json's C scanner.

    A row is one object with nothing around it, as str or UTF-8 bytes: ``json.loads``
    would detect the encoding of bytes (UTF-8, the first byte being ``{``, unless the
    second is NUL: UTF-16 or 32, which no scan of ``{`` then NUL reads) and decode them
    with ``surrogatepass``, skip no whitespace, and run its scanner once; this does just
    that. Anything else (whitespace around, another encoding, invalid JSON) goes to
    ``json.loads`` itself, which reads it or raises as always.
    """
    kind = type(text)
    if (kind is bytes and text[:1] == b"{" and text[-1:] == b"}") or (kind is str and text[:1] == "{" and text[-1:] == "}"):
        try:
            decoded = text if isinstance(text, str) else text.decode("utf-8", "surrogatepass")
            value, end = _scan(decoded, 0)
        except (StopIteration, ValueError, RecursionError):
            return json.loads(text)
        if end == len(decoded):
            return value
    return json.loads(text)


def loads_rows(texts: list[bytes]) -> list[Any]:
    """``loads_row`` of each row, the rows read as one JSON array: one scan, each key made once.

    For the rows of a session that its writer marked (docs/sessions.md "Rows and their
    mark"), each one JSON object; a row that is not (a forged mark) makes the array
    unreadable or of another length, and then each row is read alone, None for one that
    is not JSON. The values are what ``loads_row`` gives for each row, but for rows forged
    on purpose to join into an array of as many values, read as that array: a mark set on
    purpose is outside what the mark guards (docs/sessions.md "Rows and their mark").
    """
    if texts:
        try:
            document = (b"[" + b",".join(texts) + b"]").decode("utf-8", "surrogatepass")
            values, end = _scan(document, 0)
            if end == len(document) and len(values) == len(texts):
                return values  # type: ignore[no-any-return]
        except (StopIteration, ValueError, RecursionError):
            pass
    return [_loads_or_none(text) for text in texts]


def _loads_or_none(text: bytes) -> Any:
    try:
        return loads_row(text)
    except (ValueError, RecursionError):
        return None


_READERS: dict[str, Callable[[dict[str, Any]], Optional[AgentMessage]]] = {"user": _user, "assistant": _assistant, "tool": _tool, "approval": _approval, "compaction": _compaction}


def read_stored(data: Any) -> Optional[AgentMessage]:
    """The message ``message_from_data(data, ...)`` gives, when ``data`` is in the stored form; else None.

    Never raises: whatever is not that form (a refusal among it) is left to the reader of record.
    """
    if type(data) is not dict:
        return None
    role = data.get("role")
    reader = _READERS.get(role) if type(role) is str else None
    return None if reader is None else reader(data)


def _blocks(raw: Any) -> list[Any]:
    """Content blocks of a marked row: text and image blocks as objects, any other (a tool-call block) as it is; a str is one text block."""
    if type(raw) is str:  # schema 3's one text block (_json.message_to_row)
        text = _new(TextContent)
        _own(text, "__dict__", {"text": raw, "citations": None})
        return [text]
    blocks: list[Any] = []
    for block in raw:
        kind = block["type"]
        if kind == "text":
            text = _new(TextContent)  # as _built builds a message
            _own(text, "__dict__", {"text": block["text"], "citations": None})
            blocks.append(text)
        elif kind == "image":
            blocks.append(ImageContent(block["data"], block["mime_type"]))
        else:
            blocks.append(block)
    return blocks


_NO_USAGE = {f.name: 0 for f in fields(LLMUsage)}
# A marked row's timestamp is its writer's (``isoformat``, or the basic form): Python 3.11's
# fromisoformat reads both, without parse_stamp's call around it; 3.10's reads the basic form there
_marked_stamp: Callable[[str], datetime] = _fromisoformat if sys.version_info >= (3, 11) else parse_stamp


def _usage(counts: dict[str, int]) -> LLMUsage:
    """``LLMUsage(**counts)`` for the int counts of a marked row, built as ``_built`` builds a message (a third of the time)."""
    values = {**_NO_USAGE, **counts}
    if not values["total_tokens"]:  # LLMUsage.__post_init__: decision 13's total
        values["total_tokens"] = values["input_tokens"] + values["output_tokens"]
    usage = _new(LLMUsage)
    _own(usage, "__dict__", values)
    return usage


def _marked_user(data: dict[str, Any]) -> AgentMessage:
    message = _new(UserMessage)  # as _built builds one, without its call
    _own(message, "__dict__", {"content": _blocks(data["content"]), "timestamp": _marked_stamp(data["timestamp"])})
    return message


def _marked_assistant(data: dict[str, Any]) -> AgentMessage:
    get = data.get
    message = _new(AssistantMessage)
    _own(message, "__dict__", {
        "content": _blocks(data["content"]),
        "api": get("api"),
        "provider": get("provider"),
        "model": get("model"),
        "usage": None if (counts := get("usage")) is None else _usage(counts),
        "stop_reason": get("stop_reason"),
        "error_message": get("error_message"),
        "timestamp": _marked_stamp(data["timestamp"]),
        "output": get("output"),
    })
    return message


def _marked_tool(data: dict[str, Any]) -> AgentMessage:
    get = data.get
    message = _new(ToolResultMessage)
    _own(message, "__dict__", {
        "tool_call_id": data["tool_call_id"],
        "tool_name": data["tool_name"],
        "content": _blocks(data["content"]),
        "details": data["details"] if "details" in data else {},
        "usage": None if (counts := get("usage")) is None else _usage(counts),
        "added_tool_names": get("added_tool_names"),
        "is_error": get("is_error", False),
        "timestamp": _marked_stamp(data["timestamp"]),
    })
    return message


def _marked_approval(data: dict[str, Any]) -> AgentMessage:
    return ApprovalMessage(
        data["tool_call_id"],
        data["tool_name"],
        data["decision"],
        data["arguments"] if "arguments" in data else {},
        data.get("reason", ""),
        _marked_stamp(data["timestamp"]),
    )


def _marked_compaction(data: dict[str, Any]) -> AgentMessage:
    return CompactionMessage(data["summary"], data["through"], _marked_stamp(data["timestamp"]))


_MARKED: dict[str, Callable[[dict[str, Any]], AgentMessage]] = {
    "user": _marked_user, "assistant": _marked_assistant, "tool": _marked_tool, "approval": _marked_approval, "compaction": _marked_compaction,
}


def read_marked(data: dict[str, Any]) -> AgentMessage:
    """The message of a row its writer checked and marked (docs/sessions.md "Rows and their mark"), built without checking it again.

    ``data`` is a row ``read_stored`` accepted when it was written (``_json.message_to_row``
    marks no other), so this gives the message ``read_stored`` gives for it, without its
    checks (tests/extras/test_session_rows.py holds the two to it). Only for rows whose
    mark matches their body: anything else may raise anything (``KeyError``, ``TypeError``),
    and its caller then reads the row the checked way.
    """
    return _MARKED[data["role"]](data)


def stored_calls(message: AssistantMessage) -> list[tuple[str, str]]:
    """``(id, name)`` of each tool call of ``message``, which the check (``normalize_message``) leaves as it is.

    What ``extract_tool_calls`` gives for such a message, read straight from its raw
    call blocks (tests/extras/test_stored_form.py checks it on every loaded message).
    """
    calls = []
    for entry in _raw_calls(message.content):  # the raw calls normalize_reply compared with the calls extracted
        source = entry["function"] if isinstance(entry.get("function"), dict) else entry
        calls.append((entry["id"], source["name"]))
    return calls
