"""shared/spec/API.md is the contract outside tests are written against: every name it fixes exists."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import yiemagent

API = Path(__file__).resolve().parents[2] / "shared" / "spec" / "API.md"
pytestmark = pytest.mark.skipif(not API.is_file(), reason=f"{API} not found")
# signatures API.md shows for callables a user supplies, not names the package exports
USER_SUPPLIED = {"execute", "prepare_arguments", "llm_call"}


def api_names() -> set[str]:
    # the "Second push" names are checked as each is built (issue 11 moves this test onto docs/)
    text = API.read_text(encoding="utf-8").split("## Second push", 1)[0]
    names = set(re.findall(r"^\|[^|]+\|\s*`([A-Za-z_]\w*)`\s*\|", text, re.M))  # the Python column of the tables
    for block in re.findall(r"```\n(.*?)```", text, re.S):
        for line in block.splitlines():
            code = line.split("#", 1)[0]
            match = re.match(r"([A-Za-z_]\w*)\s*(?:\(|#|$)", line)
            if match:
                names.add(match.group(1))
            names.update(re.findall(r"(?:^|,\s*)([A-Za-z_]\w*)\(", code))  # "f(), g(), h(...)" on one line
    return names - USER_SUPPLIED


def test_every_name_in_the_api_contract_is_importable_from_the_package():
    """Each type and function named in API.md is importable with `from yiemagent import X`, and listed in __all__."""
    names = api_names()
    assert len(names) > 60, sorted(names)
    missing = sorted(n for n in names if not hasattr(yiemagent, n) or n not in yiemagent.__all__)
    assert not missing, f"API.md names missing from yiemagent: {missing}"


def test_all_is_sorted_and_exact():
    """__all__ is sorted and names only what the package really has."""
    assert list(yiemagent.__all__) == sorted(yiemagent.__all__, key=lambda n: (n[0].islower(), n))
    assert all(hasattr(yiemagent, n) for n in yiemagent.__all__)


def test_agent_keyword_arguments_are_exactly_the_contract():
    """YiemAgent takes exactly the keyword arguments API.md lists, all keyword-only."""
    text = API.read_text(encoding="utf-8")
    block = text[text.index("YiemAgent(*,") : text.index(")", text.index("tool_store=None"))]
    expected = re.findall(r"(\w+)=", block) + list(re.findall(r"\*, (\w+), (\w+),", block)[0])
    second = text.index("YiemAgent(...,")  # the "Second push" options (issue 13)
    expected += re.findall(r"(\w+)=", text[second : text.index(")", second)])
    parameters = inspect.signature(yiemagent.YiemAgent).parameters
    assert set(parameters) == set(expected)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters.values())


@pytest.mark.parametrize(
    "function, parameters",
    [
        ("prepare_tool_call", ["context", "assistant_msg", "tool_call", "config", "signal"]),
        ("execute_prepared_tool_call", ["prep", "signal", "event_sink"]),
        ("finalize_executed_tool_call", ["context", "assistant_msg", "prep", "executed", "config", "signal"]),
        ("execute_tool_calls", ["context", "assistant_msg", "tool_calls", "config", "signal", "event_sink"]),
        ("execute_tool_calls_sequential", ["context", "assistant_msg", "tool_calls", "config", "signal", "event_sink"]),
        ("execute_tool_calls_parallel", ["context", "assistant_msg", "tool_calls", "config", "signal", "event_sink"]),
        ("validate_required_args", ["args", "input_schema"]),
        ("take_response", ["agent", "timeout"]),
        ("shutdown", ["agent", "timeout"]),
    ],
)
def test_parameter_order_follows_the_contract(function, parameters):
    """The pipeline functions take the parameters of API.md, in its order."""
    assert list(inspect.signature(getattr(yiemagent, function)).parameters)[: len(parameters)] == parameters
