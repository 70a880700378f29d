"""POSTing JSON to an LLM server: one session per thread, retries, the deadline, capped reads, clear errors.

Beyond the spec (docs/failures.md; docs/conformance.md decisions 13 and 14). Every failure is an
``LLMError`` (``status``, ``retryable``, the cause as ``__cause__``), its text masked by
``_secrets``.

What is retried, and only while nothing of the reply has been shown to a listener (a
retry would show it twice) and the deadline allows: connection errors, timeouts,
HTTP 408/409/429/500/502/503/504/529, a body cut short, an error a 200 reply carries
whose code is one of those statuses, and a stream that ends before its reply is whole.
``Retry-After`` (seconds or an HTTP date) and ``retry-after-ms`` are honoured on
429/503/529 (a value that is not a finite number is ignored); a 429 whose code is
``insufficient_quota``, every other 4xx and a body that is not the protocol fail at once.
When the server asks to wait longer than ``max_retry_delay_ms``, the call fails at once
with an ``LLMError`` stating the requested delay (spec §1 ``maxRetryDelayMs``).
Redirects are not followed: a 3xx is an ``LLMError`` naming the new location (requests
would send ``api-key``/``x-api-key`` along to another host).

urllib3's ``Retry`` does the counting, the exponential backoff with jitter (capped at
``max_retry_delay_ms``) and the parsing of ``Retry-After``; the waiting is the guard's,
so that an abort or the deadline ends it.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any, Optional, TypeVar

import requests
from requests.structures import CaseInsensitiveDict
from urllib3.exceptions import HTTPError as URLLib3Error
from urllib3.exceptions import MaxRetryError
from urllib3.util.retry import Retry

from ..errors import ContextOverflowError, LLMError
from ..events import current_abort_signal
from ._guard import ABORTED, DEADLINE, CallGuard, GuardedAdapter
from .._log_masking import install_log_filter
from .._secrets import Secrets
from ._wire import RETRYABLE_STATUSES, ReplyError, context_overflow, error_code, loads_json, payload_error, server_message

__all__ = ["ERROR_BODY_BYTES", "Transport", "install_log_filter"]

logger = logging.getLogger("yiemagent.llm")

OVERFLOW_NOTE = "the request is longer than the model's context window; sending it again fails the same way (docs/failures.md)"
ERROR_BODY_BYTES = 64 * 1024  # an error body is read up to this, then the connection is dropped
READ_SIZE = 64 * 1024
_T = TypeVar("_T")
# What reading a response body can raise when the connection breaks or the guard shuts it down.
_READ_ERRORS = (requests.RequestException, URLLib3Error, http.client.HTTPException, OSError)


class _LLMRetry(Retry):
    """urllib3's ``Retry``, honouring ``Retry-After`` only on 429/503/529, and ``retry-after-ms`` too."""

    RETRY_AFTER_STATUS_CODES = frozenset({429, 503, 529})

    def get_retry_after(self, response: Any) -> Optional[float]:
        if response.status not in self.RETRY_AFTER_STATUS_CODES:
            return None
        milliseconds = response.headers.get("retry-after-ms")
        if milliseconds is not None:
            try:
                value = float(milliseconds)
            except ValueError:
                value = math.nan
            if math.isfinite(value) and value >= 0:  # "nan", "inf", "-5", "soon": ignored
                return value / 1000
        try:
            return super().get_retry_after(response)
        except Exception:  # an unparseable Retry-After: fall back to backoff
            return None


