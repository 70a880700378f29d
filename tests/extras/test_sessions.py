"""Sessions and YiemAgent(session=...): order, isolation, crash safety with real processes, one agent per session, repair on load, the CLI.

A test taking ``backend`` (or ``session``) runs against SQLiteSession and PostgresSession
(tests/support/session_backends.py): one contract, docs/sessions.md and docs/scale.md.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest

from helpers import ROOT, WAIT, make_tool, text_result
from localserver import LocalServer, Reply
from yiemagent import (
    AgentClosedError,
    AgentTool,
    AssistantMessage,
    LLMUsage,
    MessageFormatError,
    SessionInUseError,
    SQLiteSession,
    TextContent,
    ToolResultMessage,
    UserMessage,
    YiemAgent,
    add_message,
    ask,
    continue_agent,
    follow_up,
    load_history,
    run_agent,
    save_history,
    shutdown,
    take_response,
)
from yiemagent.history import LOST_RESULT_MESSAGE, complete_tool_calls, hold_session, release_session
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.run import HistoryWriter
from yiemagent.types import AgentState
from session_backends import backend, postgres_server, session  # noqa: F401  fixtures: each backend in turn



def user(text: str) -> UserMessage:
    return UserMessage([TextContent(text)])


# --- a session on its own ------------------------------------------------------------


def test_messages_come_back_in_the_order_appended(session):
    """append then messages(): equal messages, in order, every kind."""
    stored = [user("a"), tool_call_reply(("c1", "t", {"x": 1})), ToolResultMessage("c1", "t", [TextContent("r")], {"n": (1, 2)}), user("b")]
    for message in stored:
        session.append(message)
    assert session.messages() == stored


def test_the_database_is_in_wal_mode_with_one_row_per_message(tmp_path):
    """WAL journal mode; each message is one row of the session."""
    session = SQLiteSession(tmp_path / "s.db", "main")
    session.append(user("a"))
    session.append(user("b"))
    session.close()
    with sqlite3.connect(session.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT COUNT(*) FROM yiemagent_messages WHERE session_id = 'main'").fetchone()[0] == 2


def test_a_row_holds_the_message_as_compact_utf8_json(tmp_path):
    """The body is the message's JSON form without a space between tokens, non-ASCII text as itself."""
    with SQLiteSession(tmp_path / "s.db", "main") as session:
        session.append(UserMessage([TextContent("naïve, ✓: yes")]))
    with sqlite3.connect(tmp_path / "s.db") as conn:
        [body] = conn.execute("SELECT body FROM yiemagent_messages").fetchone()
    assert body == json.dumps(json.loads(body), ensure_ascii=False, separators=(",", ":"))
    assert body.startswith('{"role":"user","content":"naïve, ✓: yes"')  # one text block: its text (docs/sessions.md "Rows and their mark")


def test_sessions_sharing_a_file_are_isolated_and_clear_touches_one(backend):
    """Two session ids in one file (one database): each sees its own messages; clear() empties only its own."""
    with backend.open("a") as a, backend.open("b") as b:
        a.append(user("a1"))
        b.append(user("b1"))
        a.append(user("a2"))
        assert [m.content[0].text for m in a.messages()] == ["a1", "a2"]
        a.clear()
        assert a.messages() == [] and [m.content[0].text for m in b.messages()] == ["b1"]


def test_a_stored_message_survives_reopening(backend):
    """What one session appended, a new one on the same file (database) reads."""
    kept = user("kept")
    with backend.open("x") as first:
        first.append(kept)
    with backend.open("x") as second:
        assert second.messages() == [kept]


def test_a_bad_row_raises_message_format_error_naming_the_session_and_row(backend, session):
    """A row that is not a message: MessageFormatError naming the session and the row."""
    session.append(user("fine"))
    backend.insert_raw("main", '{"role": "robot"}')
    with pytest.raises(MessageFormatError, match=rf"session 'main' in {backend.where}: row 2: has role 'robot'"):
        session.messages()


def test_a_closed_session_refuses_calls(session):
    """After close() every call raises ValueError; close() again does nothing."""
    session.close()
    session.close()
    with pytest.raises(ValueError, match="closed"):
        session.append(user("x"))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"session_id": ""}, "session_id must be a non-empty string, got ''"),
        ({"session_id": "s", "synchronous": "SOMETIMES"}, "synchronous must be one of OFF, NORMAL, FULL, EXTRA, got 'SOMETIMES'"),
    ],
)
def test_bad_arguments_are_refused(tmp_path, kwargs, match):
    """An empty session id or an unknown synchronous level raises ValueError saying what is allowed."""
    with pytest.raises(ValueError, match=match):
        SQLiteSession(tmp_path / "s.db", **kwargs)


@pytest.mark.parametrize(
    "session_id, problem",
    [
        ("s\ud800", r"session_id must be text UTF-8 can encode, got 's\\ud800' \(a lone surrogate at position 1\)"),
        ("\udc00s", r"session_id must be text UTF-8 can encode, got '\\udc00s' \(a lone surrogate at position 0\)"),
        ("a\x00b", r"session_id must not hold a NUL character, got 'a\\x00b' \(at position 1\)"),
        ("\x00a\x00", r"session_id must not hold a NUL character, got '\\x00a\\x00' \(at position 0\)"),
    ],
    ids=["high-surrogate", "low-surrogate", "nul", "nul-first"],
)
def test_an_id_no_backend_can_hold_is_refused_when_the_session_is_made(backend, session_id, problem):
    """A session id holding a lone surrogate or NUL is refused by the constructor of SQLite and PostgreSQL sessions alike, with ValueError naming the problem and the first position it is at (docs/sessions.md "Session ids")."""
    with pytest.raises(ValueError, match=f"^{problem}$"):
        backend.open(session_id)


def test_an_append_waits_timeout_seconds_for_another_writer_then_raises(tmp_path):
    """timeout= is how long a write waits for another connection's lock: 0.2 s, then sqlite3.OperationalError (SQLite's own default would wait 5 s)."""
    with SQLiteSession(tmp_path / "s.db", "s", timeout=0.2) as s:
        other = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # holds the write lock
            started = time.monotonic()
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                s.append(user("x"))
            assert time.monotonic() - started < 3
        finally:
            other.close()


