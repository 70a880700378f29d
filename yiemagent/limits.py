"""The cap on LLM rounds per run (API.md "Agent options" ``max_rounds``, decision 12).

Beyond the spec, whose loop (§6) goes round for as long as the model calls tools: a model
that keeps calling tools must not run up cost without end. The run checks the cap at the
top of each round, after the previous round's tool results are in the history, so a run
stopped by it leaves every tool call answered and the history valid to send again;
``continue_agent`` goes on from there with a fresh allowance of rounds.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from .messages import AssistantMessage, TextContent

__all__ = ["DEFAULT_MAX_ROUNDS", "check_max_rounds", "max_rounds_response", "rounds_exhausted"]

logger = logging.getLogger("yiemagent.run")

DEFAULT_MAX_ROUNDS = 50
"""Decision 12; pydantic-ai's default request limit is also 50."""


def check_max_rounds(value: Any) -> Optional[int]:
    """``value`` if it is a valid ``max_rounds``: None (no limit) or an int of at least 1.

    Raises:
        TypeError: not an int (a bool is refused too: ``max_rounds=True`` is a slip).
        ValueError: an int below 1 — a run must be allowed one round to do anything.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_rounds must be an int or None, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"max_rounds must be at least 1 (or None for no limit), got {value}")
    return value


def rounds_exhausted(rounds_done: int, max_rounds: Optional[int]) -> bool:
    """True when a run that has done ``rounds_done`` LLM rounds may not start another."""
    return max_rounds is not None and rounds_done >= max_rounds


def max_rounds_response(max_rounds: int) -> AssistantMessage:
    """The response of a run stopped by its cap: stop_reason "max_rounds", the limit named.

    Made by the agent, so (like "aborted" and "error") it is not added to the history.
    """
    why = (
        f"the run reached max_rounds={max_rounds} LLM rounds and was stopped; "
        "every tool call has its result; call continue_agent to go on"
    )
    logger.warning("run stopped: %s", why)
    return AssistantMessage([TextContent(f"Stopped after {max_rounds} LLM rounds (max_rounds).")], stop_reason="max_rounds", error_message=why)
