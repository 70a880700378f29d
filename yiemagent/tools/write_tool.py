"""``writeTool``: write a new tool's source file for a developer to review and register (spec §15).

A file writer, not an executor: it writes ``<tools_dir>/<name>.py`` following the tool
file contract (§17) and never imports or runs what it wrote. A model controls every
argument, so before anything touches the disk each admission check below may refuse the
request with a ``ToolError`` that says why (the model reads it as an error result, and
nothing is written). The write is atomic: a temporary file in the same directory, then
a link or rename.

Admission checks (Deviation: the spec has none; a file written by a model must not
replace the user's code, shadow a module or run anything at import time):

- the name is an ASCII identifier of at most 64 characters, not a keyword, not starting
  with ``__``, not a builtin (``print``), not a name Python, pip or pytest load by
  themselves (``sitecustomize``, ``usercustomize``, ``conftest``, ``setup``, ...), not a
  module importable in the running interpreter (compared case-insensitively, for
  case-insensitive file systems), and not a tool already registered in the store;
- the target stays inside ``tools_dir`` and is not a symbolic link;
- an existing file is replaced only when the call says ``"overwrite": true`` (beyond the
  spec) *and* the file is one writeTool wrote: it starts with ``MARKER`` and still
  follows the tool file contract. The user's own files are never replaced, and a file
  that appears after the checks is not replaced either (the write then must create it);
- no text field holds a lone surrogate (it cannot be written as UTF-8, nor sent to a
  model); ``inputSchema`` is valid JSON Schema; each code field parses as a function body;
- the generated module parses back to exactly the requested tool (see ``_tool_source``).
"""

from __future__ import annotations

import builtins
import importlib.util
import keyword
import os
import pkgutil
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ..errors import ToolError, ToolSchemaError
from ..types import AbortSignal, AgentTool, AgentToolResult, TextContent
from ..registry import check_input_schema
from ._tool_source import ToolSourceError, is_written_tool, parse_body, render_tool_source, verify_tool_source

if TYPE_CHECKING:
    from ..registry import ToolStore

__all__ = ["default_tools_dir", "write_tool_execute", "write_tool_tool"]

MAX_NAME_LENGTH = 64
RESERVED_NAMES = frozenset({"yiemagent", "tools"})
# modules that Python (site), pip/setuptools or pytest find and load by their name alone
AUTOLOADED_NAMES = frozenset({"sitecustomize", "usercustomize", "site", "conftest", "setup", "__init__", "__main__"})

INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "The new tool's name: an ASCII identifier, e.g. 'searchWine'"},
        "label": {"type": "string", "description": "Human-readable tool name"},
        "description": {"type": "string", "description": "What the tool does (shown to the LLM)"},
        "inputSchema": {"type": "object", "description": "JSON Schema of the tool's arguments"},
        "executeCode": {
            "type": "string",
            "description": "Python body of <name>_execute(tool_call_id, args, signal, on_partial_result); "
            "must return AgentToolResult([TextContent(...)])",
        },
        "validateCode": {"type": "string", "description": "Optional Python body of <name>_validate_required_args(args): return None or an error string"},
        "prepareCode": {"type": "string", "description": "Optional Python body of <name>_prepare_arguments(args): return the arguments dict"},
        "parallel": {"type": "boolean", "description": "Whether the tool may run in parallel with others (default false)"},
        "overwrite": {"type": "boolean", "description": "Replace a file of that name that writeTool wrote earlier (default false)"},
    },
    "required": ["name", "label", "description", "inputSchema", "executeCode"],
}


def default_tools_dir() -> Path:
    """``$YIEMAGENT_TOOLS_DIR``, else ``./tools``, resolved against the current directory."""
    return Path(os.environ.get("YIEMAGENT_TOOLS_DIR") or "tools").resolve()


class _Refused(Exception):
    """An admission check failed; the message is the error result's text."""


