"""The command line streams from a server (docs/streaming.md): a real subprocess against a real local SSE server.

``SSEServer`` answers each POST with server-sent events written one at a time as HTTP
chunks, and can hold the rest of a reply back until the test opens a gate — so a test can
prove that the CLI printed the first words while the server had not yet sent the others.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional, Union

import pytest

from localserver import LocalServer, Reply
from yiemagent import AssistantMessage, LLMCallEndEvent, LLMCallStartEvent, LLMDeltaEvent, TextContent
from yiemagent.cli.commands import _show
from yiemagent.cli.console import ConsolePrinter
from cli_support import Output, anthropic_text_stream, cli, start_cli  # noqa: F401  (start_cli: a fixture)
from helpers import WAIT



@dataclass
class Gate:
    """In a script: hold the rest of the reply until ``opened`` is set (or WAIT s pass)."""

    opened: threading.Event = field(default_factory=threading.Event)
    opened_in_time: Optional[bool] = None


@dataclass
class UntilClosed:
    """In a script: wait (up to ``within`` s) for the client to close the connection; ``closed`` says if it did.

    ``decided`` is set once ``closed`` is known.
    """

    within: float = WAIT
    closed: Optional[bool] = None
    decided: threading.Event = field(default_factory=threading.Event)


Item = Union[dict, str, Gate, UntilClosed]


class SSEServer:
    """``with SSEServer(script, …) as server:`` — the n-th POST gets the n-th script, event by event.

    A script item is a dict (sent as ``data: {json}``), a str (sent as it is, e.g.
    ``"data: [DONE]\\n\\n"``), a ``Gate`` or an ``UntilClosed``. ``server.bodies`` holds
    the JSON body of every request.
    """

    def __init__(self, *scripts: list[Item]) -> None:
        self.scripts = list(scripts)
        self.bodies: list[Any] = []
        self._lock = threading.Lock()  # guards scripts and bodies
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with server._lock:
                    server.bodies.append(body)
                    script = server.scripts.pop(0)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for item in script:
                        if isinstance(item, Gate):
                            item.opened_in_time = item.opened.wait(WAIT)
                        elif isinstance(item, UntilClosed):
                            self.connection.settimeout(item.within)
                            try:
                                item.closed = self.connection.recv(1) == b""
                            except OSError:  # a timeout: the client kept the connection open
                                item.closed = False
                            item.decided.set()
                        else:
                            self._chunk(f"data: {json.dumps(item)}\n\n" if isinstance(item, dict) else item)
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client closed the connection (an abort)

            def _chunk(self, text: str) -> None:
                data = text.encode("utf-8")
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "SSEServer":
        threading.Thread(target=self._server.serve_forever, args=(0.02,), name="test-sse", daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


def openai_chunk(**delta: Any) -> dict:
    return {"choices": [{"index": 0, "delta": delta}], "model": "tiny"}


OPENAI_END = [{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "model": "tiny"}, "data: [DONE]\n\n"]


def openai_script(*pieces: Union[str, Gate, UntilClosed], thinking: str = "") -> list[Item]:
    """A streamed chat completion: optional reasoning, then the text pieces (gates in between)."""
    items: list[Item] = [openai_chunk(role="assistant", content="")]
    if thinking:
        items.append(openai_chunk(reasoning_content=thinking))
    items += [p if isinstance(p, (Gate, UntilClosed)) else openai_chunk(content=p) for p in pieces]
    return items + OPENAI_END


@pytest.mark.spec("14")
def test_ask_and_chat_ask_the_server_to_stream_and_print_the_answer_once():
    """By default both commands request a stream (OpenAI and Anthropic) and the answer is on stdout exactly once, streamed or not."""
    with SSEServer(openai_script("Hel", "lo, world."), openai_script("Hi ", "again.")) as server:
        asked = cli("--base-url", f"{server.url}/v1", "--model", "tiny", "ask", "hi")
        chatted = cli("--base-url", f"{server.url}/v1", "--model", "tiny", "chat", stdin="hi\n/quit\n")
    assert asked.returncode == 0 and chatted.returncode == 0, asked.stderr + chatted.stderr
    assert [body.get("stream") for body in server.bodies] == [True, True]
    assert asked.stdout == "Hello, world.\n"
    assert chatted.stdout.count("Hi again.") == 1
    with SSEServer(anthropic_text_stream("Bonjour", " à tous.")) as server:
        claude = cli("--anthropic", "--base-url", server.url, "--api-key", "sk-ant-test", "ask", "salut")
    assert claude.returncode == 0, claude.stderr
    assert server.bodies[0]["stream"] is True and claude.stdout == "Bonjour à tous.\n"


@pytest.mark.spec("14")
def test_no_stream_asks_for_a_whole_reply():
    """--no-stream: the request carries no "stream", the JSON reply is printed whole."""
    reply = {"choices": [{"message": {"role": "assistant", "content": "Whole."}, "finish_reason": "stop"}], "model": "tiny"}
    with LocalServer(lambda r: Reply(body=reply)) as server:
        result = cli("--no-stream", "--base-url", f"{server.url}/v1", "--model", "tiny", "ask", "hi")
    assert result.returncode == 0, result.stderr
    assert "stream" not in server.requests[0].json() and result.stdout == "Whole.\n"


def test_the_offline_planner_is_unaffected_by_streaming():
    """No endpoint: no client, nothing streams, the offline planner's answer is printed as before."""
    result = cli("--quiet", "ask", "What time is it in Asia/Tokyo?")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("Current time in Asia/Tokyo") == 1 and result.stderr.count("\n") == 1


