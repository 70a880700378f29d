"""Tools from plain, typed Python functions: ``tool()``.

Beyond the spec: docs/api.md "Tools from plain functions". A tool is
usually a typed function with a docstring (as with pydantic-ai's ``@agent.tool_plain``,
openai-agents' ``@function_tool`` and smolagents' ``@tool``); ``tool()`` turns one into
the spec's ``AgentTool`` (§3): the ``input_schema`` comes from the signature
(``_type_schema``), the descriptions from the docstring, and ``execute`` converts the
validated JSON arguments into the declared types, calls the function and turns what it
returns into an ``AgentToolResult``. Everything else — validation against the schema,
errors as results, events, timeouts, parallel batches — is the pipeline's (spec §8).
This module reads a function's definition (signature, annotations, docstring) into the
tool; what its ``execute`` does at each call is module ``_execute``'s
(``FunctionToolExecute``, ``to_tool_result``, both importable from here).

Docstrings are read with ``docstring-parser``: one small pure-Python package with no
dependencies of its own that reads the Google, NumPy and reST (Sphinx) styles and
detects which one a docstring uses; it is what openai-agents' ``@function_tool`` uses.
(``griffe``, pydantic-ai's choice, is a whole API-documentation toolkit: far more than
reading one docstring needs.)
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
import typing
from collections.abc import Callable
from typing import Any, Optional

import docstring_parser
import jsonschema

from ._parameter_fill import INJECTED, PIPELINE_PARAMETERS, RUN_CONTEXT, admits, fresh_default, wants_run_context
from ._codecs import NO_DEFAULT, Codec, InexpressibleType, codec_for, json_default, type_name
from ._execute import FunctionToolExecute, _callable_name, _Parameter, to_tool_result
from ..errors import ToolDefinitionError
from ..types import AgentTool

__all__ = ["FunctionToolExecute", "PIPELINE_PARAMETERS", "TOOL_NAME_PATTERN", "to_tool_result", "tool"]

logger = logging.getLogger("yiemagent.typed.functions")

# The function names OpenAI and Anthropic both accept.
TOOL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")


def tool(
    fn: Optional[Callable[..., Any]] = None,
    *,
    name: Optional[str] = None,
    label: Optional[str] = None,
    description: Optional[str] = None,
    parallel: bool = False,
    timeout_s: Optional[float] = None,
    requires_approval: bool = False,
) -> Any:
    """Make an ``AgentTool`` from a typed function: ``@tool``, ``@tool(name=...)`` or ``tool(fn)``.

    Spec: §3 (agentTool); docs/api.md "Tools from plain functions".

    - ``name`` defaults to the function's ``__name__`` and must match
      ``[A-Za-z0-9_-]{1,64}`` (what OpenAI and Anthropic accept); ``label`` to the name
      in words ("get_price" -> "Get price").
    - ``description`` defaults to the docstring's text before its parameter sections
      (its summary and any further paragraphs); "" when there is no docstring.
    - ``input_schema``: one property per parameter, typed from its annotation (see
      ``_type_schema``), described by ``Annotated[T, "text"]`` or else by the docstring
      (Google, NumPy or reST); a parameter with a default is not required and its
      default (when it has a JSON form) is the property's ``"default"``; a default of
      ``None`` also admits ``null``; a default a call could change (a list, a dataclass,
      a tuple holding a list, any object with state) is deep-copied for each call that
      omits it, an immutable one passed as it is (``_parameter_fill``).
      ``tool(Class.method)`` (unbound, so the model would have to send ``self``) is a
      ``ToolDefinitionError``. The object is closed (``additionalProperties: false``)
      unless the function takes ``**kwargs``, whose annotation then types the extra
      properties.
    - Parameters named ``signal`` (an ``AbortSignal``; a fresh one that never fires when
      the caller gave none) and ``on_partial_result`` are passed in by the pipeline and
      left out of the schema; so are the keywords a ``functools.partial`` has bound. The
      model can never set them: an argument with such a name (or a bound method's
      ``self``) is an error result naming it, also when ``**kwargs`` would take it (the
      schema's ``propertyNames`` excludes them); annotating ``signal`` or
      ``on_partial_result`` with a type that value never has is a ``ToolDefinitionError``.
      A parameter annotated ``RunContext`` (any name) receives the call's
      ``current_run_context()`` and is left out of the schema too (types.py).
    - An ``async def`` function (or a callable whose ``__call__`` is one) is awaited on an
      event loop of its own in the thread that runs the call; ``abort`` and ``timeout_s``
      cancel it; what it leaves behind is cancelled and waited for at most
      ``_threads.CLEANUP_GRACE_S``, then abandoned with a warning, so the tool's own result
      is never held up by it (``_threads.run_coroutine``). Async generators are refused.
    - The function receives its arguments as the types it declared; what it returns
      becomes the result (``to_tool_result``); what it raises becomes an error result
      through the pipeline, as for any tool (spec §8.2).
    - ``parallel`` becomes ``parallel_tool_execute`` (spec §9), ``timeout_s`` the tool's
      ``timeout_s``, ``requires_approval`` the tool's ``requires_approval``: each call
      waits for a person unless ``before_tool_call`` decides for it (decision 18;
      docs/api.md "Approvals in fewer lines").

    Works on functions, bound methods, ``functools.partial`` objects, callable
    instances (which need ``name=``) and classes (the tool builds one: typed by the
    class's fields, or by its ``__init__``).

    Raises:
        ToolDefinitionError: at decoration — a parameter type JSON Schema cannot express
            (the message names the parameter and the type), an async generator function, a
            ``*args`` parameter, an invalid name, annotations that cannot be resolved, a
            default that cannot be copied (a generator, a lock), naming the parameter.
    """
    if fn is None:
        return functools.partial(
            tool, name=name, label=label, description=description, parallel=parallel, timeout_s=timeout_s, requires_approval=requires_approval
        )
    if isinstance(fn, str):
        raise ToolDefinitionError(f"tool() was given the string {fn!r} as the function; to name a tool write @tool(name={fn!r})")
    if not callable(fn):
        raise ToolDefinitionError(f"tool() needs a function, got {type(fn).__name__}")
    target, bound = _unwrap_partial(fn)
    tool_name = name if name is not None else _default_name(target)
    if not isinstance(tool_name, str) or not TOOL_NAME_PATTERN.fullmatch(tool_name):
        raise ToolDefinitionError(
            f"tool name {tool_name!r} is not valid: use 1-64 letters, digits, '_' or '-' (what LLM APIs accept); pass name=..."
        )
    if inspect.isasyncgenfunction(target) or inspect.isasyncgenfunction(getattr(target, "__call__", None)):  # noqa: B004 - the kind of its __call__ method, not whether it is callable
        raise ToolDefinitionError(
            f"tool {tool_name!r}: {_callable_name(target)} is an async generator function; a tool returns one result "
            "(report progress with an on_partial_result parameter)"
        )
    doc = _parse_docstring(inspect.getdoc(target))
    execute, schema = _plan(fn, target, bound, tool_name, doc)
    return AgentTool(
        name=tool_name,
        label=label if label is not None else _label_for(tool_name),
        description=description if description is not None else ((doc.description or "").strip() if doc else ""),
        input_schema=schema,
        execute=execute,
        parallel_tool_execute=parallel,
        timeout_s=timeout_s,
        requires_approval=requires_approval,
    )


def _unwrap_partial(fn: Callable[..., Any]) -> tuple[Callable[..., Any], set[str]]:
    """The function under (nested) ``functools.partial`` objects, and the keywords they bind."""
    bound: set[str] = set()
    while isinstance(fn, functools.partial):
        bound.update(fn.keywords)
        fn = fn.func
    return fn, bound



def _default_name(target: Any) -> Any:
    name = getattr(target, "__name__", None)
    if name is None:
        raise ToolDefinitionError(f"tool(): {type(target).__name__} object has no __name__; pass name=...")
    return name


def _label_for(name: str) -> str:
    """A tool name in words: ``get_price`` and ``getPrice`` -> ``Get price``."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name).replace("_", " ").replace("-", " ").split()
    text = " ".join(words).lower()
    return text[:1].upper() + text[1:] if text else name


def _parse_docstring(doc: Optional[str]) -> Optional[docstring_parser.Docstring]:
    if not doc:
        return None
    try:
        return docstring_parser.parse(doc)
    except Exception as exc:  # ParseError only when no style fits; a third-party bug must not break decoration either
        logger.warning("docstring not parsed (%s: %s); using it whole as the description", type(exc).__name__, exc)
        parsed = docstring_parser.Docstring()
        parsed.short_description = doc
        return parsed


def _type_hints(tool_name: str, target: Any) -> dict[str, Any]:
    """The resolved annotations of the function (of ``__call__`` for a callable instance).

    For a class, its own annotations (a dataclass's or a pydantic model's fields); when they
    leave a parameter of its signature untyped, the signature is its ``__init__``'s (a plain
    class's constructor), whose annotations then win over the class's (which describe what an
    instance stores, not what the constructor takes).
    """
    owner = target if inspect.isroutine(target) or inspect.isclass(target) else type(target).__call__
    try:
        hints = typing.get_type_hints(owner, include_extras=True)
        init = getattr(target, "__init__", None) if inspect.isclass(target) else None
        if inspect.isfunction(init) and set(inspect.signature(target).parameters) - set(hints):
            hints = {**hints, **typing.get_type_hints(init, include_extras=True)}
        return hints
    except Exception as exc:  # NameError for an unresolvable forward reference, and kin
        raise ToolDefinitionError(f"tool {tool_name!r}: the annotations of {_callable_name(target)} cannot be resolved: {type(exc).__name__}: {exc}") from exc


def _plan(
    fn: Callable[..., Any], target: Any, bound: set[str], tool_name: str, doc: Optional[docstring_parser.Docstring]
) -> tuple[FunctionToolExecute, dict[str, Any]]:
    """The ``execute`` and the ``input_schema`` of ``fn``."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: the signature of {_callable_name(target)} cannot be read: {exc}") from exc
    hints = _type_hints(tool_name, target)
    described = {p.arg_name.lstrip("*"): p.description for p in (doc.params if doc else []) if p.description}
    properties: dict[str, Any] = {}
    required: list[str] = []
    parameters: list[_Parameter] = []
    extra: Optional[Codec] = None
    first = next(iter(signature.parameters.values()), None)
    owner = getattr(fn, "__qualname__", "").rpartition(".")[0]  # "C" for C.m; "f.<locals>" for a nested function
    if first is not None and first.name in ("self", "cls") and first.name not in hints and owner and not owner.endswith("<locals>"):
        raise ToolDefinitionError(
            f"tool {tool_name!r}: {_callable_name(target)} is a method taken from its class, so the model would have to send {first.name!r}; "
            f"pass it bound (tool(instance.method)) or make it a staticmethod or classmethod"
        )
    for p in signature.parameters.values():
        positional = p.kind is inspect.Parameter.POSITIONAL_ONLY
        if p.name in INJECTED and p.kind is not inspect.Parameter.VAR_KEYWORD:
            injected = INJECTED[p.name]
            if p.name in hints and not admits(hints[p.name], injected.kind):
                raise ToolDefinitionError(
                    f"tool {tool_name!r}: parameter {p.name!r} is filled in by the pipeline (with {injected.what}), but it is "
                    f"annotated {type_name(hints[p.name])}; rename the parameter if the model should send it"
                )
            parameters.append(_Parameter(p.name, positional, False, None, injected))
            continue
        if p.name in bound:
            continue  # a keyword bound by functools.partial: configuration, not the model's
        if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD) and wants_run_context(hints.get(p.name)):
            parameters.append(_Parameter(p.name, positional, False, None, RUN_CONTEXT))  # not the model's (types.py)
            continue
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            raise ToolDefinitionError(f"tool {tool_name!r}: parameter '*{p.name}' cannot be filled from named JSON arguments; use a list parameter")
        codec = _codec(tool_name, p.name, hints.get(p.name, Any))
        if p.default is None:
            codec = _admit_null(codec)  # "x: int = None" admits null, as Python does
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            extra = codec
            continue
        schema = dict(codec.schema)
        if p.name in described and "description" not in schema:
            schema["description"] = described[p.name]
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
        else:
            encoded = json_default(p.default)
            if encoded is not NO_DEFAULT:  # a default with no JSON form (a sentinel object) is left out
                schema["default"] = encoded
        properties[p.name] = schema
        omitted = None if p.default is inspect.Parameter.empty else _omitted(tool_name, p.name, p.default, positional)
        parameters.append(_Parameter(p.name, positional, p.default is inspect.Parameter.empty, codec.decode, omitted=omitted))
    schema = {"type": "object", "properties": properties, "additionalProperties": extra.schema if extra is not None else False}
    reserved = (_own_parameter_names(target) | bound | set(INJECTED)) - set(properties)
    if extra is not None:
        # **kwargs takes any other name: the schema says which ones are not the model's,
        # so that the pipeline's validation refuses them before the function runs
        schema["propertyNames"] = {"not": {"enum": sorted(reserved)}}
    if required:
        schema["required"] = required
    return FunctionToolExecute(fn, tool_name, parameters, extra, frozenset(reserved)), schema


def _omitted(tool_name: str, parameter: str, default: Any, positional: bool) -> Optional[Callable[[], Any]]:
    """How a call that leaves ``parameter`` out gets its default (see ``_Parameter.omitted``)."""
    try:
        fresh = fresh_default(default)
    except Exception as exc:  # deepcopy raises whatever the object's reduction raises
        raise ToolDefinitionError(
            f"tool {tool_name!r}: the default of parameter {parameter!r} ({type(default).__name__}) cannot be copied "
            f"({type(exc).__name__}: {exc}); each call that leaves the argument out gets a fresh copy of it, so that no call "
            "sees what an earlier one did to it. Use an immutable default (None, a number, a string, a tuple) and build "
            "the value in the function, or bind it with functools.partial (not the model's, and not copied)"
        ) from exc
    if fresh is None and positional:
        return lambda: default
    return fresh


def _own_parameter_names(target: Any) -> set[str]:
    """The named parameters of the function itself, also those a bound method (``self``) or a
    callable instance's ``__call__`` hides from its signature; empty when it cannot be read."""
    inner = target.__func__ if inspect.ismethod(target) else target
    if not (inspect.isroutine(inner) or inspect.isclass(inner)):
        inner = type(inner).__call__
    try:
        parameters = inspect.signature(inner).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in parameters if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}


def _admit_null(codec: Codec) -> Codec:
    """``codec`` that also takes ``null`` (decoded as None); its description stays on top."""
    if jsonschema.Draft202012Validator(codec.schema).is_valid(None):
        return codec
    inner = {k: v for k, v in codec.schema.items() if k != "description"}
    schema: dict[str, Any] = {"anyOf": [inner, {"type": "null"}]}
    if "description" in codec.schema:
        schema["description"] = codec.schema["description"]
    decode = codec.decode
    return Codec(schema, lambda value: None if value is None else decode(value), codec.hashable)


def _codec(tool_name: str, parameter: str, annotation: Any) -> Codec:
    try:
        return codec_for(annotation)
    except InexpressibleType as exc:
        inner = "" if exc.tp is annotation else f" (in {type_name(annotation)})"
        raise ToolDefinitionError(
            f"tool {tool_name!r}: parameter {parameter!r} has type {type_name(exc.tp)}{inner}, which cannot be a tool argument: {exc.why}"
        ) from None
