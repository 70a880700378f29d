"""A client for Anthropic's Messages API, taking the same OpenAI-format dict (spec §14 llmCall).

"Override this to produce custom LLM message formats for different APIs/providers"
(spec §14): rather than a second ``format_msg_for_llm``, the conversion lives in the
client, so an agent switches provider by switching ``llm_call`` alone. The system
prompt goes apart; assistant tool calls become ``tool_use`` blocks; tool results become
``tool_result`` blocks (with ``is_error``) in the next user message, consecutive ones
merged, because Anthropic requires alternating roles and an answer to every ``tool_use``.
A tool's images go inside its ``tool_result`` as image blocks, after its text; an image
Anthropic would refuse (a type other than PNG, JPEG, GIF, WebP; more than 5 MB of base64)
goes as a text block saying so (docs/api.md "Images").

Thinking: a reply's ``thinking`` and ``redacted_thinking`` blocks are kept whole in the
``AssistantMessage`` (with the ``signature`` that a stream sends as ``signature_delta``),
and go back as the first blocks of that assistant turn (``thinking_blocks`` in the
formatted dict): Anthropic requires the signed thinking block when a tool result
follows. A thinking block without a signature (another provider's) is not sent.

Server tools (docs/streaming.md "Server tools"): an assistant message whose wire has
``content_blocks`` goes back block for block in its order: ``server_tool_use``,
``mcp_tool_use`` and every ``*_tool_result`` exactly as they came, text with its
``citations``, signed thinking, and the tool calls as ``tool_use``. A request ending in an
assistant turn (a paused turn sent again, ``continue_agent``) has that turn's trailing
whitespace cut, which Anthropic refuses at the end of a turn it is to continue.

A typed answer asked of the provider (``response_format`` ``json_schema`` in the formatted
dict, docs/api.md "Native typed answers") goes as Anthropic's structured output,
``output_config.format``.

Prompt caching (``cache=True``; docs/performance.md "Prompt caching"): ``cache_control``
breakpoints on the last system block, the last tool and the last block of the newest turn,
within Anthropic's maximum of four breakpoints a request (those the caller's ``options``
already hold count). Anthropic caches the prefix up to each breakpoint; the next request,
which begins with the same prefix, reads it back (``usage.cache_read_tokens``).

Replies, whole or streamed, are read in ``_anthropic_reply`` (usage by decision 13,
decision 14 for streams cut short).
"""

from __future__ import annotations

import copy
import re
from typing import Any, Optional

from ..extraction import parse_tool_arguments
from ..types import AssistantMessage, split_data_url
from ._anthropic_reply import AnthropicStream, is_server_block, parse_anthropic_response, parse_anthropic_stream
from ._client import DEFAULT_DEADLINE_S, DEFAULT_MAX_REPLY_BYTES, HTTPClient
from ._sse import DEFAULT_MAX_EVENT_BYTES
from ._wire import Emit, content_text, join_url, unsendable

__all__ = ["AnthropicClient", "AnthropicStream", "MAX_CACHE_BREAKPOINTS", "add_cache_breakpoints", "build_anthropic_request", "parse_anthropic_response", "parse_anthropic_stream"]

API_VERSION = "2023-06-01"


MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""Anthropic's cap on one image: 5 MB of base64 (the API refuses a larger one with a 400)."""


