"""Scale as a library: a conversation's turns as Celery tasks, each answered once (the optional extra ``yiemagent[celery]``).

docs/scale.md; docs/api.md "Scale as a library"::

    from yiemagent.celery import TurnService, TurnResult

    service = TurnService(app, make_agent, dsn="postgresql://app@db/agents")
    result = service.ask("conversation-1", "conversation-1/turn-1", "What changed?")

Importing ``yiemagent`` never imports this package or Celery; importing this package
without the extra raises ``ImportError`` saying what to install.
"""

from __future__ import annotations

_HINT = 'yiemagent.celery needs Celery and psycopg: pip install "yiemagent[celery]"'

try:
    import celery  # noqa: F401 - the task queue
    import psycopg  # noqa: F401 - the turn records
except ImportError as _missing:
    raise ImportError(f"{_HINT} ({_missing})") from _missing

from ._turns import TurnClosedError, TurnRecordError
from .service import TurnResult, TurnService, screen

__all__ = ["TurnClosedError", "TurnRecordError", "TurnResult", "TurnService", "screen"]
