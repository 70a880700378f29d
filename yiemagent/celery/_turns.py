"""The turn protocol: one turn of a conversation, answered once however often it is run (docs/scale.md "The task").

``run_turn`` answers a user message in a conversation whose history lives in PostgreSQL
(``PostgresSession``). A broker with late acknowledgement delivers a task again when the
worker running it died, may deliver it twice, and the client sends a turn again when the
broker lost it; the model may fail and the task be retried while the conversation's next
turn runs. Each turn id gets exactly one outcome, its own: its answer, or a failure naming
the cause when the model refuses its question or the task's retries are spent.

The turn record, ``yiemagent_turns``, ties a turn id to its own question and its own
answer by their rows in ``yiemagent_messages``, never by positions in the history. A turn
is in one of five states:

* ``sending``: the turn claims the conversation's next row (after ``after_row``, its last
  row then) for its question;
* ``asked``: its question is row ``question_row``; every row after it is this turn's;
* ``answered``: its final answer is row ``answer_row``, its text ``answer``;
* ``failed``: closed without an answer, ``error`` the cause: the model refused its question
  (an ``LLMError`` that is not retryable, a 400 say) or the task's last attempt failed
  (its retries spent). Its rows stay as they were, what the agent keeps of a failed run
  (decision 11: the error reply is not stored), and the next turn's question follows;
* ``unsent``: it was ``sending`` when its worker died, and its question was never stored.

At most one turn of a conversation is ``sending`` or ``asked`` (a unique index says so):
the open turn, which owns the history's tail. Holding the conversation (decision 17), a run
of any turn first settles the open turn from what is stored (``settle``), finishes it if it
is another turn's (its question is in the history: it is answered before anything else is
asked; or closed as failed, when the model refused it or this run is its task's last
attempt), and only then asks its own question. So the history is a sequence of whole
turns, each question followed by its own answer (a failed turn's by nothing), no turn
waits for ever behind one that cannot be answered, and a run's status says what it found:

* "new": the turn was never seen; its question is sent and answered;
* "stored": its answer is stored (by an earlier run of this turn, or by the task of a later
  turn that finished it first); it is returned, the model is not asked;
* "completed": its question is stored but not its answer (the worker died mid-turn, or the
  model failed): the agent goes on from what was stored — a tool batch cut short has its
  calls answered with error results on load — to one final answer;
* "restarted": the turn was recorded but its question never stored: it is sent now.

A failed turn has no status: every run of it raises ``TurnClosedError`` (a
``RunFailedError``) naming the turn and the cause, the same each time.

Thread safety: ``run_turn`` may run in many threads and processes at once; each run has
its own connections, and every write of a conversation's records and messages is made
while that run's agent holds the conversation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from collections.abc import Callable
from typing import Any, Optional

import psycopg

from yiemagent import (
    AssistantMessage,
    LLMError,
    PostgresSession,
    RunFailedError,
    TextContent,
    UserMessage,
    YiemAgent,
    add_message,
    continue_agent,
    extract_tool_calls,
    shutdown,
    take_response,
)
from yiemagent.history._json import message_from_json

TURNS_LOCK = (0x59454D41, -1)  # (yiemagent's advisory lock class, a key no session id gets): serialises the table's creation
STATUS_OF = {"answered": "stored", "asked": "completed", "unsent": "restarted", "failed": "failed"}  # a settled record's state -> the run's status
_COLUMNS = "turn_id, state, question, after_row, question_row, answer_row, answer, error"


class TurnFailed(RuntimeError):
    """The agent's run for a turn ended without a stored final reply (an LLM error, say); running the task again completes the turn."""


class TurnClosedError(RunFailedError):
    """The turn was closed as failed (docs/scale.md "The turn record"): no run of it will answer it.

    A ``RunFailedError`` whose ``reply`` is an ``AssistantMessage`` with ``stop_reason``
    "error" and the cause (the turn, the conversation, why) as its ``error_message``. Its
    ``args``, and so its message, are that cause alone: Celery's result backend, which
    stores an exception as its class and its ``args`` (JSON), rebuilds the same error in
    the client. Not a ``TurnFailed``, so Celery does not retry it.
    """

    def __init__(self, cause: str) -> None:
        super().__init__(AssistantMessage([], stop_reason="error", error_message=cause))
        self.args = (cause,)

    def __reduce__(self) -> Any:
        return (type(self), self.args)


