"""tool(): how a parameter's annotation is read when the pipeline or the run fills it in (docs/conformance.md, "Tools from functions").

``signal`` and ``on_partial_result`` are always the pipeline's (spec §3 execute): their
annotation is checked only for a plain contradiction (``signal: str``), and a typing form
the check cannot judge is admitted. A parameter annotated ``RunContext`` receives the run's
context whatever its name, also through ``Annotated``.
"""

from __future__ import annotations

from typing import Annotated, Literal, NewType, Protocol

import pytest

from helpers import WAIT, make_agent
from yiemagent import AbortSignal, RunContext, ToolDefinitionError, ask, shutdown, tool
from yiemagent.llm.scripted import ScriptedLLM, tool_call_reply


def refusal(annotation: str) -> str:
    return (
        f"tool 'f': parameter 'signal' is filled in by the pipeline (with the call's AbortSignal), but it is "
        f"annotated {annotation}; rename the parameter if the model should send it"
    )


@pytest.mark.parametrize(
    "annotation, shown",
    [(Annotated[str, "why to stop"], "Annotated[str, 'why to stop']"), (Literal["stop"], "Literal['stop']")],
    ids=["annotated-str", "literal"],
)
def test_a_signal_annotated_with_what_no_abort_signal_is_is_refused(annotation, shown):
    """``Annotated[str, ...]`` is a str, and a ``Literal`` is a set of constants: neither can be the call's AbortSignal."""

    def f(n: int, signal: AbortSignal) -> str:
        return ""

    f.__annotations__["signal"] = annotation
    with pytest.raises(ToolDefinitionError) as raised:
        tool(f)
    assert str(raised.value) == refusal(shown)


class Stoppable(Protocol):
    """What a function needs of its signal (not runtime-checkable: issubclass cannot judge it)."""

    @property
    def aborted(self) -> bool: ...


SignalType = NewType("SignalType", AbortSignal)


@pytest.mark.parametrize(
    "annotation",
    [Annotated[AbortSignal, "the call's signal"], SignalType, Stoppable],
    ids=["annotated-abort-signal", "newtype", "protocol"],
)
def test_a_signal_annotated_with_a_form_that_admits_an_abort_signal_receives_it(annotation):
    """``Annotated[AbortSignal, ...]``, a NewType of it, a Protocol the check cannot judge: the tool is made and the call gets its signal."""
    received = []

    def f(n: int, signal: AbortSignal) -> str:
        received.append(signal)
        return str(n)

    f.__annotations__["signal"] = annotation
    made = tool(f)
    assert list(made.input_schema["properties"]) == ["n"]
    signal = AbortSignal()
    assert made.execute("c1", {"n": 3}, signal, lambda partial: None).content[0].text == "3"
    assert received == [signal] and received[0] is signal


def test_a_parameter_annotated_run_context_with_metadata_receives_the_run_context():
    """``Annotated[RunContext, ...]`` is a RunContext parameter: not in the schema, and it receives the call's context in a run."""
    seen = []

    @tool
    def lookup(key: str, ctx: Annotated[RunContext, "the run"]) -> str:
        """Look a key up in the deps."""
        seen.append(ctx)
        return ctx.deps[key]

    assert list(lookup.input_schema["properties"]) == ["key"]
    llm = ScriptedLLM([tool_call_reply(("c1", "lookup", '{"key": "a"}')), "done"])
    agent = make_agent(llm, lookup, builtin_tools=False, deps={"a": "alpha"})
    try:
        assert ask(agent, "look", timeout=WAIT).text == "done"
    finally:
        shutdown(agent, timeout=WAIT)
    (ctx,) = seen
    assert (type(ctx), ctx.deps, ctx.tool_call_id) == (RunContext, {"a": "alpha"}, "c1")
    assert llm.requests[1]["messages"][-1]["content"] == "alpha"
