"""Check and normalise what enters the history, so that it can always be sent again (decision 15).

A model or a tool can return anything: ``AssistantMessage(content=None)``, arguments
holding ``NaN``, a ``set`` or nesting a thousand levels deep, ``TextContent(42)``, a
string with lone surrogates. Once such a value is in the history, formatting it raises on
every later round and the conversation is broken for good. So the run passes every
message through this module before it appends it:

- what can be fixed without changing its meaning is fixed: a ``str`` content becomes one
  text block, ``None`` an empty list, a text that is not a str its ``str()``, a lone
  surrogate U+FFFD, a tuple a list;
- what cannot be sent again is replaced by something the model can read: tool-call
  arguments that are not strict JSON become ``{}`` and the call an error result saying
  why (``normalize_reply``), a block that is not content becomes a text note;
- only a reply that is not an ``AssistantMessage`` at all, or whose content is of no
  usable type, is refused whole: the run ends with an error response (decision 11).

Every function returns the very message it was given when nothing had to change.
Tool calls come out canonical: the history keeps the ids, names and arguments the
calls ran with, so the tool results always answer the calls sent back.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import Any, NamedTuple, Optional, TypeGuard

from ._bounds import MAX_ARGUMENTS_DEPTH, NotJSONError, _plainly_json, clean_str, json_safe, loads_json, plain, short_repr
from .errors import MessageFormatError
from ._format_cache import remember_calls
from .extraction import MAX_ID_CHARS, MAX_NAME_CHARS, extract_tool_calls, parse_tool_arguments
from .types import (
    AgentMessage,
    AgentToolCall,
    APPROVAL_DECISIONS,
    ApprovalMessage,
    AssistantMessage,
    CompactionMessage,
    ImageContent,
    LLMUsage,
    MessageContent,
    TextContent,
    ToolResultMessage,
    UserMessage,
    built,
    is_base64,
    is_media_type,
)

__all__ = ["CheckedReply", "normalize_content", "normalize_message", "normalize_reply", "normalize_tool_result"]

logger = logging.getLogger("yiemagent.normalize")

_TOOL_BLOCKS = ("tool_calls", "tool_call")
_OPTIONAL_TEXT_FIELDS = ("api", "provider", "model", "stop_reason", "error_message")


class CheckedReply(NamedTuple):
    """What ``normalize_reply`` made of an ``llm_call``'s return value.

    ``message`` is the reply to append (None when ``error`` says why it cannot be used);
    ``calls`` are its tool calls, in order, exactly as the history will send them back,
    those whose arguments had to be dropped carrying an ``arguments_error``.
    """

    message: Optional[AssistantMessage]
    calls: list[AgentToolCall]
    error: Optional[str]


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return clean_str(value)
    if value is None or isinstance(value, (bool, float)) or (isinstance(value, int) and value.bit_length() <= 2000):
        return str(value)
    return short_repr(value, 2000)  # an int past Python's digit limit: str() would raise


def _citations(citations: Any, where: str) -> Optional[list[Any]]:
    """A text's citations that can be sent again (the same list when it already can): each a JSON object, else dropped.

    A list stays a list (it marks a segment of a split text, ``TextContent.is_segment``);
    anything else is None.
    """
    if citations is None or not isinstance(citations, list):
        return None
    kept = []
    for index, citation in enumerate(list.__iter__(citations)):
        try:
            # two levels down the block's JSON form ({"citations": [...]}), which is held to MAX_DEPTH as a whole
            kept.append(json_safe(citation, _path=f"{where}/citations/{index}", _depth=2) if isinstance(citation, dict) else None)
        except NotJSONError as exc:
            logger.info("a citation was dropped: %s", exc)
            kept.append(None)
    clean = [c for c in kept if c is not None]
    return citations if type(citations) is list and len(clean) == len(citations) and all(a is b for a, b in zip(clean, citations, strict=True)) else clean


def _block(block: Any, where: str) -> Any:
    """One content block that can be sent again (the same object when it already can), or None to drop it."""
    if isinstance(block, TextContent):
        text, citations = _as_text(block.text), _citations(block.citations, where)
        return block if text is block.text and citations is block.citations else TextContent(text, citations)
    if isinstance(block, ImageContent):
        if not (isinstance(block.data, str) and isinstance(block.mime_type, str)):
            return TextContent(f"[an image was dropped: its data or mime_type is not text ({where})]")
        if not is_media_type(block.mime_type):  # it would break the data URL it is sent in (docs/api.md "Images")
            return TextContent(f"[an image was dropped: its mime_type {short_repr(clean_str(block.mime_type), 80)} is not a media type such as image/png ({where})]")
        if not is_base64(block.data):  # it would reach the provider as a data URL it refuses (docs/api.md "Images")
            return TextContent(f"[an image ({block.mime_type}) was dropped: its data is not valid base64 ({where})]")
        return block
    if isinstance(block, str):
        return TextContent(clean_str(block))
    if isinstance(block, dict):
        try:
            return json_safe(block, _path=where)
        except NotJSONError as exc:
            return TextContent(f"[a content block was dropped: {exc}]")
    if isinstance(block, MessageContent):  # a content type of the caller's own: kept if it serialises
        try:
            json_safe(block.to_dict(), _path=where)
            return block
        except Exception as exc:  # to_dict of a foreign type may raise anything
            return TextContent(f"[a {type(block).__name__} block was dropped: {exc}]")
    return TextContent(f"[a {type(block).__name__} was dropped: it is not a content block ({where})]")


def normalize_content(content: Any, where: str = "content") -> list[Any]:
    """A content list that can be sent again (``content`` itself when it already can).

    Raises:
        MessageFormatError: ``content`` is neither a list, a tuple, a str nor None.
    """
    if _clean_texts(content):
        return content
    if content is None:
        return []
    if isinstance(content, str):
        return [TextContent(clean_str(content))]
    if not isinstance(content, (list, tuple)):
        raise MessageFormatError(f"{where} is {type(content).__name__}: {short_repr(content, 80)}; expected a list of content blocks")
    blocks = [_block(b, f"{where}/{i}") for i, b in enumerate(content)]
    if isinstance(content, list) and all(a is b for a, b in zip(blocks, content, strict=True)):
        return content
    return blocks


def _clean_texts(content: Any) -> TypeGuard[list[Any]]:
    """Whether ``content`` is a list of text blocks that ``normalize_content`` keeps as they are (no citations, clean text): checked in one pass."""
    if type(content) is not list:
        return False
    for block in content:
        if type(block) is not TextContent or block.citations is not None:
            return False
        text = block.text  # a clean str: ASCII, or what clean_str keeps as it is (written out: a call per block cost a tenth)
        if type(text) is not str or not (text.isascii() or clean_str(text) is text):
            return False
    return True


def _canonical_call(call: AgentToolCall, nested: bool) -> dict[str, Any]:
    if nested:
        return {"id": call.id, "type": call.type, "function": {"name": call.name, "arguments": call.arguments}}
    return {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}


def _canonical_tool_blocks(content: list[Any], calls: list[AgentToolCall]) -> list[Any]:
    """``content`` with every tool-call block rebuilt from ``calls`` (same order, same places)."""
    remaining = iter(calls)
    out: list[Any] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_calls":
            entries = block.get("tool_calls") or []
            count = sum(1 for e in entries if isinstance(e, dict)) if isinstance(entries, list) else 0
            out.append({"type": "tool_calls", "tool_calls": [_canonical_call(next(remaining), True) for _ in range(count)]})
        elif kind == "tool_call":
            out.append(_canonical_call(next(remaining), False))
        else:
            out.append(block)
    return out


def _same_call(entry: dict[str, Any], call: AgentToolCall) -> bool:
    """Whether a raw call already says exactly what ``call`` says (then it is kept as it is)."""
    function = entry.get("function")
    source = function if isinstance(function, dict) else entry
    raw_arguments = source.get("arguments", entry.get("arguments"))
    return (
        call.arguments_error is None
        and entry.get("id") == call.id
        and source.get("name") == call.name
        # a JSON string is read again the same way each round; a dict must be the one checked
        and (raw_arguments is call.arguments or isinstance(raw_arguments, str) or raw_arguments is None)
    )


def _raw_calls(content: list[Any]) -> list[dict[str, Any]]:
    raw: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_calls" and isinstance(block.get("tool_calls"), list):
            raw.extend(e for e in block["tool_calls"] if isinstance(e, dict))
        elif kind == "tool_call":
            raw.append(block)
    return raw


def _is_tool_block(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") in _TOOL_BLOCKS


def _plain_json(block: dict[str, Any]) -> bool:
    try:
        return json_safe(block) is block
    except NotJSONError:
        return False


def normalize_reply(reply: Any) -> CheckedReply:
    """Check an ``llm_call``'s return value before it enters the history (decision 15).

    Never raises. See the module docstring for what is fixed and what is refused. A reply
    of the form servers send (``_plain_reply``: clean text blocks and canonical tool calls
    whose arguments are JSON text) is read in one pass; anything else is read block by
    block (``_checked_reply``). Both give the same message and calls (a hypothesis
    differential test, tests/extras/test_round_cost.py).
    """
    checked = _plain_reply(reply)
    return checked if checked is not None else _checked_reply(reply)


def _plain_reply(reply: Any) -> Optional[CheckedReply]:
    """The check of a reply that needs no change, in one pass: its calls, each argument parsed once; None for any other reply.

    Such a reply: an ``AssistantMessage`` whose text fields are clean str or None, whose
    usage is an ``LLMUsage`` or None, whose content is a list of ``TextContent`` with a
    clean str and no citations, and of ``{"type": "tool_calls", "tool_calls": [...]}``
    blocks of ``{"id", "type": "function", "function": {"name", "arguments"}}`` entries
    with clean ids (unique, at most ``MAX_ID_CHARS``) and names (at most
    ``MAX_NAME_CHARS``), their arguments JSON text that ``parse_tool_arguments`` reads
    without a problem (``_plain_arguments``: a bare object, when its value needs no change).
    ``_checked_reply`` keeps such a reply as it is and extracts these very calls.
    """
    if type(reply) is not AssistantMessage:
        return None
    content, usage, timestamp = reply.content, reply.usage, reply.timestamp
    # exact types first: isinstance of LLMUsage goes through ABCMeta (dataclasses_json's mixin), a call of its own
    if type(content) is not list or not (type(timestamp) is datetime or isinstance(timestamp, datetime)) or not (usage is None or type(usage) is LLMUsage or isinstance(usage, LLMUsage)):
        return None
    for value in (reply.api, reply.provider, reply.model, reply.stop_reason, reply.error_message):  # _OPTIONAL_TEXT_FIELDS
        # each a clean str (ASCII, or what clean_str keeps as it is), written out: a call per field, id and name was a tenth of the pass
        if value is not None and not (type(value) is str and (value.isascii() or clean_str(value) is value)):
            return None
    calls: list[AgentToolCall] = []
    ids: set[str] = set()
    for block in content:
        kind = type(block)
        if kind is TextContent:
            text = block.text
            if block.citations is not None or not (type(text) is str and (text.isascii() or clean_str(text) is text)):
                return None
            continue
        if kind is not dict or len(block) != 2 or block.get("type") != "tool_calls":
            return None
        entries = block.get("tool_calls")
        if type(entries) is not list:
            return None
        for entry in entries:
            function = entry.get("function") if type(entry) is dict and len(entry) == 3 and entry.get("type") == "function" else None
            if type(function) is not dict or len(function) != 2:
                return None
            call_id, call_name, raw = entry.get("id"), function.get("name"), function.get("arguments")
            if not (type(call_id) is str and 0 < len(call_id) <= MAX_ID_CHARS and (call_id.isascii() or clean_str(call_id) is call_id) and call_id not in ids):
                return None
            if not (type(call_name) is str and len(call_name) <= MAX_NAME_CHARS and (call_name.isascii() or clean_str(call_name) is call_name)) or type(raw) is not str:
                return None
            arguments = _plain_arguments(raw)
            if arguments is None:
                return None
            ids.add(call_id)
            calls.append(built(AgentToolCall, id=call_id, name=call_name, arguments=arguments, type="function", arguments_error=None))
    remember_calls(reply, tuple(calls))  # formatting, approvals and tracing read them from here (extraction.py)
    return _new_tuple(CheckedReply, (reply, calls, None))  # CheckedReply(reply, calls, None) without namedtuple's Python __new__


_new_tuple = tuple.__new__


def _plain_arguments(raw: str) -> Optional[dict[str, Any]]:
    """What ``parse_tool_arguments(raw)`` gives when it finds no problem, else None (any problem: the reply takes the full check).

    A bare JSON object (the text a server sends) is read by ``loads_json`` and checked by
    ``_plainly_json`` here, as ``parse_tool_arguments`` reads and checks it, without its
    layers; any other text goes to ``parse_tool_arguments`` itself.
    """
    if raw[:1] == "{" and raw[-1:] == "}":  # parse_tool_arguments strips nothing off such a text, and reads it once
        try:
            value = loads_json(raw, constants=True)
        except Exception:  # noqa: BLE001  JSONDecodeError, JSONTooDeepError, or what decode raises: a problem (parse_tool_arguments' net too)
            return None
        return value if type(value) is dict and _plainly_json(value, MAX_ARGUMENTS_DEPTH) else None
    arguments, problem = parse_tool_arguments(raw)
    return arguments if problem is None else None


def _checked_reply(reply: Any) -> CheckedReply:
    """``normalize_reply`` for any reply: each block read, fixed or replaced, the tool calls made canonical."""
    if not isinstance(reply, AssistantMessage):
        return CheckedReply(None, [], f"llm_call returned {type(reply).__name__}; expected an AssistantMessage")
    changes: dict[str, Any] = {}
    for name in _OPTIONAL_TEXT_FIELDS:
        value = getattr(reply, name)
        if value is not None and (not isinstance(value, str) or clean_str(value) is not value):
            changes[name] = _as_text(value)
    if reply.usage is not None and not isinstance(reply.usage, LLMUsage):
        changes["usage"] = None
    if not isinstance(reply.timestamp, datetime):
        changes["timestamp"] = datetime.now().astimezone()
    raw_content = reply.content
    if raw_content is None:
        raw_content = []
    elif isinstance(raw_content, str):
        raw_content = [TextContent(raw_content)]
    elif isinstance(raw_content, tuple):
        raw_content = list(raw_content)
    elif not isinstance(raw_content, list):
        return CheckedReply(None, [], f"llm_call returned an AssistantMessage whose content is {type(raw_content).__name__}; expected a list")
    # read every block once, into plain dicts and lists: a block that answers differently each
    # time it is read must not give extraction one set of calls and the history another
    snapshot = plain(raw_content, 5)
    raw_content = snapshot
    base = reply if raw_content is reply.content and not changes else replace(reply, content=raw_content, **changes)
    _, calls, _ = extract_tool_calls(base)  # robust: arguments that are not strict JSON become an arguments_error
    content = [b if _is_tool_block(b) else _block(b, f"content/{i}") for i, b in enumerate(raw_content)]
    raw_calls = _raw_calls(raw_content)
    if not all(_plain_json(b) for b in raw_content if _is_tool_block(b)) or not (
        len(raw_calls) == len(calls) and all(_same_call(r, c) for r, c in zip(raw_calls, calls, strict=True))
    ):
        content = _canonical_tool_blocks(content, calls)
    unchanged = isinstance(reply.content, list) and len(content) == len(reply.content) and all(a is b for a, b in zip(content, reply.content, strict=True))
    message = base if unchanged else replace(base, content=content)
    if message is not reply:
        logger.info("an LLM reply was normalised before entering the history (decision 15)")
    return CheckedReply(message, calls, None)


def normalize_tool_result(message: ToolResultMessage) -> ToolResultMessage:
    """A tool result that can be sent again: its content blocks checked like a reply's (decision 15).

    ``details`` is not sent to the LLM and is kept as it is.
    """
    try:
        content = message.content if _clean_texts(message.content) else normalize_content(message.content, f"result of {message.tool_name!r}")
    except MessageFormatError as exc:
        return replace(message, content=[TextContent(f"[the tool's content was dropped: {exc}]")], is_error=True)
    changes: dict[str, Any] = {}
    if content is not message.content:
        changes["content"] = content
    if message.usage is not None and not isinstance(message.usage, LLMUsage):
        changes["usage"] = None
    return replace(message, **changes) if changes else message


def normalize_message(message: AgentMessage) -> AgentMessage:
    """Any message a caller hands the agent, checked before it enters the history (decision 15).

    A ``UserMessage`` whose content is a str gets it as one text block (it used to be
    accepted and its text dropped); a text that is not a str, a part that is not JSON
    (NaN, a set) or not a content block is refused, since a caller can fix it.

    A ``timestamp`` given as ISO 8601 text becomes the ``datetime`` it names; any other
    that is not a ``datetime`` is refused (a reply's is replaced by the time it arrived,
    ``normalize_reply``): the history's JSON form stores a datetime, and a message stored
    with anything else would never load again (docs/sessions.md).

    Raises:
        MessageFormatError: the message cannot be sent to an LLM or stored; the text says why.
    """
    if isinstance(message, (UserMessage, ToolResultMessage, ApprovalMessage, CompactionMessage)) and not isinstance(message.timestamp, datetime):
        message = replace(message, timestamp=_timestamp(message))
    if isinstance(message, UserMessage):
        if message.content is None or not isinstance(message.content, (list, tuple, str)):
            raise MessageFormatError(
                f"UserMessage content is {type(message.content).__name__}; expected a list of content blocks or a str"
            )
        for index, block in enumerate(message.content if isinstance(message.content, (list, tuple)) else []):
            if isinstance(block, TextContent) and not isinstance(block.text, str):
                raise MessageFormatError(f"UserMessage content[{index}] is TextContent({short_repr(block.text, 60)}); its text must be a str")
            if isinstance(block, dict):
                try:
                    json_safe(block, _path=f"content[{index}]")
                except NotJSONError as exc:
                    raise MessageFormatError(f"UserMessage {exc}") from None
            elif not isinstance(block, (str, MessageContent)):
                raise MessageFormatError(f"UserMessage content[{index}] is {type(block).__name__}; expected a content block")
        content = normalize_content(message.content, "UserMessage content")
        return message if content is message.content else replace(message, content=content)
    if isinstance(message, AssistantMessage):
        checked = normalize_reply(message)
        if checked.message is None:
            raise MessageFormatError(checked.error or "unusable AssistantMessage")
        return checked.message
    if isinstance(message, ToolResultMessage):
        if not isinstance(message.content, (list, tuple, str)) and message.content is not None:
            raise MessageFormatError(f"ToolResultMessage content is {type(message.content).__name__}; expected a list of content blocks")
        return normalize_tool_result(message)
    if isinstance(message, ApprovalMessage):  # never sent; checked so that it stores and loads again
        return _normalize_approval(message)
    if isinstance(message, CompactionMessage):  # never sent as it is; checked so that it stores and loads again
        return _normalize_compaction(message)
    raise MessageFormatError(f"{type(message).__name__} is not a UserMessage, AssistantMessage, ToolResultMessage, ApprovalMessage or CompactionMessage")


def _timestamp(message: AgentMessage) -> datetime:
    """The datetime an ISO 8601 ``timestamp`` text names (the JSON form's reader, ``datetime.fromisoformat``)."""
    kind = type(message).__name__
    if not isinstance(message.timestamp, str):
        raise MessageFormatError(f"{kind} timestamp is {type(message.timestamp).__name__}; expected a datetime or ISO 8601 text")
    try:
        return datetime.fromisoformat(message.timestamp)
    except ValueError:
        raise MessageFormatError(f"{kind} timestamp {short_repr(message.timestamp, 60)} is not ISO 8601") from None


def _normalize_compaction(message: CompactionMessage) -> CompactionMessage:
    """A summary checked (docs/sessions.md "Long conversations"): its summary a str (a lone surrogate becomes U+FFFD), ``through`` an int of at least 0."""
    if not isinstance(message.summary, str):
        raise MessageFormatError(f"CompactionMessage summary is {type(message.summary).__name__}; expected a str")
    if isinstance(message.through, bool) or not isinstance(message.through, int) or message.through < 0:
        raise MessageFormatError(f"CompactionMessage through is {short_repr(message.through, 40)}; expected an int of at least 0")
    summary = clean_str(message.summary)
    return message if summary is message.summary else replace(message, summary=summary)


def _normalize_approval(message: ApprovalMessage) -> ApprovalMessage:
    """An approval step checked: its ids and texts are str, its decision known, its arguments a JSON object.

    Its arguments are those an approved call runs with, so they are held to tool-call
    arguments' rule (decision 14): a lone surrogate is a ``MessageFormatError`` naming its
    place, not U+FFFD (docs/failures.md "Arguments a model sends").
    """
    for name in ("tool_call_id", "tool_name", "reason"):
        if not isinstance(getattr(message, name), str):
            raise MessageFormatError(f"ApprovalMessage {name} is {type(getattr(message, name)).__name__}; expected a str")
    if message.decision not in APPROVAL_DECISIONS:
        raise MessageFormatError(f"ApprovalMessage decision is {short_repr(message.decision, 40)}; expected one of {APPROVAL_DECISIONS}")
    if not isinstance(message.arguments, dict):
        raise MessageFormatError(f"ApprovalMessage arguments are {type(message.arguments).__name__}; expected a dict")
    try:  # the arguments an approved call runs with: a lone surrogate is refused, never made U+FFFD (docs/failures.md)
        arguments = json_safe(message.arguments, strict_text=True, _path="arguments")
    except NotJSONError as exc:
        raise MessageFormatError(f"ApprovalMessage {exc}") from None
    return message if arguments is message.arguments else replace(message, arguments=arguments)
