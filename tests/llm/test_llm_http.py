"""The HTTP clients against a real local server: retries, Retry-After, the cap, failures, secrets, the agent over HTTP."""

from __future__ import annotations

import email.utils
import gzip
import json
import logging
import os
import re
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import jsonschema
import pytest

from helpers import FIXTURES, WAIT, EventRecorder, make_tool, text_result
from localserver import LocalServer, Reply, free_port_url
from yiemagent import AbortSignal, LLMError, ToolStore, YiemAgent, register_tool, run_agent, take_response
from yiemagent._threads import call_at
from yiemagent.events import stream_to
from yiemagent.llm import AnthropicClient, OpenAIClient

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}
OK = {"choices": [{"message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}], "model": "m"}


def sequence(*replies: Reply):
    """A server script: each request gets the next reply; the last one repeats."""
    queue = list(replies)
    return lambda request: queue.pop(0) if len(queue) > 1 else queue[0]


def client_for(server, **kwargs):
    kwargs.setdefault("backoff_factor", 0.001)
    return OpenAIClient(f"{server.url}/v1", "m", **kwargs)


@pytest.mark.spec("14")
@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529])
def test_retryable_statuses_are_retried(status):
    """408/409/429/500/502/503/504/529 are retried; the next success is returned."""
    with LocalServer(sequence(Reply(status=status, body={"error": {"message": "busy"}}), Reply(body=OK))) as server:
        assert client_for(server)(FORMATTED).content[0].text == "fine"
    assert len(server.requests) == 2


@pytest.mark.spec("14")
@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_other_4xx_fail_at_once(status):
    """A client error other than 408/409/429 is not retried."""
    with LocalServer(sequence(Reply(status=status, body={"error": {"message": "nope", "code": "bad"}}), Reply(body=OK))) as server:
        with pytest.raises(LLMError) as info:
            client_for(server)(FORMATTED)
    assert len(server.requests) == 1 and info.value.status == status and not info.value.retryable
    assert "nope" in str(info.value)


@pytest.mark.spec("14")
def test_insufficient_quota_is_not_retried():
    """A 429 whose code is insufficient_quota fails at once (retrying cannot help)."""
    body = json.loads((FIXTURES / "openai-error-insufficient-quota.json").read_text()) if FIXTURES.is_dir() else {"error": {"code": "insufficient_quota", "message": "quota"}}
    with LocalServer(sequence(Reply(status=429, body=body), Reply(body=OK))) as server:
        with pytest.raises(LLMError) as info:
            client_for(server)(FORMATTED)
    assert len(server.requests) == 1 and info.value.status == 429 and info.value.retryable is False


@pytest.mark.spec("14")
def test_retries_are_bounded_and_the_error_says_so():
    """An endless 503 gives max_retries + 1 attempts, then an LLMError saying how many."""
    with LocalServer(lambda r: Reply(status=503, body={"error": {"message": "overloaded"}})) as server:
        with pytest.raises(LLMError, match="gave up after 3 attempts") as info:
            client_for(server, max_retries=2)(FORMATTED)
    assert len(server.requests) == 3 and info.value.status == 503 and info.value.retryable


@pytest.mark.spec("14")
@pytest.mark.parametrize(
    "headers, waited_ms",
    [({"Retry-After": "1"}, 1000), ({"retry-after-ms": "300"}, 300)],
)
def test_retry_after_is_honoured_on_429(headers, waited_ms):
    """Retry-After (seconds) and retry-after-ms set the wait before the retry."""
    with LocalServer(sequence(Reply(status=429, headers=headers, body={"error": {"message": "slow down"}}), Reply(body=OK))) as server:
        started = time.monotonic()
        client_for(server)(FORMATTED)
        elapsed_ms = (time.monotonic() - started) * 1000
    assert len(server.requests) == 2
    assert elapsed_ms >= waited_ms * 0.9


@pytest.mark.spec("14")
@pytest.mark.parametrize(
    "headers, asked_ms",
    [
        ({"Retry-After": "120"}, 120000),
        ({"retry-after-ms": "90000"}, 90000),
        ({"Retry-After": "HTTP date 300 s from now"}, 300000),
    ],
)
def test_asking_to_wait_longer_than_the_cap_fails_at_once(headers, asked_ms):
    """Retry-After (seconds or HTTP date) or retry-after-ms beyond max_retry_delay_ms: an LLMError stating the delay, no wait."""
    if headers.get("Retry-After", "").startswith("HTTP date"):
        headers = {"Retry-After": email.utils.formatdate(time.time() + 300, usegmt=True)}
    with LocalServer(sequence(Reply(status=429, headers=headers, body={"error": {"message": "rate limited"}}), Reply(body=OK))) as server:
        started = time.monotonic()
        with pytest.raises(LLMError) as info:
            client_for(server, max_retry_delay_ms=1000)(FORMATTED)
        assert time.monotonic() - started < 5
    assert len(server.requests) == 1 and info.value.status == 429
    assert info.value.retryable is True and info.value.url == f"{server.url}/v1/chat/completions"
    assert info.value.retry_after_ms == pytest.approx(asked_ms, rel=0.02)
    assert "asked to wait" in str(info.value) and "max_retry_delay_ms=1000" in str(info.value) and "rate limited" in str(info.value)


@pytest.mark.spec("14")
@pytest.mark.parametrize("status", [429, 503, 529])
@pytest.mark.parametrize("headers", [{"Retry-After": "120"}, {"retry-after-ms": "120000"}], ids=["seconds", "ms"])
def test_retry_after_is_read_on_429_503_and_529(status, headers):
    """Anthropic's 529 (overloaded) and a 503 ask for a wait as a 429 does: a wait beyond the cap fails at once, stating it."""
    with LocalServer(sequence(Reply(status=status, headers=headers, body={"error": {"message": "overloaded"}}), Reply(body=OK))) as server:
        with pytest.raises(LLMError, match="asked to wait 120000 ms") as info:
            client_for(server, max_retry_delay_ms=1000)(FORMATTED)
    assert len(server.requests) == 1 and info.value.status == status and info.value.retry_after_ms == 120000


@pytest.mark.spec("14")
def test_retry_after_on_a_500_is_not_honoured():
    """Retry-After is honoured on 429/503/529 only: a 500 asking for 120 s is retried with backoff instead."""
    with LocalServer(sequence(Reply(status=500, headers={"Retry-After": "120"}, body={}), Reply(body=OK))) as server:
        client_for(server, max_retry_delay_ms=1000)(FORMATTED)
    assert len(server.requests) == 2


@pytest.mark.spec("14")
def test_agent_max_retry_delay_ms_overrides_the_client_cap():
    """YiemAgent(max_retry_delay_ms=N) caps the client: a 429 asking for 5 s now fails at once."""
    with LocalServer(lambda r: Reply(status=429, headers={"Retry-After": "5"}, body={"error": {"message": "wait"}})) as server:
        client = client_for(server)
        assert client.max_retry_delay_ms == 60000
        with YiemAgent(llm_call=client, agent_event_sink=None, max_retry_delay_ms=100) as agent:
            run_agent(agent, "hi")
            response = take_response(agent, timeout=WAIT)
    assert client.max_retry_delay_ms == 100
    assert response.stop_reason == "error" and "asked to wait 5000 ms" in response.error_message


@pytest.mark.spec("14")
def test_refused_connection_names_the_url():
    """Nobody listening: a clear LLMError naming the URL (in its text and as ``.url``), after the retries."""
    url = free_port_url()
    with pytest.raises(LLMError) as info:
        OpenAIClient(f"{url}/v1", "m", max_retries=1, backoff_factor=0.001)(FORMATTED)
    assert f"{url}/v1/chat/completions" in str(info.value) and "could not connect" in str(info.value)
    assert info.value.status is None and info.value.retryable and info.value.url == f"{url}/v1/chat/completions"


@pytest.mark.spec("14")
def test_timeout_is_retried_and_names_the_url():
    """A server slower than the timeout: retried, then an LLMError naming the URL and the timeout."""
    with LocalServer(lambda r: Reply(body=OK, delay_s=0.5)) as server:
        with pytest.raises(LLMError) as info:
            client_for(server, timeout=0.1, max_retries=1)(FORMATTED)
        assert len(server.requests) == 2
    assert "timed out after 0.1 s" in str(info.value) and f"{server.url}/v1/chat/completions" in str(info.value)


@pytest.mark.spec("14")
def test_non_json_body_is_a_clear_error():
    """A 200 whose body is not JSON (a proxy page) is an LLMError naming the URL."""
    with LocalServer(lambda r: Reply(body="<html>gateway</html>")) as server:
        with pytest.raises(LLMError, match="not JSON") as info:
            client_for(server)(FORMATTED)
    assert server.url in str(info.value)


@pytest.mark.spec("14")
def test_api_key_never_appears_in_repr_error_or_log(caplog):
    """The key is sent as a header, and is masked in repr, errors (even when the server echoes it), logs and events."""
    secret = "sk-test-SECRET-0123456789"
    echo = lambda r: Reply(status=401, body={"error": {"message": f"Incorrect API key provided: {secret}"}})  # noqa: E731
    with caplog.at_level(logging.DEBUG):
        with LocalServer(echo) as server:
            client = OpenAIClient(f"{server.url}/v1", "m", secret)
            with pytest.raises(LLMError) as info:
                client(FORMATTED)
            anthropic = AnthropicClient("m", secret, base_url=server.url)
            with pytest.raises(LLMError) as anthropic_info:
                anthropic(FORMATTED)
            recorder = EventRecorder()
            with YiemAgent(llm_call=client, agent_event_sink=recorder) as agent:
                run_agent(agent, "hi")
                response = take_response(agent, timeout=WAIT)
    assert server.requests[0].headers["Authorization"] == f"Bearer {secret}"
    assert server.requests[1].headers["x-api-key"] == secret and server.requests[1].headers["anthropic-version"] == "2023-06-01"
    for text in (repr(client), repr(anthropic), str(info.value), str(anthropic_info.value), caplog.text, repr(recorder.events), repr(response)):
        assert secret not in text
    assert "***" in str(info.value) and "***" in response.error_message


@pytest.mark.spec("14")
def test_request_options_pass_through_over_client_defaults():
    """Keys beyond messages/tools go to the server; the formatted dict wins over the client's defaults."""
    with LocalServer(lambda r: Reply(body=OK)) as server:
        client = client_for(server, options={"temperature": 0.2, "max_tokens": 50})
        client({**FORMATTED, "tool_choice": "none", "max_tokens": 10})
    body = server.requests[0].json()
    assert (body["temperature"], body["max_tokens"], body["tool_choice"], body["model"]) == (0.2, 10, "none", "m")


@pytest.mark.spec("14")
@pytest.mark.spec("16")
def test_agent_runs_spec_16_over_http():
    """§16 end to end with OpenAIClient: the second request carries the tool result bound to its call id."""
    call = {"id": "call_1", "type": "function", "function": {"name": "getWeather", "arguments": '{"city": "Tokyo"}'}}
    replies = sequence(
        Reply(body={"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}, "finish_reason": "tool_calls"}], "model": "m"}),
        Reply(body={"choices": [{"message": {"role": "assistant", "content": "The weather in Tokyo is sunny, 22°C."}, "finish_reason": "stop"}], "model": "m"}),
    )
    store = ToolStore("http")
    register_tool(store, make_tool("getWeather", lambda *a: text_result("Weather in Tokyo: Sunny, 22°C")))
    recorder = EventRecorder()
    with LocalServer(replies) as server:
        with YiemAgent(llm_call=client_for(server), agent_event_sink=recorder, tool_store=store, builtin_tools=True) as agent:
            run_agent(agent, "What's the weather in Tokyo?")
            response = take_response(agent, timeout=WAIT)
    assert response.content[0].text == "The weather in Tokyo is sunny, 22°C."
    assert [m.role for m in agent.history()] == ["user", "assistant", "tool", "assistant"]
    second = server.requests[1].json()
    assert second["messages"][2]["tool_calls"][0]["id"] == "call_1" and second["messages"][2]["content"] == ""
    assert second["messages"][3] == {"role": "tool", "tool_call_id": "call_1", "content": "Weather in Tokyo: Sunny, 22°C"}
    assert {t["function"]["name"] for t in second["tools"]} >= {"getWeather", "listTools"}
    if FIXTURES.is_dir():
        doc = json.loads((FIXTURES / "openai-chat-completions.schema.json").read_text())
        validator = jsonschema.Draft202012Validator({"$ref": "#/$defs/CreateChatCompletionRequest", "$defs": doc["$defs"]})
        for request in server.requests:
            validator.validate(request.json())


@pytest.mark.live
@pytest.mark.skipif(not os.environ.get("YIEMAGENT_LIVE_BASE_URL"), reason="set YIEMAGENT_LIVE_BASE_URL (and _API_KEY, _MODEL) to run")
def test_live_server_round_trip():
    """Against a real server named by YIEMAGENT_LIVE_BASE_URL: a forced getTime call and a final answer."""
    client = OpenAIClient(
        os.environ["YIEMAGENT_LIVE_BASE_URL"], os.environ.get("YIEMAGENT_LIVE_MODEL", "gpt-4o-mini"), os.environ.get("YIEMAGENT_LIVE_API_KEY")
    )
    with YiemAgent(llm_call=client, agent_event_sink=None) as agent:
        run_agent(agent, "What time is it? Use the getTime tool.")
        response = take_response(agent, timeout=120)
    assert response.stop_reason in ("stop", "length") and response.content


PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy")


@pytest.mark.spec("14")
def test_a_proxy_from_the_environment_is_used_and_no_proxy_honoured(monkeypatch):
    """HTTP_PROXY is read from the environment as requests reads it (once per URL, not per request)."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with LocalServer(lambda request: Reply(body=OK)) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        client = OpenAIClient("http://llm.invalid/v1", "m", max_retries=0)
        assert client(FORMATTED).content[0].text == "fine"
        assert client(FORMATTED).content[0].text == "fine"
    assert [(r.path, r.headers["Host"]) for r in proxy.requests] == [("/v1/chat/completions", "llm.invalid")] * 2
    with LocalServer(lambda request: Reply(body=OK)) as server:
        monkeypatch.setenv("HTTP_PROXY", free_port_url())  # nothing listens there
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        assert client_for(server, max_retries=0)(FORMATTED).content[0].text == "fine"
    assert len(server.requests) == 1


@pytest.mark.spec("14")
def test_the_ca_bundle_of_the_environment_is_what_requests_would_verify_with(monkeypatch, tmp_path):
    """REQUESTS_CA_BUNDLE (then CURL_CA_BUNDLE) is the bundle a client verifies with, as in requests."""
    for name in PROXY_VARIABLES + ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    assert OpenAIClient("https://a.invalid/v1", "m")._transport.environment("https://a.invalid/v1/chat/completions")["verify"] is True
    monkeypatch.setenv("CURL_CA_BUNDLE", str(tmp_path / "curl.pem"))
    assert OpenAIClient("https://a.invalid/v1", "m")._transport.environment("https://a.invalid/v1/chat/completions")["verify"] == str(tmp_path / "curl.pem")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "requests.pem"))
    assert OpenAIClient("https://a.invalid/v1", "m")._transport.environment("https://a.invalid/v1/chat/completions")["verify"] == str(tmp_path / "requests.pem")


@pytest.mark.spec("14")
def test_netrc_never_replaces_the_clients_own_authorization(monkeypatch, tmp_path):
    """A ~/.netrc entry for the server's host does not take the place of the API key (requests would
    send the netrc's Basic credentials instead of the Bearer token)."""
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password hunter2\n", encoding="utf-8")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    with LocalServer(lambda request: Reply(body=OK)) as server:
        client_for(server, api_key="sk-test-netrc-0123456789")(FORMATTED)
    assert server.requests[0].headers["Authorization"] == "Bearer sk-test-netrc-0123456789"


@pytest.mark.spec("14")
def test_a_cookie_the_server_sets_goes_back_on_the_next_request():
    """A load balancer's affinity cookie (Set-Cookie) is sent back by the thread's session, as requests does."""
    replies = sequence(Reply(body=OK, headers={"Set-Cookie": "affinity=node-7; Path=/"}), Reply(body=OK))
    with LocalServer(replies) as server:
        client = client_for(server)
        client(FORMATTED)
        client(FORMATTED)
    assert "Cookie" not in server.requests[0].headers
    assert server.requests[1].headers["Cookie"] == "affinity=node-7"


@pytest.mark.spec("14")
def test_a_header_given_as_none_is_left_out_as_requests_leaves_it_out():
    """headers={"User-Agent": None} drops the session's default header, as Session.post did; the
    request prepared by hand refused it ("Header part (None) ... must be of type str")."""
    with LocalServer(lambda request: Reply(body=OK)) as server:
        assert client_for(server, headers={"User-Agent": None, "Accept": None})(FORMATTED).content[0].text == "fine"
    received = server.requests[0].headers
    assert "python-requests" not in received.get("User-Agent", "") and "Accept" not in received


@pytest.mark.spec("14")
def test_a_proxys_credentials_are_masked_in_what_the_proxy_echoes(monkeypatch):
    """HTTP_PROXY=http://user:password@proxy: requests sends Proxy-Authorization: Basic <base64>;
    a proxy that answers 407 echoing it (or the password) does not get it into the LLMError."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    echo = lambda request: Reply(status=407, body={"error": {"message": f"bad proxy credentials {request.headers.get('Proxy-Authorization')} for bob:pr0xy-pa55word"}})
    with LocalServer(echo) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url.replace("http://", "http://bob:pr0xy-pa55word@"))
        client = OpenAIClient("http://llm.invalid/v1", "m", max_retries=0)
        with pytest.raises(LLMError) as info:
            client(FORMATTED)
    sent = proxy.requests[0].headers["Proxy-Authorization"]
    assert sent.startswith("Basic ") and sent not in str(info.value) and sent.split()[1] not in str(info.value)
    assert "pr0xy-pa55word" not in str(info.value) and "407" in str(info.value)


# --- what each failure says, and where it was going -------------------------------------

CHAT = "/v1/chat/completions"


def chain(error: BaseException) -> list[LLMError]:
    """The LLMErrors of an error's ``__cause__`` chain, the error itself first."""
    found = []
    while error is not None:
        if isinstance(error, LLMError):
            found.append(error)
        error = error.__cause__
    return found


@pytest.mark.spec("14")
def test_a_refused_connection_says_why_and_every_error_of_its_chain_names_the_url():
    """The error of the last attempt, and the error of each attempt it was caused by, carry the URL; the text says why."""
    url = free_port_url()
    with pytest.raises(LLMError) as info:
        OpenAIClient(f"{url}/v1", "m", max_retries=1, backoff_factor=0.001)(FORMATTED)
    errors = chain(info.value)
    assert len(errors) == 2 and [e.url for e in errors] == [f"{url}{CHAT}"] * 2
    assert "Connection refused" in str(errors[1])


@pytest.mark.spec("14")
def test_a_timeout_error_and_its_cause_name_the_url():
    """A server slower than ``timeout``: the attempt's error and the final one both carry the URL."""
    with LocalServer(lambda r: Reply(body=OK, delay_s=0.5)) as server:
        with pytest.raises(LLMError) as info:
            client_for(server, timeout=0.1, max_retries=0)(FORMATTED)
    errors = chain(info.value)
    assert len(errors) == 2 and [e.url for e in errors] == [f"{server.url}{CHAT}"] * 2
    assert "timed out after 0.1 s" in str(errors[1])


@pytest.mark.spec("14")
def test_a_body_cut_short_is_named_with_what_broke_it_and_the_url():
    """A 200 whose chunked body stops before its end: an error saying it broke off, with the exception that broke
    it and the URL, in each error of the chain."""
    cut_reply = Reply(chunks=[b'{"choices": [{"message": '], cut=True, headers={"Content-Type": "application/json"})
    with LocalServer(lambda r: cut_reply) as server:
        with pytest.raises(LLMError) as info:
            client_for(server, max_retries=0)(FORMATTED)
    errors = chain(info.value)
    assert len(errors) == 2 and [e.url for e in errors] == [f"{server.url}{CHAT}"] * 2
    broke = errors[1].__cause__
    assert f"broke off (HTTP 200): {type(broke).__name__}: " in str(info.value)
    assert info.value.retryable and errors[1].status == 200


@pytest.mark.spec("14")
def test_a_body_that_is_not_json_is_an_error_naming_its_content_type_and_url():
    """A proxy's page instead of JSON: the error gives the status, the Content-Type, the start of the body, and ``.url``."""
    with LocalServer(lambda r: Reply(body="<html>gateway</html>")) as server:
        with pytest.raises(LLMError) as info:
            client_for(server)(FORMATTED)
    assert "HTTP 200 (text/plain; charset=utf-8) with a body that is not JSON" in str(info.value)
    assert "'<html>gateway</html>'" in str(info.value)
    assert info.value.url == f"{server.url}{CHAT}" and not info.value.retryable and len(server.requests) == 1


@pytest.mark.spec("14")
def test_a_client_error_names_the_url():
    """A 400: not retried, and the error's ``.url`` is where the request went."""
    with LocalServer(lambda r: Reply(status=400, body={"error": {"message": "bad request"}})) as server:
        with pytest.raises(LLMError) as info:
            client_for(server)(FORMATTED)
    assert info.value.url == f"{server.url}{CHAT}" and info.value.status == 400 and "bad request" in str(info.value)


@pytest.mark.spec("14")
def test_a_request_json_cannot_carry_fails_before_anything_is_sent():
    """A NaN option cannot be written as JSON: an LLMError naming the URL and the JSON error, and no request at all."""
    with LocalServer(lambda r: Reply(body=OK)) as server:
        with pytest.raises(LLMError) as info:
            client_for(server, options={"temperature": float("nan")})(FORMATTED)
    assert server.requests == []
    assert info.value.url == f"{server.url}{CHAT}" and not info.value.retryable
    assert f"request to {server.url}{CHAT} cannot be sent as JSON: ValueError: " in str(info.value)


@pytest.mark.spec("14")
def test_a_url_requests_cannot_use_is_an_error_not_retried():
    """A base_url with no host: the request is invalid, asking again cannot help, and the error carries the URL."""
    with pytest.raises(LLMError) as info:
        OpenAIClient("http:///v1", "m", max_retries=3)(FORMATTED)
    assert "is invalid" in str(info.value) and not info.value.retryable
    assert info.value.url == f"http://{CHAT}"


@pytest.mark.spec("14")
def test_a_redirect_is_refused_naming_where_it_leads():
    """A 307 to another host is not followed: the error names the Location, the status and the URL; not retried."""
    elsewhere = "http://elsewhere.invalid/v1/chat/completions"
    with LocalServer(lambda r: Reply(status=307, headers={"Location": elsewhere}, body={})) as server:
        with pytest.raises(LLMError) as info:
            client_for(server)(FORMATTED)
    assert f"a redirect to {elsewhere!r}" in str(info.value)
    assert info.value.status == 307 and info.value.url == f"{server.url}{CHAT}" and not info.value.retryable
    assert len(server.requests) == 1


@pytest.mark.spec("14")
def test_a_300_reply_is_an_error_even_with_a_reply_in_its_body():
    """Only a 2xx is a reply: a 300 Multiple Choices (no Location) is an LLMError with its status, its body unread as a reply."""
    with LocalServer(lambda r: Reply(status=300, body=OK)) as server:
        with pytest.raises(LLMError) as info:
            client_for(server)(FORMATTED)
    assert info.value.status == 300 and not info.value.retryable and len(server.requests) == 1


# --- the request as sent, the body as read ---------------------------------------------


def header(request, name: str) -> str:
    """A request header by name, whatever its case (HTTP header names are case-insensitive)."""
    return {key.lower(): value for key, value in request.headers.items()}.get(name.lower(), "")


@pytest.mark.spec("14")
def test_the_request_is_json_with_requests_default_headers_and_a_gzip_reply_is_read():
    """The body goes as application/json, with requests' own User-Agent and Accept-Encoding (as Session.post sends
    them); a server that takes up the offer of gzip has its reply decompressed."""

    def respond(request):
        if "gzip" not in header(request, "Accept-Encoding"):
            return Reply(body=OK)
        return Reply(body=gzip.compress(json.dumps(OK).encode()), headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})

    with LocalServer(respond) as server:
        assert client_for(server)(FORMATTED).content[0].text == "fine"
    (request,) = server.requests
    assert header(request, "Content-Type").lower() == "application/json" and request.json()["messages"] == FORMATTED["messages"]
    assert header(request, "User-Agent").startswith("python-requests/") and "gzip" in header(request, "Accept-Encoding")


@pytest.mark.spec("14")
def test_a_body_that_is_not_utf8_is_read_with_replacement_characters():
    """A byte that is not UTF-8 in a reply, or in an error body, becomes U+FFFD: the reply is read, the error keeps the server's words."""
    reply = json.dumps(OK).replace("fine", "fine @").encode().replace(b"@", b"\xff")
    error = b'{"error": {"message": "bad \xff byte"}}'
    replies = sequence(Reply(body=reply, headers={"Content-Type": "application/json"}), Reply(status=400, body=error, headers={"Content-Type": "application/json"}))
    with LocalServer(replies) as server:
        client = client_for(server)
        assert client(FORMATTED).content[0].text == "fine \ufffd"
        with pytest.raises(LLMError) as info:
            client(FORMATTED)
    assert "bad \ufffd byte" in str(info.value) and info.value.status == 400


@pytest.mark.spec("14")
def test_an_error_body_cut_short_is_reported_as_empty():
    """A 500 whose body breaks off: the error has the status and says the body was empty, not a part of it."""
    cut_reply = Reply(status=500, chunks=[b'{"error": {"message": "half'], cut=True, headers={"Content-Type": "application/json"})
    with LocalServer(lambda r: cut_reply) as server:
        with pytest.raises(LLMError) as info:
            client_for(server, max_retries=0)(FORMATTED)
    assert info.value.status == 500 and info.value.retryable
    assert f"API error 500 from {server.url}{CHAT}: (empty body) (gave up after 1 attempts)" in str(info.value)


@pytest.mark.spec("14")
def test_an_error_object_in_a_200_reply_is_an_llm_error_retried_by_its_code():
    """A 200 whose body is an error object (OpenRouter) fails as its code says: a 503 is retried, then the reply is read."""
    busy = {"error": {"message": "upstream overloaded", "code": 503}}
    with LocalServer(sequence(Reply(body=busy), Reply(body=OK))) as server:
        assert client_for(server)(FORMATTED).content[0].text == "fine"
    assert len(server.requests) == 2
    with LocalServer(lambda r: Reply(body=busy)) as server:
        with pytest.raises(LLMError) as info:
            client_for(server, max_retries=0)(FORMATTED)
    assert info.value.status == 503 and "upstream overloaded" in str(info.value)


@pytest.mark.spec("14")
def test_a_long_reply_with_no_cap_is_read_whole():
    """max_event_bytes=None and max_reply_bytes=None: a reply of many reads (300 kB) is read whole, byte for byte."""
    text = "".join(f"{n:06d} " for n in range(40000))
    long_reply = {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}], "model": "m"}
    with LocalServer(lambda r: Reply(body=long_reply)) as server:
        message = client_for(server, max_event_bytes=None, max_reply_bytes=None)(FORMATTED)
    assert message.content[0].text == text


