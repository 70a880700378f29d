"""The credentials a client holds, and masking them in every text that may leave the process.

Beyond the spec: the promise "no secret leaves the process" (issue 10, class 7). A
client holds its API key and whatever headers the caller passed (Azure's ``api-key``,
a custom ``Authorization``, OpenRouter's ``HTTP-Referer``…). A header is a credential
when its name says so (``authorization``, ``api-key``, ``cookie``, or a name holding
``key``, ``token``, ``secret``, ``auth``, ``password``, ``credential``, ``session``) or its
value looks like one (an ``auth-scheme token`` such as ``Bearer x``, or a long run of
letters and digits with no space). Credentials in the base URL (a password, a
``?key=`` query value) count too.

Every credential is replaced by ``***`` in error messages, reprs, log lines and in the
text a server sends back (a server that echoes the key cannot leak it through an
``LLMError``, the reply or an event). For ``Bearer tok`` both the whole value and ``tok``
are masked. Values shorter than ``MIN_SECRET_CHARS`` are hidden in reprs but not searched
for in text: masking every ``"abc"`` in a reply would garble it, and so short a value
protects nothing.

A server's text is masked before and after JSON parsing (``redact_json``: an echo written
with escapes such as ``\\/`` is plain only once parsed); stream deltas go through a
``DeltaMasker``, which holds back an end that may begin a credential, so a key split
across two deltas is masked too; ``scrub_exception`` masks the args of every exception
chained to an ``LLMError`` (a traceback prints them all). Each credential is searched for
as given and stripped (a key read from a file keeps its newline).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional
from urllib.parse import unquote, unquote_plus, urlsplit

__all__ = ["MASK", "MIN_SECRET_CHARS", "DeltaMasker", "Secrets", "is_credential_header"]

MASK = "***"
MIN_SECRET_CHARS = 8
_CREDENTIAL_NAME = re.compile(r"auth|key|token|secret|password|passwd|credential|session|cookie|signature", re.IGNORECASE)
_SCHEME_VALUE = re.compile(r"^(?:bearer|basic|token|digest|apikey|api-key|key)\s+(\S+)\s*$", re.IGNORECASE)
_TOKEN_LIKE = re.compile(r"^(?=[^\s]*[A-Za-z])(?=[^\s]*[0-9])[A-Za-z0-9._~+/=:-]{20,}$")
# Headers every client sets itself that carry no secret (a date-like version string would look like a token).
_PUBLIC_HEADERS = frozenset({"content-type", "accept", "anthropic-version", "user-agent", "content-length"})


def is_credential_header(name: str, value: str) -> bool:
    """Whether a header carries a credential, by its name or by the look of its value."""
    if name.lower() in _PUBLIC_HEADERS:
        return False
    return bool(_CREDENTIAL_NAME.search(name) or _SCHEME_VALUE.match(value) or _TOKEN_LIKE.match(value))


class Secrets:
    """The credentials of one client; ``redact(text)`` masks them all.

    Thread safety: immutable after construction; may be shared between threads.
    """

    def __init__(self, api_key: Optional[str] = None, headers: Optional[Mapping[str, str]] = None, url: str = "") -> None:
        values: set[str] = set()
        self._header_names: set[str] = set()
        if api_key:
            values.update({api_key, api_key.strip()})  # a key read from a file often ends in a newline
        for name, value in (headers or {}).items():
            if not isinstance(value, str) or not is_credential_header(name, value):
                continue
            self._header_names.add(name.lower())
            values.update({value, value.strip()})
            scheme = _SCHEME_VALUE.match(value)
            if scheme:
                values.add(scheme.group(1))
        values.update(_url_secrets(url))
        # longest first, so that "Bearer tok" is masked whole before "tok" alone
        self._values = tuple(sorted((v for v in values if len(v) >= MIN_SECRET_CHARS), key=len, reverse=True))
        self._all = frozenset(values)

    def __bool__(self) -> bool:
        return bool(self._all)

    def redact(self, text: str) -> str:
        """``text`` with every credential replaced by ``***``."""
        for value in self._values:
            if value in text:
                text = text.replace(value, MASK)
        return text

    def redact_json(self, value: Any) -> Any:
        """``value`` (parsed JSON) with every credential masked in each string and key.

        Masking the raw text before parsing misses a credential the server wrote with JSON
        escapes (``\\/`` for ``/``, as PHP does, or ``\\u0073k-…``); the parsed strings hold
        it plainly. Walks without recursion (a reply may nest as deep as the parser allows).
        """
        if not self._values:
            return value
        if isinstance(value, str):
            return self.redact(value)
        root = [value]
        stack: list[tuple[Any, Any]] = [(root, 0)]
        while stack:
            container, key = stack.pop()
            item = container[key]
            if isinstance(item, str):
                container[key] = self.redact(item)
            elif isinstance(item, list):
                stack.extend((item, i) for i in range(len(item)))
            elif isinstance(item, dict):
                if any(any(v in k for v in self._values) for k in item):
                    item_copy = {self.redact(k): v for k, v in item.items()}
                    item.clear()
                    item.update(item_copy)
                stack.extend((item, k) for k in item)
        return root[0]

    def scrub_exception(self, error: BaseException) -> None:
        """Mask credentials in the ``args`` of ``error`` and of every exception it was caused by (in place).

        A traceback prints the whole ``__cause__``/``__context__`` chain: requests'
        ``ConnectionError`` names the URL (with a ``?key=``) in its args, and so do the
        exceptions it wraps.
        """
        if not self._values:
            return
        seen: set[int] = set()
        pending: list[BaseException] = [error]
        while pending:
            current = pending.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            pending += [a for a in current.args if isinstance(a, BaseException)]
            pending += [e for e in (current.__cause__, current.__context__) if e is not None]
            if any(v in repr(current.args) for v in self._values):
                try:
                    current.args = tuple(a if isinstance(a, BaseException) else self.redact(a if isinstance(a, str) else repr(a)) for a in current.args)
                except (AttributeError, TypeError):
                    pass  # an exception type whose args cannot be set: nothing else to do

    def held_suffix(self, text: str) -> int:
        """The length of the longest end of ``text`` that begins a credential (0 if none).

        A stream shows text piece by piece: a credential split across two pieces is masked
        in neither. Holding back such an end until the next piece (``DeltaMasker``)
        masks it whole.
        """
        longest = 0
        for value in self._values:
            tail = text[len(text) - len(value) + 1 :] if len(text) >= len(value) else text
            start = tail.find(value[0])
            while start != -1:  # the earliest start that begins the value is the longest end
                if value.startswith(tail[start:]):
                    longest = max(longest, len(tail) - start)
                    break
                start = tail.find(value[0], start + 1)
        return longest

    def masked_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """``headers`` with the value of each credential header replaced by ``***`` (for reprs and logs)."""
        return {
            name: MASK if name.lower() in self._header_names or value in self._all or is_credential_header(name, value) else self.redact(value)
            for name, value in headers.items()
        }


class DeltaMasker:
    """Masks credentials in a stream of text pieces of each kind, even one split across pieces.

    ``emit(kind, text)`` passes on what cannot be the start of a credential and holds back
    the rest; ``flush()`` passes on what is held once the stream is whole. The pieces of
    a kind, joined, equal ``secrets.redact`` of the text joined.

    Thread safety: none; one masker belongs to the thread reading one response.
    """

    def __init__(self, secrets: Secrets, emit: Callable[[str, str], None]) -> None:
        self._secrets = secrets
        self._emit = emit
        self._held: dict[str, str] = {}

    def emit(self, kind: str, text: str) -> None:
        if not self._secrets._values:
            self._emit(kind, text)
            return
        text = self._secrets.redact(self._held.pop(kind, "") + text)
        keep = self._secrets.held_suffix(text)
        if keep:
            text, self._held[kind] = text[:-keep], text[-keep:]
        if text:
            self._emit(kind, text)

    def flush(self) -> None:
        held, self._held = self._held, {}
        for kind, text in held.items():
            self._emit(kind, text)


def _url_secrets(url: str) -> Iterable[str]:
    """A password in the URL and the values of credential-named query parameters (``?key=...``)."""
    if not url:
        return ()
    parts = urlsplit(url)
    found = [parts.password] if parts.password else []
    for pair in parts.query.split("&"):
        name, _, value = pair.partition("=")
        if value and _CREDENTIAL_NAME.search(unquote_plus(name)):
            # as written, and decoded both ways: a "+" in a key is a "+" in the URL text
            # (and in requests' messages) but a space once form-decoded
            found += [value, unquote(value), unquote_plus(value)]
    return found