@pytest.mark.parametrize("level, value", [("FULL", 2), ("NORMAL", 1), ("off", 0)])
def test_synchronous_sets_the_durability_of_the_connection(tmp_path, level, value):
    """synchronous= becomes the connection's PRAGMA synchronous (FULL by default: each commit fsynced)."""
    with SQLiteSession(tmp_path / "s.db", "s", synchronous=level) as s:
        assert s._conn.execute("PRAGMA synchronous").fetchone()[0] == value
    with SQLiteSession(tmp_path / "s.db", "s") as s:
        assert s._conn.execute("PRAGMA synchronous").fetchone()[0] == 2


def test_a_database_of_another_schema_version_is_refused(tmp_path):
    """A file whose user_version is not this schema's raises MessageFormatError naming the version."""
    SQLiteSession(tmp_path / "s.db", "s").close()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.execute("PRAGMA user_version=7")
    with pytest.raises(MessageFormatError, match="schema version 7"):
        SQLiteSession(tmp_path / "s.db", "s")


def test_threads_appending_to_one_session_lose_nothing(session):
    """Eight threads appending at once through one SQLiteSession: every message stored, each thread's in its order."""
    barrier = threading.Barrier(8)

    def append(n):
        barrier.wait(WAIT)
        for i in range(20):
            session.append(user(f"{n}-{i}"))

    threads = [threading.Thread(target=append, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 3)
    texts = [m.content[0].text for m in session.messages()]
    assert len(texts) == 160
    for n in range(8):
        assert [t for t in texts if t.startswith(f"{n}-")] == [f"{n}-{i}" for i in range(20)]


APPENDER = """
import sys, time
from yiemagent import PostgresSession, SQLiteSession, TextContent, UserMessage
session = {"sqlite": SQLiteSession, "postgres": PostgresSession}[sys.argv[4]](sys.argv[1], sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
started = time.monotonic()   # CLOCK_MONOTONIC: one clock for every process on the machine
for i in range(int(sys.argv[3])):
    session.append(UserMessage([TextContent(f"{sys.argv[2]}-{i}")]))
print(started, time.monotonic(), flush=True)
"""


def test_two_processes_appending_to_two_sessions_in_one_file_lose_nothing(backend):
    """Two real processes append 150 messages each, at the same time, to two sessions of one file (database): all there, in order."""
    db = backend.target
    backend.open("setup").close()  # the file and its table exist before the race starts
    procs = [
        subprocess.Popen([sys.executable, "-c", APPENDER, db, name, "150", backend.name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for name in ("p1", "p2")
    ]
    try:
        assert [p.stdout.readline().strip() for p in procs] == ["ready", "ready"]
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        windows = [tuple(map(float, p.stdout.readline().split())) for p in procs]
        assert [p.wait(timeout=120) for p in procs] == [0, 0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for name in ("p1", "p2"):
        with backend.open(name) as s:
            assert [m.content[0].text for m in s.messages()] == [f"{name}-{i}" for i in range(150)]
    (start1, end1), (start2, end2) = windows  # the writers really competed: each began before the other was done
    assert start1 < end2 and start2 < end1


# --- the agent with a session -------------------------------------------------------------


def test_each_message_is_stored_before_the_next_llm_round_sees_it(agents, backend):
    """At each LLM call, another connection to the file (database) already reads every message that call is sent."""
    reader = backend.open("main")
    seen = []

    def looking(reply):
        def answer(formatted):
            seen.append(([m.role for m in reader.messages()], [m["role"] for m in formatted["messages"]]))
            return reply

        return answer

    llm = ScriptedLLM([looking(tool_call_reply(("c1", "echo", {}), ("c2", "echo", {}))), looking(AssistantMessage([TextContent("ok")]))])
    agent = agents(llm, [make_tool("echo")], session=backend.open("main"))
    run_agent(agent, "go")
    take_response(agent, timeout=WAIT)
    assert seen == [(["user"], ["system", "user"]), (["user", "assistant", "tool", "tool"], ["system", "user", "assistant", "tool", "tool"])]
    assert reader.messages() == agent.history()
    reader.close()


LONE = "high \ud800, low \udfff, reversed \udc00\ud800, fine é😀"
LONE_MENDED = "high \ufffd, low \ufffd, reversed \ufffd\ufffd, fine é😀"
USER_ENTRIES = {
    "run_agent-str": lambda agent: run_agent(agent, LONE),
    "run_agent-dict": lambda agent: run_agent(agent, {"role": "user", "content": LONE}),
    "run_agent-dict-parts": lambda agent: run_agent(agent, {"role": "user", "content": [{"type": "text", "text": LONE}, {"type": "input_audio", "note": LONE}]}),
    "run_agent-UserMessage": lambda agent: run_agent(agent, UserMessage([TextContent(LONE)])),
    "follow_up-str": lambda agent: follow_up(agent, LONE),
    "ask-str": lambda agent: ask(agent, LONE, timeout=WAIT),
    "add_message": lambda agent: add_message(agent, UserMessage(LONE)),
}


@pytest.mark.parametrize("entry", list(USER_ENTRIES))
def test_a_user_text_with_lone_surrogates_is_the_same_text_in_memory_sent_and_stored(backend, agents, entry):
    """A lone surrogate in a user message, however it is sent, becomes U+FFFD once as it enters the history: the history, the request and what the session loads hold the same text (decision 15, docs/failures.md)."""
    llm = ScriptedLLM(["ok"])
    agent = agents(llm, session=backend.open("s"))
    USER_ENTRIES[entry](agent)
    if entry not in ("ask-str", "add_message"):  # those two return once the message is in the history
        take_response(agent, timeout=WAIT)
    held = agent.history()[0]
    assert held.content[0].text == LONE_MENDED
    with backend.open("s") as reader:
        assert reader.messages()[0] == held
    if entry != "add_message":
        [sent] = [m for m in llm.requests[0]["messages"] if m["role"] == "user"]
        text = sent["content"] if isinstance(sent["content"], str) else sent["content"][0]["text"]
        assert text == LONE_MENDED
    if entry == "run_agent-dict-parts":
        assert held.content[1] == {"type": "input_audio", "note": LONE_MENDED}


def test_an_agent_starts_from_the_session_and_goes_on_storing(agents, backend):
    """A new agent on a used session sends the stored conversation, then stores its own messages after it."""
    first = agents(ScriptedLLM(["one"]), session=backend.open("c"))
    run_agent(first, "hello")
    take_response(first, timeout=WAIT)
    shutdown(first, timeout=WAIT)  # one agent holds a session at a time (decision 17)
    llm = ScriptedLLM(["two"])
    shutdown(first, timeout=WAIT)  # one agent holds a session at a time (decision 17)
    second = agents(llm, session=backend.open("c"))
    assert second.history() == first.history()
    run_agent(second, "again")
    take_response(second, timeout=WAIT)
    assert [(m["role"], m["content"]) for m in llm.requests[0]["messages"][1:]] == [("user", "hello"), ("assistant", "one"), ("user", "again")]
    with backend.open("c") as s:
        assert [m.role for m in s.messages()] == ["user", "assistant", "user", "assistant"]


def test_a_gap_inside_a_session_is_mended_in_memory_only(agents, session):
    """An unanswered call followed by later messages (a session written by other means) is answered in memory at each load; the session is not rewritten."""
    stored = [user("a"), tool_call_reply(("c1", "echo", {})), user("b")]
    for message in stored:
        session.append(message)
    agent = agents(ScriptedLLM([]), session=session)
    assert agent.session is session
    assert [(m.role, getattr(m, "tool_call_id", None)) for m in agent.history()] == [("user", None), ("assistant", None), ("tool", "c1"), ("user", None)]
    assert session.messages() == stored
    shutdown(agent, timeout=WAIT)
    again = agents(ScriptedLLM([]), session=session)
    assert again.history() == agent.history()


def test_results_a_cut_batch_lacks_are_stored_in_the_session_when_an_agent_starts(agents, session):
    """A session whose last batch has a result for one call of four: the agent answers the other three with error results and stores exactly those, after the stored messages; a gap earlier stays in memory only."""
    stored = [
        tool_call_reply(("g", "echo", {})),
        user("a gap: g has no result"),
        tool_call_reply(("c0", "echo", {}), ("c1", "echo", {}), ("c2", "echo", {}), ("c3", "echo", {})),
        ToolResultMessage("c1", "echo", [TextContent("done")]),
    ]
    for message in stored:
        session.append(message)
    agent = agents(ScriptedLLM([]), session=session)
    history = agent.history()
    assert [(m.role, getattr(m, "tool_call_id", None), getattr(m, "is_error", None)) for m in history] == [
        ("assistant", None, None), ("tool", "g", True), ("user", None, None),
        ("assistant", None, None), ("tool", "c1", False), ("tool", "c0", True), ("tool", "c2", True), ("tool", "c3", True),
    ]
    assert session.messages() == stored + history[5:]


def test_session_and_messages_together_are_refused(tmp_path):
    """session= with messages= raises ValueError: the history would have two sources."""
    from yiemagent import YiemAgent

    with SQLiteSession(tmp_path / "s.db", "c") as s, pytest.raises(ValueError) as raised:
        YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, session=s, messages=[])
    assert str(raised.value) == "give either session= or messages=, not both: with a session the history comes from it"


def test_add_message_while_idle_is_stored_in_the_session(agents, session):
    """add_message on an idle agent stores the message in its session at once."""
    agent = agents(ScriptedLLM([]), session=session)
    add_message(agent, user("handed back"))
    assert [m.content[0].text for m in session.messages()] == ["handed back"]


class FailingSession:
    """A session whose disk is full after ``room`` messages (any object with messages/append/clear is a session)."""

    def __init__(self, room: int) -> None:
        self.room, self.stored = room, []

    def messages(self):
        return list(self.stored)

    def append(self, message):
        if len(self.stored) >= self.room:
            raise OSError(28, "No space left on device")
        self.stored.append(message)

    def clear(self):
        self.stored.clear()

    def __repr__(self) -> str:
        return "FailingSession()"


def test_a_session_that_cannot_store_ends_the_run_naming_it_and_the_history_stays_valid(agents, caplog):
    """A failed store: the run ends with stop_reason "error" naming the session and the cause before another LLM round
    (and the failure is an ERROR on yiemagent.sessions, with its traceback); the in-memory history stays whole."""
    llm = ScriptedLLM([tool_call_reply(("c1", "echo", {})), "never sent"])
    agent = agents(llm, [make_tool("echo")], session=FailingSession(room=2))
    with caplog.at_level(logging.ERROR, logger="yiemagent.sessions"):
        run_agent(agent, "go")
        response = take_response(agent, timeout=WAIT)
    why = "the session FailingSession() could not store a tool message: OSError: [Errno 28] No space left on device"
    assert (response.stop_reason, response.error_message) == ("error", why)
    [record] = [r for r in caplog.records if r.name == "yiemagent.sessions"]
    assert (record.levelname, record.getMessage(), record.exc_info[0]) == ("ERROR", why, OSError)
    assert len(llm.requests) == 1
    assert [m.role for m in agent.history()] == ["user", "assistant", "tool"] and complete_tool_calls(agent.history())[1] == []


class _RoleLess(UserMessage):
    """A user message whose ``role`` cannot be read (a hostile subclass)."""

    def __getattribute__(self, name):
        if name == "role":
            raise AttributeError("role")
        return super().__getattribute__(name)


def test_a_failed_store_of_a_message_whose_role_cannot_be_read_is_still_reported():
    """HistoryWriter.append never raises: the failure is recorded with "?" for the role it could not read."""
    writer = HistoryWriter(AgentState(), FailingSession(room=0))
    writer.append(_RoleLess([TextContent("hi")]))
    assert writer.take_failure() == "the session FailingSession() could not store a ? message: OSError: [Errno 28] No space left on device"
    assert len(writer.state.messages) == 1


def test_add_message_while_idle_raises_what_the_session_raised_and_adds_nothing(agents):
    """Idle add_message with a failing session: the error reaches the caller and the history is unchanged."""
    agent = agents(ScriptedLLM([]), session=FailingSession(room=0))
    with pytest.raises(OSError, match="No space left"):
        add_message(agent, user("x"))
    assert agent.history() == []


CRASHER = """
import sys, threading
from yiemagent import AgentTool, AgentToolResult, PostgresSession, SQLiteSession, TextContent, YiemAgent, register_tool, run_agent, take_response
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply

def quick(tool_call_id, args, signal, on_partial_result):
    return AgentToolResult([TextContent("quick done")])

def block(tool_call_id, args, signal, on_partial_result):
    print("ready", flush=True)   # the parent kills us now, inside the batch
    threading.Event().wait()

llm = ScriptedLLM([
    tool_call_reply(("c0", "quick", {})), "first answer",
    tool_call_reply(("c1", "quick", {}), ("c2", "block", {}), ("c3", "quick", {})),
])
Session = {"sqlite": SQLiteSession, "postgres": PostgresSession}[sys.argv[2]]
agent = YiemAgent(llm_call=llm, agent_event_sink=None, session=Session(sys.argv[1], "crash"), builtin_tools=False)
for name, fn in (("quick", quick), ("block", block)):
    register_tool(agent.tool_store, AgentTool(name, name, name, {"type": "object"}, fn))
run_agent(agent, "first")
take_response(agent, timeout=30)
run_agent(agent, "second")
threading.Event().wait()
"""


def test_a_process_killed_mid_batch_leaves_a_session_a_new_agent_continues_from(agents, backend):
    """SIGKILL inside a tool: a new agent starts from every stored message, the batch's calls answered with error results (stored too), and the history is valid to send."""
    db = backend.target
    child = subprocess.Popen([sys.executable, "-c", CRASHER, db, backend.name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killer = threading.Timer(60, child.kill)  # a child that never gets ready must not hang the suite
    killer.start()
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=WAIT) == -signal.SIGKILL
    finally:
        killer.cancel()
        child.stdout.close()
        child.stderr.close()
    with backend.open("crash") as raw:
        stored = raw.messages()
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant", "user", "assistant"]  # the batch's results were not stored

    llm = ScriptedLLM(["recovered"])
    agent = agents(llm, [make_tool("quick"), make_tool("block")], session=backend.open("crash"))
    history = agent.history()
    assert history[:6] == stored
    assert [(m.tool_call_id, m.is_error, m.content[0].text) for m in history[6:]] == [(c, True, LOST_RESULT_MESSAGE) for c in ("c1", "c2", "c3")]
    with backend.open("crash") as raw:
        assert raw.messages() == history  # the mended results are stored: the session is whole again
    continue_agent(agent)
    assert take_response(agent, timeout=WAIT).content[0].text == "recovered"
    sent = llm.requests[0]["messages"]
    calls = [c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert calls == ["c0", "c1", "c2", "c3"] and [m["tool_call_id"] for m in sent if m["role"] == "tool"] == calls


# --- one agent holds a session at a time (decision 17) -------------------------------------


def held(db, session_id="s", llm=None):
    """An agent holding ``session_id`` in ``db`` (no tools)."""
    return YiemAgent(llm_call=llm or ScriptedLLM([]), agent_event_sink=None, session=SQLiteSession(db, session_id), builtin_tools=False)


def test_a_second_agent_on_a_held_session_id_is_refused_at_once(tmp_path):
    """Another SQLiteSession on the same file and id, in the same process: SessionInUseError naming the session and the holder; another id in the file is free."""
    db = tmp_path / "s.db"
    with held(db, "s"):
        with pytest.raises(SessionInUseError, match=rf"session 's' in '.*s\.db' is held by another agent \(process {os.getpid()}\)"):
            held(db, "s")
        with held(db, "other") as other:
            assert other.history() == []


def test_one_database_through_a_symlink_and_its_real_path_is_one_session(tmp_path):
    """A database opened through a symlink and through its real path is one session: while an agent holds it through one, an agent on the other gets SessionInUseError (docs/sessions.md: the lock is beside the real path)."""
    real = tmp_path / "real" / "s.db"
    real.parent.mkdir()
    link = tmp_path / "link.db"
    link.symlink_to(real)
    with held(link, "s"):
        with pytest.raises(SessionInUseError, match=rf"session 's' in {str(real)!r} is held by another agent \(process {os.getpid()}\)"):
            held(real, "s")
    with held(real, "s"):
        with pytest.raises(SessionInUseError, match=rf"session 's' in {str(link)!r} is held by another agent"):
            held(link, "s")
    assert not (tmp_path / "link.db-locks").exists()


def test_closing_a_held_session_ends_its_hold_and_the_next_agent_gets_the_id(backend, agents):
    """close() of a session that holds its id releases the hold: an agent refused while it held starts once it is closed."""
    first = backend.open("s")
    first.acquire()
    with backend.open("s") as refused, pytest.raises(SessionInUseError):
        agents(ScriptedLLM([]), session=refused)
    first.close()
    second = agents(ScriptedLLM(["ok"]), session=backend.open("s"))
    run_agent(second, "hi")
    assert take_response(second, timeout=WAIT).text == "ok"


def test_the_hold_is_a_lock_file_named_by_the_session_ids_hash_beside_the_database(tmp_path):
    """docs/sessions.md: the hold locks <database>-locks/<32 hex digits of SHA-256(session id)>.lock, which holds the holder's process id."""
    db = tmp_path / "s.db"
    path = tmp_path / "s.db-locks" / (hashlib.sha256("ada".encode("utf-8")).hexdigest()[:32] + ".lock")
    with held(db, "ada"):
        assert os.listdir(tmp_path / "s.db-locks") == [path.name]
        assert path.read_text() == f"{os.getpid()}\n"
    assert not path.exists()


def test_a_holder_that_wrote_no_process_id_is_refused_without_naming_one(tmp_path):
    """A lock file locked by a holder that has not written its id yet: SessionInUseError without a "(process ...)" part."""
    db = tmp_path / "s.db"
    SQLiteSession(db, "s").close()
    directory = tmp_path / "s.db-locks"
    directory.mkdir()
    with open(directory / (hashlib.sha256(b"s").hexdigest()[:32] + ".lock"), "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with SQLiteSession(db, "s") as session, pytest.raises(SessionInUseError) as info:
            session.acquire()
    assert str(info.value) == f"session 's' in {str(db)!r} is held by another agent: one agent holds a session at a time"


@pytest.mark.parametrize(
    "written, named",
    [(b"4242\n", " (process 4242)"), (b"4242" + b" " * 28 + b"more", " (process 4242)"), (b"junk\n", ""), (b"\xff\xfe\n", "")],
    ids=["an-id", "an-id-then-more-after-32-bytes", "not-an-id", "not-ascii"],
)
def test_the_refusal_names_the_id_the_holder_wrote_and_nothing_else(tmp_path, written, named):
    """The holder's lock file is read for its process id (its first 32 bytes, digits only): anything else is not named, and never raises."""
    db = tmp_path / "s.db"
    SQLiteSession(db, "s").close()
    directory = tmp_path / "s.db-locks"
    directory.mkdir()
    with open(directory / (hashlib.sha256(b"s").hexdigest()[:32] + ".lock"), "a+b") as handle:
        handle.write(written)
        handle.flush()
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with SQLiteSession(db, "s") as session, pytest.raises(SessionInUseError) as info:
            session.acquire()
    assert str(info.value) == f"session 's' in {str(db)!r} is held by another agent{named}: one agent holds a session at a time"


def test_a_database_not_in_wal_mode_is_used_with_a_warning_naming_its_mode(tmp_path, caplog):
    """":memory:" cannot be in WAL mode: the session works and a warning names the database and its journal mode; a file database gives none."""
    with caplog.at_level("WARNING", logger="yiemagent.sessions"):
        with SQLiteSession(tmp_path / "s.db", "s"):
            pass
        assert caplog.records == []
        with SQLiteSession(":memory:", "s") as memory:
            memory.append(user("kept"))
            assert [m.content[0].text for m in memory.messages()] == ["kept"]
    assert [r.getMessage() for r in caplog.records] == ["SQLite database ':memory:' is in journal mode 'memory', not WAL"]


def test_a_private_database_is_held_by_its_object_alone(tmp_path, monkeypatch):
    """":memory:" is seen by its own connection only: acquire takes no lock file (none appears in the working directory), a second acquire is refused, release frees it."""
    monkeypatch.chdir(tmp_path)
    with SQLiteSession(":memory:", "s") as session:
        session.acquire()
        with pytest.raises(SessionInUseError, match="already held by an agent using this SQLiteSession"):
            session.acquire()
        session.release()
        session.acquire()
        session.release()
    assert list(tmp_path.iterdir()) == []


def test_appending_what_is_not_a_message_names_its_type(tmp_path):
    """SQLiteSession.append({...}) raises MessageFormatError naming the type it got; nothing is stored."""
    with SQLiteSession(tmp_path / "s.db", "s") as session:
        with pytest.raises(MessageFormatError, match="^a session stores AgentMessages, got dict$"):
            session.append({"role": "user", "content": []})
        assert session.messages() == []


def test_one_session_object_cannot_serve_two_agents(tmp_path):
    """The same SQLiteSession given to a second live agent: SessionInUseError, and the first agent keeps its hold."""
    with SQLiteSession(tmp_path / "s.db", "s") as session:
        first = YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, session=session)
        with pytest.raises(SessionInUseError, match="already held by an agent using this SQLiteSession"):
            YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, session=session)
        with pytest.raises(SessionInUseError):
            held(tmp_path / "s.db", "s")
        shutdown(first, timeout=WAIT)


def test_after_shutdown_the_next_agent_takes_the_session_at_once_and_no_lock_file_is_left(tmp_path):
    """shutdown ends the hold: a new agent on the id starts at once, and the lock file is gone."""
    db = tmp_path / "s.db"
    first = held(db, llm=ScriptedLLM(["one"]))
    run_agent(first, "hi")
    take_response(first, timeout=WAIT)
    shutdown(first, timeout=WAIT)
    with held(db) as second:
        assert [m.role for m in second.history()] == ["user", "assistant"]
        assert len(list((tmp_path / "s.db-locks").iterdir())) == 1
    assert list((tmp_path / "s.db-locks").iterdir()) == []


def test_a_dropped_agent_gives_its_session_back_when_collected(tmp_path):
    """An agent dropped without shutdown releases its hold as its threads end (after its ResourceWarning)."""
    import gc

    session = SQLiteSession(tmp_path / "s.db", "s")  # kept: its lock file is closed by the agent's release, not by collecting it
    agent = YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, session=session)
    loop = agent._core._thread
    with pytest.warns(ResourceWarning, match="without shutdown"):
        del agent
        gc.collect()
    loop.join(WAIT)
    with held(tmp_path / "s.db"):
        pass
    session.close()


def test_a_run_shutdown_left_running_keeps_the_hold_until_it_has_stored_its_last_message(tmp_path):
    """shutdown gave up on a run whose llm_call ignores the abort: the id stays held (no second writer), and is free once the run ended."""
    entered, release = threading.Event(), threading.Event()

    def stuck(formatted):
        entered.set()
        release.wait(WAIT)
        return AssistantMessage([TextContent("late")])

    db = tmp_path / "s.db"
    agent = held(db, llm=ScriptedLLM([stuck]))
    run_agent(agent, "go")
    assert entered.wait(WAIT)
    shutdown(agent, timeout=0.05)
    with pytest.raises(SessionInUseError):
        held(db)
    release.set()
    agent._core._worker.thread.join(WAIT)
    with held(db) as after, SQLiteSession(db, "s") as raw:
        assert after.history() == raw.messages()


class HeldRecorder(FailingSession):
    """A session of one's own with acquire/release (docs/sessions.md): records the calls."""

    def __init__(self, stored=()):
        super().__init__(room=100)
        self.stored, self.calls = list(stored), []

    def acquire(self):
        self.calls.append("acquire")

    def release(self):
        self.calls.append("release")


def test_a_session_of_ones_own_is_acquired_before_it_is_read_and_released_once_at_shutdown():
    """A custom session with acquire/release: acquire in the constructor before messages(), release once after shutdown."""
    session = HeldRecorder()
    reads = session.messages
    session.messages = lambda: (session.calls.append("messages"), reads())[1]
    agent = YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, session=session)
    assert session.calls == ["acquire", "messages"]
    shutdown(agent, timeout=WAIT)
    shutdown(agent, timeout=WAIT)
    assert session.calls == ["acquire", "messages", "release"]


class AcquireOnly(FailingSession):
    """Half a HeldSession: acquire without release (or, with ``release_only``, the other half)."""

    def __init__(self, release_only=False):
        super().__init__(room=100)
        self.calls = []
        setattr(self, "release" if release_only else "acquire", lambda: self.calls.append("called"))


@pytest.mark.parametrize("release_only", [False, True], ids=["acquire-only", "release-only"])
def test_a_session_with_half_of_the_hold_is_not_held(release_only):
    """A session with acquire but no release (or release but no acquire) is not a HeldSession: the agent calls neither half, and runs."""
    session = AcquireOnly(release_only)
    agent = YiemAgent(llm_call=ScriptedLLM(["fine"]), agent_event_sink=None, session=session)
    run_agent(agent, "hi")
    assert take_response(agent, timeout=WAIT).content[0].text == "fine"
    shutdown(agent, timeout=WAIT)
    assert session.calls == []


@pytest.mark.parametrize("halves", ["neither", "acquire-only", "release-only"])
def test_hold_and_release_of_a_session_without_both_halves_do_nothing_and_never_raise(halves):
    """hold_session / release_session on a session that is not a HeldSession call nothing, raise nothing."""
    session = FailingSession(room=1) if halves == "neither" else AcquireOnly(release_only=halves == "release-only")
    hold_session(session)
    release_session(session)
    assert getattr(session, "calls", []) == []


def test_a_release_that_raises_is_logged_naming_the_session_and_the_error(caplog):
    """release() raising at shutdown does not escape; an ERROR on yiemagent.sessions names the session, the exception's type and text."""

    class BadRelease(HeldRecorder):
        def release(self):
            raise OSError("the lock file is gone")

    agent = YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, session=BadRelease())
    with caplog.at_level("ERROR", logger="yiemagent.sessions"):
        shutdown(agent, timeout=WAIT)
    [record] = [r for r in caplog.records if r.name == "yiemagent.sessions"]
    assert record.getMessage() == "the session FailingSession() could not be released: OSError: the lock file is gone"
    assert record.exc_info[0] is OSError


def test_a_constructor_that_fails_after_the_hold_gives_the_session_back():
    """A session holding something that is not a message: the constructor raises MessageFormatError and releases the hold it took."""
    session = HeldRecorder(stored=["not a message"])
    with pytest.raises(MessageFormatError, match=r"messages\[0\] is str"):
        YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, session=session)
    assert session.calls == ["acquire", "release"]


