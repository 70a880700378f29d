"""make wheel-check: the package as an index would serve it (README.md "Install").

1. ``python -m build`` makes an sdist and, from that sdist, a wheel, in a temporary directory,
   from a copy of the files git knows (tracked, or new and not ignored): what a clone holds,
   without the ``yiemagent.egg-info`` an editable install leaves, whose file list setuptools
   would add to the sdist (hiding a package the configuration leaves out);
2. ``twine check --strict`` accepts both (the README, the long description, renders);
3. the wheel is installed into a fresh virtualenv under ``build/wheel-check/`` and, from a
   directory outside the source tree, ``python -m yiemagent demo`` exits 0 and prints its
   opening lines, with ``yiemagent`` imported from that virtualenv, not from the tree.

``build`` and ``twine`` are installed by the Makefile target; the virtualenv's dependencies
come from the package index, as a user's would. Exits non-zero naming the step that failed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / "build" / "wheel-check" / "venv"
# the demo's opening: its banner on stderr and the first scene on stdout (cli/demo.py); a later
# scene may depend on the network (getWeather), so only the opening is held
OPENING_ERR = "yiemagent demo: offline"
OPENING_OUT = ("[1/", "you> ")


def run(step: str, argv: list, **kwargs) -> subprocess.CompletedProcess:
    """Run one step; exit naming it, with its output, when it fails."""
    print(f"wheel-check: {step}", flush=True)
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        sys.exit(f"wheel-check: {step} failed (exit {done.returncode})\n{done.stdout}\n{done.stderr}")
    return done


def clean_copy(into: Path) -> Path:
    """The files of the tree a clone would hold, copied under ``into``."""
    listed = run("git ls-files", ["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"]).stdout
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)
    return into


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="yiemagent-dist-") as dist, tempfile.TemporaryDirectory(prefix="yiemagent-cwd-") as cwd, \
            tempfile.TemporaryDirectory(prefix="yiemagent-src-") as src:
        source = clean_copy(Path(src))
        run("python -m build (an sdist, then a wheel from it)", [sys.executable, "-m", "build", "--outdir", dist, source])
        files = sorted(Path(dist).iterdir())
        wheels = [f for f in files if f.suffix == ".whl"]
        if len(wheels) != 1 or not any(f.name.endswith(".tar.gz") for f in files):
            sys.exit(f"wheel-check: expected one wheel and one sdist, found {[f.name for f in files]}")
        print(run("twine check --strict", [sys.executable, "-m", "twine", "check", "--strict", *files]).stdout, end="")

        shutil.rmtree(VENV, ignore_errors=True)
        print(f"wheel-check: a fresh virtualenv in {VENV.relative_to(ROOT)}", flush=True)
        venv.create(VENV, with_pip=True)
        python = VENV / "bin" / "python"
        run(f"pip install {wheels[0].name}", [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheels[0]])

        env = {"PATH": f"{VENV / 'bin'}:/usr/bin:/bin", "HOME": cwd, "LANG": "C.UTF-8"}  # no PYTHONPATH: nothing of the tree
        where = run("import yiemagent", [python, "-c", "import yiemagent; print(yiemagent.__file__)"], cwd=cwd, env=env).stdout.strip()
        if not Path(where).is_relative_to(VENV):
            sys.exit(f"wheel-check: yiemagent was imported from {where}, not from the virtualenv")
        demo = run("python -m yiemagent demo", [python, "-m", "yiemagent", "demo"], cwd=cwd, env=env, timeout=300)
        if not demo.stderr.startswith(OPENING_ERR) or not all(line in demo.stdout for line in OPENING_OUT):
            sys.exit(f"wheel-check: the demo's opening lines are missing\n{demo.stdout}\n{demo.stderr}")
        run("yiemagent --help (the console script)", [VENV / "bin" / "yiemagent", "--help"], cwd=cwd, env=env)
        print(f"wheel-check: ok: {', '.join(f.name for f in files)}; the demo ran from {cwd} with {where}")


if __name__ == "__main__":
    main()
