"""What the two HTTP clients share: settings, calling with or without a stream, reading the stream.

Beyond the spec (docs/streaming.md; docs/conformance.md decisions 13 and 14). A client is
``llm_call(formatted) -> AssistantMessage``. With ``stream=True`` (or ``"stream": True``
in the formatted dict or the options) it reads the reply as it arrives and hands each
text and thinking fragment to ``streaming.emit_delta`` (never a tool-call fragment: a
tool call runs only from the whole reply). The deltas of a kind, joined, equal
``message_text(reply, kind)``.

A stream request must be answered with ``text/event-stream`` (parsed by ``_sse``), or
NDJSON (Ollama's native API), or a whole JSON reply (a server that ignores ``stream``:
its text is emitted at once). Anything else, such as a proxy's HTML page, is an
``LLMError``, never an empty reply.

Size: one event (or one stream line) may hold at most ``max_event_bytes``; a whole reply,
streamed or not, at most ``max_reply_bytes`` (``DEFAULT_MAX_REPLY_BYTES``, 64 MiB). The
bytes are counted as they are read (after decompression), and past the cap the client
stops reading and drops the connection: an endless stream costs at most the cap, not
the memory of the machine (docs/failures.md "A reply too large").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Optional, Protocol, TypeVar

import requests
from requests.utils import get_environ_proxies

from ..types import AssistantMessage, TextContent
from ._guard import CallGuard
from ._http import Transport, iter_body, read_capped
from .._secrets import DeltaMasker, Secrets
from ._sse import SSEError, SSEParser
from ._wire import Emit, ReplyError, loads_json, message_text, payload_error

__all__ = ["DEFAULT_DEADLINE_S", "DEFAULT_MAX_REPLY_BYTES", "HTTPClient", "StreamAccumulator"]

DEFAULT_DEADLINE_S = 600.0  # ten minutes, as OpenAI's and Anthropic's own SDKs allow one request
DEFAULT_MAX_REPLY_BYTES = 64 * 1024 * 1024
"""The largest reply read, streamed or not: 64 MiB.

The longest reply a current model may write is 128,000 output tokens (gpt-5, Claude with
its 128k output option). Streamed, each token is about one event: 358 bytes per event in
OpenAI's recorded stream (tests/fixtures/openai-stream-tool-call.sse, with its
``obfuscation`` padding), 145 in Anthropic's. So the longest OpenAI reply is about 44 MiB
on the wire, Anthropic's about 18 MiB; 64 MiB leaves room above both, while an endless or
hostile stream stops there (measured in bench/bench_sse.py: the peak memory it costs).
"""
_T = TypeVar("_T")
_NDJSON_TYPES = ("application/x-ndjson", "application/jsonl", "application/json-lines", "application/ndjson")


class StreamAccumulator(Protocol):
    """Builds one reply from stream events; each provider has its own."""

    def add(self, event: dict[str, Any]) -> bool:
        """Take one event (a JSON object); return True when it is the protocol's last."""

    def finish(self, done: bool) -> AssistantMessage:
        """The whole reply; ``done`` says the stream ended as the protocol says (``[DONE]``).

        Raises:
            ReplyError: the reply is not whole (decision 14).
        """


