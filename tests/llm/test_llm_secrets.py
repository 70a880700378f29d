"""No secret leaves the process (docs/architecture.md `_secrets.py`): the key and every credential header, masked everywhere, echoes included."""

from __future__ import annotations

import base64
import hashlib
import logging
import subprocess
import sys

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import EventRecorder
from localserver import LocalServer, Reply
from yiemagent import LLMError, YiemAgent, run_agent, take_response
from yiemagent.llm import AnthropicClient, OpenAIClient
from yiemagent.events import stream_to
from yiemagent.extraction import extract_tool_calls
from yiemagent._log_masking import install_log_filter, remove_log_filter
from yiemagent._secrets import DeltaMasker, Secrets, is_credential_header

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}
AZURE_KEY = "azure-0123456789abcdef0123"
TOKEN = "custom-token-9876543210"
GATEWAY = "gw-secret-value-42"
SECRETS = (AZURE_KEY, TOKEN, GATEWAY)
HEADERS = {"api-key": AZURE_KEY, "Authorization": f"Bearer {TOKEN}", "X-Gateway-Token": GATEWAY, "X-Title": "My App"}


def echo_all(request):
    """An error body that repeats every header the server received, as some gateways do."""
    return Reply(status=401, body={"error": {"message": f"rejected headers: {sorted(request.headers.items())}"}})


@pytest.mark.spec("14")
def test_header_credentials_are_masked_in_errors_reprs_logs_and_events(caplog):
    """Azure's api-key, a custom Authorization and an x-*-token passed in headers= never appear in an error, a repr, a DEBUG log or an event."""
    recorder = EventRecorder()
    with caplog.at_level(logging.DEBUG):
        with LocalServer(echo_all) as server:
            client = OpenAIClient(f"{server.url}/openai/deployments/gpt/v1", "m", headers=HEADERS)
            with pytest.raises(LLMError) as info:
                client(FORMATTED)
            with YiemAgent(llm_call=client, agent_event_sink=recorder) as agent:
                run_agent(agent, "hi")
                response = take_response(agent, timeout=10)
    received = server.requests[0].headers
    assert (received["api-key"], received["Authorization"], received["X-Gateway-Token"]) == (AZURE_KEY, f"Bearer {TOKEN}", GATEWAY)
    texts = (str(info.value), repr(client), caplog.text, repr(recorder.events), repr(response), response.error_message)
    for text in texts:
        for secret in SECRETS:
            assert secret not in text
    assert "***" in str(info.value) and "My App" in str(info.value), "only credentials are masked"
    assert "'api-key': '***'" in repr(client) and "'X-Title': 'My App'" in repr(client)
    assert "headers=" in caplog.text, "the DEBUG log shows the request headers, masked"


@pytest.mark.spec("14")
def test_anthropic_x_api_key_in_headers_is_masked():
    """A key given as x-api-key in headers= (not api_key=) is masked like one."""
    with LocalServer(echo_all) as server:
        client = AnthropicClient("m", base_url=server.url, headers={"x-api-key": AZURE_KEY})
        with pytest.raises(LLMError) as info:
            client(FORMATTED)
    assert server.requests[0].headers["x-api-key"] == AZURE_KEY
    assert AZURE_KEY not in str(info.value) and AZURE_KEY not in repr(client)


@pytest.mark.spec("14")
def test_key_echoed_in_a_successful_reply_is_masked():
    """A server that echoes the key inside a 200 reply (text or stream) cannot leak it into the message or the deltas."""
    key = "sk-live-abcdefghijklmnop"
    body = {"choices": [{"message": {"content": f"your key is {key}"}, "finish_reason": "stop"}]}
    with LocalServer(lambda r: Reply(body=body)) as server:
        message = OpenAIClient(f"{server.url}/v1", "m", key)(FORMATTED)
    assert message.content[0].text == "your key is ***"


@pytest.mark.spec("14")
def test_key_in_the_url_query_is_masked_in_errors_and_urllib3_logs(caplog):
    """A credential in the base URL's query (?key=) is masked in the error, the repr and urllib3's DEBUG lines."""
    secret = "AIzaSyD-0123456789abcdef"
    with caplog.at_level(logging.DEBUG):
        with LocalServer(lambda r: Reply(status=400, body={"error": {"message": "bad"}})) as server:
            client = OpenAIClient(f"{server.url}/v1?key={secret}", "m")
            with pytest.raises(LLMError) as info:
                client(FORMATTED)
    assert server.requests[0].query["key"][0].startswith(secret), "the key was sent"
    assert any("urllib3" in r.name for r in caplog.records)
    for text in (str(info.value), repr(client), caplog.text, str(info.value.url)):
        assert secret not in text


