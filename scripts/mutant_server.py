"""The fork server of ``make mutate``: one pytest session collects the tests once, maps each test
to the functions it reaches, then forks a child per mutant that runs only the tests reaching the
mutant's function, until one fails (docs/mutation.md, "How a mutant is run").

mutmut's own ``mutmut run`` does the same in outline, but its map of tests to functions (its
"stats" run of the whole suite) died with SIGSEGV here every time, in ``ContextVar.set`` of the
call-stack variable its trampolines keep (docs/mutation.md). This server records the same map
without that variable, and so is not mutmut's run in three ways:

- **the map** (``map_tests``): the tests run once in forked children, one per worker, with
  mutmut's trampolines in their "stats" mode; each test's set of reached functions is written
  as it ends (``mutants/tests-map/*.jsonl``), so a child that dies costs only the test it was
  in: a new child takes the rest. A test that fails on the unmutated code is left out of every
  mutant's tests (it would "kill" them all) and named. The map is kept with a fingerprint of
  ``yiemagent/`` and ``tests/`` and the pytest arguments, and made again when one changes.
- **no collection per mutant**: a child is forked from the session that collected the tests
  and runs its tests' items itself, with pytest's own ``pytest_runtest_protocol`` (so fixtures,
  hypothesis and pytest-timeout work as in a plain run).
- **the order**: a function's tests run the ones that killed its earlier mutants first, then
  the rest fastest first.

The parent never runs a test, so a child inherits no test's thread or lock (the reason for
mutmut's ``forkserver``, docs/mutation.md). Results go to mutmut's ``.meta`` files.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import os
import signal
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import pytest

MAP_FORMAT = 2  # tests by function and by line
TIMEOUT = 36  # the exit code mutmut gives a mutant whose tests ran past their time (killed)
NO_TESTS = 33  # mutmut's "no tests": no test reaches the function (a survivor)
BUDGET_SPENT = 34  # survived the tests its time budget allowed, not all its tests: a survivor until a run without budget says
CRASH = 3  # a child that died of a signal it was not sent (a segfault the mutant caused): killed
CRASHED = -1  # in the map: a test during which a mapping child died, left out like a failing one


def function_of(mutant: str) -> str:
    """The trampoline's name for a mutant's function: ``yiemagent.m.x_f__mutmut_3`` -> ``yiemagent.m.x_f``."""
    return mutant.rpartition("__mutmut_")[0]


def fingerprint(root: Path, args: list[str]) -> str:
    """A hash of the package's and the tests' sources and of the pytest arguments: the map is made again when it changes."""
    digest = hashlib.sha256("\0".join(args).encode())
    for folder in ("yiemagent", "tests"):
        for path in sorted((root / folder).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


class _NoCallStack:
    """Stands in for mutmut's ``MutmutCallStack`` (a ContextVar, whose ``set`` crashed the stats
    run): the map needs which functions a test reaches, not who called them."""

    @staticmethod
    def get() -> tuple[None, int]:
        return None, 0

    @staticmethod
    def set(value: object) -> None:
        return None

    @staticmethod
    def reset(token: object) -> None:
        return None


def _quiet_child() -> None:
    """In a forked child: no signal handler of the parent's, and no output (the parent's fds 1 and 2 are /dev/null already)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _statement_span(statements: list[ast.stmt], line: int) -> tuple[int, int] | None:
    """The lines of the innermost statement holding ``line``: a simple statement whole, a compound one's header
    (``if ...:``, ``for ...:``, ``except ...:``); None for a line of no statement (``else:``, ``finally:``)."""
    for statement in statements:
        if not statement.lineno <= line <= (statement.end_lineno or statement.lineno):
            continue
        blocks = [block for field in ("body", "handlers", "orelse", "finalbody") if (block := getattr(statement, field, None))]
        if not blocks:
            return statement.lineno, statement.end_lineno or statement.lineno
        if line < statement.body[0].lineno:  # type: ignore[attr-defined]
            return statement.lineno, statement.body[0].lineno - 1  # type: ignore[attr-defined]
        for block in blocks:
            if (inner := _statement_span(block, line)) is not None:
                return inner
        return None
    return None