def padded(reply: dict, size: int) -> bytes:
    """``reply`` as JSON, spaces added to make it ``size`` bytes."""
    body = json.dumps(reply).encode()
    return body + b" " * (size - len(body))


@pytest.mark.spec("14")
def test_a_reply_of_exactly_max_event_bytes_is_read_and_one_byte_more_is_refused():
    """The cap is on bytes: a body of exactly max_event_bytes is a reply; the same body and one byte more, in a second
    chunk, is refused as too long (not read as the reply that fits)."""
    cap = 1000
    exact = padded(OK, cap)
    json_chunks = {"Content-Type": "application/json"}
    with LocalServer(sequence(Reply(chunks=[exact], headers=json_chunks), Reply(chunks=[exact, b" "], headers=json_chunks))) as server:
        client = client_for(server, max_event_bytes=cap)
        assert client(FORMATTED).content[0].text == "fine"
        with pytest.raises(LLMError, match=f"the reply exceeds {cap} bytes \\(max_event_bytes={cap}\\)") as info:
            client(FORMATTED)
    assert not info.value.retryable and len(server.requests) == 2


@pytest.mark.spec("14")
def test_a_reply_past_its_cap_is_refused_without_waiting_for_the_rest():
    """Once one byte more than the cap has come, the reply is refused at once: the client does not wait for the
    rest of a body the server holds back (an endless one would otherwise run to the timeout)."""
    cap, release = 1000, threading.Event()
    held = Reply(chunks=[padded(OK, cap + 1), lambda: release.wait(WAIT), b"more"], headers={"Content-Type": "application/json"})
    try:
        with LocalServer(lambda r: held) as server:
            with pytest.raises(LLMError, match=f"the reply exceeds {cap} bytes") as info:
                client_for(server, max_event_bytes=cap, timeout=1, max_retries=0)(FORMATTED)
    finally:
        release.set()
    assert not info.value.retryable and len(server.requests) == 1


