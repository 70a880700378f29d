"""Reading Anthropic's Messages API replies, whole or streamed (spec §14 llmCall; decisions 13 and 14).

Thinking and redacted-thinking blocks are kept whole, with the ``signature`` a stream
sends as ``signature_delta``. Decision 13: Anthropic's ``input_tokens`` leave cached
tokens out; here ``input_tokens`` is their sum with ``cache_read_input_tokens`` and
``cache_creation_input_tokens``. Deviation: Anthropic does not count thinking tokens
apart, so ``reasoning_tokens`` stays 0 (they are inside ``output_tokens``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from ..messages import AssistantMessage, LLMUsage, TextContent
from ._wire import Emit, ReplyError, loads_json, payload_error, require_object, token_count

__all__ = ["AnthropicStream", "parse_anthropic_response", "parse_anthropic_stream"]

# Each delta type: the block type it belongs to and the key of its text.
_DELTA_BLOCK = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "thinking"),
    "signature_delta": ("thinking", "signature"),
    "input_json_delta": ("tool_use", "partial_json"),
}
_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_use", "refusal": "content_filter", "pause_turn": "stop"}


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
            for key in ("thinking", "signature", "data"):
                if key in block and not isinstance(block[key], str):  # it would go back to Anthropic, refused every round
                    raise ReplyError(f"a {kind} block whose {key!r} is {type(block[key]).__name__}, not text")
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
        value = loads_json(text)
    except ValueError:  # not JSON, NaN, nested too deeply: the call gets an error result naming it
        return text
    return value if isinstance(value, dict) else text


class AnthropicStream:
    """Accumulates Messages API stream events, emitting text and thinking as they come.

    ``partial_json`` is joined per block and parsed when the block stops;
    ``signature_delta`` completes a thinking block. Decision 14: an ``error`` event
    raises; a stream that ends before ``message_stop``, or with a block never stopped
    (a ``tool_use`` cut inside its input), is not whole and raises, so no tool runs
    with arguments the model did not finish; a delta whose type does not match its
    block (text into a ``tool_use`` block), or whose text is not a string, or a block
    started twice, is not the protocol and raises. Between two text (or two thinking)
    blocks a ``"\n"`` delta is emitted, as ``message_text`` joins them (``_append``).

    Thread safety: none; one accumulator belongs to one call.
    """

    def __init__(self, emit: Optional[Emit] = None) -> None:
        self._emit = emit or (lambda kind, text: None)
        self._blocks: dict[int, dict[str, Any]] = {}
        self._partial: dict[int, list[str]] = {}
        self._texts: dict[int, list[str]] = {}  # the pieces of each text or thinking block, joined once at the end (linear time)
        self._open: set[int] = set()
        self._emitted_kinds: set[str] = set()  # kinds with a block counted in message_text so far
        self._joined: set[int] = set()  # indexes of the blocks counted
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
                pieces, block = self._partial.pop(index), self._blocks[index]
                # no input_json_delta: the input is the one the block started with (Anthropic's
                # is {}, a proxy may send it whole there), never an invented {}
                started = block.get("input")
                block["input"] = _tool_input("".join(pieces)) if pieces else started if isinstance(started, dict) else _tool_input("")
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
        if index in self._blocks:
            raise ReplyError(f"stream event 'content_block_start' starts content block {index} a second time")
        block = dict(block)
        self._blocks[index] = block
        self._open.add(index)
        kind = block.get("type")
        if kind == "tool_use":
            self._partial[index] = []
        elif kind in ("text", "thinking"):
            start = block.get(kind)
            block[kind] = ""  # a server's non-text value is dropped: a delta is added to text only
            self._append(index, kind, start if isinstance(start, str) else "")
            if kind == "thinking" and not isinstance(block.get("signature"), str):
                block.pop("signature", None)

    def _append(self, index: int, kind: str, text: str) -> None:
        """Add ``text`` to block ``index`` of ``kind`` and emit it, preceded by ``"\\n"`` when the block is the kind's second or later.

        A block counts as ``message_text`` counts it: a text block once it holds text (an
        empty one is dropped from the reply), a thinking block from its start (kept even
        when empty). So the deltas of a kind, joined, equal ``message_text``.
        """
        if index not in self._joined and (text or kind == "thinking"):
            self._joined.add(index)
            if kind in self._emitted_kinds:
                self._emit(kind, "\n")
            self._emitted_kinds.add(kind)
        self._texts.setdefault(index, []).append(text)
        if text:
            self._emit(kind, text)

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block, kind = self._blocks[index], delta.get("type")
        expected = _DELTA_BLOCK.get(kind) if isinstance(kind, str) else None
        if expected is None:
            return  # a delta type this reader does not know (citations_delta…): ignored
        if block.get("type") != expected[0]:
            raise ReplyError(f"a {kind} for content block {index}, which is a {block.get('type')!r} block")
        piece = delta.get(expected[1])
        if not isinstance(piece, str):
            raise ReplyError(f"a {kind} whose {expected[1]!r} is {type(piece).__name__}, not text")
        if kind == "input_json_delta":
            self._partial.setdefault(index, []).append(piece)
        elif kind == "signature_delta":
            block["signature"] = block.get("signature", "") + piece
        else:
            self._append(index, expected[0], piece)

    def finish(self, done: bool = True) -> AssistantMessage:
        cut = [self._blocks[i] for i in sorted(self._open)]
        tool = next((b for b in cut if b.get("type") == "tool_use"), None)
        if tool is not None:
            raise ReplyError(
                f"the stream ended inside tool_use block {tool.get('name')!r}: its input is incomplete, so the tool was not run", retryable=True
            )
        if cut or not self._stopped:
            raise ReplyError("the stream ended before message_stop; the partial reply was dropped", retryable=True)
        for index, pieces in self._texts.items():
            block = self._blocks[index]
            block[block["type"]] = "".join(pieces)
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
