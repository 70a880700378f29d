"""The Python source ``writeTool`` writes, and the checks that it is exactly what was meant.

Spec: §15 "writeTool — Create New Tool Files" (wrap the code in boilerplate), §17 (the
tool file contract). The text fields and the schema are embedded as Python literals,
never pasted as code, and the generated module is parsed back and compared with what
was asked for before anything is written, so no field can inject code that runs at
import time.
"""

from __future__ import annotations

import ast
import json
import pprint
import textwrap
from typing import Any, Optional

__all__ = ["ToolSourceError", "check_body", "render_tool_source", "verify_tool_source"]

EXECUTE_PARAMS = ("tool_call_id", "args", "signal", "on_partial_result")
ARGS_PARAMS = ("args",)
IMPORTS = "from yiemagent import AbortSignal, AgentTool, AgentToolResult, ImageContent, TextContent"


class ToolSourceError(ValueError):
    """The requested tool cannot be written as asked; the message says why."""


def _indent(code: str) -> str:
    return textwrap.indent(textwrap.dedent(code).strip("\n"), "    ", lambda line: True)


def check_body(field: str, code: str, params: tuple[str, ...]) -> None:
    """Raise ``ToolSourceError`` unless ``code`` parses as the body of a plain function."""
    if not isinstance(code, str) or not code.strip():
        raise ToolSourceError(f"{field} must be non-empty Python code")
    source = f"def _body({', '.join(params)}):\n{_indent(code)}\n"
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        line = (exc.lineno or 1) - 1
        raise ToolSourceError(f"{field} does not parse: line {line}: {exc.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            raise ToolSourceError(f"{field} must not use yield or await: the function must return its result")


def _literal(value: Any) -> str:
    """A Python literal for a JSON value; ``ast.literal_eval`` of it gives the value back."""
    json.dumps(value, allow_nan=False)  # raises for NaN/Infinity and for non-JSON values
    return pprint.pformat(value, indent=4, width=100, sort_dicts=False)


def render_tool_source(
    name: str,
    label: str,
    description: str,
    input_schema: dict[str, Any],
    execute_code: str,
    validate_code: Optional[str],
    prepare_code: Optional[str],
    parallel: bool,
) -> str:
    """The whole module for one tool, following the §17 contract in Python."""
    parts = [
        f'"""Tool {name}: written by writeTool (yiemagent, spec §15).\n\n'
        'Review this file before you register the tool: it runs with your program\'s permissions.\n"""\n',
        IMPORTS + "\n",
    ]
    if prepare_code:
        parts.append(f"\ndef {name}_prepare_arguments({', '.join(ARGS_PARAMS)}):\n{_indent(prepare_code)}\n")
    if validate_code:
        parts.append(f"\ndef {name}_validate_required_args({', '.join(ARGS_PARAMS)}):\n{_indent(validate_code)}\n")
    parts.append(f"\ndef {name}_execute({', '.join(EXECUTE_PARAMS)}):\n{_indent(execute_code)}\n")
    schema_literal = textwrap.indent(_literal(input_schema), "        ").lstrip()
    parts.append(
        f"\ndef {name}_tool():\n"
        "    return AgentTool(\n"
        f"        name={name!r},\n"
        f"        label={label!r},\n"
        f"        description={description!r},\n"
        f"        input_schema={schema_literal},\n"
        f"        execute={name}_execute,\n"
        f"        prepare_arguments={f'{name}_prepare_arguments' if prepare_code else 'None'},\n"
        f"        validate_required_args={f'{name}_validate_required_args' if validate_code else 'None'},\n"
        f"        parallel_tool_execute={parallel!r},\n"
        "    )\n"
    )
    return "\n".join(parts)


def _check_signature(func: ast.FunctionDef, params: tuple[str, ...]) -> None:
    a = func.args
    plain = [p.arg for p in a.args]
    if (
        func.decorator_list
        or func.returns is not None
        or plain != list(params)
        or a.defaults
        or a.kw_defaults
        or a.kwonlyargs
        or a.posonlyargs
        or a.vararg
        or a.kwarg
        or any(p.annotation is not None for p in a.args)
    ):
        raise ToolSourceError(f"function {func.name} does not have the expected plain signature {params}")


def verify_tool_source(source: str, name: str, expected: dict[str, Any], hooks: dict[str, bool]) -> None:
    """Parse the generated module and check its top level holds only what was asked for.

    Only the docstring, the one import and the expected functions; functions without
    decorators, defaults or annotations (those run at import time); and the ``AgentTool``
    call in ``<name>_tool`` whose literal fields evaluate to exactly ``expected``.

    Raises:
        ToolSourceError: the module is not what was meant.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ToolSourceError(f"the generated module does not parse: line {exc.lineno}: {exc.msg}") from None
    body = list(tree.body)
    if not (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)):
        raise ToolSourceError("the generated module does not start with its docstring")
    if len(body) < 2 or ast.unparse(body[1]) != IMPORTS:
        raise ToolSourceError("the generated module's imports are not the expected ones")
    wanted = {f"{name}_execute": EXECUTE_PARAMS, f"{name}_tool": ()}
    if hooks.get("prepare"):
        wanted[f"{name}_prepare_arguments"] = ARGS_PARAMS
    if hooks.get("validate"):
        wanted[f"{name}_validate_required_args"] = ARGS_PARAMS
    functions = body[2:]
    found = [f.name for f in functions if isinstance(f, ast.FunctionDef)]
    if len(found) != len(functions) or sorted(found) != sorted(wanted):
        raise ToolSourceError(f"the generated module's top level is not exactly the functions {sorted(wanted)}")
    factory = None
    for func in functions:
        assert isinstance(func, ast.FunctionDef)
        _check_signature(func, wanted[func.name])
        if func.name == f"{name}_tool":
            factory = func
    assert factory is not None
    if len(factory.body) != 1 or not isinstance(factory.body[0], ast.Return) or not isinstance(factory.body[0].value, ast.Call):
        raise ToolSourceError(f"{name}_tool must be a single return of AgentTool(...)")
    call = factory.body[0].value
    fields = {kw.arg: kw.value for kw in call.keywords}
    for key, value in expected.items():
        try:
            if ast.literal_eval(fields[key]) != value:
                raise ToolSourceError(f"the {key} embedded in the generated module is not the one given")
        except (KeyError, ValueError) as exc:
            raise ToolSourceError(f"the {key} embedded in the generated module is not a plain literal") from exc