@pytest.mark.spec("14")
def test_ask_prints_the_first_words_while_the_server_is_still_writing(start_cli):
    """Live: the server holds the rest of the answer until the first words are on the CLI's stdout; thinking goes to stderr."""
    gate = Gate()
    with SSEServer(openai_script("Hel", gate, "lo, world.", thinking="The user greets me.")) as server:
        process, out, err = start_cli("--base-url", f"{server.url}/v1", "--model", "tiny", "ask", "hi")
        shown_early = out.wait_for("Hel")
        gate.opened.set()
        assert process.wait(WAIT * 3) == 0, err.rest()
    assert shown_early and gate.opened_in_time, f"stdout showed nothing before the server sent the rest: {out.rest()!r}"
    assert out.rest() == "Hello, world.\n"
    assert "thinking: The user greets me." in err.rest()


@pytest.mark.spec("14")
def test_ctrl_c_during_a_streamed_answer_closes_the_connection_and_keeps_the_partial_out(start_cli):
    """chat: Ctrl-C while the answer streams aborts the run, the client closes the connection, and the next request carries no partial reply."""
    until_closed = UntilClosed()
    with SSEServer(openai_script("Hel", until_closed, "lo, world."), openai_script("Fine.")) as server:
        process, out, err = start_cli("--base-url", f"{server.url}/v1", "--model", "tiny", "chat")
        process.stdin.write(b"hello?\n")
        process.stdin.flush()
        assert out.wait_for("Hel"), err.text
        process.send_signal(signal.SIGINT)
        assert err.wait_for("ended: aborted"), err.text
        process.stdin.write(b"and now?\n/quit\n")
        process.stdin.close()
        assert process.wait(WAIT * 3) == 0, err.rest()
    assert until_closed.closed, "the client kept reading after the abort"
    assert "Run aborted." in out.rest() and "Fine." in out.rest() and "lo, world." not in out.rest()
    assert [m["role"] for m in server.bodies[1]["messages"]] == ["system", "user", "user"]


def test_ctrl_c_during_a_streamed_ask_aborts_at_once_and_exits_130_with_one_line(start_cli):
    """ask: Ctrl-C while the answer streams closes the connection at once (not after shutdown's 5 s wait), and the
    CLI exits with 130 and one line on stderr, no traceback; the partial answer's line is ended."""
    until_closed = UntilClosed(within=4.0)  # under shutdown's 5 s: the connection closes in time only by an abort at once
    with SSEServer(openai_script("Hel", until_closed, "lo, world.")) as server:
        process, out, err = start_cli("--quiet", "--base-url", f"{server.url}/v1", "--model", "tiny", "ask", "hi")
        assert out.wait_for("Hel"), err.text
        process.send_signal(signal.SIGINT)
        status = process.wait(WAIT * 3)
        assert until_closed.decided.wait(WAIT)
    assert until_closed.closed, "the connection stayed open after Ctrl-C"
    assert status == 130, err.rest()
    lines = err.rest().splitlines()
    assert lines[0].startswith("yiemagent: OpenAI-compatible server at") and lines[1:] == ["yiemagent: aborted with Ctrl-C"], lines
    assert out.rest() == "Hel\n"


def test_an_answer_already_streamed_is_not_printed_again():
    """The CLI prints a response whose text the printer streamed once (no repeat), and one it did not stream in full."""
    out, err = io.StringIO(), io.StringIO()
    printer = ConsolePrinter(err, color=False, answer=out)
    reply = AssistantMessage([TextContent("Hi there.")], stop_reason="stop")
    printer(LLMCallStartEvent(1, 1, 1))
    printer(LLMDeltaEvent(1, 1, "text", "Hi "))
    printer(LLMDeltaEvent(1, 1, "text", "there."))
    printer(LLMCallEndEvent(1, 1, 0.1, reply, None, None))
    assert _show(reply, out, err, printer) == 0
    assert _show(AssistantMessage([TextContent("Run aborted.")], stop_reason="aborted"), out, err, printer) == 0
    assert out.getvalue() == "Hi there.\nRun aborted.\n"
