"""The built-in tools getTime, getWeather and listTools (spec §1 Steps 1-4, §15), against a real local server."""

from __future__ import annotations

import re

import pytest

from helpers import run_tool
from localserver import LocalServer, Reply, free_port_url
from yiemagent import AgentToolCall, ToolError, ToolStore, get_tools, register_all_tools
from yiemagent.tools.get_time import get_time_execute, get_time_prepare_arguments, get_time_tool
from yiemagent.tools.get_weather import get_weather_tool

TOKYO = {
    "results": [
        {"id": 1850147, "name": "Tokyo", "latitude": 35.6895, "longitude": 139.69171, "country": "Japan", "timezone": "Asia/Tokyo"}
    ],
    "generationtime_ms": 0.6,
}
FORECAST = {
    "latitude": 35.7,
    "longitude": 139.6875,
    "timezone": "GMT",
    "current_units": {"time": "iso8601", "temperature_2m": "°C", "relative_humidity_2m": "%", "wind_speed_10m": "km/h", "weather_code": "wmo code"},
    "current": {"time": "2026-12-02T12:00", "interval": 900, "temperature_2m": 21.6, "relative_humidity_2m": 48, "wind_speed_10m": 11.2, "weather_code": 0},
}


def run(tool, args, partials=None):
    """The tool's outcome as the agent sees it: errors raised by the tool become error results."""
    return run_tool(tool, args, partials)


def text(outcome) -> str:
    return outcome.result.content[0].text


@pytest.fixture
def open_meteo(monkeypatch):
    """A local server answering like Open-Meteo's geocoding and forecast APIs; env vars point at it."""
    routes = {"/v1/search": lambda r: Reply(body=TOKYO), "/v1/forecast": lambda r: Reply(body=FORECAST)}
    with LocalServer(lambda request: routes[request.path](request)) as server:
        monkeypatch.setenv("YIEMAGENT_GEOCODING_URL", f"{server.url}/v1")
        monkeypatch.setenv("YIEMAGENT_FORECAST_URL", f"{server.url}/v1/")
        server.routes = routes
        yield server


@pytest.mark.spec("1")
def test_register_all_tools_registers_the_four_built_ins_in_order():
    """Spec §1 Step 2: getWeather, getTime, writeTool, listTools — listTools last."""
    store = ToolStore("s")
    assert list(register_all_tools(store)) == ["getWeather", "getTime", "writeTool", "listTools"]
    assert list(get_tools(store)) == ["getWeather", "getTime", "writeTool", "listTools"]


@pytest.mark.spec("1")
def test_list_tools_output_of_the_built_ins():
    """Spec §1 Step 1: "Available tools:" then "- name: label — description" for each tool."""
    store = ToolStore("s")
    register_all_tools(store)
    lines = text(run(store.tools["listTools"], {})).splitlines()
    assert lines[0] == "Available tools:"
    assert lines[1].startswith("- getWeather: Weather Lookup — Fetch the current weather")
    assert lines[2].startswith("- getTime: Time Lookup — Get the current local time")
    assert [line.split(":")[0] for line in lines[1:]] == ["- getWeather", "- getTime", "- writeTool", "- listTools"]


@pytest.mark.spec("1")
def test_get_weather_in_the_spec_form_with_numbers_in_details(open_meteo):
    """Spec §1 Step 4: "Weather in Tokyo: <condition>, 22°C"; the numbers are in details."""
    partials = []
    outcome = run(get_weather_tool(), {"city": "Tokyo"}, partials)
    result = outcome.result
    assert text(outcome) == "Weather in Tokyo: Clear sky, 22°C" and not outcome.is_error
    assert result.details["temperature_c"] == 21.6 and result.details["weather_code"] == 0
    assert result.details["relative_humidity_pct"] == 48 and result.details["wind_speed_kmh"] == 11.2
    assert result.terminate is False and result.usage is None
    geocode, forecast = open_meteo.requests
    assert geocode.query["name"] == ["Tokyo"] and geocode.query["count"] == ["1"]
    assert forecast.query["latitude"] == ["35.6895"] and "temperature_2m" in forecast.query["current"][0]
    assert partials == [{"stage": "geocoded", "name": "Tokyo", "country": "Japan"}]


