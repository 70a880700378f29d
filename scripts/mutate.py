"""`make mutate`: mutation testing of the package with mutmut 3, one module at a time.

For each module (or package) named on the command line — by default every module of the
package, ``DEFAULT_MODULES`` — it runs ``mutmut run "yiemagent.<module>.*" --max-children N`` and
prints that module's score: the share of mutants the test suite kills (a timeout counts
as killed: the suite noticed). Mutants docs/mutation.md lists as equivalent (a change no
test can see, each with its reason) are left out of the adjusted score. mutmut keeps its
results in ./mutants, so a second run retests only what changed.

One worker by default (``--workers 1``), since the machine may be shared. Each mutant reruns
the tests that cover its function (hypothesis profile "mutate": 20 examples) until one
fails, so a killed mutant costs a fraction of a second and a survivor of a module every
test goes through (pipeline, run, the agent core) costs the whole suite: the whole set
takes hours. Name modules to run a part:
``make mutate MODULES="tools/_tool_source tools/write_tool registry" WORKERS=2``.

``--tests "<pytest arguments>"`` (``make mutate TESTS=...``) runs the mutants against those
tests in a fork server of this script's own, without mutmut's traced run of the whole
suite, which crashes here (``run_against``; docs/mutation.md says when and why).
"""

from __future__ import annotations

import argparse
import configparser
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from collections.abc import Sequence

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = ROOT / "mutants"
EQUIVALENTS_DOC = ROOT / "docs" / "mutation.md"
# Every module of the package, each scored on its own (a package's ``__init__`` too). The spec
# modules first, as before; then the rest, smallest risk first. tests/contract/test_mutation_setup.py
# holds this list and setup.cfg's only_mutate to every module under yiemagent/.
SPEC_MODULES = [
    "tools/__init__", "tools/list_tools", "tools/get_time", "tools/get_weather", "tools/_tool_source", "tools/write_tool",
    "pipeline", "batch", "extraction", "registry", "run", "agent", "run_stream", "loop", "_failures", "formatting",
]
OTHER_MODULES = [
    "history/_json", "history/_stored", "history/files", "history/sessions", "history/_locked_files", "history/postgres", "history/__init__",
    "llm/_sse", "llm/_http", "llm/_wire", "llm/_anthropic_reply", "llm/_client", "llm/_guard", "llm/_openai_reply", "llm/_openai_request", "llm/openai", "llm/anthropic",
    "llm/_responses_reply", "llm/responses", "llm/fallback", "llm/offline", "llm/scripted", "llm/__init__",
    "_secrets", "_log_masking", "_bounds", "_threads", "_format_cache", "_fast_schema", "_sub_runs",
    "types", "events", "streaming", "normalize", "approvals", "tokens", "errors", "__init__", "__main__",
    "typed/_codecs", "typed/_execute", "typed/functions", "typed/_parameter_fill", "typed/output", "typed/__init__",
    "context/compaction", "context/_summary", "context/__init__",
    "tools/agent_tool",
    "cli/console", "cli/commands", "cli/demo", "cli/_weather_service", "cli/__init__",
    "mcp/_convert", "mcp/_core", "mcp/_follow", "mcp/_listing", "mcp/_session", "mcp/_stdio", "mcp/_surrogates", "mcp/client", "mcp/__init__",
    "otel/_content", "otel/_spans", "otel/export", "otel/sink", "otel/__init__",
    "celery/_turns", "celery/_redis", "celery/_consumer", "celery/service", "celery/__init__",
]
DEFAULT_MODULES = SPEC_MODULES + OTHER_MODULES
KILLED = {1, 3, 36, 37, -24, 24, 152, 255}  # mutmut's "killed", "timeout", "caught by type check"
SURVIVED = {0, 5, 33, 34}  # "survived", "no tests", "survived its time budget" (scripts/mutant_server.py)


