"""Every schedule of two turns of one conversation, a crash at every step boundary, every redelivery: each turn one outcome, its own (docs/scale.md "Every schedule, walked").

The real turn code (``yiemagent/celery/_turns.py::run_turn``) on the test run's real
PostgreSQL (tests/support/session_backends.py), its effects counted where they leave the
process: each write of a message (``PostgresSession.append``), each write of a turn record
(``Turns.claim``, ``Turns._set``) and each model call (the example's fake model, in-process).
A crash before effect k leaves what was stored before it: every write is committed when it
returns, the process is gone from there on, its connections close (and its hold with
them), and the broker delivers its task again; the walk reads the stored rows before each
effect of a whole run, and checks on its first state that a run made to raise at that
step (``Crash``, and every later effect raising too) leaves the same. A model failure at a
call is a retryable ``LLMError``: the run ends with ``TurnFailed`` and Celery runs the task
again; at the task's last attempt, a turn is closed as failed instead.

Runs of one conversation never interleave between two effects: each write is checked to
happen while the run's session holds the conversation (decision 17), so a schedule is a
sequence of runs, each whole or cut at an effect. The walk is a depth-first search over
those sequences, with the states already walked merged (the stored conversation up to row
ids, the deliveries left, what each turn's client was told, the faults left): every
schedule is walked, and each distinct state's runs are executed once. ``make test`` walks
two turns; ``make test-deep`` (HYPOTHESIS_PROFILE=deep) three.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Optional

import psycopg
import pytest

from session_backends import PostgresBackend, postgres_server  # noqa: F401  the server fixture
from yiemagent import AssistantMessage, LLMError, PostgresSession, TextContent, UserMessage, YiemAgent, tool
from yiemagent.celery import _turns
from yiemagent.celery._turns import text_of
from yiemagent.history import LOST_RESULT_MESSAGE

from scale_cluster import check_history  # noqa: E402
from fake_llm import reply_to  # noqa: E402  the example's fake model (examples/celery_service/fake_llm.py), called in-process

CONVERSATION = "walk"
DEEP = os.environ.get("HYPOTHESIS_PROFILE") == "deep"


class Crash(Exception):
    """The run's process ended at this step: nothing of the run happens from here on."""


@tool
def lookup(topic: str) -> str:
    """Look up notes on a topic.

    Args:
        topic: what to look up.
    """
    return f"notes on {topic}"


def answers(question: str) -> set[str]:
    """The fake model's answers to ``question``: after its tool's result, or after the lost-result error of a call a crash cut."""
    return {f"Answer to {question}: notes on {question}", f"Answer to {question}: {LOST_RESULT_MESSAGE}"}


@dataclass
class Run:
    """One run of a turn's task: the effects it made, the stored rows before each, where it crashes or the model fails (effect numbers, from 1)."""

    crash_at: Optional[int] = None
    fail_model_at: Optional[int] = None
    last_attempt: bool = False  # the task's retries are spent: a turn this run cannot answer is closed as failed
    before: Optional[Callable[[], Any]] = None  # the stored rows, read before each effect
    trace: list[str] = field(default_factory=list)
    stored: list[Any] = field(default_factory=list)  # what ``before`` read before each effect
    session: Optional[PostgresSession] = None
    dead: bool = False

    def effect(self, kind: str) -> None:
        """Called before each effect: the crash or the model failure planned here happens; a dead run makes none."""
        if self.dead:
            raise Crash(kind)
        if kind != "model":  # every write of the run is made while its session holds the conversation (decision 17)
            assert self.session is not None and self.session.held, f"{kind} written without the conversation's hold"
        number = len(self.trace) + 1
        if number == self.crash_at:
            self.dead = True
            raise Crash(kind)
        if self.before is not None:
            self.stored.append(self.before())
        self.trace.append(kind)
        if number == self.fail_model_at:
            assert kind == "model"
            raise LLMError("the model is down (gave up after 3 attempts)", status=503, retryable=True)


class Runs:
    """The run in progress (one at a time: the walk is sequential); its effects go through ``effect``."""

    current: Optional[Run] = None

    def effect(self, kind: str) -> None:
        assert self.current is not None, "an effect outside a run"
        self.current.effect(kind)