def test_a_store_in_progress_at_shutdown_is_finished_before_the_hold_ends():
    """shutdown returns while an idle add_message hangs in the session; the hold ends only after that store returned."""
    session = HeldRecorder()
    hanging, go_on = stalled(session)
    agent = YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, session=session)
    adder = threading.Thread(target=add_message, args=(agent, user("note")), daemon=True)
    adder.start()
    assert hanging.wait(WAIT)
    shutdown(agent, timeout=0.05)
    assert session.calls == ["acquire"]
    go_on.set()
    adder.join(WAIT)
    assert session.calls == ["acquire", "stored", "release"] and [m.content[0].text for m in session.stored] == ["note"]


def stalled(session: HeldRecorder) -> tuple[threading.Event, threading.Event]:
    """Make ``session.append`` hang until the second event is set (the first is set as it starts); it records "stored"."""
    hanging, go_on = threading.Event(), threading.Event()
    store = session.append

    def slow_append(message):
        hanging.set()
        go_on.wait(WAIT)
        store(message)
        session.calls.append("stored")

    session.append = slow_append
    return hanging, go_on


def test_a_release_during_a_runs_store_waits_for_that_store_and_ends_the_hold_once():
    """HistoryWriter.release while the run's append is in the session: the hold ends when that store returns, and once only."""
    session = HeldRecorder()
    hanging, go_on = stalled(session)
    writer = HistoryWriter(AgentState(), session)
    appender = threading.Thread(target=writer.append, args=(user("last"),), daemon=True)
    appender.start()
    assert hanging.wait(WAIT)
    writer.release()
    assert session.calls == []
    go_on.set()
    appender.join(WAIT)
    writer.release()
    assert session.calls == ["stored", "release"] and writer.take_failure() is None


