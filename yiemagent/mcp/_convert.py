"""From MCP's shapes to yiemagent's: tool names, content blocks, call results, resources and prompts.

Pure functions, no I/O and no asyncio: they read the SDK's result objects by attribute
(``content``, ``is_error``, ``structured_content``, a block's ``type``), so this module
never imports ``mcp`` and works on any object of that shape.

Thread safety: every function is pure.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional

from ..types import AgentMessage, AssistantMessage, ImageContent, TextContent, UserMessage

__all__ = [
    "MCPPrompt",
    "MCPPromptArgument",
    "MCPResource",
    "agent_tool_names",
    "content_blocks",
    "error_text",
    "prompt_messages",
    "prompt_record",
    "resource_blocks",
    "resource_record",
    "tool_label",
]

# The name rule both OpenAI (function names) and Anthropic (tool names) enforce. MCP
# allows more (dots, slashes; up to 128 characters), so names are mapped into this set.
_INVALID_CHAR = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64


def _clean(name: str) -> str:
    return _INVALID_CHAR.sub("_", name) or "_"


def _fit(name: str) -> str:
    """``name`` cut to 64 characters; a cut name ends in a hash of the whole, so two long names stay apart."""
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    return f"{name[: _MAX_NAME - 9]}_{digest}"


def agent_tool_names(mcp_names: Iterable[str], prefix: Optional[str]) -> dict[str, str]:
    """Map each MCP tool name to the name the LLM will see: ``{agent_name: mcp_name}``.

    With a ``prefix`` (the client's ``name=``) the name is ``<prefix>_<tool>``, so two
    servers offering a tool of the same name do not clash in one agent. Characters
    outside ``[A-Za-z0-9_-]`` become ``_`` and a name longer than 64 characters is cut
    (ending in a hash of the full name): that is the rule LLM APIs enforce on tool names.
    Two MCP names that map to the same name get ``_2``, ``_3``... in listing order.
    """
    mapping: dict[str, str] = {}
    head = f"{_clean(prefix)}_" if prefix else ""
    for mcp_name in mcp_names:
        candidate = _fit(head + _clean(mcp_name))
        base, n = candidate, 1
        while candidate in mapping:
            n += 1
            candidate = _fit(f"{base}_{n}")
        mapping[candidate] = mcp_name
    return mapping


def tool_label(tool: Any) -> str:
    """A human-readable label: MCP's display-name precedence, ``title``, ``annotations.title``, ``name``."""
    annotations = getattr(tool, "annotations", None)
    for title in (getattr(tool, "title", None), getattr(annotations, "title", None)):
        if isinstance(title, str) and title:
            return title
    name: str = tool.name  # an MCP Tool's, Prompt's or Resource's name
    return name


def _valid_base64(data: Any) -> bool:
    if not isinstance(data, str):
        return False
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _size(data: str) -> str:
    return f"{len(data) * 3 // 4} bytes"


def _block(block: Any) -> Any:
    """One MCP content block as a yiemagent content block (decision 15: always sendable again).

    text -> ``TextContent``; image -> ``ImageContent`` (if its data is base64); an
    embedded text resource -> its text; an embedded image blob -> ``ImageContent``;
    audio, other blobs and resource links -> a line of text saying what was there,
    since yiemagent messages carry only text and images.
    """
    kind = getattr(block, "type", None)
    if kind == "text":
        return TextContent(str(block.text))
    if kind == "image":
        if _valid_base64(block.data):
            return ImageContent(block.data, str(block.mime_type))
        return TextContent(f"[image ({block.mime_type}) omitted: its data is not valid base64]")
    if kind == "audio":
        return TextContent(f"[audio ({block.mime_type}, {_size(str(block.data))}) omitted: yiemagent carries no audio]")
    if kind == "resource_link":
        about = f": {block.description}" if getattr(block, "description", None) else ""
        return TextContent(f"[resource link {block.name!r} <{block.uri}>{about}]")
    if kind == "resource":
        resource = block.resource
        mime = getattr(resource, "mime_type", None) or "unknown type"
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return TextContent(f"[resource <{resource.uri}>]\n{text}")
        blob = getattr(resource, "blob", "")
        if mime.startswith("image/") and _valid_base64(blob):
            return ImageContent(blob, mime)
        return TextContent(f"[resource <{resource.uri}> ({mime}, {_size(str(blob))}) omitted: binary data]")
    return TextContent(f"[content of type {kind!r} omitted: not known to yiemagent]")


def content_blocks(result: Any) -> list[Any]:
    """The content of a ``CallToolResult`` as yiemagent content blocks.

    A result whose content is empty but that has structured content gets that as JSON
    text, so the model sees it (MCP asks servers to send both; not all do).
    """
    blocks = [_block(block) for block in result.content]
    structured = getattr(result, "structured_content", None)
    if not blocks and structured is not None:
        blocks.append(TextContent(json.dumps(structured, ensure_ascii=False, default=str)))
    return blocks


def error_text(result: Any) -> str:
    """The words of an ``is_error`` result: its text blocks joined, or a note that it had none."""
    texts = [block.text for block in content_blocks(result) if isinstance(block, TextContent)]
    return "\n".join(texts) if texts else "the server reported an error without a message"


# --- resources and prompts (docs/mcp.md "Resources and prompts") -----------------------


@dataclass(frozen=True)
class MCPResource:
    """A resource an MCP server lists (``resources/list``); read it with ``MCPClient.read_resource(uri)``.

    Thread safety: immutable; may be shared between threads.
    """

    uri: str
    name: str
    description: Optional[str] = None
    mime_type: Optional[str] = None


@dataclass(frozen=True)
class MCPPromptArgument:
    """One argument of an MCP prompt.

    Thread safety: immutable; may be shared between threads.
    """

    name: str
    description: Optional[str] = None
    required: bool = False


@dataclass(frozen=True)
class MCPPrompt:
    """A prompt an MCP server lists (``prompts/list``); get its messages with ``MCPClient.get_prompt``.

    Thread safety: immutable; may be shared between threads.
    """

    name: str
    description: Optional[str] = None
    arguments: tuple[MCPPromptArgument, ...] = ()


def resource_record(resource: Any) -> MCPResource:
    return MCPResource(str(resource.uri), str(resource.name), getattr(resource, "description", None), getattr(resource, "mime_type", None))


def prompt_record(prompt: Any) -> MCPPrompt:
    arguments = tuple(
        MCPPromptArgument(str(a.name), getattr(a, "description", None), bool(getattr(a, "required", False))) for a in (prompt.arguments or ())
    )
    return MCPPrompt(str(prompt.name), getattr(prompt, "description", None), arguments)


def resource_blocks(result: Any) -> list[Any]:
    """The contents of a ``ReadResourceResult`` as content blocks: text as ``TextContent``, an image blob as ``ImageContent``.

    A blob that is not an image (or not valid base64) becomes a line of text saying what
    was there, as in a tool result: yiemagent messages carry only text and images.
    """
    blocks: list[Any] = []
    for contents in result.contents:
        text = getattr(contents, "text", None)
        if isinstance(text, str):
            blocks.append(TextContent(text))
            continue
        blob = getattr(contents, "blob", "")
        mime = getattr(contents, "mime_type", None) or "unknown type"
        if mime.startswith("image/") and _valid_base64(blob):
            blocks.append(ImageContent(blob, mime))
        else:
            blocks.append(TextContent(f"[resource <{contents.uri}> ({mime}, {_size(str(blob))}) omitted: binary data]"))
    return blocks


def prompt_messages(result: Any) -> list[AgentMessage]:
    """The messages of a ``GetPromptResult`` as yiemagent messages: "user" as ``UserMessage``, "assistant" as ``AssistantMessage``."""
    messages: list[AgentMessage] = []
    for message in result.messages:
        content = [_block(message.content)]
        if message.role == "assistant":
            messages.append(AssistantMessage(content, stop_reason="stop"))
        else:
            messages.append(UserMessage(content))
    return messages
