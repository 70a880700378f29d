"""What a tool made by ``tool()`` does when it is called: its ``execute`` and the result it returns.

Beyond the spec: docs/api.md "Tools from plain functions". ``FunctionToolExecute`` is the
spec's ``execute`` (§3) of such a tool: it decodes the validated JSON arguments into the
declared types, fills in what the pipeline passes, calls the function (an ``async def``
one on an event loop of its own) and turns what it returns into an ``AgentToolResult``
(``to_tool_result``). Reading the function's signature and docstring into these
parameters and the schema is module ``functions``' job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from types import CoroutineType
from typing import Any, Optional

from ._codecs import Codec, _identity, to_json_value
from ._parameter_fill import INJECTED, Injected
from .._threads import run_coroutine
from ..errors import ToolError
from ..extraction import json_text
from ..types import AbortSignal, AgentToolResult, MessageContent, TextContent, built

__all__ = ["FunctionToolExecute", "to_tool_result"]


class _Parameter:
    """One parameter of the function: how it is passed and how its JSON value is decoded.

    ``inject`` is set (and ``decode`` None) for a parameter the pipeline fills in
    (``INJECTED``). ``omitted`` gives the value of an argument the model left out: a fresh
    copy of a default that a call could change (``_parameter_fill.fresh_default``), the default
    itself for a positional-only parameter (to keep later ones in their places); None
    lets Python fill in an immutable default, or marks a required parameter (``required``).
    """

    __slots__ = ("name", "positional", "required", "decode", "inject", "omitted")

    def __init__(
        self,
        name: str,
        positional: bool,
        required: bool,
        decode: Optional[Callable[[Any], Any]],
        inject: Optional[Injected] = None,
        omitted: Optional[Callable[[], Any]] = None,
    ) -> None:
        self.name = name
        self.positional = positional  # positional-only: passed by position
        self.required = required
        self.decode = decode
        self.inject = inject
        self.omitted = omitted


class FunctionToolExecute:
    """The ``execute`` of a tool made by ``tool()`` (spec §3 execute signature).

    Decodes the validated arguments into the declared types, fills in ``signal`` and
    ``on_partial_result`` where the function asks for them, calls ``fn`` and converts
    its return value with ``to_tool_result``. ``fn`` (also ``__wrapped__``) is the
    original function, for calling it directly.

    An argument named like a parameter the model does not fill (``reserved``: the
    pipeline's, those a ``functools.partial`` or a bound method has bound) is refused
    with a ``ToolError`` naming it, also when ``**kwargs`` would take it: the model never
    sets what the pipeline or the tool's definition passes.

    Thread safety: immutable after construction; may run in several threads at once
    (parallel batches), as safely as ``fn`` itself.
    """

    __slots__ = ("fn", "tool_name", "_parameters", "_names", "_extra", "_reserved", "_by_keyword", "_keys")

    def __init__(
        self, fn: Callable[..., Any], tool_name: str, parameters: list[_Parameter], extra: Optional[Codec], reserved: frozenset[str] = frozenset()
    ) -> None:
        self.fn = fn
        self.tool_name = tool_name
        self._parameters = parameters  # in the signature's order
        self._names = frozenset(p.name for p in parameters if p.inject is None)  # what the model may send
        self._extra = extra  # the **kwargs codec, or None when the function takes none
        self._reserved = reserved | frozenset(INJECTED)  # never the model's, whatever the signature
        # The short way (docs/performance.md "A tool from a function"), for a function whose
        # every parameter is the model's and passed by keyword (none filled in by the
        # pipeline, none positional-only, no **kwargs): when the arguments name exactly
        # those parameters, each is decoded in the signature's order (None: passed as it
        # is) and passed by keyword, which is what the long way does for them then.
        plain = all(p.inject is None and not p.positional for p in parameters) and extra is None
        self._by_keyword = tuple((p.name, None if p.decode is _identity else p.decode) for p in parameters) if plain else None
        # what ``args.keys()`` is compared with (as sets): the names themselves, a frozenset, which
        # pickles and deep-copies as the tool did before the short way (a keys view does neither)
        self._keys = self._names if plain else None

    @property
    def __wrapped__(self) -> Callable[..., Any]:
        return self.fn

    def __call__(self, tool_call_id: str, args: dict[str, Any], signal: Optional[AbortSignal], on_partial_result: Callable[[Any], None]) -> AgentToolResult:
        if self._keys is not None and type(args) is dict and args.keys() == self._keys:  # the short way (__init__); anything but a dict the long way, as before
            positional: Sequence[Any] = ()
            keywords = {name: args[name] if decode is None else decode(args[name]) for name, decode in self._by_keyword}  # type: ignore[union-attr]
        else:
            positional, keywords = self._arguments(args, signal, on_partial_result)
        value = self.fn(*positional, **keywords)
        if isinstance(value, CoroutineType):  # an async def function: on an event loop of its own, in this thread (inspect.iscoroutine's own test, without its call)
            value = self._await(value, signal)
        return to_tool_result(value)

    def _arguments(self, args: dict[str, Any], signal: Optional[AbortSignal], on_partial_result: Callable[[Any], None]) -> tuple[list[Any], dict[str, Any]]:
        """The long way: each parameter filled in by the pipeline, decoded from ``args``, or defaulted; the positional and keyword arguments of the call."""
        unknown = [k for k in args if k not in self._names]
        if unknown:
            self._refuse(sorted(unknown))
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        for parameter in self._parameters:
            if parameter.inject is not None:  # filled in by the pipeline
                value = parameter.inject.fill(signal, on_partial_result)
            elif parameter.name in args:
                value = parameter.decode(args[parameter.name])  # type: ignore[misc]
            elif parameter.omitted is not None:
                # a default a call could change is copied, so that no call sees what an
                # earlier one did to it (the schema promised the model this default)
                value = parameter.omitted()
            elif parameter.required:  # the pipeline's validation stops this; a direct caller may not
                raise ToolError(f"Tool {self.tool_name!r}: missing required argument {parameter.name!r}")
            else:
                continue  # an immutable default: Python passes it
            if parameter.positional:
                positional.append(value)
            else:
                keywords[parameter.name] = value
        for key in unknown:  # only with **kwargs: _refuse raised otherwise
            keywords[key] = self._extra.decode(args[key])  # type: ignore[union-attr]
        return positional, keywords

    def _await(self, coroutine: Any, signal: Optional[AbortSignal]) -> Any:
        """Run the coroutine (``_threads.run_coroutine``); a cancelled one is a ``ToolError`` saying why."""
        try:
            return run_coroutine(coroutine, signal, f"async tool {self.tool_name!r}")
        except asyncio.CancelledError:
            why = signal.reason if signal is not None and signal.aborted else "its task was cancelled"
            raise ToolError(f"Tool {self.tool_name!r} was cancelled: {why}") from None

    def _refuse(self, unknown: list[str]) -> None:
        """Raise ``ToolError`` for arguments the function has no parameter for, or that are not the model's to send."""
        reserved = [k for k in unknown if k in self._reserved]
        if reserved:
            raise ToolError(
                f"Tool {self.tool_name!r}: {', '.join(map(repr, reserved))} cannot be sent as argument(s): "
                "passed in by the pipeline or fixed by the tool's definition; leave it out"
            )
        if self._extra is None:
            raise ToolError(f"Tool {self.tool_name!r} takes no argument(s) {', '.join(map(repr, unknown))}")

    def __repr__(self) -> str:
        return f"FunctionToolExecute({_callable_name(self.fn)})"


def to_tool_result(value: Any) -> AgentToolResult:
    """What a function returned, as a tool result (docs/api.md "Tools from plain functions").

    An ``AgentToolResult`` as it is; a ``str`` one ``TextContent``; a content block
    (``TextContent``/``ImageContent``), or a list of them, that content; anything else
    its JSON text (``to_json_value``: dataclasses and NamedTuples as objects, Enums as
    their value, tuples and sets as arrays, datetimes as ISO strings; ``None`` is
    ``null``). The result's ``details`` stay empty.

    Raises:
        TypeError, ValueError: the value has no JSON form (an arbitrary object, a NaN);
            raised inside ``execute``, the pipeline makes it an error result naming the type.
    """
    if isinstance(value, str):
        return _text_result(value)
    kind = type(value)
    if kind is int or kind is bool or value is None:  # json.dumps's text for them, without its walk (docs/performance.md "A tool from a function")
        return _text_result(_SCALAR_TEXT[value] if kind is not int else int.__repr__(value))
    if isinstance(value, AgentToolResult):
        return value
    if isinstance(value, MessageContent):
        return AgentToolResult([value])
    if isinstance(value, list) and value and all(isinstance(v, MessageContent) for v in value):
        return AgentToolResult(list(value))
    return _text_result(json_text(to_json_value(value)))  # json.dumps(..., ensure_ascii=False, allow_nan=False)


_SCALAR_TEXT = {True: "true", False: "false", None: "null"}  # keyed by value: True == 1 is never looked up here (ints take int.__repr__)


def _text_result(text: str) -> AgentToolResult:
    """``AgentToolResult([TextContent(text)])``, each made without its ``__init__`` (``types.built``)."""
    return built(AgentToolResult, content=[built(TextContent, text=text, citations=None)], details={}, usage=None, terminate=False)


def _callable_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