@pytest.mark.spec("14")
def test_a_compressed_stream_is_capped_by_what_it_decompresses_to():
    """A gzip stream that decompresses to 16 MiB (16 kB sent): max_reply_bytes=1 MiB holds on the decompressed bytes,
    read a little at a time, so no more than a read past the cap is ever held."""
    cap = 1 << 20
    packed = gzip.compress(b"\n" * (16 << 20))
    chunks = [packed[i : i + 4096] for i in range(0, len(packed), 4096)]
    bomb = Reply(chunks=chunks, headers={"Content-Type": "text/event-stream", "Content-Encoding": "gzip"})
    with LocalServer(lambda r: bomb) as server:
        with pytest.raises(LLMError, match=f"the reply passed max_reply_bytes={cap}") as info:
            client_for(server, stream=True, max_reply_bytes=cap, max_retries=0)(FORMATTED)
    read = int(re.search(r"\((\d+) bytes read", str(info.value)).group(1))
    assert cap < read < 2 * cap


# --- logs --------------------------------------------------------------------------------


@pytest.mark.spec("14")
def test_the_log_tells_each_request_its_response_and_each_retry_with_the_url(caplog):
    """At DEBUG each request (URL, headers masked) and each response (status, Content-Type); at INFO each retry with its
    wait and the failure; urllib3's own retry line names the URL too."""
    secret = "sk-test-LOGGED-0123456789"
    with caplog.at_level(logging.DEBUG):
        with LocalServer(sequence(Reply(status=503, body={"error": {"message": "busy"}}), Reply(body=OK))) as server:
            client_for(server, api_key=secret)(FORMATTED)
    url = f"{server.url}{CHAT}"
    ours = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "yiemagent.llm"]
    posts = [m for level, m in ours if level == logging.DEBUG and m.startswith(f"POST {url} headers=")]
    assert len(posts) == 2 and all("'Authorization': '***'" in m and secret not in m for m in posts)
    assert (logging.DEBUG, f"HTTP 503 from {url} (application/json)") in ours
    assert (logging.DEBUG, f"HTTP 200 from {url} (application/json)") in ours
    retries = [m for level, m in ours if level == logging.INFO]
    assert len(retries) == 1 and retries[0].startswith(f"retrying {url} in 0.00 s after attempt 1 failed: ") and "busy" in retries[0]
    assert any(r.name == "urllib3.util.retry" and f"(url='{url}')" in r.getMessage() for r in caplog.records)