@pytest.fixture
def runs(monkeypatch) -> Runs:
    """The turn code's effects counted at the boundaries where they leave the process: message writes, record writes."""
    state = Runs()

    def counted(kind: str, write: Callable[..., Any]) -> Callable[..., Any]:
        def counted_write(*args: Any, **kwargs: Any) -> Any:
            state.effect(kind)
            return write(*args, **kwargs)

        return counted_write

    monkeypatch.setattr(PostgresSession, "append", counted("append", PostgresSession.append))
    monkeypatch.setattr(_turns.Turns, "claim", counted("claim", _turns.Turns.claim))
    monkeypatch.setattr(_turns.Turns, "_set", counted("record", _turns.Turns._set))
    return state


def model(runs: Runs) -> Callable[[dict], AssistantMessage]:
    """The example's fake model, in-process: a call of ``lookup`` on the question, then ``Answer to <question>: <result>``."""

    def call(formatted: dict) -> AssistantMessage:
        runs.effect("model")
        reply = reply_to(formatted["messages"])
        if reply.get("tool_calls"):
            return AssistantMessage([{"type": "tool_calls", "tool_calls": reply["tool_calls"]}], stop_reason="tool_use")
        return AssistantMessage([TextContent(reply["content"])], stop_reason="stop")

    return call