class Transport:
    """Sends one client's requests and reads their replies; every failure an ``LLMError``.

    Thread safety: one transport may be used from several threads; requests does not
    document ``Session`` as thread-safe, so each thread gets its own session. The
    settings may be changed between calls (``max_retry_delay_ms`` is, by the agent).
    """

    def __init__(
        self,
        provider: str,
        secrets: Secrets,
        *,
        timeout: float,
        max_retries: int,
        max_retry_delay_ms: float,
        backoff_factor: float,
        deadline_s: Optional[float],
    ) -> None:
        self.provider = provider
        self.secrets = secrets
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_retry_delay_ms = max_retry_delay_ms
        self.backoff_factor = backoff_factor
        self.deadline_s = deadline_s
        self._local = threading.local()  # one requests.Session per thread
        self._environments: dict[str, dict[str, Any]] = {}  # URL -> proxies, verify, cert (any thread; a race computes one twice)
        install_log_filter(secrets)

    @property
    def session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = _UnredirectedSession()
            session.trust_env = False  # the environment is read once per URL: see post
            adapter = GuardedAdapter()
            session.mount("http://", adapter)
            session.mount("https://", adapter)
        return session

    def environment(self, url: str) -> dict[str, Any]:
        """What requests reads from the environment for ``url``: proxies (``no_proxy``
        honoured) and the CA bundle (``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``).

        Read by requests' own ``merge_environment_settings`` the first time a URL is used,
        then kept: a change of the environment after a client's first call to a URL is
        not seen (httpx's clients read it once too). ``~/.netrc`` is never read: requests
        would put its credentials in place of the client's own ``Authorization`` header.
        """
        settings = self._environments.get(url)
        if settings is None:
            probe = requests.Session()  # trust_env: the environment's proxies and CA bundle
            with probe:
                settings = dict(probe.merge_environment_settings(url, {}, None, None, None))
            del settings["stream"]
            self._environments[url] = settings
        return settings

    def post(self, url: str, data: bytes, headers: dict[str, str], timeout: float) -> requests.Response:
        """POST ``data`` through this thread's session, as ``Session.post(url, data=..., stream=True,
        allow_redirects=False)`` would, without reading the environment again.

        ``Session.request`` merges the session's settings and reads the environment on
        every request (a third of a local call's time); here the request is prepared once
        with the session's default headers and cookies and sent with the settings of
        ``environment(url)``. Redirects are not followed: requests drops Authorization on a
        redirect to another host but sends api-key, x-api-key and every other header along.
        """
        session = self.session
        merged = CaseInsensitiveDict(session.headers)
        merged["Content-Type"] = "application/json"
        merged.update(headers)
        for name in [name for name, value in merged.items() if value is None]:
            del merged[name]  # a header given as None is left out, as Session.request leaves it out
        request = requests.PreparedRequest()
        request.prepare(method="POST", url=url, headers=merged, data=data, cookies=session.cookies)
        return session.send(request, stream=True, timeout=timeout, allow_redirects=False, **self.environment(url))

    def error(self, message: str, *, overflow: bool = False, **kwargs: Any) -> LLMError:
        """An ``LLMError`` whose message has every credential masked; a ``ContextOverflowError`` when ``overflow``
        (the server said the request is longer than the model's context: ``_wire.context_overflow``)."""
        if "url" in kwargs and kwargs["url"] is not None:
            kwargs["url"] = self.secrets.redact(kwargs["url"])
        if overflow:
            return ContextOverflowError(self.secrets.redact(f"{message} — {OVERFLOW_NOTE}"), **kwargs)
        return LLMError(self.secrets.redact(message), **kwargs)

    def call(self, url: str, body: dict[str, Any], headers: dict[str, str], read: Callable[[requests.Response, CallGuard], _T]) -> _T:
        """POST ``body`` and return what ``read(response, guard)`` makes of a 2xx reply, retrying as the module says.

        Raises:
            LLMError: a failure that is not retried, the deadline, an abort, a requested
                delay above the cap, or the last failure once the retries are spent.
        """
        try:
            return self._call(url, body, headers, read)
        except LLMError as error:
            self.secrets.scrub_exception(error)  # its causes' args name the URL, which may hold a key
            raise

    def _call(self, url: str, body: dict[str, Any], headers: dict[str, str], read: Callable[[requests.Response, CallGuard], _T]) -> _T:
        data = self._encode(body, url)
        with CallGuard(self.deadline_s, current_abort_signal()) as guard:
            retry = self._retry_policy()
            attempt = 0
            while True:
                attempt += 1
                try:
                    return self._attempt(url, data, headers, read, guard)
                except LLMError as failure:
                    if not failure.retryable or guard.reason is not None or guard.emitted:
                        raise
                    error = failure
                retry, delay = self._next_try(retry, error, url, attempt)
                remaining = guard.remaining()
                if remaining is not None and delay >= remaining:
                    raise self.error(
                        f"{error} — not retried: the wait ({delay:.1f} s) would pass the call's deadline_s={self.deadline_s:g}",
                        status=error.status,
                        retryable=True,
                        url=url,
                    ) from error
                logger.info("retrying %s in %.2f s after attempt %d failed: %s", self.secrets.redact(url), delay, attempt, error)
                if guard.wait(delay):
                    raise self._guard_error(guard, url) from error

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

    def _next_try(self, retry: _LLMRetry, error: LLMError, url: str, attempt: int) -> tuple[_LLMRetry, float]:
        """The policy after ``error`` and the seconds to wait, or the ``LLMError`` that ends the call."""
        if error.retry_after_ms is not None and error.retry_after_ms > self.max_retry_delay_ms:
            raise self.error(
                f"{error} — the server asked to wait {error.retry_after_ms:.0f} ms before retrying, "
                f"more than max_retry_delay_ms={self.max_retry_delay_ms:g}; not retried",
                status=error.status,
                retryable=True,
                retry_after_ms=error.retry_after_ms,
                url=url,
            ) from error
        try:
            retry = retry.increment(method="POST", url=url, error=OSError(str(error)))
        except MaxRetryError:
            raise self.error(
                f"{error} (gave up after {attempt} attempts)", status=error.status, retryable=True, retry_after_ms=error.retry_after_ms, url=url
            ) from error
        delay = error.retry_after_ms / 1000 if error.retry_after_ms is not None else retry.get_backoff_time()
        return retry, delay

    def _encode(self, body: dict[str, Any], url: str) -> bytes:
        """The request body as strict JSON, once for every attempt.

        A body JSON cannot carry (a NaN or infinite option, an object in a message) is
        the caller's error, found before anything is sent: it raised ``TypeError`` from
        inside requests, or became a retried "could not connect" ``LLMError``.
        """
        try:
            # ASCII, as requests' json= writes it: a lone surrogate a model once sent ("\\ud800")
            # goes back escaped, where UTF-8 could not encode it at all
            return json.dumps(body, allow_nan=False).encode("ascii")
        except (TypeError, ValueError, RecursionError) as exc:
            raise self.error(f"the {self.provider} request to {url} cannot be sent as JSON: {type(exc).__name__}: {exc}", url=url) from exc

    def _attempt(self, url: str, data: bytes, headers: dict[str, str], read: Callable[[requests.Response, CallGuard], _T], guard: CallGuard) -> _T:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("POST %s headers=%s", self.secrets.redact(url), self.secrets.masked_headers(headers))
        if guard.reason:  # aborted before the request went out (or between retries)
            raise self._guard_error(guard, url)
        remaining = guard.remaining()
        timeout = self.timeout if remaining is None else max(min(self.timeout, remaining), 0.001)
        try:
            response = self.post(url, data, headers, timeout)
        except requests.Timeout as exc:
            raise self._guard_error(guard, url) if _tripped(guard) else self.error(
                f"{self.provider} request to {url} timed out after {timeout:g} s", retryable=True, url=url
            ) from exc
        except requests.RequestException as exc:
            if _tripped(guard):
                raise self._guard_error(guard, url) from exc
            reason = exc.args[0] if exc.args else exc
            if isinstance(exc, ValueError):  # InvalidURL, InvalidSchema, MissingSchema, InvalidHeader: asking again cannot help
                raise self.error(f"the request to {self.provider} at {url} is invalid: {reason}", url=url) from exc
            raise self.error(f"could not connect to {self.provider} at {url}: {reason}", retryable=True, url=url) from exc
        with response:
            if guard.reason:  # tripped while connecting, before the socket was known
                raise self._guard_error(guard, url)
            logger.debug("HTTP %d from %s (%s)", response.status_code, self.secrets.redact(url), response.headers.get("Content-Type"))
            if response.is_redirect:
                location = response.headers.get("Location", "")
                raise self.error(
                    f"{self.provider} at {url} answered HTTP {response.status_code}, a redirect to {location!r}; redirects are not "
                    f"followed (the credentials would go along): if that is the server, use it as base_url",
                    status=response.status_code,
                    url=url,
                )
            if not 200 <= response.status_code < 300:
                raise self._error_from_response(url, response, guard)
            try:
                result = read(response, guard)
            except ReplyError as exc:
                if _tripped(guard):
                    raise self._guard_error(guard, url) from exc
                status = exc.status or response.status_code
                raise self.error(f"{self.provider} reply from {url}: {exc}", status=status, retryable=exc.retryable, url=url, overflow=exc.overflow) from exc
            except _READ_ERRORS as exc:
                if _tripped(guard):
                    raise self._guard_error(guard, url) from exc
                raise self.error(
                    f"{self.provider} reply from {url} broke off (HTTP {response.status_code}): {type(exc).__name__}: {exc}",
                    status=response.status_code,
                    retryable=True,
                    url=url,
                ) from exc
        return result

    def _guard_error(self, guard: CallGuard, url: str) -> LLMError:
        if guard.reason == ABORTED:
            return self.error(f"{self.provider} call to {url} was aborted; the reply was not read further", url=url)
        return self.error(f"{self.provider} call to {url} did not finish within deadline_s={guard.deadline_s:g}", retryable=True, url=url)

    def _error_from_response(self, url: str, response: requests.Response, guard: CallGuard) -> LLMError:
        try:
            raw = read_capped(response, ERROR_BODY_BYTES)
        except _READ_ERRORS:
            raw = b""
        if guard.reason:
            return self._guard_error(guard, url)
        text = self.secrets.redact_escaped(raw.decode("utf-8", errors="replace"))  # an echo may hide a key in escapes
        try:
            body = loads_json(text)
        except ValueError:
            body = None
        status = response.status_code
        overflow = context_overflow(status, body, text)
        retryable = status in RETRYABLE_STATUSES and not overflow and not (status == 429 and error_code(body) == "insufficient_quota")
        retry_after_s = _LLMRetry().get_retry_after(response.raw) if response.raw is not None else None
        return self.error(
            f"{self.provider} API error {status} from {url}: {server_message(body, text)}",
            status=status,
            retryable=retryable,
            retry_after_ms=retry_after_s * 1000 if retry_after_s is not None else None,
            url=url,
            overflow=overflow,
        )

    def json_body(self, response: requests.Response, limit: Optional[int] = None, limit_name: str = "max_event_bytes") -> Any:
        """The whole body parsed as JSON, masked before and after parsing; a body that is not JSON, or an error object, is a ``ReplyError``.

        A body longer than ``limit`` bytes is a ``ReplyError`` naming the cap (``limit_name``),
        read no further (a server sending an endless body would otherwise fill the memory
        until the deadline).
        """
        raw = read_capped(response, limit + 1 if limit is not None else None)
        if limit is not None and len(raw) > limit:
            raise ReplyError(f"the reply exceeds {limit} bytes ({limit_name}={limit}); it was not read further")
        text = self.secrets.redact(raw.decode("utf-8", errors="replace"))
        try:
            data = loads_json(text)
        except ValueError as exc:
            kind = response.headers.get("Content-Type") or "no Content-Type"
            raise ReplyError(f"HTTP {response.status_code} ({kind}) with a body that is not JSON ({exc}): {text[:200].strip()!r}") from None
        error = payload_error(data)
        if error is not None:
            raise error
        return self.secrets.redact_json(data) if self.secrets.may_hide(text) else data