def test_releasing_twice_ends_the_hold_once():
    """HistoryWriter.release: calling it again does nothing."""
    session = HeldRecorder()
    writer = HistoryWriter(AgentState(), session)
    writer.release()
    writer.release()
    assert session.calls == ["release"]


def test_after_the_hold_ended_no_message_is_stored_and_the_caller_hears_of_it():
    """Once released, the run's append keeps the message in memory and reports it unstored; an idle add raises AgentClosedError."""
    session = HeldRecorder()
    writer = HistoryWriter(AgentState(), session)
    writer.release()
    writer.append(user("late"))
    assert [m.content[0].text for m in writer.state.messages] == ["late"] and session.stored == []
    assert writer.take_failure() == "the agent has released the session FailingSession(); a message was not stored"
    with pytest.raises(AgentClosedError) as raised:
        writer.append_stored_first(user("idle"))
    assert str(raised.value) == "the agent has been shut down; it takes no more messages"
    assert len(writer.state.messages) == 1 and session.stored == []


HOLDER = """
import sys, threading
from yiemagent import SQLiteSession, YiemAgent
from yiemagent.llm import ScriptedLLM
agent = YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, session=SQLiteSession(sys.argv[1], "held"))
print("ready", flush=True)
threading.Event().wait()
"""


