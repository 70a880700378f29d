"""Timestamps follow a clock a user's test freezes (docs/api.md messages' ``timestamp``; spec §19).

Test tools that freeze time (freezegun, ``unittest.mock.patch("yiemagent.types.datetime")``)
replace the ``datetime`` class a module names: every module attribute that is the real
``datetime.datetime`` becomes a subclass whose ``now`` answers the frozen moment.
``freeze_datetime`` below does exactly that, as freezegun's ``freeze_time`` does, so the
test needs no package the library does not depend on. A timestamp made by a callable bound
to the real ``datetime.now`` when the module was imported would not follow it.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from helpers import WAIT, make_agent
from yiemagent import ask, shutdown, tool
from yiemagent.llm.scripted import ScriptedLLM, tool_call_reply
from yiemagent.types import UserMessage, utc_now

FROZEN = dt.datetime(2020, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)


class _FrozenDatetime(dt.datetime):
    @classmethod
    def now(cls, tz: dt.tzinfo | None = None) -> _FrozenDatetime:  # type: ignore[override]
        frozen = FROZEN.astimezone(tz) if tz is not None else FROZEN.replace(tzinfo=None)
        return cls.combine(frozen.date(), frozen.timetz())


@contextmanager
def freeze_datetime() -> Iterator[None]:
    """What freezegun's ``freeze_time`` does to the modules: each name bound to ``datetime.datetime`` names the frozen class."""
    real = dt.datetime
    patched = [(module, name) for module in list(sys.modules.values()) if getattr(module, "__name__", "").startswith("yiemagent") for name, value in list(vars(module).items()) if value is real]
    for module, name in patched:
        setattr(module, name, _FrozenDatetime)
    try:
        yield
    finally:
        for module, name in patched:
            setattr(module, name, real)


@pytest.mark.spec("19")
def test_every_timestamp_of_a_run_follows_a_frozen_clock():
    """Under a frozen ``datetime`` (as freezegun makes it), ``utc_now``, a message made by hand and every message of a run carry the frozen moment."""

    @tool
    def echo(text: str) -> str:
        """Echo the text."""
        return text

    llm = ScriptedLLM([tool_call_reply(("c1", "echo", '{"text": "x"}')), "done"])
    agent = make_agent(llm, echo, builtin_tools=False)
    try:
        with freeze_datetime():
            assert utc_now() == FROZEN
            assert UserMessage(content=["hi"]).timestamp == FROZEN
            assert ask(agent, "go", timeout=WAIT).text == "done"
            history = list(agent.state.messages)
    finally:
        shutdown(agent, timeout=WAIT)
    assert [type(m).__name__ for m in history] == ["UserMessage", "AssistantMessage", "ToolResultMessage", "AssistantMessage"]
    assert {m.timestamp for m in history} == {FROZEN}
