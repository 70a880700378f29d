"""yiemagent.celery.TurnService: send, ask and the task through a real Celery worker (docs/scale.md; API.md "Scale as a library").

A Celery worker runs in this process (``celery.contrib.testing.worker``: a real consumer on
a thread pool) over kombu's in-memory broker and a JSON result backend in memory; the
sessions and turn records are in the test run's real PostgreSQL, the model is the
example's fake OpenAI-compatible server on 127.0.0.1. Redis and worker processes are
make test-scale's (tests/scale/test_scale.py).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import warnings

import celery.exceptions
import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker

from session_backends import PostgresBackend, postgres_server  # noqa: F401  the server fixture
from yiemagent import OpenAIClient, PostgresSession, RunFailedError, SessionInUseError, YiemAgent, tool
from yiemagent.celery import TurnClosedError, TurnResult, TurnService
from yiemagent.celery._turns import prepare, run_turn
from yiemagent.celery.service import SCREENED_CONSUMER, SCREENED_REDIS

from helpers import WAIT  # noqa: E402
from scale_cluster import fake_model  # noqa: E402  the example's fake model (examples/celery_service/fake_llm.py)

RETRIES = 1  # the task's max_retries here (task_annotations): two runs of a turn, so a spent turn fails within seconds


@tool
def lookup(topic: str) -> str:
    """Look up notes on a topic.

    Args:
        topic: what to look up.
    """
    return f"notes on {topic}"


@pytest.fixture(scope="module")
def fake():
    with fake_model() as server:
        yield server


@pytest.fixture(scope="module")
def pg(postgres_server):
    made = PostgresBackend(postgres_server)
    yield made
    made.drop()


@pytest.fixture(scope="module")
def service(pg, fake):
    """A TurnService on an app with an in-memory broker and result backend, served by a worker of two threads."""
    app = Celery("turn-service-test", broker="memory://", backend="cache+memory://")
    app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"], task_annotations={"yiemagent.run_turn": {"max_retries": RETRIES}})

    def make_agent(session: PostgresSession) -> YiemAgent:
        model = OpenAIClient(fake.url, "fake", max_retries=0)  # each 503 fails the run at once: Celery's retry is what is tested
        return YiemAgent(llm_call=model, agent_event_sink=None, session=session, tools=[lookup])

    made = TurnService(app, make_agent, dsn=pg.target, hold_timeout=WAIT)
    # the worker's log setup sets the root logger's level and handlers (Celery's worker_hijack_root_logger):
    # put them back after the module, or later tests' caplog sees no warning
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        with start_worker(app, concurrency=2, pool="threads", perform_ping_check=False, hostname="turns@test", shutdown_timeout=WAIT):
            yield made
    finally:
        root.setLevel(level)
        root.handlers[:] = handlers


@pytest.fixture(autouse=True)
def model_up(fake):
    with fake.lock:
        fake.fail.clear()
        fake.refuse.clear()


def answer(text: str) -> str:
    return f"Answer to {text}: notes on {text}"


def test_ask_returns_the_turns_answer_and_the_worker_that_gave_it(service, fake):
    """ask: a TurnResult with the answer, status "new" and the worker's node name; asked again, the same answer, the model not asked again."""
    result = service.ask("a", "a/1", "q1", timeout=WAIT)
    assert result == TurnResult("a", "a/1", answer("q1"), "new", "turns@test")
    requests = fake.requests
    assert service.ask("a", "a/1", "q1", timeout=WAIT).reply == answer("q1")  # the task's result, or the stored answer's
    assert fake.requests == requests
    assert service.send("a", "a/2", "q2").get(timeout=WAIT) == {"conversation_id": "a", "turn_id": "a/2", "reply": answer("q2"), "status": "new", "worker": "turns@test"}


def test_a_turn_whose_model_fails_is_retried_by_celery_and_completed(service, fake):
    """A 503 ends the first run; Celery retries the task (backoff), and the retry completes the turn from its stored question."""
    with fake.lock:
        fake.fail["r1"] = 1
    result = service.ask("r", "r/1", "r1", timeout=WAIT)
    assert result.reply == answer("r1") and result.status == "completed"
    assert fake.failed >= 1


@pytest.mark.parametrize("how", ["refused", "retries spent"])
def test_a_turn_that_cannot_be_answered_makes_ask_raise_run_failed_error_naming_its_cause(service, fake, how):
    """A refused question (400) at once, or one whose model stays down once the retries are spent: ask raises RunFailedError, its reply an error naming the turn and the cause."""
    conversation = f"f-{how.split()[0]}"
    with fake.lock:
        if how == "refused":
            fake.refuse.add(f"{conversation} q")
        else:
            fake.fail[f"{conversation} q"] = 10**6
    with pytest.raises(RunFailedError) as failed:
        service.ask(conversation, f"{conversation}/1", f"{conversation} q", timeout=WAIT * 2)
    reply = failed.value.reply
    why = "the model refused it, not retryable" if how == "refused" else "its last attempt failed"
    assert isinstance(failed.value, TurnClosedError) and reply.stop_reason == "error"
    assert reply.error_message.startswith(f"turn '{conversation}/1' of '{conversation}' failed: {why}: ") and str(failed.value) == reply.error_message
    with pytest.raises(RunFailedError) as again:  # the same outcome, however often it is asked
        service.send(conversation, f"{conversation}/1", f"{conversation} q").get(timeout=WAIT)
    assert again.value.reply.error_message == reply.error_message
    assert service.ask(conversation, f"{conversation}/2", "next", timeout=WAIT).reply == answer("next")  # the conversation goes on