def test_a_process_killed_while_holding_a_session_leaves_no_stale_hold(tmp_path):
    """A real child process holds the id: an agent here is refused, naming the child; after SIGKILL a new agent takes the id at once."""
    db = str(tmp_path / "s.db")
    child = subprocess.Popen([sys.executable, "-c", HOLDER, db], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        with pytest.raises(SessionInUseError, match=rf"held by another agent \(process {child.pid}\)"):
            held(db, "held")
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=WAIT) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        child.stdout.close()
        child.stderr.close()
    assert len(list((tmp_path / "s.db-locks").iterdir())) == 1  # the dead holder's file is left, unlocked
    with held(db, "held"):
        pass
    assert list((tmp_path / "s.db-locks").iterdir()) == []


# --- whatever a session holds, what loads is valid to send (decision 17) --------------------


class Unheld:
    """A session of one's own without acquire/release, over a shared SQLiteSession: agents share it, as all did before holds."""

    def __init__(self, inner: SQLiteSession) -> None:
        self.inner = inner

    def messages(self):
        return self.inner.messages()

    def append(self, message):
        self.inner.append(message)

    def clear(self):
        self.inner.clear()


def assert_valid_to_send(history):
    """Each assistant message's calls are answered right after it, once each, and no tool result stands anywhere else."""
    index = 0
    while index < len(history):
        message = history[index]
        index += 1
        assert message.role != "tool", f"a tool result at {index - 1} answers no call of its batch"
        if message.role != "assistant":
            continue
        calls = {c["id"] for b in message.content if isinstance(b, dict) for c in b.get("tool_calls", [])}
        answers = []
        while index < len(history) and history[index].role == "tool":
            answers.append(history[index].tool_call_id)
            index += 1
        assert sorted(answers) == sorted(calls)


