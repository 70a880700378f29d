"""The code in README.md and docs/adding-tools.md runs as printed (spec §18)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT



def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def this_tree() -> dict:
    """The environment of a README example: it imports this tree's package, whichever is installed."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def console_sessions(path: Path) -> list[list[tuple[str, list[str]]]]:
    """Each ```console block of ``path``: its ``$ command`` lines, each with the lines it prints."""
    sessions = []
    for block in re.findall(r"```console\n(.*?)```", path.read_text(encoding="utf-8"), re.S):
        steps: list[tuple[str, list[str]]] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
        sessions.append(steps)
    return sessions


@pytest.mark.spec("18")
def test_adding_a_tool_steps_work(tmp_path):
    """§18 in Python: the tool file of step 1, imported (step 2) and registered (step 3), is called by an agent."""
    tool_file, _app, register = python_blocks(ROOT / "docs" / "adding-tools.md")[:3]
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "searchWine.py").write_text(tool_file)
    script = (
        "from tools.searchWine import searchWine_tool\n"
        "from yiemagent.llm import ScriptedLLM\n"
        "from yiemagent.llm.scripted import tool_call_reply\n"
        "my_llm_call = ScriptedLLM([tool_call_reply(('c1', 'searchWine', {'query': ' Cabernet '})), 'done'])\n"
        + register
        + "from yiemagent import run_agent, take_response, shutdown\n"
        "run_agent(agent, 'cabernet?'); take_response(agent, timeout=10)\n"
        "print(agent.history()[2].content[0].text)\n"
        "shutdown(agent)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=this_tree(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Found 2 wines: Opus One 2019, Caymus 2021"


@pytest.mark.parametrize("index", range(len(python_blocks(ROOT / "README.md"))))
def test_readme_examples_run(index, tmp_path):
    """Every Python example in the README runs, and prints each output it shows after "# ->"."""
    block = python_blocks(ROOT / "README.md")[index]
    out = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=this_tree(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    shown = re.findall(r"# -> (.+)$", block, re.M)
    assert shown, "each README example shows what it prints"
    for line in shown:
        assert line.strip() in out.stdout, f"README shows {line!r}; the example printed:\n{out.stdout}"


@pytest.mark.parametrize("index", range(len(console_sessions(ROOT / "README.md"))))
def test_readme_console_sessions_print_what_they_show(index, tmp_path):
    """Each ```console session of the README (`$ python examples/...`), run in one fresh directory in turn, prints exactly the lines shown."""
    steps = console_sessions(ROOT / "README.md")[index]
    assert steps, "a console session shows at least one command"
    for command, shown in steps:
        program, script, *args = shlex.split(command)
        assert program == "python" and script.startswith("examples/"), f"README runs only examples/ scripts with python: {command!r}"
        out = subprocess.run([sys.executable, ROOT / script, *args], cwd=tmp_path, env=this_tree(), capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == shown, f"README shows for {command!r}:\n{shown}\nit printed:\n{out.stdout}"

