"""A real HTTP server on 127.0.0.1 in a thread, for tests of code that speaks HTTP.

Each test gives a ``respond(request) -> Reply`` function; the server records every
request it receives. Nothing is mocked: the code under test opens real sockets.

A reply with ``chunks`` is sent with chunked transfer encoding, one HTTP chunk per
bytes item, flushed at once; a callable item runs in the server thread between chunks
(``gate.wait`` to hold the rest back until the test says so, ``mark.set`` to tell the
test how far the server got). ``cut=True`` drops the connection before the final chunk.
"""

from __future__ import annotations

import json
import socket
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
    client_port: int = 0  # the client's side of the connection: the same port means a reused connection

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict/list → JSON; bytes/str → as is
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # sleep before answering (to provoke client timeouts)
    chunks: Optional[list[Any]] = None  # bytes: one HTTP chunk each; callables: run between chunks
    cut: bool = False  # close the connection before the final zero-length chunk
    before: Optional[Callable[[], Any]] = None  # run before the status line is sent (hold the headers back)

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
            # headers and body go out in two sends: with Nagle's algorithm the body waits for
            # the client's delayed ACK of the headers (~40 ms a reply on Linux)
            disable_nagle_algorithm = True

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                parts = urlsplit(self.path)
                request = Request(self.command, parts.path, parse_qs(parts.query), dict(self.headers.items()), self.rfile.read(length), self.client_address[1])
                with server._lock:
                    server.requests.append(request)
                reply = server.respond(request)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.before is not None:
                    reply.before()
                if reply.chunks is not None:
                    self._send_chunked(reply)
                    return
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

            def _send_chunked(self, reply: Reply) -> None:
                try:
                    self.send_response(reply.status)
                    for key, value in {"Content-Type": "text/event-stream", **reply.headers}.items():
                        self.send_header(key, value)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for item in reply.chunks or []:
                        if callable(item):
                            item()
                        elif item:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(item), item))
                    if reply.cut:
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                    else:
                        self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    self.close_connection = True  # the client went away (an abort or a deadline test)

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
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class StreamingServer:
    """A real HTTP server on 127.0.0.1 that streams ``head``, then ``batch`` ``count`` times, then ``tail``, chunked.

    For streams too large to hold as a list of chunks (a 100 MiB reply, an endless one).
    ``sent`` counts the body bytes written before the client went away (a client that
    stops reading leaves it far below the offer, at what the socket buffers held);
    ``done`` is set when the handler has finished either way.
    """

    def __init__(self, head: bytes, batch: bytes, count: int, tail: bytes = b"", content_type: str = "text/event-stream") -> None:
        self.sent = 0
        self.done = threading.Event()
        stream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # each chunk goes out as it is written (see LocalServer)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for index in range(count + 2):
                        piece = head if index == 0 else tail if index == count + 1 else batch
                        if piece:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                            stream.sent += len(piece)
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    self.close_connection = True  # the client dropped the connection
                finally:
                    stream.done.set()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "StreamingServer":
        threading.Thread(target=self._server.serve_forever, args=(0.02,), name="test-http-stream", daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