def _importable(name: str, target: Path) -> Optional[str]:
    """Where ``name`` (or a name differing only in case) is importable from, else None.

    The file writeTool would replace (``target``) does not count: with its directory on
    ``sys.path`` a tool written earlier is importable under its own name.
    """
    folded = name.casefold()
    for known in (*sys.stdlib_module_names, *sys.builtin_module_names, *RESERVED_NAMES):
        if known.casefold() == folded:
            return "the standard library"
    for loaded, module in list(sys.modules.items()):
        top = loaded.partition(".")[0]
        if top.casefold() == folded and getattr(module, "__file__", None) != str(target):
            return f"the loaded module {top!r}"
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a broken parent, or a module without __spec__: importable all the same
        return "sys.path"
    if spec is not None and spec.origin != str(target):
        return spec.origin or "a namespace package on sys.path"
    for info in pkgutil.iter_modules():
        if info.name.casefold() == folded:
            where = Path(getattr(info.module_finder, "path", "") or ".").resolve()
            if info.ispkg or where / f"{info.name}.py" != target:
                return str(where / info.name)
    return None


def _check_name(name: str, store: Optional["ToolStore"], target: Path) -> None:
    if name.startswith("__"):
        raise _Refused(f"name {name!r} starts with '__': such names belong to Python")
    if name in AUTOLOADED_NAMES:
        raise _Refused(f"name {name!r} is a module that Python, pip or pytest load by themselves")
    if name in dir(builtins):
        raise _Refused(f"name {name!r} is a Python builtin")
    where = _importable(name, target)
    if where is not None:
        raise _Refused(f"name {name!r} is importable in this program (from {where}); a file of that name would shadow it")
    if store is not None and name in store.tools:
        raise _Refused(f"a tool named {name!r} is already registered; choose another name (listTools shows the tools)")


def _check_identifier(name: Any) -> None:
    if not isinstance(name, str) or not name.isascii() or not name.isidentifier():
        raise _Refused(f"name {name!r} is not an ASCII Python identifier (letters, digits, underscores; not starting with a digit)")
    if len(name) > MAX_NAME_LENGTH:
        raise _Refused(f"name {name!r} is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}")
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise _Refused(f"name {name!r} is a Python keyword")


