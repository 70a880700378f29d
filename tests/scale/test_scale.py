"""make test-scale: 50 conversations of 3 turns on two Celery workers, one SIGKILLed mid-turn (docs/scale.md).

PostgreSQL (sessions and results) and Redis (the broker) run on 127.0.0.1, started here
from the wheels ``make`` installs (tests/support/servers.py); two worker processes of
examples/celery_service with two threads each serve the turns against the example's fake
OpenAI-compatible server, which calls a tool in every turn. While the first worker holds a
conversation in the middle of a turn, it is SIGKILLed. Then every conversation must have
completed, every history be valid to send, every tool call have exactly one result, and no
turn have been answered twice. Everything started is stopped after, whatever happened.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time

import psycopg
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scale_cluster import EXAMPLE, Cluster, check_history
from servers import PgBouncerServer, PostgresServer
from yiemagent import AssistantMessage, PostgresSession, SessionInUseError, extract_tool_calls
from yiemagent.celery._turns import prepare
from yiemagent.history import LOST_RESULT_MESSAGE
from yiemagent.history._json import message_from_json
from yiemagent.history.postgres import LOCK_CLASS

pytestmark = pytest.mark.scale  # not collected by make test (setup.cfg): make test-scale names this file

CONVERSATIONS, TURNS = 50, 3
KILL_AFTER = 40  # replies in before the kill: the run is well under way, most of it still to come
SCALE_WAIT = 30  # seconds: a worker's turn through Celery, PostgreSQL and Redis on a loaded 2-core machine


HELD = (
    "SELECT s.session_id,"
    " (SELECT body FROM yiemagent_messages m WHERE m.session_id = s.session_id ORDER BY id DESC LIMIT 1),"
    " (SELECT COUNT(*) FROM yiemagent_messages m WHERE m.session_id = s.session_id AND m.body::json->>'role' = 'user')"
    " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid JOIN yiemagent_sessions s ON s.lock_key = l.objid::int"
    " WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objsubid = 2 AND l.granted AND a.application_name LIKE %s"
)


def mid_turn(conn, pid: int) -> list[tuple[str, int, bool]]:
    """The conversations worker ``pid`` holds whose last stored message is not a final answer: one query.

    Each as (conversation, turn, cut in the batch): the last is True when the stored reply
    calls a tool whose result was never stored, the call the next run answers with the
    lost-result error (docs/scale.md, "What is not guaranteed").
    """
    found = []
    for conversation, last, questions in conn.execute(HELD, (LOCK_CLASS, f"% pid {pid}")):
        message = message_from_json(last, conversation) if last is not None else None
        if message is not None and not (isinstance(message, AssistantMessage) and not extract_tool_calls(message)[0]):
            found.append((conversation, questions, isinstance(message, AssistantMessage)))
    return found


def settle(conn, pid: int, deadline: float) -> None:
    """Wait until no session connection of worker ``pid`` (stopped) has a statement running on the server."""
    query = "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name LIKE %s AND state = 'active'"
    while conn.execute(query, (f"% pid {pid}",)).fetchone()[0]:
        assert time.monotonic() < deadline, "a statement of the stopped worker never ended"
        time.sleep(0.002)


def expected_answers(n: int, cut_in_batch: set[int]) -> list[str]:
    """The fake model's answers to conversation ``n``: its tool's notes, or the lost-result error for a turn whose call a kill cut."""
    questions = [f"question {t} of conversation {n}" for t in range(1, TURNS + 1)]
    return [f"Answer to {q}: {LOST_RESULT_MESSAGE if t in cut_in_batch else f'notes on {q}'}" for t, q in enumerate(questions, 1)]


def test_fifty_conversations_of_three_turns_survive_a_worker_killed_mid_turn(tmp_path):
    """50 x 3 turns on two workers, one SIGKILLed while it holds a conversation mid-turn: all complete, valid, each call answered once, no turn answered twice."""
    prefix = f"scale-{os.getpid()}"
    killed: dict = {}
    with Cluster(tmp_path, latency_ms=20, visibility_timeout=8) as cluster:
        victim, survivor = cluster.start_workers(2, threads=2)
        client = cluster.client(CONVERSATIONS, TURNS, prefix)

        def kill_mid_turn(done: int) -> None:
            if done < KILL_AFTER or killed:
                return
            with psycopg.connect(cluster.dsn, autocommit=True) as conn:
                deadline = time.monotonic() + SCALE_WAIT
                while True:
                    assert time.monotonic() < deadline, "the victim never held a conversation mid-turn"
                    if mid_turn(conn, victim.pid):
                        # stopped, the victim writes nothing more once its statements in flight are done, and keeps its
                        # holds: what is stored then is what the survivor will find, so the kill lands mid-turn for certain
                        victim.pause()
                        settle(conn, victim.pid, deadline)
                        frozen = mid_turn(conn, victim.pid)
                        if frozen:
                            victim.kill()
                            killed.update(done=done, mid_turn=frozen)
                            return
                        victim.resume()  # it finished those turns before it stopped: look again
                    time.sleep(0.002)

        try:
            summary = Cluster.summary(client, kill_mid_turn)
        finally:
            if client.poll() is None:
                client.kill()
        assert killed.get("mid_turn"), "the victim was never killed"
        assert victim.process.returncode == -9 and survivor.process.poll() is None
        assert summary["failures"] == []
        results = {r["turn_id"]: r for r in summary["results"]}
        assert len(results) == CONVERSATIONS * TURNS

        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            ledger = conn.execute("SELECT session_id, COUNT(*) FROM yiemagent_turns WHERE session_id LIKE %s GROUP BY session_id", (f"{prefix}-%",)).fetchall()
        assert sorted(ledger) == sorted((f"{prefix}-{n}", TURNS) for n in range(CONVERSATIONS))
        cut = {(conversation, turn) for conversation, turn, in_batch in killed["mid_turn"] if in_batch}
        for n in range(CONVERSATIONS):
            conversation = f"{prefix}-{n}"
            with PostgresSession(cluster.dsn, conversation) as reader:
                history = reader.messages()
            questions = [f"question {t} of conversation {n}" for t in range(1, TURNS + 1)]
            answers = check_history(history, questions)
            assert answers == expected_answers(n, {t for c, t in cut if c == conversation})
            assert [results[f"{conversation}/turn-{t}"]["reply"] for t in range(1, TURNS + 1)] == answers  # the client got the stored answers

        # the turns the victim was in the middle of were finished by the other worker, from what was stored
        for conversation, turn, _ in killed["mid_turn"]:
            result = results[f"{conversation}/turn-{turn}"]
            assert result["status"] == "completed" and result["worker"].startswith(f"{survivor.name}@"), result  # TurnResult.worker: the node name
        statuses = [r["status"] for r in results.values()]
        print(f"\nkilled after {killed['done']} replies, mid-turn in {killed['mid_turn']}; statuses: "
              f"{ {s: statuses.count(s) for s in set(statuses)} }; sent again: {summary['resent']}; {summary['turns_per_second']:.1f} turns/s; {cluster.llm_requests()} LLM requests")
    assert all(w.process.poll() is not None for w in cluster.workers)
    assert cluster.postgres.process is None and cluster.redis.process is None


def test_a_turn_whose_task_the_broker_lost_is_sent_again_and_answered_once(tmp_path):
    """A task popped from Redis's queue by a worker that dies before recording it is gone from the broker: the client sends the turn again.

    The fault is made for real: the test pops the task from the queue itself (BRPOP is how a
    worker takes one) and drops it, as a worker SIGKILLed between its pop and its write to
    kombu's ``unacked`` hash would. No worker runs until then, so nothing else can take it.
    """
    import redis

    prefix = f"lost-{os.getpid()}"
    with Cluster(tmp_path, visibility_timeout=8) as cluster:
        client = cluster.client(1, 1, prefix, "--resend-after", "4")
        broker = redis.Redis.from_url(cluster.redis.url, socket_timeout=SCALE_WAIT + 5)  # redis-py 8 gives up on a socket after 5 s by default
        try:
            popped = broker.brpop(["celery"], timeout=SCALE_WAIT)  # the task, taken from the queue and never given back
            assert popped is not None, "the client never sent its turn"
            cluster.start_workers(1, threads=2)
            summary = Cluster.summary(client)
        finally:
            broker.close()
            if client.poll() is None:
                client.kill()
        # sent again at least once (more if the worker took longer than --resend-after to start: answered once all the same)
        assert summary["failures"] == [] and summary["resent"] and set(summary["resent"]) == {f"{prefix}-0/turn-1"}
        [result] = summary["results"]
        assert result["reply"] == "Answer to question 1 of conversation 0: notes on question 1 of conversation 0"
        with PostgresSession(cluster.dsn, f"{prefix}-0") as reader:
            assert check_history(reader.messages(), ["question 1 of conversation 0"]) == [result["reply"]]
        assert cluster.llm_requests() == 2  # the lost task never ran: one turn, two model requests




SWAP = """
import json, sys, time, urllib.request
from app import turns

