"""Usage sums (decision 13): add_usage adds field by field, and a count a careless client left wrong adds nothing or its int part."""

from __future__ import annotations

from types import SimpleNamespace

from yiemagent import LLMUsage
from yiemagent.types import add_usage

TOTAL = LLMUsage(input_tokens=10, output_tokens=4, cache_read_tokens=3, cache_write_tokens=2, total_tokens=14, reasoning_tokens=1)


def test_add_usage_adds_every_field_and_none_adds_nothing():
    """Every count of LLMUsage is summed on its own; a round that reported no usage (None) leaves the total as it was."""
    more = LLMUsage(input_tokens=5, output_tokens=6, cache_read_tokens=1, cache_write_tokens=0, total_tokens=11, reasoning_tokens=2)
    assert add_usage(TOTAL, more) == LLMUsage(15, 10, 4, 2, 25, 3)
    assert add_usage(TOTAL, None) is TOTAL


def test_a_count_that_is_not_an_int_adds_zero_or_its_int_part():
    """A bool, None, text that is no number or an infinite float counts as 0; a float is truncated, numeric text read
    as its int: a client's careless usage never makes the sum raise."""
    careless = LLMUsage(
        input_tokens=True,  # type: ignore[arg-type]
        output_tokens=None,  # type: ignore[arg-type]
        cache_read_tokens="many",  # type: ignore[arg-type]
        cache_write_tokens=float("inf"),  # type: ignore[arg-type]
        total_tokens=2.9,  # type: ignore[arg-type]
        reasoning_tokens="7",  # type: ignore[arg-type]
    )
    assert add_usage(TOTAL, careless) == LLMUsage(10, 4, 3, 2, 16, 8)
    assert add_usage(LLMUsage(), LLMUsage(input_tokens=False, output_tokens=float("nan"))) == LLMUsage()  # type: ignore[arg-type]


def test_a_usage_object_without_some_counts_adds_only_those_it_has():
    """A usage of another class (a provider's own object on a failed call's exception, llm/fallback.py) adds the counts
    it has; the ones it lacks add 0."""
    partial = SimpleNamespace(input_tokens=5, total_tokens=5)
    assert add_usage(TOTAL, partial) == LLMUsage(15, 4, 3, 2, 19, 1)  # type: ignore[arg-type]
