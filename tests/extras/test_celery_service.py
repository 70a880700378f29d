"""examples/celery_service/service.py: each turn gets exactly one answer, its own, however often its task runs (docs/scale.md).

Against the test run's real PostgreSQL (tests/support/session_backends.py) and the example's fake
OpenAI-compatible server on 127.0.0.1; a worker's crash is a real child process SIGKILLed
inside a tool, or while the INSERT of its question waits on a table lock. Celery itself is
not needed here: make test-scale runs the whole service.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from session_backends import PostgresBackend, postgres_server  # noqa: F401  the server fixture
from yiemagent import LLMError, OpenAIClient, PostgresSession, ToolResultMessage, UserMessage, tool
from yiemagent.history import LOST_RESULT_MESSAGE

from helpers import ROOT, WAIT  # noqa: E402
from scale_cluster import check_history  # noqa: E402

EXAMPLE = ROOT / "examples" / "celery_service"
sys.path.insert(0, str(EXAMPLE))

import service  # noqa: E402
from service import text_of  # noqa: E402
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


def turn(pg, fake, turn_id="c/1", text="q1", conversation="c", **kwargs):
    kwargs.setdefault("llm_call", OpenAIClient(fake.url, "fake"))
    return service.run_turn(pg.target, conversation, turn_id, text, tools=[lookup], **kwargs)


def failing(formatted):
    """A model that is down: every call fails as three 503s in a row would."""
    raise LLMError("the model is down", status=503)


def answer(text: str) -> str:
    """The fake model's answer to the question ``text``."""
    return f"Answer to {text}: notes on {text}"


def history(pg, conversation="c") -> list:
    with PostgresSession(pg.target, conversation) as s:
        return s.messages()


def test_a_new_turn_asks_the_model_and_returns_its_answer(pg, fake):
    """A turn never seen: status "new", the model's final answer, the question and answer stored, the turn recorded."""
    result = turn(pg, fake)
    assert result == {"conversation_id": "c", "turn_id": "c/1", "reply": "Answer to q1: notes on q1", "status": "new"}
    assert fake.requests == 2  # the tool call, then the answer
    with PostgresSession(pg.target, "c") as s:
        assert [m.role for m in s.messages()] == ["user", "assistant", "tool", "assistant"]
    with psycopg.connect(pg.target) as conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM yiemagent_messages ORDER BY id")]
        record = conn.execute("SELECT turn_id, state, question, question_row, answer_row, answer FROM yiemagent_turns").fetchall()
    assert record == [("c/1", "answered", "q1", ids[0], ids[3], result["reply"])]  # its own question's row and its own answer's


def test_a_turn_run_again_returns_the_stored_answer_without_asking_the_model(pg, fake):
    """The same turn id again: status "stored", the same answer, no request to the model, nothing appended."""
    first = turn(pg, fake)
    again = turn(pg, fake)
    assert again["reply"] == first["reply"] and again["status"] == "stored"
    assert fake.requests == 2
    with PostgresSession(pg.target, "c") as s:
        assert len(s.messages()) == 4


def test_the_next_turn_goes_on_from_the_stored_conversation(pg, fake):
    """A second turn id: its question goes after the first turn's answer, answered as "new"; the first turn's answer is untouched."""
    turn(pg, fake)
    second = turn(pg, fake, "c/2", "q2")
    assert second["status"] == "new" and second["reply"] == answer("q2")
    assert check_history(history(pg), ["q1", "q2"]) == [answer("q1"), answer("q2")]
    assert turn(pg, fake)["reply"] == answer("q1")


WORKER = """
import sys
sys.path.insert(0, sys.argv[3])
import service
from yiemagent import OpenAIClient, tool

@tool
def lookup(topic: str) -> str:
    \"\"\"Look up notes on a topic.\"\"\"
    return f"notes on {topic}"

service.run_turn(sys.argv[1], "c", sys.argv[4], sys.argv[5], llm_call=OpenAIClient(sys.argv[2], "fake"), tools=[lookup])
"""