class Walk:
    """The depth-first walk over schedules of ``turns`` (turn id -> question) of one conversation."""

    def __init__(self, dsn: str, runs: Runs, turns: dict[str, str], *, closing: bool = False) -> None:
        self.dsn = dsn
        self.closing = closing  # model failures at a last attempt too
        self.runs = runs
        self.turns = turns
        self.llm = model(runs)
        self.schedules: dict[Any, int] = {}  # a state walked -> the schedules from it to their end
        self.executed = 0  # runs executed
        self.conn = psycopg.connect(dsn, autocommit=True)
        with self.conn.cursor() as cur:
            cur.execute("SELECT * FROM yiemagent_turns LIMIT 0")
            self.columns = tuple(column.name for column in cur.description or ())

    def make_agent(self, session: PostgresSession) -> YiemAgent:
        assert self.runs.current is not None
        self.runs.current.session = session
        return YiemAgent(llm_call=self.llm, agent_event_sink=None, system_prompt="Call lookup first.", session=session, tools=[lookup])

    def snapshot(self) -> tuple[list, list]:
        messages = self.conn.execute("SELECT id, body, mark FROM yiemagent_messages WHERE session_id = %s ORDER BY id", (CONVERSATION,)).fetchall()
        records = self.conn.execute("SELECT * FROM yiemagent_turns WHERE session_id = %s ORDER BY turn_id", (CONVERSATION,)).fetchall()
        return messages, records

    def restore(self, snapshot: tuple[list, list]) -> None:
        """The stored rows as they were at ``snapshot``, with the same row ids (later rows get larger ones, as in the real table)."""
        messages, records = snapshot
        with self.conn.transaction():
            self.conn.execute("DELETE FROM yiemagent_messages WHERE session_id = %s", (CONVERSATION,))
            self.conn.execute("DELETE FROM yiemagent_turns WHERE session_id = %s", (CONVERSATION,))
            with self.conn.cursor() as cur:
                if messages:
                    cur.executemany(
                        "INSERT INTO yiemagent_messages (id, session_id, body, mark) OVERRIDING SYSTEM VALUE VALUES (%s, %s, %s, %s)",
                        [(row_id, CONVERSATION, body, mark) for row_id, body, mark in messages],
                    )
                if records:
                    cur.executemany(f"INSERT INTO yiemagent_turns VALUES ({', '.join(['%s'] * len(records[0]))})", records)

    def key(self, snapshot: tuple[list, list]) -> Any:
        """The stored conversation as the protocol sees it: row ids replaced by positions (only their order matters to it)."""
        messages, records = snapshot
        position = {row_id: index for index, (row_id, _, _) in enumerate(messages)}
        bodies = tuple(json.dumps({k: v for k, v in json.loads(body).items() if k != "timestamp"}, sort_keys=True) for _, body, _ in messages)
        rows = tuple(tuple(position.get(v, ("row", v)) if name.endswith("_row") else v for name, v in zip(self.columns, record, strict=True)) for record in records)
        return bodies, rows

    def run(self, turn_id: str, plan: Run, path: list[str]) -> tuple[str, Any]:
        """Run ``turn_id``'s task once under ``plan``: ("answered", reply), ("closed", cause), ("crashed", None) or ("retry", None)."""
        self.runs.current = plan
        self.executed += 1
        try:
            result = _turns.run_turn(
                self.dsn, CONVERSATION, turn_id, self.turns[turn_id], self.make_agent, hold_timeout=5.0, reply_timeout=30.0, last_attempt=plan.last_attempt
            )
        except Crash:
            return "crashed", None
        except _turns.TurnClosedError as exc:
            if plan.dead:
                return "crashed", None
            cause = exc.reply.error_message
            assert cause.startswith(f"turn {turn_id!r} of {CONVERSATION!r} failed: "), f"schedule {path}: turn {turn_id} closed with {cause!r}"
            return "closed", cause
        except _turns.TurnFailed:
            if plan.dead:
                return "crashed", None
            assert plan.fail_model_at is not None and not plan.last_attempt, f"schedule {path}: a run ended without an outcome"
            return "retry", None
        except Exception:
            if plan.dead:  # whatever the dead process raised on its way out: never seen by anyone
                return "crashed", None
            raise
        finally:
            self.runs.current = None
        if plan.crash_at is not None:  # the run returned, but its process died before the broker had its acknowledgement
            assert plan.crash_at == len(plan.trace) + 1
            return "crashed", None
        reply = result["reply"]
        assert result["turn_id"] == turn_id and reply in answers(self.turns[turn_id]), f"schedule {path}: turn {turn_id} got {reply!r}"
        return "answered", reply

    def walk(self, snapshot: Any, pending: tuple[int, ...], told: tuple[Any, ...], faults: int, path: list[str]) -> int:
        """The number of schedules from the stored rows ``snapshot``, ``pending`` deliveries left per turn, ``told`` the outcome each turn's client has; each walked.

        A turn's run is executed whole once, the stored rows read before each of its effects:
        a crash before effect k leaves what was stored then (every write is committed when it
        returns, and nothing of the process survives it), and a crash after its last effect
        leaves everything but the broker's acknowledgement. A model failure is a run of its own.
        """
        key = (self.key(snapshot), pending, told, faults)
        if key in self.schedules:
            return self.schedules[key]
        if not any(pending):
            self.restore(snapshot)
            self.check_end(path, told)
            self.schedules[key] = 1
            return 1
        total = 0
        for index, turn_id in enumerate(self.turns):
            if not pending[index]:
                continue
            self.restore(snapshot)
            whole = Run(before=self.snapshot)
            outcome, reply = self.run(turn_id, whole, path + [f"{turn_id} whole"])
            after = self.snapshot()
            total += self.delivered(after, pending, told, faults, path + [f"{turn_id} whole"], index, outcome, reply)
            if not path and faults:
                self.check_crashes(snapshot, turn_id, whole, after)
            if not faults:
                continue
            for k, stored in enumerate([*whole.stored, after], 1):
                step = f"{turn_id} crash before effect {k} ({(whole.trace + ['ack'])[k - 1]})"
                total += self.walk(stored, pending, told, faults - 1, path + [step])
            for k, kind in enumerate(whole.trace, 1):
                if kind != "model":
                    continue
                self.restore(snapshot)
                step = f"{turn_id} model fails at effect {k}"
                outcome, _ = self.run(turn_id, Run(fail_model_at=k), path + [step])
                assert outcome == "retry", f"{path + [step]}: {outcome}"
                total += self.walk(self.snapshot(), pending, told, faults - 1, path + [step])
                if self.closing:  # the same failure at the task's last attempt: a turn is closed as failed
                    self.restore(snapshot)
                    step = f"{turn_id} model fails at effect {k}, its last attempt"
                    outcome, reply = self.run(turn_id, Run(fail_model_at=k, last_attempt=True), path + [step])
                    total += self.delivered(self.snapshot(), pending, told, faults - 1, path + [step], index, outcome, reply)
        self.schedules[key] = total
        return total

    def delivered(self, snapshot: Any, pending: tuple[int, ...], told: tuple[Any, ...], faults: int, path: list[str], index: int, outcome: str, reply: Any) -> int:
        """The schedules after a delivery of turn ``index`` that ended with ``outcome``: its client is told it, the same as ever."""
        assert outcome in ("answered", "closed"), f"{path}: {outcome}"
        assert told[index] in (None, (outcome, reply)), f"{path}: told {told[index]!r}, then {(outcome, reply)!r}"  # exactly one outcome
        done = tuple(n - 1 if i == index else n for i, n in enumerate(pending))
        now_told = tuple((outcome, reply) if i == index else t for i, t in enumerate(told))
        return self.walk(snapshot, done, now_told, faults, path)

    def check_crashes(self, snapshot: Any, turn_id: str, whole: Run, after: Any) -> None:
        """A crash is what the walk takes it for: a run made to raise before effect k and to make no effect after stores what was stored before it."""
        for k, stored in enumerate([*whole.stored, after], 1):
            self.restore(snapshot)
            outcome, _ = self.run(turn_id, Run(crash_at=k), [f"{turn_id} crash before effect {k}"])
            assert outcome == "crashed" and self.key(self.snapshot()) == self.key(stored), f"{turn_id} crash before effect {k}"

    def check_end(self, path: list[str], told: tuple[Any, ...]) -> None:
        """Every delivery has run: each turn one outcome, its own answer (or closed as failed), and the history whole turns, valid to send."""
        with PostgresSession(self.dsn, CONVERSATION) as session:
            history = session.messages()
        asked = [text_of(m) for m in history if isinstance(m, UserMessage)]
        assert sorted(asked) == sorted(self.turns.values()), f"{path}: questions stored {asked}"
        outcome = dict(zip(self.turns.values(), told, strict=True))  # question -> what its client was told
        failed = {q for q, (kind, _) in outcome.items() if kind == "closed"}
        finals = dict(zip(asked, check_history(history, asked, failed), strict=True))
        assert all(q in failed or finals[q] in answers(q) for q in asked), f"{path}: {finals}"
        records = {turn_id: (state, text, error) for turn_id, state, text, error in self.conn.execute(
            "SELECT turn_id, state, answer, error FROM yiemagent_turns WHERE session_id = %s", (CONVERSATION,))}
        for turn_id, q in self.turns.items():
            kind, said = outcome[q]
            if kind == "closed":
                assert records[turn_id][0] == "failed" and said.endswith(f"failed: {records[turn_id][2]}"), path
            else:
                assert records[turn_id][:2] == ("answered", finals[q]) and said == finals[q], path


