"""Reading a chat-completions reply, whole or streamed, from OpenAI's API and every server that speaks it (spec §14 llmCall).

``parse_openai_response`` reads a whole reply, ``OpenAIStream`` (and
``parse_openai_stream``) a streamed one, into an ``AssistantMessage``; ``OpenAIClient``
(module ``openai``) uses both. Replies are parsed leniently, because these servers
disagree (see tests/fixtures/README.md): missing or null content, a missing ``type``,
empty or missing ids and arguments, double-encoded arguments, text beside tool calls,
and an unreliable ``finish_reason``. Ollama's native ``/api/chat`` body (``message`` at
the top level) is read too.

Two more kinds of call are read as tool calls (docs/failures.md "OpenAI custom and
legacy calls"): gpt-5's ``custom`` tool calls (``{"type": "custom", "custom": {"name",
"input"}}``, free text), whose input reaches the tool as ``{"input": text}``, and legacy
``message.function_call`` replies (gpt-3.5-0613's function calling, ``delta.function_call``
when streamed), which carry no id.

Reasoning is kept as a ``{"type": "thinking", "thinking": ...}`` block before the text,
whether it comes as ``reasoning_content`` (DeepSeek, vLLM), ``reasoning`` (Groq,
OpenRouter, Ollama) or as Mistral's ``{"type": "thinking"}`` content parts. The fields a
server documents as wanted back (``ECHOED_FIELDS``: ``reasoning_content``,
``reasoning_details``, Gemini's ``extra_content``; a tool call's ``extra_content``) ride on
that block as ``reasoning_fields`` exactly as they came (docs/streaming.md "Reasoning sent
back"). A refusal (``message.refusal``, ``delta.refusal``) is a ``{"type": "refusal"}``
block and ``stop_reason "refusal"`` (``AssistantMessage.refusal``). Annotations
(``message.annotations``, ``delta.annotations``: a search model's ``url_citation``s) ride
on the text block they index as its ``citations``, exactly as they came
(``AssistantMessage.citations``, docs/api.md "Citations"); chat completions take none
back, so they are not sent.

Decision 13: ``prompt_tokens`` already include cached tokens and ``completion_tokens``
reasoning ones (OpenAI, DeepSeek, Groq, OpenRouter, Mistral). Where a server counts
reasoning apart (xAI, Gemini: ``total_tokens == prompt + completion + reasoning``), the
reasoning tokens are added to ``output_tokens``. ``total_tokens`` is always
``input_tokens + output_tokens``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from ..types import AssistantMessage, LLMUsage, TextContent
from ._wire import Emit, ReplyError, content_text, payload_error, require_object, token_count

API = "openai-chat"  # AssistantMessage.api of this client's replies
# The fields of an assistant message that a server documents as wanted back unchanged on the
# next request (docs/streaming.md "Reasoning sent back"): DeepSeek, Kimi, Z.ai, llama.cpp
# ``reasoning_content``; OpenRouter and gateways ``reasoning_details``; Gemini ``extra_content``.
# ``reasoning`` (Groq, Ollama, OpenRouter's plain view of its details) is read, not sent back.
ECHOED_FIELDS = ("reasoning_content", "reasoning_details", "extra_content")

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
_PLAIN_CHUNK_KEYS = frozenset({"id", "object", "created", "model", "choices", "system_fingerprint", "service_tier", "obfuscation"})
_PLAIN_CHOICE_KEYS = frozenset({"index", "delta", "logprobs", "finish_reason"})
_PLAIN_DELTA_KEYS = frozenset({"role", "content", "refusal"})  # "refusal" only as null: a refusal's words take the general path
CUSTOM, LEGACY = "custom", "function_call"  # AgentToolCall.type of a custom call and of a legacy function_call


def _tool_call_entry(raw: Any) -> dict[str, Any]:
    """One tool call in the §7 format-1 shape, keeping the server's id and arguments as they came.

    A custom call keeps OpenAI's shape (``{"type": "custom", "custom": {"name", "input"}}``),
    which extraction reads; a legacy ``function_call`` is a function call of type
    ``"function_call"``, so that it goes back as one.
    """
    raw = require_object(raw, "a tool_calls entry")
    if raw.get("type") == CUSTOM and isinstance(raw.get("custom"), dict):
        custom = raw["custom"]
        entry: dict[str, Any] = {"type": CUSTOM, "custom": {"name": custom.get("name", ""), "input": custom.get("input", "")}}
    else:
        function = raw.get("function") if isinstance(raw.get("function"), dict) else raw
        entry = {"type": LEGACY if raw.get("type") == LEGACY else "function", "function": {"name": function.get("name", "")}}
        if "arguments" in function:
            entry["function"]["arguments"] = function["arguments"]
    if isinstance(raw.get("extra_content"), dict):  # Gemini's thought signature on the call: back as it came
        entry["extra_content"] = raw["extra_content"]
    if isinstance(raw.get("id"), str):
        entry["id"] = raw["id"]
    return entry


def _details(raw: dict[str, Any], *keys: str) -> dict[str, Any]:
    """The first of ``keys`` in ``raw`` that holds an object; {} when none does."""
    for key in keys:
        value = raw.get(key)
        if isinstance(value, dict):
            return value
    return {}


def _usage(raw: Any) -> Optional[LLMUsage]:
    """Decision 13 from an OpenAI-shaped ``usage``: chat completions' (or Ollama's native counts), or the Responses API's.

    The Responses API names the same counts ``input_tokens`` and ``output_tokens``, with
    ``input_tokens_details.cached_tokens`` and ``output_tokens_details.reasoning_tokens``;
    its input includes the cached tokens and its output the reasoning ones, as chat's do.
    """
    if not isinstance(raw, dict):
        return None
    prompt_details = _details(raw, "prompt_tokens_details", "input_tokens_details")
    completion_details = _details(raw, "completion_tokens_details", "output_tokens_details")
    prompt = token_count(raw, "prompt_tokens", "prompt_eval_count", "input_tokens")
    completion = token_count(raw, "completion_tokens", "eval_count", "output_tokens")
    reasoning = token_count(completion_details, "reasoning_tokens") or token_count(raw, "reasoning_tokens")
    if reasoning and token_count(raw, "total_tokens") == prompt + completion + reasoning:
        completion += reasoning  # xAI, Gemini: completion_tokens leave the reasoning out
    return LLMUsage(
        input_tokens=prompt,
        output_tokens=completion,
        cache_read_tokens=token_count(prompt_details, "cached_tokens") or token_count(raw, "prompt_cache_hit_tokens"),
        cache_write_tokens=token_count(prompt_details, "cache_write_tokens", "cache_creation_tokens"),
        total_tokens=prompt + completion,
        reasoning_tokens=reasoning,
    )


def _thinking_of_part(part: dict[str, Any]) -> str:
    """The text of a Mistral thinking part: ``thinking`` is a list of text parts (or a string)."""
    thinking = part.get("thinking")
    return thinking if isinstance(thinking, str) else content_text(thinking)


def _split_content(content: Any) -> tuple[str, str]:
    """``(text, thinking)`` of a message's or a delta's ``content``: a string, or a list of text and thinking parts."""
    if isinstance(content, list):
        thinking = "".join(_thinking_of_part(p) for p in content if isinstance(p, dict) and p.get("type") == "thinking")
        return content_text(content), thinking
    return (content if isinstance(content, str) else ""), ""


def _reasoning(message: dict[str, Any]) -> str:
    piece = message.get("reasoning_content") or message.get("reasoning")
    return piece if isinstance(piece, str) else ""


def _echoed(message: dict[str, Any]) -> dict[str, Any]:
    """The fields of a reply's message its server wants back (``ECHOED_FIELDS``), exactly as they came; null or empty ones are left out."""
    fields: dict[str, Any] = {}
    if isinstance(message.get("reasoning_content"), str):
        fields["reasoning_content"] = message["reasoning_content"]
    if isinstance(message.get("reasoning_details"), list) and message["reasoning_details"]:
        fields["reasoning_details"] = message["reasoning_details"]
    if isinstance(message.get("extra_content"), dict) and message["extra_content"]:
        fields["extra_content"] = message["extra_content"]
    return fields


