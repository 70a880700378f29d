"""The package as it is installed and read: its import paths, its own docstring, and the wheel (docs/api.md, README.md "Install")."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from helpers import ROOT


def _run(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter importing this tree's package."""
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_the_streaming_path_gives_the_side_channels_names():
    """`yiemagent.streaming` (docs/api.md "Streaming side channel") gives the very objects of `yiemagent.events`."""
    import yiemagent.events
    import yiemagent.streaming

    for name in ("stream_to", "emit_delta", "current_abort_signal", "current_stream"):
        assert getattr(yiemagent.streaming, name) is getattr(yiemagent.events, name)
    assert sorted(yiemagent.streaming.__all__) == ["current_abort_signal", "current_stream", "emit_delta", "stream_to"]


@pytest.mark.parametrize(
    "old",
    ["yiemagent.tooling", "yiemagent.sessions", "yiemagent.console", "yiemagent.demo", "yiemagent.stream_relay",
     "yiemagent.usage", "yiemagent.messages", "yiemagent.channels", "yiemagent.function_tools",
     "yiemagent.schema"],
)
def test_a_module_path_that_was_never_published_is_not_importable(old):
    """Paths of modules from before the package's layout followed the spec are gone: each import is a ModuleNotFoundError."""
    done = _run(f"import importlib\ntry:\n    importlib.import_module({old!r})\nexcept ModuleNotFoundError as e:\n    print('missing', e.name)\n")
    assert done.stdout.split() == ["missing", old], done.stdout + done.stderr


def test_every_folder_of_python_files_is_a_package_the_wheel_ships():
    """setup.cfg's package list finds each folder of yiemagent/ that holds Python files (make wheel-check runs the wheel itself)."""
    import configparser
    import json
    import subprocess
    import sys

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    include = [p.strip() for p in config["options.packages.find"]["include"].split(",")]
    # in a process of its own: setuptools' distutils hack asserts when another test imported
    # the standard library's distutils first (the result then hung on the tests' order)
    script = "import json, sys; from setuptools import find_packages; print(json.dumps(find_packages(sys.argv[1], include=json.loads(sys.argv[2]))))"
    out = subprocess.run([sys.executable, "-c", script, str(ROOT), json.dumps(include)], capture_output=True, text=True, check=True)
    found = set(json.loads(out.stdout))
    folders = {
        ".".join(d.relative_to(ROOT).parts) for d in (ROOT / "yiemagent").rglob("*")
        if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py"))
    } | {"yiemagent"}
    assert found == folders


def test_make_lint_checks_the_oldest_python_the_package_supports_and_ci_runs_it():
    """setup.cfg's [mypy] python_version is python_requires' lowest version (a 3.11-only name is an error), and .ci/run runs make lint after make test."""
    import configparser

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    oldest = re.fullmatch(r">=\s*(\d+\.\d+)", config["options"]["python_requires"].strip())
    assert oldest is not None and config["mypy"]["python_version"] == oldest.group(1)
    assert config["mypy"].getboolean("strict")
    steps = [line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if line.startswith("make ")]
    assert steps[:2] == ["make test", "make lint"]


def _docstring_paragraph(title: str) -> list[str]:
    """The indented lines under ``title`` in yiemagent's docstring."""
    import yiemagent

    text = yiemagent.__doc__ or ""
    start = text.index(title)
    body = text[start:].split("\n\n", 1)[0].splitlines()[1:]
    assert body and all(line.startswith("    ") for line in body), body
    return [line.strip() for line in body]


def test_the_package_docstring_fits_one_screen():
    """`help(yiemagent)` opens with a docstring of at most 40 lines of at most 79 characters."""
    import yiemagent

    lines = (yiemagent.__doc__ or "").splitlines()
    assert 10 <= len(lines) <= 40, len(lines)
    assert max(len(line) for line in lines) <= 79


def test_the_package_docstring_names_five_names_to_start_with_and_each_exists():
    """The five names to start with are the package's own (or its clients', yiemagent.llm)."""
    import yiemagent
    import yiemagent.llm

    names = [re.match(r"(\w+)\(", line).group(1) for line in _docstring_paragraph("Start with five names:")]
    assert len(names) == 5
    assert [n for n in names if n not in yiemagent.__all__ and n not in yiemagent.llm.__all__] == []


def test_the_package_docstring_says_where_each_module_lives_and_each_exists():
    """Every module or folder the docstring places is in the package, and every subpackage is placed."""
    listed = [name for line in _docstring_paragraph("Where each part lives") for name in re.split(r",\s*", re.split(r"\s{2,}", line)[0])]
    assert [n for n in listed if not (ROOT / "yiemagent" / (n if n.endswith("/") else f"{n}.py")).exists()] == []
    subpackages = {f"{p.name}/" for p in (ROOT / "yiemagent").iterdir() if (p / "__init__.py").exists()}
    assert subpackages - set(listed) <= {"mcp/", "otel/", "celery/"}  # the extras, in their own paragraph


def test_the_package_docstring_names_each_extra_and_the_docs_the_wheel_lacks_as_such():
    """The extras are setup.cfg's (the test one apart); each document named exists in the source tree, which the docstring says the wheel lacks."""
    import configparser

    import yiemagent

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    extras = {name for name in config["options.extras_require"] if name != "test"}
    assert {line.split()[0] for line in _docstring_paragraph("Extras")} == extras
    text = yiemagent.__doc__ or ""
    documents = re.findall(r"\b((?:docs/)?[\w-]+\.md)\b", text)
    assert "docs/api.md" in documents and "README.md" in documents
    assert [d for d in documents if not (ROOT / d).is_file()] == []
    assert "in the source tree" in text and "not in the wheel" in text