conversation, stats = sys.argv[1], sys.argv[2]
first = turns.send(conversation, conversation + "/turn-1", "question 1")
while json.load(urllib.request.urlopen(stats))["failed"] < 1:  # turn 1 holds the conversation, its model failing
    time.sleep(0.02)
second = turns.send(conversation, conversation + "/turn-2", "question 2")
print(json.dumps([first.get(timeout=float(sys.argv[3])), second.get(timeout=float(sys.argv[3]))]))
"""


def test_a_turn_retried_after_its_model_failed_gets_its_own_answer_not_the_next_turns(tmp_path):
    """Turn 1's model fails (three 503s, a Celery retry) and turn 2 of the conversation runs meanwhile: each turn gets its own answer."""
    conversation = f"swap-{os.getpid()}"
    with Cluster(tmp_path) as cluster:
        cluster.start_workers(1, threads=2)  # turn 2 waits for the hold in the second thread while turn 1 fails
        with cluster.fake.lock:
            cluster.fake.fail["question 1"] = 3  # OpenAIClient's first try and its two retries
        run = subprocess.run(
            [sys.executable, "-c", SWAP, conversation, cluster.fake.url.removesuffix("/v1") + "/stats", str(SCALE_WAIT * 2)],
            cwd=EXAMPLE, env=cluster.env, capture_output=True, text=True, timeout=SCALE_WAIT * 5,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        first, second = json.loads(run.stdout.splitlines()[-1])
        assert first["reply"] == "Answer to question 1: notes on question 1" and first["status"] in ("stored", "completed"), first
        assert second["reply"] == "Answer to question 2: notes on question 2" and second["status"] == "new", second
        with PostgresSession(cluster.dsn, conversation) as reader:
            assert check_history(reader.messages(), ["question 1", "question 2"]) == [first["reply"], second["reply"]]
        assert cluster.fake.failed == 3
        print(f"\nturn 1: {first['status']}, turn 2: {second['status']}")


CUT = """
import json, sys
from app import turns

conversation = sys.argv[1]
first = turns.send(conversation, conversation + "/turn-1", "question 1")
sys.stdin.readline()  # the test has cut turn 1 before its question was stored
second = turns.send(conversation, conversation + "/turn-2", "question 2")
print(json.dumps([first.get(timeout=float(sys.argv[2])), second.get(timeout=float(sys.argv[2]))]))
"""


def test_a_turn_cut_before_its_question_was_stored_is_restarted_after_the_next_turn_with_its_own_answer(tmp_path):
    """A worker SIGKILLed once turn 1 is recorded but before its question is stored; turn 2 runs, then turn 1's redelivery: each turn its own answer."""
    conversation = f"cut-{os.getpid()}"
    with Cluster(tmp_path, visibility_timeout=12) as cluster:  # turn 1 comes back 12 s after its first delivery: turn 2 runs first
        prepare(cluster.dsn)
        PostgresSession(cluster.dsn, conversation).close()  # the tables exist before they are locked
        with psycopg.connect(cluster.dsn) as blocker, psycopg.connect(cluster.dsn, autocommit=True) as watch:
            blocker.execute("LOCK TABLE yiemagent_messages IN EXCLUSIVE MODE")  # reads go on; the question's INSERT waits
            [cut] = cluster.start_workers(1, threads=1)
            client = subprocess.Popen(
                [sys.executable, "-c", CUT, conversation, str(SCALE_WAIT * 2)],
                cwd=EXAMPLE, env=cluster.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            try:
                deadline = time.monotonic() + SCALE_WAIT
                by_worker = (f"% pid {cut.pid}",)
                waiting = "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO yiemagent_messages%%' AND application_name LIKE %s"
                while not watch.execute(waiting, by_worker).fetchone()[0]:
                    assert client.poll() is None and time.monotonic() < deadline, "turn 1 never reached the INSERT of its question"
                    time.sleep(0.01)
                sending = "SELECT state FROM yiemagent_turns WHERE session_id = %s"
                assert [state for (state,) in watch.execute(sending, (conversation,))] == ["sending"]
                cut.kill()
                # the server ends a dead client's connection when it next reads it; one waiting on a lock reads nothing, so it is ended here
                watch.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s", by_worker)
                while watch.execute("SELECT COUNT(*) FROM pg_stat_activity WHERE application_name LIKE %s", by_worker).fetchone()[0]:
                    assert time.monotonic() < deadline, "the killed worker's connections never ended"
                    time.sleep(0.01)
                blocker.rollback()
                assert client.stdin is not None
                client.stdin.write("go\n")
                client.stdin.flush()
                cluster.start_workers(1, threads=2)
                out, err = client.communicate(timeout=SCALE_WAIT * 5)
            finally:
                if client.poll() is None:
                    client.kill()
                    client.wait()
        assert client.returncode == 0, err[-3000:]
        first, second = json.loads(out.splitlines()[-1])
        assert second["reply"] == "Answer to question 2: notes on question 2" and second["status"] == "new", second
        assert first["reply"] == "Answer to question 1: notes on question 1" and first["status"] == "restarted", first
        with PostgresSession(cluster.dsn, conversation) as reader:
            assert check_history(reader.messages(), ["question 2", "question 1"]) == [second["reply"], first["reply"]]


def test_a_turn_the_model_never_answers_fails_with_its_cause_and_its_conversation_goes_on(tmp_path):
    """Through Celery: a refused question (400) fails at once, one whose model is down for ever fails at its last retry; the client names each, and turn 3 is answered."""
    prefix = f"stall-{os.getpid()}"
    refused, down = "question 2 of conversation 0", "question 2 of conversation 1"
    with Cluster(tmp_path) as cluster:
        cluster.env["YIEMAGENT_TURN_RETRIES"] = "1"  # two runs of a turn, so the retries are spent within seconds
        cluster.start_workers(1, threads=2)
        with cluster.fake.lock:
            cluster.fake.refuse.add(refused)
            cluster.fake.fail[down] = 10**6  # 503 (Retry-After: 1) for ever
        summary = cluster.converse(2, 3, prefix)
        failures = sorted(summary["failures"])
        assert len(failures) == 2, failures
        assert failures[0].startswith(f"{prefix}-0/turn-2: TurnClosedError: turn '{prefix}-0/turn-2' of '{prefix}-0' failed: the model refused it, not retryable: ")
        assert "API error 400" in failures[0]
        assert failures[1].startswith(f"{prefix}-1/turn-2: TurnClosedError: turn '{prefix}-1/turn-2' of '{prefix}-1' failed: its last attempt failed: ")
        assert "API error 503" in failures[1]
        replies = {r["turn_id"]: r["reply"] for r in summary["results"]}
        for n in (0, 1):
            questions = [f"question {t} of conversation {n}" for t in (1, 2, 3)]
            with PostgresSession(cluster.dsn, f"{prefix}-{n}") as reader:
                answers = check_history(reader.messages(), questions, failed={questions[1]})
            assert answers == [f"Answer to {q}: notes on {q}" if t != 2 else None for t, q in enumerate(questions, 1)]
            assert [replies.get(f"{prefix}-{n}/turn-{t}") for t in (1, 2, 3)] == answers  # turn 3 answered after the failed turn 2
        assert cluster.fake.failed == 1 + 2 * 3  # the 400 once, not retried; two runs of three HTTP tries each for the 503s


def envelope(headers: dict, body: bytes = b"{}") -> bytes:
    """A message as kombu's Redis transport writes one, with Celery's ``headers``: what Celery reads next."""
    properties = {"body_encoding": "base64", "delivery_tag": "t", "delivery_info": {"exchange": "", "routing_key": "celery"}, "delivery_mode": 2, "priority": 0}
    return json.dumps({"body": base64.b64encode(body).decode(), "content-type": "application/json", "content-encoding": "utf-8", "headers": headers, "properties": properties}).encode()


NOT_FOR_KOMBU = [
    b"not json {",  # kombu's own Redis transport stopped the worker here: Unrecoverable error: JSONDecodeError
    b"\xff\xfe\x00",  # not UTF-8
    b"[1, 2]",
    b'{"body": "e30=", "properties": {}}',
    b'{"body": "e30=", "properties": {"delivery_tag": {"a": 1}, "delivery_info": {"exchange": "", "routing_key": "celery"}}}',
    b'{"body": "a", "properties": {"body_encoding": "base64", "delivery_tag": "t", "delivery_info": {"exchange": "", "routing_key": "celery"}}}',
    b'{"body": "e30=", "properties": {"body_encoding": "rot13", "delivery_tag": "t", "delivery_info": {"exchange": "", "routing_key": "celery"}}}',
]
NOT_FOR_CELERY = [
    envelope({"task": "yiemagent.run_turn"}),  # no id: Celery's own consumer restarted on it for ever
    envelope({"task": ["yiemagent.run_turn"]}),
    envelope({"task": "yiemagent.run_turn", "id": "x"}),  # a body that is not [args, kwargs, embed]
]


def test_a_worker_survives_messages_on_its_queue_that_are_not_tasks(tmp_path):
    """Entries on Redis's queue that kombu cannot deliver, or Celery cannot read as a task, are rejected and logged; the worker lives and answers the next turn."""
    import redis

    prefix = f"poison-{os.getpid()}"
    with Cluster(tmp_path) as cluster:
        [worker] = cluster.start_workers(1, threads=2)
        broker = redis.Redis.from_url(cluster.redis.url)
        try:
            for entry in NOT_FOR_KOMBU + NOT_FOR_CELERY:
                broker.lpush("celery", entry)  # as a producer sends a task
        finally:
            broker.close()
        deadline = time.monotonic() + SCALE_WAIT
        while worker.process.poll() is None and time.monotonic() < deadline and broker_rejections(worker) != (len(NOT_FOR_KOMBU), len(NOT_FOR_CELERY)):
            time.sleep(0.05)
        log = worker.log_path.read_text(errors="replace")
        assert worker.process.poll() is None, log[-3000:]
        assert broker_rejections(worker) == (len(NOT_FOR_KOMBU), len(NOT_FOR_CELERY)), log[-3000:]
        summary = cluster.converse(1, 1, prefix)
        assert summary["failures"] == [] and [r["reply"] for r in summary["results"]] == [
            "Answer to question 1 of conversation 0: notes on question 1 of conversation 0"
        ]
        log = worker.log_path.read_text(errors="replace")
        assert worker.process.poll() is None and "Unrecoverable error" not in log and "Connection to broker lost" not in log, log[-3000:]


def broker_rejections(worker) -> tuple[int, int]:
    """How many entries the worker rejected as not for kombu, and as not for Celery, by its log."""
    log = worker.log_path.read_text(errors="replace")
    return log.count("rejected an entry of the Redis queue b'celery' that is not a task message"), log.count("rejected a task message Celery could not read")


ODD = st.one_of(st.none(), st.text(max_size=4), st.integers(), st.lists(st.integers(), max_size=1), st.dictionaries(st.text(max_size=2), st.integers(), max_size=1))
KOMBU_WRITES = {  # the shape of what kombu's Redis transport puts on a queue
    "body": "e30=",
    "content-type": "application/json",
    "content-encoding": "utf-8",
    "headers": {},
    "properties": {"body_encoding": "base64", "delivery_tag": "tag", "delivery_info": {"exchange": "", "routing_key": "celery"}},
}
FIELDS = [("body",), ("content-type",), ("content-encoding",), ("headers",), ("headers", "compression"), ("properties",), ("properties", "body_encoding"),
          ("properties", "delivery_tag"), ("properties", "delivery_info"), ("properties", "delivery_info", "exchange"), ("properties", "delivery_info", "routing_key")]
DROP = object()


@st.composite
def envelopes(draw) -> object:
    """What kombu writes, with up to three of its fields given another value (of any kind) or dropped."""
    payload = json.loads(json.dumps(KOMBU_WRITES))
    for path in draw(st.lists(st.sampled_from(FIELDS), max_size=3)):
        value = draw(st.one_of(ODD, st.sampled_from(["e30=", "a", "\ud800", "base64", "BASE64", "utf-8", "UTF-8", "rot13", "zlib"]), st.just(DROP)))
        parent = payload
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict):
            if value is DROP:
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = value
    return payload


def kombu_writes(**properties) -> dict:
    return {**KOMBU_WRITES, "properties": {**KOMBU_WRITES["properties"], **properties}}


@settings(max_examples=300, deadline=None)
@given(payload=st.one_of(ODD, envelopes()))
@example(payload=kombu_writes(body_encoding="BASE64"))  # kombu's codecs are looked up by their exact name
@example(payload={**kombu_writes(body_encoding="utf-8"), "body": "\ud800"})
@example(payload={**KOMBU_WRITES, "headers": [1]})
@example(payload=kombu_writes(delivery_tag={"a": 1}))
def test_an_entry_the_screen_lets_through_is_one_kombu_can_deliver(payload):
    """Whatever the entry, the screen names what is wrong with it, or kombu's Redis channel can build its message and record it unacknowledged."""
    import kombu

    from yiemagent.celery._redis import envelope_problem

    entry = json.dumps(payload).encode()
    if envelope_problem(entry) is not None:
        return
    with kombu.Connection("memory://") as conn:
        channel = conn.default_channel  # a virtual channel, as the Redis one: the same Message and codecs
        message = channel.Message(json.loads(entry), channel=channel)
        assert isinstance(message.delivery_tag, str)  # a field of kombu's unacked hash in Redis
        assert isinstance(message.delivery_info["exchange"], str) and isinstance(message.delivery_info["routing_key"], str)



@pytest.mark.parametrize("hold_timeout", [0.0, 0.5])
def test_a_hold_through_pgbouncer_in_transaction_mode_is_refused_naming_the_pooler_and_holds_in_session_mode(hold_timeout):
    """Through a real PgBouncer in transaction mode, a second session reaching the holder's server process is refused naming the pooler, each hold waiting or not; session mode excludes."""
    with PostgresServer() as postgres:
        with PgBouncerServer(postgres, pool_mode="transaction", pool_size=1) as pooler:  # one server process: the second client reaches the holder's
            with PostgresSession(pooler.dsn, "c", hold_timeout=hold_timeout) as first, PostgresSession(pooler.dsn, "c", hold_timeout=hold_timeout) as second:
                first.acquire()
                with pytest.raises(SessionInUseError, match=r"cannot be held through this connection: .*pool_mode = transaction.*pool_mode = session"):
                    second.acquire()
                assert first.held and not second.held
                first.release()
        with PgBouncerServer(postgres, pool_mode="session", pool_size=4) as pooler:
            with PostgresSession(pooler.dsn, "c") as first, PostgresSession(pooler.dsn, "c") as second:
                first.acquire()
                with pytest.raises(SessionInUseError, match="is held by another agent"):
                    second.acquire()
                first.release()
                second.acquire()
                assert second.held


_POOLED_HOLDER = """
import sys, threading
from yiemagent import PostgresSession
session = PostgresSession(sys.argv[1], "c")
session.acquire()
print("held", flush=True)
threading.Event().wait()
"""


def test_a_hold_left_by_a_killed_client_in_session_pooling_is_ended_by_the_pools_reset_and_the_next_client_holds():
    """Through a real PgBouncer in session mode (one server process), a holder killed by SIGKILL leaves neither lock nor mark: the next client reaching that process holds, and excludes another."""
    with PostgresServer() as postgres, PgBouncerServer(postgres, pool_mode="session", pool_size=1) as pooler:
        child = subprocess.Popen([sys.executable, "-c", _POOLED_HOLDER, pooler.dsn], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "held", child.stderr.read()
            child.kill()
            child.wait(timeout=60)
        finally:
            child.kill()
            child.stdout.close()
            child.stderr.close()
        with PostgresSession(pooler.dsn, "c", hold_timeout=30) as next_client:
            next_client.acquire()  # waits for the one server process, which PgBouncer resets (DISCARD ALL) as the killed client leaves
            assert next_client.held
            with PostgresSession(postgres.dsn, "c") as other, pytest.raises(SessionInUseError, match="is held by another agent"):
                other.acquire()
            next_client.release()
