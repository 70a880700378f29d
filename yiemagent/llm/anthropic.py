"""A client for Anthropic's Messages API, taking the same OpenAI-format dict (spec §14 llmCall).

"Override this to produce custom LLM message formats for different APIs/providers"
(spec §14): rather than a second ``format_msg_for_llm``, the conversion lives in the
client, so an agent switches provider by switching ``llm_call`` alone. The system
prompt goes apart; assistant tool calls become ``tool_use`` blocks; tool results become
``tool_result`` blocks (with ``is_error``) in the next user message, consecutive ones
merged, because Anthropic requires alternating roles and an answer to every ``tool_use``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any, Optional

from ..messages import AssistantMessage, LLMUsage, TextContent
from ._http import HTTPClient, JSONPoster, content_text

__all__ = ["AnthropicClient", "build_anthropic_request", "parse_anthropic_response", "parse_anthropic_stream"]

API_VERSION = "2023-06-01"
_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_use", "refusal": "content_filter", "pause_turn": "stop"}


def _image_block(part: dict[str, Any]) -> dict[str, Any]:
    image_url = part.get("image_url")
    url = image_url.get("url", "") if isinstance(image_url, dict) else str(image_url or "")
    if url.startswith("data:") and ";base64," in url:
        media_type, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            blocks.append({"type": "text", "text": part.get("text", "")})
        elif part.get("type") == "image_url":
            blocks.append(_image_block(part))
    return blocks


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _assistant_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    text = content_text(message.get("content"))
    if text:
        blocks.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        blocks.append({"type": "tool_use", "id": call.get("id", ""), "name": function.get("name", ""), "input": _arguments(function.get("arguments"))})
    return blocks


def _tool_choice(choice: Any) -> Any:
    if choice == "auto":
        return {"type": "auto"}
    if choice == "required":
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return {"type": "tool", "name": choice["function"].get("name")}
    return choice


def build_anthropic_request(formatted: dict[str, Any], model: str, max_tokens: int, defaults: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The Messages API request for a dict made by ``format_msg_for_llm`` (OpenAI chat format)."""
    system: list[str] = []
    messages: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)  # consecutive same-role turns merge
        else:
            messages.append({"role": role, "content": blocks})

    for message in formatted.get("messages", []):
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(content_text(message.get("content")))
        elif role == "user":
            add("user", _user_blocks(message.get("content")))
        elif role == "assistant":
            add("assistant", _assistant_blocks(message))
        elif role == "tool":
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": message.get("tool_call_id", ""),
                        "content": content_text(message.get("content")),
                        "is_error": bool(message.get("is_error", False)),
                    }
                ],
            )
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, **copy.deepcopy(defaults or {})}
    for key, value in formatted.items():
        if key not in ("messages", "tools"):
            body[key] = value
    if "tool_choice" in body:
        body["tool_choice"] = _tool_choice(body["tool_choice"])
    body.pop("parallel_tool_calls", None)
    if system:
        body["system"] = "\n\n".join(s for s in system if s)
    body["messages"] = messages
    tools = formatted.get("tools") or []
    if tools:
        body["tools"] = [
            {"name": t["function"]["name"], "description": t["function"].get("description", ""), "input_schema": t["function"].get("parameters") or {"type": "object"}}
            for t in tools
            if isinstance(t, dict) and isinstance(t.get("function"), dict)
        ]
    return body