class MutatedSources:
    """Which statements of the package a mutant changes, read from mutmut's mutated files (the current
    directory is ``mutants/``): the mutant's function beside mutmut's copy of the original (``..._mutmut_orig``)."""

    def __init__(self) -> None:
        self._parsed: dict[str, tuple[dict[str, ast.FunctionDef | ast.AsyncFunctionDef], list[str]]] = {}

    @staticmethod
    def file_of(mutant: str) -> str:
        module = function_of(mutant).rpartition(".")[0].replace(".", "/")
        return f"{module}.py" if Path(f"{module}.py").is_file() else f"{module}/__init__.py"

    def _functions(self, file: str) -> tuple[dict[str, ast.FunctionDef | ast.AsyncFunctionDef], list[str]]:
        if file not in self._parsed:
            text = Path(file).read_text(encoding="utf-8")
            tree = ast.parse(text)
            defs = {node.name: node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
            self._parsed[file] = defs, text.splitlines()
        return self._parsed[file]

    def changed_statements(self, mutant: str) -> set[int] | None:
        """The lines (of ``..._mutmut_orig``) of the statements the mutant changes; None when it changes the signature or is not found."""
        defs, text = self._functions(self.file_of(mutant))
        short = mutant.rpartition(".")[2]
        original_name = short.rpartition("__mutmut_")[0] + "__mutmut_orig"
        mutated, original = defs.get(short), defs.get(original_name)
        if mutated is None or original is None:
            return None
        old = text[original.lineno - 1 : original.end_lineno]
        new = [line.replace(short, original_name) for line in text[mutated.lineno - 1 : mutated.end_lineno]]
        changed = set()
        for tag, start, end, _, _ in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
            if tag != "equal":
                changed.update(range(start, max(end, start + 1)))
        lines: set[int] = set()
        for offset in sorted(changed):
            line = original.lineno + offset
            if line < original.body[0].lineno:  # the signature (a default): every call runs it
                return None
            span = _statement_span(original.body, line)
            if span is None:
                return None
            lines.update(range(span[0], span[1] + 1))
        return lines or None


class MutantServer:
    """A pytest plugin that replaces the test loop: map the tests, then run the mutants.

    ``jobs`` are (mutant name, record) pairs, where ``record(name, exit code, seconds)`` stores a
    result; ``log`` prints progress. Runs in the parent process only,
    on its one thread; each child is forked from it and exits with ``os._exit``.
    """

    def __init__(
        self,
        jobs: list[tuple[str, Callable[[str, int, float], None]]],
        workers: int,
        map_dir: Path,
        fingerprint: str,
        budget_s: float = 0.0,
    ) -> None:
        self.jobs = jobs
        self.workers = max(1, workers)
        self.budget_s = budget_s  # seconds of tests per mutant, 0 for all its tests
        self.map_dir = map_dir
        self.fingerprint = fingerprint
        self.log: Callable[[str], None] = print  # serve() points it at the real stdout
        self.sources = MutatedSources()
        self.tests_of_line: dict[str, list[int]] = {}
        self.known: set[int] = set()
        self.killers: dict[str, list[int]] = defaultdict(list)  # function -> indexes of tests that killed its mutants, latest first

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        if threading.active_count() != 1:
            raise SystemExit(f"a thread runs in the fork server before any test ({threading.enumerate()}): a child would inherit it")
        items = list(session.items)
        durations, tests_of = self.map_tests(session, items)
        self.run_mutants(session, items, durations, tests_of)
        return True

    # --- the map: which tests reach which function

    def map_tests(self, session: pytest.Session, items: list[pytest.Item]) -> tuple[list[float], dict[str, list[int]]]:
        """Per test its duration, and per function the tests reaching it; from the kept map when its fingerprint holds."""
        index_file = self.map_dir / "map.json"
        if index_file.is_file():
            kept = json.loads(index_file.read_text(encoding="utf-8"))
            if kept.get("format") == MAP_FORMAT and kept["fingerprint"] == self.fingerprint and kept["tests"] == [item.nodeid for item in items]:
                self.tests_of_line, self.known = kept["tests_of_line"], set(kept["known"])
                return kept["durations"], kept["tests_of"]
        self.map_dir.mkdir(parents=True, exist_ok=True)
        for old in self.map_dir.iterdir():
            old.unlink()
        started = time.monotonic()
        chunks = [list(range(worker, len(items), self.workers)) for worker in range(self.workers)]
        rows: dict[int, dict[str, Any]] = {}
        running: dict[int, list[int]] = {}  # pid -> the chunk its child runs

        def launch(chunk: list[int], number: int) -> None:
            todo = [i for i in chunk if i not in rows]
            if todo:
                running[self._fork(lambda: self._map_child(session, items, todo, number))] = chunk

        for number, chunk in enumerate(chunks):
            launch(chunk, number)
        while running:
            pid, status = os.wait()
            chunk = running.pop(pid)
            number = chunks.index(chunk)
            self._read_rows(number, rows)
            todo = [i for i in chunk if i not in rows]
            if todo:  # the child died in a test: that test is left out, a new child takes the rest
                rows[todo[0]] = {"test": todo[0], "duration": 0.0, "failed": CRASHED, "hits": []}
                self.log(f"map: a child died in {items[todo[0]].nodeid} (exit {os.waitstatus_to_exitcode(status)}): left out")
                launch(chunk, number)
        durations = [0.0] * len(items)
        tests_of: dict[str, list[int]] = defaultdict(list)
        left_out: list[int] = []
        for index in range(len(items)):
            row = rows.get(index, {"duration": 0.0, "failed": CRASHED, "hits": []})
            durations[index] = row["duration"]
            if row["failed"]:
                left_out.append(index)
                continue
            for function in row["hits"]:
                tests_of[function].append(index)
        for index in left_out:
            self.log(f"map: left out, it fails or crashes on the unmutated code: {items[index].nodeid}")
        if not tests_of:
            raise SystemExit("map: no test reached a mutated function: the tests do not import mutmut's copy of the package")
        tests_of_line, known = self._read_lines(set(left_out))
        index_file.write_text(
            json.dumps(
                {"format": MAP_FORMAT, "fingerprint": self.fingerprint, "tests": [item.nodeid for item in items], "durations": durations, "tests_of": tests_of,
                 "tests_of_line": tests_of_line, "known": sorted(known), "left_out": [items[i].nodeid for i in left_out]}
            ),
            encoding="utf-8",
        )
        self.tests_of_line, self.known = tests_of_line, known
        self.log(f"map: {len(items)} tests, {len(tests_of)} functions reached, {len(left_out)} left out, {time.monotonic() - started:.0f} s")
        return durations, tests_of

    def _map_child(self, session: pytest.Session, items: list[pytest.Item], todo: list[int], number: int) -> int:
        """Runs ``todo``'s tests in the trampolines' "stats" mode, writing one row per test as it ends."""
        from mutmut.mutation import trampoline

        import coverage

        hits: set[str] = set()
        trampoline.record_trampoline_hit = lambda name, caller=None: hits.add(name)
        trampoline.MutmutCallStack = _NoCallStack
        trampoline.set_mutant_under_test("stats")
        lines = coverage.Coverage(data_file=str(self.map_dir / f"lines.{number}.{os.getpid()}"), include=[f"{os.getcwd()}/yiemagent/*"], config_file=False)
        lines.start()
        with open(self.map_dir / f"{number}.jsonl", "a", encoding="utf-8") as rows:
            for position, index in enumerate(todo):
                item = items[index]
                nextitem = items[todo[position + 1]] if position + 1 < len(todo) else None
                hits.clear()
                lines.switch_context(str(index))
                failed_before, started = session.testsfailed, time.perf_counter()
                item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
                row = {"test": index, "duration": time.perf_counter() - started, "failed": session.testsfailed > failed_before, "hits": sorted(hits)}
                rows.write(json.dumps(row) + "\n")
                rows.flush()
        lines.stop()
        lines.save()  # only a child that ran its whole part saves its lines: the tests of one that died are mapped by function
        (self.map_dir / f"lines.{number}.{os.getpid()}.tests").write_text(json.dumps(todo), encoding="utf-8")
        return 0

    def _read_lines(self, left_out: set[int]) -> tuple[dict[str, list[int]], set[int]]:
        """Per ``file:line`` of the package the tests that ran it, from the children that saved their lines; and those children's tests."""
        import coverage

        by_line: dict[str, set[int]] = defaultdict(set)
        known: set[int] = set()
        for done in self.map_dir.glob("lines.*.tests"):
            data = coverage.CoverageData(basename=str(done.with_suffix("")))
            data.read()
            known.update(json.loads(done.read_text(encoding="utf-8")))
            for measured in data.measured_files():
                name = os.path.relpath(measured)
                for line, contexts in data.contexts_by_lineno(measured).items():
                    by_line[f"{name}:{line}"].update(int(c) for c in contexts if c)
        return {key: sorted(tests - left_out) for key, tests in by_line.items()}, known

    def _read_rows(self, number: int, rows: dict[int, dict[str, Any]]) -> None:
        path = self.map_dir / f"{number}.jsonl"
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:  # a line cut by the child's death
                    continue
                rows[row["test"]] = row

    # --- the mutants

    def run_mutants(self, session: pytest.Session, items: list[pytest.Item], durations: list[float], tests_of: dict[str, list[int]]) -> None:
        """Each job's mutant against the tests reaching its function, ``workers`` children at a time."""
        read_end, write_end = os.pipe()  # a child writes the index of the test that killed its mutant
        os.set_blocking(read_end, False)
        running: dict[int, tuple[str, Callable[[str, int, float], None], float, float]] = {}
        queue = list(self.jobs)
        done = killed = 0
        started = time.monotonic()
        buffer = b""
        while queue or running:
            while queue and len(running) < self.workers:
                name, record = queue.pop(0)
                function = function_of(name)
                tests = self._ordered(function, self._tests_for(name, tests_of), durations)
                if not tests:
                    record(name, NO_TESTS, 0.0)
                    done += 1
                    continue
                budget = 60.0 + 3 * sum(durations[i] for i in tests)
                pid = self._fork(lambda: self._mutant_child(session, items, name, tests, write_end))
                running[pid] = (name, record, time.monotonic(), time.monotonic() + budget)
            if not running:
                break
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                now = time.monotonic()
                for child, (_, _, _, deadline) in list(running.items()):
                    if now > deadline:
                        os.kill(child, signal.SIGKILL)
                time.sleep(0.005)
                continue
            name, record, began, deadline = running.pop(pid)
            if os.WIFSIGNALED(status):  # past its deadline (killed here), or a crash the mutant caused: the tests noticed it
                code = TIMEOUT if time.monotonic() > deadline else CRASH
            else:
                code = os.waitstatus_to_exitcode(status)
            buffer = self._read_killers(read_end, buffer)
            record(name, code, time.monotonic() - began)
            done += 1
            killed += code != 0
            if done % 25 == 0:
                self.log(f"  {done} of {len(self.jobs)} mutants, {killed} killed, {time.monotonic() - started:.0f} s")
        os.close(read_end)
        os.close(write_end)

    def _tests_for(self, name: str, tests_of: dict[str, list[int]]) -> list[int]:
        """The tests reaching the mutant's function that ran one of the statements it changes (all of them when the
        change is in the signature, or its lines are not known); a test whose lines were not saved counts as running them."""
        reached = tests_of.get(function_of(name), [])
        lines = self.sources.changed_statements(name)
        if lines is None:
            return reached
        file = self.sources.file_of(name)
        ran = set().union(*(self.tests_of_line.get(f"{file}:{line}", ()) for line in lines))
        return [i for i in reached if i in ran or i not in self.known]

    def _ordered(self, function: str, tests: list[int], durations: list[float]) -> list[int]:
        first = [i for i in self.killers.get(function, []) if i in set(tests)]
        return first + sorted((i for i in tests if i not in first), key=lambda i: durations[i])

    def _read_killers(self, read_end: int, buffer: bytes) -> bytes:
        try:
            buffer += os.read(read_end, 65536)
        except BlockingIOError:
            pass
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            function, _, index = line.decode().rpartition("\t")
            killers = self.killers[function]
            if int(index) in killers:
                killers.remove(int(index))
            killers.insert(0, int(index))
        return buffer

    def _mutant_child(self, session: pytest.Session, items: list[pytest.Item], name: str, tests: list[int], write_end: int) -> int:
        """Runs ``tests`` with ``name`` switched on until one fails: exit 1 (killed), or 0 (survived)."""
        from mutmut.mutation import trampoline

        trampoline.set_mutant_under_test(name)
        started = time.monotonic()
        for position, index in enumerate(tests):
            if self.budget_s and position and time.monotonic() - started > self.budget_s:
                return BUDGET_SPENT
            item = items[index]
            nextitem = items[tests[position + 1]] if position + 1 < len(tests) else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.testsfailed:
                os.write(write_end, f"{function_of(name)}\t{index}\n".encode())
                return 1
        return 0

    @staticmethod
    def _fork(body: Callable[[], int]) -> int:
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                _quiet_child()
                code = body()
            except BaseException:  # a test that escapes pytest's protocol (KeyboardInterrupt, SystemExit): the mutant broke the run
                code = 3
            finally:
                os._exit(code)
        return pid


def serve(args: list[str], server: MutantServer) -> None:
    """``pytest.main(args)`` with ``server`` in place of the test loop, pytest's own output sent to /dev/null."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    server.log = lambda text: os.write(saved[0], (text + "\n").encode())
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    try:
        pytest.main(args, plugins=[server])
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)
