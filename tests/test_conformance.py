"""docs/conformance.md stays true: every listed section has a test, every named test exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "conformance.md"
TESTS = ROOT / "tests"
MARK = re.compile(r"""@pytest\.mark\.spec\(\s*["']([0-9.]+)["']\s*\)""")
NAMED_TEST = re.compile(r"`(test_\w+\.py)::(test_\w+)`")


def rule_rows() -> list[list[str]]:
    """The rows of the first table ("Rules"): [section, rule, code, test]."""
    text = DOC.read_text(encoding="utf-8")
    table = text.split("## Rules", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in table.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows[1:] if not set(row[0].strip()) <= {"-"}]


def marked_sections() -> set[str]:
    found = set()
    for path in TESTS.glob("test_*.py"):
        found.update(MARK.findall(path.read_text(encoding="utf-8")))
    return found


def test_every_section_in_the_conformance_table_has_a_marked_test():
    """A section listed in docs/conformance.md without a @pytest.mark.spec test fails the suite."""
    listed = {row[0] for row in rule_rows()}
    assert listed, "the Rules table is empty or could not be read"
    missing = sorted(listed - marked_sections())
    assert not missing, f"sections listed in docs/conformance.md with no marked test: {missing}"


def test_every_test_named_in_the_conformance_doc_exists():
    """Each `file.py::test_name` in docs/conformance.md names a real test function."""
    named = NAMED_TEST.findall(DOC.read_text(encoding="utf-8"))
    assert named
    absent = []
    for file_name, test_name in named:
        path = TESTS / file_name
        if not path.exists() or not re.search(rf"^def {test_name}\(", path.read_text(encoding="utf-8"), re.M):
            absent.append(f"{file_name}::{test_name}")
    assert not absent, f"docs/conformance.md names tests that do not exist: {absent}"


@pytest.mark.parametrize("section", ["1", "2", "3", "4", "5", "6", "7", "8.1", "8.2", "8.3", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19"])
def test_core_sections_are_in_the_table(section):
    """The sections the core covers are all listed in the conformance table."""
    assert section in {row[0] for row in rule_rows()}
