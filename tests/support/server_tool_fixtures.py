"""Real Anthropic server-tool replies (tests/fixtures, from pydantic-ai's and vercel/ai's cassettes) and an oracle for them.

``streamed_blocks`` rebuilds the content blocks a recorded stream carried, the plain way
(each start block, its deltas added), independently of the library's reader: the tests
compare the library's message with it. docs/streaming.md "Server tools".
"""

from __future__ import annotations

import json
from typing import Any

from helpers import FIXTURES

SSE = {"Content-Type": "text/event-stream"}
CLIENT_BLOCKS = ("text", "thinking", "redacted_thinking", "tool_use")

# stream fixture -> the stop_reason it maps to
STREAMS = {
    "anthropic-stream-tool-search.jsonl": "tool_use",
    "anthropic-stream-web-fetch.jsonl": "stop",
    "anthropic-stream-mcp.jsonl": "stop",
    "anthropic-stream-code-execution-bash.sse": "stop",
    "anthropic-stream-text-editor-code-execution.sse": "stop",
    "anthropic-stream-web-search-citations.sse": "stop",
    "anthropic-stream-pause-turn.sse": "pause_turn",
    "anthropic-stream-pause-turn-continued.sse": "stop",
}
# whole-reply fixture -> the stop_reason it maps to
REPLIES = {
    "anthropic-tool-search.json": "tool_use",
    "anthropic-web-fetch.json": "stop",
    "anthropic-mcp.json": "stop",
    "anthropic-code-execution-bash.json": "stop",
    "anthropic-web-search-citations.json": "stop",
    "anthropic-pause-turn.json": "pause_turn",
    "anthropic-pause-turn-continued.json": "stop",
}
REQUESTS = {"anthropic-request-pause-turn-continue.json"}


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def sse_bytes(name: str) -> bytes:
    """The fixture as the server sent it: ``.sse`` as recorded; ``.jsonl`` (one event a line) as ``event:``/``data:`` pairs."""
    text = (FIXTURES / name).read_text()
    if name.endswith(".sse"):
        return text.encode()
    events = [line for line in text.splitlines() if line.strip()]
    return "".join(f"event: {json.loads(line)['type']}\ndata: {line}\n\n" for line in events).encode()


def chunked(body: bytes, size: int = 997) -> list[bytes]:
    """``body`` in HTTP chunks of ``size`` bytes: events and UTF-8 characters cut across chunks."""
    return [body[i : i + size] for i in range(0, len(body), size)]


def stream_events(name: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in sse_bytes(name).decode().split("\n") if line.startswith("data:")]


def streamed_blocks(name: str) -> list[dict[str, Any]]:
    """The content blocks the stream carried, in order: each start block with its deltas applied."""
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for event in stream_events(name):
        kind = event["type"]
        if kind == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
        elif kind == "content_block_delta":
            block, delta = blocks[event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = block.get("signature", "") + delta["signature"]
            elif delta["type"] == "citations_delta":
                block["citations"] = [*(block.get("citations") or []), delta["citation"]]
            elif delta["type"] == "input_json_delta":
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
    for index, text in partial.items():
        if text.strip():
            blocks[index]["input"] = json.loads(text)
    return [blocks[i] for i in sorted(blocks)]


def server_blocks(blocks: list[Any]) -> list[dict[str, Any]]:
    """The blocks of tools Anthropic ran itself: every dict block that is neither text, thinking nor a client tool call."""
    return [b for b in blocks if isinstance(b, dict) and b.get("type") not in (*CLIENT_BLOCKS, "tool_call", "tool_calls")]


def final_text_stream(text: str = "It is 65 degrees in San Francisco.") -> bytes:
    """A short Messages API stream ending the turn (the answer after a tool result)."""
    events = [
        {"type": "message_start", "message": {"model": "claude-sonnet-4-5", "usage": {"input_tokens": 10, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()
