"""``writeTool``: write a new tool's source file for a developer to review and register (spec §15).

A file writer, not an executor: it writes ``<tools_dir>/<name>.py`` following the tool
file contract (§17) and never imports or runs what it wrote. Before anything touches the
disk, each admission check below may refuse the request with a ``ToolError`` that says
why (the model reads it as an error result). The write is atomic: a temporary file in the same directory, then a link or rename.

Admission checks: the name is an ASCII identifier of at most 64 characters, not a Python
keyword, not a standard-library module name, and not a tool already registered in the
store; the target stays inside ``tools_dir``; an existing file is never replaced unless
the call says ``"overwrite": true`` (beyond the spec); ``inputSchema`` is valid JSON
Schema; each code field parses as a function body; the generated module parses and its
top level holds only the expected import and functions, with the text fields and the
schema embedded as literals equal to what was given.
"""

from __future__ import annotations

import keyword
import os
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ..errors import ToolError, ToolSchemaError
from ..messages import TextContent
from ..schema import check_input_schema
from ..tooling import AbortSignal, AgentTool, AgentToolResult
from ._tool_source import ARGS_PARAMS, EXECUTE_PARAMS, ToolSourceError, check_body, render_tool_source, verify_tool_source

if TYPE_CHECKING:
    from ..registry import ToolStore

__all__ = ["default_tools_dir", "write_tool_execute", "write_tool_tool"]

MAX_NAME_LENGTH = 64
RESERVED_NAMES = frozenset({"yiemagent", "tools"})

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
        "overwrite": {"type": "boolean", "description": "Replace an existing file of that name (default false)"},
    },
    "required": ["name", "label", "description", "inputSchema", "executeCode"],
}


def default_tools_dir() -> Path:
    """``$YIEMAGENT_TOOLS_DIR``, else ``./tools``, resolved against the current directory."""
    return Path(os.environ.get("YIEMAGENT_TOOLS_DIR") or "tools").resolve()


class _Refused(Exception):
    """An admission check failed; the message is the error result's text."""


def _check_name(name: str, store: Optional["ToolStore"]) -> None:
    if not name.isascii() or not name.isidentifier():
        raise _Refused(f"name {name!r} is not an ASCII Python identifier (letters, digits, underscores; not starting with a digit)")
    if len(name) > MAX_NAME_LENGTH:
        raise _Refused(f"name {name!r} is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}")
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise _Refused(f"name {name!r} is a Python keyword")
    if name in sys.stdlib_module_names or name in RESERVED_NAMES:
        raise _Refused(f"name {name!r} is the name of a standard-library or reserved module; importing the file would shadow it")
    if store is not None and name in store.tools:
        raise _Refused(f"a tool named {name!r} is already registered; choose another name (listTools shows the tools)")


def _target(tools_dir: Path, name: str) -> Path:
    target = (tools_dir / f"{name}.py").resolve()
    if target.parent != tools_dir:
        raise _Refused(f"the file for {name!r} would land outside the tools directory {tools_dir}")
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


def _write_atomically(tools_dir: Path, target: Path, source: str, overwrite: bool) -> None:
    tools_dir.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=tools_dir, prefix=f".{target.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(source)
            handle.flush()
            os.fchmod(handle.fileno(), 0o644)  # mkstemp makes 0600; a source file is readable like any other
            os.fsync(handle.fileno())
        if not overwrite:
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
        _check_name(name, store)
        target = _target(directory, name)
        overwrite = bool(args.get("overwrite", False))
        if target.exists() and not overwrite:
            raise _Refused(f"{target} already exists; pass \"overwrite\": true to replace it")
        try:
            check_input_schema(name, args["inputSchema"])
        except ToolSchemaError as exc:
            raise _Refused(str(exc)) from None
        validate_code, prepare_code = args.get("validateCode") or None, args.get("prepareCode") or None
        check_body("executeCode", args["executeCode"], EXECUTE_PARAMS)
        if validate_code:
            check_body("validateCode", validate_code, ARGS_PARAMS)
        if prepare_code:
            check_body("prepareCode", prepare_code, ARGS_PARAMS)
        parallel = bool(args.get("parallel", False))
        try:
            source = render_tool_source(
                name, args["label"], args["description"], args["inputSchema"], args["executeCode"], validate_code, prepare_code, parallel
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
        verify_tool_source(source, name, expected, {"prepare": bool(prepare_code), "validate": bool(validate_code)})
        _write_atomically(directory, target, source, overwrite)
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
