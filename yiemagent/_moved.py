"""Old import paths of modules that moved, kept working (docs/architecture.md "Moved modules").

The package was regrouped so that its layout follows the spec; a script that imported a
module by its old name (``from yiemagent.tooling import AgentTool``) must not break. Each
old name below is served by the module that now holds what it held: importing the old
name gives that very module object (``yiemagent.tooling is yiemagent.types``), loaded
only when first asked for. A module whose names went to several homes (``SPLIT``) is
served by a module of its own name that finds each name in its new home. ``from yiemagent
import X`` is unaffected: it always was, and stays, the way to import.

Thread safety: the import system's own lock serialises ``find_spec``; the table is read-only.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Optional, Sequence

__all__ = ["MOVED", "SPLIT"]

MOVED = {
    "yiemagent.tooling": "yiemagent.types",
    "yiemagent.sessions": "yiemagent.history.sessions",
    "yiemagent.console": "yiemagent.cli.console",
    "yiemagent.demo": "yiemagent.cli.demo",
    "yiemagent.stream_relay": "yiemagent.events",
    "yiemagent.streaming": "yiemagent.events",
    "yiemagent.limits": "yiemagent.run",
    "yiemagent.usage": "yiemagent.types",
    "yiemagent.messages": "yiemagent.types",
    "yiemagent.channels": "yiemagent.loop",
    "yiemagent.function_tools": "yiemagent.typed.functions",
}
"""Old module name -> the module that holds its names now."""

SPLIT = {
    "yiemagent.schema": ("yiemagent.pipeline", "yiemagent.registry"),
}
"""Old module name -> the modules its names went to (each name is looked up in that order)."""


class _Split(importlib.abc.Loader):
    """Loads an old name as a module that finds each of its names in the modules they went to."""

    def __init__(self, homes: tuple[str, ...]) -> None:
        self.homes = homes

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return ModuleType(spec.name, f"Old path: its names are in {', '.join(self.homes)}.")

    def exec_module(self, module: ModuleType) -> None:
        homes = [importlib.import_module(home) for home in self.homes]

        def __getattr__(name: str) -> object:
            for home in homes:
                if name in getattr(home, "__all__", ()):
                    return getattr(home, name)
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

        module.__getattr__ = __getattr__  # type: ignore[method-assign]


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module it moved to (the same object, under both names)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self._spec = module.__spec__
        sys.modules[spec.name] = module
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the target ran when it was imported); give the module its own spec back.

        The import system sets ``__spec__`` of the module ``create_module`` returned to the
        old name's spec; left so, ``importlib.reload`` of the new module would look for the old name.
        """
        module.__spec__ = self._spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    """A meta path finder that answers only for the old names in ``MOVED`` and ``SPLIT``."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname in SPLIT:
            return importlib.machinery.ModuleSpec(fullname, _Split(SPLIT[fullname]))
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedFinder())