def interleave_two_agents(agents, db, ids):
    """Two agents on one unheld session id, forced to interleave: both users stored, then both replies, both results, both answers."""
    shared = Unheld(SQLiteSession(db, "shared"))
    in_llm, in_tool, in_final = threading.Barrier(2), threading.Barrier(2), threading.Barrier(2)

    def work(tool_call_id, args, signal, on_partial_result):
        in_tool.wait(WAIT)
        return text_result(f"result for {args['who']}")

    made = []
    for who, call_id in zip("AB", ids):
        def first_round(formatted, who=who, call_id=call_id):
            in_llm.wait(WAIT)
            return tool_call_reply((call_id, "work", {"who": who}))

        def final_round(formatted, who=who):
            in_final.wait(WAIT)
            return AssistantMessage([TextContent(f"{who} is done")], stop_reason="stop")

        made.append(agents(ScriptedLLM([first_round, final_round]), [make_tool("work", work)], session=shared))
    for who, agent in zip("AB", made):
        run_agent(agent, f"task {who}")
    for agent in made:
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
        shutdown(agent, timeout=WAIT)
    return shared.inner.messages()


@pytest.mark.parametrize("ids", [("a1", "b1"), ("c1", "c1")], ids=["own-ids", "same-id"])
def test_a_history_two_agents_interleaved_loads_valid_to_send(agents, tmp_path, caplog, ids):
    """Rows two agents interleaved the old way (calls answered out of order, a duplicate when the ids collide): an agent on the session and load_history both repair them, with a warning, and the next request is valid."""
    db = tmp_path / "s.db"
    stored = interleave_two_agents(agents, db, ids)
    assert [m.role for m in stored] == ["user", "user", "assistant", "assistant", "tool", "tool", "assistant", "assistant"]
    with pytest.raises(AssertionError):
        assert_valid_to_send(stored)  # as stored, every provider rejects it
    llm = ScriptedLLM(["I see both tasks"])
    with caplog.at_level("WARNING", logger="yiemagent.history"):
        third = agents(llm, [make_tool("work")], session=SQLiteSession(db, "shared"))
    assert_valid_to_send(third.history())
    assert f"session SQLiteSession({str(db)!r}, 'shared'): mended to be valid to send" in caplog.text
    results = sorted(m.content[0].text for m in third.history() if m.role == "tool")
    if ids[0] != ids[1]:  # each result is kept, moved after its own call
        assert results == ["result for A", "result for B"]
    else:  # one call's result is ambiguous: the first is kept for the later call, the other call is answered as lost
        assert LOST_RESULT_MESSAGE in results and "answering a call already answered left out" in caplog.text
    save_history(stored, tmp_path / "h.json")
    assert load_history(tmp_path / "h.json") == third.history()
    continue_agent(third)
    assert take_response(third, timeout=WAIT).content[0].text == "I see both tasks"
    sent = llm.requests[0]["messages"]
    for i, wire in enumerate(sent):
        if wire.get("tool_calls"):
            answers = [m["tool_call_id"] for m in sent[i + 1 : i + 1 + len(wire["tool_calls"])]]
            assert answers == [c["id"] for c in wire["tool_calls"]]
    assert sum(1 for m in sent if m["role"] == "tool") == sum(len(m.get("tool_calls", [])) for m in sent)