# --- retries: Retry-After, the cap, the backoff -----------------------------------------


@pytest.mark.spec("14")
def test_a_wait_of_exactly_max_retry_delay_ms_is_waited():
    """Only a wait longer than the cap fails at once: retry-after-ms equal to max_retry_delay_ms is honoured."""
    with LocalServer(sequence(Reply(status=429, headers={"retry-after-ms": "50"}, body={"error": {"message": "slow"}}), Reply(body=OK))) as server:
        assert client_for(server, max_retry_delay_ms=50)(FORMATTED).content[0].text == "fine"
    assert len(server.requests) == 2


@pytest.mark.spec("14")
def test_retry_after_ms_of_zero_wins_over_retry_after():
    """OpenAI sends both headers; retry-after-ms (the finer one) is read first, and 0 means retry at once, not 'absent'."""
    headers = {"retry-after-ms": "0", "Retry-After": "120"}
    with LocalServer(sequence(Reply(status=429, headers=headers, body={"error": {"message": "slow"}}), Reply(body=OK))) as server:
        assert client_for(server, max_retry_delay_ms=1000)(FORMATTED).content[0].text == "fine"
    assert len(server.requests) == 2


@pytest.mark.spec("14")
def test_the_last_error_keeps_the_wait_the_server_asked_for():
    """Retries spent on a server asking for 10 ms each time: the final LLMError still says it asked for 10 ms."""
    with LocalServer(lambda r: Reply(status=503, headers={"retry-after-ms": "10"}, body={"error": {"message": "busy"}})) as server:
        with pytest.raises(LLMError, match="gave up after 2 attempts") as info:
            client_for(server, max_retries=1)(FORMATTED)
    assert info.value.retry_after_ms == 10 and info.value.retryable and info.value.url == f"{server.url}{CHAT}"