class _UnredirectedSession(requests.Session):
    """A session that finds no redirect to follow: with ``allow_redirects=False`` requests
    still prepares the next request (``Response.next``) and reads the redirect's whole body
    to do so, unbounded; ``Transport._attempt`` refuses a redirect by its status and headers."""

    def get_redirect_target(self, resp: requests.Response) -> None:
        return None


def _tripped(guard: CallGuard) -> bool:
    """Whether the guard fired; a read that timed out just as the deadline passed counts as the deadline.

    The per-read timeout is cut to the time left, so the socket's timeout and the guard's
    timer may fire together; whichever wins, the caller is told it was the deadline.
    """
    if guard.reason is None and guard.remaining() == 0:
        guard.trip(DEADLINE)
    return guard.reason is not None


def read_capped(response: requests.Response, limit: Optional[int]) -> bytes:
    """The body as it arrives, up to ``limit`` bytes (all of it when None).

    A body read to its end lets urllib3 return the connection to the pool (keep-alive).
    """
    pieces: list[bytes] = []
    size = 0
    for piece in iter_body(response):
        pieces.append(piece)
        size += len(piece)
        if limit is not None and size >= limit:
            break
    return b"".join(pieces)[:limit] if limit is not None else b"".join(pieces)


def iter_body(response: requests.Response) -> Iterator[bytes]:
    """The body's bytes as they arrive (``read1``: whatever is there, never waiting for a full buffer)."""
    raw = response.raw
    while True:
        piece = raw.read1(READ_SIZE, decode_content=True)
        if not piece:
            return
        yield piece