def test_a_turn_whose_earlier_task_gave_up_on_something_passing_is_run_anew_by_ask(service):
    """The result backend holds a failure that is no outcome of the turn (the hold not had): ask runs the turn anew and returns its answer."""
    service.app.backend.mark_as_failure("h/1", SessionInUseError("conversation 'h' is held by another agent"))
    result = service.ask("h", "h/1", "h1", timeout=WAIT)
    assert result.reply == answer("h1") and result.status == "new"


def test_ask_sends_a_turn_again_when_no_answer_comes_and_gives_up_at_its_timeout(caplog):
    """No worker takes the task: ask sends it again after each resend_after, logging it, and raises TimeoutError at its timeout."""
    app = Celery("no-worker", broker="memory://", backend="cache+memory://")
    app.conf.task_default_queue = "no-worker"  # the in-memory broker is the process's: no worker consumes this queue
    unanswered = TurnService(app, lambda session: None, dsn="postgresql://127.0.0.1:1/none")  # never run: no worker
    with caplog.at_level(logging.WARNING, logger="yiemagent.celery"), pytest.raises(celery.exceptions.TimeoutError):
        unanswered.ask("n", "n/1", "q", timeout=1.0, resend_after=0.3)
    with pytest.raises(ValueError, match="resend_after must be positive, not 0"):
        unanswered.ask("n", "n/1", "q", resend_after=0)
    resent = [r for r in caplog.records if r.getMessage().startswith("turn 'n/1' of 'n' has no answer after")]
    assert len(resent) >= 2


def test_the_service_gives_the_app_the_poison_message_screen_unless_the_app_chose_its_own():
    """TurnService sets the screened consumer, and for a redis:// broker the screened transport; a consumer or transport the app set stays."""
    plain = Celery("plain", broker="redis://127.0.0.1:1/0")
    TurnService(plain, lambda session: None, dsn="postgresql://127.0.0.1:1/none")
    assert (plain.conf.worker_consumer, plain.conf.broker_transport) == (SCREENED_CONSUMER, SCREENED_REDIS)
    chosen = Celery("chosen", broker="redis://127.0.0.1:1/0")
    chosen.conf.update(worker_consumer="my.consumer:Consumer", broker_transport="my.transport:Transport")
    TurnService(chosen, lambda session: None, dsn="postgresql://127.0.0.1:1/none")
    assert (chosen.conf.worker_consumer, chosen.conf.broker_transport) == ("my.consumer:Consumer", "my.transport:Transport")
    tls = Celery("tls", broker="rediss://127.0.0.1:1/0")
    TurnService(tls, lambda session: None, dsn="postgresql://127.0.0.1:1/none")
    assert tls.conf.worker_consumer == SCREENED_CONSUMER and not tls.conf.broker_transport


def test_make_agent_that_returns_no_agent_on_the_session_is_refused_by_name(pg):
    """make_agent must build a YiemAgent on the session it is given: anything else is a TypeError naming what it returned, and the hold is let go."""
    prepare(pg.target)
    with pytest.raises(TypeError, match="make_agent\\(session\\) must return a YiemAgent built on that session, not NoneType"):
        run_turn(pg.target, "t", "t/1", "q", lambda session: None)
    with PostgresSession(pg.target, "t") as session:
        session.acquire()  # nobody holds it
        session.release()


def test_importing_yiemagent_loads_no_celery_and_the_extra_is_named_when_missing():
    """`import yiemagent` loads no Celery; without it, importing yiemagent.celery raises ImportError naming the extra."""
    script = textwrap.dedent(
        """
        import sys
        import yiemagent
        assert "celery" not in sys.modules and "kombu" not in sys.modules, "celery imported"
        sys.modules["celery"] = None  # as if the extra were not installed
        try:
            import yiemagent.celery
        except ImportError as exc:
            print(exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert 'pip install "yiemagent[celery]"' in done.stdout


def test_a_service_registers_its_task_on_its_own_app_alone_and_one_service_per_app():
    """The task is the service's app's alone (an app made later has no yiemagent.run_turn, and no duplicate-name warning), and a second service on one app is refused naming the app."""
    first = Celery("first-app", broker="memory://")
    TurnService(first, lambda session: None, dsn="postgresql://127.0.0.1:1/none")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        later = Celery("later-app", broker="memory://")
        later.finalize()
    assert "yiemagent.run_turn" not in later.tasks and [str(w.message) for w in caught] == []
    second = TurnService(later, lambda session: None, dsn="postgresql://127.0.0.1:1/other")
    assert later.tasks["yiemagent.run_turn"] is second.task
    with pytest.raises(ValueError, match="the Celery app 'first-app' already has a TurnService"):
        TurnService(first, lambda session: None, dsn="postgresql://127.0.0.1:1/none")
