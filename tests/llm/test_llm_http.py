"""The HTTP clients against a real local server: retries, Retry-After, the cap, failures, secrets, the agent over HTTP."""

from __future__ import annotations

import email.utils
import json
import logging
import os
import time
from pathlib import Path

import jsonschema
import pytest

from helpers import FIXTURES, WAIT, EventRecorder, make_tool, text_result
from localserver import LocalServer, Reply, free_port_url
from yiemagent import LLMError, ToolStore, YiemAgent, register_tool, run_agent, take_response
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
    assert len(server.requests) == 1
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
        with YiemAgent(llm_call=client_for(server), agent_event_sink=recorder, tool_store=store) as agent:
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