def _assistant_message(
    text: str,
    thinking: str,
    tool_calls: list[Any],
    finish_reason: Any,
    usage: Optional[LLMUsage],
    model: Any,
    provider: str,
    echoed: Optional[dict[str, Any]] = None,
    refusal: str = "",
    api: str = API,
    annotations: Optional[list[Any]] = None,
) -> AssistantMessage:
    blocks: list[Any] = []
    if thinking or echoed:
        block: dict[str, Any] = {"type": "thinking", "thinking": thinking}
        echoed = dict(echoed or {})
        if thinking and echoed.get("reasoning_content") == thinking:
            del echoed["reasoning_content"]
            block["wire_field"] = "reasoning_content"  # the thinking is that field's value: kept once
        if echoed:
            block["reasoning_fields"] = echoed  # sent back to this provider alone (build_openai_request)
        blocks.append(block)
    if text or annotations:
        blocks.append(TextContent(text, annotations or None))  # the annotations beside the text they index (AssistantMessage.citations)
    if refusal:
        blocks.append({"type": "refusal", "refusal": refusal})
    if tool_calls:
        blocks.append({"type": "tool_calls", "tool_calls": [_tool_call_entry(c) for c in tool_calls]})
    stop_reason = _FINISH_REASONS.get(finish_reason) if isinstance(finish_reason, str) else None
    if tool_calls and stop_reason != "length":
        stop_reason = "tool_use"  # a turn with tool calls is a tool turn whatever finish_reason says
    elif refusal:
        stop_reason = "refusal"  # finish_reason says "stop": the words are the model's refusal, not an answer
    elif stop_reason is None or (stop_reason == "tool_use" and not tool_calls):
        stop_reason = "stop"
    return AssistantMessage(
        blocks, api=api, provider=provider, model=model if isinstance(model, str) else None, usage=usage, stop_reason=stop_reason
    )


