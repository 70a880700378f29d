"""A client for OpenAI's chat-completions API and every server that speaks it (spec §14 llmCall).

OpenAI, Ollama ``/v1``, vLLM, llama.cpp's server, Groq, Together, DeepSeek, OpenRouter,
Mistral. Replies are parsed leniently, because these servers disagree (see
tests/fixtures/README.md): missing or null content, a missing ``type``, empty or
missing ids and arguments, double-encoded arguments, text beside tool calls, and an
unreliable ``finish_reason``. Ollama's native ``/api/chat`` body (``message`` at the top
level) is read too.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any, Optional
from urllib.parse import urlsplit

from ..messages import AssistantMessage, LLMUsage, TextContent
from ._http import HTTPClient, JSONPoster, content_text

__all__ = ["OpenAIClient", "build_openai_request", "parse_openai_response", "parse_openai_stream"]

_FINISH_REASONS = {
    "stop": "stop",
    "end_turn": "stop",
    "length": "length",
    "max_tokens": "length",
    "tool_calls": "tool_use",
    "tool": "tool_use",
    "function_call": "tool_use",
    "content_filter": "content_filter",
}
# The keys OpenAI's schema allows on each message role; our extras ("name", "is_error" on tool messages) are not sent.
_MESSAGE_KEYS = {
    "system": ("role", "content", "name"),
    "developer": ("role", "content", "name"),
    "user": ("role", "content", "name"),
    "assistant": ("role", "content", "name", "tool_calls", "refusal"),
    "tool": ("role", "content", "tool_call_id"),
}


def _wire_message(message: dict[str, Any]) -> dict[str, Any]:
    role = message.get("role")
    wire = {k: message[k] for k in _MESSAGE_KEYS.get(role, tuple(message)) if k in message}
    if role == "tool":
        wire["content"] = content_text(message.get("content"))  # decision 9: one string
    elif role == "assistant" and wire.get("tool_calls") and not wire.get("content"):
        wire["content"] = ""  # not null: llama.cpp's server answers 500 to null beside tool calls
    return wire


def build_openai_request(formatted: dict[str, Any], model: str, defaults: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The chat-completions request body for a dict made by ``format_msg_for_llm``.

    Keys of ``formatted`` beyond ``messages`` and ``tools`` (``tool_choice``,
    ``temperature``, ``max_tokens``, …) are passed to the server as they are, over the
    client's ``defaults``; ``model`` may be overridden the same way. ``formatted`` is not
    modified.
    """
    body: dict[str, Any] = {"model": model, **copy.deepcopy(defaults or {})}
    for key, value in formatted.items():
        if key not in ("messages", "tools"):
            body[key] = value
    body["messages"] = [_wire_message(m) for m in formatted.get("messages", [])]
    if formatted.get("tools"):
        body["tools"] = formatted["tools"]
    return body


def _tool_call_entry(raw: Any) -> Any:
    """One tool call in the §7 format-1 shape, keeping the server's id and arguments as they came."""
    if not isinstance(raw, dict):
        return raw
    function = raw.get("function") if isinstance(raw.get("function"), dict) else raw
    entry: dict[str, Any] = {"type": "function", "function": {"name": function.get("name", "")}}
    if "arguments" in function:
        entry["function"]["arguments"] = function["arguments"]
    if isinstance(raw.get("id"), str):
        entry["id"] = raw["id"]
    return entry


def _usage(raw: Any) -> Optional[LLMUsage]:
    if not isinstance(raw, dict):
        return None
    details = raw.get("prompt_tokens_details") if isinstance(raw.get("prompt_tokens_details"), dict) else {}
    prompt = int(raw.get("prompt_tokens") or raw.get("prompt_eval_count") or 0)
    completion = int(raw.get("completion_tokens") or raw.get("eval_count") or 0)
    return LLMUsage(
        input_tokens=prompt,
        output_tokens=completion,
        cache_read_tokens=int(details.get("cached_tokens") or raw.get("prompt_cache_hit_tokens") or 0),
        total_tokens=int(raw.get("total_tokens") or prompt + completion),
    )


def _assistant_message(
    content: Any, reasoning: Any, tool_calls: list[Any], finish_reason: Any, usage: Optional[LLMUsage], model: Any, provider: str
) -> AssistantMessage:
    blocks: list[Any] = []
    if isinstance(reasoning, str) and reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning})
    text = content_text(content)
    if text:
        blocks.append(TextContent(text))
    if tool_calls:
        blocks.append({"type": "tool_calls", "tool_calls": [_tool_call_entry(c) for c in tool_calls]})
    stop_reason = _FINISH_REASONS.get(finish_reason) if isinstance(finish_reason, str) else None
    if tool_calls and stop_reason != "length":
        stop_reason = "tool_use"  # a turn with tool calls is a tool turn whatever finish_reason says
    elif stop_reason is None or (stop_reason == "tool_use" and not tool_calls):
        stop_reason = "stop"
    return AssistantMessage(
        blocks, api="openai-chat", provider=provider, model=model if isinstance(model, str) else None, usage=usage, stop_reason=stop_reason
    )


