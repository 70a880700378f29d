"""`make mutate` covers every module of the package (docs/mutation.md): no module is left out of mutation testing."""

import configparser
import importlib.util

from helpers import ROOT


def _modules_on_disk() -> list[str]:
    package = ROOT / "yiemagent"
    return sorted(str(p.relative_to(package).with_suffix("")) for p in package.rglob("*.py") if "__pycache__" not in p.parts)


def _mutate_script():
    spec = importlib.util.spec_from_file_location("mutate_script", ROOT / "scripts" / "mutate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_mutate_runs_every_module_of_the_package_by_default():
    """scripts/mutate.py's DEFAULT_MODULES names each module under yiemagent/ once, a package's __init__ included."""
    defaults = _mutate_script().DEFAULT_MODULES
    assert len(defaults) == len(set(defaults))
    assert sorted(defaults) == _modules_on_disk()


def test_mutmut_makes_mutants_of_every_module_of_the_package():
    """setup.cfg's [mutmut] only_mutate lists each module's file, in the order make mutate runs them."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg", encoding="utf-8")
    listed = config["mutmut"]["only_mutate"].split()
    assert listed == [f"yiemagent/{m}.py" for m in _mutate_script().DEFAULT_MODULES]
