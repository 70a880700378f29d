"""Old import paths of moved modules keep working (docs/architecture.md, "Moved modules")."""

import importlib
import subprocess
import sys

import pytest

from helpers import ROOT
from yiemagent._moved import MOVED, SPLIT


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_gives_the_module_that_holds_its_names_now(old):
    """Importing an old path in a fresh interpreter gives the very module object of its new home, whose own spec is kept."""
    new = MOVED[old]
    code = (
        f"import importlib, {new}; assert importlib.import_module({old!r}) is {new}; "
        f"assert {new}.__spec__.name == {new!r} and importlib.reload({new}) is {new}; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


@pytest.mark.parametrize("old", sorted(SPLIT))
def test_a_split_module_path_gives_each_name_from_its_new_home(old):
    """Each public name a split module held imports from its old path as the very object of its new home."""
    code = (
        f"import importlib; old = importlib.import_module({old!r}); homes = [importlib.import_module(h) for h in {SPLIT[old]!r}]; "
        "names = [n for h in homes for n in h.__all__]; "
        "assert all(getattr(old, n) is next(getattr(h, n) for h in homes if n in h.__all__) for n in names); print(len(names))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and int(done.stdout) > 0, done.stderr


def test_an_old_path_imported_in_a_running_process_is_in_sys_modules_under_its_old_name(monkeypatch):
    """Imported where its new home is loaded already: the same module, held in `sys.modules` under the old name as any import is, with its own spec kept."""
    import yiemagent.types

    monkeypatch.delitem(sys.modules, "yiemagent.tooling", raising=False)
    assert importlib.import_module("yiemagent.tooling") is yiemagent.types
    assert sys.modules["yiemagent.tooling"] is yiemagent.types and yiemagent.types.__spec__.name == "yiemagent.types"


def test_a_split_module_path_says_where_its_names_went(monkeypatch):
    """`help(yiemagent.schema)` names the modules its names went to, in the order they are looked up."""
    import yiemagent

    monkeypatch.delitem(sys.modules, "yiemagent.schema", raising=False)
    monkeypatch.delattr(yiemagent, "schema", raising=False)
    old = importlib.import_module("yiemagent.schema")
    assert old.__doc__ == "Old path: its names are in yiemagent.pipeline, yiemagent.registry."


def test_a_split_module_path_refuses_a_name_none_of_its_homes_has():
    """`yiemagent.schema.nothing` is an AttributeError naming the old path, not a silent None."""
    import yiemagent.schema

    with pytest.raises(AttributeError, match="yiemagent.schema"):
        yiemagent.schema.nothing  # noqa: B018


def test_the_public_names_of_old_paths_import_as_before():
    """`from yiemagent.tooling import AgentTool` and `from yiemagent.function_tools import tool` still work."""
    from yiemagent.function_tools import tool as old_tool
    from yiemagent.schema import check_input_schema, validate_required_args
    from yiemagent.streaming import emit_delta
    from yiemagent.tooling import AgentTool as OldAgentTool

    import yiemagent
    import yiemagent.events
    import yiemagent.registry

    assert old_tool is yiemagent.tool
    assert OldAgentTool is yiemagent.AgentTool
    assert emit_delta is yiemagent.events.emit_delta
    assert check_input_schema is yiemagent.registry.check_input_schema and validate_required_args is yiemagent.validate_required_args


def test_every_moved_module_is_listed_in_the_architecture_doc():
    """docs/architecture.md names each old path `_moved.py` serves."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    for old in [*MOVED, *SPLIT]:
        assert f"`{old}`" in text, old


def test_a_name_that_never_existed_is_still_an_import_error():
    """The finder answers only for the old paths: any other missing module fails as usual."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("yiemagent.no_such_module")