def kill_before_its_question_is_stored(pg, fake, turn_id: str, text: str) -> None:
    """Run the turn in a child process and SIGKILL it once its turn is recorded and the INSERT of its question waits on a lock.

    The test holds ``yiemagent_messages`` in EXCLUSIVE mode (reads go on, inserts wait);
    after the kill it ends the child's connections, as the server does once its keepalives
    find the client gone (docs/scale.md), so the waiting INSERT is never committed.
    """
    PostgresSession(pg.target, "c").close()  # the session tables exist before they are locked
    with psycopg.connect(pg.target) as blocker, psycopg.connect(pg.target, autocommit=True) as watch:
        blocker.execute("LOCK TABLE yiemagent_messages IN EXCLUSIVE MODE")
        child = subprocess.Popen([sys.executable, "-c", WORKER, pg.target, fake.url, str(EXAMPLE), turn_id, text], stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + WAIT
            waiting = "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO yiemagent_messages%'"
            while not watch.execute(waiting).fetchone()[0]:
                assert child.poll() is None, child.stderr.read()
                assert time.monotonic() < deadline, "the child never stored its question"
                time.sleep(0.01)
            assert watch.execute("SELECT COUNT(*) FROM yiemagent_turns WHERE turn_id = %s", (turn_id,)).fetchone()[0] == 1
        finally:
            child.kill()
            child.wait(WAIT)
            child.stderr.close()
        watch.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid NOT IN (pg_backend_pid(), %s)", (blocker.info.backend_pid,)
        )
        others = "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND pid NOT IN (pg_backend_pid(), %s)"
        while watch.execute(others, (blocker.info.backend_pid,)).fetchone()[0]:  # gone before the lock is, so the INSERT never runs
            assert time.monotonic() < deadline + WAIT, "the child's connections never ended"
            time.sleep(0.01)
        blocker.rollback()
    assert history(pg) == []


def test_a_turn_whose_worker_died_before_its_question_was_stored_is_restarted(pg, fake):
    """The worker died between recording the turn and storing its question: run again, the question is sent, status "restarted"."""
    kill_before_its_question_is_stored(pg, fake, "c/1", "q1")
    result = turn(pg, fake, hold_timeout=WAIT)
    assert result["status"] == "restarted" and result["reply"] == answer("q1")
    assert check_history(history(pg), ["q1"]) == [answer("q1")]


def test_a_turn_cut_before_its_question_was_stored_is_restarted_after_another_turn_ran(pg, fake):
    """Cut before its question was stored, with another turn answered meanwhile: run again, the turn is "restarted" and gets its own answer."""
    kill_before_its_question_is_stored(pg, fake, "c/1", "q1")
    second = turn(pg, fake, "c/2", "q2", hold_timeout=WAIT)
    assert second["status"] == "new" and second["reply"] == answer("q2")
    first = turn(pg, fake, "c/1", "q1")
    assert first["status"] == "restarted" and first["reply"] == answer("q1")
    assert check_history(history(pg), ["q2", "q1"]) == [answer("q2"), answer("q1")]
    assert [turn(pg, fake, t, q)["reply"] for t, q in (("c/1", "q1"), ("c/2", "q2"))] == [answer("q1"), answer("q2")]


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


def test_a_failed_turn_never_gets_the_answer_of_a_turn_run_while_it_waited(pg, fake):
    """T1's model fails and T2 of the same conversation runs before T1's retry: T2 answers T1 first, and each turn gets its own answer."""
    with pytest.raises(service.TurnFailed):
        turn(pg, fake, "c/1", "q1", llm_call=failing)
    second = turn(pg, fake, "c/2", "q2")
    assert second["status"] == "new" and second["reply"] == answer("q2")
    first = turn(pg, fake, "c/1", "q1")
    assert first["status"] == "stored" and first["reply"] == answer("q1")
    assert check_history(history(pg), ["q1", "q2"]) == [answer("q1"), answer("q2")]


