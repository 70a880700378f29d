"""Reading Anthropic's Messages API replies, whole or streamed (spec §14 llmCall; decisions 13 and 14).

Thinking and redacted-thinking blocks are kept whole, with the ``signature`` a stream
sends as ``signature_delta``. Blocks of the tools Anthropic runs itself (``server_tool_use``,
``mcp_tool_use`` and every ``*_tool_result``: web search, web fetch, code execution, tool
search, MCP) are kept whole too, as they came, in their place: they are not tool calls of
the agent, and the next request sends them back (docs/streaming.md "Server tools").
Text: one ``TextContent`` per text block Anthropic sent, each with its own ``citations``
(shared/spec/API.md "Today's models, turn after turn"). Adjacent text blocks are one text
that Anthropic split where a citation starts or ends: each of them is a segment
(``citations`` a list, empty for a segment that cites nothing), which ``text_of`` and
``message_text`` join as they are; a lone text block carries its citations, or None. A
block of a type this reader does not keep does not split a text. ``pause_turn`` is a stop
reason of its own: the run sends the turn again; ``model_context_window_exceeded`` is
``length``, as ``max_tokens`` (decision 10).
Decision 13: Anthropic's ``input_tokens`` leave cached tokens out; here ``input_tokens``
is their sum with ``cache_read_input_tokens`` and ``cache_creation_input_tokens``.
Deviation: Anthropic does not count thinking tokens apart, so ``reasoning_tokens`` stays 0
(they are inside ``output_tokens``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from ..types import AssistantMessage, LLMUsage, TextContent
from ._wire import Emit, ReplyError, loads_json, payload_error, require_object, token_count

__all__ = ["AnthropicStream", "is_server_block", "parse_anthropic_response", "parse_anthropic_stream"]

# Blocks whose input a stream sends as input_json_delta: the agent's tool calls, and the server's own.
_INPUT_BLOCKS = ("tool_use", "server_tool_use", "mcp_tool_use")
# Each delta type: the block types it belongs to and the key of its piece.
_DELTA_BLOCK = {
    "text_delta": (("text",), "text"),
    "thinking_delta": (("thinking",), "thinking"),
    "signature_delta": (("thinking",), "signature"),
    "input_json_delta": (_INPUT_BLOCKS, "partial_json"),
    "citations_delta": (("text",), "citation"),
}
_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",  # cut by the context window: a reply cut at its limit (decision 10)
    "tool_use": "tool_use",
    "refusal": "refusal",  # its streaming classifiers stopped the reply: the words are in stop_details, if any
    "pause_turn": "pause_turn",
}


def is_server_block(block: Any) -> bool:
    """Whether ``block`` is one of the blocks of a tool Anthropic ran itself, kept and sent back as it came.

    ``server_tool_use`` and ``mcp_tool_use`` (the server's calls) and every ``*_tool_result``
    but the agent's own ``tool_result``: ``web_search_tool_result``, ``web_fetch_tool_result``,
    ``code_execution_tool_result``, ``bash_code_execution_tool_result``,
    ``text_editor_code_execution_tool_result``, ``tool_search_tool_result``, ``mcp_tool_result``…
    """
    kind = block.get("type") if isinstance(block, dict) else None
    return isinstance(kind, str) and (kind in ("server_tool_use", "mcp_tool_use") or (kind.endswith("_tool_result") and kind != "tool_result"))


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


def _citations(block: dict[str, Any]) -> list[Any]:
    """A text block's citation objects as Anthropic sent them (``[]`` for none; an entry that is not an object is dropped)."""
    citations = block.get("citations")
    return [c for c in citations if isinstance(c, dict)] if isinstance(citations, list) else []


def _text_run(run: list[dict[str, Any]]) -> list[TextContent]:
    """One ``TextContent`` per block of adjacent text blocks (an empty one dropped), each with its own citations.

    Two or more are segments of one text (``TextContent.is_segment``: ``citations`` a list,
    maybe empty); a lone one carries its citations, or None when it has none.
    """
    kept = [b for b in run if isinstance(b.get("text"), str) and b["text"]]
    if len(kept) == 1:
        return [TextContent(kept[0]["text"], _citations(kept[0]) or None)]
    return [TextContent(b["text"], _citations(b)) for b in kept]


def _kept(kind: Any) -> bool:
    """Whether a reply keeps a block of type ``kind`` (any other is dropped, and does not split a text)."""
    return kind in ("text", "tool_use", "thinking", "redacted_thinking") or is_server_block({"type": kind})


def _server_block(block: dict[str, Any]) -> dict[str, Any]:
    """A server tool's block as it came; a call whose input is not an object would be refused when sent back."""
    kind = block["type"]
    if kind in _INPUT_BLOCKS and not isinstance(block.get("input"), dict):
        raise ReplyError(f"a {kind} block whose input is {type(block.get('input')).__name__}, not a JSON object")
    return dict(block)


def _refusal_block(stop_details: Any) -> dict[str, Any]:
    """The ``{"type": "refusal"}`` block of a reply Anthropic stopped with ``stop_reason "refusal"`` (docs/streaming.md "Refusals").

    Its words are ``stop_details.explanation`` when Anthropic gives one, else empty: "No
    additional refusal message is included" (Anthropic, "Streaming refusals"). The text the
    model wrote before it was stopped stays the reply's text. Not sent back to Anthropic,
    which takes no such block.
    """
    explanation = stop_details.get("explanation") if isinstance(stop_details, dict) else None
    return {"type": "refusal", "refusal": explanation if isinstance(explanation, str) else ""}


def _message(blocks: list[Any], stop_reason: Any, usage: Optional[LLMUsage], model: Any, stop_details: Any = None) -> AssistantMessage:
    content: list[Any] = []
    run: list[dict[str, Any]] = []  # adjacent text blocks so far
    for block in [*blocks, None]:  # None: the end, which closes the last run of text
        end = block is None
        block = require_object(block, "a content block") if not end else {}
        kind = block.get("type")
        if kind == "text":
            run.append(block)
            continue
        if not end and not _kept(kind):
            continue  # dropped: the text around it stays one run, as the stream emits it
        content.extend(_text_run(run))
        run = []
        if kind == "tool_use":
            content.append({"type": "tool_call", "id": block.get("id", ""), "name": block.get("name", ""), "arguments": block.get("input")})
        elif kind in ("thinking", "redacted_thinking"):
            for key in ("thinking", "signature", "data"):
                if key in block and not isinstance(block[key], str):  # it would go back to Anthropic, refused every round
                    raise ReplyError(f"a {kind} block whose {key!r} is {type(block[key]).__name__}, not text")
            content.append(dict(block))
        elif is_server_block(block):
            content.append(_server_block(block))
    reason = _STOP_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"
    if reason == "refusal":
        content.append(_refusal_block(stop_details))
    elif any(isinstance(b, dict) and b.get("type") == "tool_call" for b in content) and reason != "length":
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
    return _message(body["content"], body.get("stop_reason"), _usage(body.get("usage")), body.get("model"), body.get("stop_details"))


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

    ``partial_json`` is joined per block (``tool_use``, ``server_tool_use``,
    ``mcp_tool_use``) and parsed when the block stops; ``signature_delta`` completes a
    thinking block; ``citations_delta`` adds a citation to its text block. Decision 14: an
    ``error`` event raises; a stream that ends before ``message_stop``, or with a block
    never stopped (a ``tool_use`` cut inside its input), is not whole and raises, so no
    tool runs with arguments the model did not finish; a delta whose type does not match
    its block (text into a ``tool_use`` block), or whose piece is not a string (a citation
    not an object), a server tool's input that is not a JSON object, a block started
    twice, or a delta after its block's stop (its input was read there), is not the
    protocol and raises. Between two runs of text (adjacent text blocks are one run, as in
    ``_message``: each block a segment of it), or two thinking blocks, a ``"\n"`` delta is
    emitted, as ``message_text`` joins them (``_append``).

    Thread safety: none; one accumulator belongs to one call.
    """

    def __init__(self, emit: Optional[Emit] = None) -> None:
        self._emit = emit or (lambda kind, text: None)
        self._blocks: dict[int, dict[str, Any]] = {}
        self._partial: dict[int, list[str]] = {}
        self._texts: dict[int, list[str]] = {}  # the pieces of each text or thinking block, joined once at the end (linear time)
        self._open: set[int] = set()
        self._emitted_kinds: set[str] = set()  # kinds with a block counted in message_text so far
        self._joined: set[int] = set()  # units counted: a text run or a thinking block, named by its first block's index
        self._unit: dict[int, int] = {}  # block index -> its unit (adjacent text blocks share the first one's)
        self._last: Optional[int] = None  # the index of the block started last
        self._model: Any = None
        self._stop_reason: Any = None
        self._stop_details: Any = None  # with stop_reason "refusal": why (Anthropic, "Streaming refusals")
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
            usage = message.get("usage")
            self._usage_raw.update(usage if isinstance(usage, dict) else {})
        elif kind == "content_block_start":
            self._start(self._index(event, new=True), require_object(event.get("content_block") or {}, "a content block"))
        elif kind == "content_block_delta":
            self._delta(self._index(event), require_object(event.get("delta") or {}, "a content block delta"))
        elif kind == "content_block_stop":
            index = self._index(event)
            self._open.discard(index)
            if index in self._partial:
                self._stop_input(index, self._partial.pop(index))
        elif kind == "message_delta":
            delta = event.get("delta") if isinstance(event.get("delta"), dict) else {}
            self._stop_reason = delta.get("stop_reason") or self._stop_reason
            self._stop_details = delta.get("stop_details") or self._stop_details
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

    def _stop_input(self, index: int, pieces: list[str]) -> None:
        """A stopped block's input from its ``partial_json``; without any, the input it started with.

        Anthropic starts the block with ``{}`` (a proxy may send the whole input there), so
        no input is never an invented ``{}``. A server tool's input goes back to Anthropic
        as it is: not a JSON object, it is not the protocol (the agent's own ``tool_use``
        gets an error result instead, ``_tool_input``).
        """
        block = self._blocks[index]
        started, text = block.get("input"), "".join(pieces)
        if block.get("type") == "tool_use":
            block["input"] = _tool_input(text) if pieces else started if isinstance(started, dict) else _tool_input("")
            return
        if not text.strip():
            block["input"] = started if isinstance(started, dict) else {}
            return
        value = _tool_input(text)
        if not isinstance(value, dict):
            raise ReplyError(f"the input of {block.get('type')} block {index} is not a JSON object: {text[:200]!r}")
        block["input"] = value

    def _start(self, index: int, block: dict[str, Any]) -> None:
        if index in self._blocks:
            raise ReplyError(f"stream event 'content_block_start' starts content block {index} a second time")
        block = dict(block)
        kind = block.get("type")
        previous = self._blocks.get(self._last) if self._last is not None else None
        self._unit[index] = self._unit[self._last] if kind == "text" and previous is not None and previous.get("type") == "text" else index  # type: ignore[index]
        self._blocks[index] = block
        if _kept(kind):  # a block the reply drops does not split a text (``_message``)
            self._last = index
        self._open.add(index)
        if kind in _INPUT_BLOCKS:
            self._partial[index] = []
        elif kind in ("text", "thinking"):
            if kind == "text":
                citations = block.get("citations")
                block["citations"] = [c for c in citations if isinstance(c, dict)] if isinstance(citations, list) else []
            start = block.get(kind)
            block[kind] = ""  # a server's non-text value is dropped: a delta is added to text only
            self._append(index, kind, start if isinstance(start, str) else "")
            if kind == "thinking" and not isinstance(block.get("signature"), str):
                block.pop("signature", None)

    def _append(self, index: int, kind: str, text: str) -> None:
        """Add ``text`` to block ``index`` of ``kind`` and emit it, preceded by ``"\\n"`` when the block is the kind's second or later.

        A block counts as ``message_text`` counts it: a run of adjacent text blocks once it
        holds text (an empty one is dropped from the reply), a thinking block from its
        start (kept even when empty). So the deltas of a kind, joined, equal ``message_text``.
        """
        unit = self._unit[index]
        if unit not in self._joined and (text or kind == "thinking"):
            self._joined.add(unit)
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
            return  # a delta type this reader does not know: ignored
        if block.get("type") not in expected[0]:
            raise ReplyError(f"a {kind} for content block {index}, which is a {block.get('type')!r} block")
        if index not in self._open:  # its input was read at the stop: a later piece would be lost
            raise ReplyError(f"a {kind} for content block {index} after its content_block_stop")
        piece = delta.get(expected[1])
        if kind == "citations_delta":
            if not isinstance(piece, dict):
                raise ReplyError(f"a citations_delta whose 'citation' is {type(piece).__name__}, not an object")
            block["citations"].append(piece)
            return
        if not isinstance(piece, str):
            raise ReplyError(f"a {kind} whose {expected[1]!r} is {type(piece).__name__}, not text")
        if kind == "input_json_delta":
            self._partial[index].append(piece)
        elif kind == "signature_delta":
            block["signature"] = block.get("signature", "") + piece
        else:
            self._append(index, block["type"], piece)

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
        return _message(list(self._blocks.values()), self._stop_reason, _usage(self._usage_raw), self._model, self._stop_details)


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
