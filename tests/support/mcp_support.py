"""Real MCP servers for the tests: mcp-server-time (PyPI) and the two servers in tests/.

Every server is a real subprocess; ``HttpServer`` reads its stdout on a thread into a
queue, so a test waits for a line (``STARTED slow``) with a timeout instead of sleeping.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Optional

from helpers import WAIT

HERE = Path(__file__).parent


def time_server_command() -> list[str]:
    """mcp-server-time from the test venv, answering in UTC whatever the machine's zone."""
    program = shutil.which("mcp-server-time", path=str(Path(sys.executable).parent)) or shutil.which("mcp-server-time")
    assert program, "mcp-server-time is not installed (make test installs it)"
    return [program, "--local-timezone", "UTC"]


def raw_server_command(mode: str, *args: str, http: bool = False) -> list[str]:
    """The hand-written misbehaving server in ``mode`` with ``args``, over stdio or HTTP (see tests/support/mcp_raw_server.py)."""
    return [sys.executable, str(HERE / "mcp_raw_server.py"), mode, *args, *(["--http"] if http else [])]


class HttpServer:
    """tests/support/mcp_http_server.py (or ``command``) in a subprocess, serving streamable HTTP on 127.0.0.1.

    ``command`` must print ``PORT <n>`` as its first line, as both servers in tests/ do.
    """

    def __init__(self, command: Optional[list[str]] = None) -> None:
        self.process = subprocess.Popen(
            command or [sys.executable, str(HERE / "mcp_http_server.py")],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, name="mcp-test-server-stdout", daemon=True).start()
        first = self.next_line()
        assert first.startswith("PORT "), first
        self.url = f"http://127.0.0.1:{int(first.split()[1])}/mcp"

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def next_line(self, timeout: float = WAIT) -> str:
        return self.lines.get(timeout=timeout)

    def wait_for(self, wanted: str, timeout: float = WAIT) -> None:
        while self.next_line(timeout) != wanted:
            pass

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=WAIT)

    def close(self) -> None:
        if self.process.poll() is None:
            self.kill()
        if self.process.stdout:
            self.process.stdout.close()


def alive(pid: int) -> bool:
    """Whether process ``pid`` still exists (and is not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def child_pids(pid: Optional[int] = None) -> set[int]:
    """The pids of the live children of ``pid`` (default: this process)."""
    pid = pid or os.getpid()
    children: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():  # Linux lists children per thread
        try:
            text = (task / "children").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        children.update(int(p) for p in text.split())
    return {p for p in children if alive(p)}