@pytest.mark.spec("1")
def test_get_weather_unknown_city_is_an_error_saying_so(open_meteo):
    """A city the geocoder does not know is an error result naming the city."""
    open_meteo.routes["/v1/search"] = lambda r: Reply(body={"generationtime_ms": 0.3})
    result = run(get_weather_tool(), {"city": "Atlantis"})
    assert result.is_error and text(result).startswith("Tool 'getWeather' failed: City 'Atlantis' was not found")


@pytest.mark.spec("1")
@pytest.mark.parametrize(
    "route, reply, fragment",
    [
        ("/v1/forecast", Reply(body={"latitude": 1}), "unexpected response"),
        ("/v1/forecast", Reply(body={"current": {"temperature_2m": "warm", "weather_code": 0}}), "'current.temperature_2m' is missing or not a number"),
        ("/v1/forecast", Reply(status=500, body={"error": True, "reason": "upstream down"}), "HTTP 500"),
        ("/v1/search", Reply(body="<html>maintenance</html>"), "not JSON"),
        ("/v1/search", Reply(body={"results": [{"name": "x"}]}), "'latitude' and 'longitude'"),
    ],
)
def test_get_weather_bad_bodies_are_errors_saying_which(open_meteo, route, reply, fragment):
    """An HTTP error or a body not of the documented shape is an error result that says which."""
    open_meteo.routes[route] = lambda r: reply
    result = run(get_weather_tool(), {"city": "Tokyo"})
    assert result.is_error and fragment in text(result)
    assert ("upstream down" in text(result)) == (reply.status == 500)


@pytest.mark.spec("1")
def test_get_weather_unreachable_service_is_an_error(monkeypatch):
    """A service nobody answers at is an error result naming the URL."""
    url = free_port_url()
    monkeypatch.setenv("YIEMAGENT_GEOCODING_URL", url)
    result = run(get_weather_tool(), {"city": "Tokyo"})
    assert result.is_error and url in text(result)
    assert text(result).startswith("Tool 'getWeather' failed: Weather service unreachable while looking up 'Tokyo':")


@pytest.mark.spec("8.1")
def test_get_weather_requires_a_city_through_the_pipeline():
    """The schema requires "city": a call without it is refused in PREPARE."""
    from helpers import ASSISTANT, SEQUENTIAL, context_with
    from yiemagent import prepare_tool_call

    outcome = prepare_tool_call(context_with(get_weather_tool()), ASSISTANT, AgentToolCall("c", "getWeather", {}), SEQUENTIAL, None)
    assert "'city' is a required property" in outcome.result.content[0].text


@pytest.mark.spec("1")
def test_get_time_in_a_zone_and_local():
    """getTime gives the time in an IANA zone, or local time without one."""
    tokyo = run(get_time_tool(), {"timezone": "Asia/Tokyo"})
    assert re.fullmatch(r"Current time in Asia/Tokyo: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d JST \(UTC\+09:00\)", text(tokyo))
    assert tokyo.result.details["utc_offset"] == "UTC+09:00" and tokyo.result.details["timezone"] == "Asia/Tokyo"
    assert text(run(get_time_tool(), {})).startswith("Current local time: ")


@pytest.mark.spec("1")
@pytest.mark.parametrize("zone, fragment", [("Mars/Olympus", "'Mars/Olympus' was not found"), ("../etc/passwd", "not a valid IANA")])
def test_get_time_unknown_zone_is_an_error_naming_it(zone, fragment):
    """An unknown or malformed zone is an error result that says which zone."""
    with pytest.raises(ToolError, match=re.escape(fragment)):
        get_time_execute("c", {"timezone": zone}, None, lambda p: None)
    outcome = run(get_time_tool(), {"timezone": zone})
    assert outcome.is_error and text(outcome).startswith("Tool 'getTime' failed: Time zone")


@pytest.mark.spec("17")
def test_get_time_prepare_arguments_trims_and_drops_empty_zone():
    """The optional prepare hook of the contract: trims the zone; an empty zone means local time."""
    assert get_time_prepare_arguments({"timezone": "  Asia/Tokyo "}) == {"timezone": "Asia/Tokyo"}
    assert get_time_prepare_arguments({"timezone": "  "}) == {}
    assert get_time_tool().prepare_arguments is get_time_prepare_arguments


# --- listTools: its definition, its exact text and details -------------------------------------------