def _names_in_section(title: str) -> set[str]:
    """Mutant names (in backticks) in one ``## <title>`` section of docs/mutation.md."""
    if not EQUIVALENTS_DOC.is_file():
        return set()
    text = EQUIVALENTS_DOC.read_text(encoding="utf-8")
    start = text.find(f"## {title}")
    if start < 0:
        return set()
    end = text.find("\n## ", start + 1)
    section = text[start : end if end >= 0 else len(text)]
    return set(re.findall(r"`(yiemagent\.[\w.ǁ]+__mutmut_\d+)`", section))


def equivalents() -> set[str]:
    """Survivors docs/mutation.md lists as equivalent: they behave like the original."""
    return _names_in_section("Equivalent mutants")


def switched_on_by_hand() -> set[str]:
    """Survivors mutmut cannot switch on (code run at import) that docs/mutation.md lists as
    killed when applied to the source: counted as killed, and named in the report."""
    return _names_in_section("Mutants mutmut cannot switch on")


def results(module: str) -> dict[str, int | None]:
    """Exit code by mutant name for one module, from mutmut's .meta files."""
    path = MUTANTS / "yiemagent" / module
    metas = sorted(path.rglob("*.py.meta")) if path.is_dir() else [path.parent / f"{path.name}.py.meta"]
    codes: dict[str, int | None] = {}
    for meta in metas:
        if meta.is_file():
            codes.update(json.loads(meta.read_text(encoding="utf-8")).get("exit_code_by_key", {}))
    return codes


def score(module: str, equivalent: set[str], by_hand: set[str] = frozenset()) -> str:
    codes = results(module)
    counts = Counter("killed" if c in KILLED else "survived" if c in SURVIVED else "not run" if c is None else "other" for c in codes.values())
    survivors = sorted(n for n, c in codes.items() if c in SURVIVED)
    killed_by_hand = [n for n in survivors if n in by_hand]
    judged = [n for n in survivors if n in equivalent]
    killed = counts["killed"] + len(killed_by_hand)
    checked = counts["killed"] + counts["survived"]
    raw = 100 * killed / checked if checked else 0.0
    adjusted = 100 * killed / (checked - len(judged)) if checked - len(judged) else 0.0
    line = (
        f"{module:<12} {len(codes):>4} mutants  killed {killed:>4}"
        + (f" ({len(killed_by_hand)} applied by hand)" if killed_by_hand else "")
        + f"  survived {counts['survived'] - len(killed_by_hand):>4}"
        + (f" ({budget} within a time budget)" if (budget := sum(c == 34 for c in codes.values())) else "")
        + f"  (equivalent {len(judged)})  not run {counts['not run']}  other {counts['other']}"
        f"  score {raw:5.1f}%  without equivalents {adjusted:5.1f}%"
    )
    return line + "".join(f"\n    survivor: {n}" for n in survivors if n not in equivalent and n not in by_hand)


def pattern(module: str) -> str:
    """mutmut's glob for one module's mutants. A package's own ``__init__`` needs care: mutmut
    names its mutants ``yiemagent.tools.x_...`` (no ``__init__``), and ``yiemagent.tools.*``
    would take in every module of the package too."""
    dotted = "yiemagent." + module.replace("/", ".")
    if dotted.endswith(".__init__"):
        return dotted.removesuffix("__init__") + "x*"
    return dotted + ".*"


def generate_mutants() -> int:
    """mutmut's first step alone: copy the tree into ./mutants and write the mutants of every
    module (only those of changed functions after the first time), without its traced run."""
    os.chdir(ROOT)
    from mutmut import __main__ as mm

    os.makedirs("mutants", exist_ok=True)
    mm.copy_src_dir()
    mm.copy_also_copy_files()
    mm.setup_source_paths()
    mm.store_lines_covered_by_tests()
    mm.create_mutants(1)
    return 0


