"""docs/conformance.md stays true: every reference in it points at real code and real tests.

Each table with a "code" and a "test" column is read row by row. A code reference is a
file under yiemagent/ (or docs/, tests/), a ``file.py::name`` whose name the module really
defines (``Class.method`` too, or an attribute its ``__init__`` sets on ``self``), or a
bare name, which belongs to the file named before it in the same cell. A file outside the
package (``README.md``, ``bench/x.py``) is named from the repository's root. A test
reference is ``test_file.py::test_name`` (a test function, a test class, or a stateful
machine's ``TestCase`` bound to a name) that the file defines, or a whole ``test_file.py``. In the Rules table, each row cites at least one test marked with its
section (``@pytest.mark.spec("<section>")``), so a row cannot cite a test about
something else.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from functools import lru_cache
from pathlib import Path

import pytest
from helpers import ROOT

DOC = ROOT / "docs" / "conformance.md"
TESTS = ROOT / "tests"
PACKAGE = ROOT / "yiemagent"
TEST_REF = re.compile(r"^(test_\w+\.py)::(\w+)$")
TEST_FILE = re.compile(r"^test_\w+\.py$")


def tables(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """(heading, header cells, rows) of every table in the doc."""
    found = []
    for heading, body in re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", text, re.M | re.S):
        lines = [line.strip() for line in body.splitlines() if line.startswith("|") and not re.fullmatch(r"[|\-: ]+", line.strip())]
        if len(lines) < 2:
            continue
        cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]
        found.append((heading, cells[0], cells[1:]))
    return found


def rule_rows() -> list[list[str]]:
    """The rows of the first table ("Rules"): [section, rule, code, test]."""
    for heading, _header, rows in tables(DOC.read_text(encoding="utf-8")):
        if heading == "Rules":
            return rows
    raise AssertionError("docs/conformance.md has no Rules table")


def references(cell: str) -> list[str]:
    """The backticked references of a cell, without call arguments: `f(x=1)` -> f."""
    return [re.sub(r"\(.*\)$", "", ref) for ref in re.findall(r"`([^`]+)`", cell)]


def find_test_file(file_name: str) -> Path:
    """A test file by its name, in whichever folder of tests/ it is (test file names are unique)."""
    found = sorted(TESTS.rglob(file_name))
    return found[0] if len(found) == 1 else TESTS / file_name


@lru_cache(maxsize=None)
def defined_tests(file_name: str) -> dict[str, set[str]]:
    """Top-level test functions and classes of a test file, each with the spec sections it is marked with."""
    path = find_test_file(file_name)
    if not path.is_file():
        return {}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            marks = set()
            for decorator in node.decorator_list:
                text = ast.unparse(decorator)
                marks.update(re.findall(r"""pytest\.mark\.spec\(\s*["']([0-9.]+)["']""", text))
            out[node.name] = marks
        elif isinstance(node, ast.Assign) and ast.unparse(node.value).endswith(".TestCase)") or (
            isinstance(node, ast.Assign) and ast.unparse(node.value).endswith(".TestCase")
        ):  # TestRaceMachine = pytest.mark.spec("5")(RaceMachine.TestCase): a stateful test bound to a name
            marks = set(re.findall(r"""pytest\.mark\.spec\(\s*["']([0-9.]+)["']""", ast.unparse(node.value)))
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id.startswith("Test"):
                    out[target.id] = marks
    return out


def code_problem(ref: str, module_path: str | None) -> tuple[str | None, str | None]:
    """(what is wrong or None, the file later bare names belong to)."""
    if "::" not in ref and (ref.endswith((".py", ".md")) or "*" in ref):
        base = ROOT if ref.startswith(("docs/", "tests/", "bench/")) or (ROOT / ref).is_file() else PACKAGE
        return (None if list(base.glob(ref)) else f"`{ref}`: no such file"), ref
    if "::" in ref:
        module_path, name = ref.split("::", 1)
    elif module_path is None:
        return f"`{ref}`: a bare name with no file named before it", None
    else:
        name = ref
    if not (PACKAGE / module_path).is_file():
        return f"`{ref}`: no such file yiemagent/{module_path}", module_path
    module = importlib.import_module("yiemagent." + module_path.removesuffix(".py").replace("/", "."))
    obj = module
    for part in name.split("."):
        if not hasattr(obj, part) and not _set_in_init(obj, part):
            return f"`{ref}`: yiemagent/{module_path} defines no {name}", module_path
        obj = getattr(obj, part, None)
    return None, module_path


def _set_in_init(owner: object, name: str) -> bool:
    """True when ``owner`` is a class whose ``__init__`` sets ``self.<name>``."""
    init = getattr(owner, "__init__", None) if isinstance(owner, type) else None
    try:
        source = inspect.getsource(init)  # type: ignore[arg-type]
    except (TypeError, OSError):
        return False
    return re.search(rf"\bself\.{re.escape(name)}\s*(:[^=]+)?=", source) is not None


def reference_problems(text: str) -> list[str]:
    problems = []
    for heading, header, rows in tables(text):
        if "code" not in header or "test" not in header:
            continue
        code_at, test_at = header.index("code"), header.index("test")
        for row in rows:
            if len(row) != len(header):
                problems.append(f"{heading}: a row with {len(row)} cells, not {len(header)}: {row}")
                continue
            module_path = None
            code_refs = references(row[code_at])
            if not code_refs:
                problems.append(f"{heading}: a row names no code: {row[1]!r}")
            for ref in code_refs:
                problem, module_path = code_problem(ref, module_path)
                if problem:
                    problems.append(f"{heading}: {problem}")
            test_refs = references(row[test_at])
            if not test_refs:
                problems.append(f"{heading}: a row names no test: {row[1]!r}")
            cited_marks: set[str] = set()
            for ref in test_refs:
                if TEST_FILE.match(ref):
                    if not find_test_file(ref).is_file():
                        problems.append(f"{heading}: `{ref}` is not a test file that exists")
                    continue
                match = TEST_REF.match(ref)
                if not match or match.group(2) not in defined_tests(match.group(1)):
                    problems.append(f"{heading}: `{ref}` is not a test that exists")
                else:
                    cited_marks |= defined_tests(match.group(1))[match.group(2)]
            if heading == "Rules" and test_refs and row[0] not in cited_marks:
                problems.append(f"Rules: the §{row[0]} row {row[1][:60]!r} cites no test marked spec({row[0]!r})")
    return problems


def test_every_code_and_test_reference_in_the_conformance_doc_exists():
    """Every file, function, class and test named in a code or test column exists; each rule row cites a test of its section."""
    text = DOC.read_text(encoding="utf-8")
    assert sum(len(rows) for _h, _c, rows in tables(text)) > 100
    assert reference_problems(text) == []


@pytest.mark.parametrize(
    "old, new, complaint",
    [
        ("`registry.py::register_tool`", "`registry.py::register_tol`", "defines no register_tol"),
        ("`loop.py::AgentCore._run_and_hand_over`", "`loop.py::AgentCore._run_and_hand_ove`", "defines no AgentCore._run_and_hand_ove"),
        ("`run.py::HistoryWriter.lock`, `HistoryWriter.store_lock`", "`run.py::HistoryWriter.lock`, `HistoryWriter.stor_lock`", "defines no HistoryWriter.stor_lock"),
        ("`test_history_hostile.py`", "`test_history_hostil.py`", "is not a test file that exists"),
        ("`test_agent_races.py::TestRaceMachine`", "`test_agent_races.py::TestRaceMachin`", "is not a test that exists"),
        ("`tools/list_tools.py::list_tools_execute`", "`tools/lists.py::list_tools_execute`", "no such file"),
        ("`test_registry.py::test_stores_are_isolated`", "`test_registry.py::test_stores_are_isolate`", "is not a test that exists"),
        ("`docs/adding-tools.md`", "`docs/adding_tools.md`", "no such file"),
        ("`test_docs.py::test_adding_a_tool_steps_work`", "`test_write_tool.py::test_self_tooling_workflow_end_to_end`", "cites no test marked spec('18')"),
    ],
)
def test_the_reference_check_notices_a_reference_to_nothing(old, new, complaint):
    """The check is not a rubber stamp: a misspelt function, file or test, or a test of another section, is reported."""
    text = DOC.read_text(encoding="utf-8")
    assert old in text
    problems = reference_problems(text.replace(old, new, 1))
    assert any(complaint in p for p in problems), problems


def marked_sections() -> set[str]:
    return {mark for path in TESTS.rglob("test_*.py") for marks in defined_tests(path.name).values() for mark in marks}


def test_every_section_in_the_conformance_table_has_a_marked_test():
    """A section listed in docs/conformance.md without a @pytest.mark.spec test fails the suite."""
    listed = {row[0] for row in rule_rows()}
    assert listed, "the Rules table is empty or could not be read"
    missing = sorted(listed - marked_sections())
    assert not missing, f"sections listed in docs/conformance.md with no marked test: {missing}"


@pytest.mark.parametrize("section", ["1", "2", "3", "4", "5", "6", "7", "8.1", "8.2", "8.3", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19"])
def test_core_sections_are_in_the_table(section):
    """The sections the core covers are all listed in the conformance table."""
    assert section in {row[0] for row in rule_rows()}


def test_only_real_and_live_tests_may_skip():
    """A fresh clone runs every test: a skip is allowed only on tests marked `real` or `live`, and it gives a reason."""
    offenders = []
    for path in TESTS.rglob("test_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module_marks = " ".join(ast.unparse(n.value) for n in tree.body if isinstance(n, ast.Assign) and "pytestmark" in ast.unparse(n.targets[0]))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and re.search(r"\b(skip|skipif|importorskip)$", ast.unparse(node.func)):
                owner = next(
                    (f for f in tree.body if isinstance(f, (ast.FunctionDef, ast.ClassDef))
                        and min([f.lineno] + [d.lineno for d in f.decorator_list]) <= node.lineno <= (f.end_lineno or 0)
                    ),
                    None,
                )
                marks = module_marks + (" ".join(ast.unparse(d) for d in owner.decorator_list) if owner else "")
                has_reason = any(k.arg == "reason" for k in node.keywords) or len(node.args) >= 1 and "skipif" not in ast.unparse(node.func)
                if not re.search(r"pytest\.mark\.(real|live)\b", marks) or not has_reason:
                    offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
