"""The command line in the test's own process: ``main(argv, out=, err=, read=)`` (yiemagent/cli/commands.py, demo.py).

test_cli.py and test_cli_streaming.py run ``python -m yiemagent`` in a subprocess, which
imports the package as installed; these call ``main`` with ``io.StringIO`` streams and a
``read`` function standing in for the keyboard, so they check the code under test itself:
what a user sees on stdout and stderr, and the exit status. Servers are real
(``LocalServer`` on 127.0.0.1, MCP servers as subprocesses, an OTLP/HTTP receiver).
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from helpers import WAIT
from cli_support import anthropic_text_stream
from localserver import LocalServer, Reply
from mcp_support import raw_server_command
from yiemagent import SQLiteSession, YiemAgent, shutdown
from yiemagent.cli import build_llm
from yiemagent.cli.commands import main
from yiemagent.cli.demo import run_demo, save_note_tool
from yiemagent.llm import OfflineLLM

OFFLINE = "yiemagent: no LLM endpoint given (--base-url / OPENAI_BASE_URL): using the offline keyword planner"
DEFAULT_SYSTEM = "You are a helpful assistant. Use the tools when they help."


@pytest.fixture(scope="module")
def stray_spans():
    """An OTLP/HTTP receiver the environment names in every test: only a command given --otel may export to it."""
    with otlp_receiver() as receiver:
        yield receiver


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, stray_spans):
    """No server, key or model from the environment; getWeather gets no network; an OTLP endpoint that nothing
    without --otel may send spans to (checked after the test)."""
    for name in (
        "OPENAI_BASE_URL", "OPENAI_API_KEY", "YIEMAGENT_MODEL", "ANTHROPIC_API_KEY", "YIEMAGENT_FORECAST_URL",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("YIEMAGENT_GEOCODING_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", stray_spans.url)
    yield
    exported, stray_spans.requests[:] = list(stray_spans.requests), []
    assert exported == [], "spans were exported without --otel"


class Keyboard:
    """chat's ``read``: gives the lines typed one by one, then Ctrl-D (``EOFError``); records each prompt.

    A line that is an exception instance is raised instead (``KeyboardInterrupt()``: Ctrl-C at the prompt).
    """

    def __init__(self, *lines: Any) -> None:
        self.lines = list(lines)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.lines:
            raise EOFError
        line = self.lines.pop(0)
        if isinstance(line, BaseException):
            raise line
        return line


@dataclass
class Done:
    status: Any
    out: str
    err: str
    keyboard: Keyboard

    @property
    def err_lines(self) -> list[str]:
        return self.err.splitlines()


def run(*argv: str, lines: tuple = (), out: Optional[io.StringIO] = None, err: Optional[io.StringIO] = None) -> Done:
    """``main(argv)`` with StringIO streams; ``lines`` are what chat reads."""
    out = out if out is not None else io.StringIO()
    err = err if err is not None else io.StringIO()
    keyboard = Keyboard(*lines)
    status = main(list(argv), out=out, err=err, read=keyboard)
    return Done(status, out.getvalue(), err.getvalue(), keyboard)


class Terminal(io.StringIO):
    """An output stream that says it is a terminal (as ``sys.stdout`` on a console does)."""

    def isatty(self) -> bool:
        return True


class Watched(io.StringIO):
    """A stream that sets ``seen`` once ``text`` has been written to it."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.seen = threading.Event()

    def write(self, s: str) -> int:
        written = super().write(s)
        if self.text in self.getvalue():
            self.seen.set()
        return written


class InterruptedOnce(io.StringIO):
    """A stream whose first write containing ``text`` raises ``KeyboardInterrupt``: Ctrl-C pressed at that moment."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.fired = False

    def write(self, s: str) -> int:
        if not self.fired and self.text in s:
            self.fired = True
            raise KeyboardInterrupt
        return super().write(s)


# --- replies a real server sends ---------------------------------------------------------


def openai_reply(content: str = "", *calls: dict, model: str = "tiny") -> dict:
    message: dict = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return {"choices": [{"message": message, "finish_reason": "tool_calls" if calls else "stop"}], "model": model}


def tool_call(call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def sse(data: Any) -> bytes:
    return f"data: {json.dumps(data) if not isinstance(data, str) else data}\n\n".encode()


def openai_stream(*pieces: Any) -> list:
    """A streamed chat completion, one HTTP chunk per piece; a callable piece runs in between (a gate)."""
    chunks: list = [sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}], "model": "tiny"})]
    for piece in pieces:
        chunks.append(piece if callable(piece) else sse({"choices": [{"index": 0, "delta": {"content": piece}}], "model": "tiny"}))
    return chunks + [sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "model": "tiny"}), sse("[DONE]")]


def anthropic_reply(text: str) -> dict:
    return {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "usage": {"input_tokens": 5, "output_tokens": 2},
    }


def headers_of(request) -> dict:
    return {k.lower(): v for k, v in request.headers.items()}


# --- ask with the offline planner ------------------------------------------------------


@pytest.mark.spec("14")
def test_ask_without_an_endpoint_says_it_uses_the_offline_planner_shows_the_tool_calls_and_prints_the_answer():
    """No endpoint anywhere: the first stderr line says so, rounds and tool calls follow, the answer alone is on stdout; status 0."""
    done = run("ask", "What time is it in Asia/Tokyo?")
    assert done.status == 0, done.err
    assert done.err_lines[0] == OFFLINE
    assert "  llm round 1: thinking over 1 messages…" in done.err_lines and "▸ getTime" in done.err and "✓ getTime" in done.err
    assert done.out.startswith("(offline keyword planner, not a language model)") and done.out.endswith(")\n")
    assert done.out.count("Current time in Asia/Tokyo") == 1 and done.out.count("\n") == 2


@pytest.mark.parametrize("flag", ["-q", "--quiet"])
def test_quiet_hides_rounds_and_tool_calls_but_not_the_answer(flag):
    """-q / --quiet: stderr holds the one line naming the LLM; the answer is still printed."""
    done = run(flag, "ask", "What time is it in Asia/Tokyo?")
    assert done.status == 0, done.err
    assert done.err == OFFLINE + "\n"
    assert "Current time in Asia/Tokyo" in done.out


def test_an_api_key_alone_means_the_openai_api_and_its_default_model(monkeypatch):
    """OPENAI_API_KEY without a base URL: OpenAI's own API with gpt-4o-mini (chat ended at once: nothing is sent); the key is not shown."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-only-a-key")
    done = run("chat")
    assert done.status == 0, done.err
    assert done.err_lines[0] == "yiemagent: OpenAI-compatible server at https://api.openai.com/v1, model gpt-4o-mini"
    assert "sk-only-a-key" not in done.err + done.out
    monkeypatch.delenv("OPENAI_API_KEY")
    assert run("chat").err_lines[0] == OFFLINE


