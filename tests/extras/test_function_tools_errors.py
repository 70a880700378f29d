"""What tool() and its execute say when they refuse: each message whole (docs/api.md "Tools from plain functions").

A definition error is read by the programmer who decorated the function; an argument error
goes back to the model as the call's error result (spec §8.2). Both must name the tool, the
function (by its qualified name, or its type for a callable object), the parameter or the
argument, and say what to do instead.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from typing import Any

import pytest

from yiemagent import AbortSignal, ToolDefinitionError, ToolError, tool

FIX_ASYNC_GENERATOR = "a tool returns one result (report progress with an on_partial_result parameter)"


def definition_error(*args: Any, **options: Any) -> str:
    """The message of the ToolDefinitionError that tool(*args, **options) raises."""
    with pytest.raises(ToolDefinitionError) as raised:
        tool(*args, **options)
    return str(raised.value)


def tool_error(made, args, signal=None) -> str:
    """The message of the ToolError that a direct call of made's execute raises."""
    with pytest.raises(ToolError) as raised:
        made.execute("c1", args, signal, lambda partial: None)
    return str(raised.value)


def test_tool_given_something_that_is_not_a_function_names_its_type():
    """tool(42) says what it got instead of a function."""
    assert definition_error(42) == "tool() needs a function, got int"


class Ticker:
    async def __call__(self, n: int):
        yield n


def test_a_callable_object_without_a_name_is_told_to_pass_one():
    """An instance has no __name__ to name the tool: the message names its class and the fix."""
    assert definition_error(Ticker()) == "tool(): Ticker object has no __name__; pass name=..."


def test_an_async_generator_is_refused_naming_the_function_by_its_qualified_name():
    """A nested async generator function is named with its qualified name, so the programmer finds it."""

    def outer():
        async def ticks(n: int):
            yield n

        return ticks

    ticks = outer()
    assert ticks.__qualname__.endswith(".<locals>.outer.<locals>.ticks")
    assert definition_error(ticks) == f"tool 'ticks': {ticks.__qualname__} is an async generator function; {FIX_ASYNC_GENERATOR}"


def test_a_callable_object_whose_call_is_an_async_generator_is_refused_naming_its_class():
    """An instance whose __call__ is an async generator is refused too; it is named by its class (an instance has no __qualname__)."""
    assert definition_error(Ticker(), name="tick") == f"tool 'tick': Ticker is an async generator function; {FIX_ASYNC_GENERATOR}"


def test_a_callable_object_with_a_name_of_its_own_is_named_by_it():
    """An instance that carries a __name__ (and no __qualname__) is named by that __name__, also when it is the tool's default name."""
    ticker = Ticker()
    ticker.__name__ = "ticker"
    assert definition_error(ticker) == f"tool 'ticker': ticker is an async generator function; {FIX_ASYNC_GENERATOR}"


def test_execute_shows_the_function_it_calls():
    """repr(tool.execute) names the function by its qualified name, or a callable object by its class."""

    def lookup(topic: str) -> str:
        return topic

    class Doubler:
        def __call__(self, n: int) -> int:
            return 2 * n

    doubler = Doubler()
    named = Doubler()
    named.__name__ = "twice"
    assert repr(tool(lookup).execute) == f"FunctionToolExecute({lookup.__qualname__})"
    assert repr(tool(doubler, name="double").execute) == "FunctionToolExecute(Doubler)"
    assert repr(tool(named).execute) == "FunctionToolExecute(twice)"
    assert repr(tool(functools.partial(lookup, topic="tea"), name="tea").execute) == "FunctionToolExecute(partial)"


def test_a_function_whose_signature_cannot_be_read_is_a_definition_error_naming_it():
    """A builtin without a signature (max) cannot be planned: the message names the tool, the function and why."""
    assert definition_error(max) == "tool 'max': the signature of max cannot be read: no signature found for builtin <built-in function max>"


def test_annotations_that_cannot_be_resolved_are_a_definition_error_naming_the_tool_the_function_and_the_cause():
    """A forward reference to a name that does not exist: the tool, the function's qualified name, the exception and its text."""

    def forecast(city: "Nowhere") -> str:  # noqa: F821 - the point of the test
        return ""

    assert definition_error(forecast, name="weather") == (
        f"tool 'weather': the annotations of {forecast.__qualname__} cannot be resolved: NameError: name 'Nowhere' is not defined"
    )