class HTTPClient:
    """The settings and the call of an HTTP client; subclasses speak one provider's protocol.

    Subclasses call ``_init_http`` and implement ``url``, ``_body``, ``_parse`` and
    ``_accumulator``.

    Thread safety: a client may serve several agents and threads at once; its transport
    keeps one session per thread, and each call has its own guard and accumulator.
    """

    _transport: Transport
    _headers: dict[str, str]
    _custom_headers: dict[str, str]
    _api_key: Optional[str]
    stream: bool
    max_event_bytes: Optional[int]
    max_reply_bytes: Optional[int]

    def _init_http(
        self,
        label: str,
        *,
        api_key: Optional[str],
        headers: dict[str, str],
        custom_headers: Optional[dict[str, str]],
        base_url: str,
        timeout: float,
        max_retries: int,
        max_retry_delay_ms: float,
        backoff_factor: float,
        deadline_s: Optional[float],
        stream: bool,
        max_event_bytes: Optional[int],
        max_reply_bytes: Optional[int] = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        self._api_key = api_key
        self._headers = headers
        self._custom_headers = dict(custom_headers or {})
        self.stream = stream
        self.max_event_bytes = max_event_bytes
        self.max_reply_bytes = max_reply_bytes
        # the proxies the environment names for this server: their credentials are masked too
        secrets = Secrets(api_key, headers, base_url, proxies=get_environ_proxies(base_url).values())
        self._transport = Transport(
            label,
            secrets,
            timeout=timeout,
            max_retries=max_retries,
            max_retry_delay_ms=max_retry_delay_ms,
            backoff_factor=backoff_factor,
            deadline_s=deadline_s,
        )

    @property
    def url(self) -> str:
        raise NotImplementedError

    @property
    def max_retry_delay_ms(self) -> float:
        """The longest wait a server may ask for; ``YiemAgent(max_retry_delay_ms=...)`` sets it."""
        return self._transport.max_retry_delay_ms

    @max_retry_delay_ms.setter
    def max_retry_delay_ms(self, value: float) -> None:
        self._transport.max_retry_delay_ms = value

    @property
    def deadline_s(self) -> Optional[float]:
        """The longest a whole call may take (connect, headers, body or stream, retries); None: no limit."""
        return self._transport.deadline_s

    @deadline_s.setter
    def deadline_s(self, value: Optional[float]) -> None:
        self._transport.deadline_s = value

    def _repr_tail(self) -> str:
        key = "'***'" if self._api_key else "None"
        tail = f"api_key={key}"
        if self._custom_headers:
            tail += f", headers={self._transport.secrets.masked_headers(self._custom_headers)!r}"
        return self._transport.secrets.redact(tail)

    def _body(self, formatted: dict[str, Any]) -> dict[str, Any]:
        """The request body; ``stream=True`` asks for a stream unless the options or the formatted dict say ``"stream": False``."""
        raise NotImplementedError

    def _parse(self, reply: Any) -> AssistantMessage:
        raise NotImplementedError

    def _accumulator(self, emit: Emit) -> StreamAccumulator:
        raise NotImplementedError

    def __call__(self, formatted: dict[str, Any]) -> AssistantMessage:
        try:
            body = self._body(formatted)
        except Exception as exc:  # a formatted dict that is not a chat request: messages not objects, a str…
            raise self._transport.error(f"{self._transport.provider}: no request can be built from the formatted dict: {type(exc).__name__}: {exc}") from exc
        read = self._read_stream if body.get("stream") else self._read_reply
        return self._transport.call(self.url, body, self._headers, read)

    def _read_reply(self, response: requests.Response, guard: CallGuard) -> AssistantMessage:
        if _media_type(response) == "text/event-stream":  # a server that streams though not asked to
            return self._read_stream(response, guard)
        # a whole reply is one event and the whole reply: the smaller cap holds
        caps = [(limit, name) for limit, name in ((self.max_event_bytes, "max_event_bytes"), (self.max_reply_bytes, "max_reply_bytes")) if limit is not None]
        limit, name = min(caps) if caps else (None, "")
        data = self._transport.json_body(response, limit, name)
        return _reading(self._parse, data)

    def _read_stream(self, response: requests.Response, guard: CallGuard) -> AssistantMessage:
        media_type = _media_type(response)
        if media_type == "application/json":
            message = self._read_reply(response, guard)
            for kind in ("thinking", "text"):
                guard.emit(kind, message_text(message, kind))
            return message
        if media_type in _NDJSON_TYPES:
            events = self._ndjson_events(response)
        elif media_type in ("text/event-stream", ""):
            events = self._sse_events(response)
        else:
            snippet = read_capped(response, 200).decode("utf-8", errors="replace")
            raise ReplyError(
                f"a stream request answered with HTTP {response.status_code} and Content-Type {media_type!r}, "
                f"not server-sent events: {self._transport.secrets.redact(snippet).strip()!r}"
            )
        secrets = self._transport.secrets
        masker = DeltaMasker(secrets, guard.emit)  # a key split across two deltas is masked too
        message = _reading(self._fold, events, self._accumulator(masker.emit))
        masker.flush()
        return _masked(message, secrets)

    def _fold(self, events: Iterator[tuple[str, str]], accumulator: StreamAccumulator) -> AssistantMessage:
        """The stream's events fed to ``accumulator`` up to its end (``[DONE]``, or the accumulator's own), then its message."""
        secrets = self._transport.secrets
        done = False
        for name, data in events:
            if data == "[DONE]":
                done = True
                break
            try:
                event = secrets.loads(data, loads_json)
            except ValueError as exc:
                raise ReplyError(f"stream data that is not JSON ({exc}): {secrets.redact(data[:200])!r}") from None
            if name == "error":
                raise payload_error(event, forced=True)  # type: ignore[misc]
            if accumulator.add(event):
                done = True
                break
        return accumulator.finish(done)

    def _sse_events(self, response: requests.Response) -> Iterator[tuple[str, str]]:
        parser = SSEParser(self.max_event_bytes)
        try:
            for piece in self._body_pieces(response):
                for event in parser.feed(piece):
                    yield event.event, event.data
            for event in parser.close():
                yield event.event, event.data
        except SSEError as exc:
            raise ReplyError(str(exc)) from None

    def _ndjson_events(self, response: requests.Response) -> Iterator[tuple[str, str]]:
        """One event per line; the unfinished line is a ``bytearray``, so a long one costs O(n) time and n bytes."""
        pending = bytearray()
        for piece in self._body_pieces(response):
            lines = piece.split(b"\n")
            for line in lines[:-1]:
                pending += line
                self._check_line(pending)
                text = pending.decode("utf-8", errors="replace").strip()
                pending.clear()
                if text:
                    yield "message", text
            pending += lines[-1]
            self._check_line(pending)
        text = pending.decode("utf-8", errors="replace").strip()
        if text:
            yield "message", text

    def _body_pieces(self, response: requests.Response) -> Iterator[bytes]:
        """The body as it arrives, counted: past ``max_reply_bytes`` a ``ReplyError``, and nothing more is read."""
        limit, size = self.max_reply_bytes, 0
        for piece in iter_body(response):
            size += len(piece)
            if limit is not None and size > limit:
                raise ReplyError(
                    f"the reply passed max_reply_bytes={limit} ({size} bytes read, the stream not finished); it was not read further"
                )
            yield piece

    def _check_line(self, line: bytearray) -> None:
        if self.max_event_bytes is not None and len(line) > self.max_event_bytes:
            raise ReplyError(f"one stream line exceeds {self.max_event_bytes} bytes; the stream was not read further")


def _reading(step: Callable[..., _T], *args: Any) -> _T:
    """``step(*args)``, a reply's parser or a stream's fold (once per stream, not per event); a ``ValueError`` it
    did not foresee is a ``ReplyError`` saying "not a reply" (decision 14: an ``LLMError``, streamed or not)."""
    try:
        return step(*args)
    except ReplyError:
        raise
    except ValueError as exc:
        raise ReplyError(f"not a reply: {exc}") from None


def _media_type(response: requests.Response) -> str:
    return (response.headers.get("Content-Type") or "").split(";")[0].strip().lower()


def _masked(message: AssistantMessage, secrets: Secrets) -> AssistantMessage:
    """``message`` with credentials masked in its joined text (a key split across stream events is whole only here).

    Segments of one text (``TextContent.is_segment``) are masked as that text: a key split
    across two of them makes them one block, holding the citations of both.
    """
    if not secrets:
        return message
    content: list[Any] = []
    run: list[TextContent] = []  # adjacent segments so far
    end = object()  # closes the last run
    for block in [*message.content, end]:
        if isinstance(block, TextContent) and block.is_segment:
            run.append(block)
            continue
        content.extend(_masked_segments(run, secrets))
        run = []
        if isinstance(block, TextContent):
            content.append(TextContent(secrets.redact(block.text), secrets.redact_json(block.citations)))
        elif block is not end:
            content.append(secrets.redact_json(block))
    return dataclasses.replace(message, content=content)


def _masked_segments(run: list[TextContent], secrets: Secrets) -> list[TextContent]:
    """Segments of one text masked one by one, or joined into one block when a credential spans two of them."""
    masked = [TextContent(secrets.redact(b.text), secrets.redact_json(b.citations)) for b in run]
    joined = secrets.redact("".join(b.text for b in run))
    if joined == "".join(b.text for b in masked):
        return masked
    return [TextContent(joined, [c for b in masked for c in b.citations or []])]
