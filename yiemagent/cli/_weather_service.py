"""A local stand-in for Open-Meteo, so that ``yiemagent demo`` shows ``getWeather`` offline.

The demo's ``getWeather`` is the real tool (``tools/get_weather.py``): it makes its two HTTP
requests, to this server on 127.0.0.1 instead of Open-Meteo. The server answers the
geocoding search and the forecast in the shapes Open-Meteo documents, with fixed weather
for a few cities; a city it does not know is "not found", as Open-Meteo answers it (a body
without ``results``). Nothing leaves the machine.

Thread safety: the server answers each request on a thread of its own; it reads only the
constant tables below.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["CITIES", "weather_stand_in"]

# lower-case name -> (name, country, latitude, longitude, temperature °C, WMO weather code, humidity %, wind km/h)
CITIES: dict[str, tuple[str, str, float, float, float, int, int, float]] = {
    "tokyo": ("Tokyo", "Japan", 35.6895, 139.69171, 22.4, 0, 55, 9.7),
    "paris": ("Paris", "France", 48.85341, 2.3488, 17.8, 2, 63, 12.2),
    "london": ("London", "United Kingdom", 51.50853, -0.12574, 14.1, 61, 81, 18.0),
    "oslo": ("Oslo", "Norway", 59.91273, 10.74609, 6.3, 3, 72, 7.6),
    "new york": ("New York", "United States", 40.71427, -74.00597, 19.0, 1, 58, 14.4),
}


class _OpenMeteoHandler(BaseHTTPRequestHandler):
    """``GET /v1/search`` (geocoding) and ``GET /v1/forecast`` (current conditions), as Open-Meteo answers them."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urlsplit(self.path)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        if url.path == "/v1/search":
            self._send(200, _search(query.get("name", "")))
        elif url.path == "/v1/forecast":
            found = _forecast(query.get("latitude", ""), query.get("longitude", ""))
            if found is None:
                self._send(400, {"error": True, "reason": "the demo has no weather for these coordinates"})
            else:
                self._send(200, found)
        else:
            self._send(404, {"error": True, "reason": f"no such endpoint: {url.path}"})

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: http.server would write each request to stderr, in the middle of the demo's output."""


def _search(name: str) -> dict[str, Any]:
    city = CITIES.get(name.strip().lower())
    if city is None:
        return {"generationtime_ms": 0.1}  # Open-Meteo leaves "results" out for a name it does not know
    shown, country, latitude, longitude = city[:4]
    return {"results": [{"name": shown, "country": country, "latitude": latitude, "longitude": longitude}], "generationtime_ms": 0.1}


def _forecast(latitude: str, longitude: str) -> dict[str, Any] | None:
    try:
        place = (float(latitude), float(longitude))
    except ValueError:
        return None
    for _shown, _country, lat, lon, temperature, code, humidity, wind in CITIES.values():
        if place == (lat, lon):
            now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M")
            current = {"time": now, "interval": 900, "temperature_2m": temperature, "relative_humidity_2m": humidity, "wind_speed_10m": wind, "weather_code": code}
            return {"latitude": lat, "longitude": lon, "timezone": "GMT", "current": current}
    return None


@contextlib.contextmanager
def weather_stand_in() -> Iterator[str]:
    """Serve the stand-in on a free port of 127.0.0.1 while the block runs; yields its base URL (``http://127.0.0.1:PORT/v1``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OpenMeteoHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="yiemagent-demo-weather", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
