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

Decision 13: Anthropic's ``input_tokens`` leave cached tokens out; here
``input_tokens`` is their sum with ``cache_read_input_tokens`` and
``cache_creation_input_tokens``. Deviation: Anthropic does not count thinking tokens
apart, so ``reasoning_tokens`` stays 0 (they are inside ``output_tokens``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any, Optional

from ..messages import AssistantMessage, LLMUsage, TextContent
from ._client import DEFAULT_DEADLINE_S, Emit, HTTPClient
from ._sse import DEFAULT_MAX_EVENT_BYTES
from ._wire import ReplyError, content_text, payload_error, require_object, token_count

__all__ = ["AnthropicClient", "AnthropicStream", "build_anthropic_request", "parse_anthropic_response", "parse_anthropic_stream"]

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


def _usage(raw: Any) -> Optional[LLMUsage]:
    """Decision 13 from Anthropic's ``usage``: cached tokens join ``input_tokens``."""
    if not isinstance(raw, dict):
        return None
    uncached, output = token_count(raw, "input_tokens"), token_count(raw, "output_tokens")
    cache_read, cache_write = token_count(raw, "cache_read_input_tokens"), token_count(raw, "cache_creation_input_tokens")
    prompt = uncached + cache_read + cache_write
    return LLMUsage(
        input_tokens=prompt,
        output_tokens=output,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        total_tokens=prompt + output,
    )


def _message(blocks: list[Any], stop_reason: Any, usage: Optional[LLMUsage], model: Any) -> AssistantMessage:
    content: list[Any] = []
    for block in blocks:
        block = require_object(block, "a content block")
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str) and block["text"]:
            content.append(TextContent(block["text"]))
        elif kind == "tool_use":
            content.append({"type": "tool_call", "id": block.get("id", ""), "name": block.get("name", ""), "arguments": block.get("input")})
        elif kind in ("thinking", "redacted_thinking"):
            content.append(dict(block))
    reason = _STOP_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"
    if any(isinstance(b, dict) and b.get("type") == "tool_call" for b in content) and reason != "length":
        reason = "tool_use"
    return AssistantMessage(content, api="anthropic-messages", provider="anthropic", model=model if isinstance(model, str) else None, usage=usage, stop_reason=reason)


def parse_anthropic_response(body: Any) -> AssistantMessage:
    """An ``AssistantMessage`` from a Messages API body.

    Raises:
        ReplyError: (a ``ValueError``) the body has no ``content`` list, a block is not an
            object, or a usage count is not a count.
    """
    body = require_object(body, "the reply")
    if not isinstance(body.get("content"), list):
        raise ReplyError("the body has no content list")
    return _message(body["content"], body.get("stop_reason"), _usage(body.get("usage")), body.get("model"))


def _tool_input(text: str) -> Any:
    """A streamed ``tool_use`` input: ``{}`` when the model sent none, the object it sent, else the text as it came.

    Text that is not a JSON object goes on as a string, so that the call gets an error
    result naming the bad arguments (decision 2) rather than run with ``{}`` (decision 14).
    """
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


