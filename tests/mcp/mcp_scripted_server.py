"""A stdio MCP server whose ``tools/list`` answer is given on its command line (newline-delimited JSON-RPC).

``python tests/mcp/mcp_scripted_server.py PAGE [twice] [ping]``: PAGE is the JSON of the
``tools/list`` result, sent as it is (so a test can list what the SDK's types refuse);
``twice`` sends each ``tools/list`` answer twice (a duplicate for an id already answered);
``ping`` makes each ``tools/call`` first send the client a ``ping`` request and answer the
call only once the client's reply has come, with the text ``ping answered: <its result>``.
Any other call answers ``pong``.
"""

from __future__ import annotations

import json
import sys

PAGE = json.loads(sys.argv[1])
FLAGS = set(sys.argv[2:])


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    waiting = None  # the id of the call waiting for the client's answer to our ping
    for line in sys.stdin:
        message = json.loads(line)
        method, rid = message.get("method"), message.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "scripted", "version": "0"},
            }})
        elif method == "tools/list":
            for _ in range(2 if "twice" in FLAGS else 1):
                send({"jsonrpc": "2.0", "id": rid, "result": PAGE})
        elif method == "tools/call" and "ping" in FLAGS:
            waiting = rid
            send({"jsonrpc": "2.0", "id": "server-ping", "method": "ping"})
        elif method == "tools/call":
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "pong"}]}})
        elif method is None and rid == "server-ping" and waiting is not None:
            text = f"ping answered: {json.dumps(message.get('result', message.get('error')))}"
            send({"jsonrpc": "2.0", "id": waiting, "result": {"content": [{"type": "text", "text": text}]}})
            waiting = None
        elif rid is not None and method is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    main()
