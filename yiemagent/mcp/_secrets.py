"""Secrets of an MCP connection (HTTP header values, stdio environment values) kept out of text.

API.md "MCP servers": ``headers`` are secrets, masked like API keys. ``Redactor`` cleans
the messages yiemagent writes (errors, results, log lines); ``redact_sdk_logs`` also
cleans the log records of the SDK and its HTTP stack, whose DEBUG lines echo what a
server sent (a server may repeat a token back).

Thread safety: a ``Redactor`` is immutable once built. The log filter's list of
redactors is guarded by its ``_lock``; ``filter`` runs on whatever thread logs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Optional

__all__ = ["Redactor", "forget_sdk_logs", "masked", "redact_open_connections", "redact_sdk_logs"]

# the SDK (mcp.*) and its HTTP client (httpx2, httpcore2) log here
_SDK_LOGGERS = ("mcp", "httpx2", "httpcore2")


class Redactor:
    """Replaces secrets (header values, environment values) with ``***`` in text.

    Values shorter than 6 characters are left alone: replacing "1" or "yes" everywhere
    would garble messages and such values protect nothing. For a header value of the
    form ``<scheme> <token>`` (``Bearer abc...``) the token alone is a secret too, since
    servers echo tokens without their scheme.

    Thread safety: immutable after construction.
    """

    _MIN = 6

    def __init__(self, *secret_maps: Optional[Mapping[str, str]]) -> None:
        secrets: set[str] = set()
        for mapping in secret_maps:
            for value in (mapping or {}).values():
                value = str(value)
                secrets.add(value)
                secrets.update(part for part in value.split(" ")[1:])
        # longest first, so a token inside a longer secret does not leave the rest visible
        self._secrets = tuple(sorted((s for s in secrets if len(s) >= self._MIN), key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text


def masked(mapping: Optional[Mapping[str, str]]) -> Optional[dict[str, str]]:
    """``mapping`` with every value shown as ``***`` (for reprs); None stays None."""
    return None if mapping is None else {key: "***" for key in mapping}


class _RedactingFilter(logging.Filter):
    """Rewrites a record whose message holds a secret of any open client.

    Thread safety: ``_lock`` guards ``_redactors``; ``filter`` reads a snapshot.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()  # guards _redactors
        self._redactors: list[Redactor] = []

    def add(self, redactor: Redactor) -> None:
        with self._lock:
            self._redactors.append(redactor)

    def redact(self, text: str) -> str:
        with self._lock:
            redactors = list(self._redactors)
        for redactor in redactors:
            text = redactor(text)
        return text

    def remove(self, redactor: Redactor) -> None:
        with self._lock:
            if redactor in self._redactors:
                self._redactors.remove(redactor)

    def filter(self, record: logging.LogRecord) -> bool:
        with self._lock:
            redactors = list(self._redactors)
        if redactors:
            message = clean = record.getMessage()
            for redactor in redactors:
                clean = redactor(clean)
            if clean != message:
                record.msg, record.args = clean, None
        return True


_FILTER = _RedactingFilter()


def redact_sdk_logs(redactor: Redactor) -> None:
    """Keep ``redactor``'s secrets out of the SDK's log records until ``forget_sdk_logs``.

    A logger's filters see only records logged on that logger, so the filter goes on
    every logger of the SDK and its HTTP stack that exists now (they are made when their
    modules are imported, which has happened by the time a client connects).
    """
    if not redactor:
        return
    _FILTER.add(redactor)
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and name.split(".")[0] in _SDK_LOGGERS and _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def forget_sdk_logs(redactor: Redactor) -> None:
    """Stop cleaning ``redactor``'s secrets from the SDK's logs (its client has closed)."""
    _FILTER.remove(redactor)


def redact_open_connections(text: str) -> str:
    """``text`` with the secrets of every open client masked: for text that leaves the process
    by another way than the clients, such as a trace (docs/tracing.md)."""
    return _FILTER.redact(text)