@pytest.mark.spec("15")
def test_list_tools_definition_is_exact_and_parallel():
    """listTools as the model sees it: name, label, description, an empty-object schema; it may run in parallel."""
    from yiemagent.tools.list_tools import list_tools_tool

    tool = list_tools_tool(ToolStore("s"))
    assert (tool.name, tool.label) == ("listTools", "List Tools")
    assert tool.description == (
        "List every tool available to this agent with its label and description. "
        "Call it to discover tools, or before writing a new tool to avoid a name collision."
    )
    assert tool.input_schema == {"type": "object", "properties": {}}
    assert tool.parallel_tool_execute is True


@pytest.mark.spec("15")
def test_list_tools_of_an_empty_store_says_none_and_names_the_store_in_details():
    """A store with no tools: "Available tools:" then "(none)"; details name the store and an empty list."""
    from yiemagent.tools.list_tools import list_tools_tool

    store = ToolStore("empty")
    outcome = run(list_tools_tool(store), {})
    assert text(outcome) == "Available tools:\n(none)" and not outcome.is_error
    assert outcome.result.details == {"store": "empty", "tools": []}


@pytest.mark.spec("15")
def test_list_tools_lists_its_store_exactly_with_names_in_details():
    """Each tool as "- name: label — description", in registration order; details list the names."""
    from helpers import make_tool
    from yiemagent import register_tool

    store = ToolStore("mine")
    register_tool(store, make_tool("alpha"))
    register_all_tools(store)
    outcome = run(store.tools["listTools"], {})
    lines = text(outcome).split("\n")
    assert lines[0] == "Available tools:" and lines[1] == "- alpha: Alpha — test tool alpha"
    assert lines[-1] == (
        "- listTools: List Tools — List every tool available to this agent with its label and description. "
        "Call it to discover tools, or before writing a new tool to avoid a name collision."
    )
    assert outcome.result.details == {"store": "mine", "tools": ["alpha", "getWeather", "getTime", "writeTool", "listTools"]}


# --- getTime: exact texts, details, offsets of every sign ----------------------------------------------


@pytest.fixture
def local_tz():
    """Set the process's local time zone (TZ + tzset) for one test, and restore it after."""
    import os
    import time

    saved = os.environ.get("TZ")

    def set_tz(value: str) -> None:
        os.environ["TZ"] = value
        time.tzset()

    yield set_tz
    if saved is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = saved
    time.tzset()


def check_time(outcome, label: str, zone, tzname: str, offset: str) -> None:
    """The text and details of a getTime result, checked against the clock read around the call."""
    from datetime import datetime

    details = outcome.result.details
    assert not outcome.is_error and set(details) == {"iso", "timezone", "utc_offset", "unix"}
    moment = datetime.fromisoformat(details["iso"])
    assert details["timezone"] == zone and details["utc_offset"] == offset
    assert details["unix"] == moment.timestamp()
    shown = f"{moment:%Y-%m-%d %H:%M:%S}"
    assert text(outcome) == (f"{label}: {shown} {tzname} ({offset})" if tzname else f"{label}: {shown} ({offset})")


@pytest.mark.spec("1")
@pytest.mark.parametrize(
    "zone, tzname, offset",
    [("UTC", "UTC", "UTC+00:00"), ("America/Bogota", "-05", "UTC-05:00"), ("Asia/Kolkata", "IST", "UTC+05:30"), ("Etc/GMT+1", "-01", "UTC-01:00")],
)
def test_get_time_in_a_zone_gives_its_exact_text_and_details(zone, tzname, offset):
    """Zones without daylight saving: zero, negative and half-hour offsets; details agree with the text."""
    import time

    before = time.time()
    outcome = run(get_time_tool(), {"timezone": zone})
    after = time.time()
    check_time(outcome, f"Current time in {zone}", zone, tzname, offset)
    assert before <= outcome.result.details["unix"] <= after


@pytest.mark.spec("1")
@pytest.mark.parametrize(
    "tz, tzname, offset",
    [("EST5", "EST", "UTC-05:00"), ("UTC0", "UTC", "UTC+00:00"), ("<>5", "", "UTC+00:00"), ("FOO+00:00:30", "FOO", "UTC-00:01")],
)
def test_get_time_local_gives_the_machine_zone_exactly(local_tz, tz, tzname, offset):
    """Local time follows the machine's zone; a zone without a name leaves no double space; an offset
    that is not whole minutes is floored to the minute (-30 s shows as UTC-00:01)."""
    import time

    local_tz(tz)
    before = time.time()
    outcome = run(get_time_tool(), {})
    after = time.time()
    check_time(outcome, "Current local time", None, tzname, offset)
    assert before <= outcome.result.details["unix"] <= after


