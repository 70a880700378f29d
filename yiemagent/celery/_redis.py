"""The screen of a Redis broker's queue: an entry kombu cannot deliver is rejected and logged, not fatal (docs/scale.md "A message that is not a task").

kombu's Redis transport decodes each entry it pops before any consumer sees it, so one
entry that is not a message stops the worker ("Unrecoverable error: JSONDecodeError").
``ScreenedRedisTransport`` checks each popped entry first (``envelope_problem``). Loaded
by a worker through ``broker_transport`` (``TurnService`` sets it for a ``redis://``
broker), so ``import yiemagent.celery`` needs no Redis client.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from typing import Any, Optional

import kombu.transport.redis
import redis

logger = logging.getLogger("yiemagent.celery")
SHOWN = 200  # characters of a rejected entry the log shows


def envelope_problem(entry: Any) -> Optional[str]:
    """What keeps ``entry``, an item popped from a Redis queue, from being a message kombu can deliver; None if nothing.

    What kombu's Redis channel needs before any consumer sees the message (its
    ``_brpop_read``, ``Message`` and ``QoS.append``): UTF-8 JSON text of an object whose
    ``properties`` hold a ``delivery_tag`` string and a ``delivery_info`` object with
    ``exchange`` and ``routing_key`` strings, and a ``body`` string in a ``body_encoding``
    it knows. A message of that shape whose task is unknown or whose body is not what
    Celery reads is Celery's to reject (it logs and acknowledges it), not this check's.
    """
    try:
        payload = json.loads(entry.decode("utf-8") if isinstance(entry, bytes) else entry)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return f"not UTF-8 JSON ({type(exc).__name__}: {exc})"
    if not isinstance(payload, dict):
        return f"JSON {type(payload).__name__}, not an object"
    properties, body, headers = payload.get("properties"), payload.get("body"), payload.get("headers")
    if not isinstance(properties, dict) or not isinstance(properties.get("delivery_tag"), str):
        return "no properties with a delivery_tag string"
    info = properties.get("delivery_info")
    if not (isinstance(info, dict) and isinstance(info.get("exchange"), str) and isinstance(info.get("routing_key"), str)):
        return "no delivery_info with exchange and routing_key strings"
    if headers and not isinstance(headers, dict):
        return f"headers of JSON {type(headers).__name__}, not an object"
    for name in ("content-type", "content-encoding"):
        if payload.get(name) is not None and not isinstance(payload[name], str):
            return f"a {name} that is not a string"
    if body is not None and not isinstance(body, str):
        return f"a body of JSON {type(body).__name__}, not a string"
    encoding = properties.get("body_encoding")
    if encoding == "base64":  # the one codec kombu's channels have, by that exact name
        try:
            base64.b64decode(body or "")
        except (binascii.Error, ValueError) as exc:
            return f"a body that is not base64 ({exc})"
    elif encoding is not None and not (isinstance(encoding, str) and encoding.lower() == "utf-8"):
        return f"a body_encoding kombu does not know: {encoding!r}"
    elif body is not None and not body.isascii():
        try:
            body.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"a body that is not UTF-8 text ({exc})"
    return None


class ScreenedRedis(redis.Redis):
    """A Redis client whose BRPOP gives kombu only entries it can deliver; any other is rejected: logged, and dropped.

    A rejected entry reads as a BRPOP that timed out (``None``): kombu's channel raises
    ``Empty``, which its event loop expects, and pops again. Thread safety: that of
    ``redis.Redis`` (kombu uses one per channel, from the worker's event loop).
    """

    def parse_response(self, connection: Any, command_name: Any, **options: Any) -> Any:
        response = super().parse_response(connection, command_name, **options)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
        if command_name == "BRPOP" and response:
            queue, entry = response
            problem = envelope_problem(entry)
            if problem is not None:
                logger.error("rejected an entry of the Redis queue %r that is not a task message: %s; it began %r", queue, problem, entry[:SHOWN])
                return None
        return response


class ScreenedRedisChannel(kombu.transport.redis.Channel):
    """kombu's Redis channel, its clients ``ScreenedRedis`` (a global key prefix keeps kombu's own client)."""

    def _get_client(self) -> Any:
        client = super()._get_client()  # type: ignore[no-untyped-call]  # kombu leaves it unannotated
        return ScreenedRedis if client is redis.Redis else client


class ScreenedRedisTransport(kombu.transport.redis.Transport):
    """kombu's Redis transport with ``ScreenedRedisChannel``: one poison entry does not stop the worker (docs/scale.md)."""

    Channel = ScreenedRedisChannel