class TurnRecordError(RuntimeError):
    """The stored history does not hold what a turn's record says (something other than ``run_turn`` wrote the conversation)."""


def prepare(dsn: str) -> None:
    """Create the turns table (idempotent; safe from many processes at once).

    Raises:
        TurnRecordError: a ``yiemagent_turns`` table of another shape is there (an older
            example's, which recorded positions, or had no ``error`` column): drop or rename it.
    """
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", TURNS_LOCK)
        conn.execute(
            "CREATE TABLE IF NOT EXISTS yiemagent_turns ("
            " session_id TEXT NOT NULL, turn_id TEXT NOT NULL,"
            " state TEXT NOT NULL CHECK (state IN ('sending', 'asked', 'answered', 'failed', 'unsent')),"
            " question TEXT NOT NULL, after_row BIGINT, question_row BIGINT, answer_row BIGINT, answer TEXT, error TEXT,"
            " PRIMARY KEY (session_id, turn_id))"
        )
        try:
            with conn.transaction():
                conn.execute(f"SELECT {_COLUMNS} FROM yiemagent_turns LIMIT 0")
        except psycopg.errors.UndefinedColumn as exc:
            raise TurnRecordError(f"the table yiemagent_turns has another shape than this service's ({exc}); drop or rename it") from exc
        conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS yiemagent_turns_open ON yiemagent_turns (session_id) WHERE state IN ('sending', 'asked')")


def text_of(message: Any) -> str:
    """The text blocks of a message, joined."""
    return "".join(block.text for block in message.content if isinstance(block, TextContent))


def is_final(message: Any) -> bool:
    """Whether ``message`` is a turn's answer: a reply that calls no tool and ended normally."""
    return isinstance(message, AssistantMessage) and message.stop_reason in ("stop", None) and not extract_tool_calls(message)[0]


@dataclass
class Turn:
    """One row of ``yiemagent_turns`` (the module's docstring says what each state means)."""

    turn_id: str
    state: str
    question: str
    after_row: Optional[int]
    question_row: Optional[int]
    answer_row: Optional[int]
    answer: Optional[str]
    error: Optional[str] = None

    def failure(self, conversation_id: str) -> TurnClosedError:
        """The error every run of a ``failed`` turn raises: the same text each time."""
        return TurnClosedError(f"turn {self.turn_id!r} of {conversation_id!r} failed: {self.error}")


