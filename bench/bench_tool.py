"""`make bench`: what tool() costs — decoration of a 10-parameter function, and each call.

Each figure is printed beside its goal; nothing is asserted. tool() runs once per tool, at
import time, so its goal is loose: well under the time a program takes to start. The
per-call figure is the decoding of arguments into the declared types plus the result
conversion, compared with a hand-written execute doing the same work on plain dicts; then
the same call leaving every default out, where the defaults a call could change are copied
(docs/conformance.md, "Tools from functions") and the immutable ones cost nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Literal, Optional

from yiemagent import AgentToolResult, TextContent, ToolStore, register_tool, tool


class Unit(Enum):
    C = "celsius"
    F = "fahrenheit"


@dataclass
class Place:
    city: str
    country: Optional[str] = None


def forecast(
    place: Place,
    days: int,
    unit: Unit = Unit.C,
    hourly: bool = False,
    fields: list[str] = ["temperature"],  # noqa: B006 - never mutated; a default the schema shows
    detail: Literal["short", "long"] = "short",
    lat: Optional[float] = None,
    lon: Optional[float] = None,
    tags: set[str] = frozenset(),
    note: Annotated[str, "Free text for the forecaster"] = "",
) -> dict:
    """Forecast the weather for a place.

    Args:
        place: Where.
        days: How many days ahead, 1 to 14.
        unit: The temperature unit.
        hourly: Hour by hour instead of daily.
        fields: Which measurements to return.
        detail: How much text.
        lat: Latitude, if the city is ambiguous.
        lon: Longitude, if the city is ambiguous.
        tags: Labels to echo back.
    """
    return {"city": place.city, "days": days, "unit": unit}


ARGS = {"place": {"city": "Oslo", "country": "NO"}, "days": 3, "unit": "fahrenheit", "fields": ["temperature", "wind"], "tags": ["a"]}


def hand_written(tool_call_id, args, signal, on_partial_result):
    return AgentToolResult([TextContent(f'{{"city": "{args["place"]["city"]}", "days": {args["days"]}, "unit": "{args["unit"]}"}}')])


def per_run(repeats: int, run: Callable[[], object]) -> float:
    """Best-of-5 mean seconds per run of ``run`` over ``repeats`` runs."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            run()
        best = min(best, (time.perf_counter() - start) / repeats)
    return best


def main() -> None:
    decorate = per_run(200, lambda: tool(forecast))
    print(f"tool() on a 10-parameter function: {decorate * 1e3:.3f} ms (goal: < 5 ms; it runs once per tool, at import)")
    made = tool(forecast)
    register = per_run(200, lambda: register_tool(ToolStore("bench"), made))
    print(f"  for comparison, register_tool (check_schema) of that tool: {register * 1e3:.3f} ms")
    call = per_run(5000, lambda: made.execute("c1", ARGS, None, print))
    base = per_run(5000, lambda: hand_written("c1", ARGS, None, print))
    print(f"a call through the generated execute: {call * 1e6:.1f} us vs a hand-written execute: {base * 1e6:.1f} us "
          f"(goal: overhead < 100 us per call)")
    # defaults left out: the immutable ones (unit, hourly, detail, lat, lon, tags, note) are
    # passed as they are, at no cost per call; the one list (fields) is copied for each call
    minimal = {"place": {"city": "Oslo"}, "days": 3}
    omitted = per_run(5000, lambda: made.execute("c1", minimal, None, print))
    print(f"  the same call leaving every default out (one list default copied): {omitted * 1e6:.1f} us")
    for what, default in (("an int", 3), ("a tuple of str", ("a", "b")), ("a list", ["temperature"]), ("a dataclass", Place("Oslo"))):
        one = tool(lambda x=default: "", name="one")
        omit = per_run(5000, lambda: one.execute("c1", {}, None, print))
        given = per_run(5000, lambda: one.execute("c1", {"x": 1}, None, print))
        print(f"  a one-parameter tool, default {what} left out: {omit * 1e6:.2f} us (argument sent: {given * 1e6:.2f} us)")


if __name__ == "__main__":
    main()
