"""The floor of the service's figures in `make bench`: the same turns as a bare Celery task, without yiemagent (docs/scale.md "Figures").

bench/bench_scale.py runs examples/celery_service/client.py against this app (it imports
``app`` and ``turns`` from here instead of the example's): the same broker, result backend,
settings and client. A turn is what the service's task does for the example's turns,
written by hand: read the conversation's stored messages, store the question, ask the model
(one HTTP request, urllib), store its tool call, run the tool, store its result, ask the
model again, store the answer; each message one ``INSERT`` of JSON text, committed. What it
leaves out is what yiemagent adds: the hold, the turn records, the agent's loop and checks,
a new connection per turn (each worker thread keeps one). Not safe to run again: the floor
answers a turn once only if it runs once.

Thread safety: each worker thread has its own database connection (``threading.local``).
"""

from __future__ import annotations

import json
import os
import threading
import urllib.request
from dataclasses import dataclass
from typing import Any, Optional

import psycopg
from celery import Celery

app = Celery("yiemagent_floor")
app.conf.update(
    broker_url=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
    result_backend=os.environ.get("CELERY_RESULT_BACKEND", "db+postgresql+psycopg://postgres@127.0.0.1/postgres"),
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    worker_prefetch_multiplier=1,
    broker_transport_options={"visibility_timeout": float(os.environ.get("YIEMAGENT_VISIBILITY_TIMEOUT", "30"))},
    result_extended=True,
    broker_connection_retry_on_startup=True,
)
DSN = os.environ.get("YIEMAGENT_DSN", "postgresql://postgres@127.0.0.1/postgres")
MODEL_URL = os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8600/v1").rstrip("/") + "/chat/completions"
SYSTEM = "You answer questions. Call lookup for the facts first."
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look up notes on a topic.",
          "parameters": {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]}}}]
POLL = 0.25  # seconds between two looks for a result, as TurnService.ask
_local = threading.local()  # each worker thread's connection


def connection() -> "psycopg.Connection[Any]":
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = psycopg.connect(DSN, autocommit=True)
        with conn.transaction():  # threads creating the table at once are serialised
            conn.execute("SELECT pg_advisory_xact_lock(0x464c4f4f)")
            conn.execute("CREATE TABLE IF NOT EXISTS floor_messages (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, session_id TEXT NOT NULL, body TEXT NOT NULL)")
            conn.execute("CREATE INDEX IF NOT EXISTS floor_messages_session ON floor_messages (session_id, id)")
        _local.conn = conn
    return conn


def complete(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The model's reply to ``messages`` (one POST of the OpenAI chat completions API)."""
    body = json.dumps({"model": os.environ.get("YIEMAGENT_MODEL", "fake"), "messages": messages, "tools": TOOLS}).encode()
    request = urllib.request.Request(MODEL_URL, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)["choices"][0]["message"]


@app.task(name="floor.run_turn", bind=True, acks_late=True)
def run_turn(task: Any, conversation_id: str, turn_id: str, text: str) -> dict[str, Any]:
    conn = connection()

    def store(message: dict[str, Any]) -> None:
        conn.execute("INSERT INTO floor_messages (session_id, body) VALUES (%s, %s)", (conversation_id, json.dumps(message)))

    rows = conn.execute("SELECT body FROM floor_messages WHERE session_id = %s ORDER BY id", (conversation_id,)).fetchall()
    messages = [{"role": "system", "content": SYSTEM}, *(json.loads(body) for (body,) in rows), {"role": "user", "content": text}]
    store(messages[-1])
    while True:
        reply = complete(messages)
        messages.append(reply)
        store(reply)
        if not reply.get("tool_calls"):
            break
        for call in reply["tool_calls"]:
            topic = json.loads(call["function"]["arguments"])["topic"]
            result = {"role": "tool", "tool_call_id": call["id"], "content": f"notes on {topic}"}
            messages.append(result)
            store(result)
    return {"conversation_id": conversation_id, "turn_id": turn_id, "reply": reply["content"], "status": "new", "worker": task.request.hostname}


@dataclass(frozen=True)
class FloorResult:
    """The fields of ``TurnResult``, for the example's client."""

    conversation_id: str
    turn_id: str
    reply: str
    status: str
    worker: str


class Turns:
    """``ask`` as the example's client calls it: send the turn, wait for its result (no resend: the floor is not safe to run again)."""

    def ask(self, conversation_id: str, turn_id: str, text: str, *, timeout: Optional[float] = None, resend_after: float = 60.0) -> FloorResult:
        answer = run_turn.apply_async((conversation_id, turn_id, text), task_id=turn_id).get(timeout=timeout, interval=POLL)
        return FloorResult(**answer)


turns = Turns()
