"""What the spans say: GenAI semantic-convention values, message content as JSON, masking.

Beyond the spec (docs/tracing.md). The attribute names and the JSON shapes are those of
the OpenTelemetry GenAI semantic conventions (``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.system_instructions``: a list of messages, each a
``role`` and ``parts``; parts ``text``, ``reasoning``, ``tool_call``,
``tool_call_response``, ``blob``). Span attributes hold only primitives, so structured
values are recorded as JSON strings, as the conventions allow.

Everything here that records content passes ``mask``: the credentials of every LLM client
and MCP connection alive in the process are replaced by ``***`` (the clients' own
masking, ``yiemagent._secrets``), so no key that a
prompt, a tool's output or a reply happened to hold leaves the process in a trace.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Optional

from .._failures import ABORTED_MESSAGE
from .._log_masking import redact_live_secrets
from ..extraction import extract_tool_calls
from ..types import (  # FAILED_RUN_STOP_REASONS: a failed run's span is ERROR (docs/tracing.md "Status")
    FAILED_RUN_STOP_REASONS,
    AgentMessage,
    AgentToolResult,
    AssistantMessage,
    ImageContent,
    LLMUsage,
    TextContent,
    ToolResultMessage,
    UserMessage,
    text_of,
)

__all__ = [
    "FAILED_RUN_STOP_REASONS",
    "MessageCache",
    "failure_description",
    "finish_reason",
    "input_messages",
    "mask",
    "output_messages",
    "provider_name",
    "system_instructions",
    "tool_arguments",
    "tool_error_type",
    "tool_result",
    "usage_attributes",
]

MessageCache = dict[int, list[Any]]
"""A run's messages already converted: id -> [the message, its conventions' shape or None, its JSON text or None]."""


# gen_ai.provider.name: the conventions' well-known values, from what a client calls its
# provider (a name, or the host of its base URL: OpenAIClient's ``provider``)
_PROVIDERS = {
    "openai": "openai",
    "api.openai.com": "openai",
    "anthropic": "anthropic",
    "api.anthropic.com": "anthropic",
    "deepseek": "deepseek",
    "api.deepseek.com": "deepseek",
    "groq": "groq",
    "api.groq.com": "groq",
    "mistral": "mistral_ai",
    "mistral_ai": "mistral_ai",
    "api.mistral.ai": "mistral_ai",
    "xai": "x_ai",
    "x_ai": "x_ai",
    "api.x.ai": "x_ai",
    "perplexity": "perplexity",
    "api.perplexity.ai": "perplexity",
    "cohere": "cohere",
    "api.cohere.com": "cohere",
    "gemini": "gcp.gemini",
    "generativelanguage.googleapis.com": "gcp.gemini",
}
# the wire protocol a reply came over (AssistantMessage.api) when the provider is not known
# by name: a server speaking OpenAI's API (llama.cpp, vLLM, Ollama) is "openai" in the
# conventions' sense, the format flavour of the telemetry
_APIS = {"openai-chat": "openai", "anthropic-messages": "anthropic"}
# our stop_reason -> the conventions' finish reasons (stop, length, content_filter, tool_call, error)
_FINISH_REASONS = {"tool_use": "tool_call"}
# the first characters json.loads accepts, after its whitespace: a string, object, array, number, true/false/null, NaN/Infinity
_JSON_SPACE = " \t\n\r"
_JSON_STARTS = frozenset('"{[-0123456789tfnNI')


def mask(text: str) -> str:
    """``text`` with the credentials of every live LLM client and MCP connection replaced by ``***``."""
    return redact_live_secrets(text)


def _json(value: Any) -> str:
    """``value`` as masked JSON text (whatever it holds: what JSON cannot say is shown by repr)."""
    return mask(json.dumps(value, ensure_ascii=False, default=repr))


def provider_name(provider: Optional[str], api: Optional[str] = None) -> Optional[str]:
    """``gen_ai.provider.name`` for a client's provider (a name or a host) and a reply's api, or None if neither tells."""
    if provider:
        known = _PROVIDERS.get(provider.lower())
        if known is not None:
            return known
        host = provider.lower()
        if host.endswith(".openai.azure.com"):
            return "azure.ai.openai"
        if "bedrock" in host and host.endswith(".amazonaws.com"):
            return "aws.bedrock"
    return _APIS.get(api or "")


def finish_reason(stop_reason: Optional[str]) -> str:
    """A reply's stop reason in the conventions' words ("tool_use" is "tool_call"; none is "stop")."""
    return _FINISH_REASONS.get(stop_reason or "stop", stop_reason or "stop")


def usage_attributes(usage: Optional[LLMUsage]) -> dict[str, int]:
    """The ``gen_ai.usage.*`` attributes of a usage (decision 13 matches the conventions: parts are included in the totals)."""
    if not isinstance(usage, LLMUsage):
        return {}
    attributes = {"gen_ai.usage.input_tokens": usage.input_tokens, "gen_ai.usage.output_tokens": usage.output_tokens}
    for name, value in (
        ("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens),
        ("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens),
        ("gen_ai.usage.reasoning.output_tokens", usage.reasoning_tokens),
    ):
        if value:
            attributes[name] = value
    return attributes


def failure_description(fixed: str, message: Optional[str], capture_content: bool) -> str:
    """A failed span's status description: ``message`` masked with ``capture_content``, else ``fixed``.

    An error message may quote content: the answer an ``output_type`` refused, a tool's
    text, an abort's reason, the body of a server's error. So it is recorded only where
    content is, and otherwise the span says its cause without it: ``fixed`` names the
    cause from what the agent itself chose (a stop reason, an exception's type), and
    ``error.type`` beside it names it in one word (docs/tracing.md "Status").
    """
    return mask(message) if capture_content and message else fixed


def tool_error_type(text: str) -> str:
    """``error.type`` of an error result whose text is ``text``: "aborted" for a call an abort stopped or skipped, else "tool_error"."""
    return "aborted" if text == ABORTED_MESSAGE else "tool_error"


# --- content (only with capture_content=True) ------------------------------------------


def _parts(blocks: Iterable[Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextContent):
            parts.append({"type": "text", "content": block.text})
        elif isinstance(block, ImageContent):
            parts.append({"type": "blob", "modality": "image", "mime_type": block.mime_type, "content": block.data})
        elif isinstance(block, dict) and block.get("type") == "thinking" and isinstance(block.get("thinking"), str):
            parts.append({"type": "reasoning", "content": block["thinking"]})
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            parts.append({"type": "text", "content": block["text"]})
    return parts


def _message(message: AgentMessage) -> Optional[dict[str, Any]]:
    if isinstance(message, UserMessage):
        return {"role": "user", "parts": _parts(message.content)}
    if isinstance(message, AssistantMessage):
        parts = _parts(message.content)
        parts += [{"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments} for c in extract_tool_calls(message)[1]]
        return {"role": "assistant", "parts": parts}
    if isinstance(message, ToolResultMessage):
        return {"role": "tool", "parts": [{"type": "tool_call_response", "id": message.tool_call_id, "response": text_of(message.content)}]}
    return None


def _converted(message: AgentMessage, converted: MessageCache) -> list[Any]:
    """``[message, its conventions' shape or None, its JSON text or None]``, converted once per run (``converted``)."""
    entry = converted.get(id(message))
    if entry is None or entry[0] is not message:
        entry = [message, _message(message), None]
        converted[id(message)] = entry  # the message is held, so its id names no other while the entry lives
    return entry


def _sent_text(message: AgentMessage, converted: MessageCache) -> Optional[str]:
    """The (unmasked) JSON text of a message a round sends, made the first time one sends it."""
    entry = _converted(message, converted)
    if entry[2] is None and entry[1] is not None:
        entry[2] = json.dumps(entry[1], ensure_ascii=False, default=repr)
    text: Optional[str] = entry[2]
    return text


def input_messages(messages: Iterable[AgentMessage], converted: Optional[MessageCache] = None) -> str:
    """``gen_ai.input.messages``: the conversation a round sent, in order, as masked JSON.

    ``converted``: the run's texts of the messages already converted (each round sends the
    whole conversation again); the joined text is masked each time, so a client made since
    a message was first converted has its key masked in it too. The text is what
    ``json.dumps`` gives the list of messages.
    """
    converted = {} if converted is None else converted
    texts = [text for text in (_sent_text(m, converted) for m in messages) if text is not None]
    return mask("[" + ", ".join(texts) + "]")


def system_instructions(system_prompt: str) -> str:
    """``gen_ai.system_instructions``: the system prompt as one text part, masked JSON."""
    return _json([{"type": "text", "content": system_prompt}])


def output_messages(reply: AssistantMessage, converted: Optional[MessageCache] = None) -> str:
    """``gen_ai.output.messages``: one reply with its finish reason, masked JSON (kept in ``converted``: the next round sends it)."""
    message = _converted(reply, {} if converted is None else converted)[1] or {"role": "assistant", "parts": []}
    return _json([{**message, "finish_reason": finish_reason(reply.stop_reason)}])


def tool_arguments(arguments: Any) -> str:
    """``gen_ai.tool.call.arguments``: the arguments the call was made with, masked JSON."""
    return _json(arguments)


def tool_result(result: AgentToolResult) -> str:
    """``gen_ai.tool.call.result``: the result's text (parsed when it is JSON, as the conventions ask), masked JSON."""
    text = text_of(result.content)
    value: Any = text
    if text.lstrip(_JSON_SPACE)[:1] in _JSON_STARTS:  # what cannot start a JSON value is not parsed (json.loads would fail)
        try:
            value = json.loads(text)
        except ValueError:
            pass
    return _json(value)