@pytest.mark.spec("14")
def test_a_wait_past_the_deadline_ends_the_call_saying_how_long_it_would_be():
    """A 503 asking for 100 s (under the cap) with 10 s left: not retried, and the error says the wait, the deadline,
    the status, that it may be retried later, and the URL."""
    busy = Reply(status=503, headers={"retry-after-ms": "100000"}, body={"error": {"message": "busy"}})
    with LocalServer(lambda r: busy) as server:
        with pytest.raises(LLMError) as info:
            client_for(server, max_retry_delay_ms=200000, deadline_s=10)(FORMATTED)
    assert "not retried: the wait (100.0 s) would pass the call's deadline_s=10" in str(info.value)
    assert info.value.status == 503 and info.value.retryable is True and info.value.url == f"{server.url}{CHAT}"
    assert len(server.requests) == 1


def backoff_wait(backoff_factor: float, max_retry_delay_ms: float) -> float:
    """The wait the client would make before its second retry of a 503 (no Retry-After), as its error states it."""
    with LocalServer(lambda r: Reply(status=503, body={"error": {"message": "busy"}})) as server:
        with pytest.raises(LLMError) as info:
            client_for(server, backoff_factor=backoff_factor, max_retry_delay_ms=max_retry_delay_ms, deadline_s=30)(FORMATTED)
    assert len(server.requests) == 2, "the first retry is at once, the second waits"
    return float(re.search(r"the wait \(([\d.]+) s\) would pass", str(info.value)).group(1))


