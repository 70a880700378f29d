"""Usage sums (decision 13): add_usage adds field by field, and a count a careless client left wrong adds nothing or its int part."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from yiemagent import LLMUsage
from yiemagent.run import Run
from yiemagent.types import _USAGE_FIELDS, NO_USAGE, UsageMeter, _fields_of, _summed, add_usage, built

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


counts = st.integers() | st.integers(-(2**70), 2**70) | st.just(0)
careless_counts = counts | st.booleans() | st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(["7", "many"])


def usages(values: st.SearchStrategy) -> st.SearchStrategy:
    """LLMUsage built by its __init__, or as a session read builds one (its fields set at once, no __post_init__: a total of 0 may stay)."""
    fields = st.tuples(*(values for _ in _USAGE_FIELDS))
    by_init = fields.map(lambda v: LLMUsage(*v))
    set_at_once = fields.map(lambda v: built(LLMUsage, **dict(zip(_USAGE_FIELDS, v, strict=True))))
    return by_init | set_at_once


@given(usages(counts), usages(counts) | st.none())
@example(LLMUsage(1, 2, 0, 0, 5, 0), LLMUsage(0, 0, 0, 0, -5, 0))  # the parts' totals cancel: the sum's total is its input plus output
@example(LLMUsage(1, 2, 3, 4, 3, 5), built(LLMUsage, input_tokens=6, output_tokens=7, cache_read_tokens=8, cache_write_tokens=9, total_tokens=0, reasoning_tokens=1))
@example(built(LLMUsage, input_tokens=6, output_tokens=7, cache_read_tokens=8, cache_write_tokens=9, total_tokens=0, reasoning_tokens=1), LLMUsage(1, 2, 3, 4, 3, 5))
def test_two_usages_of_int_counts_sum_as_the_long_way_sums_them(total, more):
    """The short way of add_usage (two LLMUsage, every count an int) gives what _counts' long way gives: every field, the
    total of a part without one read as its input plus output, and the sum's total as __post_init__ would leave it."""
    summed = add_usage(total, more)
    if more is None:
        assert summed is total
        return
    expected = _summed(total, more)
    assert type(summed) is LLMUsage and summed == expected and _fields_of(summed) == _fields_of(expected)
    assert summed.to_dict() == expected.to_dict() and hash(summed) == hash(expected)


@given(usages(careless_counts), usages(careless_counts))
def test_a_pair_with_any_count_that_is_not_an_int_takes_the_long_way(total, more):
    """A bool, None, float or text among the counts (a careless client) sends the pair the long way, whose reading of them stands."""
    assert add_usage(total, more) == _summed(total, more)


def test_a_subclass_of_llm_usage_takes_the_long_way_and_the_sum_is_an_llm_usage():
    class Counted(LLMUsage):
        pass

    summed = add_usage(TOTAL, Counted(input_tokens=5, output_tokens=6))
    assert type(summed) is LLMUsage and summed == LLMUsage(15, 10, 3, 2, 25, 1)


def test_a_run_and_a_meter_start_from_the_one_shared_zero_and_never_change_it():
    """Every run's and every agent's sum starts from NO_USAGE (not one made each time); adding to it makes a new usage."""
    meter, first, second = UsageMeter(), Run(1), Run(2)
    assert first.usage is second.usage is meter.total is NO_USAGE and NO_USAGE == LLMUsage()
    meter.add(TOTAL)
    first.usage = add_usage(first.usage, TOTAL)
    assert meter.total == first.usage == TOTAL and second.usage is NO_USAGE and NO_USAGE == LLMUsage()


def test_two_usages_of_int_counts_take_the_short_way(monkeypatch):
    """Two LLMUsage whose counts are all ints are summed without the long way (_summed), whichever comes first."""
    def long_way(total, more):
        raise AssertionError("summed the long way")

    monkeypatch.setattr("yiemagent.types._summed", long_way)
    assert add_usage(TOTAL, LLMUsage(1, 1)) == LLMUsage(11, 5, 3, 2, 16, 1)
    with pytest.raises(AssertionError, match="the long way"):
        add_usage(TOTAL, SimpleNamespace(input_tokens=1))  # type: ignore[arg-type]


def test_a_total_of_another_class_adds_as_the_long_way_adds_it():
    """A running total that is not an LLMUsage (a client's own object) is read by _counts, whatever the part added."""
    assert add_usage(SimpleNamespace(input_tokens=5, total_tokens=5), TOTAL) == LLMUsage(15, 4, 3, 2, 19, 1)  # type: ignore[arg-type]