def _image_block(part: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI ``image_url`` part as an Anthropic image block, or a text block naming why Anthropic would refuse it (docs/api.md "Images")."""
    image_url = part.get("image_url")
    url = image_url.get("url", "") if isinstance(image_url, dict) else str(image_url or "")
    parts = split_data_url(url)
    if parts is None:
        return {"type": "image", "source": {"type": "url", "url": url}}
    media_type, data = parts
    note = unsendable(media_type, data, MAX_IMAGE_BYTES, "Anthropic")
    if note:
        return {"type": "text", "text": note}
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def _tool_result(message: dict[str, Any]) -> dict[str, Any]:
    """A ``tool`` message as a ``tool_result`` block: its text, and its images inside it as image blocks (docs/api.md "Images")."""
    text = content_text(message.get("content"))
    images = message.get("images")
    content: Any = text
    if isinstance(images, list) and images:
        content = [{"type": "text", "text": text}] if text else []  # not an empty one: Anthropic refuses it
        content += [_image_block(part) for part in images if isinstance(part, dict)]
    return {"type": "tool_result", "tool_use_id": message.get("tool_call_id", ""), "content": content, "is_error": bool(message.get("is_error", False))}


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            blocks.extend(_text_block(part))  # not an empty one: Anthropic refuses it ("text content blocks must be non-empty")
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


def _tool_use(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    return {"type": "tool_use", "id": call.get("id", ""), "name": function.get("name", ""), "input": _arguments(function.get("arguments"))}


def _sent_citations(block: dict[str, Any]) -> list[Any]:
    """The citations of a text Anthropic takes back: its own, each with the ``cited_text`` every Anthropic citation carries.

    Another provider's (OpenAI's ``url_citation`` annotations, a history moved by
    ``FallbackLLM`` or a session resumed with this client) are left out: Anthropic refuses
    a citation of a type it does not know, and a field goes only to the server that made it.
    """
    citations = block.get("citations")
    return [c for c in citations if isinstance(c, dict) and isinstance(c.get("cited_text"), str)] if isinstance(citations, list) else []


def _text_block(block: dict[str, Any]) -> list[dict[str, Any]]:
    text = block.get("text")
    if not isinstance(text, str) or not text:
        return []
    citations = _sent_citations(block)
    return [{"type": "text", "text": text, "citations": citations} if citations else {"type": "text", "text": text}]


def _joined_text_blocks(previous: dict[str, Any], block: dict[str, Any]) -> dict[str, Any]:
    """``previous`` with the text (and citations) of ``block``, a text of whitespace alone, added to its own."""
    joined = {**previous, "text": previous["text"] + block["text"]}
    citations = [*_sent_citations(previous), *_sent_citations(block)]
    if citations:
        joined["citations"] = citations
    return joined


def _ordered_blocks(content_blocks: list[Any]) -> list[dict[str, Any]]:
    """The blocks of ``content_blocks`` that Anthropic takes, in their order (see the module docstring).

    A text is sent block for block as it came, each with its own citations. A text of
    whitespace alone (see ``_assistant_blocks``) is added to the text block sent just before
    it (a segment between two cited ones, docs/streaming.md "Server tools"), else left out.
    """
    blocks: list[dict[str, Any]] = []
    for block in content_blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            if isinstance(block.get("text"), str) and block["text"].strip():
                blocks.extend(_text_block(block))
            elif isinstance(block.get("text"), str) and blocks and blocks[-1]["type"] == "text":
                blocks[-1] = _joined_text_blocks(blocks[-1], block)
        elif kind in ("thinking", "redacted_thinking"):
            blocks.extend(_signed_thinking([block]))
        elif kind == "function":  # a tool call, as in tool_calls
            blocks.append(_tool_use(block))
        elif is_server_block(block):
            blocks.append(block)  # as it came
    return blocks


def _assistant_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant turn's blocks; text of whitespace alone is left out.

    Anthropic refuses a text block of whitespace alone ("text content blocks must contain
    non-whitespace text"), and a model writes one ("\n\n" before a tool call): sent back, it
    would fail every later request of the conversation. A turn of nothing else sends no
    blocks, so ``add`` leaves it out (a user's text of whitespace alone is sent, and refused
    with that message: left out, the request would end with the model's last turn, which
    Anthropic continues instead of answering).
    """
    if isinstance(message.get("content_blocks"), list):
        return _ordered_blocks(message["content_blocks"])
    blocks: list[dict[str, Any]] = _signed_thinking(message.get("thinking_blocks"))
    text = content_text(message.get("content"))
    if text.strip():
        blocks.append({"type": "text", "text": text})
    blocks.extend(_tool_use(call) for call in message.get("tool_calls") or [])
    return blocks


