"""Hypothesis profiles and fixtures."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from helpers import EventRecorder
from yiemagent import ToolStore, YiemAgent, register_tool, shutdown

# "ci" keeps `make test` under a few minutes on 2 cores; "deep" is for `make test-deep`.
settings.register_profile("ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "deep", max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow], stateful_step_count=60
)
# "mutate" (make mutate): each mutant reruns the tests that cover it, so fewer examples each
settings.register_profile("mutate", max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def recorder() -> EventRecorder:
    return EventRecorder()


@pytest.fixture
def agents():
    """Agents made by a test, with a store holding ``tools``; each is shut down afterwards."""
    made = []

    def make(llm, tools=(), **kwargs):
        store = ToolStore("test")
        for tool in tools:
            register_tool(store, tool)
        kwargs.setdefault("agent_event_sink", EventRecorder())
        agent = YiemAgent(llm_call=llm, tool_store=store, **kwargs)
        made.append(agent)
        return agent

    yield make
    for agent in made:
        shutdown(agent, timeout=10)