def test_a_turn_waiting_behind_a_failing_turn_fails_and_is_answered_once_the_model_is_back(pg, fake):
    """T2 arrives while T1's question waits for an answer and the model is still down: T2 fails too (retried), nothing is asked out of order."""
    with pytest.raises(service.TurnFailed):
        turn(pg, fake, "c/1", "q1", llm_call=failing)
    with pytest.raises(service.TurnFailed, match="turn 'c/2' is asked after turn 'c/1', which has no answer yet"):
        turn(pg, fake, "c/2", "q2", llm_call=failing)
    assert [text_of(m) for m in history(pg)] == ["q1"]  # q1 stored, no answer yet; q2 not asked before it
    assert turn(pg, fake, "c/2", "q2")["reply"] == answer("q2")
    assert turn(pg, fake, "c/1", "q1") == {"conversation_id": "c", "turn_id": "c/1", "reply": answer("q1"), "status": "stored"}


def test_a_turn_id_sent_with_another_question_is_refused(pg, fake):
    """A turn id is tied to its question: sent again with another text, ValueError names both, and nothing is stored."""
    turn(pg, fake)
    with pytest.raises(ValueError, match="'q1', not 'other'"):
        turn(pg, fake, "c/1", "other")
    assert len(history(pg)) == 4


def test_two_turns_of_one_conversation_sent_at_once_each_get_their_own_answer(pg, fake):
    """Two turns of one conversation at once are serialised by the hold: each its own answer, the history whole turns."""
    fake.latency_s = 0.1
    barrier = threading.Barrier(2)
    results: dict = {}

    def deliver(turn_id: str, text: str) -> None:
        barrier.wait(WAIT)
        results[turn_id] = turn(pg, fake, turn_id, text, hold_timeout=WAIT)

    threads = [threading.Thread(target=deliver, args=args) for args in (("c/1", "q1"), ("c/2", "q2"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 2)
    assert {t: (r["reply"], r["status"]) for t, r in results.items()} == {"c/1": (answer("q1"), "new"), "c/2": (answer("q2"), "new")}
    stored = history(pg)
    questions = [text_of(m) for m in stored if isinstance(m, UserMessage)]
    assert sorted(questions) == ["q1", "q2"] and check_history(stored, questions) == [answer(q) for q in questions]


def test_an_older_turns_table_is_refused_by_name(postgres_server):
    """A yiemagent_turns table of the older shape (positions, not rows) makes prepare fail naming it, not a turn answer wrongly."""
    made = PostgresBackend(postgres_server)
    try:
        with psycopg.connect(made.target, autocommit=True) as conn:
            conn.execute("CREATE TABLE yiemagent_turns (session_id TEXT, turn_id TEXT, first_index INTEGER, PRIMARY KEY (session_id, turn_id))")
        with pytest.raises(service.TurnRecordError, match="yiemagent_turns has another shape"):
            service.prepare(made.target)
    finally:
        made.drop()


STEPS = st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.booleans()), min_size=1, max_size=6)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_each_turn_gets_exactly_one_answer_its_own_whatever_the_order_and_failures(pg, fake, steps):
    """Runs of three turns in any order, the model up or down at each: every answer a run returns is its own turn's, and at the end each turn has one."""
    conversation = f"p-{uuid.uuid4().hex[:8]}"
    for number, model_up in steps:
        text = f"q{number}"
        try:
            result = turn(pg, fake, f"{conversation}/{number}", text, conversation, **({} if model_up else {"llm_call": failing}))
        except service.TurnFailed:
            assert not model_up
            continue
        assert result["reply"] == answer(text) and result["status"] in ("new", "stored", "completed")
    for number in (1, 2, 3):
        assert turn(pg, fake, f"{conversation}/{number}", f"q{number}", conversation)["reply"] == answer(f"q{number}")
    stored = history(pg, conversation)
    asked = [text_of(m) for m in stored if isinstance(m, UserMessage)]
    assert sorted(asked) == ["q1", "q2", "q3"]
    assert check_history(stored, asked) == [answer(q) for q in asked]
