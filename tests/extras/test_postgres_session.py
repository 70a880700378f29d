"""PostgresSession beyond the contract it shares with SQLiteSession (tests/extras/test_sessions.py runs that on both).

Against a real PostgreSQL server started for the test run (tests/support/session_backends.py):
the schema, the hold (one agent per session id, decision 17: an advisory lock on the
session's connection), what a dead holder leaves, and what never leaves the process.
docs/scale.md.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import termios
import threading
import time

import psycopg
import pytest

from yiemagent.normalize import normalize_message

from session_backends import PostgresBackend, postgres_server  # noqa: F401  the server fixture
from yiemagent import PostgresSession, SessionInUseError, TextContent, ToolResultMessage, UserMessage
from yiemagent.history.postgres import KEEPALIVE_COUNT, KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, LOCK_CLASS
from yiemagent.errors import MessageFormatError, YiemAgentError
from helpers import WAIT



@pytest.fixture
def pg(postgres_server):
    made = PostgresBackend(postgres_server)
    yield made
    made.drop()


def sql(pg, query, params=()):
    with psycopg.connect(pg.target, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else None


def waiting_for_lock(pg) -> bool:
    """Whether some connection waits for a yiemagent session's advisory lock now."""
    return bool(sql(pg, "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND NOT granted", (LOCK_CLASS,)))


def until(condition, what: str) -> None:
    """Wait (bounded) for a state the server shows, such as a lock wait that has begun."""
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def backend_exited(pid: int) -> bool:
    """Whether the server process ``pid`` (on this machine: the test's server) has exited and been reaped, its sockets closed."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, run as another user
        return False
    return False


def user(text: str) -> UserMessage:
    return UserMessage([TextContent(text)])


# --- storage --------------------------------------------------------------------------------


def test_each_message_is_one_row_of_json_text(pg):
    """Each append is one row of yiemagent_messages whose body is the message's JSON text."""
    with pg.open("s") as s:
        s.append(user("a"))
        s.append(ToolResultMessage("c1", "t", [TextContent("r")]))
    rows = sql(pg, "SELECT session_id, body::json->>'role' FROM yiemagent_messages ORDER BY id")
    assert rows == [("s", "user"), ("s", "tool")]


def test_text_utf8_cannot_carry_still_round_trips(pg):
    """A lone surrogate and a NUL character in a message are stored; they come back as an agent's history holds them (decision 15: U+FFFD for the surrogate)."""
    odd = [user("half a pair \ud800 here"), user("nul \x00 inside"), user("ünïcødé ✓")]
    with pg.open("s") as s:
        for message in odd:
            s.append(message)
        assert s.messages() == [normalize_message(m) for m in odd]
        assert s.messages()[0].content[0].text == "half a pair \ufffd here" and s.messages()[1].content[0].text == "nul \x00 inside"


def test_bodies_are_compact_json_with_text_as_it_is(pg):
    """docs/sessions.md's form: a body is compact JSON, non-ASCII text as it is; one holding a lone surrogate is all ASCII, the surrogate a \\u escape, and reads back as the agent holds it."""
    odd = ToolResultMessage("c1", "t", [TextContent("half \ud800 ✓")])  # a tool's result is stored as the agent holds it, surrogate and all
    with pg.open("s") as s:
        s.append(user("ünïcødé ✓"))
        s.append(odd)
        assert [m.content[0].text for m in s.messages()] == ["ünïcødé ✓", "half \ufffd ✓"]
    (plain,), (escaped,) = sql(pg, "SELECT body FROM yiemagent_messages ORDER BY id")
    assert "ünïcødé ✓" in plain and plain == json.dumps(json.loads(plain), ensure_ascii=False, separators=(",", ":"))
    assert escaped.isascii() and "half \\ud800 \\u2713" in escaped and escaped == json.dumps(json.loads(escaped), separators=(",", ":"))


def test_appending_what_is_not_a_message_names_its_type(pg):
    """append({...}) raises MessageFormatError naming the type it got; nothing is stored."""
    with pg.open("s") as s:
        with pytest.raises(MessageFormatError, match="^a session stores AgentMessages, got dict$"):
            s.append({"role": "user", "content": []})
        assert s.messages() == []


def test_a_database_of_another_schema_version_is_refused(pg):
    """Tables of another schema version: MessageFormatError naming the version."""
    pg.open("s").close()
    sql(pg, "UPDATE yiemagent_schema SET version = 7")
    with pytest.raises(MessageFormatError, match=r"schema version \[7\]"):
        pg.open("s")


