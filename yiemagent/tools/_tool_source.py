"""The Python source ``writeTool`` writes, and the checks that it is exactly what was meant.

Spec: §15 "writeTool — Create New Tool Files" (wrap the code in boilerplate), §17 (the
tool file contract). The text fields and the schema are embedded as Python literals,
never pasted as code, and the generated module is parsed back and compared with what
was asked for before anything is written, so no field can inject code that runs at
import time.

Code fields are indented with the help of ``tokenize``: a line that begins inside a
string literal (the second and later lines of a triple-quoted string) is left exactly as
given, so a body returns the same text once wrapped in its function. The verification
then checks that each generated function body is, node for node, the code that was given
(``ast.dump`` without positions), and that the factory is exactly
``return AgentTool(name=..., ..., parallel_tool_execute=...)`` with no other keyword,
no ``**`` and no positional argument.
"""

from __future__ import annotations

import ast
import io
import json
import pprint
import re
import tokenize
from collections.abc import Mapping
from typing import Any, Optional

__all__ = ["MARKER", "ToolSourceError", "indent_body", "is_written_tool", "parse_body", "render_tool_source", "verify_tool_source"]

EXECUTE_PARAMS = ("tool_call_id", "args", "signal", "on_partial_result")
ARGS_PARAMS = ("args",)
IMPORTS = "from yiemagent import AbortSignal, AgentTool, AgentToolResult, ImageContent, TextContent"
# The first line of every file writeTool writes: the mark that lets a later call with
# "overwrite": true replace the file. A comment, so the docstring still opens the module.
MARKER = "# Written by yiemagent writeTool (spec §15); writeTool may overwrite this file. Delete this line to keep it."
FACTORY_KEYWORDS = (
    "name",
    "label",
    "description",
    "input_schema",
    "execute",
    "prepare_arguments",
    "validate_required_args",
    "parallel_tool_execute",
)
# the code fields, the function each becomes (suffix after "<name>_"), and its parameters
HOOKS = {"execute": ("execute", EXECUTE_PARAMS), "prepare": ("prepare_arguments", ARGS_PARAMS), "validate": ("validate_required_args", ARGS_PARAMS)}
_NEWLINES = re.compile(r"\r\n?")


class ToolSourceError(ValueError):
    """The requested tool cannot be written as asked; the message says why."""


def _lines_inside_strings(code: str) -> set[int]:
    """0-based numbers of the lines that begin inside a string literal (their text is the literal's value)."""
    inside: set[int] = set()
    fstring_start = getattr(tokenize, "FSTRING_START", None)  # 3.12+ splits f-strings into parts
    fstring_end = getattr(tokenize, "FSTRING_END", None)
    open_rows: list[int] = []
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type == tokenize.STRING:
            inside.update(range(token.start[0], token.end[0]))  # 1-based rows start+1..end are 0-based start..end-1
        elif token.type == fstring_start:
            open_rows.append(token.start[0])
        elif token.type == fstring_end:
            inside.update(range(open_rows.pop(), token.end[0]))
    return inside


