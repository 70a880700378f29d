"""The Celery app: conversations as tasks, one turn per task (docs/scale.md).

Configured from the environment, so going from one machine to many changes only URLs:

    YIEMAGENT_DSN           the PostgreSQL DSN of the sessions    postgresql://app@db.internal/agents
    CELERY_BROKER_URL       the broker                             redis://queue.internal:6379/0
    CELERY_RESULT_BACKEND   where task results go (PostgreSQL)     db+postgresql+psycopg://app@db.internal/agents
    OPENAI_BASE_URL         the model's OpenAI-compatible server   http://127.0.0.1:8600/v1
    YIEMAGENT_MODEL         the model's name                       fake
    OPENAI_API_KEY          its key, if it needs one
    YIEMAGENT_TURN_RETRIES  runs of a turn after its first, before it is closed as failed (5)

Run a worker (two threads):  celery -A app worker --pool threads --concurrency 2

A poison message does not stop a worker (docs/scale.md, "A message that is not a task"):
a ``redis://`` broker is reached through ``ScreenedRedisTransport``, which rejects and logs
an entry of the queue that is not a message kombu can deliver (not JSON, say), where
kombu's own Redis transport stops the worker ("Unrecoverable error: JSONDecodeError");
and ``ScreenedConsumer`` rejects and logs a delivered message Celery fails to read (a
task message without an ``id`` header, say), where Celery's own consumer restarts on it
again and again.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import time
from typing import Any, Optional
from urllib.parse import urlparse

import kombu.transport.redis
import psycopg
import redis
from celery import Celery
from celery.signals import worker_init
from celery.worker.consumer import Consumer

import service
from yiemagent import OpenAIClient, SessionInUseError, tool

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
        response = super().parse_response(connection, command_name, **options)
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
        client = super()._get_client()
        return ScreenedRedis if client is redis.Redis else client


class ScreenedRedisTransport(kombu.transport.redis.Transport):
    """kombu's Redis transport with ``ScreenedRedisChannel``: one poison entry does not stop the worker (docs/scale.md)."""

    Channel = ScreenedRedisChannel


class ScreenedConsumer(Consumer):
    """Celery's consumer, rejecting (and logging) a delivered message whose handling raises.

    Celery rejects the malformed messages it expects (an unknown task, a body it cannot
    decode); any other error reading a message (a task message without an ``id`` header)
    reaches its consumer loop, which restarts the connection, gets the message back and
    fails on it again, for ever. Only the transport's own connection errors go on to that
    loop; ``KeyError``, which kombu's virtual transports count among them, is a missing
    header here. Thread safety: called on the worker's event loop, like Celery's handler.
    """

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Any:
        handle = super().create_task_handler(*args, **kwargs)
        lost_connection = tuple(error for error in self.connection_errors if error is not KeyError)

        def on_task_received(message: Any) -> None:
            try:
                handle(message)
            except lost_connection:
                raise
            except Exception as exc:  # noqa: BLE001  a message nothing can read: rejected, named in the log
                logger.error("rejected a task message Celery could not read: %s: %s; headers %r", type(exc).__name__, exc, message.headers, exc_info=True)
                if not message.acknowledged:
                    message.reject_log_error(logger, self.connection_errors)

        return on_task_received


BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")

app = Celery("yiemagent_service")
app.conf.update(
    broker_url=BROKER_URL,
    # redis:// only: another scheme (rediss, sentinel) keeps kombu's own transport
    broker_transport=f"{__name__}:ScreenedRedisTransport" if urlparse(BROKER_URL).scheme == "redis" else None,
    worker_consumer=f"{__name__}:ScreenedConsumer",
    result_backend=os.environ.get("CELERY_RESULT_BACKEND", "db+postgresql+psycopg://postgres@127.0.0.1/postgres"),
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    task_acks_late=True,  # a task is acknowledged when it has finished: a worker that dies leaves it to another
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,  # a worker reserves no more turns than it has threads
    # Redis gives an unacknowledged task to another worker this many seconds after it was
    # delivered. Shorter than a turn could take, a live worker's turn is delivered twice:
    # harmless (the second waits for the hold, then finds the reply), only wasted work.
    # A killed worker's tasks come back once their visibility timeout has passed, at the next
    # sweep of a live worker: every 2 s (interval x throttle; kombu's default throttle of 10
    # would make it 20 s). The sweep's mutex expires after 10 s, not kombu's 300 s, so a worker
    # killed in the middle of a sweep does not stop the others' sweeps for five minutes; a
    # task restored twice is not possible (each restore is a transaction on the task's entry).
    broker_transport_options={
        "visibility_timeout": float(os.environ.get("YIEMAGENT_VISIBILITY_TIMEOUT", "30")),
        "unacked_restore_interval": 2,
        "unacked_restore_throttle": 1,
        "unacked_mutex_expire": 10,
    },
    result_extended=True,
    broker_connection_retry_on_startup=True,
)


@tool
def lookup(topic: str) -> str:
    """Look up notes on a topic.

    Args:
        topic: what to look up.
    """
    return f"notes on {topic}"


@worker_init.connect
def _prepare(**_: object) -> None:
    service.prepare(os.environ["YIEMAGENT_DSN"])


@app.task(
    name="yiemagent.run_turn",
    bind=True,
    autoretry_for=(service.TurnFailed, SessionInUseError, psycopg.OperationalError),
    retry_backoff=1,
    max_retries=int(os.environ.get("YIEMAGENT_TURN_RETRIES", "5")),
)
def run_turn(self, conversation_id: str, turn_id: str, text: str) -> dict:
    """One turn of a conversation; running it again is safe (service.run_turn).

    The last retry closes a turn it cannot answer as failed (docs/scale.md "The turn
    record"): ``service.RunFailedError``, which is not retried, and which every later run of
    the turn raises again, so no later turn of the conversation waits for it.
    """
    started = time.perf_counter()
    llm = OpenAIClient(os.environ["OPENAI_BASE_URL"], os.environ.get("YIEMAGENT_MODEL", "fake"), os.environ.get("OPENAI_API_KEY"), timeout=60.0)
    last_attempt = self.request.retries >= self.max_retries  # Celery's retries are spent if this run fails
    result = service.run_turn(os.environ["YIEMAGENT_DSN"], conversation_id, turn_id, text, llm_call=llm, tools=[lookup], last_attempt=last_attempt)
    result["worker_pid"] = os.getpid()
    result["seconds"] = time.perf_counter() - started
    return result
