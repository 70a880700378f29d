"""examples/celery_service/service.py: a turn is answered once however often its task runs (docs/scale.md).

Against the test run's real PostgreSQL (tests/support/session_backends.py) and the example's fake
OpenAI-compatible server on 127.0.0.1; a worker's crash is a real child process SIGKILLed
inside a tool. Celery itself is not needed here: make test-scale runs the whole service.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest

from session_backends import PostgresBackend, postgres_server  # noqa: F401  the server fixture
from yiemagent import LLMError, OpenAIClient, PostgresSession, ToolResultMessage, UserMessage, tool
from yiemagent.history import LOST_RESULT_MESSAGE

from helpers import ROOT, WAIT  # noqa: E402

EXAMPLE = ROOT / "examples" / "celery_service"
sys.path.insert(0, str(EXAMPLE))

import service  # noqa: E402
from fake_llm import FakeLLM  # noqa: E402



@tool
def lookup(topic: str) -> str:
    """Look up notes on a topic.

    Args:
        topic: what to look up.
    """
    return f"notes on {topic}"


@pytest.fixture
def pg(postgres_server):
    made = PostgresBackend(postgres_server)
    service.prepare(made.target)
    yield made
    made.drop()


@pytest.fixture
def fake():
    server = FakeLLM()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def turn(pg, fake, turn_id="c/1", text="q1", **kwargs):
    kwargs.setdefault("llm_call", OpenAIClient(fake.url, "fake"))
    return service.run_turn(pg.target, "c", turn_id, text, tools=[lookup], **kwargs)


def test_a_new_turn_asks_the_model_and_returns_its_answer(pg, fake):
    """A turn never seen: status "new", the model's final answer, the question and answer stored, the turn recorded."""
    result = turn(pg, fake)
    assert result == {"conversation_id": "c", "turn_id": "c/1", "reply": "Answer to q1: notes on q1", "status": "new"}
    assert fake.requests == 2  # the tool call, then the answer
    with PostgresSession(pg.target, "c") as s:
        assert [m.role for m in s.messages()] == ["user", "assistant", "tool", "assistant"]
    with psycopg.connect(pg.target) as conn:
        assert conn.execute("SELECT turn_id, first_index FROM yiemagent_turns").fetchall() == [("c/1", 0)]


def test_a_turn_run_again_returns_the_stored_answer_without_asking_the_model(pg, fake):
    """The same turn id again: status "stored", the same answer, no request to the model, nothing appended."""
    first = turn(pg, fake)
    again = turn(pg, fake)
    assert again["reply"] == first["reply"] and again["status"] == "stored"
    assert fake.requests == 2
    with PostgresSession(pg.target, "c") as s:
        assert len(s.messages()) == 4


def test_the_next_turn_goes_on_from_the_stored_conversation(pg, fake):
    """A second turn id: recorded at the history's end, answered as "new"; the first turn's answer is untouched."""
    turn(pg, fake)
    second = turn(pg, fake, "c/2", "q2")
    assert second["status"] == "new" and second["reply"] == "Answer to q2: notes on q2"
    with psycopg.connect(pg.target) as conn:
        assert conn.execute("SELECT turn_id, first_index FROM yiemagent_turns ORDER BY first_index").fetchall() == [("c/1", 0), ("c/2", 4)]


def test_a_turn_recorded_whose_question_was_never_stored_is_restarted(pg, fake):
    """The worker died between recording the turn and storing its question: the question is sent, status "restarted"."""
    with psycopg.connect(pg.target, autocommit=True) as conn:
        conn.execute("INSERT INTO yiemagent_turns (session_id, turn_id, first_index) VALUES ('c', 'c/1', 0)")
    result = turn(pg, fake)
    assert result["status"] == "restarted" and result["reply"] == "Answer to q1: notes on q1"


CRASHING_WORKER = """
import sys, threading
sys.path.insert(0, sys.argv[3])
import service
from yiemagent import OpenAIClient, tool

@tool
def lookup(topic: str) -> str:
    \"\"\"Look up notes on a topic.\"\"\"
    print("inside the tool", flush=True)   # the parent SIGKILLs us here, mid-batch
    threading.Event().wait()

service.run_turn(sys.argv[1], "c", "c/1", "q1", llm_call=OpenAIClient(sys.argv[2], "fake"), tools=[lookup])
"""


def test_a_turn_cut_by_a_killed_worker_is_completed_once(pg, fake):
    """SIGKILL inside the turn's tool; run again, the turn is "completed": the cut call gets an error result, one final answer, the question not sent twice."""
    child = subprocess.Popen([sys.executable, "-c", CRASHING_WORKER, pg.target, fake.url, str(EXAMPLE)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killer = threading.Timer(60, child.kill)
    killer.start()
    try:
        assert child.stdout.readline().strip() == "inside the tool", child.stderr.read()
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=WAIT) == -signal.SIGKILL
    finally:
        killer.cancel()
        child.stdout.close()
        child.stderr.close()
    result = turn(pg, fake, hold_timeout=WAIT)  # the dead worker's hold ended with its connection
    assert result["status"] == "completed"
    with PostgresSession(pg.target, "c") as s:
        history = s.messages()
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert isinstance(history[2], ToolResultMessage) and history[2].is_error and history[2].content[0].text == LOST_RESULT_MESSAGE
    assert result["reply"] == f"Answer to q1: {LOST_RESULT_MESSAGE}"
    assert sum(isinstance(m, UserMessage) for m in history) == 1


def test_a_run_that_ends_without_an_answer_raises_turn_failed_and_a_retry_completes_it(pg, fake):
    """The model fails: TurnFailed (so the task is retried) and nothing is lost; the retry completes the turn from the stored question."""

    def failing(formatted):
        raise LLMError("the model is down", status=503)

    with pytest.raises(service.TurnFailed, match="stop_reason 'error'"):
        turn(pg, fake, llm_call=failing)
    result = turn(pg, fake)
    assert result["status"] == "completed" and result["reply"] == "Answer to q1: notes on q1"


def test_two_deliveries_of_one_turn_at_once_answer_it_once(pg, fake):
    """The broker delivers a turn twice at once: one run answers ("new"), the other waits for the hold and returns that answer ("stored")."""
    fake.latency_s = 0.2  # the first run is still in its turn when the second arrives
    barrier = threading.Barrier(2)
    results: list[dict] = []

    def deliver() -> None:
        barrier.wait(WAIT)
        results.append(turn(pg, fake, hold_timeout=WAIT))

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 2)
    assert sorted(r["status"] for r in results) == ["new", "stored"]
    assert results[0]["reply"] == results[1]["reply"] and fake.requests == 2
