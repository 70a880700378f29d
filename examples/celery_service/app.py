"""The Celery app: conversations as tasks, one turn per task (docs/scale.md).

Configured from the environment, so going from one machine to many changes only URLs:

    YIEMAGENT_DSN           the PostgreSQL DSN of the sessions    postgresql://app@db.internal/agents
    CELERY_BROKER_URL       the broker                             redis://queue.internal:6379/0
    CELERY_RESULT_BACKEND   where task results go (PostgreSQL)     db+postgresql+psycopg://app@db.internal/agents
    OPENAI_BASE_URL         the model's OpenAI-compatible server   http://127.0.0.1:8600/v1
    YIEMAGENT_MODEL         the model's name                       fake
    OPENAI_API_KEY          its key, if it needs one

Run a worker (two threads):  celery -A app worker --pool threads --concurrency 2
"""

from __future__ import annotations

import os
import time

import psycopg
from celery import Celery
from celery.signals import worker_init

import service
from yiemagent import OpenAIClient, SessionInUseError, tool

app = Celery("yiemagent_service")
app.conf.update(
    broker_url=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
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
    max_retries=5,
)
def run_turn(self, conversation_id: str, turn_id: str, text: str) -> dict:
    """One turn of a conversation; running it again is safe (service.run_turn)."""
    started = time.perf_counter()
    llm = OpenAIClient(os.environ["OPENAI_BASE_URL"], os.environ.get("YIEMAGENT_MODEL", "fake"), os.environ.get("OPENAI_API_KEY"), timeout=60.0)
    result = service.run_turn(os.environ["YIEMAGENT_DSN"], conversation_id, turn_id, text, llm_call=llm, tools=[lookup])
    result["worker_pid"] = os.getpid()
    result["seconds"] = time.perf_counter() - started
    return result
