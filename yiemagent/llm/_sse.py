"""An incremental parser for server-sent events, by the WHATWG rules, in linear time.

Beyond the spec: the wire under spec §14 ``llmCall`` when a client streams. Follows
WHATWG HTML, "Server-sent events", §9.2.5-9.2.6 ("Parsing an event stream",
"Interpreting an event stream"):

- the stream is always UTF-8, whatever ``Content-Type`` says (invalid bytes become
  U+FFFD, a leading BOM is dropped);
- lines end at CR, LF or CRLF only: U+0085, U+2028 and U+2029 are ordinary characters
  (``str.splitlines`` would split on them and break the JSON inside an event);
- ``field: value`` with one optional space after the colon; a line starting with ``:``
  is a comment; a line without a colon is a field with an empty value; unknown fields
  are ignored; ``data`` lines are joined with ``\\n``; a blank line dispatches the event
  (an event with no data is not dispatched); at the end of the stream an event not yet
  dispatched is discarded.

Bytes may arrive split anywhere (inside a UTF-8 sequence, between CR and LF): the
unfinished line is kept as bytes in a ``bytearray`` (amortised O(1) appends, one byte of
memory per byte, whatever the chunking) and each line is decoded once when it ends, so
one event of n bytes costs O(n). One event may hold at most ``max_event_bytes`` bytes;
beyond that the parser raises ``SSEError`` rather than grow without bound.
"""

from __future__ import annotations

import codecs
import re
from typing import NamedTuple, Optional

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "SSEError", "SSEEvent", "SSEParser"]

DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
_LINE_END = re.compile(rb"\r\n|\r|\n")


class SSEError(ValueError):
    """The event stream cannot be parsed within its limits (one event is too large)."""


class SSEEvent(NamedTuple):
    """One dispatched event: its type (``"message"`` unless an ``event:`` field said otherwise), data and last event id.

    A named tuple: one is made per event of a stream, thousands a reply.
    Thread safety: immutable; may be shared between threads.
    """

    event: str
    data: str
    id: str = ""


class SSEParser:
    """Feed bytes as they arrive; get back the events they complete.

    ``feed(chunk)`` returns the events completed by ``chunk`` (often none, sometimes
    several); ``close()`` ends the stream and discards an event left unfinished, as the
    standard says. ``retry`` holds the last valid ``retry:`` value (milliseconds), if any.

    Thread safety: none; one parser belongs to the thread reading one response.
    """

    def __init__(self, max_event_bytes: Optional[int] = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self.retry: Optional[int] = None
        self._first_line = True  # a BOM may start the first line only
        self._line = bytearray()  # the bytes of the line not yet ended (amortised O(1) appends, 1 byte a byte)
        self._after_cr = False  # the last byte seen was a CR: a LF right after it ends nothing
        self._data: list[str] = []  # the data lines of the event being built
        self._event_type = ""
        self._last_id = ""
        self._data_bytes = 0  # bytes of the data lines kept, a newline each
        self._size = 0  # bytes of the event being built: its data and its unfinished line

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk`` (bytes of the stream, cut anywhere) and return the events it completes."""
        events: list[SSEEvent] = []
        position = 1 if self._after_cr and chunk[:1] == b"\n" else 0  # the LF of a CRLF split between two chunks
        # CR and LF never occur inside a UTF-8 sequence, so lines are found in the bytes and
        # each whole line is decoded once (invalid bytes become U+FFFD). The last piece is
        # the line not yet ended (b"" when the chunk ends a line).
        lines = _LINE_END.split(chunk[position:] if position else chunk)
        unfinished = lines.pop()
        if lines and self._line:
            self._line += lines[0]
            lines[0] = bytes(self._line)
            self._line.clear()
        for raw in lines:
            # the two lines of almost every event, "data: ..." and the blank line that
            # dispatches it, are read here; every other line as the standard says, in _process
            if self._first_line:
                event = self._process(raw)
            elif not raw:
                event = self._dispatch()
            elif raw.startswith(b"data: "):
                self._data_bytes += len(raw) + 1  # as in _process
                self._size = self._data_bytes
                self._data.append(raw[6:].decode("utf-8", errors="replace"))
                if self.max_event_bytes is not None and self._size > self.max_event_bytes:
                    raise self._too_large()
                continue
            else:
                event = self._process(raw)
            if event is not None:
                events.append(event)
        if chunk:
            self._after_cr = chunk.endswith(b"\r")
        if unfinished:
            self._line += unfinished
            self._grow(len(unfinished))
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: an unfinished line or event is discarded, as the standard says."""
        self._line.clear()
        self._data.clear()
        self._event_type = ""
        self._size = self._data_bytes = 0
        return []

    def _grow(self, count: int) -> None:
        self._size += count
        if self.max_event_bytes is not None and self._size > self.max_event_bytes:
            raise self._too_large()

    def _too_large(self) -> SSEError:
        return SSEError(f"one server-sent event exceeds {self.max_event_bytes} bytes; the stream was not read further")

    def _process(self, raw: bytes) -> Optional[SSEEvent]:
        """One whole line, by the standard's rules."""
        self._size = self._data_bytes  # the line has ended: only kept data counts now
        if self._first_line:
            self._first_line = False
            if raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
        if not raw:
            return self._dispatch()
        line = raw.decode("utf-8", errors="replace")
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return None  # a comment (OpenRouter's ": OPENROUTER PROCESSING")
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._data_bytes += len(raw) + 1  # an upper bound of the value's bytes, the field name included
            self._grow(len(raw) + 1)
        elif name == "event":
            self._event_type = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self.retry = int(value)
        return None

    def _dispatch(self) -> Optional[SSEEvent]:
        event_type, self._event_type = self._event_type, ""
        self._size = self._data_bytes = 0
        if not self._data:
            return None
        data = "\n".join(self._data)
        self._data.clear()
        return SSEEvent(event_type or "message", data, self._last_id)