class Calculator:
    def add(self, a: int, b: int) -> int:
        return a + b

    def scale(cls, a: int) -> int:  # a plain function whose first parameter is named cls
        return a


@pytest.mark.parametrize("method, first", [(Calculator.add, "self"), (Calculator.scale, "cls")])
def test_a_method_taken_from_its_class_is_refused_naming_the_parameter_the_model_would_have_to_send(method, first):
    """tool(Class.method) would make the model send self (or cls): the message names the method and the two ways out."""
    assert definition_error(method) == (
        f"tool {method.__name__!r}: {method.__qualname__} is a method taken from its class, so the model would have to send {first!r}; "
        "pass it bound (tool(instance.method)) or make it a staticmethod or classmethod"
    )


def test_a_pipeline_parameter_annotated_with_another_type_names_the_type():
    """signal: int would receive an AbortSignal: the message names the parameter, what it receives and its annotation."""

    def wait(seconds: float, signal: int) -> str:
        return ""

    assert definition_error(wait) == (
        "tool 'wait': parameter 'signal' is filled in by the pipeline (with the call's AbortSignal), but it is annotated int; "
        "rename the parameter if the model should send it"
    )


def test_a_default_that_cannot_be_copied_is_a_definition_error_saying_why_copies_are_made():
    """A lock as a default: the message names the parameter, the default's type, the copy's error and the alternatives."""

    def guarded(n: int, lock=threading.Lock()) -> str:  # noqa: B008 - the point of the test
        return ""

    assert definition_error(guarded) == (
        "tool 'guarded': the default of parameter 'lock' (lock) cannot be copied (TypeError: cannot pickle '_thread.lock' object); "
        "each call that leaves the argument out gets a fresh copy of it, so that no call sees what an earlier one did to it. "
        "Use an immutable default (None, a number, a string, a tuple) and build the value in the function, "
        "or bind it with functools.partial (not the model's, and not copied)"
    )


def test_arguments_the_function_does_not_take_are_all_named():
    """Called directly (no schema validation before), a closed tool refuses unknown arguments, naming each in sorted order."""

    def add(a: int, b: int) -> int:
        return a + b

    assert tool_error(tool(add), {"a": 1, "b": 2, "z": 0, "c": 0}) == "Tool 'add' takes no argument(s) 'c', 'z'"


def test_arguments_the_model_may_never_send_are_all_named():
    """signal and on_partial_result sent together to a **kwargs tool: both named, with the reason and the fix."""

    def note(**fields: Any) -> str:
        return "ran"

    assert tool_error(tool(note), {"signal": 1, "on_partial_result": 2, "text": "x"}) == (
        "Tool 'note': 'on_partial_result', 'signal' cannot be sent as argument(s): "
        "passed in by the pipeline or fixed by the tool's definition; leave it out"
    )


@pytest.mark.parametrize("signal", [None, AbortSignal()], ids=["no signal", "a signal that never fired"])
def test_an_async_tool_cancelled_by_itself_says_its_task_was_cancelled(signal):
    """A coroutine that ends in CancelledError with no abort behind it: the error says its task was cancelled (not a signal's reason)."""

    async def give_up() -> str:
        raise asyncio.CancelledError()

    assert tool_error(tool(give_up), {}, signal) == "Tool 'give_up' was cancelled: its task was cancelled"


def test_a_docstring_the_parser_cannot_read_is_logged_with_the_parsers_error(monkeypatch, caplog):
    """When docstring-parser fails, a warning names its exception and text and says the docstring is the description."""
    import docstring_parser

    def refuse(text, *args, **kwargs):
        raise docstring_parser.ParseError("no style fits")

    def lookup(topic: str) -> str:
        """Look a topic up."""
        return topic

    monkeypatch.setattr(docstring_parser, "parse", refuse)
    with caplog.at_level(logging.WARNING, logger="yiemagent.typed.functions"):
        made = tool(lookup)
    assert made.description == "Look a topic up."
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("yiemagent.typed.functions", "WARNING", "docstring not parsed (ParseError: no style fits); using it whole as the description")
    ]
