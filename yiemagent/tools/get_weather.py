"""``getWeather``: the current weather in a city, from Open-Meteo (spec §1 Steps 2-4, §17).

Two keyless HTTP calls with ``requests``: the geocoding API finds the city, the forecast
API gives its current conditions. Both base URLs can be pointed elsewhere (a test
server, a private Open-Meteo deployment, the demo's local stand-in) by the tool's options
``get_weather_tool(geocoding_url=..., forecast_url=...)``, or else by environment
variables, read on every call:

- ``YIEMAGENT_GEOCODING_URL`` (default ``https://geocoding-api.open-meteo.com/v1``)
- ``YIEMAGENT_FORECAST_URL`` (default ``https://api.open-meteo.com/v1``)

Every failure raises a ``ToolError`` saying which: the city was not found, the service could
not be reached or timed out, it answered an HTTP error, or its body was not of the
documented shape.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any, Optional

import requests

from ..types import AbortSignal, AgentTool, AgentToolResult, TextContent
from ..errors import ToolError
from ..pipeline import ABORTED_MESSAGE

__all__ = ["WMO_WEATHER_CODES", "get_weather_execute", "get_weather_tool"]

DEFAULT_GEOCODING_URL = "https://geocoding-api.open-meteo.com/v1"
DEFAULT_FORECAST_URL = "https://api.open-meteo.com/v1"
TIMEOUT_S = 10.0
CURRENT_FIELDS = "temperature_2m,relative_humidity_2m,wind_speed_10m,weather_code"

# WMO weather interpretation codes, as Open-Meteo documents them.
WMO_WEATHER_CODES = {
    0: "Clear sky",
    1: "Mainly clear",
    2: "Partly cloudy",
    3: "Overcast",
    45: "Fog",
    48: "Depositing rime fog",
    51: "Light drizzle",
    53: "Moderate drizzle",
    55: "Dense drizzle",
    56: "Light freezing drizzle",
    57: "Dense freezing drizzle",
    61: "Slight rain",
    63: "Moderate rain",
    65: "Heavy rain",
    66: "Light freezing rain",
    67: "Heavy freezing rain",
    71: "Slight snowfall",
    73: "Moderate snowfall",
    75: "Heavy snowfall",
    77: "Snow grains",
    80: "Slight rain showers",
    81: "Moderate rain showers",
    82: "Violent rain showers",
    85: "Slight snow showers",
    86: "Heavy snow showers",
    95: "Thunderstorm",
    96: "Thunderstorm with slight hail",
    99: "Thunderstorm with heavy hail",
}

INPUT_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "minLength": 1, "description": "City name, e.g. 'Tokyo'"}},
    "required": ["city"],
}


class _ServiceError(ToolError):
    """A failure of the weather service, already worded for the model."""


def _get_json(url: str, params: dict[str, Any], city: str) -> Any:
    """GET ``url`` and return its JSON body, or raise ``_ServiceError`` saying what went wrong."""
    try:
        response = requests.get(url, params=params, timeout=TIMEOUT_S)
    except requests.Timeout:
        raise _ServiceError(f"Weather service timed out after {TIMEOUT_S:g} s while looking up {city!r}: {url}") from None
    except requests.RequestException as exc:
        raise _ServiceError(f"Weather service unreachable while looking up {city!r}: {url} ({type(exc).__name__})") from None
    if response.status_code != 200:
        reason = ""
        try:
            body = response.json()
            reason = f": {body.get('reason')}" if isinstance(body, dict) and body.get("reason") else ""
        except ValueError:
            pass
        raise _ServiceError(f"Weather service answered HTTP {response.status_code} from {url}{reason}")
    try:
        return response.json()
    except ValueError:
        raise _ServiceError(f"Weather service sent a body that is not JSON from {url}") from None


def _unexpected(url: str, what: str) -> _ServiceError:
    return _ServiceError(f"Weather service sent an unexpected response from {url}: {what}")


def _base_url(given: Optional[str], variable: str, default: str) -> str:
    """The base URL a call uses: the tool's option, else the environment variable, else Open-Meteo's."""
    return (given or os.environ.get(variable, default)).rstrip("/")


def _geocode(city: str, geocoding_url: Optional[str]) -> dict[str, Any]:
    base = _base_url(geocoding_url, "YIEMAGENT_GEOCODING_URL", DEFAULT_GEOCODING_URL)
    url = f"{base}/search"
    body = _get_json(url, {"name": city, "count": 1, "language": "en", "format": "json"}, city)
    if not isinstance(body, dict):
        raise _unexpected(url, "the body is not a JSON object")
    results = body.get("results")
    if not results:
        raise _ServiceError(f"City {city!r} was not found by the geocoding service; check the spelling or try a larger nearby city")
    place = results[0] if isinstance(results, list) else None
    if not isinstance(place, dict) or not all(isinstance(place.get(k), (int, float)) for k in ("latitude", "longitude")):
        raise _unexpected(url, "a result without numeric 'latitude' and 'longitude'")
    return place


def _current_weather(place: dict[str, Any], forecast_url: Optional[str]) -> dict[str, Any]:
    base = _base_url(forecast_url, "YIEMAGENT_FORECAST_URL", DEFAULT_FORECAST_URL)
    url = f"{base}/forecast"
    body = _get_json(url, {"latitude": place["latitude"], "longitude": place["longitude"], "current": CURRENT_FIELDS}, str(place.get("name")))
    current = body.get("current") if isinstance(body, dict) else None
    if not isinstance(current, dict):
        raise _unexpected(url, "no 'current' object")
    for key in ("temperature_2m", "weather_code"):
        if not isinstance(current.get(key), (int, float)) or isinstance(current.get(key), bool):
            raise _unexpected(url, f"'current.{key}' is missing or not a number")
    return current


def get_weather_execute(
    tool_call_id: str,
    args: dict[str, Any],
    signal: Optional[AbortSignal],
    on_partial_result: Any,
    *,
    geocoding_url: Optional[str] = None,
    forecast_url: Optional[str] = None,
) -> AgentToolResult:
    """Look the city up, then fetch its current weather; "Weather in Tokyo: Clear sky, 22°C".

    Reports the resolved place as a partial result between the two requests. The numbers
    (temperature, humidity, wind, code, coordinates) are in ``details``. ``geocoding_url``
    and ``forecast_url`` are the services' base URLs (None: the environment's, else Open-Meteo's).

    Raises:
        ToolError: the city is unknown, the service is unreachable, slow, failing, or sent
            a body not of the documented shape (the message says which).
    """
    city = args["city"].strip()
    place = _geocode(city, geocoding_url)
    on_partial_result({"stage": "geocoded", "name": place.get("name"), "country": place.get("country")})
    if signal is not None and signal.aborted:
        raise ToolError(ABORTED_MESSAGE)
    current = _current_weather(place, forecast_url)
    code = int(current["weather_code"])
    condition = WMO_WEATHER_CODES.get(code, f"Weather code {code}")
    temperature = float(current["temperature_2m"])
    name = place.get("name") or city
    details = {
        "city": name,
        "country": place.get("country"),
        "latitude": place["latitude"],
        "longitude": place["longitude"],
        "time": current.get("time"),
        "temperature_c": temperature,
        "weather_code": code,
        "condition": condition,
        "relative_humidity_pct": current.get("relative_humidity_2m"),
        "wind_speed_kmh": current.get("wind_speed_10m"),
    }
    return AgentToolResult([TextContent(f"Weather in {name}: {condition}, {round(temperature)}°C")], details)


def get_weather_tool(*, geocoding_url: Optional[str] = None, forecast_url: Optional[str] = None) -> AgentTool:
    """The ``getWeather`` tool (spec §1 Step 2 ``getWeatherTool()``).

    ``geocoding_url`` / ``forecast_url`` (beyond the spec): the base URLs of an Open-Meteo
    geocoding and forecast service (``.../v1``) this tool asks instead of the ones
    ``YIEMAGENT_GEOCODING_URL`` / ``YIEMAGENT_FORECAST_URL`` or Open-Meteo give.
    """
    return AgentTool(
        name="getWeather",
        label="Weather Lookup",
        description="Fetch the current weather (condition, temperature, humidity, wind) for a city by name.",
        input_schema=INPUT_SCHEMA,
        execute=partial(get_weather_execute, geocoding_url=geocoding_url, forecast_url=forecast_url),
        parallel_tool_execute=True,
    )
