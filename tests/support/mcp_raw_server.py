"""A misbehaving MCP server over stdio, written by hand (newline-delimited JSON-RPC).

``python tests/support/mcp_raw_server.py MODE [--http]`` where MODE is one of:

- ``plain``: behaves; its one tool ``ping`` answers ``pong``.
- ``nonsense``: ``tools/call`` answers with a result that is not MCP (content not a list);
  a call to ``garbage`` gets a line that is not JSON at all, then a valid answer;
  ``shaped`` answers structured content that breaks its own outputSchema.
- ``hang``: ``tools/call`` is never answered.
- ``exit``: ``tools/call`` makes the process exit at once (a crash mid-call).
- ``stubborn``: ignores SIGTERM and the end of its stdin; only SIGKILL stops it.
- ``silent``: never answers ``initialize`` (it says ``GOT initialize (pid N)`` on stderr).
- ``badschema``: lists a tool whose inputSchema is not JSON Schema beside a good one.
- ``paged``: lists its tools on two pages: ``ping``; then ``titled`` (with a title),
  ``structured_only`` (structured content, empty content), ``quiet_error`` (an error
  without a message) and ``ping`` again.
- ``endless``: every ``tools/list`` page has one more tool and a next cursor, for ever.
- ``listschema``: lists ``ping`` between tools the SDK's types refuse (an ``inputSchema``
  that is a list, a string, an object without ``"type": "object"``, a tool without a name),
  so that a client taking the page whole would refuse every tool.
- ``pages SPEC``: SPEC is JSON ``{"count": N, "per_page": P, "loop": false}``: ``tools/list``,
  ``resources/list`` and ``prompts/list`` each list N items (``t1``..., ``notes://r1``...,
  ``p1``...) P a page, the cursor of a page being the offset of its first item; with
  ``"loop": true`` the last page's cursor is the second page's again (a list that loops).
- ``scripted PAGE [twice] [ping]``: PAGE is the JSON of the ``tools/list`` result, sent as it
  is (so a test can list what the SDK's types refuse); ``twice`` sends each ``tools/list``
  answer twice (a duplicate for an id already answered); ``ping`` makes each ``tools/call``
  first send the client a ``ping`` request and answer the call only once the client's reply
  has come, with the text ``ping answered: <its result>``.

With ``--http`` it serves the same answers over streamable HTTP instead (one JSON reply
per POST, no SSE stream) on 127.0.0.1 at a free port, printing ``PORT <n>`` on stdout;
with ``--sse`` the same, each reply being an SSE event written 7 bytes at a time; with
``--gzip`` each JSON reply is compressed (``Content-Encoding: gzip``).

In every mode a call to ``lone_surrogate`` answers the text ``"a\ud800c"``, which JSON
carries as the escape of a lone surrogate (UTF-8 cannot carry it).

A cancellation it receives is reported on stderr as ``GOT notifications/cancelled``.
"""

from __future__ import annotations

import json
import signal
import sys
import threading

MODE = sys.argv[1]
SSE = "--sse" in sys.argv[2:]
GZIP = "--gzip" in sys.argv[2:]
HTTP = "--http" in sys.argv[2:] or SSE or GZIP
PAGE = json.loads(sys.argv[2]) if MODE == "scripted" else None
SPEC = json.loads(sys.argv[2]) if MODE == "pages" else None
FLAGS = set(sys.argv[3:]) if MODE == "scripted" else set()
waiting = None  # scripted ping: the id of the call waiting for the client's answer to the server's ping