@pytest.mark.spec("1")
def test_get_time_error_texts_are_exact():
    """The texts the model reads for an unknown zone and a malformed one."""
    outcome = run(get_time_tool(), {"timezone": "Mars/Olympus"})
    assert outcome.is_error and text(outcome) == (
        "Tool 'getTime' failed: Time zone 'Mars/Olympus' was not found in the IANA time zone database. "
        "Use a name such as 'Asia/Tokyo', 'Europe/Paris' or 'America/New_York'"
    )
    outcome = run(get_time_tool(), {"timezone": "../etc/passwd"})
    assert outcome.is_error and text(outcome) == (
        "Tool 'getTime' failed: Time zone '../etc/passwd' is not a valid IANA time zone name (like 'Asia/Tokyo')"
    )


@pytest.mark.spec("1")
def test_get_time_without_a_zone_database_says_to_install_tzdata(monkeypatch):
    """On a machine with no IANA database any zone is "not found": the error says what to install instead."""
    import zoneinfo

    monkeypatch.setattr(zoneinfo, "available_timezones", lambda: set())
    outcome = run(get_time_tool(), {"timezone": "Mars/Olympus"})
    assert outcome.is_error and text(outcome) == (
        "Tool 'getTime' failed: No IANA time zone database is installed on this machine (install the 'tzdata' package); "
        "call getTime without a timezone for local time"
    )


@pytest.mark.spec("1")
def test_get_time_definition_is_exact_and_parallel():
    """getTime as the model sees it; it may run in parallel."""
    from yiemagent.tools.get_time import INPUT_SCHEMA

    tool = get_time_tool()
    assert (tool.name, tool.label) == ("getTime", "Time Lookup")
    assert tool.description == "Get the current local time, or the current time in an IANA time zone such as 'Asia/Tokyo'."
    assert tool.input_schema is INPUT_SCHEMA and tool.parallel_tool_execute is True


# --- getWeather: exact texts and details, the requests it sends, every failure's text ----------------


@pytest.mark.spec("1")
def test_get_weather_details_and_requests_are_exact(open_meteo):
    """The details the tool returns and the query strings of both requests, in full."""
    from yiemagent.tools.get_weather import CURRENT_FIELDS

    outcome = run(get_weather_tool(), {"city": "  tokyo "})
    assert text(outcome) == "Weather in Tokyo: Clear sky, 22°C"
    assert outcome.result.details == {
        "city": "Tokyo",
        "country": "Japan",
        "latitude": 35.6895,
        "longitude": 139.69171,
        "time": "2026-12-02T12:00",
        "temperature_c": 21.6,
        "weather_code": 0,
        "condition": "Clear sky",
        "relative_humidity_pct": 48,
        "wind_speed_kmh": 11.2,
    }
    geocode, forecast = open_meteo.requests
    assert (geocode.path, geocode.query) == ("/v1/search", {"name": ["tokyo"], "count": ["1"], "language": ["en"], "format": ["json"]})
    assert (forecast.path, forecast.query) == ("/v1/forecast", {"latitude": ["35.6895"], "longitude": ["139.69171"], "current": [CURRENT_FIELDS]})


@pytest.mark.spec("1")
def test_get_weather_unknown_code_and_a_place_without_name(open_meteo):
    """A weather code outside the WMO table is shown as "Weather code N"; a place the geocoder
    gives no name is shown by the city as the model wrote it (trimmed)."""
    open_meteo.routes["/v1/search"] = lambda r: Reply(body={"results": [{"latitude": 1.5, "longitude": -2.25}]})
    open_meteo.routes["/v1/forecast"] = lambda r: Reply(body={"current": {"temperature_2m": -3.4, "weather_code": 42}})
    outcome = run(get_weather_tool(), {"city": " Nowhere "})
    assert text(outcome) == "Weather in Nowhere: Weather code 42, -3°C" and not outcome.is_error
    assert outcome.result.details == {
        "city": "Nowhere",
        "country": None,
        "latitude": 1.5,
        "longitude": -2.25,
        "time": None,
        "temperature_c": -3.4,
        "weather_code": 42,
        "condition": "Weather code 42",
        "relative_humidity_pct": None,
        "wind_speed_kmh": None,
    }


