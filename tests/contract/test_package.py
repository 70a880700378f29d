"""The package as it is installed and read: its import paths, its own docstring, and the wheel (docs/api.md, README.md "Install")."""

from __future__ import annotations

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

    from setuptools import find_packages

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    include = [p.strip() for p in config["options.packages.find"]["include"].split(",")]
    found = set(find_packages(str(ROOT), include=include))
    folders = {
        ".".join(d.relative_to(ROOT).parts) for d in (ROOT / "yiemagent").rglob("*")
        if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py"))
    } | {"yiemagent"}
    assert found == folders
