"""A misbehaving MCP server over stdio, written by hand (newline-delimited JSON-RPC).

``python tests/support/mcp_raw_server.py MODE`` where MODE is one of:

- ``plain``: behaves; its one tool ``ping`` answers ``pong``.
- ``nonsense``: ``tools/call`` answers with a result that is not MCP (content not a list);
  a call to ``garbage`` gets a line that is not JSON at all, then a valid answer;
  ``shaped`` answers structured content that breaks its own outputSchema.
- ``hang``: ``tools/call`` is never answered.
- ``exit``: ``tools/call`` makes the process exit at once (a crash mid-call).
- ``stubborn``: ignores SIGTERM and the end of its stdin; only SIGKILL stops it.
- ``silent``: never answers ``initialize``.
- ``badschema``: lists a tool whose inputSchema is not JSON Schema beside a good one.
- ``paged``: lists its tools on two pages: ``ping``; then ``titled`` (with a title),
  ``structured_only`` (structured content, empty content), ``quiet_error`` (an error
  without a message) and ``ping`` again.
- ``endless``: every ``tools/list`` page has one more tool and a next cursor, for ever.

A cancellation it receives is reported on stderr as ``GOT notifications/cancelled``.
"""

from __future__ import annotations

import json
import signal
import sys
import threading

MODE = sys.argv[1]

TOOLS = [
    {"name": "ping", "description": "Answer pong.", "inputSchema": {"type": "object", "properties": {}}},
]
if MODE == "nonsense":
    TOOLS.append({
        "name": "shaped", "description": "Structured content that breaks its own outputSchema.",
        "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    })
if MODE == "badschema":
    TOOLS.append({"name": "broken", "description": "A tool with a bad schema.", "inputSchema": {"type": "object", "properties": {"x": {"type": 5}}}})


SECOND_PAGE = [
    {"name": "titled", "title": "Titled Tool", "description": "Has a title.", "inputSchema": {"type": "object"}},
    {"name": "structured_only", "description": "Structured content only.", "inputSchema": {"type": "object"}},
    {"name": "quiet_error", "description": "An error without words.", "inputSchema": {"type": "object"}},
    TOOLS[0],
]
CALLS = {
    "structured_only": {"content": [], "structuredContent": {"n": 1}},
    "quiet_error": {"content": [], "isError": True},
}


def tools_page(cursor: "str | None") -> dict:
    if MODE == "paged":
        return {"tools": SECOND_PAGE} if cursor else {"tools": TOOLS, "nextCursor": "page-2"}
    if MODE == "endless":
        n = int(cursor or 0) + 1
        return {"tools": [{"name": f"t{n}", "inputSchema": {"type": "object"}}], "nextCursor": str(n)}
    return {"tools": TOOLS}


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request: dict) -> None:
    method, rid = request.get("method"), request.get("id")
    if method == "initialize":
        if MODE == "silent":
            return
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": f"raw-{MODE}", "version": "0"},
        }})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": tools_page((request.get("params") or {}).get("cursor"))})
    elif method == "tools/call":
        name = request["params"]["name"]
        if MODE == "hang":
            return
        if MODE == "exit":
            sys.stdout.flush()
            import os
            os._exit(3)
        if MODE == "nonsense":
            if name == "shaped":
                send({"jsonrpc": "2.0", "id": rid, "result": {"content": [], "structuredContent": {"n": "x"}}})
            elif name == "garbage":
                sys.stdout.write("this is not JSON\n")
                sys.stdout.flush()
                send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "pong"}]}})
            else:
                send({"jsonrpc": "2.0", "id": rid, "result": {"content": "not a list", "isError": "maybe"}})
            return
        send({"jsonrpc": "2.0", "id": rid, "result": CALLS.get(name, {"content": [{"type": "text", "text": "pong"}]})})
    elif rid is not None:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})


def main() -> None:
    if MODE == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("method") == "notifications/cancelled":
            sys.stderr.write("GOT notifications/cancelled\n")
            sys.stderr.flush()
        answer(request)
    if MODE == "stubborn":
        threading.Event().wait()  # stdin closed: stay anyway


if __name__ == "__main__":
    main()
