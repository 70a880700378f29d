"""Masking the secrets of every live client in the log records of the libraries under the clients.

Beyond the spec: "no secret leaves the process" (README "Secrets", docs/mcp.md "Secrets");
what a secret is, and ``Secrets``, are ``_secrets``'s.

Log records. The libraries under the clients log what they send and receive at DEBUG:
urllib3 the request paths (a ``?key=``), the MCP SDK and its HTTP stack (``httpx2``,
``httpcore2``; ``httpx``, ``httpcore`` for the SDK's older HTTP client) the headers a
server sent back, which may echo a token. ``install_log_filter`` masks the secrets of a
client in every record of those loggers and of ``yiemagent``'s own, from then on, as long
as the client holds its ``Secrets`` (they are held weakly) or until
``remove_log_filter``. A logger's filters see only the records made on that logger, and
these libraries make some loggers only when a module is first imported, which may be
after the client was made (httpcore2's ``http11`` during the first connection); so the one
filter is applied where every record is made: a log record factory
(``logging.setLogRecordFactory``), installed once, that calls the factory it replaced and
then masks the record.

Thread safety: the filter's set of secrets is guarded by its ``_lock``; it runs on whatever
thread logs.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ._secrets import Secrets

__all__ = ["install_log_filter", "redact_live_secrets", "remove_log_filter"]

# The loggers whose records are masked (each with its children): urllib3 (the LLM clients'
# HTTP), the MCP SDK and its HTTP stack (httpx2/httpcore2; httpx/httpcore before it), ours.
_LOGGERS = frozenset({"urllib3", "mcp", "httpx", "httpx2", "httpcore", "httpcore2", "yiemagent"})


class _RedactingFilter(logging.Filter):
    """Masks, in a log record of the loggers in ``_LOGGERS``, the secrets of every live client.

    Holds each client's ``Secrets`` weakly: a program that makes a client per request (a
    web server) would otherwise keep every key it ever used, and scan them all for each
    log line. Applied by ``_factory`` to every record as it is made (see the module
    docstring); it is also an ordinary ``logging.Filter``.

    Thread safety: ``_lock`` guards ``_secrets`` and ``_installed``; ``filter`` reads a snapshot.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()  # guards _secrets and _installed
        self._secrets: "weakref.WeakSet[Secrets]" = weakref.WeakSet()
        self._installed = False

    def add(self, secrets: Secrets) -> None:
        if not secrets:
            return
        with self._lock:
            self._secrets.add(secrets)
            if not self._installed:
                self._installed = True
                logging.setLogRecordFactory(_factory(logging.getLogRecordFactory(), self))

    def remove(self, secrets: Secrets) -> None:
        with self._lock:
            self._secrets.discard(secrets)

    def redact(self, text: str) -> str:
        """``text`` with the secrets of every live client masked."""
        with self._lock:
            active = list(self._secrets)
        for secrets in active:
            text = secrets.redact(text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.partition(".")[0] not in _LOGGERS:
            return True
        with self._lock:
            active = list(self._secrets)
        if active:
            try:
                message = clean = record.getMessage()
            except Exception:  # arguments that do not fit the format: the handler would print them raw
                message, clean = None, f"{record.msg} (log arguments: {record.args!r})"
            for secrets in active:
                clean = secrets.redact(clean)
            if clean != message:
                record.msg, record.args = clean, None
        return True


def _factory(previous: Callable[..., logging.LogRecord], masking: _RedactingFilter) -> Callable[..., logging.LogRecord]:
    """A log record factory: the one it replaces, then ``masking`` on the record it made."""

    def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        masking.filter(record)
        return record

    return make_record


_FILTER = _RedactingFilter()


def install_log_filter(secrets: Secrets) -> None:
    """Mask ``secrets`` in the log records of urllib3, the MCP SDK, its HTTP stack and yiemagent from now on.

    As long as something (its client) holds ``secrets``, or until ``remove_log_filter``;
    loggers made later are covered too.
    """
    _FILTER.add(secrets)


def remove_log_filter(secrets: Secrets) -> None:
    """Stop masking ``secrets`` in log records (their client has closed)."""
    _FILTER.remove(secrets)


def redact_live_secrets(text: str) -> str:
    """``text`` with the secrets of every live client (LLM and MCP) masked: for text that leaves
    the process by another way than the clients, such as a trace's content (docs/tracing.md)."""
    return _FILTER.redact(text)
