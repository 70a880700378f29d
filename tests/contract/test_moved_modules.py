"""Old import paths of moved modules keep working (docs/architecture.md, "Moved modules")."""

import importlib
import subprocess
import sys

import pytest

from helpers import ROOT
from yiemagent._moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_gives_the_module_that_holds_its_names_now(old):
    """Importing an old path in a fresh interpreter gives the very module object of its new home."""
    new = MOVED[old]
    code = f"import importlib, {new}; assert importlib.import_module({old!r}) is {new}; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


def test_the_public_names_of_old_paths_import_as_before():
    """`from yiemagent.tooling import AgentTool` and `from yiemagent.function_tools import tool` still work."""
    from yiemagent.function_tools import tool as old_tool
    from yiemagent.tooling import AgentTool as OldAgentTool

    import yiemagent

    assert old_tool is yiemagent.tool
    assert OldAgentTool is yiemagent.AgentTool


def test_every_moved_module_is_listed_in_the_architecture_doc():
    """docs/architecture.md names each old path `_moved.py` serves."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    for old in MOVED:
        assert f"`{old}`" in text, old


def test_a_name_that_never_existed_is_still_an_import_error():
    """The finder answers only for the old paths: any other missing module fails as usual."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("yiemagent.no_such_module")