@pytest.mark.spec("1")
def test_get_weather_base_urls_are_used_as_given_minus_trailing_slashes():
    """Only trailing slashes are cut from a base URL: a path ending in X (a private deployment) is kept."""
    routes = {"/meteoX/search": lambda r: Reply(body=TOKYO), "/meteoX/forecast": lambda r: Reply(body=FORECAST)}
    with LocalServer(lambda request: routes.get(request.path, lambda r: Reply(status=404, body={}))(request)) as server:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("YIEMAGENT_GEOCODING_URL", f"{server.url}/meteoX//")
            mp.setenv("YIEMAGENT_FORECAST_URL", f"{server.url}/meteoX/")
            outcome = run(get_weather_tool(), {"city": "Tokyo"})
        assert text(outcome) == "Weather in Tokyo: Clear sky, 22°C"
        assert [r.path for r in server.requests] == ["/meteoX/search", "/meteoX/forecast"]


@pytest.fixture
def no_internet(monkeypatch):
    """HTTPS goes through a proxy where nothing listens: a request to the real Open-Meteo fails at once."""
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", free_port_url())
    monkeypatch.delenv("YIEMAGENT_GEOCODING_URL", raising=False)
    monkeypatch.delenv("YIEMAGENT_FORECAST_URL", raising=False)


@pytest.mark.spec("1")
def test_get_weather_defaults_to_open_meteo(no_internet, monkeypatch):
    """Without the environment variables the tool asks Open-Meteo itself (both APIs); unreachable, it says
    which URL, which city and which error."""
    outcome = run(get_weather_tool(), {"city": "Tokyo"})
    assert outcome.is_error and text(outcome) == (
        "Tool 'getWeather' failed: Weather service unreachable while looking up 'Tokyo': "
        "https://geocoding-api.open-meteo.com/v1/search (ProxyError)"
    )
    with LocalServer(lambda request: Reply(body=TOKYO)) as server:
        monkeypatch.setenv("YIEMAGENT_GEOCODING_URL", server.url)
        outcome = run(get_weather_tool(), {"city": "tokyo"})
    assert outcome.is_error and text(outcome) == (
        "Tool 'getWeather' failed: Weather service unreachable while looking up 'Tokyo': "
        "https://api.open-meteo.com/v1/forecast (ProxyError)"
    )


@pytest.mark.spec("1")
def test_get_weather_slow_service_times_out_saying_so(open_meteo, monkeypatch):
    """A forecast service that does not answer within the timeout: the error names the timeout,
    the place and the URL (the timeout is shortened; the server is held until the tool gave up)."""
    import threading

    from yiemagent.tools import get_weather

    monkeypatch.setattr(get_weather, "TIMEOUT_S", 0.25)
    gave_up = threading.Event()
    open_meteo.routes["/v1/forecast"] = lambda r: Reply(body=FORECAST, before=lambda: gave_up.wait(10))
    try:
        outcome = run(get_weather_tool(), {"city": "Tokyo"})
    finally:
        gave_up.set()
    assert outcome.is_error and text(outcome) == (
        f"Tool 'getWeather' failed: Weather service timed out after 0.25 s while looking up 'Tokyo': {open_meteo.url}/v1/forecast"
    )


@pytest.mark.spec("1")
def test_get_weather_unreachable_forecast_names_the_geocoded_place(open_meteo, monkeypatch):
    """The forecast request's errors name the place the geocoder found, not the text the model wrote."""
    url = free_port_url()
    monkeypatch.setenv("YIEMAGENT_FORECAST_URL", url)
    outcome = run(get_weather_tool(), {"city": "tokyo"})
    assert outcome.is_error and text(outcome) == (
        f"Tool 'getWeather' failed: Weather service unreachable while looking up 'Tokyo': {url}/forecast (ConnectionError)"
    )


