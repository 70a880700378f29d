"""Context preparation and the OpenAI chat format (spec §14 prepareContext, formatMsgForLLM).

``format_msg_for_llm`` makes the dict every ``llm_call`` receives: ``{"messages": [...],
"tools": [...]}`` in OpenAI's chat-completions format (decision 5). The HTTP clients of
``yiemagent.llm`` take this dict and nothing else, so only ``llm_call`` changes between
providers. Two keys beyond OpenAI's ride on ``tool`` messages for clients that need
them: ``name`` (the tool's name) and ``is_error``; the OpenAI client does not send them.

A message's wire dict is made once and remembered (issue 12): messages are values, so
their wire form cannot change; and the latest request's wires are remembered on the
agent's history list, reused while the history only grew (``_history_list``).
docs/performance.md says what is cached, where, and what invalidates it.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, NamedTuple, Optional

from ._frozen import FrozenDict, freeze
from ._history_list import HistorySnapshot
from .errors import MessageFormatError
from .extraction import arguments_json, extract_tool_calls
from .messages import AgentMessage, AssistantMessage, ImageContent, TextContent, ToolResultMessage, UserMessage, text_of
from .tooling import AgentContext, AgentState, AgentTool

__all__ = [
    "assistant_message_to_openai",
    "format_msg_for_llm",
    "openai_to_user_message",
    "prepare_context",
    "tool_result_message_to_openai",
    "tool_to_openai",
    "user_message_to_openai",
]


def prepare_context(state: AgentState, event_sink: Any = None) -> AgentContext:
    """The context of one LLM round: system prompt, messages and tools (spec §14 prepareContext).

    Deviation: the spec deep-copies the messages on every round. Messages here are
    immutable values, so the default copies the list (a hook may add, drop or reorder
    entries of ``ctx.messages`` without touching the history) and shares the messages —
    O(n) pointer copies instead of a deep copy of the whole history per round. Override
    point: filter tools, change the system prompt, inject or prune messages.

    The copy is a ``HistorySnapshot``: a list that also records which ``History`` it was
    taken from and that history's edit count, so that ``format_msg_for_llm`` can tell,
    without comparing messages, that only appends happened since its previous request
    (issue 12, docs/performance.md). A hook that changes ``ctx.messages`` in any way, or
    replaces it, makes the formatter look at every message's own cache instead.
    """
    return AgentContext(state.system_prompt, HistorySnapshot(state.messages), state.tools)


def _image_url(block: ImageContent) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": f"data:{block.mime_type};base64,{block.data}"}}


def user_message_to_openai(msg: UserMessage) -> dict[str, Any]:
    """A user message; its content is one string when it is all text (every server takes that)."""
    if all(isinstance(b, TextContent) for b in msg.content) and len(msg.content) <= 1:
        return {"role": "user", "content": msg.content[0].text if msg.content else ""}
    parts: list[Any] = []
    for block in msg.content:
        if isinstance(block, TextContent):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageContent):
            parts.append(_image_url(block))
        elif isinstance(block, dict):
            parts.append(block)  # a part the user sent in OpenAI form (e.g. an image URL): pass it on
    return {"role": "user", "content": parts}


def assistant_message_to_openai(msg: AssistantMessage) -> dict[str, Any]:
    """An assistant message with its tool calls, arguments re-serialised as valid JSON (decision 9).

    Ids are the ones ``extract_tool_calls`` gives (synthetic where the server sent none), so
    they match the tool results. Arguments that were not valid JSON go back as ``{}``:
    several servers reject a history holding invalid JSON, and the call's error result
    already tells the model what was wrong. ``content`` is "" rather than null beside
    tool calls: OpenAI accepts both, some servers (llama.cpp) fail on null.
    """
    _, calls, _ = extract_tool_calls(msg)
    wire: dict[str, Any] = {"role": "assistant", "content": text_of(msg.content)}
    thinking = [b for b in msg.content if isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking")]
    if thinking:
        wire["thinking_blocks"] = thinking  # for providers that need reasoning back (Anthropic's signed blocks); OpenAIClient drops it
    if calls:
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": call.type,  # "custom" and "function_call" too: OpenAIClient sends each back as the server sent it
                "function": {"name": call.name, "arguments": arguments_json(call.arguments)},
            }
            for call in calls
        ]
    return wire


def tool_result_message_to_openai(msg: ToolResultMessage) -> dict[str, Any]:
    """A tool result; its content goes as one string (decision 9), images as a note."""
    pieces = []
    for block in msg.content:
        if isinstance(block, TextContent):
            pieces.append(block.text)
        elif isinstance(block, ImageContent):
            pieces.append(f"[{block.mime_type} image omitted]")
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            pieces.append(block["text"])
    return {
        "role": "tool",
        "tool_call_id": msg.tool_call_id,
        "content": "\n".join(pieces),
        "name": msg.tool_name,
        "is_error": msg.is_error,
    }


def tool_to_openai(tool: AgentTool) -> dict[str, Any]:
    """A tool definition in OpenAI's function format."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.input_schema},
    }


