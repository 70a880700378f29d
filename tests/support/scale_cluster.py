"""The whole service of examples/celery_service (on yiemagent.celery.TurnService) on one machine: for make test-scale and bench/bench_scale.py.

PostgreSQL and Redis (tests/support/servers.py), the fake OpenAI-compatible server of the example
in a thread of this process, and Celery worker processes (``--pool threads``), each in a
process group of its own so it can be SIGKILLed alone. ``stop()`` (or leaving the ``with``
block) ends every process it started, whatever happened: workers with SIGTERM and then
SIGKILL, then the servers. ``check_history`` checks a stored conversation is whole turns. docs/scale.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Collection, Optional

from helpers import ROOT
from servers import PostgresServer, RedisServer, die_with_parent
from yiemagent import AssistantMessage, TextContent, ToolResultMessage, UserMessage, extract_tool_calls
from yiemagent.history import complete_tool_calls

EXAMPLE = ROOT / "examples" / "celery_service"
sys.path.insert(0, str(EXAMPLE))

from fake_llm import FakeLLM  # noqa: E402

READY_TIMEOUT = 90


@contextmanager
def fake_model() -> Iterator[FakeLLM]:
    """The example's fake model, served by a thread of this process until the block ends."""
    server = FakeLLM()
    threading.Thread(target=server.serve_forever, name="fake-llm", daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def text_of(message) -> str:
    return "".join(b.text for b in message.content if isinstance(b, TextContent))


def check_history(history: list, questions: list[str], failed: Collection[str] = ()) -> list[Optional[str]]:
    """The turns' final answers, after checking the history is whole: one question, then calls each answered once, then one answer, per turn.

    A turn whose question is in ``failed`` (closed as failed, docs/scale.md "The turn
    record") has no answer: its calls each answered once, and nothing after; None for it.
    """
    assert complete_tool_calls(history)[1] == [], "a tool call has no result"
    users = [i for i, m in enumerate(history) if isinstance(m, UserMessage)]
    assert [text_of(history[i]) for i in users] == questions, "each question is stored once, in order"
    answers = []
    for start, end in zip(users, users[1:] + [len(history)]):
        pending: set[str] = set()
        finals = []
        for message in history[start + 1 : end]:
            if isinstance(message, AssistantMessage):
                assert not pending, "a new reply before every call of the last one had its result"
                calls = extract_tool_calls(message)[1]
                pending = {c.id for c in calls}
                if not calls:
                    finals.append(message)
            else:
                assert isinstance(message, ToolResultMessage) and message.tool_call_id in pending, "a result for a call not pending"
                pending.discard(message.tool_call_id)  # exactly one result per call
        if text_of(history[start]) in failed:
            assert not pending and not finals, "a failed turn: its calls answered, and no answer"
            answers.append(None)
            continue
        assert not pending and len(finals) == 1 and finals[0] is history[end - 1], "one final answer per turn, last in the turn"
        answers.append(text_of(finals[0]))
    return answers


class Worker:
    """One ``celery worker`` process; ``ready`` is set at its "ready." log line (read by a thread)."""

    def __init__(self, name: str, env: dict, threads: int, log: Path, app_dir: Path = EXAMPLE) -> None:
        self.name = name
        self.log_path = log
        self.ready = threading.Event()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "app", "worker", "--pool", "threads", "--concurrency", str(threads),
             "-n", f"{name}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info"],
            cwd=app_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGKILL),
        )
        threading.Thread(target=self._read, name=f"log-{name}", daemon=True).start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stdout is not None
        with open(self.log_path, "wb") as log:
            for line in self.process.stdout:
                log.write(line)
                log.flush()
                if b" ready." in line:
                    self.ready.set()
        self.ready.set()

    def pause(self) -> None:
        """SIGSTOP: the worker stops where it is, holding what it holds, until ``resume`` or ``kill``."""
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.process.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL, as a machine's crash would: no task is finished, acknowledged or given back."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(20)
            except ProcessLookupError:
                pass


