"""Reading OpenAI Responses API replies, whole or streamed (spec §14 llmCall; decisions 13 and 14).

A reply's ``output`` is a list of items: ``message`` (``output_text`` and ``refusal``
parts), ``function_call`` (``call_id``, ``name``, ``arguments``) and ``reasoning`` (its
``summary`` parts, ``encrypted_content`` when asked for). The text is one
``TextContent`` (with its parts' ``url_citation`` annotations as its citations, docs/api.md
"Citations"); each function call is a tool call whose id is its ``call_id`` (a
``custom_tool_call``, gpt-5's free-text tools, a custom call as ``llm/openai.py`` reads
one); a refusal part is a ``{"type": "refusal"}`` block and ``stop_reason "refusal"``;
the reasoning summaries, joined by a blank line, are the thinking block's ``thinking``.

Reasoning items go back (docs/streaming.md "Reasoning sent back", "The Responses API"):
when the output holds one (or a refusal, which goes back in its message), the thinking
block keeps ``reasoning_fields = {"output": [...]}``, the output in its order, each
reasoning item whole (with its ``encrypted_content``) and every other item as its type
and ids alone (the text and the calls are in the reply's own blocks). ``llm/responses.py``
sends it back to the server that produced it, each reasoning item immediately before the
item that followed it.

Decision 13: ``input_tokens`` include the cached ones and ``output_tokens`` the reasoning
ones (``openai._usage``). ``status`` ``incomplete`` is ``length`` (``max_output_tokens``) or
``content_filter``; ``failed`` and an ``error`` event are an ``LLMError`` with the chat
client's retry rules (``_wire.payload_error``); a stream that ends before
``response.completed`` (or ``response.incomplete``) is not whole and is retried.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

from ..types import AssistantMessage
from ._wire import Emit, ReplyError, payload_error, require_object
from .openai import CUSTOM, _assistant_message, _usage

__all__ = ["API", "ResponsesStream", "parse_responses_response"]

API = "openai-responses"  # AssistantMessage.api of this client's replies
_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}  # incomplete_details.reason -> finish_reason
_SEPARATOR = "\n\n"  # between two reasoning summaries, whole and streamed alike
_FINAL_EVENTS = ("response.completed", "response.incomplete")
_INPUT_DELTAS = {"response.function_call_arguments.delta": "arguments", "response.custom_tool_call_input.delta": "input"}  # a call's pieces, and where they join


def _failure(response: dict[str, Any], what: str) -> ReplyError:
    """The error of a ``failed`` response (its ``error`` object, with the chat client's retry rules), or one naming ``what``."""
    error = payload_error(response)
    if error is not None:
        return error
    return ReplyError(f"the response {what} with no error object", retryable=True)


def _check_status(response: dict[str, Any]) -> None:
    status = response.get("status")
    if status == "failed":
        raise _failure(response, "failed")
    if status in ("queued", "in_progress"):
        raise ReplyError(f"the response is not finished (status {status!r}); background responses are not read")
    if status == "cancelled":
        raise ReplyError("the response was cancelled")
    error = payload_error(response)
    if error is not None:
        raise error


def _parts(item: dict[str, Any], key: str) -> list[Any]:
    """An item's list of parts under ``key``; [] when it has none, or something else there (a reasoning item is kept whole whatever it holds)."""
    parts = item.get(key)
    return parts if isinstance(parts, list) else []


def _summary(item: dict[str, Any]) -> list[str]:
    """A reasoning item's readable parts: its ``summary_text`` parts, else its ``reasoning_text`` content (gpt-oss servers)."""
    texts = [p["text"] for p in _parts(item, "summary") if isinstance(p, dict) and isinstance(p.get("text"), str) and p["text"]]
    if not texts:
        texts = [
            p["text"]
            for p in _parts(item, "content")
            if isinstance(p, dict) and p.get("type") == "reasoning_text" and isinstance(p.get("text"), str) and p["text"]
        ]
    return texts


def _stub(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as its type and ids alone: where it stood, and what names it on the way back."""
    return {key: item[key] for key in ("type", "id", "call_id") if isinstance(item.get(key), str)}


def reply_from_output(output: Any, response: dict[str, Any], provider: str) -> AssistantMessage:
    """The ``AssistantMessage`` of a finished response whose items are ``output``.

    Raises:
        ReplyError: ``output`` is not a list, an item is not an object, a usage count is not a count.
    """
    if not isinstance(output, list):
        raise ReplyError(f"the response's output is not a list but {type(output).__name__}")
    text: list[str] = []
    refusal: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    annotations: list[Any] = []  # the output_text parts' url_citations, their spans in the joined text
    reasoned = False
    for raw in output:
        item = require_object(raw, "an output item")
        kind = item.get("type")
        if kind == "reasoning":
            reasoned = True
            thinking += _summary(item)
            kept.append(item)
            continue
        kept.append(_stub(item))
        if kind == "message":
            content = item.get("content")
            if content is not None and not isinstance(content, list):
                raise ReplyError(f"a message item's content is not a list but {type(content).__name__}")
            for part in content or []:
                part = require_object(part, "a message content part")
                if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    annotations += _annotations_at(part, sum(map(len, text)))
                    text.append(part["text"])
                elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                    refusal.append(part["refusal"])
        elif kind == "function_call":
            call_id = item.get("call_id") if isinstance(item.get("call_id"), str) else item.get("id")
            function: dict[str, Any] = {"name": item.get("name") if isinstance(item.get("name"), str) else ""}
            if "arguments" in item:
                function["arguments"] = item["arguments"]
            calls.append({"id": call_id, "type": "function", "function": function} if isinstance(call_id, str) else {"type": "function", "function": function})
        elif kind == "custom_tool_call":  # gpt-5's free-text tools: read as the chat client reads a custom call
            custom = {"name": item.get("name") if isinstance(item.get("name"), str) else "", "input": item.get("input") if isinstance(item.get("input"), str) else ""}
            calls.append({"id": item.get("call_id"), "type": CUSTOM, "custom": custom} if isinstance(item.get("call_id"), str) else {"type": CUSTOM, "custom": custom})
    details = response.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    finish = _INCOMPLETE.get(reason if isinstance(reason, str) else "", "length") if response.get("status") == "incomplete" else "stop"
    usage = _usage(response.get("usage"))
    refused = "".join(refusal)
    echoed = {"output": kept} if reasoned or refused else None  # a refusal goes back in its message, which needs its id
    model = response.get("model")
    return _assistant_message("".join(text), _SEPARATOR.join(thinking), calls, finish, usage, model, provider, echoed, refused, API, annotations)


def _annotations_at(part: dict[str, Any], offset: int) -> list[Any]:
    """An ``output_text`` part's annotations (``url_citation``s, ``AssistantMessage.citations``): as they came, their indices moved by ``offset`` when the part does not start the text."""
    annotations = [a for a in _parts(part, "annotations") if isinstance(a, dict)]
    if not offset:
        return annotations
    return [{**a, **{k: a[k] + offset for k in ("start_index", "end_index") if isinstance(a.get(k), int) and not isinstance(a.get(k), bool)}} for a in annotations]


def parse_responses_response(body: Any, provider: str = "api.openai.com") -> AssistantMessage:
    """An ``AssistantMessage`` from a whole Responses API body (``"object": "response"``).

    Raises:
        ReplyError: the body is not a finished response (``failed``, ``cancelled``, still
            ``in_progress``, an ``error`` object), or its ``output`` cannot be read.
    """
    body = require_object(body, "the reply")
    _check_status(body)
    return reply_from_output(body.get("output"), body, provider)


class ResponsesStream:
    """Accumulates Responses API stream events into one ``AssistantMessage``, emitting text and reasoning summaries as they come.

    Items are kept by ``output_index``: ``response.output_item.added`` starts one, deltas
    (``response.output_text.delta``, ``response.refusal.delta``,
    ``response.function_call_arguments.delta``, ``response.reasoning_summary_text.delta``)
    grow it, ``response.output_item.done`` replaces it whole. ``response.completed`` (or
    ``response.incomplete``) ends the stream: its ``output`` when it carries one, else the
    items so built. ``error`` and ``response.failed`` raise (decision 14).

    Thread safety: none; one accumulator belongs to one call.
    """

    def __init__(self, provider: str = "api.openai.com", emit: Optional[Emit] = None) -> None:
        self.provider = provider
        self._emit = emit or (lambda kind, text: None)
        self._items: dict[int, dict[str, Any]] = {}
        self._final: Optional[dict[str, Any]] = None
        self._summary_at: Any = None  # (output_index, summary_index) of the summary part emitted last
        self._thought = False  # a summary's text was emitted: the next part starts after _SEPARATOR

    def add(self, event: Any) -> bool:
        event = require_object(event, "a stream event")
        kind = event.get("type")
        if not isinstance(kind, str):  # not an event this reader knows, as any type it does not
            return False
        if kind == "error":
            raise payload_error(event, forced=True)  # type: ignore[misc]
        if kind == "response.failed":
            raise _failure(require_object(event.get("response"), "a response.failed's response"), "failed")
        if kind in _FINAL_EVENTS:
            self._final = require_object(event.get("response"), f"a {kind}'s response")
            return True
        if kind == "response.output_item.added" or kind == "response.output_item.done":
            self._items[self._index(event)] = copy.deepcopy(require_object(event.get("item"), f"a {kind}'s item"))
        elif kind == "response.output_text.delta":
            self._append_part(event, "output_text", "text")
            self._emit("text", event["delta"])
        elif kind == "response.refusal.delta":
            self._append_part(event, "refusal", "refusal")
        elif kind in _INPUT_DELTAS:
            item, key = self._item(event), _INPUT_DELTAS[kind]
            joined = item.get(key)
            item[key] = (joined if isinstance(joined, str) else "") + self._delta(event)
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            self._add_thinking(event)
        return False

    def _index(self, event: dict[str, Any]) -> int:
        index = event.get("output_index", len(self._items))
        if not isinstance(index, int) or isinstance(index, bool):
            raise ReplyError(f"a stream event has output_index {index!r}")
        return index

    def _item(self, event: dict[str, Any]) -> dict[str, Any]:
        return self._items.setdefault(self._index(event), {})

    @staticmethod
    def _delta(event: dict[str, Any]) -> str:
        delta = event.get("delta")
        if not isinstance(delta, str):
            raise ReplyError(f"a {event.get('type')} event's delta is not text but {type(delta).__name__}")
        return delta

    def _append_part(self, event: dict[str, Any], part_type: str, key: str) -> None:
        """A text or refusal delta joined to its content part (``content_index``) of its message item."""
        delta = self._delta(event)
        item = self._item(event)
        item.setdefault("type", "message")
        if not isinstance(item.get("content"), list):
            item["content"] = []
        parts = item["content"]
        index = event.get("content_index", len(parts) - 1 if parts else 0)
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ReplyError(f"a {event.get('type')} event has content_index {index!r}")
        while len(parts) <= index:
            parts.append({"type": part_type, key: ""})
        part = parts[index] if isinstance(parts[index], dict) else {}
        joined = part.get(key)
        parts[index] = {**part, "type": part_type, key: (joined if isinstance(joined, str) else "") + delta}

    def _add_thinking(self, event: dict[str, Any]) -> None:
        """A reasoning summary delta emitted, after a blank line when it starts another summary (as ``_SEPARATOR`` joins them whole)."""
        delta = self._delta(event)
        if not delta:
            return
        at = (event.get("output_index"), event.get("summary_index", event.get("content_index")))
        if self._thought and at != self._summary_at:
            self._emit("thinking", _SEPARATOR)
        self._summary_at, self._thought = at, True
        self._emit("thinking", delta)

    def finish(self, done: bool = True) -> AssistantMessage:
        if self._final is None:
            raise ReplyError("the stream ended before response.completed: the reply is not whole and was dropped", retryable=True)
        _check_status(self._final)
        output = self._final.get("output")
        if not (isinstance(output, list) and output):  # a server that sends the items only as events
            output = [self._items[i] for i in sorted(self._items)]
        return reply_from_output(output, self._final, self.provider)