@pytest.mark.spec("14")
def test_the_backoff_is_capped_at_max_retry_delay_ms():
    """backoff_factor=1000 would wait 2000 s before the second retry: max_retry_delay_ms=100000 caps it at 100 s."""
    assert backoff_wait(1000, 100_000) == 100.0


@pytest.mark.spec("14")
def test_the_backoff_grows_with_the_factor_and_has_jitter():
    """The second retry waits backoff_factor * 2 plus a random jitter: never less, and not the same twice."""
    waits = [backoff_wait(1000, 10**9) for _ in range(3)]
    assert all(wait >= 2000 for wait in waits)
    assert len(set(waits)) > 1


@pytest.mark.spec("14")
def test_the_environment_is_read_once_per_url(monkeypatch):
    """A proxy set in the environment after a client's first call to a URL is not used for that URL (as documented)."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with LocalServer(lambda r: Reply(body=OK)) as server, LocalServer(lambda r: Reply(body=OK)) as proxy:
        client = client_for(server, max_retries=0)
        client(FORMATTED)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("http_proxy", proxy.url)
        client(FORMATTED)
    assert len(server.requests) == 2 and proxy.requests == []


# --- the deadline and the abort ----------------------------------------------------------


def sse(*deltas: str, finish=None) -> bytes:
    """OpenAI stream events: one chunk per text delta, then the finish reason and [DONE] when ``finish`` is given."""
    events = [{"model": "m", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]} for text in deltas]
    if finish is not None:
        events.append({"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return ("".join(f"data: {json.dumps(event)}\n\n" for event in events) + ("data: [DONE]\n\n" if finish else "")).encode()


@contextmanager
def deadline_thread_held():
    """Keep the process's deadline thread busy: no call's deadline fires from it until the block ends."""
    go, held = threading.Event(), threading.Event()
    call_at(time.monotonic(), lambda: (held.set(), go.wait(WAIT)))
    assert held.wait(WAIT)
    try:
        yield
    finally:
        go.set()


class OnLog(logging.Handler):
    """Runs ``action`` when a record of ``logger`` whose message holds ``text`` is made (a point in the call's life)."""

    def __init__(self, logger: str, text: str, action) -> None:
        super().__init__(logging.DEBUG)
        self.logger, self.text, self.action = logging.getLogger(logger), text, action

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.action()

    def __enter__(self) -> "OnLog":
        self.level_before = self.logger.level
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level_before)


