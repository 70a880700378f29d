"""A client for Anthropic's Messages API, taking the same OpenAI-format dict (spec §14 llmCall).

"Override this to produce custom LLM message formats for different APIs/providers"
(spec §14): rather than a second ``format_msg_for_llm``, the conversion lives in the
client, so an agent switches provider by switching ``llm_call`` alone. The system
prompt goes apart; assistant tool calls become ``tool_use`` blocks; tool results become
``tool_result`` blocks (with ``is_error``) in the next user message, consecutive ones
merged, because Anthropic requires alternating roles and an answer to every ``tool_use``.

Thinking: a reply's ``thinking`` and ``redacted_thinking`` blocks are kept whole in the
``AssistantMessage`` (with the ``signature`` that a stream sends as ``signature_delta``),
and go back as the first blocks of that assistant turn (``thinking_blocks`` in the
formatted dict): Anthropic requires the signed thinking block when a tool result
follows. A thinking block without a signature (another provider's) is not sent.

Replies, whole or streamed, are read in ``_anthropic_reply`` (usage by decision 13,
decision 14 for streams cut short).
"""

from __future__ import annotations

import copy
from typing import Any, Optional

from ..extraction import parse_tool_arguments
from ..messages import AssistantMessage
from ._anthropic_reply import AnthropicStream, parse_anthropic_response, parse_anthropic_stream
from ._client import DEFAULT_DEADLINE_S, DEFAULT_MAX_REPLY_BYTES, HTTPClient
from ._sse import DEFAULT_MAX_EVENT_BYTES
from ._wire import Emit, content_text, join_url

__all__ = ["AnthropicClient", "AnthropicStream", "build_anthropic_request", "parse_anthropic_response", "parse_anthropic_stream"]

API_VERSION = "2023-06-01"


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
    return parse_tool_arguments(raw)[0]  # the one reader of arguments ({} for what is not an object)


def _signed_thinking(blocks: Any) -> list[dict[str, Any]]:
    """The thinking blocks Anthropic accepts back: signed ``thinking`` and ``redacted_thinking`` with its ``data``."""
    kept = []
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "thinking" and isinstance(block.get("signature"), str) and block["signature"]:
            kept.append({"type": "thinking", "thinking": block.get("thinking", ""), "signature": block["signature"]})
        elif block.get("type") == "redacted_thinking" and isinstance(block.get("data"), str):
            kept.append({"type": "redacted_thinking", "data": block["data"]})
    return kept


def _assistant_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = _signed_thinking(message.get("thinking_blocks"))
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


class AnthropicClient(HTTPClient):
    """``llm_call`` for Anthropic's Messages API: POST ``{base_url}/v1/messages``.

    Takes the OpenAI-format dict of ``format_msg_for_llm``. ``tool_choice`` in OpenAI form
    ("auto", "required", a named function) is translated. Authenticates with the
    ``x-api-key`` and ``anthropic-version`` headers; ``headers`` adds others (masked like
    the key when they carry credentials). ``stream``, ``deadline_s``, ``timeout`` and
    ``max_event_bytes`` and ``max_reply_bytes`` work as in ``OpenAIClient``.

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
        headers: Optional[dict[str, str]] = None,
        stream: bool = False,
        deadline_s: Optional[float] = DEFAULT_DEADLINE_S,
        max_event_bytes: Optional[int] = DEFAULT_MAX_EVENT_BYTES,
        max_reply_bytes: Optional[int] = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.max_tokens = max_tokens
        self.options = dict(options or {})
        all_headers = {"Content-Type": "application/json", "anthropic-version": API_VERSION, **(headers or {})}
        if api_key:
            all_headers["x-api-key"] = api_key
        self._init_http(
            "Anthropic",
            api_key=api_key,
            headers=all_headers,
            custom_headers=headers,
            base_url=self.base_url,
            timeout=timeout,
            max_retries=max_retries,
            max_retry_delay_ms=max_retry_delay_ms,
            backoff_factor=backoff_factor,
            deadline_s=deadline_s,
            stream=stream,
            max_event_bytes=max_event_bytes,
            max_reply_bytes=max_reply_bytes,
        )

    @property
    def url(self) -> str:
        return join_url(self.base_url, "/v1/messages")

    def __repr__(self) -> str:
        base_url = self._transport.secrets.redact(self.base_url)
        return f"AnthropicClient(model={self.model!r}, base_url={base_url!r}, {self._repr_tail()})"

    def _body(self, formatted: dict[str, Any]) -> dict[str, Any]:
        body = build_anthropic_request(formatted, self.model, self.max_tokens, self.options)
        if self.stream:
            body.setdefault("stream", True)
        return body

    def _parse(self, reply: Any) -> AssistantMessage:
        return parse_anthropic_response(reply)

    def _accumulator(self, emit: Emit) -> AnthropicStream:
        return AnthropicStream(emit)
