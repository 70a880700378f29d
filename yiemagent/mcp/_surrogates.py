"""Lone surrogate escapes in a server's JSON text, made U+FFFD before the SDK parses it.

docs/mcp.md "Text UTF-8 cannot carry". JSON may write any UTF-16 code unit as an escape,
so a server (Python's ``json.dumps`` of a str holding ``"\\ud800"``, say) can send
``"a\\ud800c"``: valid JSON, but a string UTF-8 cannot encode. The SDK parses each message
with pydantic, whose JSON parser refuses such an escape; the SDK then logs the line and
drops it, and the call it answered waits for ever (or its ``timeout_s``). Python's own
``json`` would read it into a str that cannot be written as UTF-8 again, which is worse:
nothing may enter the history that cannot be sent again (decision 15, docs/failures.md
"A reply or result that cannot be sent again", where any other text with a lone surrogate
gets U+FFFD too).

So the text is mended first: each escape of a lone surrogate (a high one not followed by
the escape of a low one, a low one not after a high one) becomes ``\\ufffd``; a pair
(``\\ud83d\\ude00``), one character, stays, and so does ``\\\\ud800`` (an escaped backslash,
then the text ``ud800``). Only the six characters of each such escape change, so the
message is otherwise the server's, and the call is answered at once with U+FFFD where
the surrogate was.

Over stdio the reader mends each line (``_stdio``); over streamable HTTP the SDK reads the
bodies itself, so ``mend_response``, an httpx response hook of the client's HTTP client,
puts ``MendedBody`` between the transport and the SDK: it passes the body on line by line
(an SSE event, a JSON body: an escape never spans a newline), each line mended. A body
the server compressed (``Content-Encoding``) is passed on as it came: its bytes are not
JSON text; a lone surrogate in it makes the SDK fail the call at once, naming the parse
error.

Thread safety: pure functions; a ``MendedBody`` is read by one task (the client's loop thread).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx2

__all__ = ["MendedBody", "mend_lone_surrogates", "mend_response"]

# a run of backslashes, "u" and a surrogate's four hex digits, then (if it comes at once) the escape of a low surrogate
_ESCAPE = re.compile(r"(\\+)u([dD][89a-fA-F][0-9a-fA-F]{2})((?:\\u[dD][c-fC-F][0-9a-fA-F]{2})?)")
_FFFD = "\\ufffd"


def _mend(match: re.Match[str]) -> str:
    run, first, low = match.group(1, 2, 3)
    lone_low = _FFFD if low else ""  # a low escape after anything but a high escape is lone
    if len(run) % 2 == 0:  # the backslashes escape each other: "u" and its digits are text
        return run + "u" + first + lone_low
    if first[1] in "89abAB" and low:  # a high then a low: one character, as sent
        return match.group(0)
    return run[:-1] + _FFFD + lone_low


def mend_lone_surrogates(text: str) -> str:
    """JSON ``text`` with each escape of a lone surrogate replaced by ``\\ufffd`` (unchanged when it has none)."""
    if "\\u" not in text:
        return text
    return _ESCAPE.sub(_mend, text)


def _mend_bytes(data: bytes) -> bytes:
    """``mend_lone_surrogates`` on bytes of JSON text (Latin-1 maps each byte to one character and back, so only the escapes change)."""
    if b"\\u" not in data:
        return data
    return mend_lone_surrogates(data.decode("latin-1")).encode("latin-1")


class MendedBody(httpx2.AsyncByteStream):
    """A response body passed on line by line, each line's lone surrogate escapes made ``\\ufffd``.

    A read without a backslash, while nothing is held, is passed on at once: no escape starts
    in it (the common case, a large text without escapes, costs one search). Otherwise the
    line is held until its newline (the pieces joined once: linear in the bytes read), but
    never more than ``limit`` bytes: a longer line is passed on as it is, to be refused by
    the SDK's own cap (``_session.MAX_HTTP_EVENT_BYTES``) rather than held in memory.
    """

    def __init__(self, inner: Any, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pieces: list[bytes] = []
        size = 0
        async for chunk in self._inner:
            if not pieces and b"\\" not in chunk:
                yield chunk
                continue
            end = chunk.rfind(b"\n")
            if end < 0:
                pieces.append(chunk)
                size += len(chunk)
                if size > self._limit:
                    yield b"".join(pieces)
                    pieces, size = [], 0
                continue
            pieces.append(chunk[: end + 1])
            yield _mend_bytes(b"".join(pieces))
            rest = chunk[end + 1 :]
            pieces, size = ([rest], len(rest)) if b"\\" in rest else ([], 0)
            if rest and not pieces:
                yield rest
        if pieces:
            yield _mend_bytes(b"".join(pieces))

    async def aclose(self) -> None:
        await self._inner.aclose()


def mend_response(limit: int) -> Any:
    """An httpx ``response`` event hook: each uncompressed body becomes a ``MendedBody`` (held lines at most ``limit`` bytes)."""

    async def hook(response: httpx2.Response) -> None:
        if response.headers.get("content-encoding", "identity").strip().lower() in ("", "identity"):
            response.stream = MendedBody(response.stream, limit)

    return hook
