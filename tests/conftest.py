"""Hypothesis profiles and the fixtures every test folder shares (tests/support/ holds the helpers)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from helpers import EventRecorder, make_agent
from yiemagent import shutdown

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
        agent = make_agent(llm, *tools, sink=kwargs.pop("agent_event_sink", EventRecorder()), **kwargs)
        made.append(agent)
        return agent

    yield make
    for agent in made:
        shutdown(agent, timeout=10)