def _message_to_openai(msg: AgentMessage) -> dict[str, Any] | None:
    if isinstance(msg, UserMessage):
        return user_message_to_openai(msg)
    if isinstance(msg, AssistantMessage):
        return assistant_message_to_openai(msg)
    if isinstance(msg, ToolResultMessage):
        return tool_result_message_to_openai(msg)
    return None


class _MessageCache:
    """What ``format_msg_for_llm`` remembers about one message; never part of its value.

    Kept in a private attribute of the message, so it lives and dies with the message.
    ``wire`` is the message's read-only wire dict (``_SKIP`` for a kind of message that is
    not sent), None until first needed. A copy of the message (``copy.deepcopy``,
    ``pickle``) starts with an empty cache; ``copy.copy`` shares it, which is right since
    the copy holds the very same field objects.

    Thread safety: any thread may read or set ``wire`` (one attribute store, atomic); two
    threads that fill it at once compute equal values.
    """

    __slots__ = ("wire",)

    def __init__(self) -> None:
        self.wire: Any = None

    def __deepcopy__(self, memo: dict[int, Any]) -> "_MessageCache":
        return _MessageCache()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_MessageCache, ())


class _LatestRequest(NamedTuple):
    """The latest request made from a ``History``, kept on it: the wires of ``history[:length]``
    as they were when its ``edits`` was ``edits`` (see ``_history_wires``)."""

    edits: int
    length: int
    wires: list[dict[str, Any]]


_CACHE_ATTR = "_yiemagent_cache"  # on a message: its _MessageCache
_LATEST_ATTR = "_yiemagent_latest_request"  # on a History: its _LatestRequest
_SKIP = FrozenDict()  # the cached "wire" of a message that is not sent (an unknown AgentMessage subclass)


def _cache_of(msg: AgentMessage) -> Optional[_MessageCache]:
    cache = getattr(msg, _CACHE_ATTR, None)
    if cache is None:
        cache = _MessageCache()
        try:
            object.__setattr__(msg, _CACHE_ATTR, cache)  # frozen dataclass: bypass its __setattr__
        except AttributeError:  # an entry with no __dict__ (no AgentMessage: those all have one): not cached
            return None
    return cache


def _wire_of(msg: AgentMessage) -> dict[str, Any]:
    """The read-only wire dict of one message, made on first use and then remembered."""
    cache = _cache_of(msg)
    wire = cache.wire if cache is not None else None
    if wire is None:
        plain = _message_to_openai(msg)
        wire = _SKIP if plain is None else freeze(plain)
        if cache is not None:
            cache.wire = wire
    return wire


def _wires_of(messages: list[AgentMessage]) -> list[dict[str, Any]]:
    return [wire for wire in map(_wire_of, messages) if wire is not _SKIP]


def _history_wires(given: Any) -> list[dict[str, Any]]:
    """The wire dicts of a context's messages, in order (the system message aside).

    When ``given`` is a ``HistorySnapshot`` that still has its lineage (the default
    ``prepare_context`` made it and nobody changed it), and its source ``History`` holds a
    record of its latest request made at the same ``edits`` count and no longer than
    ``given``, then ``given`` begins with that request's very messages (only appends
    happened in between: ``_history_list``), so its wires are reused and only the
    messages after it are looked at. Otherwise — a plain list, a changed snapshot, a
    history edited since — every wire comes from each message's own cache: one dict
    lookup per message, still exact. The record is replaced by this request's whenever
    ``given`` has a lineage. Nothing here compares messages: the edit count says it all.
    """
    lineage = given.lineage if isinstance(given, HistorySnapshot) else None
    latest = getattr(lineage.source, _LATEST_ATTR, None) if lineage is not None else None
    if latest is not None and latest.edits == lineage.edits and latest.length <= lineage.length:  # type: ignore[union-attr]
        wires = latest.wires + _wires_of(given[latest.length : lineage.length])  # type: ignore[union-attr]
    else:
        wires = _wires_of(given)
    # the lineage is read again last: a snapshot changed meanwhile has dropped it (first thing)
    if lineage is not None and given.lineage is lineage:
        setattr(lineage.source, _LATEST_ATTR, _LatestRequest(lineage.edits, lineage.length, wires))
    return wires


