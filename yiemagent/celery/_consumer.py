"""Celery's consumer, rejecting a delivered message it cannot read rather than restarting on it for ever (docs/scale.md "A message that is not a task")."""

from __future__ import annotations

import logging
from typing import Any

from celery.worker.consumer import Consumer

logger = logging.getLogger("yiemagent.celery")


class ScreenedConsumer(Consumer):  # type: ignore[misc]  # celery ships no types
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