@contextmanager
def raw_server(reply: bytes, release: threading.Event):
    """A server on 127.0.0.1 answering one request with ``reply`` as is, holding the connection open until ``release``."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            data = b""
            while b"\r\n\r\n" not in data:
                data += connection.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            while len(body) < length:
                body += connection.recv(65536)
            connection.sendall(reply)
            release.wait(WAIT)

    thread = threading.Thread(target=serve, name="test-raw-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        release.set()
        thread.join(WAIT)
        listener.close()


@pytest.mark.spec("14")
def test_an_already_aborted_call_names_its_url():
    """A call under a signal that already fired: nothing is sent, and the error says the URL it would have gone to."""
    signal = AbortSignal()
    signal.abort()
    with LocalServer(lambda r: Reply(body=OK)) as server:
        with stream_to(lambda kind, text: None, signal):
            with pytest.raises(LLMError) as info:
                client_for(server)(FORMATTED)
    assert server.requests == [] and not info.value.retryable
    assert info.value.url == f"{server.url}{CHAT}" and f"call to {server.url}{CHAT} was aborted" in str(info.value)


@pytest.mark.spec("14")
def test_an_abort_while_waiting_for_the_reply_names_the_url():
    """An abort while the server thinks: the call ends as aborted, with its URL."""
    signal, hold = AbortSignal(), threading.Event()
    try:
        with LocalServer(lambda r: Reply(body=OK, before=lambda: (signal.abort(), hold.wait(WAIT)))) as server:
            with stream_to(lambda kind, text: None, signal):
                with pytest.raises(LLMError, match="was aborted") as info:
                    client_for(server, timeout=WAIT)(FORMATTED)
    finally:
        hold.set()
    assert info.value.url == f"{server.url}{CHAT}" and not info.value.retryable


@pytest.mark.spec("14")
def test_an_abort_during_a_chunked_stream_names_the_url():
    """An abort at the first delta of a chunked stream: the call ends as aborted, with its URL, the rest unread."""
    signal, release = AbortSignal(), threading.Event()
    stream = Reply(chunks=[sse("Hello"), lambda: release.wait(WAIT), sse(", world", finish="stop")], headers={"Content-Type": "text/event-stream"})
    try:
        with LocalServer(lambda r: stream) as server:
            with stream_to(lambda kind, text: signal.abort(), signal):
                with pytest.raises(LLMError, match="was aborted") as info:
                    client_for(server, stream=True, timeout=WAIT)(FORMATTED)
    finally:
        release.set()
    assert info.value.url == f"{server.url}{CHAT}" and not info.value.retryable


@pytest.mark.spec("14")
def test_an_abort_during_a_stream_the_server_ends_by_closing_names_the_url():
    """A stream with neither length nor chunks (it ends when the server closes): an abort at its first delta ends the
    body cleanly on the client's side, and the call is still reported as aborted, with its URL, not as a stream cut short."""
    signal, release = AbortSignal(), threading.Event()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    with raw_server(head + sse("Hello"), release) as url:
        with stream_to(lambda kind, text: signal.abort(), signal):
            with pytest.raises(LLMError, match="was aborted") as info:
                OpenAIClient(f"{url}/v1", "m", stream=True, timeout=WAIT, max_retries=0)(FORMATTED)
    assert info.value.url == f"{url}{CHAT}" and not info.value.retryable


