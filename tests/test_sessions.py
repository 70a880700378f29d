"""Sessions and YiemAgent(session=...): order, isolation, crash safety with real processes, the CLI.

A test taking ``backend`` (or ``session``) runs against SQLiteSession and PostgresSession
(tests/session_backends.py): one contract, docs/sessions.md and docs/scale.md.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from helpers import make_tool, text_result
from localserver import LocalServer, Reply
from yiemagent import (
    AgentTool,
    AssistantMessage,
    LLMUsage,
    MessageFormatError,
    SQLiteSession,
    TextContent,
    ToolResultMessage,
    UserMessage,
    add_message,
    continue_agent,
    run_agent,
    shutdown,
    take_response,
)
from yiemagent.history import LOST_RESULT_MESSAGE, complete_tool_calls
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply
from session_backends import backend, postgres_server, session  # noqa: F401  fixtures: each backend in turn

WAIT = 10
ROOT = Path(__file__).resolve().parent.parent


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


@pytest.mark.parametrize("kwargs, match", [({"session_id": ""}, "session_id"), ({"session_id": "s", "synchronous": "SOMETIMES"}, "synchronous")])
def test_bad_arguments_are_refused(tmp_path, kwargs, match):
    """An empty session id or an unknown synchronous level raises ValueError."""
    with pytest.raises(ValueError, match=match):
        SQLiteSession(tmp_path / "s.db", **kwargs)


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


def test_an_agent_starts_from_the_session_and_goes_on_storing(agents, backend):
    """A new agent on a used session sends the stored conversation, then stores its own messages after it."""
    first = agents(ScriptedLLM(["one"]), session=backend.open("c"))
    run_agent(first, "hello")
    take_response(first, timeout=WAIT)
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
    again = agents(ScriptedLLM([]), session=session)
    assert again.history() == agent.history()


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


def test_a_session_that_cannot_store_ends_the_run_naming_it_and_the_history_stays_valid(agents):
    """A failed store: the run ends with stop_reason "error" naming the session and the cause before another LLM round; the in-memory history stays whole."""
    llm = ScriptedLLM([tool_call_reply(("c1", "echo", {})), "never sent"])
    agent = agents(llm, [make_tool("echo")], session=FailingSession(room=2))
    run_agent(agent, "go")
    response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "error"
    assert "FailingSession() could not store a tool message: OSError" in response.error_message and "No space left" in response.error_message
    assert len(llm.requests) == 1
    assert [m.role for m in agent.history()] == ["user", "assistant", "tool"] and complete_tool_calls(agent.history())[1] == []


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
