"""Old import paths of modules that moved, kept working (docs/architecture.md "Moved modules").

The package was regrouped so that its layout follows the spec; a script that imported a
module by its old name (``from yiemagent.tooling import AgentTool``) must not break. Each
old name below is served by the module that now holds what it held: importing the old
name gives that very module object (``yiemagent.tooling is yiemagent.types``), loaded
only when first asked for. ``from yiemagent import X`` is unaffected: it always was, and
stays, the way to import.

Thread safety: the import system's own lock serialises ``find_spec``; the table is read-only.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Optional, Sequence

__all__ = ["MOVED"]

MOVED = {
    "yiemagent.tooling": "yiemagent.types",
    "yiemagent.sessions": "yiemagent.history.sessions",
    "yiemagent.console": "yiemagent.cli.console",
    "yiemagent.demo": "yiemagent.cli.demo",
    "yiemagent.stream_relay": "yiemagent.streaming",
    "yiemagent.limits": "yiemagent.run",
    "yiemagent.usage": "yiemagent.messages",
    "yiemagent.channels": "yiemagent.loop",
    "yiemagent.function_tools": "yiemagent.typed.functions",
}
"""Old module name -> the module that holds its names now."""


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module it moved to (the same object, under both names)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        sys.modules[spec.name] = module
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the target module was executed when it was imported."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    """A meta path finder that answers only for the old names in ``MOVED``."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedFinder())