class Turns:
    """The turn records of one conversation, read and written while a run's agent holds it (decision 17).

    Thread safety: one per run, used by that run's thread only.
    """

    def __init__(self, conn: "psycopg.Connection[Any]", conversation_id: str) -> None:
        self.conn = conn
        self.conversation_id = conversation_id

    def get(self, turn_id: str) -> Optional[Turn]:
        row = self.conn.execute(f"SELECT {_COLUMNS} FROM yiemagent_turns WHERE session_id = %s AND turn_id = %s", (self.conversation_id, turn_id)).fetchone()
        return Turn(*row) if row is not None else None

    def open(self) -> Optional[Turn]:
        """The turn that owns the history's tail (``sending`` or ``asked``), if any."""
        row = self.conn.execute(
            f"SELECT {_COLUMNS} FROM yiemagent_turns WHERE session_id = %s AND state IN ('sending', 'asked')", (self.conversation_id,)
        ).fetchone()
        return Turn(*row) if row is not None else None

    def _row(self, after: int, last: bool) -> Optional[tuple[int, Any]]:
        """The first (or the last) stored message after row ``after``, with its row id."""
        row = self.conn.execute(
            "SELECT id, body FROM yiemagent_messages WHERE session_id = %s AND id > %s ORDER BY id " + ("DESC" if last else "ASC") + " LIMIT 1",
            (self.conversation_id, after),
        ).fetchone()
        if row is None:
            return None
        return row[0], message_from_json(row[1], f"session {self.conversation_id!r}: row {row[0]}")

    def _set(self, turn: Turn, **values: Any) -> Turn:
        names = ", ".join(f"{name} = %s" for name in values)
        self.conn.execute(
            f"UPDATE yiemagent_turns SET {names} WHERE session_id = %s AND turn_id = %s", (*values.values(), self.conversation_id, turn.turn_id)
        )
        return replace(turn, **values)

    def settle(self, turn: Turn) -> Turn:
        """``turn`` brought up to date with what is stored: a question or an answer stored since it was written is recorded.

        Raises:
            TurnRecordError: the row after a ``sending`` turn's ``after_row`` is not its question.
        """
        if turn.state == "sending":
            assert turn.after_row is not None
            first = self._row(turn.after_row, last=False)
            if first is None:
                return self._set(turn, state="unsent", after_row=None)
            row, message = first
            if not (isinstance(message, UserMessage) and text_of(message) == turn.question):
                raise TurnRecordError(
                    f"turn {turn.turn_id!r} of {self.conversation_id!r} claimed the row after {turn.after_row} for its question, but row {row} is not it"
                )
            turn = self._set(turn, state="asked", question_row=row)
        if turn.state == "asked":
            assert turn.question_row is not None
            last = self._row(turn.question_row, last=True)
            if last is not None and is_final(last[1]):
                return self._set(turn, state="answered", answer_row=last[0], answer=text_of(last[1]))
        return turn

    def fail(self, turn: Turn, cause: str) -> Turn:
        """Close ``turn`` (``asked``) as ``failed`` with ``cause``: one statement, so a crash leaves it asked or failed, nothing between."""
        return self._set(turn, state="failed", error=cause)

    def claim(self, turn_id: str, text: str) -> None:
        """Record ``turn_id`` as ``sending``: the conversation's next row is its question (a new turn, or an ``unsent`` one)."""
        self.conn.execute(
            "INSERT INTO yiemagent_turns (session_id, turn_id, state, question, after_row)"
            " SELECT %s, %s, 'sending', %s, COALESCE(MAX(id), 0) FROM yiemagent_messages WHERE session_id = %s"
            " ON CONFLICT (session_id, turn_id) DO UPDATE SET state = 'sending', after_row = EXCLUDED.after_row WHERE yiemagent_turns.state = 'unsent'",
            (self.conversation_id, turn_id, text, self.conversation_id),
        )


class Model:
    """A run's ``llm_call``, keeping the ``LLMError`` its last call raised: whether a retry can mend the failure (docs/scale.md).

    Every other attribute is the wrapped call's (its ``model`` and ``provider`` name the
    model in the agent's events). Thread safety: called by the agent's run thread; read by
    the run's thread once ``take_response`` has handed it the run's response, after the call.
    """

    def __init__(self, llm_call: Callable[[dict[str, Any]], AssistantMessage]) -> None:
        self.llm_call = llm_call
        self.failure: Optional[LLMError] = None

    def __getattr__(self, name: str) -> Any:  # asked only for names the instance lacks
        if name == "llm_call":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.llm_call, name)

    def __call__(self, formatted: dict[str, Any]) -> AssistantMessage:
        self.failure = None
        try:
            return self.llm_call(formatted)
        except LLMError as exc:
            self.failure = exc
            raise

    def refused(self) -> bool:
        """Whether the last call failed in a way no retry mends (an ``LLMError`` with ``retryable`` False: a 400, say)."""
        return self.failure is not None and not self.failure.retryable


def finish(agent: YiemAgent, turns: Turns, turn: Turn, reply_timeout: float, model: Model, last_attempt: bool) -> str:
    """Run the agent on from the stored history to ``turn``'s final answer; record it and return its text.

    A run that ends without a final reply closes the turn as failed when the model refused
    it (``model.refused()``) or when this is the last attempt (``last_attempt``); its rows
    stay as they are (decision 11: the agent stores no error reply).

    Raises:
        TurnFailed: the run ended without a final reply, or the reply was not stored; a new
            run may answer the turn.
        TurnClosedError: the turn was closed as failed now; no run will answer it.
    """
    continue_agent(agent)
    reply = take_response(agent, timeout=reply_timeout)
    if not is_final(reply):
        ended = f"stop_reason {reply.stop_reason!r}: {reply.error_message}"
        if model.refused() or last_attempt:
            why = "the model refused it, not retryable" if model.refused() else "its last attempt failed"
            raise turns.fail(turn, f"{why}: {ended}").failure(turns.conversation_id)
        raise TurnFailed(f"turn {turn.turn_id!r} of {turns.conversation_id!r} ended with {ended}")
    turn = turns.settle(turn)
    if turn.state != "answered":
        raise TurnFailed(f"turn {turn.turn_id!r} of {turns.conversation_id!r} has a final reply that was not stored")
    assert turn.answer is not None
    return turn.answer


