"""A fake Anthropic Messages API that reports usage by Anthropic's prompt-cache accounting (docs/performance.md "Prompt caching").

What it models, from Anthropic's prompt caching documentation: the request is a prefix
in the order tools, system, messages; each block with ``cache_control`` is a breakpoint;
the prefix up to a breakpoint is written to the cache when at least ``MIN_CACHEABLE``
tokens long; a later request reads the longest cached prefix found at a block boundary at
most 20 blocks before one of its breakpoints. ``usage`` then says
``cache_read_input_tokens`` (the prefix read), ``cache_creation_input_tokens`` (from there
to the last breakpoint, written now) and ``input_tokens`` (after the last breakpoint). A
block's tokens are ``count_tokens``'s estimate of its JSON; the markers themselves are not
part of what is cached (a breakpoint that moves on keeps the prefix before it).

It answers each request with one call of ``tool`` until ``rounds`` calls were made in the
conversation, then a text. Thread safety: ``respond`` runs in the server's threads; the
cache is guarded by a lock.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from localserver import Reply
from yiemagent.tokens import estimate_text_tokens

MIN_CACHEABLE = 1024  # tokens: Anthropic's minimum cacheable prompt for Claude Sonnet and Opus
LOOKBACK = 20  # blocks before a breakpoint where a cached prefix is looked for
WRITE_PRICE, READ_PRICE = 1.25, 0.1  # of the base input price: a 5-minute cache write, a cache read


def _blocks(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The request as its ordered blocks, each tagged with where it is (a turn's role starts a new one)."""
    blocks: list[tuple[str, dict[str, Any]]] = [("tool", t) for t in body.get("tools", [])]
    system = body.get("system")
    blocks += [("system", {"type": "text", "text": system})] if isinstance(system, str) else [("system", b) for b in system or []]
    for index, message in enumerate(body.get("messages", [])):
        content = message["content"] if isinstance(message["content"], list) else [{"type": "text", "text": message["content"]}]
        blocks += [(f"{index}:{message['role']}", block) for block in content]
    return blocks


def usage_of(body: dict[str, Any], cache: dict[str, int]) -> dict[str, int]:
    """The usage Anthropic reports for ``body``, given (and updating) ``cache``: the cached prefixes' keys and their tokens."""
    blocks = _blocks(body)
    keys, tokens, total = [], [], 0
    for where, block in blocks:
        plain = {k: v for k, v in block.items() if k != "cache_control"}
        total += estimate_text_tokens(json.dumps([where, plain], sort_keys=True))
        keys.append(json.dumps([where, plain], sort_keys=True))
        tokens.append(total)
    prefix_keys = []
    running = ""
    for key in keys:
        running = str(hash((running, key)))
        prefix_keys.append(running)
    breakpoints = [i for i, (_, block) in enumerate(blocks) if "cache_control" in block]
    read = 0
    for point in breakpoints:
        for i in range(point, max(-1, point - LOOKBACK - 1), -1):
            if prefix_keys[i] in cache:
                read = max(read, tokens[i])
                break
    last = breakpoints[-1] if breakpoints else -1
    written = tokens[last] - read if last >= 0 and tokens[last] > read and tokens[last] >= MIN_CACHEABLE else 0
    for point in breakpoints:
        if tokens[point] >= MIN_CACHEABLE:
            cache[prefix_keys[point]] = tokens[point]
    cached = read + written
    return {"input_tokens": total - cached, "cache_read_input_tokens": read, "cache_creation_input_tokens": written, "output_tokens": 20}


class CachingServer:
    """``LocalServer(CachingServer(rounds, tool).respond)``: a tool loop of ``rounds`` calls, its usage by the cache accounting."""

    def __init__(self, rounds: int, tool: str) -> None:
        self.rounds, self.tool = rounds, tool
        self.cache: dict[str, int] = {}
        self.bodies: list[dict[str, Any]] = []
        self.usages: list[dict[str, int]] = []
        self._lock = threading.Lock()  # guards cache, bodies, usages

    def respond(self, request: Any) -> Reply:
        body = request.json()
        with self._lock:
            usage = usage_of(body, self.cache)
            self.bodies.append(body)
            self.usages.append(usage)
        calls = sum(1 for m in body["messages"] if m["role"] == "assistant" for b in m["content"] if b.get("type") == "tool_use")
        if calls < self.rounds:
            content = [{"type": "tool_use", "id": f"toolu_{calls}", "name": self.tool, "input": {"step": calls}}]
            stop = "tool_use"
        else:
            content, stop = [{"type": "text", "text": "done"}], "end_turn"
        return Reply(body={"id": "msg", "type": "message", "role": "assistant", "model": body["model"], "content": content, "stop_reason": stop, "usage": usage})


def billed(usages: list[dict[str, int]]) -> float:
    """Input tokens billed, in base-price tokens: uncached input, cache writes at 1.25, cache reads at 0.1."""
    return sum(u["input_tokens"] + WRITE_PRICE * u["cache_creation_input_tokens"] + READ_PRICE * u["cache_read_input_tokens"] for u in usages)