def _margin(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def indent_body(code: str) -> str:
    """``code`` moved to a function body's indentation, string literals untouched.

    Newlines become ``\\n`` first (Python reads ``\\r\\n`` and ``\\r`` as ``\\n`` anyway) and
    blank lines at either end go. The common margin of the code lines is replaced by four
    spaces; a line that begins inside a string literal is kept as it is.

    Raises:
        ToolSourceError: the code cannot be read as Python tokens (an unterminated string).
    """
    code = _NEWLINES.sub("\n", code).strip("\n")
    try:
        inside = _lines_inside_strings(code + "\n")
    except (tokenize.TokenError, SyntaxError, ValueError) as exc:
        raise ToolSourceError(f"cannot be read as Python tokens: {exc}") from None
    lines = code.split("\n")
    is_code = [n not in inside and line.strip() != "" for n, line in enumerate(lines)]
    margins = [_margin(line) for n, line in enumerate(lines) if is_code[n] and not line.lstrip().startswith("#")]
    common = margins[0] if margins else ""
    for margin in margins[1:]:
        while not margin.startswith(common):
            common = common[:-1]
    out = []
    for n, line in enumerate(lines):
        if n in inside:
            out.append(line)  # part of a string's value
        elif not is_code[n]:
            out.append("")
        else:
            out.append("    " + (line[len(common) :] if line.startswith(common) else line.lstrip(" \t")))
    return "\n".join(out)


def parse_body(field: str, code: Any) -> list[ast.stmt]:
    """The statements of ``code`` read as a function body, as the model wrote them.

    Raises:
        ToolSourceError: the code is empty or only comments, holds a character UTF-8
            cannot encode (a lone surrogate), does not parse, or uses ``yield``/``await``.
    """
    if not isinstance(code, str) or not code.strip():
        raise ToolSourceError(f"{field} must be non-empty Python code")
    try:
        code.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolSourceError(f"{field} holds a character UTF-8 cannot encode at position {exc.start} (a lone surrogate)") from None
    code = _NEWLINES.sub("\n", code).strip("\n")
    wrapped = 0  # lines added in front of the code, taken off the line number an error names
    try:
        try:
            body: list[ast.stmt] = ast.parse(code).body
        except IndentationError:
            wrapped = 1
            body = ast.parse("if 1:\n" + code).body[0].body  # an indented body
    except SyntaxError as exc:  # a null byte too (without a line number)
        where = f"line {exc.lineno - wrapped}: " if exc.lineno else ""
        raise ToolSourceError(f"{field} does not parse: {where}{exc.msg}") from None
    except ValueError as exc:  # a null byte, on versions that raise ValueError for it
        raise ToolSourceError(f"{field} does not parse: {exc}") from None
    if not body:
        raise ToolSourceError(f"{field} holds no statement (comments alone); the function must return its result")
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            raise ToolSourceError(f"{field} must not use yield or await: the function must return its result")
    return body


def _literal(value: Any) -> str:
    """A Python literal for a JSON value; ``ast.literal_eval`` of it gives the value back."""
    json.dumps(value, allow_nan=False)  # raises for NaN/Infinity and for non-JSON values
    return pprint.pformat(value, indent=4, width=100, sort_dicts=False)


def _docstring(name: str) -> str:
    return f"Tool {name}: written by writeTool (yiemagent, spec §15).\n\nReview this file before you register the tool: it runs with your program's permissions.\n"


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
    """The whole module for one tool, following the §17 contract in Python, with ``MARKER`` first."""
    parts = [f'{MARKER}\n"""{_docstring(name)}"""\n', IMPORTS + "\n"]
    if prepare_code:
        parts.append(f"\ndef {name}_prepare_arguments({', '.join(ARGS_PARAMS)}):\n{indent_body(prepare_code)}\n")
    if validate_code:
        parts.append(f"\ndef {name}_validate_required_args({', '.join(ARGS_PARAMS)}):\n{indent_body(validate_code)}\n")
    parts.append(f"\ndef {name}_execute({', '.join(EXECUTE_PARAMS)}):\n{indent_body(execute_code)}\n")
    schema_literal = "\n        ".join(_literal(input_schema).split("\n"))  # pprint's output has no string spanning lines
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
    if (
        func.decorator_list
        or func.returns is not None
        or [p.arg for p in a.args] != list(params)
        or a.defaults
        or a.kw_defaults
        or a.kwonlyargs
        or a.posonlyargs
        or a.vararg
        or a.kwarg
        or any(p.annotation is not None for p in a.args)
    ):
        raise ToolSourceError(f"function {func.name} does not have the expected plain signature {params}")


def _structure(tree: ast.Module, name: str) -> tuple[dict[str, ast.FunctionDef], ast.Call]:
    """Check the module's shape; return its functions by hook ("execute", "prepare", ...) and the factory call."""
    body = list(tree.body)
    if not (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and body[0].value.value == _docstring(name)):
        raise ToolSourceError("the generated module does not start with its docstring")
    if len(body) < 2 or ast.unparse(body[1]) != IMPORTS:
        raise ToolSourceError("the generated module's imports are not the expected ones")
    by_name = {f"{name}_{suffix}": (hook, params) for hook, (suffix, params) in HOOKS.items()}
    by_name[f"{name}_tool"] = ("tool", ())
    functions: dict[str, ast.FunctionDef] = {}
    for node in body[2:]:
        if not isinstance(node, ast.FunctionDef) or node.name not in by_name or by_name[node.name][0] in functions:
            raise ToolSourceError(f"the generated module's top level holds more than the functions of tool {name!r}")
        hook, params = by_name[node.name]
        _check_signature(node, params)
        functions[hook] = node
    if "execute" not in functions or "tool" not in functions:
        raise ToolSourceError(f"the generated module's top level lacks {name}_execute or {name}_tool")
    factory = functions.pop("tool")
    ret = factory.body[0] if len(factory.body) == 1 else None
    call = ret.value if isinstance(ret, ast.Return) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "AgentTool"):
        raise ToolSourceError(f"{name}_tool must be a single return of AgentTool(...)")
    if call.args or tuple(kw.arg for kw in call.keywords) != FACTORY_KEYWORDS:
        raise ToolSourceError(f"{name}_tool must call AgentTool with exactly the keywords {', '.join(FACTORY_KEYWORDS)}, in that order")
    fields = dict(zip(FACTORY_KEYWORDS, (kw.value for kw in call.keywords), strict=True))
    for hook, (suffix, _params) in HOOKS.items():
        value = fields[suffix]
        wanted = f"{name}_{suffix}" if hook in functions else None
        ok = isinstance(value, ast.Name) and value.id == wanted if wanted else isinstance(value, ast.Constant) and value.value is None
        if not ok:
            raise ToolSourceError(f"{name}_tool's {suffix} is not {wanted or 'None'}")
    return functions, call


