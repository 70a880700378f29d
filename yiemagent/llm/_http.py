"""POSTing JSON to an LLM server: one ``requests.Session``, retries, and clear errors.

Retries follow the rules of tests/fixtures/README.md: connection errors, timeouts and
HTTP 408/409/429/500/502/503/504/529 are retried; ``Retry-After`` (seconds or an HTTP
date) and ``retry-after-ms`` are honoured on 429/503/529; a 429 whose code is
``insufficient_quota`` and every other 4xx fail at once. When the server asks to wait
longer than ``max_retry_delay_ms``, the call fails at once with an ``LLMError`` stating
the requested delay (spec §1 ``maxRetryDelayMs``).

urllib3's ``Retry`` does the counting, the exponential backoff with jitter (capped at
``max_retry_delay_ms``), the parsing of ``Retry-After`` and the sleeping. It is driven
from this module's loop rather than mounted on the adapter, because only the loop can
read the error body (``insufficient_quota``) and fail fast on the cap before sleeping.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any, Optional

import requests
from urllib3.exceptions import MaxRetryError
from urllib3.util.retry import Retry

from ..errors import LLMError
from ..messages import AssistantMessage

__all__ = ["RETRYABLE_STATUSES", "HTTPClient", "JSONPoster", "content_text"]

logger = logging.getLogger("yiemagent.llm")

RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


class _LLMRetry(Retry):
    """urllib3's ``Retry``, honouring ``Retry-After`` only on 429/503/529, and ``retry-after-ms`` too."""

    RETRY_AFTER_STATUS_CODES = frozenset({429, 503, 529})

    def get_retry_after(self, response: Any) -> Optional[float]:
        if response.status not in self.RETRY_AFTER_STATUS_CODES:
            return None
        milliseconds = response.headers.get("retry-after-ms")
        if milliseconds is not None:
            try:
                return max(float(milliseconds), 0.0) / 1000
            except ValueError:
                pass
        try:
            return super().get_retry_after(response)
        except Exception:  # an unparseable Retry-After: fall back to backoff
            return None