# --- the command line ---------------------------------------------------------------------


def cli(*args: str, stdin: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "YIEMAGENT_MODEL", "ANTHROPIC_API_KEY")}
    clean.update({"PYTHONIOENCODING": "utf-8", **(env or {})})
    return subprocess.run([sys.executable, "-m", "yiemagent", *args], input=stdin, capture_output=True, text=True, timeout=120, env=clean, cwd=ROOT)


def test_chat_with_session_survives_a_restart(tmp_path):
    """`yiemagent chat --session PATH` twice: the second process says what it resumes and sends the first chat to the LLM."""
    db = str(tmp_path / "chat.db")

    def respond(request):
        n = len(request.json()["messages"])
        return Reply(body={"choices": [{"message": {"role": "assistant", "content": f"I see {n} messages"}, "finish_reason": "stop"}], "model": "m"})

    with LocalServer(respond) as server:
        env = {"OPENAI_BASE_URL": f"{server.url}/v1", "YIEMAGENT_MODEL": "m"}
        first = cli("-q", "--no-stream", "chat", "--session", db, stdin="my name is Ada\n", env=env)
        second = cli("-q", "--no-stream", "chat", "--session", db, stdin="what is my name?\n", env=env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "0 messages so far" in first.stderr and "2 messages so far" in second.stderr
    assert "I see 4 messages" in second.stdout  # system, the first exchange, the new question
    sent = server.requests[1].json()["messages"]
    assert sent[1] == {"role": "user", "content": "my name is Ada"} and sent[2]["content"] == "I see 2 messages"
    with SQLiteSession(db, "chat") as s:
        assert len(s.messages()) == 4


def test_ask_with_session_ids_keeps_conversations_apart(tmp_path):
    """`--session-id` picks the conversation in the file; the offline planner works with a session too."""
    db = str(tmp_path / "ask.db")
    assert cli("-q", "ask", "--session", db, "--session-id", "one", "what tools do you have?").returncode == 0
    again = cli("-q", "ask", "--session", db, "--session-id", "two", "hello")
    assert again.returncode == 0 and "session 'two'" in again.stderr and "0 messages so far" in again.stderr
    with SQLiteSession(db, "one") as one:
        assert [m.role for m in one.messages()] == ["user", "assistant", "tool", "assistant"]


def test_a_second_chat_on_a_held_session_id_ends_with_one_line_saying_how_to_pick_another(tmp_path):
    """Two `yiemagent chat` on the default --session-id: the second exits non-zero with one line naming the id and --session-id, no traceback."""
    db = str(tmp_path / "chat.db")
    clean = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "YIEMAGENT_MODEL", "ANTHROPIC_API_KEY")}
    first = subprocess.Popen(
        [sys.executable, "-m", "yiemagent", "-q", "chat", "--session", db],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=clean, cwd=ROOT,
    )
    try:
        assert first.stdout.read(5) == b"you> "  # the prompt: the agent exists, the id is held
        second = cli("-q", "chat", "--session", db, stdin="hello\n")
        first.stdin.close()
        assert first.wait(timeout=WAIT * 3) == 0
    finally:
        if first.poll() is None:
            first.kill()
        first.stdout.close()
    lines = second.stderr.strip().splitlines()
    assert second.returncode == 2 and "Traceback" not in second.stderr and second.stdout == ""
    assert lines[-1].startswith("yiemagent: session 'chat' in ") and lines[-1].endswith("pick another conversation with --session-id NAME")
    assert f"(process {first.pid})" in lines[-1]