class AnthropicStream:
    """Accumulates Messages API stream events, emitting text and thinking as they come.

    ``partial_json`` is joined per block and parsed when the block stops;
    ``signature_delta`` completes a thinking block. Decision 14: an ``error`` event
    raises; a stream that ends before ``message_stop``, or with a block never stopped
    (a ``tool_use`` cut inside its input), is not whole and raises, so no tool runs
    with arguments the model did not finish. Between two text (or two thinking) blocks
    a ``"\n"`` delta is emitted, as ``message_text`` joins them.

    Thread safety: none; one accumulator belongs to one call.
    """

    def __init__(self, emit: Optional[Emit] = None) -> None:
        self._emit = emit or (lambda kind, text: None)
        self._blocks: dict[int, dict[str, Any]] = {}
        self._partial: dict[int, list[str]] = {}
        self._open: set[int] = set()
        self._emitted_kinds: set[str] = set()
        self._model: Any = None
        self._stop_reason: Any = None
        self._usage_raw: dict[str, Any] = {}
        self._stopped = False

    def add(self, event: Any) -> bool:
        event = require_object(event, "a stream event")
        kind = event.get("type")
        if kind == "error" or payload_error(event) is not None:
            raise payload_error(event, forced=True)  # type: ignore[misc]
        if kind == "message_start":
            message = require_object(event.get("message") or {}, "message_start's message")
            self._model = message.get("model")
            self._usage_raw.update(message.get("usage") if isinstance(message.get("usage"), dict) else {})
        elif kind == "content_block_start":
            self._start(self._index(event, new=True), require_object(event.get("content_block") or {}, "a content block"))
        elif kind == "content_block_delta":
            self._delta(self._index(event), require_object(event.get("delta") or {}, "a content block delta"))
        elif kind == "content_block_stop":
            index = self._index(event)
            self._open.discard(index)
            if index in self._partial:
                self._blocks[index]["input"] = _tool_input("".join(self._partial.pop(index)))
        elif kind == "message_delta":
            delta = event.get("delta") if isinstance(event.get("delta"), dict) else {}
            self._stop_reason = delta.get("stop_reason") or self._stop_reason
            self._usage_raw.update(event.get("usage") if isinstance(event.get("usage"), dict) else {})
        elif kind == "message_stop":
            self._stopped = True
            return True
        return False

    def _index(self, event: dict[str, Any], new: bool = False) -> int:
        index = event.get("index")
        if isinstance(index, bool) or not isinstance(index, int) or (not new and index not in self._blocks):
            raise ReplyError(f"stream event {event.get('type')!r} names an unknown content block index {index!r}")
        return index

    def _start(self, index: int, block: dict[str, Any]) -> None:
        block = dict(block)
        self._blocks[index] = block
        self._open.add(index)
        if block.get("type") == "tool_use":
            self._partial[index] = []
        for kind, key in (("text", "text"), ("thinking", "thinking")):
            if block.get("type") == key:
                self._piece(kind, block.get(key) if isinstance(block.get(key), str) else "", block_start=True)

    def _piece(self, kind: str, text: str, block_start: bool = False) -> None:
        if block_start and kind in self._emitted_kinds:
            self._emit(kind, "\n")
        if block_start:
            self._emitted_kinds.add(kind)
        if text:
            self._emit(kind, text)

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block, kind = self._blocks[index], delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            block["text"] = block.get("text", "") + delta["text"]
            self._piece("text", delta["text"])
        elif kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
            self._piece("thinking", delta["thinking"])
        elif kind == "signature_delta" and isinstance(delta.get("signature"), str):
            block["signature"] = (block.get("signature") or "") + delta["signature"]
        elif kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            self._partial.setdefault(index, []).append(delta["partial_json"])

    def finish(self, done: bool = True) -> AssistantMessage:
        cut = [self._blocks[i] for i in sorted(self._open)]
        tool = next((b for b in cut if b.get("type") == "tool_use"), None)
        if tool is not None:
            raise ReplyError(
                f"the stream ended inside tool_use block {tool.get('name')!r}: its input is incomplete, so the tool was not run", retryable=True
            )
        if cut or not self._stopped:
            raise ReplyError("the stream ended before message_stop; the partial reply was dropped", retryable=True)
        return _message([self._blocks[i] for i in sorted(self._blocks)], self._stop_reason, _usage(self._usage_raw), self._model)


def parse_anthropic_stream(events: Iterable[dict[str, Any]]) -> AssistantMessage:
    """Accumulate Messages API stream events (already parsed) into one ``AssistantMessage``.

    Raises:
        ReplyError: as ``AnthropicStream``.
    """
    stream = AnthropicStream()
    for event in events:
        if stream.add(event):
            break
    return stream.finish()


class AnthropicClient(HTTPClient):
    """``llm_call`` for Anthropic's Messages API: POST ``{base_url}/v1/messages``.

    Takes the OpenAI-format dict of ``format_msg_for_llm``. ``tool_choice`` in OpenAI form
    ("auto", "required", a named function) is translated. Authenticates with the
    ``x-api-key`` and ``anthropic-version`` headers; ``headers`` adds others (masked like
    the key when they carry credentials). ``stream``, ``deadline_s``, ``timeout`` and
    ``max_event_bytes`` work as in ``OpenAIClient``.

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
        )

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1/messages"

    def __repr__(self) -> str:
        base_url = self._transport.secrets.redact(self.base_url)
        return f"AnthropicClient(model={self.model!r}, base_url={base_url!r}, {self._repr_tail()})"

    def _body(self, formatted: dict[str, Any]) -> dict[str, Any]:
        return build_anthropic_request(formatted, self.model, self.max_tokens, self.options)

    def _parse(self, reply: Any) -> AssistantMessage:
        return parse_anthropic_response(reply)

    def _accumulator(self, emit: Emit) -> AnthropicStream:
        return AnthropicStream(emit)
