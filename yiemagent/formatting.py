"""Context preparation and the OpenAI chat format (spec §14 prepareContext, formatMsgForLLM).

``format_msg_for_llm`` makes the dict every ``llm_call`` receives: ``{"messages": [...],
"tools": [...]}`` in OpenAI's chat-completions format (decision 5). The HTTP clients of
``yiemagent.llm`` take this dict and nothing else, so only ``llm_call`` changes between
providers. Keys beyond OpenAI's ride along for clients that need them: ``name`` (the
tool's name), ``is_error`` and ``images`` (a tool's images, docs/api.md "Images") on
``tool`` messages; ``thinking_blocks`` and ``content_blocks`` on ``assistant`` messages
(docs/streaming.md "Server tools"), and ``reasoning_echo``: the fields the reply's server
wants back and who that server is (docs/streaming.md "Reasoning sent back"). The OpenAI
client sends none of these keys as they are; it sends ``reasoning_echo``'s fields to that
server alone, and a tool's images in a user message after the results.

A message's wire dict is made once and remembered, and the latest request's wires are
reused while the history only grew (``_format_cache``). docs/performance.md says what is
cached, where, and what invalidates it.
"""

from __future__ import annotations

import base64
import binascii
from itertools import islice
from typing import Any, Optional

from ._format_cache import FrozenDict, FrozenList, cached_calls, history_wires, snapshot
from .errors import MessageFormatError
from .extraction import arguments_json, extract_tool_calls
from .types import (
    AgentContext,
    AgentState,
    AgentTool,
    AssistantMessage,
    ImageContent,
    TextContent,
    ToolResultMessage,
    UserMessage,
    data_url,
    split_data_url,
    text_of,
)

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
    (docs/performance.md). A hook that changes ``ctx.messages`` in any way, or
    replaces it, makes the formatter look at every message's own cache instead.
    """
    return AgentContext(state.system_prompt, snapshot(state.messages), state.tools)  # HistorySnapshot(...) without its __init__ call


def _image_url(block: ImageContent) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url(block.mime_type, block.data)}}


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


_MODELLED_BLOCKS = ("thinking", "redacted_thinking", "tool_call", "tool_calls", "refusal")


def _content_blocks(content: list[Any], calls: list[dict[str, Any]]) -> list[Any]:
    """The whole content in order, for a client that sends blocks back in their place (docs/streaming.md "Server tools").

    A ``TextContent`` becomes ``{"type": "text", "text"}``, with its ``citations`` when it has
    some; each tool-call block becomes its calls' entries of ``tool_calls`` (the same dicts,
    canonical ids); every other dict (a thinking block, an Anthropic server tool's block)
    is as it is.
    """
    entries = iter(calls)
    blocks: list[Any] = []
    for block in content:
        if isinstance(block, TextContent):
            blocks.append({"type": "text", "text": block.text, "citations": block.citations} if block.citations else {"type": "text", "text": block.text})
        elif isinstance(block, dict) and block.get("type") == "tool_call":
            blocks.extend(islice(entries, 1))
        elif isinstance(block, dict) and block.get("type") == "tool_calls":
            listed = block.get("tool_calls")
            blocks.extend(islice(entries, sum(isinstance(e, dict) for e in listed) if isinstance(listed, list) else 0))
        elif isinstance(block, dict) and block.get("type") != "refusal":  # a refusal goes back as OpenAI's own field (reasoning_echo)
            blocks.append(block)
    blocks.extend(entries)  # none left when the content and its extraction agree
    return blocks


def _raw_calls(content: list[Any]) -> list[dict[str, Any]]:
    """The raw tool-call entries of a content list, in the order ``extract_tool_calls`` reads them (one per call)."""
    entries: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_calls" and isinstance(block.get("tool_calls"), list):
            entries.extend(e for e in block["tool_calls"] if isinstance(e, dict))
        elif isinstance(block, dict) and block.get("type") == "tool_call":
            entries.append(block)
    return entries


def _reasoning_echo(msg: AssistantMessage) -> Optional[dict[str, Any]]:
    """What the reply's server wants back, and who that server is; None when there is nothing (docs/streaming.md "Reasoning sent back").

    ``fields``: the ``reasoning_fields`` of its thinking blocks (as the server sent them), the
    thinking itself as ``reasoning_content`` where it came in that field (``wire_field``), and
    its refusal; ``tool_calls``: each call's ``extra_content`` (or None), in the calls' order;
    ``api`` and ``provider``: the message's own, which a client compares with its own before
    sending any of it.
    """
    fields: dict[str, Any] = {}
    for block in msg.content:
        if isinstance(block, dict) and block.get("type") == "thinking":
            if block.get("wire_field") == "reasoning_content" and isinstance(block.get("thinking"), str):
                fields["reasoning_content"] = block["thinking"]  # the thinking came as that field
            if isinstance(block.get("reasoning_fields"), dict):
                fields.update(block["reasoning_fields"])
    refusal = msg.refusal
    if refusal is not None:
        fields["refusal"] = refusal
    extras = [e["extra_content"] if isinstance(e.get("extra_content"), dict) else None for e in _raw_calls(msg.content)]
    if not fields and not any(extras):
        return None
    return {"api": msg.api, "provider": msg.provider, "fields": fields, "tool_calls": extras}


def assistant_message_to_openai(msg: AssistantMessage) -> dict[str, Any]:
    """An assistant message with its tool calls, arguments re-serialised as valid JSON (decision 9).

    Ids are the ones ``extract_tool_calls`` gives (synthetic where the server sent none), so
    they match the tool results. Arguments that were not valid JSON go back as ``{}``:
    several servers reject a history holding invalid JSON, and the call's error result
    already tells the model what was wrong. ``content`` is "" rather than null beside
    tool calls: OpenAI accepts both, some servers (llama.cpp) fail on null.

    A message holding a block beyond text, thinking and tool calls (an Anthropic server
    tool's, a text with citations) also gets ``content_blocks``: its whole content in
    order (``_content_blocks``), which the Anthropic client sends back block for block.
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
    if any((isinstance(b, dict) and b.get("type") not in _MODELLED_BLOCKS) or (isinstance(b, TextContent) and b.citations) for b in msg.content):
        wire["content_blocks"] = _content_blocks(msg.content, wire.get("tool_calls", []))
    echo = _reasoning_echo(msg)
    if echo is not None:
        wire["reasoning_echo"] = echo  # OpenAIClient sends its fields back to that provider alone
    return wire


def tool_result_message_to_openai(msg: ToolResultMessage) -> dict[str, Any]:
    """A tool result: its text as one string (decision 9), its images beside it (docs/api.md "Images").

    An image leaves a line in the text saying that it follows ("[image 1 (image/png)
    follows]"), and goes as an OpenAI ``image_url`` part in ``images``, a key beyond
    OpenAI's like ``name`` and ``is_error``: a ``tool`` message takes text only, so
    ``OpenAIClient`` sends the images of a batch of results in one user message after
    them, each labelled with its call, and ``AnthropicClient`` inside the ``tool_result``.
    """
    pieces: list[str] = []
    images: list[dict[str, Any]] = []
    for block in msg.content:
        if isinstance(block, TextContent):
            pieces.append(block.text)
        elif isinstance(block, ImageContent):
            images.append(_image_url(block))
            pieces.append(f"[image {len(images)} ({block.mime_type}) follows]")
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            pieces.append(block["text"])
    wire: dict[str, Any] = {
        "role": "tool",
        "tool_call_id": msg.tool_call_id,
        "content": "\n".join(pieces),
        "name": msg.tool_name,
        "is_error": msg.is_error,
    }
    if images:
        wire["images"] = images
    return wire


def tool_to_openai(tool: AgentTool) -> dict[str, Any]:
    """A tool definition in OpenAI's function format."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.input_schema},
    }


def _message_to_openai(msg: Any) -> dict[str, Any] | None:
    """The wire dict of one message for ``format_msg_for_llm``; None for a kind of message that is not sent.

    The shapes a round makes get their wire built read-only at once, a ``FrozenDict`` all the
    way down (``_format_cache.freeze`` leaves it as it is): a tool result whose content is text
    blocks (here), and a reply of text and tool calls (``_read_only_reply``). Their wire is what
    ``tool_result_message_to_openai`` and ``assistant_message_to_openai`` make, frozen: the same
    keys in the same order, the same values (a differential test holds the two to each other,
    tests/extras/test_format_cache.py), without making the plain dicts first and copying them
    (docs/performance.md "W1"). Every other message gets those functions' plain dict.
    """
    kind = type(msg)
    if kind is ToolResultMessage:
        content = msg.content
        if type(content) is list and type(msg.tool_call_id) is str and type(msg.tool_name) is str and type(msg.is_error) is bool:
            texts: list[str] = []
            for block in content:
                if type(block) is not TextContent:
                    break
                texts.append(block.text)  # a text that is not a str fails the join as it fails tool_result_message_to_openai's
            else:  # text blocks only
                return FrozenDict(role="tool", tool_call_id=msg.tool_call_id, content="\n".join(texts), name=msg.tool_name, is_error=msg.is_error)
        return tool_result_message_to_openai(msg)
    if kind is AssistantMessage:
        return _read_only_reply(msg) or assistant_message_to_openai(msg)
    if isinstance(msg, UserMessage):
        return user_message_to_openai(msg)
    if isinstance(msg, AssistantMessage):
        return assistant_message_to_openai(msg)
    if isinstance(msg, ToolResultMessage):
        return tool_result_message_to_openai(msg)
    return None


def _read_only_reply(msg: AssistantMessage) -> Optional[FrozenDict]:
    """The read-only wire of a reply of text blocks without citations and ``tool_calls`` blocks whose entries carry no ``extra_content``; None for any other (``_message_to_openai``)."""
    texts: list[str] = []
    content = msg.content
    if type(content) is not list:
        return None
    for block in content:
        if type(block) is TextContent:
            if block.citations is not None or type(block.text) is not str:
                return None
            texts.append(block.text)
        elif type(block) is dict and block.get("type") == "tool_calls" and type(listed := block.get("tool_calls")) is list:
            for entry in listed:
                if type(entry) is not dict or "extra_content" in entry:  # an extra goes back (_reasoning_echo)
                    return None
        else:
            return None
    calls: Any = cached_calls(msg)  # normalize_reply read them (extract_tool_calls would return a copy of them)
    if calls is None:
        _, calls, _ = extract_tool_calls(msg)
    if not calls:
        return FrozenDict(role="assistant", content="\n".join(texts))
    entries = []
    for call in calls:  # a loop, not a comprehension: no function of its own to make and call (Python 3.11)
        entries.append(FrozenDict(id=call.id, type=call.type, function=FrozenDict(name=call.name, arguments=arguments_json(call.arguments))))
    return FrozenDict(role="assistant", content="\n".join(texts), tool_calls=FrozenList(entries))


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
    keeps a round's cost flat however long the history (docs/performance.md).
    Deviation: the spec builds every dict afresh on each call; replace one
    (``messages[i] = {**messages[i], ...}``) or edit ``copy.deepcopy(formatted)``.
    """
    messages: list[dict[str, Any]] = [{"role": "system", "content": ctx.system_prompt}] if ctx.system_prompt else []
    formatted: dict[str, Any] = {"messages": history_wires(ctx.messages, _message_to_openai, messages)}
    tools = list(map(tool_to_openai, ctx.tools.values()))
    if tools:
        formatted["tools"] = tools
    return formatted


def _image_from_url(url: str) -> ImageContent | None:
    """An ``ImageContent`` from a base64 ``data:`` URL; None for any other URL."""
    parts = split_data_url(url)
    if parts is None:
        return None
    header, data = parts
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
