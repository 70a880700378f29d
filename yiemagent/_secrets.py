"""The credentials a client holds, and masking them in every text that may leave the process.

Beyond the spec: "no secret leaves the process" (README "Secrets", docs/mcp.md "Secrets").
One module serves the LLM clients (``llm/``) and the MCP clients (``mcp/``).

What is a secret. For an LLM client: its API key and every header that carries a
credential — by its name (``authorization``, ``api-key``, ``cookie``, or a name holding
``key``, ``token``, ``secret``, ``auth``, ``password``, ``credential``, ``session``) or by
its value (an ``auth-scheme token`` such as ``Bearer x``, or a long run of letters and
digits with no space). For an MCP client every header value and every value of a stdio
server's ``env`` (``values=``: they are secrets whatever their names). Credentials in a
URL count too (a password, a ``?key=`` query value). Each value is searched for as given
and stripped (a key read from a file keeps its newline), and so is each word after the
first (``Bearer tok`` masks ``tok`` alone too: servers echo tokens without their scheme).

Every secret is replaced by ``***`` in error messages, reprs, log lines and in the text a
server sends back (a server that echoes the key cannot leak it through an ``LLMError``,
the reply or an event). Values shorter than ``MIN_SECRET_CHARS`` are hidden in reprs but
not searched for in text: masking every ``"abc"`` in a reply would garble it, and so
short a value protects nothing.

A server's text is masked before and after JSON parsing (``redact_json``: an echo written
with escapes such as ``\\/`` is plain only once parsed); stream deltas go through a
``DeltaMasker``, which holds back an end that may begin a credential, so a key split
across two deltas is masked too; ``scrub_exception`` masks the args of every exception
chained to an ``LLMError`` (a traceback prints them all).

Log records are masked by ``_log_masking`` with the ``Secrets`` of each live client.

Thread safety: ``Secrets`` is immutable after construction (its lazily compiled regex aside)
and may be shared between threads. ``DeltaMasker`` belongs to the one thread reading one
response.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional
from urllib.parse import unquote, unquote_plus, urlsplit

__all__ = [
    "MASK",
    "MIN_SECRET_CHARS",
    "DeltaMasker",
    "Secrets",
    "is_credential_header",
]

MASK = "***"
MIN_SECRET_CHARS = 6
_CREDENTIAL_NAME = re.compile(r"auth|key|token|secret|password|passwd|credential|session|cookie|signature", re.IGNORECASE)
_SCHEME_VALUE = re.compile(r"^(?:bearer|basic|token|digest|apikey|api-key|key)\s+(\S+)\s*$", re.IGNORECASE)
_TOKEN_LIKE = re.compile(r"^(?=[^\s]*[A-Za-z])(?=[^\s]*[0-9])[A-Za-z0-9._~+/=:-]{20,}$")
# Headers every client sets itself that carry no secret (a date-like version string would look like a token).
_PUBLIC_HEADERS = frozenset({"content-type", "accept", "anthropic-version", "user-agent", "content-length"})

_SUFFIX_REGEX_CHARS = 256
"""Credentials up to this long are found by ``held_suffix``'s regex; it nests a group a
character, and Python's regex compiler recurses on each (a 1,000-character JWT fails)."""


def _proper_prefixes(value: str) -> str:
    """A regex matching each non-empty proper prefix of ``value``: ``a(?:b(?:c)?)?`` for ``abcd``."""
    pattern = ""
    for char in reversed(value[1:-1]):
        pattern = f"(?:{re.escape(char)}{pattern})?"
    return re.escape(value[0]) + pattern


_JSON_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)


def _json_unescaped(text: str) -> str:
    """``text`` with the JSON escapes that stand for a plain character (``\\/``, ``\\u0073``)
    written plainly; ``\\"``, ``\\\\``, control characters and surrogates stay escaped, so JSON
    text stays JSON text of the same value (a call's arguments, parsed later by extraction)."""

    def plain(match: re.Match[str]) -> str:
        escape = match.group(1)
        if escape == "/":
            return "/"
        if len(escape) == 5:
            char = chr(int(escape[1:], 16))
            if char not in '"\\' and char >= " " and not "\ud800" <= char <= "\udfff":
                return char
        return match.group(0)

    return _JSON_ESCAPE.sub(plain, text)


_MAX_MASKED_FORMS = 256