def test_which_headers_are_credentials():
    """Credential headers are found by name or by the look of their value; ordinary headers are not."""
    assert is_credential_header("api-key", "x") and is_credential_header("Proxy-Authorization", "Basic dXNlcjpwYXNz")
    assert is_credential_header("X-Custom", "Bearer abc") and is_credential_header("X-Custom", "a1B2c3D4e5F6g7H8i9J0k")
    assert not is_credential_header("X-Title", "My App") and not is_credential_header("HTTP-Referer", "https://example.com/app")
    assert not is_credential_header("anthropic-version", "2023-06-01") and not is_credential_header("Content-Type", "application/json")
    assert not is_credential_header("User-Agent", "python-requests/2.34.2-build1")


def test_short_values_are_hidden_in_reprs_but_not_searched_in_text():
    """A credential shorter than 6 characters (MIN_SECRET_CHARS) is masked in header reprs but not replaced inside ordinary text."""
    secrets = Secrets(None, {"api-key": "abc"})
    assert secrets.masked_headers({"api-key": "abc"}) == {"api-key": "***"}
    assert secrets.redact("abcdef") == "abcdef"
    assert Secrets("sk-0123456789").redact("key sk-0123456789!") == "key ***!"


def test_bearer_token_is_masked_without_its_scheme_too():
    """A server that echoes only the token of "Bearer <token>" cannot leak it: the token alone is masked as well."""
    secrets = Secrets(None, {"Authorization": f"Bearer {TOKEN}"})
    assert secrets.redact(f"invalid token {TOKEN}.") == "invalid token ***."
    assert secrets.redact(f"Authorization: Bearer {TOKEN}") == "Authorization: ***"


def test_a_text_already_masked_is_not_masked_again_by_a_form_of_the_credential_itself():
    """"Bearer ***" (a token masked, its scheme left) is no credential: the masked forms of a value never mask one of its own parts."""
    secrets = Secrets(None, {"Authorization": f"Bearer {TOKEN}"})
    assert secrets.redact("the header reads Authorization: Bearer ***") == "the header reads Authorization: Bearer ***"


def test_a_short_credential_inside_a_longer_one_makes_no_masked_form_of_it():
    """A credential shorter than MIN_SECRET_CHARS is never masked in text, so no text can read the longer one with it masked."""
    secrets = Secrets("xyzabc123456", {"api-key": "abc"})
    assert secrets.redact("xyz***123456 and xyzabc123456") == "xyz***123456 and ***"


def test_a_long_credential_split_after_a_false_start_is_held_from_its_real_start():
    """The end held back starts at the earliest place that begins the credential, not at the last one (a credential over 256 characters)."""
    key = "aXaY" + "z" * 296  # held_suffix looks for ends of credentials this long by hand
    shown: list[str] = []
    masker = DeltaMasker(Secrets(key), lambda kind, text: shown.append(text))
    masker.emit("text", "hello ab" + key[:3])  # "ab" begins with the key's first letter, "aXa" begins the key, so does the last "a"
    masker.emit("text", key[3:] + " bye")
    masker.flush()
    assert "".join(shown) == "hello ab*** bye"


def test_an_exception_chain_is_masked_in_every_exception_it_holds_and_its_args_keep_their_kind():
    """scrub_exception masks the args of the error, of the exceptions among its args, and of its cause and context.

    An exception among the args stays that exception (masked in place); a string arg becomes
    the masked string, any other arg its masked repr; a chain that loops ends.
    """
    secrets = Secrets(AZURE_KEY)
    inner = ConnectionError(f"https://h.example/v1?key={AZURE_KEY} refused")
    cause = ValueError("no key here")
    outer = RuntimeError(f"call with {AZURE_KEY} failed", inner, 42, {"key": AZURE_KEY})
    outer.__cause__ = outer.__context__ = cause  # raise ... from cause, inside except cause: one exception seen twice
    secrets.scrub_exception(outer)
    assert outer.args == ("call with *** failed", inner, "42", "{'key': '***'}")
    assert inner.args == ("https://h.example/v1?key=*** refused",) and cause.args == ("no key here",)

    first, second = KeyError(f"first {AZURE_KEY}"), KeyError(f"second {AZURE_KEY}")
    first.__context__, second.__context__ = second, first  # a loop: nothing blocks for ever
    secrets.scrub_exception(first)
    assert first.args == ("first ***",) and second.args == ("second ***",)


