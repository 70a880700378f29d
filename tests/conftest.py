"""Hypothesis profiles and fixtures."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from helpers import EventRecorder

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