def _masked_forms(own: Mapping[str, set[str]], secrets: set[str]) -> set[str]:
    """Each credential as it reads once another credential inside it is masked: those are credentials too.

    A stream's events are masked one by one: an event holding ``tenant-0042`` (a key) whole
    masks it, and ``tenant-0042-9f8e…`` (another credential, in the next events) then reads
    ``***-9f8e…`` in the joined text, where it was not found. A value's own parts ("tok" of
    "Bearer tok") are not counted: "Bearer ***" shows nothing. Each part is a credential of
    its own (a server echoes ``tok`` without its scheme), so each part's masked forms are
    found too. At most ``_MAX_MASKED_FORMS``.
    """
    forms: set[str] = set()
    pending = [(part, own_parts) for own_parts in own.values() for part in own_parts]
    while pending and len(forms) < _MAX_MASKED_FORMS:
        form, own_parts = pending.pop()
        for other in secrets:
            if other not in own_parts and len(other) >= MIN_SECRET_CHARS and other in form:
                masked = form.replace(other, MASK)
                if masked not in forms and masked not in secrets:
                    forms.add(masked)
                    pending.append((masked, own_parts))
    return forms


def is_credential_header(name: str, value: str) -> bool:
    """Whether a header carries a credential, by its name or by the look of its value."""
    if name.lower() in _PUBLIC_HEADERS:
        return False
    return bool(_CREDENTIAL_NAME.search(name) or _SCHEME_VALUE.match(value) or _TOKEN_LIKE.match(value))