class Cluster:
    """PostgreSQL, Redis, the fake model and the workers; ``env`` is what a worker or client is given."""

    def __init__(self, workdir: Path, *, latency_ms: float = 0.0, visibility_timeout: float = 8.0, durable: bool = False) -> None:
        self.workdir = workdir
        self.workers: list[Worker] = []
        self.postgres: Optional[PostgresServer] = None
        self.redis: Optional[RedisServer] = None
        self.fake: Optional[FakeLLM] = None
        try:
            self.postgres = PostgresServer(durable=durable, max_connections=200)
            self.redis = RedisServer()
            self.fake = FakeLLM(latency_ms=latency_ms)
            threading.Thread(target=self.fake.serve_forever, name="fake-llm", daemon=True).start()
        except BaseException:
            self.stop()
            raise
        self.dsn = self.postgres.url
        self.env = {
            **os.environ,
            # the example, then this checkout's yiemagent (with yiemagent.celery), whatever the venv has installed
            "PYTHONPATH": os.pathsep.join([str(EXAMPLE), str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "YIEMAGENT_DSN": self.postgres.url,
            "CELERY_BROKER_URL": self.redis.url,
            "CELERY_RESULT_BACKEND": "db+" + self.postgres.url.replace("postgresql://", "postgresql+psycopg://", 1),
            "OPENAI_BASE_URL": self.fake.url,
            "YIEMAGENT_MODEL": "fake",
            "YIEMAGENT_VISIBILITY_TIMEOUT": str(visibility_timeout),
        }
        self.env.pop("OPENAI_API_KEY", None)

    def start_workers(self, count: int, threads: int = 2, app_dir: Path = EXAMPLE) -> list[Worker]:
        """``count`` workers of the Celery app ``app`` in ``app_dir`` (the example's, or bench/celery_floor's), ready."""
        started = [Worker(f"w{len(self.workers) + i}", self.env, threads, self.workdir / f"worker-{len(self.workers) + i}.log", app_dir) for i in range(count)]
        self.workers += started
        for worker in started:
            if not worker.ready.wait(READY_TIMEOUT) or worker.process.poll() is not None:
                raise RuntimeError(f"worker {worker.name} did not start:\n{worker.log_path.read_text(errors='replace')[-3000:]}")
        return started

    def client(self, conversations: int, turns: int, prefix: str, *options: str, app_dir: Path = EXAMPLE) -> subprocess.Popen:
        """examples/celery_service/client.py, with ``options`` after the counts (``"--resend-after", "3"``), on the app in ``app_dir``."""
        run = f"import runpy; runpy.run_path({str(EXAMPLE / 'client.py')!r}, run_name='__main__')"  # its ``app`` is app_dir's (the cwd)
        return subprocess.Popen(
            [sys.executable, "-c", run, "--conversations", str(conversations), "--turns", str(turns), "--prefix", prefix, *options],
            cwd=app_dir, env=self.env, stdout=subprocess.PIPE, stderr=open(self.workdir / f"client-{prefix}.log", "wb"), text=True,
            preexec_fn=die_with_parent(signal.SIGKILL),
        )

    def converse(self, conversations: int, turns: int, prefix: str, *options: str) -> dict:
        """Run the client to its end and return its summary (``client``, ``summary``); killed if reading it fails."""
        client = self.client(conversations, turns, prefix, *options)
        try:
            return Cluster.summary(client)
        finally:
            if client.poll() is None:
                client.kill()

    @staticmethod
    def summary(client: subprocess.Popen, on_done=None) -> dict:
        """Read the client's lines (``on_done(n)`` at each reply) and return its JSON summary."""
        assert client.stdout is not None
        last = ""
        for line in client.stdout:
            if line.startswith("done ") and on_done is not None:
                on_done(int(line.split()[1]))
            last = line
        client.wait(60)
        return json.loads(last)

    def llm_requests(self) -> int:
        assert self.fake is not None
        with self.fake.lock:
            return self.fake.requests

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        if self.fake is not None:
            self.fake.shutdown()
            self.fake.server_close()
        for server in (self.redis, self.postgres):
            if server is not None:
                server.stop()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()