def _check_finish(finish_reason: Any) -> None:
    if finish_reason == "error":  # OpenRouter's mid-stream failure, when no error object came with it
        raise ReplyError("finish_reason 'error' with no error object", retryable=True)


def parse_openai_response(body: dict[str, Any], provider: str = "openai") -> AssistantMessage:
    """An ``AssistantMessage`` from a chat-completions body (or Ollama's native chat body).

    Raises:
        ReplyError: (a ``ValueError``) the body has neither ``choices`` with a ``message``
            nor a ``message``, a ``tool_calls`` entry is not an object, or a usage count
            is not a count.
    """
    body = require_object(body, "the reply")
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict) and isinstance(choices[0].get("message"), dict):
        choice = choices[0]
        message, finish_reason = choice["message"], choice.get("finish_reason")
    elif isinstance(body.get("message"), dict):  # Ollama native /api/chat
        message, finish_reason = body["message"], body.get("done_reason")
    else:
        raise ReplyError("the body has no choices[0].message")
    _check_finish(finish_reason)
    raw_calls = message.get("tool_calls")
    if raw_calls is not None and not isinstance(raw_calls, list):
        raise ReplyError(f"the tool_calls are not a list but {type(raw_calls).__name__}")
    if not raw_calls and isinstance(message.get("function_call"), dict):  # legacy function calling (gpt-3.5-0613): one call, no id
        raw_calls = [{"type": LEGACY, "function": message["function_call"]}]
    text, thinking = _split_content(message.get("content"))
    thinking = _reasoning(message) or thinking
    usage = _usage(body.get("usage") if isinstance(body.get("usage"), dict) else body)
    refusal = message.get("refusal") if isinstance(message.get("refusal"), str) else ""
    return _assistant_message(text, thinking, raw_calls or [], finish_reason, usage, body.get("model"), provider, _echoed(message), refusal, annotations=_annotations(message))


def _annotations(message: dict[str, Any]) -> list[Any]:
    """A message's or a delta's ``annotations`` (OpenAI's ``url_citation``s, search models): its objects as they came, [] when none."""
    annotations = message.get("annotations")
    return [a for a in annotations if isinstance(a, dict)] if isinstance(annotations, list) else []