def _usage(raw: Any) -> Optional[LLMUsage]:
    if not isinstance(raw, dict):
        return None
    counts = {k: int(raw.get(k) or 0) for k in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")}
    return LLMUsage(
        input_tokens=counts["input_tokens"],
        output_tokens=counts["output_tokens"],
        cache_read_tokens=counts["cache_read_input_tokens"],
        cache_write_tokens=counts["cache_creation_input_tokens"],
        total_tokens=counts["input_tokens"] + counts["output_tokens"],
    )


def _message(blocks: list[dict[str, Any]], stop_reason: Any, usage: Optional[LLMUsage], model: Any) -> AssistantMessage:
    content: list[Any] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            content.append(TextContent(block["text"]))
        elif kind == "tool_use":
            content.append({"type": "tool_call", "id": block.get("id", ""), "name": block.get("name", ""), "arguments": block.get("input")})
        elif kind in ("thinking", "redacted_thinking"):
            content.append(dict(block))
    reason = _STOP_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"
    if any(isinstance(b, dict) and b.get("type") == "tool_call" for b in content) and reason != "length":
        reason = "tool_use"
    return AssistantMessage(content, api="anthropic-messages", provider="anthropic", model=model if isinstance(model, str) else None, usage=usage, stop_reason=reason)


def parse_anthropic_response(body: dict[str, Any]) -> AssistantMessage:
    """An ``AssistantMessage`` from a Messages API body.

    Raises:
        ValueError: the body has no ``content`` list.
    """
    if not isinstance(body, dict) or not isinstance(body.get("content"), list):
        raise ValueError("the body has no content list")
    return _message(body["content"], body.get("stop_reason"), _usage(body.get("usage")), body.get("model"))


def parse_anthropic_stream(events: Iterable[dict[str, Any]]) -> AssistantMessage:
    """Accumulate Messages API stream events: ``partial_json`` is joined per block and parsed at the end."""
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, list[str]] = {}
    model, stop_reason, usage_raw = None, None, {}
    for event in events:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            model = message.get("model")
            usage_raw.update(message.get("usage") or {})
        elif kind == "content_block_start":
            blocks[event["index"]] = dict(event.get("content_block") or {})
        elif kind == "content_block_delta":
            delta, index = event.get("delta") or {}, event["index"]
            if delta.get("type") == "text_delta":
                blocks[index]["text"] = blocks[index].get("text", "") + delta.get("text", "")
            elif delta.get("type") == "input_json_delta":
                partial.setdefault(index, []).append(delta.get("partial_json", ""))
            elif delta.get("type") == "thinking_delta":
                blocks[index]["thinking"] = blocks[index].get("thinking", "") + delta.get("thinking", "")
        elif kind == "message_delta":
            stop_reason = (event.get("delta") or {}).get("stop_reason") or stop_reason
            usage_raw.update(event.get("usage") or {})
    for index, pieces in partial.items():
        blocks[index]["input"] = _arguments("".join(pieces)) if "".join(pieces).strip() else {}
    return _message([blocks[i] for i in sorted(blocks)], stop_reason, _usage(usage_raw), model)


class AnthropicClient(HTTPClient):
    """``llm_call`` for Anthropic's Messages API: POST ``{base_url}/v1/messages``.

    Takes the OpenAI-format dict of ``format_msg_for_llm``. ``tool_choice`` in OpenAI form
    ("auto", "required", a named function) is translated. Authenticates with the
    ``x-api-key`` and ``anthropic-version`` headers.

    Thread safety: a client may serve several agents and threads at once.
    """

    def __init__(
        self,
        model: str,
        api_key: Optional[str] = None,
        *,
        base_url: str = "https://api.anthropic.com",
        max_tokens: int = 1024,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_retry_delay_ms: float = 60000,
        backoff_factor: float = 0.5,
        options: Optional[dict[str, Any]] = None,
        stream: bool = False,  # issue 14 (placeholder for the CLI until issue 10's clients are merged)
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.max_tokens = max_tokens
        self.options = {**(options or {}), **({"stream": True} if stream else {})}
        self._api_key = api_key
        self._headers = {"Content-Type": "application/json", "anthropic-version": API_VERSION}
        if api_key:
            self._headers["x-api-key"] = api_key
        self._poster = JSONPoster(
            "Anthropic", timeout=timeout, max_retries=max_retries, max_retry_delay_ms=max_retry_delay_ms, backoff_factor=backoff_factor, secret=api_key
        )

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1/messages"

    def __repr__(self) -> str:
        return f"AnthropicClient(model={self.model!r}, base_url={self.base_url!r}, api_key={self._masked_key()})"

    def _body(self, formatted: dict[str, Any]) -> dict[str, Any]:
        return build_anthropic_request(formatted, self.model, self.max_tokens, self.options)

    def _parse(self, reply: Any) -> AssistantMessage:
        return parse_anthropic_response(reply)

    def _parse_stream(self, events: Iterable[dict[str, Any]]) -> AssistantMessage:
        return parse_anthropic_stream(events)
