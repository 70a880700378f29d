"""``tee(*sinks)``: one event sink that calls several, each failure contained (docs/tracing.md, docs/events.md)."""

from __future__ import annotations

import logging
import threading

import pytest

from helpers import WAIT, EventRecorder
from yiemagent import AgentRunEndEvent, AgentRunStartEvent, TextContent, run_agent, take_response, tee
from yiemagent.llm import ScriptedLLM

EVENT = AgentRunStartEvent(1, 1)


def test_each_sink_gets_each_event_in_the_order_given():
    """tee calls its sinks one after another, in the order they were given, with the same event."""
    calls = []
    sink = tee(lambda e: calls.append(("a", e)), lambda e: calls.append(("b", e)), lambda e: calls.append(("c", e)))
    sink(EVENT)
    assert calls == [("a", EVENT), ("b", EVENT), ("c", EVENT)]


@pytest.mark.parametrize("raised", [ValueError("broken sink"), SystemExit(3), KeyboardInterrupt()])
def test_a_sink_that_raises_is_logged_and_the_others_still_get_the_event(raised, caplog):
    """Whatever a sink raises (SystemExit, KeyboardInterrupt raised outside the main thread) is logged with its traceback; the next sinks still run."""
    got = []

    def broken(event):
        raise raised

    sink = tee(got.append, broken, got.append)
    caught: list = []
    thread = threading.Thread(target=lambda: caught.append(sink(EVENT) is None))  # not the main thread: nothing may escape
    with caplog.at_level(logging.ERROR, logger="yiemagent.events"):
        thread.start()
        thread.join(WAIT)
    assert caught == [True] and got == [EVENT, EVENT]
    (record,) = [r for r in caplog.records if r.name == "yiemagent.events"]
    assert record.exc_info is not None and record.exc_info[1] is raised
    assert record.getMessage() == f"event sink {broken!r} raised on AgentRunStartEvent; the event was dropped for it, the other sinks still get it"


class Named:
    """A sink with a repr of its own."""

    def __init__(self, name):
        self.name = name

    def __call__(self, event):
        pass

    def __repr__(self):
        return self.name


def test_a_tees_repr_lists_its_sinks():
    """repr(tee(a, b)) is 'tee(a, b)': a log line naming the agent's sink says which sinks it calls."""
    assert repr(tee(Named("console"), Named("tracer"))) == "tee(console, tracer)"
    assert repr(tee()) == "tee()"


def test_ctrl_c_in_the_main_thread_stops_the_tee():
    """A real Ctrl-C (KeyboardInterrupt in the main thread) propagates, as it does from the agent's emitter."""

    def interrupted(event):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tee(interrupted)(EVENT)


def test_none_is_skipped_and_anything_else_that_is_not_callable_is_refused():
    """An optional sink may be passed as None; a non-callable is a TypeError naming its position."""
    got = []
    tee(None, got.append, None)(EVENT)
    assert got == [EVENT]
    tee()(EVENT)  # no sink: nothing to call
    with pytest.raises(TypeError, match=r"tee\(\) sink 1 is not callable: str"):
        tee(got.append, "not a sink")


def test_an_agent_watched_through_a_tee_serves_on_when_one_sink_raises_on_every_event(agents, caplog):
    """The recorder beside a sink that always raises still sees the whole run, and the run ends as usual."""
    recorder = EventRecorder()

    def always_raises(event):
        raise RuntimeError("this sink is broken")

    agent = agents(ScriptedLLM(["answer"]), agent_event_sink=tee(always_raises, recorder))
    with caplog.at_level(logging.ERROR, logger="yiemagent.events"):
        run_agent(agent, "question")
        assert take_response(agent, timeout=WAIT).content == [TextContent("answer")]
        agent.wait_until_idle(WAIT)
    assert [type(e).__name__ for e in recorder.events] == ["AgentRunStartEvent", "LLMCallStartEvent", "LLMCallEndEvent", "AgentRunEndEvent"]
    assert isinstance(recorder.events[-1], AgentRunEndEvent)
    assert len([r for r in caplog.records if "this sink is broken" in str(r.exc_info[1])]) == 4


def test_the_repr_names_the_sinks():
    """repr(tee(a, b)) shows both sinks, for a log line that names a failing sink."""

    def console(event):
        pass

    assert repr(tee(console, None)).startswith("tee(<function test_the_repr_names_the_sinks.<locals>.console")
