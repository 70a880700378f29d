"""``TurnService``: a conversation's turns as Celery tasks, each answered once, its own answer (docs/scale.md; API.md "Scale as a library").

``TurnService(app, make_agent, dsn=...)`` registers the task ``yiemagent.run_turn`` on
``app``; ``send`` queues a turn, ``ask`` queues it and waits for its ``TurnResult``,
sending it again (same task id) when the broker lost it. What a run of the task does is
the turn protocol of ``_turns.py``.

Thread safety: a ``TurnService`` is immutable once made (``_prepared`` is set once, under
a lock; ``_node`` once, as the worker starts); ``send`` and ``ask`` may be called from many threads at once, and the task runs
in many worker threads and processes at once.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, Optional
from urllib.parse import urlparse

import celery.exceptions
import psycopg
from celery.signals import worker_init

from yiemagent import PostgresSession, RunFailedError, SessionInUseError, YiemAgent

from ._turns import TurnFailed, prepare, run_turn

logger = logging.getLogger("yiemagent.celery")

TASK_NAME = "yiemagent.run_turn"
MAX_RETRIES = 5  # runs of a turn after its first before it is closed as failed; the app's task_annotations may set another
POLL = 0.25  # seconds between two looks for a result (a database result backend: each look is a query)
CELERY_CONSUMER = "celery.worker.consumer:Consumer"
SCREENED_CONSUMER = "yiemagent.celery._consumer:ScreenedConsumer"
SCREENED_REDIS = "yiemagent.celery._redis:ScreenedRedisTransport"

_served: "weakref.WeakSet[Any]" = weakref.WeakSet()  # the apps that have a TurnService; guarded by _served_lock
_served_lock = threading.Lock()


@dataclass(frozen=True)
class TurnResult:
    """A turn's answer (API.md "Scale as a library").

    ``reply``: the answer's text; ``status``: "new" (answered now), "stored" (its answer was
    already stored), "completed" (finished after a crash from what was stored) or
    "restarted" (its question was never stored: sent again); ``worker``: the Celery node
    name of the worker that answered. Immutable: may be shared between threads.
    """

    conversation_id: str
    turn_id: str
    reply: str
    status: str
    worker: str


def screen(app: Any) -> None:
    """Give ``app`` the poison-message screen (docs/scale.md "A message that is not a task"), where it has not chosen its own.

    ``worker_consumer`` becomes ``ScreenedConsumer`` if it is Celery's own; a ``redis://``
    broker without a ``broker_transport`` of the app's choosing is reached through
    ``ScreenedRedisTransport`` (another scheme, ``rediss`` or ``sentinel``, keeps kombu's).
    """
    conf = app.conf
    if conf.worker_consumer in (None, CELERY_CONSUMER):
        conf.worker_consumer = SCREENED_CONSUMER
    if not conf.broker_transport and urlparse(str(conf.broker_url or "")).scheme == "redis":
        conf.broker_transport = SCREENED_REDIS


class TurnService:
    """The turns of many conversations on a Celery app, each turn id answered once, with its own answer (docs/scale.md).

    ``make_agent(session)`` builds a turn's ``YiemAgent`` on the ``PostgresSession(dsn,
    conversation_id, hold_timeout=hold_timeout)`` the service opens (the model, tools and
    system prompt are the caller's). The task ``yiemagent.run_turn`` is registered with
    ``acks_late`` and ``reject_on_worker_lost``; a run that ends without an answer is
    retried with backoff (``MAX_RETRIES``, or ``max_retries`` in the app's
    ``task_annotations``), and the last attempt closes the turn as failed. Making the
    service also gives the app the poison-message screen (``screen``): configure the
    app's broker before. One service per app: the task has one name, so a second
    service on the same app is refused (``ValueError``); the task is the app's alone
    (not one of Celery's shared tasks, which every app made later would get too).
    """

    def __init__(self, app: Any, make_agent: Callable[[PostgresSession], YiemAgent], *, dsn: str, hold_timeout: float = 60.0) -> None:
        if not callable(make_agent):
            raise TypeError(f"make_agent must be callable (session -> YiemAgent), not {type(make_agent).__name__}")
        with _served_lock:
            if app in _served:
                raise ValueError(f"the Celery app {app.main!r} already has a TurnService: its task {TASK_NAME!r} has one name, so one service per app")
            _served.add(app)
        self.app = app
        self.make_agent = make_agent
        self.dsn = dsn
        self.hold_timeout = hold_timeout
        self._prepared = False
        self._prepare_lock = threading.Lock()  # guards _prepared: the turns table is made once per process
        self._node: Optional[str] = None  # the node name of this process's worker of ``app``, set once as it starts
        screen(app)
        service = self

        def started(sender: Any = None, **_: Any) -> None:
            # a thread pool's task request names the machine (Celery's trace_task_ret), not the worker: the node name is the worker's own
            if getattr(sender, "app", None) is app:
                service._node = sender.hostname

        worker_init.connect(started, weak=False)

        @app.task(  # type: ignore[untyped-decorator]  # celery ships no types
            name=TASK_NAME,
            shared=False,  # the app's alone: a shared task would be made on every app made later, bound to this service
            bind=True,
            acks_late=True,  # acknowledged once finished: a worker that dies leaves the turn to another
            reject_on_worker_lost=True,
            autoretry_for=(TurnFailed, SessionInUseError, psycopg.OperationalError),
            retry_backoff=1,
            max_retries=MAX_RETRIES,
        )
        def run(task: Any, conversation_id: str, turn_id: str, text: str) -> dict[str, Any]:
            """One turn of a conversation; running it again is safe (docs/scale.md "The task")."""
            service._prepare()
            last_attempt = task.request.retries >= task.max_retries  # Celery's retries are spent if this run fails
            result = run_turn(service.dsn, conversation_id, turn_id, text, service.make_agent, hold_timeout=service.hold_timeout, last_attempt=last_attempt)
            result["worker"] = service._node or task.request.hostname
            return result

        self.task = run

    def _prepare(self) -> None:
        with self._prepare_lock:
            if not self._prepared:
                prepare(self.dsn)
                self._prepared = True

    def send(self, conversation_id: str, turn_id: str, text: str) -> Any:
        """Queue the turn as the task whose id is ``turn_id`` and return its ``AsyncResult`` (its ``get()`` is the result's dict)."""
        return self.task.apply_async((conversation_id, turn_id, text), task_id=turn_id)

    def ask(self, conversation_id: str, turn_id: str, text: str, *, timeout: Optional[float] = None, resend_after: float = 60.0) -> TurnResult:
        """Send the turn and wait for its answer, sending it again (same task id) after each ``resend_after`` seconds without one.

        A task the broker lost is never answered (docs/scale.md "A task the broker lost"):
        the turn is sent again, which is harmless whatever happened to the first. A turn
        whose earlier task gave up on something passing (``SessionInUseError``, a lost
        database) is run anew; an outcome (its answer, ``RunFailedError``, ``ValueError``)
        is returned or raised as stored.

        Raises:
            RunFailedError: the turn was closed as failed (a ``TurnClosedError``: the model
                refused it, or its retries are spent), naming the turn and the cause.
            celery.exceptions.TimeoutError: no answer within ``timeout`` seconds (None: no limit).
            ValueError: ``turn_id`` was asked before with another question.
            Exception: what the task's last retry raised otherwise (``SessionInUseError``, a
                ``psycopg`` error), as Celery's result backend gives it back.
        """
        if resend_after <= 0:
            raise ValueError(f"resend_after must be positive, not {resend_after!r}")
        deadline = None if timeout is None else time.monotonic() + timeout
        previous = self.task.AsyncResult(turn_id)
        if previous.failed() and not isinstance(previous.result, (RunFailedError, ValueError)):
            # an earlier ask's task gave up on something passing (the hold, the database), not on the turn: the
            # result backend would hand that error back at once, for ever; the turn's own outcome is asked for anew
            previous.forget()
        while True:
            pending = self.send(conversation_id, turn_id, text)
            wait = resend_after if deadline is None else max(min(resend_after, deadline - time.monotonic()), 0.0)
            try:
                answer = pending.get(timeout=wait, interval=POLL)
            except celery.exceptions.TimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                logger.warning("turn %r of %r has no answer after %.1f s: sent again", turn_id, conversation_id, wait)
                continue
            return TurnResult(answer["conversation_id"], answer["turn_id"], answer["reply"], answer["status"], answer["worker"])