class Secrets:
    """The credentials of one client; ``redact(text)`` masks them all.

    ``api_key``, the credential ``headers`` and the credentials in ``url`` are an LLM
    client's; ``values`` is a mapping every value of which is a secret whatever its name
    (an MCP client's headers, a stdio server's environment); ``proxies`` are the URLs of
    the proxies the client's requests go through, whose credentials are secrets too.

    Thread safety: immutable after construction, but for ``_suffix``, the compiled regex of
    ``held_suffix``, which the first call sets (an assignment: threads that race each set
    the same pattern); may be shared between threads.
    """

    def __init__(
        self,
        api_key: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
        url: str = "",
        *,
        values: Optional[Mapping[str, Any]] = None,
        proxies: Iterable[str] = (),
    ) -> None:
        found: list[str] = [api_key] if api_key else []
        self._header_names: set[str] = set()
        for name, value in (headers or {}).items():
            if isinstance(value, str) and is_credential_header(name, value):
                self._header_names.add(name.lower())
                found.append(value)
        found += [str(value) for value in (values or {}).values()]
        found += _url_secrets(url)
        for proxy in proxies:  # a proxy's user:password goes out as a Proxy-Authorization a proxy may echo
            found += _url_secrets(proxy)
        secrets: set[str] = set()
        own: dict[str, set[str]] = {}
        for value in found:
            # as given, stripped (a key read from a file often ends in a newline), and each word
            # after the first: "Bearer tok" masks "tok" alone too
            own[value] = {value, value.strip(), *value.split()[1:]}
            secrets.update(own[value])
        self._all = frozenset(secrets)
        # longest first, so that "Bearer tok" is masked whole before "tok" alone
        self._values = tuple(sorted((v for v in secrets | _masked_forms(own, secrets) if len(v) >= MIN_SECRET_CHARS), key=len, reverse=True))
        # a value holding "*" may be made whole again by the masks put around it (see redact)
        self._mask_may_rebuild = any("*" in v for v in self._values)
        # a value holding a character JSON writes with a short escape (\" \\ \n...): see may_hide
        self._short_escapes = any(c in v for v in self._values for c in '"\\\b\f\n\r\t')
        # held_suffix: one regex finds an end of the text that begins one of the credentials
        # (a group nested per character, so longer ones are looked for by hand); compiled at
        # the first call, since only a streaming client makes one (hundreds of long values
        # take a noticeable fraction of a second)
        self._long_values = tuple(v for v in self._values if len(v) > _SUFFIX_REGEX_CHARS)
        self._suffix: Optional[re.Pattern[str]] = None

    def __bool__(self) -> bool:
        return bool(self._all)

    def redact(self, text: str) -> str:
        """``text`` with every credential replaced by ``***``: none is left in what it returns.

        A credential holding ``*`` can be made whole again by a mask put next to it
        (``*****a`` in ``*******aa`` masks to ``*****a``): then masking goes on until none
        is left. Each pass that finds one makes the text shorter (a credential is longer than
        the mask), so it ends.
        """
        for value in self._values:
            if value in text:
                text = text.replace(value, MASK)
        while self._mask_may_rebuild and any(value in text for value in self._values):
            for value in self._values:
                text = text.replace(value, MASK)
        return text

    def loads(self, text: str, parse: Callable[[str], Any]) -> Any:
        """``parse(text)`` with every credential masked, in the text and in what it parsed."""
        text = self.redact(text)
        value = parse(text)
        return self.redact_json(value) if self.may_hide(text) else value

    def may_hide(self, masked: str) -> bool:
        """Whether JSON parsed from ``masked`` (text already masked) may still hold a credential.

        A credential the server wrote with JSON escapes (``\\/``, ``\\u0073k-…``) is plain only
        once parsed, so parsed values are walked too (``redact_json``), unless no escape in
        the text can make a credential's character: then every parsed string and key is made
        of pieces of the masked text, which holds no credential (``redact`` leaves none), and
        of characters no credential has. ``\\u`` and ``\\/`` can make any (``/``); the short
        escapes (``\\"``, ``\\\\``, ``\\n``, ``\\t``...; a reply's tool-call arguments and
        multi-line text are full of them) only a quote, a backslash or a control character,
        which a credential rarely holds. The walk cost more than the parse on each event of
        a stream.
        """
        if not self._values or "\\" not in masked:
            return False
        return self._short_escapes or "\\u" in masked or "\\/" in masked

    def redact_json(self, value: Any) -> Any:
        """``value`` (parsed JSON) with every credential masked in each string and key.

        Masking the raw text before parsing misses a credential the server wrote with JSON
        escapes (``\\/`` for ``/``, as PHP does, or ``\\u0073k-…``); the parsed strings hold
        it plainly. Walks without recursion (a reply may nest as deep as the parser allows).
        """
        if not self._values:
            return value
        if isinstance(value, str):
            return self.redact_escaped(value)
        root = [value]
        stack: list[tuple[Any, Any]] = [(root, 0)]
        while stack:
            container, key = stack.pop()
            item = container[key]
            if isinstance(item, str):
                container[key] = self.redact_escaped(item)
            elif isinstance(item, list):
                stack.extend((item, i) for i in range(len(item)))
            elif isinstance(item, dict):
                if any(any(v in k for v in self._values) for k in item):
                    item_copy = {self.redact(k): v for k, v in item.items()}
                    item.clear()
                    item.update(item_copy)
                stack.extend((item, k) for k in item)
        return root[0]

    def redact_escaped(self, text: str) -> str:
        """``redact(text)``, and a credential written with JSON escapes in ``text`` masked too.

        A parsed string that is JSON text itself (a call's arguments) may hide a credential
        in an escape of its own, plain once extraction parses it; an error page may show one
        escaped (``sk-\\u006c...``), readable by anyone who decodes it. Then the escapes that
        stand for plain characters are written plainly and the text is masked again.
        """
        text = self.redact(text)
        if "\\" in text:
            plain = _json_unescaped(text)
            if plain != text and any(value in plain for value in self._values):
                return self.redact(plain)
        return text

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
        masks it whole. Called for every delta of a stream.
        """
        suffix = self._suffix
        if suffix is None:  # any thread may compile it; two that race compile the same pattern
            short = [v for v in self._values if len(v) <= _SUFFIX_REGEX_CHARS]
            suffix = self._suffix = re.compile("(?:" + "|".join(map(_proper_prefixes, short)) + r")\Z" if short else r"(?!)")
        found = suffix.search(text)
        longest = len(text) - found.start() if found is not None else 0
        for value in self._long_values:
            tail = text[len(text) - len(value) + 1 :] if len(text) >= len(value) else text
            start = tail.find(value[0])
            while start != -1:  # the earliest start that begins the value is the longest end
                if value.startswith(tail[start:]):
                    longest = max(longest, len(tail) - start)
                    break
                start = tail.find(value[0], start + 1)
        return longest

    def masked_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """``headers`` with the value of each credential header replaced by ``***`` (for reprs and logs).

        Every value given as ``values=`` is one: an MCP client's headers and env show as ``***``.
        """
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
        secrets = self._secrets
        if not secrets._values:
            self._emit(kind, text)
            return
        if self._held:
            text = self._held.pop(kind, "") + text
        text = secrets.redact(text)
        keep = secrets.held_suffix(text)
        if keep:
            text, self._held[kind] = text[:-keep], text[-keep:]
        if text:
            self._emit(kind, text)

    def flush(self) -> None:
        held, self._held = self._held, {}
        for kind, text in held.items():
            self._emit(kind, text)


def _url_secrets(url: str) -> list[str]:
    """A password in the URL and the values of credential-named query parameters (``?key=...``)."""
    if not url:
        return []
    parts = urlsplit(url)
    found = _userinfo_secrets(parts.username, parts.password)
    for pair in parts.query.split("&"):
        name, _, value = pair.partition("=")
        if value and _CREDENTIAL_NAME.search(unquote_plus(name)):
            # as written, and decoded both ways: a "+" in a key is a "+" in the URL text
            # (and in requests' messages) but a space once form-decoded
            found += [value, unquote(value), unquote_plus(value)]
    return found


def _userinfo_secrets(username: Optional[str], password: Optional[str]) -> list[str]:
    """The URL's password, as written and decoded, and the Basic ``Authorization`` value requests
    makes of the user and password (``get_auth_from_url``), which a server's echo shows."""
    if not password:
        return []
    user, secret = unquote(username or ""), unquote(password)
    found = [password, secret]
    try:
        found.append("Basic " + base64.b64encode(f"{user}:{secret}".encode("latin1")).decode("ascii"))
    except UnicodeEncodeError:
        pass  # requests cannot send it either
    return found
