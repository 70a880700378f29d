"""The command line in a subprocess, for the CLI tests: a finished run (``cli``) or a running one (``start_cli``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest

from helpers import WAIT


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test's environment without the variables that choose a server or a key; no network for getWeather."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "YIEMAGENT_MODEL", "ANTHROPIC_API_KEY")}
    return {**env, "PYTHONIOENCODING": "utf-8", "YIEMAGENT_GEOCODING_URL": "http://127.0.0.1:9", **(extra or {})}


def cli(*args: str, stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m yiemagent ARGS`` run to its end, with ``env`` added to the clean environment."""
    return subprocess.run([sys.executable, "-m", "yiemagent", *args], input=stdin, capture_output=True, text=True, timeout=120, env=_env(env))


class Output:
    """Reads a pipe of a running process as it is written; ``wait_for(text)`` blocks until it appears."""

    def __init__(self, pipe: Any) -> None:
        self.text = ""
        self._changed = threading.Condition()  # guards text
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: Any) -> None:
        while chunk := os.read(pipe.fileno(), 4096):
            with self._changed:
                self.text += chunk.decode("utf-8", "replace")
                self._changed.notify_all()

    def wait_for(self, text: str, timeout: float = WAIT) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: text in self.text, timeout)

    def rest(self) -> str:
        self._thread.join(WAIT)
        return self.text


@pytest.fixture
def start_cli():
    """Starts the CLI as a running process; a process the test left running is killed afterwards."""
    started: list[subprocess.Popen] = []

    def start(*args: str) -> tuple[subprocess.Popen, Output, Output]:
        # SIGINT back to its default in the child: a test run started in the background by a
        # shell ignores SIGINT, the child would inherit that, and Python then never raises
        # KeyboardInterrupt, so Ctrl-C could not be tested
        process = subprocess.Popen(
            [sys.executable, "-m", "yiemagent", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        started.append(process)
        return process, Output(process.stdout), Output(process.stderr)

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(WAIT)
        for pipe in (process.stdin, process.stdout, process.stderr):
            pipe.close()


def anthropic_text_stream(*pieces: str) -> list[str]:
    """An Anthropic Messages stream answering ``pieces`` as text deltas, one SSE event per item."""
    def event(kind: str, **data: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    return [
        event("message_start", message={"id": "m1", "model": "claude-test", "usage": {"input_tokens": 5, "output_tokens": 0}}),
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        *(event("content_block_delta", index=0, delta={"type": "text_delta", "text": p}) for p in pieces),
        event("content_block_stop", index=0),
        event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 3}),
        event("message_stop"),
    ]
