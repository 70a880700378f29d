"""Check named mutants against chosen tests by applying each to the source itself.

``make mutate`` runs each mutant through mutmut's trampolines. Some survivors need a second
look outside it: code that runs at import (mutmut cannot switch it on), a survivor a new test
should now kill, a module whose test map mutmut has not rebuilt. For each name this script
takes the mutant's diff (``mutmut show``, from the ``mutants/`` of the last ``make mutate``),
writes the mutated text into ``yiemagent/``, runs the tests, and writes the original text
back, whatever happened. The diff's lines are looked for in the mutant's own function only,
indented as it is (mutmut shows a method at the left margin; the same lines may stand in
another function too, where applying them would test another mutant). It prints ``killed``, ``SURVIVES`` or ``not applied`` (the code
changed since mutmut made the mutant) for each.

    .venv/bin/python scripts/check_mutants.py --tests "tests/spec/test_batch.py" yiemagent.batch.x_f__mutmut_3 ...

A mutant written by hand (one a report names, before mutmut has made it) is given as
``--by-hand FILE OLD NEW``: the one occurrence of OLD in FILE is replaced by NEW (``\\n``
in OLD and NEW is a line break), repeatable:

    .venv/bin/python scripts/check_mutants.py --tests "tests/llm/test_llm_http.py" \\
        --by-hand yiemagent/llm/_http.py "{429, 503, 529}" "{429, 503}"

The tests must pass on the unmutated code first, or nothing is checked.
"""

from __future__ import annotations

import argparse
import ast
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def mutant_diff(name: str) -> str | None:
    """The mutant's diff, or None when mutmut no longer has it (its function changed)."""
    shown = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=ROOT, capture_output=True, text=True)
    return shown.stdout if shown.returncode == 0 else None


def function_span(name: str, original: str) -> tuple[int, int, int] | None:
    """(first offset, end offset, indent) in ``original`` of the function a mutant's name names, or None.

    ``yiemagent.m.x_f__mutmut_3`` names function ``f``; ``yiemagent.m.xǁCǁf__mutmut_3`` method
    ``f`` of class ``C``. mutmut shows a method's mutant dedented to the left margin, and the
    same lines may stand in another function too: the diff is looked for in this span only.
    """
    mangled = name.rsplit(".", 1)[-1].rsplit("__mutmut_", 1)[0]
    if mangled.startswith("xǁ"):
        owner, function = mangled[2:].split("ǁ", 1)
    elif mangled.startswith("x_"):
        owner, function = None, mangled[2:]
    else:
        return None
    scope: list[ast.stmt] = ast.parse(original).body
    if owner is not None:
        scope = next((node.body for node in scope if isinstance(node, ast.ClassDef) and node.name == owner), [])
    node = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function), None)
    if node is None:
        return None
    lines = original.splitlines(keepends=True)
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return sum(map(len, lines[: first - 1])), sum(map(len, lines[: node.end_lineno])), node.col_offset


def mutated_text(diff: str | None, name: str = "") -> tuple[Path, str, str] | None:
    """(file, original text, mutated text), or None when the diff's lines are not found exactly once in the mutant's function."""
    if diff is None:
        return None
    lines = diff.splitlines()
    path = ROOT / next(line[4:] for line in lines if line.startswith("--- "))
    body = [line for line in lines if line[:1] in "-+ " and not line.startswith(("--- ", "+++ "))]
    original = path.read_text(encoding="utf-8")
    start, end, indent = function_span(name, original) or (0, len(original), 0)
    segment = original[start:end]

    def indented(line: str) -> str:
        return " " * indent + line if line.strip() else line

    # the whole hunk first; then only its changed lines (a hunk's context may have moved)
    for keep in ("- ", "-"):
        old = "\n".join(indented(line[1:]) for line in body if line[:1] in keep)
        new = "\n".join(indented(line[1:]) for line in body if line[:1] in keep.replace("-", "+"))
        if segment.count(old) == 1:
            return path, original, original[:start] + segment.replace(old, new) + original[end:]
    return None


def by_hand(file: str, old: str, new: str) -> tuple[Path, str, str] | None:
    """(file, original text, mutated text) for a hand-written mutant, or None when OLD is not found exactly once."""
    path = ROOT / file
    original = path.read_text(encoding="utf-8")
    old, new = (s.replace("\\n", "\n") for s in (old, new))
    return (path, original, original.replace(old, new)) if original.count(old) == 1 else None


def tests_pass(tests: list[str], timeout_s: float | None = None) -> bool:
    """Whether the tests pass; a run past ``timeout_s`` (a mutant that makes them hang) counts as failing, as mutmut counts a timeout."""
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", "-p", "no:cacheprovider", "--timeout=20", *tests]
    try:
        return subprocess.run(command, cwd=ROOT, capture_output=True, timeout=timeout_s).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", required=True, help="the pytest arguments, as one string")
    parser.add_argument("names", nargs="*", help="mutant names, as mutmut prints them")
    parser.add_argument("--by-hand", nargs=3, action="append", default=[], metavar=("FILE", "OLD", "NEW"), help="a mutant written by hand")
    args = parser.parse_args()
    if not args.names and not args.by_hand:
        parser.error("name a mutant, or give one --by-hand")
    tests = shlex.split(args.tests)
    started = time.monotonic()
    if not tests_pass(tests):
        print("the tests fail on the unmutated code: nothing checked", file=sys.stderr)
        return 2
    timeout_s = max(60.0, 10 * (time.monotonic() - started))
    survivors = 0
    changes = [(name, lambda name=name: mutated_text(mutant_diff(name), name)) for name in args.names]
    changes += [(f"{file}: {old!r} -> {new!r}", lambda f=file, o=old, n=new: by_hand(f, o, n)) for file, old, new in args.by_hand]
    for name, make in changes:
        change = make()
        if change is None:
            print(f"{name}: not applied (the code changed since mutmut made it, or the text is not found exactly once)")
            continue
        path, original, mutated = change
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # finally below runs on kill too
        path.write_text(mutated, encoding="utf-8")
        try:
            killed = not tests_pass(tests, timeout_s)
        finally:
            path.write_text(original, encoding="utf-8")
        survivors += not killed
        print(f"{name}: {'killed' if killed else 'SURVIVES'}", flush=True)
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