def test_a_table_dropped_is_made_again_and_the_version_row_stays_one(pg):
    """A database missing one table (yiemagent_messages dropped): the next session makes it again, and the schema keeps its one version row, so later sessions open."""
    pg.open("s").close()
    sql(pg, "DROP TABLE yiemagent_messages")
    with pg.open("s") as s:
        s.append(user("again"))
    with pg.open("s") as s:
        assert [m.content[0].text for m in s.messages()] == ["again"]
    assert sql(pg, "SELECT version FROM yiemagent_schema") == [(3,)]


def test_processes_setting_up_one_database_at_once_all_succeed(pg):
    """Eight threads making the first sessions of an empty database at once: every one works (setup is serialised)."""
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def make(n: int) -> None:
        barrier.wait(WAIT)
        try:
            with pg.open(f"s{n}") as s:
                s.append(user(str(n)))
        except BaseException as exc:  # noqa: BLE001  reported below
            errors.append(exc)

    threads = [threading.Thread(target=make, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 3)
    assert errors == []
    assert sql(pg, "SELECT COUNT(*) FROM yiemagent_messages") == [(8,)]


@pytest.mark.parametrize(
    "kwargs, match",
    [({"session_id": ""}, "session_id"), ({"session_id": "a\x00b"}, "NUL"), ({"session_id": "s", "timeout": -1}, "^timeout must be a finite number of seconds >= 0, got -1$"),
     ({"session_id": "s", "timeout": True}, "^timeout must be a finite number of seconds >= 0, got True$"),
     ({"session_id": "s", "hold_timeout": float("nan")}, "^hold_timeout must be a finite number of seconds >= 0, got nan$")],
)
def test_bad_arguments_are_refused(pg, kwargs, match):
    """An empty id, an id with NUL, a negative, NaN or bool timeout: ValueError naming it (a timeout by its own name)."""
    with pytest.raises(ValueError, match=match):
        PostgresSession(pg.target, **kwargs)


def test_timeout_bounds_each_statement_and_keepalives_are_set(pg):
    """timeout= (30 s by default) becomes the connection's statement_timeout; the server's TCP keepalives are set (a dead holder's machine loses its hold)."""
    with pg.open("s", timeout=2.5) as s:
        shown = [s._conn.execute(f"SHOW {name}").fetchone()[0] for name in ("statement_timeout", "tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count")]
    assert shown == ["2500ms", "10", "5", "3"]
    with pg.open("s") as default:
        assert default._conn.execute("SHOW statement_timeout").fetchone()[0] == "30s"  # the documented default, timeout=30.0


def test_the_password_never_leaves_the_process(pg):
    """A DSN with a password: repr and error messages show host, port and database only."""
    dsn = pg.target + " password=hunter2-secret"
    with PostgresSession(dsn, "s") as s:
        s.append(user("fine"))
        pg.insert_raw("s", "not json")
        with pytest.raises(MessageFormatError) as raised:
            s.messages()
        assert "hunter2" not in str(raised.value) and "hunter2" not in repr(s)
        assert repr(s) == f"PostgresSession('postgresql://127.0.0.1:{s._conn.info.port}/{pg.database}', 's')"


def test_imports_without_psycopg_and_says_which_extra_to_install():
    """Without psycopg, `from yiemagent import PostgresSession` works and making one raises ImportError naming the extra."""
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from yiemagent import PostgresSession\n"
        "try:\n    PostgresSession('host=127.0.0.1', 's')\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert 'pip install "yiemagent[postgres]"' in out.stdout


@pytest.mark.parametrize("timeout, bound", [(7.5, "8"), (0.5, "2")])
def test_the_sessions_socket_sends_tcp_keepalives_and_connecting_is_bounded_by_its_timeout(pg, timeout, bound):
    """The session's own TCP socket probes a silent server (keepalives after KEEPALIVE_IDLE_S idle seconds, every
    KEEPALIVE_INTERVAL_S, KEEPALIVE_COUNT times: docs/scale.md), and its connect_timeout is the session's timeout
    rounded up, 2 s at least (libpq's own least)."""
    with pg.open("s", timeout=timeout) as s:
        conn = s._conn
        with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:  # a second descriptor of the same socket
            options = [
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0,
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            ]
        assert options == [True, KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_COUNT]
        assert conn.info.get_parameters().get("connect_timeout") == bound


# --- the hold: one agent per session id (decision 17) ---------------------------------------


def test_a_second_holder_fails_at_once_naming_the_first(pg):
    """While one session holds an id, another's acquire raises SessionInUseError naming the holder's host and process; held says so, as a bool."""
    with pg.open("s") as first, pg.open("s") as second:
        first.acquire()
        with pytest.raises(SessionInUseError, match=rf"session 's' in {pg.where} is held by another agent \(yiemagent .* pid {os.getpid()}, server pid \d+\): one agent"):
            second.acquire()
        assert isinstance(SessionInUseError("x"), YiemAgentError) and first.held is True and second.held is False


def test_the_holder_named_is_the_one_in_the_sessions_own_database(pg, postgres_server):
    """Another database of the same server holds a session whose lock key is the same number: the error names this database's holder, not that one."""
    elsewhere = PostgresBackend(postgres_server)
    try:
        with elsewhere.open("other") as stranger, pg.open("s") as holder, pg.open("s") as second:
            stranger.acquire()  # the first id of its database: lock key 1, as "s" has here
            holder.acquire()
            assert sql(pg, "SELECT lock_key FROM yiemagent_sessions") == [(1,)]
            with pytest.raises(SessionInUseError) as raised:
                second.acquire()
            assert f"server pid {holder._conn.info.backend_pid})" in str(raised.value), str(raised.value)
    finally:
        elsewhere.drop()


def test_acquiring_twice_through_one_object_is_refused(pg):
    """One PostgresSession already held: acquire again raises SessionInUseError (a lock would silently stack)."""
    with pg.open("s") as s:
        s.acquire()
        with pytest.raises(SessionInUseError, match="already held by an agent using this PostgresSession"):
            s.acquire()
        s.release()
        assert sql(pg, "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s", (LOCK_CLASS,)) == [(0,)]


def test_release_and_close_end_the_hold(pg):
    """After release (and after close) another session takes the id; release when not held does nothing."""
    with pg.open("s") as first, pg.open("s") as second, pg.open("s") as third:
        first.release()
        first.acquire()
        first.release()
        assert first.held is False
        second.acquire()
        second.close()
        third.acquire()
        assert third.held


def test_different_ids_are_held_apart(pg):
    """Holding one id does not hold another: every id has a lock key of its own."""
    with pg.open("a") as a, pg.open("b") as b:
        a.acquire()
        b.acquire()
        keys = sql(pg, "SELECT session_id, lock_key FROM yiemagent_sessions ORDER BY session_id")
    assert [k for _, k in keys] == sorted({k for _, k in keys}) and len(keys) == 2


def test_a_hold_timeout_of_a_second_waits_for_a_holder_that_lets_go_within_it(pg):
    """hold_timeout=1.0 waits too: a holder that lets go 0.2 s after the waiter asks is waited for, and the waiter holds.

    Whenever the release lands (before the waiter asks, or while it waits), the waiter gets
    the session within its second, unless the release thread is held up for 0.8 s.
    """
    with pg.open("s") as holder, pg.open("s", hold_timeout=1.0) as waiter:
        holder.acquire()
        release = threading.Timer(0.2, holder.release)
        release.start()
        try:
            waiter.acquire()
        finally:
            release.join()
        assert waiter.held and not holder.held


def test_hold_timeout_waits_for_the_holder_to_let_go(pg):
    """With hold_timeout, acquire waits on the server until the holder releases, then holds."""
    with pg.open("s") as holder, pg.open("s", hold_timeout=WAIT) as waiter:
        holder.acquire()
        done = threading.Event()
        failed: list[BaseException] = []

        def wait() -> None:
            try:
                waiter.acquire()
            except BaseException as exc:  # noqa: BLE001
                failed.append(exc)
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        until(lambda: waiting_for_lock(pg), "the waiter's lock wait")
        assert not done.is_set()
        holder.release()
        assert done.wait(WAIT) and failed == [] and waiter.held


def test_hold_timeout_ends_in_session_in_use_error(pg):
    """A holder that does not let go within hold_timeout: SessionInUseError saying how long it waited."""
    with pg.open("s") as holder, pg.open("s", hold_timeout=0.2) as waiter:
        holder.acquire()
        with pytest.raises(SessionInUseError, match=r"after waiting 0\.2 s"):
            waiter.acquire()
        assert not waiter.held
        waiter.append(user("a session not held still reads and writes"))  # the failed wait left the connection usable
        assert len(waiter.messages()) == 1


HOLDER = """
import sys, threading
from yiemagent import PostgresSession
session = PostgresSession(sys.argv[1], "s")
session.acquire()
print("held", flush=True)
threading.Event().wait()
"""


def test_the_hold_ends_when_the_holders_process_is_killed(pg):
    """SIGKILL of the holding process: the server drops its connection and the hold with it; a waiting session gets it."""
    child = subprocess.Popen([sys.executable, "-c", HOLDER, pg.target], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killer = threading.Timer(60, child.kill)
    killer.start()
    try:
        assert child.stdout.readline().strip() == "held", child.stderr.read()
        with pg.open("s") as s:
            with pytest.raises(SessionInUseError, match=rf"pid {child.pid},"):
                s.acquire()
            os.kill(child.pid, signal.SIGKILL)
            assert child.wait(timeout=WAIT) == -signal.SIGKILL
        with pg.open("s", hold_timeout=WAIT) as s:
            s.acquire()
            assert s.held
    finally:
        killer.cancel()
        child.stdout.close()
        child.stderr.close()


def test_a_holder_whose_connection_was_cut_cannot_write_and_the_next_holder_can(pg, caplog):
    """The server ends the holder's connection: its append fails (its hold is gone), release neither raises nor warns, another session holds and writes."""
    with pg.open("s") as holder, pg.open("s", hold_timeout=WAIT) as successor:
        holder.acquire()
        holder.append(user("before the cut"))
        backend_pid = holder._conn.info.backend_pid
        assert sql(pg, "SELECT pg_terminate_backend(%s)", (backend_pid,)) == [(True,)]
        with pytest.raises(psycopg.OperationalError):
            holder.append(user("after the cut"))
        with caplog.at_level(logging.WARNING, logger="yiemagent.sessions"):
            holder.release()
        assert caplog.records == [] and not holder.held  # the loss was seen already: nothing left to end
        successor.acquire()
        successor.append(user("the successor's"))
        assert [m.content[0].text for m in successor.messages()] == ["before the cut", "the successor's"]


def test_held_turns_false_once_the_server_ended_the_holders_connection_while_another_holds_the_id(pg):
    """The server ends the holder's connection (pg_terminate_backend) and another session takes the id: the first's held turns False (docs/sessions.md "What `held` says"), the second's is True."""
    with pg.open("s") as holder, pg.open("s", hold_timeout=WAIT) as successor:
        holder.acquire()
        assert holder.held
        backend_pid = holder._conn.info.backend_pid
        assert sql(pg, "SELECT pg_terminate_backend(%s)", (backend_pid,)) == [(True,)]
        successor.acquire()  # waits on the server for the lock it drops with the connection
        until(lambda: backend_exited(backend_pid), "the holder's server process to exit (its socket closed)")
        assert successor.held and not holder.held


def end_on_the_server(pg, session) -> None:
    """End ``session``'s connection from the server (pg_terminate_backend) and wait until its server process has exited, its socket closed."""
    backend_pid = session._conn.info.backend_pid
    assert sql(pg, "SELECT pg_terminate_backend(%s)", (backend_pid,)) == [(True,)]
    until(lambda: backend_exited(backend_pid), "the server process to exit (its socket closed)")


def test_held_stays_false_through_release_and_close_once_the_servers_end_of_the_hold_was_seen(pg, caplog):
    """Once ``held`` saw the server end the hold's connection it says False (a bool) ever after, release and close stay quiet, another session takes the id.

    docs/sessions.md "What `held` says".
    """
    with pg.open("s") as holder, pg.open("s") as successor:
        holder.acquire()
        end_on_the_server(pg, holder)
        assert holder.held is False  # seen here: the FATAL, then the closed socket
        assert holder.held is False  # and remembered
        with caplog.at_level(logging.WARNING, logger="yiemagent.sessions"):
            holder.release()
            assert holder.held is False
            holder.close()
        assert holder.held is False and caplog.records == []
        successor.acquire()
        assert successor.held is True


def test_held_watches_the_holds_own_socket_whatever_the_processs_standard_output_is(pg):
    """``held`` polls the hold's socket, not another descriptor: with standard output a full pipe (never ready), a hold the server ended reads False."""
    with pg.open("s") as s:
        s.acquire()
        end_on_the_server(pg, s)
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(write_end, b"x" * 65536)
        saved = os.dup(1)
        try:
            os.dup2(write_end, 1)
            seen = s.held
        finally:
            os.dup2(saved, 1)
            for fd in (saved, read_end, write_end):
                os.close(fd)
        assert seen is False


def test_held_is_true_for_a_live_hold_whose_connection_the_server_keeps_sending_to(pg):
    """Asynchronous messages waiting on the hold's live connection (notifications, more than ``held``'s few reads take) are not its end: ``held`` stays True."""
    with pg.open("s") as s, psycopg.connect(pg.target, autocommit=True) as notifier:
        s.acquire()
        s._conn.execute("LISTEN yiemagent_test")
        with notifier.transaction():
            for i in range(64):  # distinct payloads (equal ones are sent once): 512 kB, more than the socket buffers hold
                notifier.execute("SELECT pg_notify('yiemagent_test', %s)", (f"{i:04d}" + "x" * 7990,))
        waiting = array.array("i", [0])

        def pending() -> int:
            fcntl.ioctl(s._conn.fileno(), termios.FIONREAD, waiting, True)
            return waiting[0]

        until(lambda: pending() >= 96 * 1024, "the notifications to fill the hold's socket")
        assert s.held is True
        assert s.held is True


def test_acquire_through_a_session_whose_connection_the_server_ended_names_the_lost_connection(pg):
    """A held session whose connection the server ended is not "already held" by its object: acquire again raises the connection's own error."""
    with pg.open("s") as s:
        s.acquire()
        end_on_the_server(pg, s)
        with pytest.raises(psycopg.OperationalError):
            s.acquire()


def test_two_sessions_making_an_ids_key_at_once_share_it(pg):
    """Another process inserts the id's row between this session's look-up and its insert: acquire takes that row's key, and the two exclude each other."""
    pg.open("setup").close()
    with psycopg.connect(pg.target) as other, pg.open("s") as late, pg.open("s") as third:
        other.execute("INSERT INTO yiemagent_sessions (session_id) VALUES ('s')")  # not committed: late's insert waits for it
        outcome: list[object] = []

        def take() -> None:
            try:
                late.acquire()
                outcome.append("held")
            except BaseException as exc:  # noqa: BLE001  reported below
                outcome.append(exc)

        taker = threading.Thread(target=take, daemon=True)
        taker.start()
        until(lambda: bool(sql(pg, "SELECT 1 FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted")), "late's insert waiting for the other's")
        other.commit()
        taker.join(WAIT)
        assert outcome == ["held"] and late.held
        with pytest.raises(SessionInUseError):
            third.acquire()
    assert sql(pg, "SELECT session_id FROM yiemagent_sessions WHERE session_id = 's'") == [("s",)]


def test_acquiring_an_id_that_has_a_key_spends_no_new_key(pg):
    """Keys are an INTEGER sequence: taking the hold of a known id again, from new sessions, uses its key and leaves the sequence alone."""
    with pg.open("a") as a:
        a.acquire()
    for _ in range(3):
        with pg.open("a") as again:
            again.acquire()
    with pg.open("b") as b:
        b.acquire()
    [(a_key,), (b_key,)] = sql(pg, "SELECT lock_key FROM yiemagent_sessions ORDER BY session_id")
    assert b_key == a_key + 1


def test_release_after_the_server_cut_the_connection_warns_and_closes_it(pg, caplog):
    """The holder's connection ended unnoticed: release logs a warning naming the session and the error, closes the connection, and does not raise."""
    with pg.open("s") as s:
        s.acquire()
        backend_pid = s._conn.info.backend_pid
        assert sql(pg, "SELECT pg_terminate_backend(%s)", (backend_pid,)) == [(True,)]
        until(lambda: not sql(pg, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (backend_pid,)), "the backend's end")
        with caplog.at_level(logging.WARNING, logger="yiemagent.sessions"):
            s.release()
        assert not s.held and s._conn.closed
        [record] = caplog.records
        assert re.fullmatch(
            re.escape(repr(s)) + r": releasing the hold failed \((?!None\)).*terminat.*\); closing the connection ends it", record.getMessage(), re.DOTALL
        ), record.getMessage()


def test_a_release_that_frees_the_lock_logs_nothing(pg, caplog):
    """A release whose server process frees the lock (the hold taken at once or waiting) logs nothing, and the next holder takes the id."""
    with pg.open("s") as first, pg.open("s", hold_timeout=1.0) as second, pg.open("s") as third:
        with caplog.at_level(logging.DEBUG, logger="yiemagent.sessions"):
            first.acquire()
            first.release()
            second.acquire()
            second.release()
        third.acquire()
    assert [record.getMessage() for record in caplog.records if record.name == "yiemagent.sessions"] == []


def test_a_release_reaching_a_server_process_without_the_lock_logs_an_error_naming_the_pooler(pg, caplog):
    """A release reaching a server process without the lock (a pooler in transaction mode) is logged at ERROR naming the session and what to configure (docs/scale.md "PgBouncer")."""
    with pg.open("s") as s:
        s.acquire()
        s._conn.execute("SELECT pg_advisory_unlock_all()")  # the lock gone from the process the release will reach
        with caplog.at_level(logging.WARNING, logger="yiemagent.sessions"):
            s.release()
        assert not s.held and not s._conn.closed
    [record] = [record for record in caplog.records if record.name == "yiemagent.sessions"]
    assert record.levelno == logging.ERROR
    assert re.fullmatch(
        re.escape(repr(s)) + r": the hold could not be released, and stays with a server process of the pool: the server process reached holds .*"
        r"pool_mode = transaction.*pool_mode = session\)",
        record.getMessage(),
        re.DOTALL,
    ), record.getMessage()


# --- a role that may only read and write the tables -------------------------------------------


@pytest.fixture
def app_dsn(pg):
    """The DSN of a login role of the test's own that may read and write the tables, made by their owner, and create nothing (a least-privilege application's role)."""
    role = f"{pg.database}_app"
    pg.open("setup").close()
    sql(pg, f"CREATE ROLE {role} LOGIN")
    sql(pg, "REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    sql(pg, f"GRANT SELECT, INSERT, DELETE ON ALL TABLES IN SCHEMA public TO {role}")
    yield pg.target.replace("user=postgres", f"user={role}")
    sql(pg, f"DROP OWNED BY {role}")
    sql(pg, f"DROP ROLE {role}")


def test_a_role_that_cannot_create_tables_uses_a_database_set_up_already(pg, app_dsn):
    """Once the tables exist, opening a session runs no DDL (docs/scale.md): a role without CREATE appends, reads, holds and clears."""
    with PostgresSession(app_dsn, "s") as s:
        s.acquire()
        s.append(user("a"))
        assert [m.content[0].text for m in s.messages()] == ["a"]
        s.clear()
        assert s.messages() == [] and s.held


def test_a_holder_the_role_cannot_see_is_not_named(pg, app_dsn):
    """A role that may not read pg_locks: the second acquire still raises SessionInUseError, naming no holder."""
    sql(pg, "REVOKE SELECT ON pg_catalog.pg_locks FROM PUBLIC")  # in this test's database only
    with PostgresSession(app_dsn, "s") as first, PostgresSession(app_dsn, "s") as second:
        first.acquire()
        with pytest.raises(SessionInUseError, match=rf"^session 's' in {pg.where} is held by another agent: one agent holds a session at a time$"):
            second.acquire()


def test_a_holder_without_an_application_name_is_named_by_its_server_pid_alone(pg):
    """Another client (no yiemagent session, no application_name) holds the session's lock: the error names its server pid alone."""
    with pg.open("s") as first, pg.open("s") as second:
        first.acquire()
        key = first._lock_key
        first.release()
        with psycopg.connect(pg.target, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, key))
            with pytest.raises(SessionInUseError, match=rf"^session 's' in {pg.where} is held by another agent \(server pid {other.info.backend_pid}\): one agent"):
                second.acquire()


@pytest.mark.parametrize("hold_timeout", [0.0, 1.0])
def test_a_hold_released_and_taken_again_on_its_own_connection_holds_again(pg, hold_timeout):
    """A session that released its hold takes it again on the same server process (its mark cleared with the lock), and the second hold excludes another holder as the first did."""
    with pg.open("s", hold_timeout=hold_timeout) as first, pg.open("s") as other:
        for _ in range(3):
            first.acquire()
            with pytest.raises(SessionInUseError, match="held by another agent"):
                other.acquire()
            first.release()
        other.acquire()
        assert other.held and not first.held


def test_a_mark_left_on_a_server_process_that_does_not_hold_the_lock_does_not_refuse_the_hold(pg):
    """A server process that carries a hold's setting but not its lock (left by a client before, the lock since released) is no pooled holder: the hold is taken."""
    with pg.open("s") as first:
        first.acquire()
        first.release()
    (key,), = sql(pg, "SELECT lock_key FROM yiemagent_sessions WHERE session_id = 's'")
    marked = PostgresSession(f"{pg.target} options='-c yiemagent.hold_{key}=held'", "s")  # the setting a client left, the lock gone
    with marked, pg.open("s") as other:
        marked.acquire()
        assert marked.held
        with pytest.raises(SessionInUseError, match="held by another agent"):
            other.acquire()
        marked.release()
        other.acquire()
