"""The Celery app: conversations as tasks, one turn per task, on ``yiemagent.celery.TurnService`` (docs/scale.md).

Configured from the environment, so going from one machine to many changes only URLs:

    YIEMAGENT_DSN           the PostgreSQL DSN of the sessions    postgresql://app@db.internal/agents
    CELERY_BROKER_URL       the broker                             redis://queue.internal:6379/0
    CELERY_RESULT_BACKEND   where task results go (PostgreSQL)     db+postgresql+psycopg://app@db.internal/agents
    OPENAI_BASE_URL         the model's OpenAI-compatible server   http://127.0.0.1:8600/v1
    YIEMAGENT_MODEL         the model's name                       fake
    OPENAI_API_KEY          its key, if it needs one
    YIEMAGENT_TURN_RETRIES  runs of a turn after its first, before it is closed as failed (5)

Run a worker (two threads):  celery -A app worker --pool threads --concurrency 2

``TurnService`` registers the task ``yiemagent.run_turn`` and gives the app the
poison-message screen (docs/scale.md "A message that is not a task"); what stays here is
the app's own: its broker and result backend, prefetch, the broker's visibility timeout
and sweeps, the retries (``task_annotations``), and the agent of a turn (``make_agent``).
"""

from __future__ import annotations

import os

from celery import Celery

from yiemagent import OpenAIClient, PostgresSession, YiemAgent, tool
from yiemagent.celery import TurnService

app = Celery("yiemagent_service")
app.conf.update(
    broker_url=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
    result_backend=os.environ.get("CELERY_RESULT_BACKEND", "db+postgresql+psycopg://postgres@127.0.0.1/postgres"),
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    worker_prefetch_multiplier=1,  # a worker reserves no more turns than it has threads
    # Redis gives an unacknowledged task to another worker this many seconds after it was
    # delivered (docs/scale.md "What runs where"); a killed worker's tasks come back at the
    # next sweep of a live worker, every 2 s; the sweep's mutex expires after 10 s.
    broker_transport_options={
        "visibility_timeout": float(os.environ.get("YIEMAGENT_VISIBILITY_TIMEOUT", "30")),
        "unacked_restore_interval": 2,
        "unacked_restore_throttle": 1,
        "unacked_mutex_expire": 10,
    },
    task_annotations={"yiemagent.run_turn": {"max_retries": int(os.environ.get("YIEMAGENT_TURN_RETRIES", "5"))}},
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


def make_agent(session: PostgresSession) -> YiemAgent:
    """A turn's agent: the model from the environment, the one tool, on the conversation's session."""
    llm = OpenAIClient(os.environ["OPENAI_BASE_URL"], os.environ.get("YIEMAGENT_MODEL", "fake"), os.environ.get("OPENAI_API_KEY"), timeout=60.0)
    return YiemAgent(llm_call=llm, agent_event_sink=None, system_prompt="You answer questions. Call lookup for the facts first.", session=session, tools=[lookup])


turns = TurnService(app, make_agent, dsn=os.environ.get("YIEMAGENT_DSN", "postgresql://postgres@127.0.0.1/postgres"))
