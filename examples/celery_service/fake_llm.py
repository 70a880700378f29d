"""A fake OpenAI-compatible chat server that calls a tool, for running the service without a model (docs/scale.md).

POST ``/v1/chat/completions``: when the last message is the user's, the reply calls the
``lookup`` tool with the user's text as ``topic``; when it is a tool result, the reply is
the final answer ``Answer to <question>: <the tool's text>``. The reply depends only on the
messages, so a turn asked again gets the same reply. ``--latency-ms`` makes each reply take
that long, like a model (without using a core). ``fail[question] = n`` makes the next ``n``
requests for that question fail with 503 (``Retry-After: 1``), as a model that is down
would; a question in ``refuse`` is answered with 400 every time, as a request the provider
will never take. GET ``/stats`` gives the requests served and those failed.

    python examples/celery_service/fake_llm.py --port 8600 --latency-ms 50
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def question_of(messages: list[dict[str, Any]]) -> str:
    """The text of the last user message."""
    question = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    if isinstance(question, list):
        question = "".join(part.get("text", "") for part in question if isinstance(part, dict))
    return question


def reply_to(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message the fake model answers ``messages`` with."""
    last = messages[-1]
    question = question_of(messages)
    if last["role"] == "tool":
        return {"role": "assistant", "content": f"Answer to {question}: {last['content']}"}
    call_id = "call_" + hashlib.sha256(f"{len(messages)}:{question}".encode()).hexdigest()[:16]
    arguments = json.dumps({"topic": question})
    return {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": arguments}}]}


class FakeLLM(ThreadingHTTPServer):
    """The server; ``requests`` counts the completions served, ``failed`` the 503s and 400s; ``fail``, ``refuse`` and both counts are guarded by ``lock``."""

    daemon_threads = True

    def __init__(self, port: int = 0, latency_ms: float = 0.0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.latency_s = latency_ms / 1000
        self.lock = threading.Lock()
        self.requests = 0
        self.failed = 0
        self.fail: dict[str, int] = {}  # question -> how many more requests for it fail with 503
        self.refuse: set[str] = set()  # questions every request for which fails with 400

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: FakeLLM
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else the body waits for the ACK of the headers: 40 ms of delayed ACK per reply

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  quiet
        pass

    def _send(self, body: dict[str, Any], status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        if status == 503:
            self.send_header("Retry-After", "1")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        with self.server.lock:
            self._send({"requests": self.server.requests, "failed": self.server.failed})

    def do_POST(self) -> None:  # noqa: N802
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if self.server.latency_s:
            time.sleep(self.server.latency_s)  # the model "thinking": a wait, not work
        question = question_of(request["messages"])
        with self.server.lock:
            refused = question in self.server.refuse
            down = not refused and self.server.fail.get(question, 0) > 0
            if down:
                self.server.fail[question] -= 1
            self.server.failed += down or refused
        if refused:
            self._send({"error": {"message": f"the model refuses {question!r}", "type": "invalid_request_error"}}, 400)
            return
        if down:
            self._send({"error": {"message": "the model is down", "type": "server_error"}}, 503)
            return
        message = reply_to(request["messages"])
        with self.server.lock:
            self.server.requests += 1
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        self._send(
            {
                "id": "fake",
                "object": "chat.completion",
                "model": request.get("model", "fake"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args()
    server = FakeLLM(args.port, args.latency_ms)
    print(server.url, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
