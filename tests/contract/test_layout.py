"""The package's layout keeps what docs/architecture.md promises: a short path for a run, a small top level."""

import subprocess
import sys

from helpers import ROOT

MAX_MODULES_ON_A_RUNS_PATH = 18  # 16 until the round's cost was cut: the schema's fast check (_fast_schema) and the sub-runs' usage (_sub_runs) are ideas of their own
MAX_TOP_LEVEL_MODULES = 26


def test_a_run_of_two_parallel_tool_calls_enters_at_most_18_of_the_packages_modules():
    """scripts/trace_run.py (sys.setprofile in every thread) counts the modules one ScriptedLLM run enters."""
    done = subprocess.run(
        [sys.executable, "scripts/trace_run.py", "--max", str(MAX_MODULES_ON_A_RUNS_PATH)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_packages_top_level_holds_at_most_26_modules():
    """Subpackages hold the extensions and the private machinery that grew beyond one module (docs/architecture.md)."""
    modules = sorted(p.name for p in (ROOT / "yiemagent").glob("*.py"))
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, modules


def test_every_module_and_subpackage_has_its_line_in_the_architecture_doc():
    """docs/architecture.md gives each top-level module (the face apart) and each subpackage one line."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    package = ROOT / "yiemagent"
    names = [p.name for p in package.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    names += [f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").exists()]
    assert [name for name in names if f"`{name}`" not in text] == []