def run_turn(
    dsn: str,
    conversation_id: str,
    turn_id: str,
    text: str,
    make_agent: Callable[[PostgresSession], YiemAgent],
    *,
    hold_timeout: float = 60.0,
    reply_timeout: float = 120.0,
    last_attempt: bool = False,
) -> dict[str, Any]:
    """Answer ``text`` as turn ``turn_id`` of ``conversation_id``, once, however often it is run.

    ``make_agent(session)`` builds the turn's agent on ``PostgresSession(dsn,
    conversation_id, hold_timeout=hold_timeout)`` (its model, tools and prompt are the
    caller's); its ``llm_call`` is wrapped (``Model``) to tell a refusal from a failure a
    retry may mend, and it is shut down when the run ends.

    Returns ``{"conversation_id", "turn_id", "reply", "status"}``; status is "new",
    "stored", "completed" or "restarted" (the module's docstring says when). The reply is
    always the answer to this turn's own question.

    ``last_attempt``: no run of this task comes after this one (Celery's retries are
    spent): a turn this run cannot answer, its own or the open turn it answers first, is
    closed as failed rather than left for a run that will not come.

    Raises:
        SessionInUseError: another run held the conversation for longer than ``hold_timeout``.
        TurnFailed: the run ended without a final reply, this turn's or that of the
            conversation's open turn, which is answered first; nothing of it is lost, and a
            new run of the task completes the turn.
        TurnClosedError: this turn is closed as failed (now: the model refused it, or this
            was its last attempt; or by an earlier run): the same error at every run of it.
        ValueError: ``turn_id`` was recorded with another question.
        TypeError: ``make_agent`` returned something else than a ``YiemAgent`` on the session.
        TurnRecordError: the history does not hold what the records say.
        psycopg.Error: the database could not be reached.
    """
    with PostgresSession(dsn, conversation_id, hold_timeout=hold_timeout) as session:
        # the agent takes the session's hold (waiting up to hold_timeout) and gives it back at shutdown (decision 17)
        agent = make_agent(session)
        try:
            if not isinstance(agent, YiemAgent) or agent.session is not session:
                raise TypeError(f"make_agent(session) must return a YiemAgent built on that session, not {type(agent).__name__}")
            model = Model(agent.llm_call)  # tells a failure no retry mends from one a retry may
            agent.llm_call = model
            with psycopg.connect(dsn, autocommit=True) as conn:
                turns = Turns(conn, conversation_id)
                own = turns.get(turn_id)
                if own is not None and own.question != text:
                    raise ValueError(f"turn {turn_id!r} of {conversation_id!r} was asked {own.question!r}, not {text!r}")
                if own is None or own.state not in ("answered", "failed"):
                    waiting = turns.open()
                    if waiting is not None:
                        waiting = turns.settle(waiting)
                        if waiting.state == "asked" and waiting.turn_id != turn_id:  # its question is in the history: answered first
                            try:
                                finish(agent, turns, waiting, reply_timeout, model, last_attempt)
                            except TurnClosedError:  # closed as failed: its own task's runs say so; this turn goes on
                                pass
                            except TurnFailed as exc:
                                raise TurnFailed(f"turn {turn_id!r} is asked after turn {waiting.turn_id!r}, which has no answer yet: {exc}") from exc
                    own = turns.get(turn_id)
                status = "new" if own is None else STATUS_OF[own.state]
                if own is not None and status == "failed":
                    raise own.failure(conversation_id)
                if own is None or status == "restarted":
                    turns.claim(turn_id, text)
                    add_message(agent, UserMessage([TextContent(text)]))  # stored when it returns
                    claimed = turns.get(turn_id)
                    assert claimed is not None
                    own = turns.settle(claimed)  # now "asked"
                reply = own.answer if status == "stored" else finish(agent, turns, own, reply_timeout, model, last_attempt)
                return {"conversation_id": conversation_id, "turn_id": turn_id, "reply": reply, "status": status}
        finally:
            if isinstance(agent, YiemAgent):
                shutdown(agent, timeout=reply_timeout)
