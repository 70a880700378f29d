"""What a model, tool or server writes is shown on a terminal, never obeyed; a session file chat cannot use is said so (review).

A real pseudo-terminal (``pty``): the printer sees ``isatty()`` true, as in ``yiemagent chat``.
"""

from __future__ import annotations

import io
import os
import pty
import re
import select
import sqlite3
import subprocess
import sys

import pytest

from yiemagent import (
    AgentRunEndEvent,
    AgentToolResult,
    AssistantMessage,
    LLMCallEndEvent,
    LLMCallStartEvent,
    LLMDeltaEvent,
    LLMUsage,
    SQLiteSession,
    TextContent,
    ToolExecEndEvent,
    ToolExecStartEvent,
    ToolExecUpdateEvent,
    UserMessage,
)
from yiemagent.cli.console import ConsolePrinter, terminal_safe

CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x07"  # OSC 52: set the clipboard to "rm -rf ~"
CLEAR = "\x1b[2J\x1b[H"
OVERWRITE = "safe command\rrm -rf ~     "


def on_a_terminal(write) -> str:
    """What ``write(stream)`` put on a real pseudo-terminal, as the terminal received it."""
    master, slave = pty.openpty()
    try:
        with os.fdopen(slave, "w", encoding="utf-8", closefd=False) as stream:
            assert stream.isatty()
            write(stream)
            stream.flush()
        received = b""
        while select.select([master], [], [], 0)[0]:  # all written is already in the terminal's buffer
            received += os.read(master, 65536)
        return received.decode("utf-8", errors="replace")
    finally:
        os.close(master)
        os.close(slave)


def test_control_sequences_in_streamed_text_reach_a_terminal_as_visible_text():
    """The printer wrote a model's ESC sequences (clipboard, clear screen) and CRs straight to the user's terminal."""
    shown = on_a_terminal(lambda tty: ConsolePrinter(tty, color=False)(LLMDeltaEvent(1, 1, "text", CLIPBOARD + CLEAR + OVERWRITE)))
    assert "\x1b" not in shown and "\x07" not in shown
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in shown and "safe command\\x0drm -rf ~" in shown


def test_control_sequences_in_tool_names_and_results_are_shown_not_obeyed():
    def write(tty):
        printer = ConsolePrinter(tty, color=False)
        printer(ToolExecStartEvent("c1", "ls" + CLEAR, {"path": CLIPBOARD}))
        printer(ToolExecEndEvent("c1", "ls" + CLEAR, AgentToolResult([TextContent("files" + CLIPBOARD)]), False))

    shown = on_a_terminal(write)
    assert "\x1b" not in shown and "\\x1b[2J" in shown


def test_a_file_or_pipe_gets_the_streamed_text_as_written():
    answer = io.StringIO()
    ConsolePrinter(io.StringIO(), answer=answer)(LLMDeltaEvent(1, 1, "text", "tab\there\r\nand ESC \x1b[1m"))
    assert answer.getvalue() == "tab\there\r\nand ESC \x1b[1m"


def test_the_cli_shows_a_whole_answer_on_a_terminal_without_obeying_it():
    """`yiemagent ask --no-stream` printed the reply raw; an error message too."""
    from yiemagent.cli.commands import _show
    from yiemagent.types import AssistantMessage

    reply = AssistantMessage([TextContent("done" + CLIPBOARD)], stop_reason="error", error_message="server said" + CLEAR)
    shown = on_a_terminal(lambda tty: _show(reply, tty, tty, ConsolePrinter(io.StringIO())))
    assert "\x1b" not in shown and "\\x1b]52" in shown and "server said\\x1b[2J" in shown


