"""What a model, tool or server writes is shown on a terminal, never obeyed; a session file chat cannot use is said so (review).

A real pseudo-terminal (``pty``): the printer sees ``isatty()`` true, as in ``yiemagent chat``.
"""

from __future__ import annotations

import io
import os
import pty
import select
import sqlite3
import subprocess
import sys

import pytest

from yiemagent import AgentToolResult, LLMDeltaEvent, SQLiteSession, TextContent, ToolExecEndEvent, ToolExecStartEvent, UserMessage
from yiemagent.cli.console import ConsolePrinter

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