CHAINED_FACTORY = """
import logging
previous = logging.getLogRecordFactory()
def tagged(*args, **kwargs):
    record = previous(*args, **kwargs)
    record.tag = "kept"
    return record
logging.setLogRecordFactory(tagged)
from yiemagent.events import stream_to
from yiemagent.extraction import extract_tool_calls
from yiemagent._log_masking import install_log_filter
from yiemagent._secrets import Secrets
secrets = Secrets("sk-chained-0123456789")
install_log_filter(secrets)
seen = []
class Keep(logging.Handler):
    def emit(self, record):
        seen.append((record.name, record.getMessage(), record.tag))
logging.root.addHandler(Keep())
for name in ("urllib3.made.later", "httpcore.http11", "someone.else"):
    logging.getLogger(name).warning("key %s", "sk-chained-0123456789")
print(seen)
"""


def test_the_log_masking_keeps_the_record_factory_it_replaced_and_masks_only_its_loggers():
    """The one masking filter is a record factory calling the one before it; it masks records of its loggers, made
    at any time, and leaves other loggers' records alone."""
    out = subprocess.run([sys.executable, "-c", CHAINED_FACTORY], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == str(
        [
            ("urllib3.made.later", "key ***", "kept"),
            ("httpcore.http11", "key ***", "kept"),
            ("someone.else", "key sk-chained-0123456789", "kept"),
        ]
    )


def test_a_record_whose_arguments_do_not_fit_its_format_is_masked_too(caplog):
    """A log call with too few arguments for its format cannot be formatted; the handler would print the args raw, so
    the masking writes them out itself, masked."""
    secrets = Secrets("sk-misfit-0123456789")
    install_log_filter(secrets)
    try:
        with caplog.at_level(logging.WARNING, logger="urllib3"):
            logging.getLogger("urllib3.misfit").warning("key %s and %s", "sk-misfit-0123456789")
    finally:
        remove_log_filter(secrets)
    assert caplog.records[0].getMessage() == "key %s and %s (log arguments: ('***',))"


def test_the_record_factory_is_wrapped_once_however_many_clients_are_made():
    """A program that makes a client per request (a web server) installs the masking once: later clients add their
    secrets to it and do not wrap the log record factory again (each layer would run on every record the process
    logs, a thousand clients a thousand nested calls), and their secrets are masked all the same."""
    first = Secrets("sk-first-client-0123456789")
    later = [Secrets(f"sk-per-request-{n:010d}") for n in range(3)]
    install_log_filter(first)
    factory = logging.getLogRecordFactory()
    try:
        for secrets in later:
            install_log_filter(secrets)
        made_later = logging.getLogRecordFactory()
        record = factory("urllib3.connectionpool", logging.DEBUG, __file__, 1, "GET /v1?key=%s", ("sk-per-request-0000000002",), None)
    finally:
        for secrets in (first, *later):
            remove_log_filter(secrets)
    assert made_later is factory and record.getMessage() == "GET /v1?key=***"


def test_the_record_factory_takes_keyword_arguments_as_the_one_it_replaced():
    """A library that makes its records by calling the record factory with keywords (LogRecord's parameter names)
    gets the record it asked for, masked."""
    secrets = Secrets("sk-keywords-0123456789")
    install_log_filter(secrets)
    try:
        record = logging.getLogRecordFactory()(
            name="urllib3.kw", level=logging.WARNING, pathname=__file__, lineno=7, msg="key %s", args=("sk-keywords-0123456789",), exc_info=None, func="caller", sinfo=None
        )
    finally:
        remove_log_filter(secrets)
    assert (record.getMessage(), record.funcName, record.lineno) == ("key ***", "caller", 7)


# secrets and JSON texts built of the same few characters, so that they meet often: a key
# whole, split, escaped ("\/", "\u0073", a quote or a newline written "\"", "\n"), next to
# a mask, or holding "*" itself
_secret_chars = st.sampled_from('sk-/*ab"\n')
def _json_texts(secret: str):
    """JSON texts whose strings hold ``secret`` (whole, or cut) among the same characters, written
    plainly or with their "/" or "s" escaped."""
    piece = st.text(_secret_chars, max_size=6)
    leaf = st.one_of(piece, st.builds(lambda a, b: a + secret + b, piece, piece), st.builds(lambda a, n: a + secret[:n], piece, st.integers(1, len(secret))))
    values = st.recursive(leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(leaf, inner, max_size=3), max_leaves=6)
    return values.flatmap(
        lambda value: st.sampled_from([
            json.dumps(value),
            json.dumps(value).replace("/", "\\/"),
            json.dumps(value).replace("s", "\\u0073"),
            json.dumps(value, ensure_ascii=False, separators=(",", ":")),
        ])
    )


@given(st.data(), st.text(_secret_chars, min_size=6, max_size=10))
def test_loads_masks_as_a_walk_of_every_parsed_string_would(data, secret):
    """Secrets.loads skips the walk of the parsed value when no escape in the masked text can
    make a credential's character: what it returns is always what masking the text, parsing it
    and walking the result gives."""
    text = data.draw(_json_texts(secret))
    secrets = Secrets(api_key=secret)

    def outcome(read):
        try:
            return read()
        except ValueError as exc:  # masking may cut an escape in two: both ways refuse the text alike
            return type(exc)

    assert outcome(lambda: secrets.loads(text, json.loads)) == outcome(lambda: secrets.redact_json(json.loads(secrets.redact(text))))


@given(st.text(st.sampled_from("*a"), min_size=6, max_size=9), st.text(st.sampled_from("*ab"), max_size=30))
def test_no_credential_is_left_in_masked_text_even_one_a_mask_could_rebuild(secret, text):
    """redact leaves no credential, also one holding "*" that the masks around it could make whole
    again ("*****a" in "*******aa" masked once is "*****a")."""
    assert secret not in Secrets(api_key=secret).redact(text)
    assert Secrets(api_key="*****a").redact("*******aa") == "***"


def longest_held_end(text: str, values) -> int:
    """held_suffix by its definition: the longest end of text that is a proper prefix of a value."""
    return max((k for v in values for k in range(1, min(len(v), len(text) + 1)) if text.endswith(v[:k])), default=0)


@given(st.lists(st.text(st.sampled_from("ab*."), min_size=6, max_size=12), min_size=1, max_size=3), st.text(st.sampled_from("ab*.x"), max_size=20), st.booleans())
def test_held_suffix_is_the_longest_end_that_begins_a_credential(keys, text, long):
    """The regex of held_suffix (credentials up to 256 characters) and the search by hand (longer
    ones: a long key is the short one repeated) both find the longest end that begins a credential."""
    keys = [k * 30 if long else k for k in keys]
    secrets = Secrets(values={str(i): k for i, k in enumerate(keys)})
    assert secrets.held_suffix(text) == longest_held_end(text, secrets._values)


ESCAPED_KEY = "sk-live-0123456789abcdef"


@pytest.mark.parametrize("stream", [False, True])
def test_key_escaped_inside_tool_arguments_text_is_masked(stream):
    """A key the model wrote with a JSON escape inside a call's arguments text ("sk-\\u006cive-...",
    plain only once extraction parses the arguments) is masked in the reply, whole or streamed in pieces."""
    arguments = '{"q": "sk-\\u006cive-0123456789abcdef"}'
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": arguments}}
    if stream:
        pieces = [arguments[:10], arguments[10:14], arguments[14:]]  # the escape itself split in two
        events = [{"model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "t", "arguments": p}}]}, "finish_reason": None}]} for p in pieces]
        events.append({"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
        body = ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()
        reply = Reply(chunks=[body], headers={"Content-Type": "text/event-stream"})
    else:
        reply = Reply(body={"model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [call]}, "finish_reason": "tool_calls"}]})
    with LocalServer(lambda r: reply) as server:
        message = OpenAIClient(f"{server.url}/v1", "m", api_key=ESCAPED_KEY, stream=stream)(FORMATTED)
    _, calls, _ = extract_tool_calls(message)
    assert len(calls) == 1 and ESCAPED_KEY not in repr(calls) and ESCAPED_KEY not in repr(message)
    assert calls[0].arguments == {"q": "***"}


@pytest.mark.parametrize(
    "userinfo, hidden",
    [("user:pa55word-xyz", ("pa55word-xyz",)), ("user:pa%40ss-word9", ("pa%40ss-word9", "pa@ss-word9")), (":pa55word-xyz", ("pa55word-xyz",))],
    ids=["plain", "escaped", "no user"],
)
def test_credentials_in_the_url_are_masked_in_the_basic_header_a_server_echoes(userinfo, hidden):
    """requests sends a URL's user and password as a Basic Authorization header: a gateway that
    echoes the headers it got showed its base64 (the password itself, readable) in the LLMError.
    A URL with a password and no user (``http://:password@host``) sends one too, of ``:password``."""
    from urllib.parse import unquote

    user, _, password = userinfo.partition(":")
    basic = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode("latin1")).decode()
    with LocalServer(echo_all) as server:
        client = OpenAIClient(server.url.replace("http://", f"http://{userinfo}@") + "/v1", "m", max_retries=0)
        with pytest.raises(LLMError) as info:
            client(FORMATTED)
    assert server.requests[0].headers["Authorization"] == f"Basic {basic}"
    for secret in (basic, *hidden):
        assert secret not in str(info.value) and secret not in repr(client)


@pytest.mark.parametrize(
    "key, header",
    [
        ("tenant-0042", {"X-Api-Secret": "tenant-0042-9f8e7d6c5b4a"}),
        ("t-0042", {"X-Api-Secret": "t-0042-9f8e7d6c5b4a"}),  # a key of MIN_SECRET_CHARS, the shortest searched for
        ("tenant-0042", {"X-Upstream-Authorization": "Token tenant-0042-9f8e7d6c5b4a"}),  # the token echoed without its scheme
    ],
    ids=["header", "six-character key", "scheme token"],
)
def test_a_credential_holding_another_is_masked_when_a_stream_splits_it_after_the_other(key, header):
    """An api key inside a longer credential header ("tenant-0042" in "tenant-0042-9f8e…"): a stream
    whose event ends just after the key masked it there, and the rest of the longer one showed in the
    deltas and in the reply ("***-9f8e7d6c5b4a"). So it did for the token of a "<scheme> <token>" header,
    which a server may echo without its scheme."""
    events = [{"model": "m", "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in (f"id: {key}", "-9f8e7d6c5b4a done")]
    events.append({"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    body = ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()
    deltas: list = []
    with LocalServer(lambda r: Reply(chunks=[body], headers={"Content-Type": "text/event-stream"})) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", api_key=key, headers=header, stream=True)
        with stream_to(lambda kind, text: deltas.append(text)):
            message = client(FORMATTED)
    assert "".join(deltas) == message.content[0].text == "id: *** done"


@pytest.mark.parametrize("content_type", ["text/plain", "application/json"])
def test_a_key_an_error_page_shows_escaped_is_masked_in_the_llm_error(content_type):
    """An error body that writes the key with JSON escapes ("sk-\\u006cive-..."), as text or inside
    JSON, does not carry it into the LLMError in that form (anyone could decode it)."""
    escaped = ESCAPED_KEY.replace("l", "\\u006c", 1)
    body = f"denied for {escaped}" if content_type == "text/plain" else json.dumps({"error": {"message": f"denied for {escaped}"}}).replace("\\\\", "\\")
    with LocalServer(lambda r: Reply(status=403, body=body.encode(), headers={"Content-Type": content_type})) as server:
        with pytest.raises(LLMError) as info:
            OpenAIClient(f"{server.url}/v1", "m", api_key=ESCAPED_KEY, max_retries=0)(FORMATTED)
    assert escaped not in str(info.value) and ESCAPED_KEY not in str(info.value) and "403" in str(info.value)


@pytest.mark.parametrize(
    "secret, text",
    [
        ("ab/sk-42", json.dumps(["x ab/sk-42 y"]).replace("/", "\\/")),  # PHP writes "/" as "\/"
        ("sk-abc-42", json.dumps({"k": "x sk-abc-42"}).replace("s", "\\u0073")),
        ('pa"ss-42', json.dumps(['x pa"ss-42'])),  # a quote, written \"
        ("pa\nss-42", json.dumps(["x pa\nss-42"])),  # a newline, written \n
    ],
)
def test_an_escape_that_makes_a_credentials_character_makes_loads_walk_the_value(secret, text):
    """Each escape that can make a character of the credential (\\/ and \\u for any credential, the
    short ones for a credential holding a quote or a control character) is masked in the parsed value."""
    assert secret not in repr(Secrets(api_key=secret).loads(text, json.loads))


def _escaped_body(data, value: str) -> str:
    """``value`` as the body of a JSON string, each character written as json.dumps writes it or
    (drawn) as a \\u escape in either case, a "/" also as "\\/"."""
    pieces = []
    for char in value:
        plain = json.dumps(char)[1:-1]
        forms = [plain]
        if len(char) == 1 and ord(char) < 0x10000:
            forms += [f"\\u{ord(char):04x}", f"\\u{ord(char):04X}"]
        if char == "/":
            forms.append("\\/")
        pieces.append(data.draw(st.sampled_from(forms)))
    return "".join(pieces)


@given(st.data(), st.text(st.sampled_from('ab X/"\\\n\x01\x1f\u00e9\u2014\ud800\U00010000\U0001f3ff'), max_size=12))
def test_json_unescaped_keeps_the_value_and_leaves_no_plain_character_escaped(data, value):
    """_json_unescaped (redact_escaped's reading of escapes) writes \\/ and each \\u escape of a plain
    character plainly and keeps the rest escaped: the text is JSON of the same value, and a
    credential written with escapes reads plainly in it."""
    from yiemagent._secrets import _json_unescaped

    body = _escaped_body(data, value)
    out = _json_unescaped(body)
    assert json.loads(f'"{out}"') == value
    assert "\\/" not in out.replace("\\\\", "")
    for escape in re.findall(r"\\u([0-9a-fA-F]{4})", out.replace("\\\\", "")):
        char = chr(int(escape, 16))
        assert char in '"\\' or char < " " or "\ud800" <= char <= "\udfff"


def test_every_credential_of_a_url_is_masked_and_nothing_else_of_it():
    """A URL's password, the Basic header requests makes of it, and each credential-named query value
    (wherever it stands in the query, a base64 value's "=" padding included) are masked; the query's
    other values (a model name) are not credentials and show."""
    key, token = "AIzaSyD-0123456789abcdef", "dG9rZW4tc2VjcmV0LXZhbHVl=="
    url = f"https://bob:pa55word-xyz@llm.example/v1?alt=sse&model=gpt-4o-mini&key={key}&access_token={token}"
    secrets = Secrets(url=url)
    basic = base64.b64encode(b"bob:pa55word-xyz").decode()
    text = f"GET {url}: key {key}, token {token}, password pa55word-xyz, Authorization: Basic {basic}, model gpt-4o-mini"
    assert secrets.redact(text) == (
        "GET https://bob:***@llm.example/v1?alt=sse&model=gpt-4o-mini&key=***&access_token=***: "
        "key ***, token ***, password ***, Authorization: ***, model gpt-4o-mini"
    )


@pytest.mark.spec("14")
def test_a_proxy_with_credentials_leaves_the_key_masked_too(monkeypatch):
    """A client whose requests go through a proxy with a password masks that password and still its own
    key: a proxy that answers 407 echoing every header it got shows neither in the LLMError."""
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    key = "sk-behind-proxy-0123456789"
    echo = lambda request: Reply(status=407, body={"error": {"message": f"proxy refused {sorted(request.headers.items())}"}})
    with LocalServer(echo) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url.replace("http://", "http://bob:pr0xy-pa55word@"))
        with pytest.raises(LLMError) as info:
            OpenAIClient("http://llm.invalid/v1", "m", api_key=key, max_retries=0)(FORMATTED)
    received = proxy.requests[0].headers
    assert received["Authorization"] == f"Bearer {key}" and received["Proxy-Authorization"].startswith("Basic ")
    assert "407" in str(info.value) and "Proxy-Authorization" in str(info.value)
    for secret in (key, "pr0xy-pa55word", received["Proxy-Authorization"].split()[1]):
        assert secret not in str(info.value)


def test_a_key_held_back_in_one_kind_of_delta_waits_while_another_kind_streams():
    """Thinking and text deltas are held back apart: a key begun in the thinking waits there while text
    streams, is masked once the thinking goes on, and what is held at the end of the stream (an end
    that began no key after all) is shown, of its own kind, by flush."""
    shown: list = []
    masker = DeltaMasker(Secrets("sk-live-0123456789"), lambda kind, text: shown.append((kind, text)))
    masker.emit("thinking", "the key is sk-live-01")
    masker.emit("text", "Hello")
    masker.emit("thinking", "23456789, fine")
    masker.emit("text", " sk-li")
    masker.flush()
    assert shown == [("thinking", "the key is "), ("text", "Hello"), ("thinking", "***, fine"), ("text", " "), ("text", "sk-li")]


def _long_key(length: int) -> str:
    """A key of ``length`` characters with no repeats that begin it again (a JWT-like token)."""
    digits = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(length // 64 + 1))
    return ("tok-" + digits)[:length]


@pytest.mark.parametrize("length", [255, 256, 257, 1000])
@pytest.mark.parametrize("before", [5, 1200], ids=["short text", "long text"])
@pytest.mark.parametrize("cut", ["middle", "last character"])
def test_a_long_key_split_across_two_deltas_is_masked_whatever_its_length(length, before, cut):
    """A token of any length (hundreds of characters: a JWT) split across two deltas is held back and
    masked whole, after a short text or after one longer than the token, cut anywhere in it."""
    key = _long_key(length)
    at = length // 2 if cut == "middle" else length - 1
    shown: list = []
    masker = DeltaMasker(Secrets(key), lambda kind, text: shown.append(text))
    masker.emit("text", "x" * before + key[:at])
    masker.emit("text", key[at:] + " done")
    masker.flush()
    assert "".join(shown) == "x" * before + "*** done"


@pytest.mark.parametrize(
    "secret, escaped",
    [
        ("sk-Xy-0123456789", "sk-\\u0058y-0123456789"),  # an upper-case letter
        ("let me in 2day", "let\\u0020me\\u0020in\\u00202day"),  # a pass phrase, its words too short to be searched alone
    ],
)
def test_a_credential_written_with_u_escapes_of_plain_characters_is_masked(secret, escaped):
    """An error page that writes a credential with \\u escapes of any plain character (a letter, a space)
    shows it readably to anyone who decodes them: it is masked as the plain credential is."""
    assert Secrets(values={"SECRET": secret}).redact_escaped(f'denied: "{escaped}"') == 'denied: "***"'


def test_characters_outside_the_bmp_keep_their_value_next_to_an_escaped_key():
    """Arguments text holding an escaped key and characters written as surrogate-pair escapes
    ("\\ud83c\\udfff", as json.dumps writes them) is unescaped to mask the key; the pairs stay
    escaped, so the arguments parse to the same characters, not to lone surrogates."""
    arguments = '{"q": "\\ud800\\udc00 \\ud83c\\udfff sk-\\u006cive-0123456789abcdef"}'
    masked = Secrets(api_key=ESCAPED_KEY).redact_escaped(arguments)
    assert json.loads(masked) == {"q": "\U00010000 \U0001f3ff ***"}


# a key and a longer credential holding it, whose ends ("x..." and "...y") overlap neither the key nor
# each other: where two credentials overlap in a text, which one a mask takes depends on where the
# text was cut, whole or streamed
_NESTED_KEY = st.text(st.sampled_from("ab-"), min_size=6, max_size=9)


@given(st.data(), _NESTED_KEY, st.integers(2, 3), st.integers(2, 3), st.booleans())
def test_a_delta_maskers_pieces_of_each_kind_join_to_the_masked_text(data, key, head, tail, bearer):
    """Property (DeltaMasker's promise): whatever the cuts and however thinking and text interleave,
    the pieces of each kind join to redact() of that kind's text; also for a key inside a longer
    credential, sent whole or as the token of "Bearer <token>"."""
    token = "x" * head + key + "y" * tail
    secrets = Secrets(key, {"X-Upstream-Authorization": f"Bearer {token}"} if bearer else {"X-Api-Secret": token})
    text = "".join(data.draw(st.lists(st.sampled_from([key, token, f"Bearer {token}", " ", "x", "ab"]), max_size=6)))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=4)))
    pieces = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)])]
    kinds = data.draw(st.lists(st.sampled_from(["text", "thinking"]), min_size=len(pieces), max_size=len(pieces)))
    shown: list = []
    masker = DeltaMasker(secrets, lambda kind, piece: shown.append((kind, piece)))
    for kind, piece in zip(kinds, pieces):
        masker.emit(kind, piece)
    masker.flush()
    for kind in ("text", "thinking"):
        joined = "".join(piece for k, piece in zip(kinds, pieces) if k == kind)
        assert "".join(piece for k, piece in shown if k == kind) == secrets.redact(joined)