TOOLS = [
    {"name": "ping", "description": "Answer pong.", "inputSchema": {"type": "object", "properties": {}}},
]
if MODE == "nonsense":
    TOOLS.append({
        "name": "shaped", "description": "Structured content that breaks its own outputSchema.",
        "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    })
if MODE == "listschema":
    TOOLS[:0] = [{"name": "listed", "description": "A schema that is a list.", "inputSchema": [{"type": "object"}]}]
    TOOLS += [
        {"name": "stringy", "inputSchema": "object"},
        {"name": "untyped", "inputSchema": {"properties": {"x": {"type": "string"}}}},
        {"description": "No name at all.", "inputSchema": {"type": "object"}},
    ]
if MODE == "badschema":
    TOOLS.append({"name": "broken", "description": "A tool with a bad schema.", "inputSchema": {"type": "object", "properties": {"x": {"type": 5}}}})


SECOND_PAGE = [
    {"name": "titled", "title": "Titled Tool", "description": "Has a title.", "inputSchema": {"type": "object"}},
    {"name": "structured_only", "description": "Structured content only.", "inputSchema": {"type": "object"}},
    {"name": "quiet_error", "description": "An error without words.", "inputSchema": {"type": "object"}},
    TOOLS[0],
]
CALLS = {
    # in any mode: a text holding a lone surrogate, which json.dumps writes as the escape \ud800
    "lone_surrogate": {"content": [{"type": "text", "text": "a\ud800c"}]},
    "structured_only": {"content": [], "structuredContent": {"n": 1}},
    "quiet_error": {"content": [], "isError": True},
}


def tools_page(cursor: "str | None") -> dict:
    if MODE == "scripted":
        return PAGE
    if MODE == "paged":
        return {"tools": SECOND_PAGE} if cursor else {"tools": TOOLS, "nextCursor": "page-2"}
    if MODE == "endless":
        n = int(cursor or 0) + 1
        return {"tools": [{"name": f"t{n}", "inputSchema": {"type": "object"}}], "nextCursor": str(n)}
    return {"tools": TOOLS}


def numbered_page(field: str, cursor: "str | None") -> dict:
    """Mode ``pages``: the page of ``field`` starting at offset ``cursor``."""
    start, per, count = int(cursor or 0), SPEC["per_page"], SPEC["count"]
    make = {
        "tools": lambda n: {"name": f"t{n}", "inputSchema": {"type": "object"}},
        "resources": lambda n: {"uri": f"notes://r{n}", "name": f"r{n}"},
        "prompts": lambda n: {"name": f"p{n}"},
    }[field]
    page: dict = {field: [make(n) for n in range(start + 1, min(start + per, count) + 1)]}
    if start + per < count:
        page["nextCursor"] = str(start + per)
    elif SPEC.get("loop"):
        page["nextCursor"] = str(per)
    return page


def write_line(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request: dict, send=write_line) -> None:
    global waiting
    method, rid = request.get("method"), request.get("id")
    if method == "initialize":
        if MODE == "silent":
            import os
            sys.stderr.write(f"GOT initialize (pid {os.getpid()})\n")
            sys.stderr.flush()
            return
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}, "resources": {}, "prompts": {}} if MODE == "pages" else {"tools": {}},
            "serverInfo": {"name": f"raw-{MODE}", "version": "0"},
        }})
    elif MODE == "pages" and method in ("tools/list", "resources/list", "prompts/list"):
        send({"jsonrpc": "2.0", "id": rid, "result": numbered_page(method.split("/")[0], (request.get("params") or {}).get("cursor"))})
    elif method == "tools/list":
        for _ in range(2 if "twice" in FLAGS else 1):
            send({"jsonrpc": "2.0", "id": rid, "result": tools_page((request.get("params") or {}).get("cursor"))})
    elif method == "tools/call" and "ping" in FLAGS:
        waiting = rid
        send({"jsonrpc": "2.0", "id": "server-ping", "method": "ping"})
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
    elif method is None and rid == "server-ping" and waiting is not None:
        text = f"ping answered: {json.dumps(request.get('result', request.get('error')))}"
        send({"jsonrpc": "2.0", "id": waiting, "result": {"content": [{"type": "text", "text": text}]}})
        waiting = None
    elif rid is not None and method is not None:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})


def serve_http() -> None:
    """Streamable HTTP, the simplest form the spec allows: every POST answered by one JSON body."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            replies: list = []
            answer(request, replies.append)
            body = json.dumps(replies[0]).encode() if replies else b""
            if SSE and replies:
                body = b"event: message\ndata: " + body + b"\n\n"
            self.send_response(200 if replies else 202)
            self.send_header("Content-Type", "text/event-stream" if SSE and replies else "application/json")
            if GZIP and replies:
                import gzip
                body = gzip.compress(body)
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            step = 7 if SSE else max(len(body), 1)  # SSE: in small writes, as a stream comes
            for start in range(0, len(body), step):
                self.wfile.write(body[start : start + step])
                self.wfile.flush()

        def do_GET(self) -> None:  # no server-initiated stream
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_DELETE = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


def main() -> None:
    if HTTP:
        serve_http()
        return
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