def _check_text(field: str, value: Any) -> None:
    """Refuse a lone surrogate anywhere in a text field or the schema (keys included)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _Refused(f"{field} holds a character UTF-8 cannot encode at position {exc.start} (a lone surrogate)") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(field, key)
            _check_text(field, item)
    elif isinstance(value, list):
        for item in value:
            _check_text(field, item)


def _check_existing(target: Path, overwrite: bool) -> bool:
    """An existing file is replaced only when asked, and only if writeTool wrote it.

    Returns True when the target exists and may be replaced; False when it does not
    exist, and then the write must create it (a file that appears meanwhile is refused).
    """
    if not target.exists():
        return False
    if not overwrite:
        raise _Refused(f"{target} already exists; pass \"overwrite\": true to replace a file writeTool wrote")
    try:
        existing = target.read_text(encoding="utf-8") if target.is_file() else ""
    except (OSError, UnicodeDecodeError):
        existing = ""
    if not is_written_tool(existing, target.stem):
        raise _Refused(f"{target} exists and was not written by writeTool (or was changed since); it is never replaced")
    return True


def _target(tools_dir: Path, name: str) -> Path:
    target = (tools_dir / f"{name}.py").resolve()
    if target.parent != tools_dir:
        raise _Refused(f"the file for {name!r} would land outside the tools directory {tools_dir}")
    if (tools_dir / f"{name}.py").is_symlink():
        raise _Refused(f"{tools_dir / f'{name}.py'} is a symbolic link; writeTool writes only plain files")
    return target


def _reserve(temporary: str, target: Path) -> None:
    """Claim ``target`` for a new file, failing if it exists — atomically, so two writers cannot both win.

    A hard link of the finished temporary file claims the name and fills it in one step;
    where the file system has no hard links, an exclusive create claims it and the rename
    that follows fills it.
    """
    try:
        os.link(temporary, target)
        return
    except FileExistsError:
        raise _Refused(f"{target} already exists; pass \"overwrite\": true to replace it") from None
    except OSError:
        pass  # no hard links here (some network or FUSE file systems)
    try:
        os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        raise _Refused(f"{target} already exists; pass \"overwrite\": true to replace it") from None


def _write_atomically(tools_dir: Path, target: Path, source: str, replace_existing: bool) -> None:
    """Write ``source`` to ``target`` through a temporary file: replace the file checked before, or create a new one."""
    tools_dir.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=tools_dir, prefix=f".{target.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(source)
            handle.flush()
            os.fchmod(handle.fileno(), 0o644)  # mkstemp makes 0600; a source file is readable like any other
            os.fsync(handle.fileno())
        if not replace_existing:
            _reserve(temporary, target)
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _next_steps(name: str, target: Path, tools_dir: Path) -> str:
    return (
        f"Wrote tool {name!r} to {target}. It is not loaded yet.\n"
        "Next steps for the developer (spec §15 steps 4-6):\n"
        f"  1. Review {target}: it will run with your program's permissions.\n"
        f"  2. Import it (with {tools_dir.parent} on sys.path): from {tools_dir.name}.{name} import {name}_tool\n"
        f"  3. Register it: register_tool(agent.tool_store, {name}_tool()) — or add that line to register_all_tools.\n"
        f"  4. Restart your program (or register it in the running one); then the agent can call {name!r}."
    )


def write_tool_execute(
    store: Optional["ToolStore"],
    tools_dir: Optional[Path],
    tool_call_id: str,
    args: dict[str, Any],
    signal: Optional[AbortSignal],
    on_partial_result: Any,
) -> AgentToolResult:
    """Check the request, render the module, verify it, and write it.

    Raises:
        ToolError: an admission check refused the request, or the file could not be
            written; the message says why, and nothing was written.
    """
    directory = (tools_dir or default_tools_dir()).resolve()
    name = args["name"]
    try:
        _check_identifier(name)
        target = _target(directory, name)
        _check_name(name, store, target)
        overwrite = bool(args.get("overwrite", False))
        replace_existing = _check_existing(target, overwrite)
        for field in ("label", "description", "inputSchema"):
            _check_text(field, args[field])
        try:
            check_input_schema(name, args["inputSchema"])
        except ToolSchemaError as exc:
            raise _Refused(str(exc)) from None
        code = {"execute": args["executeCode"]}
        for hook, field in (("validate", "validateCode"), ("prepare", "prepareCode")):
            if args.get(field):
                code[hook] = args[field]
        for hook, text in code.items():
            parse_body(f"{hook}Code", text)
        parallel = bool(args.get("parallel", False))
        try:
            source = render_tool_source(
                name, args["label"], args["description"], args["inputSchema"], code["execute"], code.get("validate"), code.get("prepare"), parallel
            )
        except ValueError as exc:
            raise _Refused(f"inputSchema cannot be written as a Python literal: {exc}") from None
        expected = {
            "name": name,
            "label": args["label"],
            "description": args["description"],
            "input_schema": args["inputSchema"],
            "parallel_tool_execute": parallel,
        }
        verify_tool_source(source, name, expected, code)
        _write_atomically(directory, target, source, replace_existing)
    except (_Refused, ToolSourceError) as exc:
        raise ToolError(f"refused: {exc}. Nothing was written.") from None
    except OSError as exc:
        raise ToolError(f"could not write the file: {exc}. Nothing was written.") from None
    details = {"path": str(target), "name": name, "bytes": len(source.encode("utf-8")), "overwrite": overwrite}
    return AgentToolResult([TextContent(_next_steps(name, target, directory))], details)


def write_tool_tool(tools_dir: Optional[os.PathLike[str] | str] = None, *, store: Optional["ToolStore"] = None) -> AgentTool:
    """The ``writeTool`` tool (spec §15 ``writeToolTool()``).

    Args:
        tools_dir: where files are written; default ``$YIEMAGENT_TOOLS_DIR`` or ``./tools``,
            read at each call.
        store: the store whose registered names a new tool must not take;
            ``register_all_tools`` passes its own.
    """
    return AgentTool(
        name="writeTool",
        label="Write Tool",
        description=(
            "Write the Python source file of a new tool for a developer to review and register. "
            "It does not load or run the tool. Call listTools first to avoid a name collision."
        ),
        input_schema=INPUT_SCHEMA,
        execute=partial(write_tool_execute, store, Path(tools_dir) if tools_dir is not None else None),
        parallel_tool_execute=False,
    )