@contextmanager
def walk_of(postgres_server, runs: Runs, count: int, closing: bool) -> Iterator[Walk]:
    """A walk of ``count`` turns in a fresh database of the test run's server."""
    made = PostgresBackend(postgres_server)
    try:
        _turns.prepare(made.target)
        PostgresSession(made.target, CONVERSATION).close()  # the message tables
        walk = Walk(made.target, runs, {f"{CONVERSATION}/{n}": f"q{n}" for n in range(1, count + 1)}, closing=closing)
        try:
            yield walk
        finally:
            walk.conn.close()
    finally:
        made.drop()


# (turns, faults per schedule, model failures at a last attempt among the faults); make test-deep walks three turns
WALKS = [(3, 2, True)] if DEEP else [(2, 2, True)]


@pytest.mark.parametrize(("count", "faults", "closing"), WALKS)
def test_every_schedule_of_a_conversations_turns_with_crashes_and_redeliveries_answers_each_turn_once_with_its_own_answer(postgres_server, runs, count, faults, closing):
    """Every schedule of the turns' runs with up to ``faults`` crashes (before any effect, or before the acknowledgement) or model failures (retried, or at a last attempt): each turn one outcome, its own answer or closed as failed, the history valid."""
    with walk_of(postgres_server, runs, count, closing) as walk:
        schedules = walk.walk(walk.snapshot(), (1,) * count, (None,) * count, faults, path=[])
    print(f"\n{count} turns, {faults} faults{', last attempts among them' if closing else ''}: {schedules} schedules walked; {len(walk.schedules)} states, {walk.executed} runs executed")
    assert schedules >= (1000 if count == 2 else 10000), "the walk walked fewer schedules than these turns and faults make: it misses some"