class OpenAIStream:
    """Accumulates chat-completion chunks into one ``AssistantMessage``, emitting text and thinking as they come.

    Tool-call fragments are keyed by ``index`` (which may start at 1); a later fragment's
    empty ``name`` or ``id`` never overwrites a known one; usage-only chunks
    (``choices: []``) are read for their usage. Ollama's native stream (one partial
    ``message`` per line, ``done: true`` at the end) is read too. Decision 14: a chunk
    carrying an ``error`` raises; a stream that ends with neither a ``finish_reason`` nor
    ``[DONE]`` (nor Ollama's ``done``) is not whole and raises; so does one that carried
    no choice at all (``[DONE]`` alone, a proxy's empty stream).

    Thread safety: none; one accumulator belongs to one call.
    """

    def __init__(self, provider: str = "openai", emit: Optional[Emit] = None) -> None:
        self.provider = provider
        self._emit = emit or (lambda kind, text: None)
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._calls: dict[Any, dict[str, Any]] = {}
        self._finish_reason: Any = None
        self._finished = False
        self._answered = False  # a choice came: a stream of [DONE] alone carries no reply
        self._usage: Optional[LLMUsage] = None
        self._model: Any = None
        self._reasoning_content: Optional[list[str]] = None  # the pieces of reasoning_content, once one came
        self._details: list[dict[str, Any]] = []  # reasoning_details, a piece of one joined to it (_add_details)
        self._extra: dict[str, Any] = {}  # the message's extra_content (Gemini)
        self._refusal: list[str] = []
        self._annotations: list[Any] = []  # delta.annotations, in the order they came (search models send them at the end)

    def add(self, chunk: Any) -> bool:
        if self._add_plain_text(chunk):
            return False
        chunk = require_object(chunk, "a stream event")
        error = payload_error(chunk)
        if error is not None:
            raise error
        self._model = chunk.get("model") or self._model
        if isinstance(chunk.get("usage"), dict):
            self._usage = _usage(chunk["usage"])
        choices = chunk.get("choices")
        if choices is None and isinstance(chunk.get("message"), dict):  # Ollama native: NDJSON of partial messages
            message = chunk["message"]
            native = message.get("tool_calls")
            if native is not None and not isinstance(native, list):  # as parse_openai_response: not read as a reply without calls
                raise ReplyError(f"the tool_calls are not a list but {type(native).__name__}")
            native_calls = [{**require_object(c, "a tool_calls entry"), "index": len(self._calls) + i} for i, c in enumerate(native or [])]
            choices = [{"delta": {**message, "tool_calls": native_calls}, "finish_reason": chunk.get("done_reason")}]
            if chunk.get("done"):
                self._usage, self._finished = _usage(chunk), True
        if not isinstance(choices, list):
            if choices is None:
                return False
            raise ReplyError(f"a stream event's choices are not a list but {type(choices).__name__}")
        for choice in choices:
            choice = require_object(choice, "a stream choice")
            if choice.get("index") in (0, None):  # as a whole reply reads choices[0]: with n > 1 the others interleave
                self._add_choice(choice)
        return False

    def _add_plain_text(self, chunk: Any) -> bool:
        """The common chunk, one choice whose delta is text alone, taken in one step; False for any other.

        What it takes, the general path would have read the same way (the text appended and
        emitted); every other chunk, down to a ``finish_reason`` or an unknown key, goes there.
        """
        if type(chunk) is not dict or not chunk.keys() <= _PLAIN_CHUNK_KEYS:
            return False
        choices = chunk.get("choices")
        if type(choices) is not list or len(choices) != 1:
            return False
        choice = choices[0]
        if type(choice) is not dict or not choice.keys() <= _PLAIN_CHOICE_KEYS or choice.get("finish_reason") is not None or choice.get("index") not in (0, None):
            return False
        delta = choice.get("delta")
        if type(delta) is not dict or not delta.keys() <= _PLAIN_DELTA_KEYS or type(delta.get("content", "")) is not str or delta.get("refusal") is not None:
            return False
        self._model = chunk.get("model") or self._model
        self._answered = True
        text = delta.get("content")
        if text:
            self._text.append(text)
            self._emit("text", text)
        return True

    def _add_choice(self, choice: dict[str, Any]) -> None:
        self._answered = True
        delta = require_object(choice.get("delta") or {}, "a stream delta")
        _check_finish(choice.get("finish_reason"))
        self._finish_reason = choice.get("finish_reason") or self._finish_reason
        thinking = _reasoning(delta)
        text, thinking_parts = _split_content(delta.get("content"))
        for kind, piece, into in (("thinking", thinking + thinking_parts, self._thinking), ("text", text, self._text)):
            if piece:
                into.append(piece)
                self._emit(kind, piece)
        self._add_echoed(delta)
        fragments = delta.get("tool_calls")
        if fragments is not None and not isinstance(fragments, list):
            raise ReplyError(f"a stream delta's tool_calls are not a list but {type(fragments).__name__}")
        for fragment in fragments or []:
            self._add_fragment(require_object(fragment, "a streamed tool_calls fragment"))
        legacy = delta.get("function_call")
        if legacy is not None:  # legacy function calling: one call, streamed as delta.function_call
            self._add_fragment({"index": LEGACY, "type": LEGACY, "function": require_object(legacy, "a streamed function_call")})

    def _add_echoed(self, delta: dict[str, Any]) -> None:
        """A delta's pieces of the fields sent back (``ECHOED_FIELDS``) and of its refusal, kept as the whole reply would carry them."""
        if isinstance(delta.get("reasoning_content"), str):
            if self._reasoning_content is None:
                self._reasoning_content = []
            self._reasoning_content.append(delta["reasoning_content"])
        details = delta.get("reasoning_details")
        for detail in details if isinstance(details, list) else []:
            if isinstance(detail, dict):
                self._add_detail(detail)
        if isinstance(delta.get("extra_content"), dict) and delta["extra_content"]:
            self._extra = delta["extra_content"]
        if isinstance(delta.get("refusal"), str):
            self._refusal.append(delta["refusal"])
        self._annotations += _annotations(delta)

    def _add_detail(self, detail: dict[str, Any]) -> None:
        """One streamed ``reasoning_details`` entry: a piece of the last entry when it has its ``index`` and ``type``.

        OpenRouter streams a detail in pieces sharing ``index`` and ``type``: their ``text``,
        ``summary``, ``data`` and ``signature`` join; any other key takes its latest non-null value.
        """
        last = self._details[-1] if self._details else None
        if last is None or detail.get("index") is None or (last.get("index"), last.get("type")) != (detail.get("index"), detail.get("type")):
            self._details.append(dict(detail))
            return
        for key, value in detail.items():
            if key in ("text", "summary", "data", "signature") and isinstance(value, str) and isinstance(last.get(key), str):
                last[key] += value
            elif value is not None:
                last[key] = value

    def _add_fragment(self, fragment: dict[str, Any]) -> None:
        index = fragment.get("index", len(self._calls))
        if not isinstance(index, (int, str)) or isinstance(index, bool):
            raise ReplyError(f"a streamed tool_calls fragment has index {index!r}")
        call = self._calls.setdefault(index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
        if fragment.get("type") in (CUSTOM, LEGACY):
            call["type"] = fragment["type"]
        if fragment.get("id") and isinstance(fragment["id"], str):
            call["id"] = fragment["id"]
        if isinstance(fragment.get("extra_content"), dict):  # Gemini's thought signature on the call
            call["extra_content"] = fragment["extra_content"]
        custom = fragment.get("custom")
        if isinstance(custom, dict):  # a custom call: its name once, its free-text input in pieces (as OpenAI's SDK joins them)
            call["type"] = CUSTOM
            joined = call.setdefault("custom", {"name": "", "input": ""})
            if custom.get("name") and isinstance(custom["name"], str):
                joined["name"] = joined["name"] or custom["name"]
            if isinstance(custom.get("input"), str):
                joined["input"] += custom["input"]
            return
        function = fragment.get("function")
        function = function if isinstance(function, dict) else {}
        if function.get("name") and isinstance(function["name"], str):
            call["function"]["name"] = call["function"]["name"] or function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str) and isinstance(call["function"]["arguments"], str):
            call["function"]["arguments"] += arguments
        elif isinstance(arguments, dict):
            call["function"]["arguments"] = arguments

    def finish(self, done: bool = True) -> AssistantMessage:
        if not (done or self._finished or self._finish_reason):
            raise ReplyError("the stream ended before the reply was whole (no finish_reason, no [DONE]); the partial reply was dropped", retryable=True)
        if not self._answered:
            raise ReplyError("the stream ended without any choice: it carried no reply", retryable=True)
        text, thinking = "".join(self._text), "".join(self._thinking)
        echoed = _echoed({"reasoning_content": None if self._reasoning_content is None else "".join(self._reasoning_content), "reasoning_details": self._details, "extra_content": self._extra})
        calls = _without_mirror(self._calls)
        return _assistant_message(text, thinking, calls, self._finish_reason, self._usage, self._model, self.provider, echoed, "".join(self._refusal), annotations=self._annotations)


def _without_mirror(calls: dict[Any, dict[str, Any]]) -> list[dict[str, Any]]:
    """The streamed calls, less a legacy ``function_call`` that only mirrors ``tool_calls``.

    Servers that speak both forms (llama-cpp-python, some proxies) send the first tool call
    again as ``function_call``; it is a call of its own only when no ``tool_calls`` came.
    """
    if any(index != LEGACY for index in calls):
        return [call for index, call in calls.items() if index != LEGACY]
    return list(calls.values())


def parse_openai_stream(chunks: Iterable[dict[str, Any]], provider: str = "openai") -> AssistantMessage:
    """Accumulate streamed chat-completion chunks (already parsed) into one ``AssistantMessage``.

    Raises:
        ReplyError: as ``OpenAIStream``; here the chunks are taken as the whole stream.
    """
    stream = OpenAIStream(provider)
    for chunk in chunks:
        stream.add(chunk)
    return stream.finish(done=True)
