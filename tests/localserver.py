"""A real HTTP server on 127.0.0.1 in a thread, for tests of code that speaks HTTP.

Each test gives a ``respond(request) -> Reply`` function; the server records every
request it receives. Nothing is mocked: the code under test opens real sockets.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict/list → JSON; bytes/str → as is
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # sleep before answering (to provoke client timeouts)

    def encoded(self) -> tuple[bytes, str]:
        if isinstance(self.body, bytes):
            return self.body, "application/octet-stream"
        if isinstance(self.body, str):
            return self.body.encode("utf-8"), "text/plain; charset=utf-8"
        return json.dumps(self.body).encode("utf-8"), "application/json"


class LocalServer:
    """``with LocalServer(respond) as server:`` → ``server.url``, ``server.requests``."""

    def __init__(self, respond: Callable[[Request], Reply]) -> None:
        self.respond = respond
        self.requests: list[Request] = []
        self._lock = threading.Lock()  # guards requests
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                parts = urlsplit(self.path)
                request = Request(self.command, parts.path, parse_qs(parts.query), dict(self.headers.items()), self.rfile.read(length))
                with server._lock:
                    server.requests.append(request)
                reply = server.respond(request)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                payload, content_type = reply.encoded()
                try:
                    self.send_response(reply.status)
                    headers = {"Content-Type": content_type, **reply.headers}
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            do_GET = _handle
            do_POST = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "LocalServer":
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), name="test-http", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


def free_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (the port was bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