def test_anthropic_without_a_base_url_means_anthropics_api_and_its_default_model(monkeypatch):
    """--anthropic: api.anthropic.com and claude-haiku-4-5 unless told otherwise; OPENAI_BASE_URL is not for it."""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    done = run("--anthropic", "chat")
    assert done.status == 0, done.err
    assert done.err_lines[0] == "yiemagent: Anthropic Messages API at https://api.anthropic.com, model claude-haiku-4-5"
    monkeypatch.setenv("YIEMAGENT_MODEL", "claude-from-env")
    assert run("--anthropic", "chat").err_lines[0] == "yiemagent: Anthropic Messages API at https://api.anthropic.com, model claude-from-env"


# --- ask against an OpenAI-compatible server -----------------------------------------------


@pytest.mark.spec("14")
def test_ask_against_the_server_the_environment_names_without_streaming(monkeypatch):
    """OPENAI_BASE_URL, YIEMAGENT_MODEL and OPENAI_API_KEY choose the server, model and key; --no-stream asks for whole replies."""
    replies = [openai_reply("", tool_call("c1", "getTime", {})), openai_reply("It is noon.")]
    with LocalServer(lambda r: Reply(body=replies.pop(0))) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
        monkeypatch.setenv("YIEMAGENT_MODEL", "tiny")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-cli-secret")
        done = run("--no-stream", "ask", "time?")
    assert done.status == 0, done.err
    assert done.out == "It is noon.\n"
    assert done.err_lines[0] == f"yiemagent: OpenAI-compatible server at {server.url}/v1, model tiny"
    assert "✓ getTime" in done.err and "sk-cli-secret" not in done.err + done.out
    first = server.requests[0]
    assert first.path == "/v1/chat/completions" and headers_of(first)["authorization"] == "Bearer sk-cli-secret"
    body = first.json()
    assert body["model"] == "tiny" and "stream" not in body
    assert body["messages"][0] == {"role": "system", "content": DEFAULT_SYSTEM}
    assert body["messages"][1]["content"] in ("time?", [{"type": "text", "text": "time?"}])