def _server_message(body: Any, text: str) -> str:
    """The server's own words from an error body (OpenAI, Anthropic, OpenRouter shapes), else the text."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            message = str(error.get("message") or "")
            raw = error.get("metadata", {}).get("raw") if isinstance(error.get("metadata"), dict) else None
            code = error.get("code") or error.get("type")
            parts = [message, f"({raw})" if raw else "", f"[{code}]" if code else ""]
            return " ".join(p for p in parts if p) or text[:500]
        if isinstance(error, str):
            return error
        if isinstance(body.get("message"), str):
            return body["message"]
    return text[:500].strip() or "(empty body)"


def _error_code(body: Any) -> Optional[str]:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = body["error"].get("code") or body["error"].get("type")
        return str(code) if code is not None else None
    return None


class JSONPoster:
    """Sends JSON requests for one client and returns parsed JSON bodies or raises ``LLMError``.

    Thread safety: one poster may be used from several threads; requests do not document
    ``Session`` as thread-safe, so ``post`` keeps one session per thread.
    """

    def __init__(
        self,
        provider: str,
        *,
        timeout: float,
        max_retries: int,
        max_retry_delay_ms: float,
        backoff_factor: float,
        secret: Optional[str],
    ) -> None:
        self.provider = provider
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_retry_delay_ms = max_retry_delay_ms
        self.backoff_factor = backoff_factor
        self._secret = secret
        self._local = threading.local()  # one requests.Session per thread

    @property
    def session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session

    def redact(self, text: str) -> str:
        """``text`` with the API key replaced by ``***``: keys never reach an error or a log."""
        return text.replace(self._secret, "***") if self._secret else text

    def _retry_policy(self) -> _LLMRetry:
        cap_s = self.max_retry_delay_ms / 1000
        return _LLMRetry(
            total=self.max_retries,
            allowed_methods=None,
            backoff_factor=self.backoff_factor,
            backoff_jitter=self.backoff_factor / 2,
            backoff_max=cap_s,
            respect_retry_after_header=True,
            raise_on_status=False,
        )

    def _error(self, message: str, **kwargs: Any) -> LLMError:
        return LLMError(self.redact(message), **kwargs)

    def _error_from_response(self, url: str, response: requests.Response) -> LLMError:
        text = response.text
        try:
            body = response.json()
        except ValueError:
            body = None
        status = response.status_code
        retryable = status in RETRYABLE_STATUSES and not (status == 429 and _error_code(body) == "insufficient_quota")
        retry_after_s = _LLMRetry().get_retry_after(response.raw) if response.raw is not None else None
        retry_after_ms = retry_after_s * 1000 if retry_after_s is not None else None
        return self._error(
            f"{self.provider} API error {status} from {url}: {_server_message(body, text)}",
            status=status,
            retryable=retryable,
            retry_after_ms=retry_after_ms,
            url=url,
        )

    def _send(self, url: str, body: dict[str, Any], headers: dict[str, str], stream: bool) -> tuple[Optional[requests.Response], Optional[LLMError]]:
        try:
            response = self.session.post(url, json=body, headers=headers, timeout=self.timeout, stream=stream)
        except requests.Timeout:
            return None, self._error(f"{self.provider} request to {url} timed out after {self.timeout:g} s", retryable=True, url=url)
        except requests.ConnectionError as exc:
            reason = exc.args[0] if exc.args else exc
            return None, self._error(f"could not connect to {self.provider} at {url}: {reason}", retryable=True, url=url)
        if 200 <= response.status_code < 300:
            return response, None
        return response, self._error_from_response(url, response)

    def post(self, url: str, body: dict[str, Any], headers: dict[str, str], *, stream: bool = False) -> requests.Response:
        """POST ``body`` as JSON; return the successful response, retrying as the module says.

        Raises:
            LLMError: a failure that is not retryable, a requested delay above the cap, or
                the last failure once the retries are spent.
        """
        retry = self._retry_policy()
        attempt = 0
        while True:
            attempt += 1
            response, error = self._send(url, body, headers, stream)
            if error is None:
                assert response is not None
                return response
            if not error.retryable:
                raise error
            if error.retry_after_ms is not None and error.retry_after_ms > self.max_retry_delay_ms:
                raise self._error(
                    f"{error} — the server asked to wait {error.retry_after_ms:.0f} ms before retrying, "
                    f"more than max_retry_delay_ms={self.max_retry_delay_ms:g}; not retried",
                    status=error.status,
                    retryable=True,
                    retry_after_ms=error.retry_after_ms,
                    url=url,
                )
            raw = response.raw if response is not None else None
            try:
                retry = retry.increment(method="POST", url=url, response=raw, error=None if raw is not None else OSError(str(error)))
            except MaxRetryError:
                raise self._error(
                    f"{error} (gave up after {attempt} attempts)",
                    status=error.status,
                    retryable=True,
                    retry_after_ms=error.retry_after_ms,
                    url=url,
                ) from None
            logger.info("retrying %s after attempt %d failed: %s", url, attempt, error)
            retry.sleep(raw)

    def post_json(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
        """POST and return the parsed JSON body; a body that is not JSON is an ``LLMError``."""
        response = self.post(url, body, headers)
        try:
            return response.json()
        except ValueError:
            snippet = response.text[:200].strip()
            raise self._error(
                f"{self.provider} server at {url} answered HTTP {response.status_code} with a body that is not JSON: {snippet!r}",
                status=response.status_code,
                url=url,
            ) from None

    def post_stream(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> Iterator[tuple[str, Any]]:
        """POST with streaming and yield ``(event, data)`` of each server-sent event, data parsed as JSON.

        An ``event: error`` (or a data object holding ``"error"``) raises ``LLMError`` with the
        server's words; the stream ends at ``data: [DONE]`` or when the server closes it.
        """
        response = self.post(url, body, headers, stream=True)
        event = "message"
        with response:
            for raw_line in response.iter_lines(decode_unicode=True):
                line = raw_line or ""
                if not line:
                    event = "message"
                    continue
                if line.startswith("event:"):
                    event = line[6:].strip()
                    continue
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    return
                try:
                    data = json.loads(payload)
                except ValueError:
                    raise self._error(f"{self.provider} stream from {url} sent data that is not JSON: {payload[:200]!r}", url=url) from None
                if event == "error" or (isinstance(data, dict) and "error" in data and len(data) <= 2):
                    raise self._error(f"{self.provider} stream from {url} reported an error: {_server_message(data, payload)}", url=url)
                yield event, data


def content_text(content: Any, separator: str = "") -> str:
    """The text of an OpenAI-format ``content``: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return separator.join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


class HTTPClient:
    """What the HTTP clients share: the poster, the retry cap, and calling with or without a stream.

    Subclasses set ``_poster``, ``url``, ``_headers`` and ``_api_key``, and implement
    ``_body``, ``_parse`` and ``_parse_stream``.

    Thread safety: see the subclasses; the poster keeps one session per thread.
    """

    _poster: JSONPoster
    _headers: dict[str, str]
    _api_key: Optional[str]
    url: str

    @property
    def max_retry_delay_ms(self) -> float:
        """The longest wait a server may ask for; ``YiemAgent(max_retry_delay_ms=...)`` sets it."""
        return self._poster.max_retry_delay_ms

    @max_retry_delay_ms.setter
    def max_retry_delay_ms(self, value: float) -> None:
        self._poster.max_retry_delay_ms = value

    def _masked_key(self) -> str:
        return "'***'" if self._api_key else "None"

    def _body(self, formatted: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _parse(self, reply: Any) -> AssistantMessage:
        raise NotImplementedError

    def _parse_stream(self, events: Iterator[dict[str, Any]]) -> AssistantMessage:
        raise NotImplementedError

    def __call__(self, formatted: dict[str, Any]) -> AssistantMessage:
        body = self._body(formatted)
        if body.get("stream"):
            return self._parse_stream(data for _, data in self._poster.post_stream(self.url, body, self._headers))
        reply = self._poster.post_json(self.url, body, self._headers)
        try:
            return self._parse(reply)
        except ValueError as exc:
            raise LLMError(f"unexpected reply from {self.url}: {exc}", status=200, url=self.url) from None
