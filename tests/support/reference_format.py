"""The plain reference formatter: ``format_msg_for_llm`` as it was before the formatting cache (docs/performance.md), copied verbatim
(plus the ``thinking_blocks`` of docs/streaming.md "Reasoning sent back" and the ``content_blocks`` of Anthropic's server
tools, docs/streaming.md, the changes to the wire format since).

No cache, nothing shared: every call builds every dict afresh from the messages. The
tests of the cached fast path (tests/extras/test_format_cache.py) compare it with this, byte
for byte, over arbitrary histories. Only the names changed (``reference_format``); the
library's ``extract_tool_calls``, ``text_of`` and ``_content_blocks`` are used as they are, so that a change
there moves both sides alike.
"""

from __future__ import annotations

import json
from typing import Any

from yiemagent import AgentContext, AgentTool, AssistantMessage, ImageContent, TextContent, ToolResultMessage, UserMessage, extract_tool_calls
from yiemagent.formatting import _content_blocks
from yiemagent.types import AgentMessage, text_of


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
        wire["thinking_blocks"] = thinking  # docs/streaming.md "Reasoning sent back"
    if calls:
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
            }
            for call in calls
        ]
    if any(isinstance(b, dict) and b.get("type") not in ("thinking", "redacted_thinking", "tool_call", "tool_calls") for b in msg.content):
        wire["content_blocks"] = _content_blocks(msg.content, wire.get("tool_calls", []))  # server tools: the content in order
    return wire


def tool_result_message_to_openai(msg: ToolResultMessage) -> dict[str, Any]:
    """A tool result; its text goes as one string (decision 9), its images beside it in ``images`` (docs/api.md "Images")."""
    pieces = []
    images = []
    for block in msg.content:
        if isinstance(block, TextContent):
            pieces.append(block.text)
        elif isinstance(block, ImageContent):
            images.append(_image_url(block))
            pieces.append(f"[image {len(images)} ({block.mime_type}) follows]")
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            pieces.append(block["text"])
    wire = {
        "role": "tool",
        "tool_call_id": msg.tool_call_id,
        "content": "\n".join(pieces),
        "name": msg.tool_name,
        "is_error": msg.is_error,
    }
    if images:
        wire["images"] = images  # a tool's images: the clients send them where each provider documents
    return wire


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


def reference_format(ctx: AgentContext, event_sink: Any = None) -> dict[str, Any]:
    """Convert a context to OpenAI chat format (spec §14 formatMsgForLLM).

    Returns ``{"messages": [...], "tools": [...]}``: the system prompt as a system
    message (when not empty), every message of the context, and the tool definitions
    (decision 5; the key is left out when there are no tools, since some servers reject
    an empty list). The dict is built fresh on every call; an ``llm_call`` may keep or
    change it.
    """
    messages: list[dict[str, Any]] = []
    if ctx.system_prompt:
        messages.append({"role": "system", "content": ctx.system_prompt})
    for msg in ctx.messages:
        wire = _message_to_openai(msg)
        if wire is not None:
            messages.append(wire)
    formatted: dict[str, Any] = {"messages": messages}
    tools = tuple(ctx.tools.values())
    if tools:
        formatted["tools"] = [tool_to_openai(t) for t in tools]
    return formatted