def test_flags_win_over_the_environment(monkeypatch):
    """--base-url, --model, --api-key and --system are used even when the environment names others."""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("YIEMAGENT_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    with LocalServer(lambda r: Reply(body=openai_reply("Flagged."))) as server:
        done = run("--no-stream", "--base-url", f"{server.url}/v1", "--model", "flag-model", "--api-key", "sk-from-flag", "--system", "Be brief.", "ask", "hi")
    assert done.status == 0, done.err
    assert done.out == "Flagged.\n"
    assert done.err_lines[0] == f"yiemagent: OpenAI-compatible server at {server.url}/v1, model flag-model"
    [request] = server.requests
    assert request.json()["model"] == "flag-model" and headers_of(request)["authorization"] == "Bearer sk-from-flag"
    assert request.json()["messages"][0] == {"role": "system", "content": "Be brief."}
    assert "sk-from-flag" not in done.err + done.out


def test_ask_streams_by_default_and_prints_the_answer_once():
    """Without --no-stream the request asks for a stream; the answer, written as it streams, is on stdout once."""
    with LocalServer(lambda r: Reply(chunks=openai_stream("Hel", "lo, world."))) as server:
        done = run("--base-url", f"{server.url}/v1", "--model", "tiny", "ask", "hi")
    assert done.status == 0, done.err
    assert server.requests[0].json().get("stream") is True
    assert done.out == "Hello, world.\n"


@pytest.mark.spec("14")
def test_ask_reports_a_failing_server_on_stderr_and_exits_1():
    """A server that refuses: "error: ..." naming the server and its message is the last stderr line, nothing on stdout; status 1."""
    with LocalServer(lambda r: Reply(status=400, body={"error": {"message": "model not found"}})) as server:
        done = run("--base-url", f"{server.url}/v1", "--model", "x", "ask", "hi")
    assert done.status == 1
    assert done.out == ""
    last = done.err_lines[-1]
    assert last.startswith("error: ") and "model not found" in last and server.url in last


def test_an_error_message_with_control_characters_is_shown_not_obeyed():
    """A server's error text with an escape sequence reaches stderr with the ESC shown as \\x1b."""
    with LocalServer(lambda r: Reply(status=400, body={"error": {"message": "bad\x1b[2Jmodel"}})) as server:
        done = run("-q", "--base-url", f"{server.url}/v1", "--model", "x", "ask", "hi")
    assert done.status == 1
    assert "\x1b" not in done.err and "bad\\x1b[2Jmodel" in done.err_lines[-1]


def test_an_answer_is_printed_as_written_to_a_file_and_made_harmless_on_a_terminal():
    """A whole (not streamed) answer holding an ESC: written as is to a pipe or file, shown as \\x1b on a terminal."""
    answer = "Clear\x1b[2Jscreen"
    with LocalServer(lambda r: Reply(body=openai_reply(answer))) as server:
        piped = run("--no-stream", "--base-url", f"{server.url}/v1", "--model", "tiny", "ask", "hi")
        terminal = Terminal()
        shown = run("--no-stream", "--base-url", f"{server.url}/v1", "--model", "tiny", "ask", "hi", out=terminal)
    assert piped.status == 0 and shown.status == 0
    assert piped.out == answer + "\n"
    assert shown.out == "Clear\\x1b[2Jscreen\n"


def test_timeout_bounds_each_request_to_the_llm():
    """--timeout 0.3: a server that sends nothing makes the request fail after 0.3 s, reported with status 1."""
    release = threading.Event()
    with LocalServer(lambda r: Reply(body=openai_reply("late"), before=lambda: release.wait(WAIT))) as server:
        try:
            done = run("-q", "--no-stream", "--timeout", "0.3", "--base-url", f"{server.url}/v1", "--model", "tiny", "ask", "hi")
        finally:
            release.set()
    assert done.status == 1
    assert done.err_lines[-1].startswith("error: ") and "timed out" in done.err_lines[-1]


def test_wait_bounds_how_long_ask_waits_for_the_answer():
    """--wait 0.2: no answer in time is "error: no response from the agent within 0.2 s" and status 1."""
    release = threading.Event()
    err = Watched("error: ")
    err.seen = release  # the run may finish once the CLI has given up on it
    with LocalServer(lambda r: Reply(body=openai_reply("late"), before=lambda: release.wait(WAIT))) as server:
        try:
            done = run("-q", "--no-stream", "--wait", "0.2", "--base-url", f"{server.url}/v1", "--model", "tiny", "ask", "hi", err=err)
        finally:
            release.set()
    assert done.status == 1
    assert done.err_lines[-1] == "error: no response from the agent within 0.2 s"
    assert done.out == ""


# --- Anthropic -------------------------------------------------------------------------


def test_anthropic_uses_its_key_model_and_token_limit_from_the_environment_and_flags(monkeypatch):
    """--anthropic: ANTHROPIC_API_KEY (not OPENAI_API_KEY), YIEMAGENT_MODEL, 1024 tokens by default, whole replies with --no-stream."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-env")
    monkeypatch.setenv("YIEMAGENT_MODEL", "claude-test")
    with LocalServer(lambda r: Reply(body=anthropic_reply("Bonjour."))) as server:
        done = run("--anthropic", "--no-stream", "--base-url", server.url, "ask", "salut")
        flagged = run("--anthropic", "--no-stream", "--base-url", server.url, "--api-key", "sk-ant-flag", "--model", "claude-flag", "--max-tokens", "77", "ask", "salut")
    assert done.status == 0 and flagged.status == 0, done.err + flagged.err
    assert done.out == "Bonjour.\n" and flagged.out == "Bonjour.\n"
    assert done.err_lines[0] == f"yiemagent: Anthropic Messages API at {server.url}, model claude-test"
    assert flagged.err_lines[0] == f"yiemagent: Anthropic Messages API at {server.url}, model claude-flag"
    first, second = server.requests
    assert first.path == "/v1/messages" and headers_of(first)["x-api-key"] == "sk-ant-env" and headers_of(second)["x-api-key"] == "sk-ant-flag"
    assert (first.json()["model"], first.json()["max_tokens"]) == ("claude-test", 1024) and "stream" not in first.json()
    assert (second.json()["model"], second.json()["max_tokens"]) == ("claude-flag", 77)
    assert first.json()["system"] in (DEFAULT_SYSTEM, [{"type": "text", "text": DEFAULT_SYSTEM}])
    assert "sk-ant" not in done.err + done.out + flagged.err + flagged.out


def test_anthropic_streams_by_default():
    """--anthropic without --no-stream: the request asks for a stream and the answer is printed once."""
    with LocalServer(lambda r: Reply(chunks=[event.encode() for event in anthropic_text_stream("Bonjour", " à tous.")])) as server:
        done = run("--anthropic", "--base-url", server.url, "--api-key", "k", "ask", "salut")
    assert done.status == 0, done.err
    assert server.requests[0].json()["stream"] is True and done.out == "Bonjour à tous.\n"


def test_anthropic_timeout_bounds_each_request():
    """--anthropic --timeout 0.3: a silent server fails the request quickly, status 1."""
    release = threading.Event()
    with LocalServer(lambda r: Reply(body=anthropic_reply("late"), before=lambda: release.wait(WAIT))) as server:
        try:
            done = run("-q", "--anthropic", "--no-stream", "--timeout", "0.3", "--base-url", server.url, "--api-key", "k", "ask", "hi")
        finally:
            release.set()
    assert done.status == 1
    assert done.err_lines[-1].startswith("error: ") and "timed out" in done.err_lines[-1]


# --- chat --------------------------------------------------------------------------------


@pytest.mark.spec("14")
def test_chat_answers_each_line_skips_empty_ones_and_ends_at_eof():
    """chat: a greeting on stderr, one answer per line typed, blank lines skipped, Ctrl-D (EOF) ends with status 0."""
    done = run("-q", "chat", lines=("", "   ", "What time is it in Asia/Tokyo?", "What tools do you have?"))
    assert done.status == 0, done.err
    assert done.err_lines == [OFFLINE, "Type a message; /tools lists the tools, /quit or Ctrl-D ends, Ctrl-C aborts a run."]
    assert done.keyboard.prompts == ["you> "] * 5
    assert done.out.index("Current time in Asia/Tokyo") < done.out.index("Available tools:")


@pytest.mark.parametrize("command", ["/quit", "/exit", "  /quit  "])
def test_chat_ends_at_quit_or_exit_and_reads_no_more(command):
    """/quit and /exit end the chat at once (status 0): the lines after them are never read."""
    done = run("-q", "chat", lines=(command, "What time is it in Asia/Tokyo?"))
    assert done.status == 0
    assert done.out == "" and done.keyboard.prompts == ["you> "]


def test_chat_tools_lists_every_tool_and_goes_on():
    """/tools prints "  name: label — description" for each tool, and the chat reads on."""
    done = run("-q", "chat", lines=("/tools", "What time is it in Asia/Tokyo?", "/quit"))
    assert done.status == 0
    listed = done.out.splitlines()[:4]
    assert [line.split(":")[0] for line in listed] == ["  getWeather", "  getTime", "  writeTool", "  listTools"]
    assert listed[0].startswith("  getWeather: Weather Lookup — Fetch the current weather")
    assert "Current time in Asia/Tokyo" in done.out and len(done.keyboard.prompts) == 3


def test_chat_ctrl_c_at_the_prompt_ends_the_chat_quietly():
    """Ctrl-C while chat waits for a line ends it with the status so far (0), no traceback."""
    done = run("-q", "chat", lines=("What time is it in Asia/Tokyo?", KeyboardInterrupt(), "never read"))
    assert done.status == 0
    assert "Current time in Asia/Tokyo" in done.out and len(done.keyboard.prompts) == 2


def test_chat_status_is_that_of_the_last_answer():
    """A failed answer makes the status 1 (its error on stderr); a good answer after it makes it 0 again."""
    replies = [Reply(status=400, body={"error": {"message": "bad request"}}), Reply(body=openai_reply("Fine."))]
    with LocalServer(lambda r: replies.pop(0)) as server:
        failed = run("-q", "--no-stream", "--base-url", f"{server.url}/v1", "--model", "tiny", "chat", lines=("one",))
    assert failed.status == 1 and failed.err_lines[-1].startswith("error: ") and "bad request" in failed.err_lines[-1]
    replies = [Reply(status=400, body={"error": {"message": "bad request"}}), Reply(body=openai_reply("Fine."))]
    with LocalServer(lambda r: replies.pop(0)) as server:
        mended = run("-q", "--no-stream", "--base-url", f"{server.url}/v1", "--model", "tiny", "chat", lines=("one", "two"))
    assert mended.status == 0 and mended.out == "Fine.\n"


def test_chat_streams_each_answer_once():
    """chat against a streaming server: each answer appears once on stdout."""
    scripts = [openai_stream("Hi ", "there."), openai_stream("Hi ", "again.")]
    with LocalServer(lambda r: Reply(chunks=scripts.pop(0))) as server:
        done = run("-q", "--base-url", f"{server.url}/v1", "--model", "tiny", "chat", lines=("hi", "hi again"))
    assert done.status == 0, done.err
    assert done.out == "Hi there.\nHi again.\n"
    assert [body.json().get("stream") for body in server.requests] == [True, True]


def test_chat_gives_up_on_an_answer_after_wait_aborts_the_run_and_goes_on():
    """--wait 0.2 in chat: "error: no response ..." on stderr, the run is aborted ("no answer in time"), the next line is answered."""
    release = threading.Event()
    scripts = [openai_stream("Hel", lambda: release.wait(WAIT), "lo."), openai_stream("Fine.")]
    with LocalServer(lambda r: Reply(chunks=scripts.pop(0))) as server:
        try:
            done = run("--wait", "0.2", "--base-url", f"{server.url}/v1", "--model", "tiny", "chat", lines=("hello?", "and now?"))
        finally:
            release.set()
    assert done.status == 0, done.err
    assert "error: no response from the agent within 0.2 s" in done.err_lines
    assert any(line.strip() == "run 1 ended: aborted: no answer in time" for line in done.err_lines), done.err
    assert done.out.endswith("Fine.\n") and "lo." not in done.out  # "Hel" may or may not have come within the 0.2 s


def test_chat_waits_for_the_aborted_run_to_end_however_long_its_tool_takes(monkeypatch):
    """--wait 0.2 while getWeather waits 1 s for its server: the run is aborted, chat waits for it to end (the tool's
    request comes back first), then reads on; before, a second --wait ran out and chat died with a TimeoutError traceback."""
    with LocalServer(lambda r: Reply(status=503, body={}, delay_s=1.0)) as server:  # slower than --wait, twice over
        monkeypatch.setenv("YIEMAGENT_GEOCODING_URL", f"{server.url}/v1")
        done = run("--wait", "0.2", "chat", lines=("What's the weather in Tokyo?", "What time is it in Asia/Tokyo?"))
    assert done.status == 0, done.err
    assert "error: no response from the agent within 0.2 s" in done.err_lines
    assert any(line.strip() == "run 1 ended: aborted: no answer in time" for line in done.err_lines), done.err
    assert "✗ getWeather" in done.err
    assert done.out.startswith("Run aborted.\n") and "Current time in Asia/Tokyo" in done.out


# --- Ctrl-C while waiting for an answer (a real SIGINT to this process's main thread) ---------------


@pytest.fixture
def ctrl_c_once():
    """``press(shown)``: on another thread, once ``shown`` is set and the main thread waits in ``take_response``, send it
    SIGINT (as Ctrl-C does).

    Python's own SIGINT handler is installed for the test (a shell may have started the tests with SIGINT ignored).
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    main_thread = threading.main_thread().ident
    pressed = threading.Event()

    def waiting_for_a_response() -> bool:
        # once the answer has begun, the one place the main thread blocks is take_response's Condition.wait
        frame = sys._current_frames().get(main_thread)
        return frame is not None and frame.f_code.co_name == "wait" and frame.f_code.co_filename == threading.__file__

    def press(shown: threading.Event) -> None:
        if shown.wait(WAIT):
            deadline = time.monotonic() + WAIT
            while not waiting_for_a_response() and time.monotonic() < deadline:
                time.sleep(0.005)  # nothing to await: the main thread's stack is all that shows it waits
            signal.pthread_kill(main_thread, signal.SIGINT)
        pressed.set()

    yield lambda shown: threading.Thread(target=press, args=(shown,), daemon=True).start()
    pressed.wait(WAIT)
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_ask_waits_aborts_the_run_and_exits_130(ctrl_c_once):
    """ask: Ctrl-C while the answer streams aborts the run ("aborted with Ctrl-C"), the partial line is ended, the CLI's own line is last; 130."""
    release = threading.Event()
    out = Watched("Hel")
    ctrl_c_once(out.seen)
    with LocalServer(lambda r: Reply(chunks=openai_stream("Hel", lambda: release.wait(WAIT), "lo."))) as server:
        try:
            done = run("--base-url", f"{server.url}/v1", "--model", "tiny", "ask", "hi", out=out)
        finally:
            release.set()
    assert done.status == 130
    assert done.err_lines[-1] == "yiemagent: aborted with Ctrl-C"
    assert any(line.strip() == "run 1 ended: aborted: aborted with Ctrl-C" for line in done.err_lines), done.err
    assert done.out == "Hel\n"


def test_ctrl_c_while_chat_waits_aborts_that_run_only(ctrl_c_once):
    """chat: Ctrl-C while an answer streams aborts that run ("aborted with Ctrl-C"); the chat reads on and answers the next line."""
    release = threading.Event()
    out = Watched("Hel")
    ctrl_c_once(out.seen)
    scripts = [openai_stream("Hel", lambda: release.wait(WAIT), "lo."), openai_stream("Fine.")]
    with LocalServer(lambda r: Reply(chunks=scripts.pop(0))) as server:
        try:
            done = run("--base-url", f"{server.url}/v1", "--model", "tiny", "chat", lines=("hello?", "and now?"), out=out)
        finally:
            release.set()
    assert done.status == 0, done.err
    assert any(line.strip() == "run 1 ended: aborted: aborted with Ctrl-C" for line in done.err_lines), done.err
    assert done.out.startswith("Hel\n") and done.out.endswith("Fine.\n") and "lo." not in done.out
    assert [m["role"] for m in server.requests[1].json()["messages"]] == ["system", "user", "user"]


def test_ctrl_c_anywhere_else_is_one_line_and_status_130():
    """A KeyboardInterrupt outside the waits (here while the CLI writes its first line) ends with "interrupted with Ctrl-C", 130."""
    err = InterruptedOnce("no LLM endpoint")
    done = run("ask", "What time is it in Asia/Tokyo?", err=err)
    assert done.status == 130
    assert done.err == "yiemagent: interrupted with Ctrl-C\n"
    chat_err = InterruptedOnce("no LLM endpoint")
    chatted = run("chat", lines=("never read",), err=chat_err)
    assert chatted.status == 130 and chatted.err == "yiemagent: interrupted with Ctrl-C\n" and chatted.keyboard.prompts == []


# --- parallel batches ----------------------------------------------------------------------


@pytest.fixture
def weather_for_two(monkeypatch):
    """A geocoding and forecast server that answers a city's lookup only once two lookups are in at the same time.

    Two getWeather calls run concurrently get their weather at once; run one after the
    other, the first lookup is refused after a few seconds (503), so its call fails.
    """
    together = threading.Barrier(2)

    def respond(request) -> Reply:
        if request.path == "/v1/search":
            try:
                together.wait(timeout=3)
            except threading.BrokenBarrierError:
                return Reply(status=503, body={"error": "alone"})
            name = request.query["name"][0]
            return Reply(body={"results": [{"name": name, "country": "X", "latitude": 1.0, "longitude": 2.0}]})
        return Reply(body={"current": {"temperature_2m": 21.6, "weather_code": 0, "time": "2026-01-01T00:00"}})

    with LocalServer(respond) as server:
        monkeypatch.setenv("YIEMAGENT_GEOCODING_URL", f"{server.url}/v1")
        monkeypatch.setenv("YIEMAGENT_FORECAST_URL", f"{server.url}/v1")
        yield server


def test_parallel_runs_a_batch_of_parallel_safe_tools_at_once(weather_for_two):
    """--parallel: the two getWeather calls of one reply run at the same time (each lookup waits for the other)."""
    done = run("-q", "--parallel", "ask", "What's the weather in Tokyo and Paris?")
    assert done.status == 0, done.err
    assert "Weather in Tokyo: Clear sky, 22°C" in done.out and "Weather in Paris: Clear sky, 22°C" in done.out


# --- sessions ------------------------------------------------------------------------------


def test_session_keeps_the_conversation_across_runs_per_session_id(tmp_path):
    """--session PATH: the first ask starts 'chat' empty, the second resumes its 4 messages; --session-id picks another conversation."""
    db = tmp_path / "chat.sqlite"
    first = run("-q", "ask", "--session", str(db), "What time is it in Asia/Tokyo?")
    second = run("-q", "ask", "--session", str(db), "What tools do you have?")
    other = run("-q", "chat", "--session", str(db), "--session-id", "work", lines=("What tools do you have?",))
    assert (first.status, second.status, other.status) == (0, 0, 0), first.err + second.err + other.err
    assert first.err_lines[1] == f"yiemagent: session 'chat' in {db}: 0 messages so far"
    assert second.err_lines[1] == f"yiemagent: session 'chat' in {db}: 4 messages so far"
    assert other.err_lines[2] == f"yiemagent: session 'work' in {db}: 0 messages so far"
    with SQLiteSession(db, "chat") as chat, SQLiteSession(db, "work") as work:
        assert len(chat.messages()) == 8 and len(work.messages()) == 4
        held = YiemAgent(llm_call=OfflineLLM(), agent_event_sink=None, session=chat)  # the CLI let go of it
        shutdown(held, timeout=WAIT)


def test_a_session_another_agent_holds_is_refused_with_status_2(tmp_path):
    """A conversation in use by another agent: one line saying so and how to pick another, exit status 2; the file is left for its holder."""
    db = tmp_path / "chat.sqlite"
    holder_session = SQLiteSession(db, "chat")
    holder = YiemAgent(llm_call=OfflineLLM(), agent_event_sink=None, session=holder_session)
    try:
        err = io.StringIO()
        with pytest.raises(SystemExit) as exit:
            main(["-q", "chat", "--session", str(db)], out=io.StringIO(), err=err, read=Keyboard())
        assert exit.value.code == 2
        line = err.getvalue().splitlines()[-1]
        assert line.startswith(f"yiemagent: session 'chat' in {str(db)!r} is held by another agent (process {os.getpid()})")
        assert line.endswith("; pick another conversation with --session-id NAME")
        assert run("-q", "chat", "--session", str(db), "--session-id", "other").status == 0
    finally:
        shutdown(holder, timeout=WAIT)
        holder_session.close()
    assert run("-q", "chat", "--session", str(db)).status == 0  # released by its holder: usable again


def test_a_file_that_is_not_a_session_database_is_refused_with_status_2(tmp_path):
    """--session naming a file that is not SQLite: "cannot use PATH as a session: DatabaseError: ...", exit status 2."""
    path = tmp_path / "notes.txt"
    path.write_text("not a database at all, just some text that is long enough to be a header" * 10)
    err = io.StringIO()
    with pytest.raises(SystemExit) as exit:
        main(["ask", "--session", str(path), "hi"], out=io.StringIO(), err=err, read=Keyboard())
    assert exit.value.code == 2
    assert err.getvalue().splitlines()[-1].startswith(f"yiemagent: cannot use {path} as a session: DatabaseError: ")


def test_an_empty_session_id_or_a_bad_stored_row_is_refused_with_status_2(tmp_path):
    """--session-id '' (ValueError) and a database holding a row that is not a message (MessageFormatError): status 2, the reason named."""
    db = tmp_path / "chat.sqlite"
    err = io.StringIO()
    with pytest.raises(SystemExit) as exit:
        main(["chat", "--session", str(db), "--session-id", ""], out=io.StringIO(), err=err, read=Keyboard())
    assert exit.value.code == 2
    assert err.getvalue().splitlines()[-1].startswith(f"yiemagent: cannot use {db} as a session: ValueError: session_id must be a non-empty string")
    with SQLiteSession(db, "chat"):
        pass
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO yiemagent_messages (session_id, body) VALUES ('chat', 'not json')")
    conn.close()
    err = io.StringIO()
    with pytest.raises(SystemExit) as exit:
        main(["chat", "--session", str(db)], out=io.StringIO(), err=err, read=Keyboard())
    assert exit.value.code == 2
    assert err.getvalue().splitlines()[-1].startswith(f"yiemagent: cannot use {db} as a session: MessageFormatError: ")


# --- MCP servers -------------------------------------------------------------------------------


def scripted_server(tools: list) -> str:
    return shlex.join(raw_server_command("scripted") + [json.dumps({"tools": tools})])


PING = {"name": "ping", "description": "answers pong", "inputSchema": {"type": "object"}}
PONG = {"name": "pong", "description": "answers ping", "inputSchema": {"type": "object"}}


def test_mcp_adds_the_servers_tools_and_says_which():
    """--mcp: the server's tools are listed on start ("tools ping, pong") and offered beside the built-in ones."""
    spec = scripted_server([PING, PONG])
    done = run("-q", "--mcp", spec, "chat", lines=("/tools",))
    assert done.status == 0, done.err
    assert f"yiemagent: MCP server {spec!r}: tools ping, pong" in done.err_lines
    assert "warning" not in done.err
    assert "  ping: ping — answers pong" in done.out.splitlines() and "  pong: pong — answers ping" in done.out.splitlines()
    assert "  getTime: Time Lookup" in done.out


def test_mcp_servers_one_without_tools_and_two_with_the_same_tool():
    """A server without tools shows "(none)"; a later server's tool replaces an earlier one of that name, with one warning."""
    empty, plain = scripted_server([]), scripted_server([PING])
    done = run("-q", "--mcp", empty, "--mcp", plain, "--mcp", plain, "chat", lines=("/tools",))
    assert done.status == 0, done.err
    assert f"yiemagent: MCP server {empty!r}: tools (none)" in done.err_lines
    assert done.err.count("yiemagent: warning: the MCP tool 'ping' replaces a tool of the same name\n") == 1
    assert done.out.count("  ping: ping") == 1


def test_an_mcp_server_that_cannot_start_is_status_2():
    """A --mcp command that does not exist, or that shlex cannot split: "error: --mcp '...': why", status 2, nothing run."""
    done = run("--mcp", "/nonexistent/server --flag", "ask", "hi")
    assert done.status == 2
    assert done.err_lines[-1].startswith("error: --mcp '/nonexistent/server --flag': could not connect to MCP server 'server'")
    assert done.out == ""
    unsplittable = run("--mcp", "server 'unclosed", "ask", "hi")
    assert unsplittable.status == 2 and unsplittable.err == "error: --mcp \"server 'unclosed\": No closing quotation\n"


def test_an_mcp_server_that_does_not_answer_within_timeout_is_status_2():
    """--timeout also bounds an MCP server's start: one that never answers initialize fails after it."""
    done = run("--timeout", "0.5", "--mcp", shlex.join(raw_server_command("silent")), "ask", "hi")
    assert done.status == 2
    assert done.err_lines[-1].startswith("error: --mcp ") and "could not connect" in done.err_lines[-1]
    assert done.err_lines[-1].endswith("did not answer initialize within 0.5 s (timeout_s)")


def test_mcp_without_the_extra_is_status_2(monkeypatch):
    """--mcp when yiemagent.mcp cannot be imported (the extra not installed): "error: --mcp: ...", status 2."""
    monkeypatch.setitem(sys.modules, "yiemagent.mcp", None)
    done = run("--mcp", "anything", "ask", "hi")
    assert done.status == 2
    assert done.err.startswith("error: --mcp: ") and done.out == ""


# --- OpenTelemetry ----------------------------------------------------------------------------


def otlp_receiver() -> LocalServer:
    return LocalServer(lambda request: Reply(200, b"", headers={"Content-Type": "application/x-protobuf"}))


def span_names(server: LocalServer) -> list[str]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    names = []
    for request in server.requests:
        export = ExportTraceServiceRequest()
        export.ParseFromString(request.body)
        names += [s.name for rs in export.resource_spans for ss in rs.scope_spans for s in ss.spans]
    return names


@pytest.mark.parametrize("command", [["ask", "What time is it in Asia/Tokyo?"], ["chat"]])
def test_otel_exports_the_runs_spans_before_the_cli_returns(monkeypatch, command):
    """--otel: the run's spans reach the OTLP/HTTP endpoint the environment names by the time main returns; progress still shows."""
    with otlp_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        done = run("--otel", *command, lines=("What time is it in Asia/Tokyo?",))
        names = span_names(receiver)
    assert done.status == 0, done.err
    assert names.count("invoke_agent") == 1 and "execute_tool getTime" in names
    assert "✓ getTime" in done.err and "Current time in Asia/Tokyo" in done.out


def test_without_otel_nothing_is_exported(monkeypatch):
    """No --otel: nothing is sent, even with an OTLP endpoint in the environment."""
    with otlp_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        done = run("-q", "ask", "What time is it in Asia/Tokyo?")
        demo = run("-q", "--otel", "demo")
    assert done.status == 0 and demo.status == 0
    assert receiver.requests == []


def test_otel_refuses_grpc_with_status_2_but_the_demo_ignores_otel(monkeypatch):
    """--otel with OTEL_EXPORTER_OTLP_PROTOCOL=grpc: "error: --otel: ..." and status 2; the demo exports nothing and runs."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    done = run("--otel", "ask", "hi")
    assert done.status == 2
    assert done.err.startswith("error: --otel: OTEL_EXPORTER_OTLP_PROTOCOL='grpc'") and "http/protobuf" in done.err and done.out == ""
    assert run("-q", "--otel", "demo").status == 0


# --- the demo --------------------------------------------------------------------------------


@pytest.fixture
def temp_dir(tmp_path, monkeypatch):
    """``tempfile.gettempdir()`` is the test's own directory: the demo's notes file lands there."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


@pytest.mark.spec("10")
def test_demo_runs_its_five_steps_and_saves_the_note(temp_dir):
    """yiemagent demo: a banner on stderr, the five numbered steps with each answer on stdout, a summary; the note is in the file; 0."""
    done = run("demo")
    assert done.status == 0, done.err
    notes = temp_dir / f"yiemagent-demo-notes-{os.getpid()}.txt"
    assert notes.read_text(encoding="utf-8") == "The demo ran every step.\n"
    assert done.err_lines[0] == "yiemagent demo: offline, with the keyword planner standing in for an LLM"
    assert done.err.count("▸ getWeather") == 2 and "✗ getTime" in done.err and "✓ saveNote" in done.err
    out = done.out
    headers = re.findall(r"^\[(\d)/(\d)\] (.*)$", out, re.M)
    assert headers == [
        ("1", "5", "a tool round trip"),
        ("2", "5", "a parallel batch (three calls at once)"),
        ("3", "5", "an error fed back to the model, which recovers"),
        ("4", "5", "listTools"),
        ("5", "5", "a terminating tool: the run ends when it asks"),
    ]
    assert re.findall(r"^you> (.*)$", out, re.M) == [
        "What time is it in Asia/Tokyo?",
        "What's the weather in Tokyo and Paris, and what time is it?",
        "What time is it in Mars/Olympus?",
        "What tools do you have?",
        'call saveNote with {"text": "The demo ran every step."}',
    ]
    assert re.findall(r"^agent \((\w+)\)> ", out, re.M) == ["stop", "stop", "stop", "stop", "tool_use_terminated"]
    assert out.startswith("\n[1/5] a tool round trip\nyou> What time is it in Asia/Tokyo?\nagent (stop)> (offline keyword planner")
    assert "so I asked again without a time zone" in out
    assert "- saveNote: Save Note — Append a note to the notes file and finish the task." in out
    assert f"agent (tool_use_terminated)> Tool execution completed.\nSaved the note to {notes}.\n" in out
    assert out.endswith(f"\n\nDone: 23 messages in the history, 8 tool results, note saved in {notes}.\n")


def test_demo_quiet_shows_only_the_banner_on_stderr(temp_dir):
    """yiemagent -q demo: the same steps on stdout, only the banner (and where getWeather asks) on stderr."""
    done = run("-q", "demo")
    assert done.status == 0
    assert re.fullmatch(
        r"yiemagent demo: offline, with the keyword planner standing in for an LLM\n"
        r"yiemagent demo: getWeather asks a local stand-in for Open-Meteo at http://127\.0\.0\.1:\d+/v1 \(fixed weather\)\n",
        done.err,
    ), done.err
    assert "[5/5] a terminating tool" in done.out


def test_run_demo_shows_progress_unless_asked_to_be_quiet(temp_dir):
    """run_demo(out, err) shows the rounds and tool calls on err by default."""
    out, err = io.StringIO(), io.StringIO()
    assert run_demo(out, err) == 0
    assert "▸ saveNote" in err.getvalue() and "[5/5]" in out.getvalue()


def test_demo_runs_its_weather_batch_in_parallel(temp_dir, weather_for_two):
    """The demo's second step is a parallel batch: both getWeather calls run at once and both get the weather."""
    out = io.StringIO()
    assert run_demo(out, io.StringIO(), quiet=True, weather_url=f"{weather_for_two.url}/v1") == 0
    assert "Weather in Tokyo: Clear sky, 22°C" in out.getvalue() and "Weather in Paris: Clear sky, 22°C" in out.getvalue()


def test_save_note_appends_each_note_and_ends_the_run(tmp_path):
    """saveNote: each call appends one line to the file (UTF-8), answers where it saved it, and asks the run to end."""
    path = tmp_path / "notes.txt"
    tool = save_note_tool(path)
    assert (tool.name, tool.label) == ("saveNote", "Save Note")
    assert tool.description == "Append a note to the notes file and finish the task."
    assert tool.input_schema["type"] == "object"  # a tool's arguments are an object: Anthropic's API refuses any other input_schema
    first = tool.execute("c1", {"text": "Première note."}, None, None)
    second = tool.execute("c2", {"text": "Second."}, None, None)
    assert path.read_text(encoding="utf-8") == "Première note.\nSecond.\n"
    assert second.content[0].text == f"Saved the note to {path}."
    assert second.details == {"path": str(path)} and second.terminate is True and first.terminate is True


def test_save_note_that_cannot_write_is_a_tool_error(tmp_path):
    """saveNote into a path that is a directory: a ToolError saying where and why."""
    from yiemagent import ToolError

    with pytest.raises(ToolError) as error:
        save_note_tool(tmp_path).execute("c1", {"text": "x"}, None, None)
    assert str(error.value).startswith(f"could not save the note to {tmp_path}: ")


@pytest.mark.parametrize(
    "arguments, why",
    [({}, "'text' is a required property"), ({"text": ""}, "should be non-empty"), ({"text": 5}, "5 is not of type 'string'")],
)
def test_save_note_input_schema_requires_a_non_empty_text(tmp_path, arguments, why):
    """saveNote's schema: "text" is required, a string, not empty; the agent refuses other arguments before the tool runs."""
    from yiemagent import ask, register_tool

    path = tmp_path / "notes.txt"
    with YiemAgent(llm_call=OfflineLLM(), agent_event_sink=None) as agent:
        register_tool(agent.tool_store, save_note_tool(path))
        reply = ask(agent, f"call saveNote with {json.dumps(arguments)}", timeout=WAIT)
        [result] = [m for m in agent.history() if m.role == "tool"]
    assert reply.stop_reason == "stop" and result.is_error
    assert why in result.content[0].text
    assert not path.exists()


# --- the command line itself -------------------------------------------------------------------


def help_text(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit:
        main([*argv, "--help"], out=io.StringIO(), err=io.StringIO(), read=Keyboard())
    assert exit.value.code == 0
    return capsys.readouterr().out


def option_line(text: str, option: str, help: str) -> bool:
    return re.search(rf"^  {re.escape(option)}\s+{re.escape(help)}$", text, re.M) is not None


def test_help_describes_every_option_and_command(capsys, monkeypatch):
    """yiemagent --help: the program's name, what it is, each option with its help (flags, environment variables, defaults) and each command."""
    monkeypatch.setenv("COLUMNS", "400")
    text = help_text(capsys)
    assert text.startswith("usage: yiemagent [-h] [--base-url BASE_URL] [--model MODEL] [--api-key API_KEY] [--anthropic] [--parallel]")
    assert "\nAn LLM agent that runs tools (the YiemAgent tool lifecycle).\n" in text
    for option, help in [
        ("--base-url BASE_URL", "OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1 (env OPENAI_BASE_URL)"),
        ("--model MODEL", "model name (env YIEMAGENT_MODEL)"),
        ("--api-key API_KEY", "API key (env OPENAI_API_KEY, or ANTHROPIC_API_KEY with --anthropic)"),
        ("--anthropic", "talk to Anthropic's Messages API"),
        ("--parallel", "run a batch of parallel-safe tools concurrently"),
        ("--system SYSTEM", "system prompt"),
        ("--timeout TIMEOUT", "seconds per HTTP request to the LLM (default 60)"),
        ("--wait WAIT", "seconds to wait for an answer (default 300)"),
        ("--max-tokens MAX_TOKENS", "max tokens per reply (Anthropic; default 1024)"),
        ("--no-stream", "wait for whole replies instead of printing them as they are written"),
        ("-q, --quiet", "do not show LLM rounds and tool calls"),
        ("--otel", "export each run, LLM round and tool call as OpenTelemetry spans over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT (needs yiemagent[otel])"),
        ("--mcp 'COMMAND ARGS'", "add the tools of an MCP server started with this command over stdio, e.g. --mcp 'mcp-server-time' (repeatable; needs yiemagent[mcp])"),
    ]:
        assert option_line(text, option, help), (option, text)
    assert "{ask,chat,demo}" in text
    for command, help in [
        ("ask", "ask one question and print the answer"),
        ("chat", "an interactive session"),
        ("demo", "an offline session showing the whole tool lifecycle"),
    ]:
        assert re.search(rf"^    {command}\s+{re.escape(help)}$", text, re.M), (command, text)


@pytest.mark.parametrize("command", ["ask", "chat"])
def test_ask_and_chat_help_describe_the_session_options(capsys, monkeypatch, command):
    """yiemagent ask --help / chat --help: --session PATH and --session-id with their help."""
    monkeypatch.setenv("COLUMNS", "400")
    text = help_text(capsys, command)
    assert text.startswith(f"usage: yiemagent {command} [-h] [--session PATH] [--session-id SESSION_ID]")
    assert option_line(text, "--session PATH", "keep the conversation in this SQLite file; it goes on from there next time")
    assert option_line(text, "--session-id SESSION_ID", "which conversation in the --session file (default 'chat')")
    if command == "ask":
        assert re.search(r"^  question$", text, re.M)


def test_the_defaults_the_help_states_are_the_ones_used(capsys, monkeypatch):
    """The help's "(default 60)", "(default 300)", "(default 1024)" and "(default 'chat')" are the values an unflagged command gets."""
    from yiemagent.cli.commands import _parser

    monkeypatch.setenv("COLUMNS", "400")
    text = help_text(capsys) + help_text(capsys, "ask")
    stated = dict(re.findall(r"^  --([\w-]+) \S+\s+.*\bdefault (\S+?)\)$", text, re.M))
    args = _parser().parse_args(["ask", "q"])
    assert stated == {"timeout": "60", "wait": "300", "max-tokens": "1024", "session-id": "'chat'"}
    assert (args.timeout, args.wait, args.max_tokens, args.session_id) == (60.0, 300.0, 1024, "chat")
    assert (type(args.timeout), type(args.wait), type(args.max_tokens)) == (float, float, int)


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "the following arguments are required: command"),
        (["ask"], "the following arguments are required: question"),
        (["--timeout", "soon", "ask", "q"], "argument --timeout: invalid float value: 'soon'"),
        (["--wait", "long", "ask", "q"], "argument --wait: invalid float value: 'long'"),
        (["--max-tokens", "1.5", "ask", "q"], "argument --max-tokens: invalid int value: '1.5'"),
        (["talk"], "argument command: invalid choice: 'talk' (choose from 'ask', 'chat', 'demo')"),
    ],
)
def test_argument_errors_exit_2_with_the_usage(capsys, argv, message):
    """A missing command or question, a bad number, an unknown command: usage and the reason on stderr, status 2."""
    with pytest.raises(SystemExit) as exit:
        main(argv, out=io.StringIO(), err=io.StringIO(), read=Keyboard())
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: yiemagent ") and err.rstrip().endswith(f"error: {message}")


def test_build_llm_describes_the_offline_planner_when_no_endpoint_is_given():
    """build_llm (the CLI's choice of LLM, public): the offline planner and a line saying so, without a key or URL."""
    import argparse

    args = argparse.Namespace(model=None, anthropic=False, api_key=None, base_url=None, timeout=1.0, max_tokens=10, no_stream=False)
    llm, description = build_llm(args)
    assert isinstance(llm, OfflineLLM)
    assert "yiemagent: " + description == OFFLINE
