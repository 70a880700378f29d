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
parser keeps what it has not yet understood and never looks at a byte twice, so one
event of n bytes costs O(n) whatever the chunking. One event may hold at most
``max_event_chars`` characters; beyond that the parser raises ``SSEError`` rather than
grow without bound.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from typing import Optional

__all__ = ["DEFAULT_MAX_EVENT_CHARS", "SSEError", "SSEEvent", "SSEParser"]

DEFAULT_MAX_EVENT_CHARS = 16 * 1024 * 1024
_LINE_END = re.compile(r"\r\n|\r|\n")


class SSEError(ValueError):
    """The event stream cannot be parsed within its limits (one event is too large)."""


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event: its type (``"message"`` unless an ``event:`` field said otherwise), data and last event id."""

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

    def __init__(self, max_event_chars: Optional[int] = DEFAULT_MAX_EVENT_CHARS) -> None:
        self.max_event_chars = max_event_chars
        self.retry: Optional[int] = None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._started = False  # whether the first character (a possible BOM) was seen
        self._line: list[str] = []  # pieces of the line not yet ended; joined once, when it ends
        self._after_cr = False  # the last character seen was a CR: a LF right after it ends nothing
        self._data: list[str] = []  # the data lines of the event being built
        self._event_type = ""
        self._last_id = ""
        self._data_chars = 0  # characters of the data lines kept, a newline each
        self._size = 0  # characters of the event being built: its data and its unfinished line

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk`` (bytes of the stream, cut anywhere) and return the events it completes."""
        return self._text(self._decoder.decode(chunk))

    def close(self) -> list[SSEEvent]:
        """End of stream: parse what the decoder still holds; an unfinished event is discarded."""
        events = self._text(self._decoder.decode(b"", final=True))
        self._line.clear()
        self._data.clear()
        self._event_type = ""
        self._size = self._data_chars = 0
        return events

    def _text(self, text: str) -> list[SSEEvent]:
        if not text:
            return []
        if not self._started:
            self._started = True
            if text[0] == "\ufeff":
                text = text[1:]
        events: list[SSEEvent] = []
        position = 0
        if self._after_cr and text.startswith("\n"):
            position = 1  # the LF of a CRLF split between two chunks
        self._after_cr = False
        for match in _LINE_END.finditer(text, position):
            self._line.append(text[position : match.start()])
            line = "".join(self._line)
            self._line.clear()
            position = match.end()
            event = self._process(line)
            if event is not None:
                events.append(event)
        # a CR ending the text ends its line, but the LF of a CRLF may come first in the next chunk
        self._after_cr = text.endswith("\r")
        rest = text[position:]
        if rest:
            self._line.append(rest)
            self._grow(len(rest))
        return events

    def _grow(self, count: int) -> None:
        self._size += count
        if self.max_event_chars is not None and self._size > self.max_event_chars:
            raise SSEError(f"one server-sent event exceeds {self.max_event_chars} characters; the stream was not read further")

    def _process(self, line: str) -> Optional[SSEEvent]:
        self._size = self._data_chars  # the line has ended: only kept data counts now
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return None  # a comment (OpenRouter's ": OPENROUTER PROCESSING")
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._data_chars += len(value) + 1
            self._grow(len(value) + 1)
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
        self._size = self._data_chars = 0
        if not self._data:
            return None
        data = "\n".join(self._data)
        self._data.clear()
        return SSEEvent(event_type or "message", data, self._last_id)