def _literals(call: ast.Call) -> dict[str, Any]:
    values = {}
    for kw in call.keywords:
        if kw.arg in ("name", "label", "description", "input_schema", "parallel_tool_execute"):
            try:
                values[kw.arg] = ast.literal_eval(kw.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
                raise ToolSourceError(f"the {kw.arg} embedded in the generated module is not a plain literal") from exc
    return values


def verify_tool_source(source: str, name: str, expected: Mapping[str, Any], code: Mapping[str, str]) -> None:
    """Parse the generated module and check it holds exactly what was asked for.

    ``expected`` holds the factory's literal fields (name, label, description,
    input_schema, parallel_tool_execute); ``code`` the code fields by hook ("execute",
    and "prepare"/"validate" when given). The module must be the marker, its docstring,
    the one import, and exactly the functions of those hooks plus the factory: plain
    signatures (no decorators, defaults or annotations: they run at import time), each
    body equal node for node to its code, and the factory of the exact shape.

    Raises:
        ToolSourceError: the module is not what was meant.
    """
    if not source.startswith(MARKER + "\n"):
        raise ToolSourceError("the generated module does not start with writeTool's marker line")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ToolSourceError(f"the generated module does not parse: line {exc.lineno}: {exc.msg}") from None
    functions, call = _structure(tree, name)
    if set(functions) != set(code):
        raise ToolSourceError(f"the generated module's functions are not those of the code fields {sorted(code)}")
    for hook, func in functions.items():
        given = ast.Module(body=parse_body(hook, code[hook]), type_ignores=[])
        if ast.dump(ast.Module(body=func.body, type_ignores=[])) != ast.dump(given):
            raise ToolSourceError(f"the body of {func.name} is not the code given")
    literals = _literals(call)
    for key, value in expected.items():
        if key not in literals or literals[key] != value or type(literals[key]) is not type(value):
            raise ToolSourceError(f"the {key} embedded in the generated module is not the one given")


def is_written_tool(source: str, name: str) -> bool:
    """True when ``source`` is a file writeTool wrote for ``name``: its marker line, and still the tool file contract."""
    if not source.startswith(MARKER + "\n"):
        return False
    try:
        return _literals(_structure(ast.parse(source), name)[1]).get("name") == name
    except (SyntaxError, ValueError):
        return False