def _cut_trailing_whitespace(turn: dict[str, Any]) -> None:
    """A final assistant turn without the whitespace that would end it (Anthropic refuses it there)."""
    blocks = turn["content"]
    while blocks and blocks[-1].get("type") == "text":
        text = blocks[-1]["text"].rstrip()
        if text:
            blocks[-1] = {**blocks[-1], "text": text}
            return
        blocks.pop()


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
            add("user", [_tool_result(message)])
    if messages and messages[-1]["role"] == "assistant":
        _cut_trailing_whitespace(messages[-1])
        if not messages[-1]["content"]:
            messages.pop()
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, **copy.deepcopy(defaults or {})}
    for key, value in formatted.items():
        if key not in ("messages", "tools"):
            body[key] = value
    if "tool_choice" in body:
        body["tool_choice"] = _tool_choice(body["tool_choice"])
    _output_format(body)
    body.pop("parallel_tool_calls", None)
    if system:
        body["system"] = "\n\n".join(s for s in system if s)
    body["messages"] = messages
    tools = [*_declared_tools((defaults or {}).get("tools")), *_declared_tools(formatted.get("tools"))]
    if tools:
        body["tools"] = tools
    return body


STRUCTURED_OUTPUT_MODELS = re.compile(r"claude-(?:opus|sonnet|haiku)-(?:4-[5-9]|[5-9])(?![0-9])")
"""The models Anthropic documents structured outputs for (Claude Sonnet 4.5, Opus 4.5, Haiku 4.5, the 4.6s and later): ``AnthropicClient.native_output``."""


def _output_format(body: dict[str, Any]) -> None:
    """A ``json_schema`` ``response_format`` (a typed answer's, docs/api.md "Native typed answers") as Anthropic's structured output format.

    ``output_config: {"format": {"type": "json_schema", "schema": ...}}``, the generally
    available form (no beta header; the beta's ``output_format`` is its old name).
    Anthropic has no ``response_format``: one of another kind is left out.
    """
    wanted = body.pop("response_format", None)
    spec = wanted.get("json_schema") if isinstance(wanted, dict) and wanted.get("type") == "json_schema" else None
    if isinstance(spec, dict):
        config = body.get("output_config")
        body["output_config"] = {**(config if isinstance(config, dict) else {}), "format": {"type": "json_schema", "schema": spec.get("schema", {})}}


def _declared_tools(tools: Any) -> list[dict[str, Any]]:
    """Tool definitions for Anthropic: OpenAI function entries converted, Anthropic's own (a server tool's ``type``) as they are."""
    declared = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        if isinstance(function, dict):
            declared.append({"name": function.get("name"), "description": function.get("description", ""), "input_schema": function.get("parameters") or {"type": "object"}})
        elif isinstance(tool.get("type"), str) and tool["type"] != "function":
            declared.append(tool)  # e.g. {"type": "web_search_20250305", "name": "web_search"}: docs/streaming.md "Server tools"
    return declared


MAX_CACHE_BREAKPOINTS = 4
"""Anthropic's documented maximum of ``cache_control`` breakpoints in one request."""

_EPHEMERAL = {"type": "ephemeral"}
# the blocks Anthropic takes a cache_control on (a thinking block takes none: it is cached with its turn)
_CACHEABLE = frozenset({"text", "image", "document", "tool_use", "tool_result", "search_result"})