@pytest.mark.spec("14")
def test_a_body_without_content_type_that_is_not_json_says_so():
    """A server that sends no Content-Type and no JSON: the error says there was no Content-Type."""
    release = threading.Event()
    with raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\ngateway", release) as url:
        with pytest.raises(LLMError) as info:
            OpenAIClient(f"{url}/v1", "m", max_retries=0)(FORMATTED)
    assert "HTTP 200 (no Content-Type) with a body that is not JSON" in str(info.value) and "'gateway'" in str(info.value)


@pytest.mark.spec("14")
def test_an_abort_while_waiting_to_retry_ends_the_wait_as_aborted():
    """A 503 asks for 10 s; the run is aborted during that wait: the call ends at once as aborted, with its URL, caused by the 503."""
    signal = AbortSignal()
    busy = Reply(status=503, headers={"retry-after-ms": "10000"}, body={"error": {"message": "busy"}})
    with LocalServer(lambda r: busy) as server, OnLog("yiemagent.llm", "retrying", signal.abort):
        with stream_to(lambda kind, text: None, signal):
            with pytest.raises(LLMError, match="was aborted") as info:
                client_for(server)(FORMATTED)
    assert info.value.url == f"{server.url}{CHAT}" and info.value.__cause__.status == 503 and len(server.requests) == 1


@pytest.mark.spec("14")
def test_an_abort_as_the_status_line_arrives_ends_the_call_as_aborted():
    """An abort between the reply's headers arriving and its body being read: the call ends as aborted, with its URL."""
    signal = AbortSignal()
    with LocalServer(lambda r: Reply(body=OK)) as server, OnLog("urllib3.connectionpool", f'"POST {CHAT} HTTP/1.1" 200', signal.abort):
        with stream_to(lambda kind, text: None, signal):
            with pytest.raises(LLMError, match="was aborted") as info:
                client_for(server)(FORMATTED)
    assert info.value.url == f"{server.url}{CHAT}" and len(server.requests) == 1


@pytest.mark.spec("14")
def test_an_abort_while_an_error_body_is_read_ends_the_call_as_aborted():
    """An abort once a 500's headers are in, while its body is read: the call ends as aborted, with its URL; the 500 is not retried."""
    signal = AbortSignal()
    with LocalServer(lambda r: Reply(status=500, body={"error": {"message": "x"}})) as server, OnLog("yiemagent.llm", "HTTP 500 from", signal.abort):
        with stream_to(lambda kind, text: None, signal):
            with pytest.raises(LLMError, match="was aborted") as info:
                client_for(server, timeout=WAIT)(FORMATTED)
    assert info.value.url == f"{server.url}{CHAT}" and len(server.requests) == 1


@pytest.mark.spec("14")
def test_a_read_timing_out_at_the_deadline_is_the_deadline_even_when_its_thread_is_late():
    """The per-read timeout is cut to the time left: with the deadline thread busy, a server that never answers still
    ends the call at its deadline, reported as the deadline (with the URL), and not retried."""
    release = threading.Event()
    try:
        with LocalServer(lambda r: Reply(body=OK, before=lambda: release.wait(WAIT))) as server, deadline_thread_held():
            with pytest.raises(LLMError) as info:
                client_for(server, deadline_s=0.3, timeout=5)(FORMATTED)
    finally:
        release.set()
    assert f"call to {server.url}{CHAT} did not finish within deadline_s=0.3" in str(info.value)
    assert info.value.url == f"{server.url}{CHAT}" and info.value.retryable and len(server.requests) == 1


@pytest.mark.spec("14")
def test_a_failure_at_the_deadline_is_not_retried_even_when_its_thread_is_late():
    """A 503 whose body stalls until the deadline has passed (the deadline thread busy): no time is left, so even the
    first retry (which waits 0 s) is not made; the error says so, with the 503's status and the URL."""
    release = threading.Event()
    stalled = Reply(status=503, chunks=[b'{"error": ', lambda: release.wait(WAIT), b'{"message": "x"}}'], headers={"Content-Type": "application/json"})
    try:
        with LocalServer(sequence(stalled, Reply(body=OK))) as server, deadline_thread_held():
            with pytest.raises(LLMError) as info:
                client_for(server, deadline_s=0.3, timeout=5)(FORMATTED)
    finally:
        release.set()
    assert "not retried: the wait (0.0 s) would pass the call's deadline_s=0.3" in str(info.value)
    assert info.value.status == 503 and info.value.retryable is True and info.value.url == f"{server.url}{CHAT}"
    assert len(server.requests) == 1
