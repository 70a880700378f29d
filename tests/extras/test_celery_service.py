"""yiemagent.celery's turn protocol: each turn gets exactly one answer, its own, however often its task runs (docs/scale.md).

Against the test run's real PostgreSQL (tests/support/session_backends.py) and the example's fake
OpenAI-compatible server on 127.0.0.1; a worker's crash is a real child process SIGKILLed
inside a tool, or while the INSERT of its question waits on a table lock. Celery itself is
not needed here (tests/extras/test_turn_service.py runs TurnService on an in-process worker;
make test-scale runs the whole service).
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
from yiemagent import LLMError, OpenAIClient, PostgresSession, RunFailedError, ToolResultMessage, UserMessage, YiemAgent, tool
from yiemagent.celery import _turns as service
from yiemagent.celery._turns import text_of
from yiemagent.history import LOST_RESULT_MESSAGE

from helpers import WAIT  # noqa: E402
from scale_cluster import check_history, fake_model  # noqa: E402  fake_model: the example's fake model (examples/celery_service/fake_llm.py)


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
    with fake_model() as server:
        yield server


def agent_of(llm_call):
    """A ``make_agent`` for ``TurnService``: the model ``llm_call`` and the ``lookup`` tool, on the session given."""
    return lambda session: YiemAgent(llm_call=llm_call, agent_event_sink=None, system_prompt="Call lookup first.", session=session, tools=[lookup])


def turn(pg, fake, turn_id="c/1", text="q1", conversation="c", llm_call=None, **kwargs):
    return service.run_turn(pg.target, conversation, turn_id, text, agent_of(llm_call or OpenAIClient(fake.url, "fake")), **kwargs)


def cause(error: RunFailedError) -> str:
    """The cause a failed turn's error gives: its reply's ``error_message`` (the turn, the conversation, why)."""
    assert error.reply.stop_reason == "error"
    return error.reply.error_message


def failing(formatted):
    """A model that is down: every call fails as three 503s in a row would (OpenAIClient's retries spent: retryable)."""
    raise LLMError("the model is down (gave up after 3 attempts)", status=503, retryable=True)


def client(fake):
    """The fake model over real HTTP, each failure raised at once: a 503 retryable, a 400 not (``fake.fail``, ``fake.refuse``)."""
    return OpenAIClient(fake.url, "fake", max_retries=0)


def records(pg, conversation="c") -> dict:
    """Each turn's (state, error) in ``yiemagent_turns``."""
    with psycopg.connect(pg.target) as conn:
        return {t: (state, error) for t, state, error in conn.execute("SELECT turn_id, state, error FROM yiemagent_turns WHERE session_id = %s", (conversation,))}


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
from yiemagent import OpenAIClient, YiemAgent, tool
from yiemagent.celery._turns import run_turn

@tool
def lookup(topic: str) -> str:
    \"\"\"Look up notes on a topic.\"\"\"
    return f"notes on {topic}"

def make_agent(session):
    return YiemAgent(llm_call=OpenAIClient(sys.argv[2], "fake"), agent_event_sink=None, session=session, tools=[lookup])

run_turn(sys.argv[1], "c", sys.argv[3], sys.argv[4], make_agent)
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
        child = subprocess.Popen([sys.executable, "-c", WORKER, pg.target, fake.url, turn_id, text], stderr=subprocess.PIPE, text=True)
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
from yiemagent import OpenAIClient, YiemAgent, tool
from yiemagent.celery._turns import run_turn

@tool
def lookup(topic: str) -> str:
    \"\"\"Look up notes on a topic.\"\"\"
    print("inside the tool", flush=True)   # the parent SIGKILLs us here, mid-batch
    threading.Event().wait()

def make_agent(session):
    return YiemAgent(llm_call=OpenAIClient(sys.argv[2], "fake"), agent_event_sink=None, session=session, tools=[lookup])

run_turn(sys.argv[1], "c", "c/1", "q1", make_agent)
"""


def test_a_turn_cut_by_a_killed_worker_is_completed_once(pg, fake):
    """SIGKILL inside the turn's tool; run again, the turn is "completed": the cut call gets an error result, one final answer, the question not sent twice."""
    child = subprocess.Popen([sys.executable, "-c", CRASHING_WORKER, pg.target, fake.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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


def test_a_turn_the_model_refuses_fails_at_once_with_its_cause_and_the_next_turn_is_answered(pg, fake):
    """A 400 (not retryable) closes the turn as failed at its first run: RunFailedError names it and the cause, every run again says the same, the next turn is answered."""
    fake.refuse.add("q1")
    with pytest.raises(RunFailedError) as first:
        turn(pg, fake, "c/1", "q1", llm_call=client(fake))
    assert cause(first.value).startswith("turn 'c/1' of 'c' failed: the model refused it, not retryable: stop_reason 'error'") and "API error 400" in cause(first.value)
    assert str(first.value) == cause(first.value)  # the message is the cause, as Celery's result backend gives it back
    assert fake.failed == 1  # not retried, by the client or by a run
    assert records(pg)["c/1"] == ("failed", cause(first.value).split("failed: ", 1)[1])
    fake.refuse.clear()  # the model would answer now: the turn's outcome is given all the same
    with pytest.raises(RunFailedError) as again:
        turn(pg, fake, "c/1", "q1", last_attempt=True)
    assert str(again.value) == str(first.value) and fake.requests == 0
    second = turn(pg, fake, "c/2", "q2")
    assert second["status"] == "new" and second["reply"] == answer("q2")
    assert check_history(history(pg), ["q1", "q2"], failed={"q1"}) == [None, answer("q2")]


def test_a_turn_whose_last_attempt_fails_is_closed_as_failed_and_the_next_turn_goes_on(pg, fake):
    """503s: the turn's runs raise TurnFailed (retried) until its last attempt, which closes it as failed; a redelivery gets the same failure, the next turn its answer."""
    with pytest.raises(service.TurnFailed):
        turn(pg, fake, "c/1", "q1", llm_call=failing)
    with pytest.raises(RunFailedError, match="^turn 'c/1' of 'c' failed: its last attempt failed: stop_reason 'error': LLM call failed: .*the model is down") as last:
        turn(pg, fake, "c/1", "q1", llm_call=failing, last_attempt=True)
    with pytest.raises(RunFailedError) as redelivered:
        turn(pg, fake, "c/1", "q1")
    assert str(redelivered.value) == str(last.value) and fake.requests == 0
    second = turn(pg, fake, "c/2", "q2")
    assert second["status"] == "new" and second["reply"] == answer("q2")
    assert records(pg) == {"c/1": ("failed", cause(last.value).split("failed: ", 1)[1]), "c/2": ("answered", None)}
    assert check_history(history(pg), ["q1", "q2"], failed={"q1"}) == [None, answer("q2")]


@pytest.mark.parametrize("refuse, last_attempt", [(True, False), (False, True)], ids=["refused", "last attempt"])
def test_a_later_turn_closes_the_turn_it_waits_for_when_that_turn_cannot_be_answered(pg, fake, refuse, last_attempt):
    """T1's question waits for an answer the model never gives; T2's run closes T1 as failed (a 400, or T2's last attempt) and answers its own."""
    with pytest.raises(service.TurnFailed):
        turn(pg, fake, "c/1", "q1", llm_call=failing)
    if refuse:
        fake.refuse.add("q1")
    else:
        fake.fail["q1"] = 10**6  # 503 for ever on q1
    second = turn(pg, fake, "c/2", "q2", llm_call=client(fake), last_attempt=last_attempt)
    assert second["status"] == "new" and second["reply"] == answer("q2")
    with pytest.raises(RunFailedError, match="^turn 'c/1' of 'c' failed: .*API error " + ("400" if refuse else "503")):
        turn(pg, fake, "c/1", "q1")
    assert check_history(history(pg), ["q1", "q2"], failed={"q1"}) == [None, answer("q2")]


def test_a_turn_refused_after_its_tool_ran_keeps_its_calls_answered_and_the_history_valid(pg, fake):
    """The model refuses the round after a tool batch: the failed turn keeps its call and its result, and the next question follows a valid history."""
    model = client(fake)

    def refuses_after_the_tool(formatted):
        if formatted["messages"][-1]["role"] == "tool":
            raise LLMError("HTTP 400: the request is too large", status=400)
        return model(formatted)

    with pytest.raises(RunFailedError, match="the request is too large"):
        turn(pg, fake, "c/1", "q1", llm_call=refuses_after_the_tool)
    assert [m.role for m in history(pg)] == ["user", "assistant", "tool"]
    assert turn(pg, fake, "c/2", "q2")["reply"] == answer("q2")
    assert check_history(history(pg), ["q1", "q2"], failed={"q1"}) == [None, answer("q2")]


OLDER_TURNS_TABLES = {
    "positions": "CREATE TABLE yiemagent_turns (session_id TEXT, turn_id TEXT, first_index INTEGER, PRIMARY KEY (session_id, turn_id))",
    "no failed state": "CREATE TABLE yiemagent_turns (session_id TEXT NOT NULL, turn_id TEXT NOT NULL,"
    " state TEXT NOT NULL CHECK (state IN ('sending', 'asked', 'answered', 'unsent')), question TEXT NOT NULL,"
    " after_row BIGINT, question_row BIGINT, answer_row BIGINT, answer TEXT, PRIMARY KEY (session_id, turn_id))",
}


@pytest.mark.parametrize("older", OLDER_TURNS_TABLES.values(), ids=OLDER_TURNS_TABLES.keys())
def test_an_older_turns_table_is_refused_by_name(postgres_server, older):
    """A yiemagent_turns table of an older shape (positions, or no failed state) makes prepare fail naming it, not a turn answer wrongly."""
    made = PostgresBackend(postgres_server)
    try:
        with psycopg.connect(made.target, autocommit=True) as conn:
            conn.execute(older)
        with pytest.raises(service.TurnRecordError, match="yiemagent_turns has another shape"):
            service.prepare(made.target)
    finally:
        made.drop()


STEPS = st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.booleans(), st.booleans()), min_size=1, max_size=6)  # (turn, model up, last attempt)
POISON = st.one_of(st.none(), st.tuples(st.sampled_from([1, 2, 3]), st.sampled_from(["503", "400"])))  # a question the model never answers


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS, poison=POISON)
def test_each_turn_gets_exactly_one_outcome_its_own_and_none_waits_for_ever_behind_a_failed_one(pg, fake, steps, poison):
    """Runs of three turns in any order, the model up or down, last attempts or not, one question maybe never answerable: each turn one outcome, its own; none waits for ever."""
    conversation = f"p-{uuid.uuid4().hex[:8]}"
    with fake.lock:
        fake.fail, fake.refuse = {}, set()
        if poison is not None and poison[1] == "503":
            fake.fail[f"q{poison[0]}"] = 10**6  # retryable, for ever: only a last attempt closes it
        elif poison is not None:
            fake.refuse.add(f"q{poison[0]}")  # not retryable: closed at once
    outcomes: dict[int, str] = {}  # turn -> its answer, or the cause its RunFailedError gives

    def run(number: int, model_up: bool, last: bool):
        """One run of the turn: its answer or its failure; every outcome seen for a turn is the same one, its own."""
        text = f"q{number}"
        try:
            result = turn(pg, fake, f"{conversation}/{number}", text, conversation, llm_call=client(fake) if model_up else failing, last_attempt=last)
        except service.TurnFailed:
            assert not last, "a last attempt gives the turn an outcome"
            return None
        except RunFailedError as exc:
            outcome = cause(exc)
            assert outcome.startswith(f"turn '{conversation}/{number}' of {conversation!r} failed: ")
        else:
            outcome = result["reply"]
            assert outcome == answer(text) and result["status"] in ("new", "stored", "completed", "restarted")
        assert outcomes.setdefault(number, outcome) == outcome
        return outcome

    for number, model_up, last in steps:
        run(number, model_up, last)
    for number in (1, 2, 3):  # every turn's last attempt, the model up: no turn waits behind another
        assert run(number, True, True) is not None
    if poison is not None:
        assert outcomes[poison[0]] != answer(f"q{poison[0]}")  # never answerable: failed
    for number in (1, 2, 3):  # and each outcome stays
        assert run(number, True, False) == outcomes[number]
    failed = {f"q{n}" for n, outcome in outcomes.items() if outcome != answer(f"q{n}")}
    assert {t: state for t, (state, _) in records(pg, conversation).items()} == {
        f"{conversation}/{n}": "failed" if f"q{n}" in failed else "answered" for n in (1, 2, 3)
    }
    stored = history(pg, conversation)
    asked = [text_of(m) for m in stored if isinstance(m, UserMessage)]
    assert sorted(asked) == ["q1", "q2", "q3"]
    assert check_history(stored, asked, failed) == [None if q in failed else answer(q) for q in asked]