def _rollback_journal_db(path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
        conn.commit()
    assert _journal_mode(path) == "delete"


def _journal_mode(path) -> str:
    with closing(sqlite3.connect(path)) as conn:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])


def test_opening_a_rollback_journal_database_waits_for_another_connections_write_lock(tmp_path):
    """SQLite refuses the switch into WAL at once, without its busy handler, while another connection holds a write lock: the session waits for the lock (within ``timeout``) and opens in WAL mode."""
    db = tmp_path / "s.db"
    _rollback_journal_db(db)
    writer = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    writer.execute("BEGIN IMMEDIATE")
    released = threading.Timer(0.2, writer.execute, ("COMMIT",))
    released.start()
    try:
        with SQLiteSession(db, "s", timeout=10) as session:
            session.append(user("kept"))
            assert [m.content[0].text for m in session.messages()] == ["kept"]
    finally:
        released.join()
        writer.close()
    assert _journal_mode(db) == "wal"


def test_the_switch_into_wal_is_tried_again_after_pauses_doubling_from_1_ms_up_to_50_ms(tmp_path, monkeypatch):
    """docs/sessions.md: while another connection holds the write lock, the open tries the switch into WAL again after 1 ms, each pause twice the last, up to 50 ms."""
    db = tmp_path / "s.db"
    _rollback_journal_db(db)
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    pauses: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 9:
            writer.execute("COMMIT")  # the lock given up during the ninth pause: the next try succeeds
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    try:
        SQLiteSession(db, "s", timeout=10).close()
    finally:
        monkeypatch.undo()
        writer.close()
    assert pauses == pytest.approx([0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.05, 0.05, 0.05]) and _journal_mode(db) == "wal"


def test_the_wait_for_the_switch_into_wal_gives_up_before_a_pause_would_pass_the_timeout(tmp_path, monkeypatch):
    """docs/sessions.md: the tries stop when the next pause would end past ``timeout``, never sleeping beyond it (the clock the open reads, stepped by its own pauses)."""
    import yiemagent.history.sessions as sessions_module

    class Clock:  # the module's clock: time passes only in its pauses
        now = 0.0
        pauses: list[float] = []

        @classmethod
        def monotonic(cls) -> float:
            return cls.now

        @classmethod
        def sleep(cls, seconds: float) -> None:
            cls.pauses.append(seconds)
            cls.now += seconds

    db = tmp_path / "s.db"
    _rollback_journal_db(db)
    with closing(sqlite3.connect(db, isolation_level=None)) as writer:
        writer.execute("BEGIN IMMEDIATE")
        monkeypatch.setattr(sessions_module, "time", Clock)
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            SQLiteSession(db, "s", timeout=0.1)
        monkeypatch.undo()
        writer.execute("COMMIT")
    assert Clock.pauses == pytest.approx([0.001, 0.002, 0.004, 0.008, 0.016, 0.032])  # the next, 0.05, would end at 0.113


def test_a_write_lock_held_past_the_timeout_fails_the_open_naming_the_lock(tmp_path):
    """The wait for the switch into WAL is bounded by ``timeout``: a lock held past it is the OperationalError SQLite gave, the file left in its journal mode."""
    db = tmp_path / "s.db"
    _rollback_journal_db(db)
    with closing(sqlite3.connect(db, isolation_level=None)) as writer:
        writer.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            SQLiteSession(db, "s", timeout=0.2)
        writer.execute("COMMIT")
    assert _journal_mode(db) == "delete"