def parse_openai_response(body: dict[str, Any], provider: str = "openai") -> AssistantMessage:
    """An ``AssistantMessage`` from a chat-completions body (or Ollama's native chat body).

    Raises:
        ValueError: the body has neither ``choices`` with a ``message`` nor a ``message``.
    """
    if not isinstance(body, dict):
        raise ValueError(f"expected a JSON object, got {type(body).__name__}")
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict) and isinstance(choices[0].get("message"), dict):
        choice = choices[0]
        message, finish_reason = choice["message"], choice.get("finish_reason")
    elif isinstance(body.get("message"), dict):  # Ollama native /api/chat
        message, finish_reason = body["message"], body.get("done_reason")
    else:
        raise ValueError("the body has no choices[0].message")
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    tool_calls = message.get("tool_calls") if isinstance(message.get("tool_calls"), list) else []
    return _assistant_message(message.get("content"), reasoning, tool_calls, finish_reason, _usage(body.get("usage") or body), body.get("model"), provider)


def parse_openai_stream(chunks: Iterable[dict[str, Any]], provider: str = "openai") -> AssistantMessage:
    """Accumulate streamed chat-completion chunks into one ``AssistantMessage``.

    Tool-call fragments are keyed by ``index`` (which may start at 1); a later fragment's
    empty ``name`` or ``id`` never overwrites a known one; usage-only chunks
    (``choices: []``) are read for their usage. Ollama's native stream (one partial
    ``message`` per line) is read too.
    """
    text: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    order: list[int] = []
    finish_reason, usage, model = None, None, None
    for chunk in chunks:
        model = chunk.get("model") or model
        if isinstance(chunk.get("usage"), dict):
            usage = _usage(chunk["usage"])
        choices = chunk.get("choices")
        if choices is None and isinstance(chunk.get("message"), dict):  # Ollama native: NDJSON of partial messages
            message = chunk["message"]
            native_calls = [{**c, "index": len(order) + i} for i, c in enumerate(message.get("tool_calls") or [])]
            choices = [{"delta": {**message, "tool_calls": native_calls}, "finish_reason": chunk.get("done_reason")}]
            usage = _usage(chunk) if chunk.get("done") else usage
        for choice in choices or []:
            delta = choice.get("delta") or {}
            finish_reason = choice.get("finish_reason") or finish_reason
            if isinstance(delta.get("content"), str):
                text.append(delta["content"])
            piece = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(piece, str):
                reasoning.append(piece)
            for fragment in delta.get("tool_calls") or []:
                index = fragment.get("index", len(order))
                if index not in calls:
                    calls[index] = {"id": "", "function": {"name": "", "arguments": ""}}
                    order.append(index)
                call, function = calls[index], fragment.get("function") or {}
                if fragment.get("id"):
                    call["id"] = fragment["id"]
                if function.get("name"):
                    call["function"]["name"] = call["function"]["name"] or function["name"]
                if isinstance(function.get("arguments"), str):
                    call["function"]["arguments"] += function["arguments"]
                elif isinstance(function.get("arguments"), dict):
                    call["function"]["arguments"] = function["arguments"]
    tool_calls = [calls[i] for i in order]
    return _assistant_message("".join(text), "".join(reasoning), tool_calls, finish_reason, usage, model, provider)


class OpenAIClient(HTTPClient):
    """``llm_call`` for an OpenAI-compatible server: POST ``{base_url}/chat/completions``.

    ``options`` are request defaults (``temperature``, ``tool_choice``, ``max_tokens``,
    ``parallel_tool_calls``, …); keys a formatted dict carries beyond ``messages`` and
    ``tools`` override them for that call. With ``"stream": True`` the reply is read as
    server-sent events and accumulated. ``max_retry_delay_ms`` may be changed after
    construction (``YiemAgent(max_retry_delay_ms=...)`` does).

    Thread safety: a client may serve several agents and threads at once.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: Optional[str] = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_retry_delay_ms: float = 60000,
        backoff_factor: float = 0.5,
        options: Optional[dict[str, Any]] = None,
        stream: bool = False,  # issue 14 (placeholder for the CLI until issue 10's clients are merged)
        headers: Optional[dict[str, str]] = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.options = {**(options or {}), **({"stream": True} if stream else {})}
        self._api_key = api_key
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self.provider = urlsplit(self.base_url).hostname or "openai"
        self._poster = JSONPoster(
            "OpenAI-compatible",
            timeout=timeout,
            max_retries=max_retries,
            max_retry_delay_ms=max_retry_delay_ms,
            backoff_factor=backoff_factor,
            secret=api_key,
        )

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def __repr__(self) -> str:
        return f"OpenAIClient(base_url={self.base_url!r}, model={self.model!r}, api_key={self._masked_key()})"

    def _body(self, formatted: dict[str, Any]) -> dict[str, Any]:
        body = build_openai_request(formatted, self.model, self.options)
        if body.get("stream"):
            body.setdefault("stream_options", {"include_usage": True})
        return body

    def _parse(self, reply: Any) -> AssistantMessage:
        return parse_openai_response(reply, self.provider)

    def _parse_stream(self, events: Iterable[dict[str, Any]]) -> AssistantMessage:
        return parse_openai_stream(events, self.provider)