def _pytest_args(tests: list[str]) -> list[str]:
    """``tests`` (by default setup.cfg's ``[mutmut] pytest_add_cli_args_test_selection``) with its ``pytest_add_cli_args``."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg", encoding="utf-8")
    section = config["mutmut"]
    tests = tests or section.get("pytest_add_cli_args_test_selection", "tests/").split()
    added = [line.strip() for line in section.get("pytest_add_cli_args", "").splitlines() if line.strip()]
    return [*tests, *added, "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]


def run_mutants(modules: list[str], tests: list[str], workers: int, budget_s: float, only: Sequence[str] = ()) -> None:
    """Each mutant of ``modules`` not yet killed, run by the fork server (scripts/mutant_server.py) against
    the tests that reach its function. Results go to mutmut's ``.meta`` files, so the score, ``--report-only``
    and ``mutmut show`` read them as mutmut's own; a mutant already killed is not rerun. ``only``: globs of
    mutant names (``fnmatch``, e.g. ``yiemagent.run.x__rounds__mutmut_*``); when given, the other mutants wait."""
    from mutant_server import MutantServer, fingerprint, serve

    shutil.copytree(ROOT / "tests", MUTANTS / "tests", dirs_exist_ok=True)  # the tests as they are now
    args = _pytest_args(tests)
    jobs = []
    for module in modules:
        path = MUTANTS / "yiemagent" / module
        for meta in sorted(path.rglob("*.py.meta")) if path.is_dir() else [path.parent / f"{path.name}.py.meta"]:
            if not meta.is_file():
                continue
            data = json.loads(meta.read_text(encoding="utf-8"))

            def record(name: str, code: int, seconds: float, meta: Path = meta, data: dict = data) -> None:
                data["exit_code_by_key"][name] = code
                data.setdefault("durations_by_key", {})[name] = seconds
                meta.write_text(json.dumps(data, indent=4), encoding="utf-8")

            jobs += [
                (name, record)
                for name, code in sorted(data["exit_code_by_key"].items())
                if code not in KILLED and (not only or any(fnmatch.fnmatchcase(name, glob) for glob in only))
            ]
    print(f"{len(jobs)} mutants to run in {len(modules)} modules, {workers} at a time", flush=True)
    if not jobs:
        return
    server = MutantServer(jobs, workers, MUTANTS / "tests-map", fingerprint(ROOT, args), budget_s)
    os.chdir(MUTANTS)
    sys.path[:0] = [str(MUTANTS)]
    os.environ.update(HYPOTHESIS_PROFILE="mutate", PY_IGNORE_IMPORTMISMATCH="1", MUTANT_UNDER_TEST="")
    try:
        serve(args, server)
    finally:
        os.chdir(ROOT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", default=DEFAULT_MODULES, help="modules or packages under yiemagent/")
    parser.add_argument("--report-only", action="store_true", help="print the scores of the last run without running")
    parser.add_argument("--workers", type=int, default=1, help="mutants tested at once (default 1)")
    parser.add_argument("--tests", help="pytest arguments (one string) naming the tests to map and run; default setup.cfg's test selection")
    parser.add_argument(
        "--budget", type=float, default=0.0,
        help="seconds of tests per mutant (0, the default: all its tests); a mutant alive when they are spent is a survivor "
        "marked 'budget', which a run without --budget tests whole",
    )
    parser.add_argument("--generate-only", action="store_true", help="only write the mutants into ./mutants (see generate_mutants)")
    parser.add_argument(
        "--only", action="append", default=[],
        help="a glob of mutant names to run (fnmatch; repeatable), e.g. 'yiemagent.run.x__rounds__mutmut_*'; the module's others wait",
    )
    parser.add_argument("--no-generate", action="store_true", help="use the mutants ./mutants holds, without regenerating them")
    args = parser.parse_args()
    if args.generate_only:
        return generate_mutants()
    if not args.report_only and not args.no_generate:
        subprocess.run([sys.executable, __file__, "--generate-only"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    if not args.report_only:
        run_mutants(args.modules, shlex.split(args.tests or ""), args.workers, args.budget, args.only)
    equivalent, by_hand = equivalents(), switched_on_by_hand()
    for module in args.modules:
        print(score(module, equivalent, by_hand), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