@pytest.mark.parametrize("content", [b"not a database at all" * 300, None], ids=["not-a-database", "bad-row"])
def test_chat_with_a_session_file_it_cannot_use_says_so_and_exits_2(tmp_path, content):
    """A file that is not an SQLite database (or holds a bad row) ended chat with a traceback."""
    path = tmp_path / "chat.db"
    if content is not None:
        path.write_bytes(content)
    else:
        with SQLiteSession(path, "chat") as session:
            session.append(UserMessage([TextContent("hi")]))
        with sqlite3.connect(path) as conn:
            conn.execute("INSERT INTO yiemagent_messages (session_id, body) VALUES ('chat', '[1]')")
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    done = subprocess.run([sys.executable, "-m", "yiemagent", "chat", "--session", str(path)], input="/quit\n", capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2
    assert f"cannot use {path} as a session" in done.stderr and "Traceback" not in done.stderr


def test_on_a_terminal_the_printer_colours_its_lines_by_itself():
    """No `color` given and a terminal: tool starts cyan bold, successes green bold, failures red bold, rounds dim, a failed round red, a failed run yellow, thinking (mark and text) dim."""

    def write(tty):
        printer = ConsolePrinter(tty)
        printer(LLMCallStartEvent(1, 1, 2))
        printer(LLMDeltaEvent(1, 1, "thinking", "hm"))
        printer(LLMCallEndEvent(1, 1, 0.25, AssistantMessage([TextContent("")]), LLMUsage(120, 30), None))
        printer(ToolExecStartEvent("c1", "getWeather", {"city": "Tokyo"}))
        printer(ToolExecUpdateEvent("c1", "getWeather", {"city": "Tokyo"}, "50%"))
        printer(ToolExecEndEvent("c1", "getWeather", AgentToolResult([TextContent("sunny")]), False))
        printer(ToolExecEndEvent("c2", "getWeather", AgentToolResult([TextContent("no such city")]), True))
        printer(LLMCallEndEvent(1, 2, 1.5, None, None, "HTTP 500"))
        printer(AgentRunEndEvent(1, AssistantMessage([], stop_reason="error", error_message="HTTP 500"), 2, 2.0))

    lines = on_a_terminal(write).split("\r\n")  # the terminal ends each line with CR LF
    assert lines[:2] == ["\x1b[2m  llm round 1: thinking over 2 messages…\x1b[0m", "\x1b[2m  thinking: \x1b[0m\x1b[2mhm\x1b[0m"]
    assert lines[2] == "\x1b[2m  llm round 1 done in 0.25s, 120→30 tokens\x1b[0m"
    assert lines[3] == '  \x1b[36;1m▸ getWeather\x1b[0m {"city": "Tokyo"}'
    assert lines[4] == "\x1b[2m    · getWeather: 50%\x1b[0m"
    assert re.fullmatch(r"  \x1b\[32;1m✓ getWeather \d+\.\d\ds\x1b\[0m sunny", lines[5])
    assert lines[6] == "  \x1b[31;1m✗ getWeather (error)\x1b[0m no such city"
    assert lines[7] == "\x1b[31m  llm round 2 failed after 1.50s: HTTP 500\x1b[0m"
    assert lines[8:] == ["\x1b[33m  run 1 ended: error: HTTP 500\x1b[0m", ""]


def test_windows_line_ends_in_a_reply_are_line_breaks_on_a_terminal():
    """CR LF is a line end, shown as one; a lone CR (which would overwrite the line) is what is shown as \\x0d."""
    assert terminal_safe("first\r\nsecond\rthird\n") == "first\nsecond\\x0dthird\n"
    shown = on_a_terminal(lambda tty: ConsolePrinter(tty, color=False)(LLMDeltaEvent(1, 1, "text", "first\r\nsecond")))
    assert shown == "first\r\nsecond"  # the terminal itself turns LF into CR LF


def test_an_answer_stream_that_cannot_say_whether_it_is_a_terminal_gets_the_text_as_written():
    """A writer with no isatty() (a logging adapter, say) is no terminal: nothing is escaped in what it is given."""

    class Writer:
        def __init__(self) -> None:
            self.written = ""

        def write(self, text: str) -> int:
            self.written += text
            return len(text)

        def flush(self) -> None:
            pass

    answer = Writer()
    ConsolePrinter(io.StringIO(), answer=answer)(LLMDeltaEvent(1, 1, "text", "bold \x1b[1m\r\n"))
    assert answer.written == "bold \x1b[1m\r\n"