def add_cache_breakpoints(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with ``cache_control`` on its last system block, its last tool and the last block of its newest turn, in that order of need.

    Anthropic caches tools, then the system prompt, then the messages, each prefix up to a
    breakpoint; at most ``MAX_CACHE_BREAKPOINTS`` a request, those already in ``body``
    (the caller's ``options``) counted. A string system prompt becomes one text block to
    carry it. The dicts changed are copies: the request's own lists are new per call, the
    blocks in them may be shared (read-only wires, docs/performance.md).
    """
    room = MAX_CACHE_BREAKPOINTS - _breakpoints(body)
    tools = body.get("tools")
    if room > 0 and isinstance(tools, list) and tools and isinstance(tools[-1], dict) and "cache_control" not in tools[-1]:
        body["tools"] = [*tools[:-1], {**tools[-1], "cache_control": dict(_EPHEMERAL)}]
        room -= 1
    system = body.get("system")
    if room > 0 and isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": dict(_EPHEMERAL)}]
        room -= 1
    elif room > 0 and isinstance(system, list) and system and isinstance(system[-1], dict) and "cache_control" not in system[-1]:
        body["system"] = [*system[:-1], {**system[-1], "cache_control": dict(_EPHEMERAL)}]
        room -= 1
    messages = body.get("messages")
    if room > 0 and isinstance(messages, list) and messages and isinstance(messages[-1].get("content"), list):
        blocks = messages[-1]["content"]
        for i in range(len(blocks) - 1, -1, -1):
            if isinstance(blocks[i], dict) and blocks[i].get("type") in _CACHEABLE:
                if "cache_control" not in blocks[i]:
                    turn = {**messages[-1], "content": [*blocks[:i], {**blocks[i], "cache_control": dict(_EPHEMERAL)}, *blocks[i + 1:]]}
                    body["messages"] = [*messages[:-1], turn]
                break
    return body


def _breakpoints(value: Any) -> int:
    """How many ``cache_control`` keys ``value`` holds, at any depth."""
    if isinstance(value, dict):
        return ("cache_control" in value) + sum(_breakpoints(v) for k, v in value.items() if k != "cache_control")
    if isinstance(value, list):
        return sum(_breakpoints(v) for v in value)
    return 0


class AnthropicClient(HTTPClient):
    """``llm_call`` for Anthropic's Messages API: POST ``{base_url}/v1/messages``.

    Takes the OpenAI-format dict of ``format_msg_for_llm``. Anthropic's server tools are
    declared in ``options={"tools": [...]}`` (or the formatted dict's ``tools``) in
    Anthropic's form; they are sent beside the agent's tools. ``tool_choice`` in OpenAI form
    ("auto", "required", a named function) is translated. Authenticates with the
    ``x-api-key`` and ``anthropic-version`` headers; ``headers`` adds others (masked like
    the key when they carry credentials). ``stream``, ``deadline_s``, ``timeout`` and
    ``max_event_bytes`` and ``max_reply_bytes`` work as in ``OpenAIClient``. ``cache=True``
    places prompt-cache breakpoints (``add_cache_breakpoints``; docs/performance.md "Prompt caching").

    ``native_output`` ("output_config" for a model Anthropic documents structured outputs for,
    ``STRUCTURED_OUTPUT_MODELS``, else None; may be set) tells ``output_mode="auto"`` that a
    typed answer can be asked as Anthropic's structured output (docs/api.md "Native typed
    answers"); a ``response_format`` of the formatted dict is sent as ``output_config.format``.

    Thread safety: a client may serve several agents and threads at once.
    """

    native_output: Optional[str] = None

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
        cache: bool = False,
    ) -> None:
        self.model = model
        # typed answers (docs/api.md "Native typed answers"): the models with structured outputs; may be set after construction
        self.native_output = "output_config" if STRUCTURED_OUTPUT_MODELS.search(model) else None
        self.base_url = base_url.rstrip("/")
        self.max_tokens = max_tokens
        self.cache = bool(cache)
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
        return add_cache_breakpoints(body) if self.cache else body

    def _parse(self, reply: Any) -> AssistantMessage:
        return parse_anthropic_response(reply)

    def _accumulator(self, emit: Emit) -> AnthropicStream:
        return AnthropicStream(emit)