def format_msg_for_llm(ctx: AgentContext, event_sink: Any = None) -> dict[str, Any]:
    """Convert a context to OpenAI chat format (spec §14 formatMsgForLLM).

    Returns ``{"messages": [...], "tools": [...]}``: the system prompt as a system
    message (when not empty), every message of the context, and the tool definitions
    (decision 5; the key is left out when there are no tools, since some servers reject
    an empty list).

    The returned dict, its ``messages`` and ``tools`` lists, the system message and the
    tool dicts are new on every call: an ``llm_call`` may keep them or change them. The
    dict of each history message is read-only (``TypeError`` on a change): it is made
    once per message and shared by every request holding that message, which is what
    keeps a round's cost flat however long the history (issue 12, docs/performance.md).
    Deviation: before issue 12 those dicts were new on every call too; replace one
    (``messages[i] = {**messages[i], ...}``) or edit ``copy.deepcopy(formatted)``.
    """
    messages: list[dict[str, Any]] = [{"role": "system", "content": ctx.system_prompt}] if ctx.system_prompt else []
    messages += _history_wires(ctx.messages)
    formatted: dict[str, Any] = {"messages": messages}
    tools = tuple(ctx.tools.values())
    if tools:
        formatted["tools"] = [tool_to_openai(t) for t in tools]
    return formatted


def _image_from_url(url: str) -> ImageContent | None:
    """An ``ImageContent`` from a base64 ``data:`` URL; None for any other URL."""
    if not url.startswith("data:") or ";base64," not in url:
        return None
    header, data = url[5:].split(";base64,", 1)
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MessageFormatError(f"image data URL does not hold valid base64: {exc}") from exc
    return ImageContent(data, header or "application/octet-stream")


def _part_to_content(part: Any, index: int) -> Any:
    if isinstance(part, (TextContent, ImageContent)):
        return part
    if isinstance(part, str):
        return TextContent(part)
    if not isinstance(part, dict):
        raise MessageFormatError(f"content part {index} is {type(part).__name__}; expected a dict such as {{'type': 'text', 'text': ...}}")
    kind = part.get("type")
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise MessageFormatError(f"content part {index} has type 'text' but no string 'text'")
        return TextContent(part["text"])
    if kind == "image" and isinstance(part.get("data"), str):
        return ImageContent(part["data"], part.get("mime_type") or part.get("mimeType") or "image/png")
    if kind == "image_url":
        image_url = part.get("image_url")
        url = image_url.get("url") if isinstance(image_url, dict) else image_url
        if isinstance(url, str):
            image = _image_from_url(url)
            if image is not None:
                return image
    return dict(part)  # a part this library does not model: kept as given, sent on as given


def openai_to_user_message(raw: Any) -> UserMessage:
    """Convert an OpenAI-style user message dict (or a plain string) to a ``UserMessage``.

    Spec: §6 step 1 (OpenAiToUserMessage).

    ``content`` may be a string or a list of parts: ``{"type": "text"}``, ``{"type":
    "image_url"}`` with a base64 data URL (becomes ``ImageContent``), or our own ``{"type":
    "image", "data", "mime_type"}``. Other parts (an image by http URL, audio) are kept as
    raw dicts and passed on to the LLM unchanged.

    Raises:
        MessageFormatError: (a ValueError) ``raw`` is not a dict or string, its role is not "user", or its
            content is neither a string nor a list of parts.
    """
    if isinstance(raw, str):
        return UserMessage([TextContent(raw)])
    if not isinstance(raw, dict):
        raise MessageFormatError(f"a user message must be a dict like {{'role': 'user', 'content': ...}} or a str, got {type(raw).__name__}")
    role = raw.get("role", "user")
    if role != "user":
        raise MessageFormatError(f"expected a message with role 'user', got role {role!r}")
    if "content" not in raw:
        raise MessageFormatError("the user message has no 'content'")
    content = raw["content"]
    if isinstance(content, str):
        return UserMessage([TextContent(content)])
    if isinstance(content, list):
        return UserMessage([_part_to_content(part, i) for i, part in enumerate(content)])
    raise MessageFormatError(f"a user message's content must be a string or a list of parts, got {type(content).__name__}")