@pytest.mark.spec("1")
@pytest.mark.parametrize(
    "route, reply, tail",
    [
        (
            "/v1/search",
            Reply(body=[1, 2]),
            "sent an unexpected response from {url}/v1/search: the body is not a JSON object",
        ),
        (
            "/v1/search",
            Reply(body={"results": {"name": "Tokyo"}}),
            "sent an unexpected response from {url}/v1/search: a result without numeric 'latitude' and 'longitude'",
        ),
        (
            "/v1/search",
            Reply(body={"results": [{"name": "x", "latitude": 1}]}),
            "sent an unexpected response from {url}/v1/search: a result without numeric 'latitude' and 'longitude'",
        ),
        ("/v1/search", Reply(body="<html>maintenance</html>"), "sent a body that is not JSON from {url}/v1/search"),
        (
            "/v1/forecast",
            Reply(body=[FORECAST]),
            "sent an unexpected response from {url}/v1/forecast: no 'current' object",
        ),
        (
            "/v1/forecast",
            Reply(body={"current": [1]}),
            "sent an unexpected response from {url}/v1/forecast: no 'current' object",
        ),
        (
            "/v1/forecast",
            Reply(body={"current": {"temperature_2m": "warm", "weather_code": 0}}),
            "sent an unexpected response from {url}/v1/forecast: 'current.temperature_2m' is missing or not a number",
        ),
        (
            "/v1/forecast",
            Reply(body={"current": {"temperature_2m": 1, "weather_code": True}}),
            "sent an unexpected response from {url}/v1/forecast: 'current.weather_code' is missing or not a number",
        ),
        (
            "/v1/forecast",
            Reply(status=500, body={"error": True, "reason": "upstream down"}),
            "answered HTTP 500 from {url}/v1/forecast: upstream down",
        ),
        ("/v1/forecast", Reply(status=500, body={"error": True}), "answered HTTP 500 from {url}/v1/forecast"),
        ("/v1/forecast", Reply(status=502, body=["reason"]), "answered HTTP 502 from {url}/v1/forecast"),
        ("/v1/search", Reply(status=503, body="<html>busy</html>"), "answered HTTP 503 from {url}/v1/search"),
    ],
)
def test_get_weather_failure_texts_are_exact(open_meteo, route, reply, tail):
    """Each failure of the service, in the exact words the model reads (the URL named, a reason when given)."""
    open_meteo.routes[route] = lambda r: reply
    outcome = run(get_weather_tool(), {"city": "Tokyo"})
    assert outcome.is_error and text(outcome) == "Tool 'getWeather' failed: Weather service " + tail.format(url=open_meteo.url)


@pytest.mark.spec("1")
def test_get_weather_aborted_between_the_requests_stops_before_the_forecast(open_meteo):
    """An abort that arrives while the place is reported: no forecast request, "Operation aborted"."""
    from yiemagent import AbortSignal
    from yiemagent.tools.get_weather import get_weather_execute

    signal = AbortSignal()
    with pytest.raises(ToolError) as caught:
        get_weather_execute("c", {"city": "Tokyo"}, signal, lambda partial: signal.abort())
    assert str(caught.value) == "Operation aborted"
    assert [r.path for r in open_meteo.requests] == ["/v1/search"]


@pytest.mark.spec("1")
def test_get_weather_definition_is_exact_and_parallel():
    """getWeather as the model sees it; it may run in parallel."""
    from yiemagent.tools.get_weather import INPUT_SCHEMA

    tool = get_weather_tool()
    assert (tool.name, tool.label) == ("getWeather", "Weather Lookup")
    assert tool.description == "Fetch the current weather (condition, temperature, humidity, wind) for a city by name."
    assert tool.input_schema is INPUT_SCHEMA and tool.parallel_tool_execute is True


def test_get_weather_asks_the_base_urls_its_options_name(monkeypatch):
    """get_weather_tool(geocoding_url=..., forecast_url=...): each request goes to the service its option names, not the environment's."""
    routes = {"/geo/v1/search": lambda r: Reply(body=TOKYO), "/fc/v1/forecast": lambda r: Reply(body=FORECAST)}
    with LocalServer(lambda request: routes[request.path](request)) as server:
        monkeypatch.setenv("YIEMAGENT_GEOCODING_URL", "http://127.0.0.1:9/v1")
        monkeypatch.setenv("YIEMAGENT_FORECAST_URL", "http://127.0.0.1:9/v1")
        tool = get_weather_tool(geocoding_url=f"{server.url}/geo/v1", forecast_url=f"{server.url}/fc/v1/")
        outcome = run(tool, {"city": "Tokyo"})
    assert text(outcome) == "Weather in Tokyo: Clear sky, 22°C" and not outcome.is_error
    assert [request.path for request in server.requests] == ["/geo/v1/search", "/fc/v1/forecast"]
