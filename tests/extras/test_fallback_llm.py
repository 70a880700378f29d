"""FallbackLLM over HTTP: two real local servers, one failing; the next model after the client's own retries."""

from __future__ import annotations

import http.client
import json
import socket
import struct
import threading

import pytest

from helpers import WAIT, EventRecorder
from localserver import LocalServer, Reply, free_port_url
from yiemagent import AbortSignal, AssistantMessage, LLMDeltaEvent, LLMError, LLMUsage, TextContent, run_agent, take_response
from yiemagent.llm import OpenAIClient, ScriptedLLM
from yiemagent.llm.fallback import FallbackLLM, falls_over
from yiemagent.streaming import emit_delta, stream_to

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}


def answer(model: str, text: str = "fine", prompt: int = 7, completion: int = 3) -> dict:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}], "model": model, "usage": usage}


def client(server_or_url, model: str, **kwargs) -> OpenAIClient:
    url = server_or_url if isinstance(server_or_url, str) else server_or_url.url
    kwargs.setdefault("backoff_factor", 0.001)
    return OpenAIClient(f"{url}/v1", model, **kwargs)


def failing(status: int, message: str = "down"):
    return lambda request: Reply(status=status, body={"error": {"message": message, "code": "x"}})


@pytest.mark.parametrize("status", [500, 502, 503, 529, 429, 401, 404])
def test_a_failing_primary_falls_over_to_the_secondary_after_its_own_retries(status):
    """A 5xx, 429 or provider 4xx from the primary, after its own retries, is answered by the secondary, which the reply names."""
    with LocalServer(failing(status)) as bad, LocalServer(lambda r: Reply(body=answer("beta"))) as good:
        reply = FallbackLLM(client(bad, "alpha", max_retries=2), client(good, "beta"))(FORMATTED)
    assert reply.content[0].text == "fine" and reply.model == "beta"
    retried = status in (500, 502, 503, 529, 429)
    assert len(bad.requests) == (3 if retried else 1) and len(good.requests) == 1


def test_a_refused_connection_falls_over():
    """No server at all behind the primary (connection refused) is a retryable failure: the secondary answers."""
    with LocalServer(lambda r: Reply(body=answer("beta"))) as good:
        reply = FallbackLLM(client(free_port_url(), "alpha", max_retries=0), client(good, "beta"))(FORMATTED)
    assert reply.model == "beta"


@pytest.mark.parametrize("status", [400, 413, 422])
def test_a_request_fault_is_not_asked_of_another_model(status):
    """A 4xx that is the request's fault is raised at once: the secondary is never asked."""
    with LocalServer(failing(status, "bad request")) as bad, LocalServer(lambda r: Reply(body=answer("beta"))) as good:
        with pytest.raises(LLMError, match="bad request") as info:
            FallbackLLM(client(bad, "alpha"), client(good, "beta"))(FORMATTED)
    assert info.value.status == status and len(good.requests) == 0


def test_when_every_model_fails_the_error_names_each():
    """Every model failing raises an LLMError naming each model and its failure."""
    with LocalServer(failing(503, "alpha overloaded")) as a, LocalServer(failing(500, "beta broken")) as b:
        with pytest.raises(LLMError) as info:
            FallbackLLM(client(a, "alpha", max_retries=0), client(b, "beta", max_retries=0))(FORMATTED)
    text = str(info.value)
    assert "alpha" in text and "alpha overloaded" in text and "beta" in text and "beta broken" in text
    assert info.value.status == 500 and isinstance(info.value.__cause__, LLMError)


def test_usage_counts_every_attempt():
    """A failed attempt that reported usage (a reply with stop_reason "error") adds to the answering reply's usage."""
    spent = AssistantMessage([], stop_reason="error", error_message="overloaded mid-reply", usage=LLMUsage(5, 1, total_tokens=6))
    with LocalServer(lambda r: Reply(body=answer("beta", prompt=7, completion=3))) as good:
        reply = FallbackLLM(ScriptedLLM([spent]), client(good, "beta"))(FORMATTED)
    assert reply.model == "beta"
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.total_tokens) == (12, 4, 16)


def test_a_custom_clients_own_exception_falls_over_with_its_traceback_logged(caplog):
    """A custom llm_call raising RuntimeError (not an LLMError) falls over to the next model; its warning carries the traceback."""
    second = ScriptedLLM(["fine"])
    with caplog.at_level("WARNING", logger="yiemagent.llm.fallback"):
        reply = FallbackLLM(Model("alpha", [RuntimeError("client bug or outage")]), second)(FORMATTED)
    assert reply.content[0].text == "fine" and len(second.requests) == 1
    (record,) = [r for r in caplog.records if r.name == "yiemagent.llm.fallback"]
    assert record.getMessage() == "model alpha failed (client bug or outage); asking ScriptedLLM"
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError


def test_a_keyboard_interrupt_in_a_model_is_not_asked_of_the_next():
    """A BaseException that is not an Exception (KeyboardInterrupt) is raised as it is: the secondary is not asked."""
    second = ScriptedLLM(["fine"])
    with pytest.raises(KeyboardInterrupt):
        FallbackLLM(ScriptedLLM([KeyboardInterrupt()]), second)(FORMATTED)
    assert second.requests == []


class ResettingServer:
    """A TCP server on 127.0.0.1 that reads each request and resets the connection (RST, SO_LINGER 0)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed: the test is over
                return
            conn.recv(65536)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone does not, on Linux)
        self.sock.close()
        self.thread.join(WAIT)


class RawClient:
    """An application's own llm_call over http.client: what the connection raises reaches the caller unchanged."""

    def __init__(self, port: int, model: str) -> None:
        self.port, self.model = port, model

    def __call__(self, formatted):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT)
        try:
            connection.request("POST", "/v1/chat/completions", body=json.dumps(formatted), headers={"Content-Type": "application/json"})
            body = json.loads(connection.getresponse().read())
        finally:
            connection.close()
        return AssistantMessage([TextContent(body["choices"][0]["message"]["content"])], stop_reason="stop", model=self.model)


@pytest.fixture
def resetting():
    server = ResettingServer()
    yield server
    server.close()


def test_a_connection_reset_in_a_custom_client_falls_over(resetting):
    """A custom client whose server resets the connection (a real ConnectionResetError) is answered by the next model."""
    with LocalServer(lambda r: Reply(body=answer("beta"))) as good:
        reply = FallbackLLM(RawClient(resetting.port, "alpha"), client(good, "beta"))(FORMATTED)
    assert reply.model == "beta" and len(good.requests) == 1


def test_when_every_model_fails_the_error_names_each_also_a_custom_clients_reset(resetting):
    """The primary's 503 and then a custom client's connection reset: the LLMError names both models and both causes, the reset its cause."""
    with LocalServer(failing(503, "alpha overloaded")) as bad:
        with pytest.raises(LLMError) as info:
            FallbackLLM(client(bad, "alpha", max_retries=0), RawClient(resetting.port, "beta"))(FORMATTED)
    text = str(info.value)
    assert text.startswith("no model answered: alpha: ") and "alpha overloaded" in text
    assert "; beta: ConnectionResetError: " in text
    assert isinstance(info.value.__cause__, ConnectionResetError) and info.value.status is None and not info.value.retryable


def test_an_agent_over_fallback_gets_the_secondarys_answer_and_its_usage(agents):
    """An agent whose llm_call is a FallbackLLM answers from the secondary; the run's usage is the secondary's."""
    with LocalServer(failing(503)) as bad, LocalServer(lambda r: Reply(body=answer("beta"))) as good:
        agent = agents(FallbackLLM(client(bad, "alpha", max_retries=1), client(good, "beta")))
        run_agent(agent, "hi")
        response = take_response(agent, timeout=WAIT)
    assert response.content[0].text == "fine" and response.model == "beta"
    assert agent.usage.total_tokens == 10


def test_a_streamed_failure_is_not_asked_again_elsewhere(agents):
    """A model that streamed part of its reply and then failed is not followed by another: the sink would see two replies."""

    def half_then_fail(formatted):
        from yiemagent.streaming import emit_delta

        emit_delta("text", "half a rep")
        raise LLMError("stream broke off", retryable=True)

    second = ScriptedLLM(["fine"])
    recorder = EventRecorder()
    agent = agents(FallbackLLM(half_then_fail, second), agent_event_sink=recorder)
    run_agent(agent, "hi")
    response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "error" and "stream broke off" in response.error_message
    assert second.requests == [] and [e.text for e in recorder.events if isinstance(e, LLMDeltaEvent)] == ["half a rep"]


def test_max_retry_delay_ms_reaches_every_client():
    """YiemAgent(max_retry_delay_ms=) sets the cap on every client inside the fallback."""
    a, b = client(free_port_url(), "a"), client(free_port_url(), "b")
    fallback = FallbackLLM(a, ScriptedLLM([]), b)
    fallback.max_retry_delay_ms = 1234
    assert a.max_retry_delay_ms == b.max_retry_delay_ms == 1234 == fallback.max_retry_delay_ms


def test_max_tokens_is_the_largest_reply_any_of_its_clients_allows_and_none_when_none_says():
    """FallbackLLM.max_tokens is the largest of its clients' reply caps, whichever position it holds, and None when no client names one."""
    from yiemagent.llm import AnthropicClient

    plain = client(free_port_url(), "a")
    wide = client(free_port_url(), "b", options={"max_tokens": 3000})
    narrow = AnthropicClient("claude-sonnet-4-5", "k", base_url=free_port_url(), max_tokens=1000)
    assert FallbackLLM(plain, narrow, wide).max_tokens == 3000
    assert FallbackLLM(plain, wide, narrow).max_tokens == 3000
    assert FallbackLLM(plain, ScriptedLLM([])).max_tokens is None


def test_fallback_needs_callables():
    """No llm_call, or one that is not callable, is refused."""
    with pytest.raises(ValueError):
        FallbackLLM()
    with pytest.raises(TypeError, match="1"):
        FallbackLLM(ScriptedLLM([]), "gpt")


class Model:
    """A custom llm_call with a ``model`` attribute (any value), answering from a script."""

    def __init__(self, model, script):
        self.model = model
        self.scripted = ScriptedLLM(script)

    def __call__(self, formatted):
        return self.scripted(formatted)


def error_reply(message=None, usage=None) -> AssistantMessage:
    return AssistantMessage([], stop_reason="error", error_message=message, usage=usage)


def test_the_primary_answering_is_the_only_model_asked():
    """A primary that answers is the answer: the secondary is never asked (docs/api.md: the next model only after a failure)."""
    second = ScriptedLLM(["second"])
    reply = FallbackLLM(ScriptedLLM(["first"]), second)(FORMATTED)
    assert reply.content[0].text == "first" and reply.model == "scripted" and second.requests == []


def test_every_failure_is_named_by_its_models_name_in_the_error_and_the_warnings(caplog):
    """Each model is named by its ``model`` attribute when that is a non-empty str, else by its type;
    an error reply counts with its error_message (or "stop_reason error"); every model failing raises
    one LLMError listing them in order, with the last failure's status, retryable and retry_after_ms,
    and each fall-over is logged as a warning naming the failed model, its failure and the next model."""
    last = LLMError("delta failed", status=503, retryable=True, retry_after_ms=1500.0)
    models = (
        Model("alpha", [LLMError("alpha down", status=502, retryable=True)]),
        Model("beta", [error_reply("beta overloaded")]),
        Model("", [error_reply()]),
        Model(5, [LLMError("five down", status=429)]),
        ScriptedLLM([last]),
    )
    with caplog.at_level("WARNING", logger="yiemagent.llm.fallback"):
        with pytest.raises(LLMError) as info:
            FallbackLLM(*models)(FORMATTED)
    assert str(info.value) == "no model answered: alpha: alpha down; beta: beta overloaded; Model: stop_reason error; Model: five down; ScriptedLLM: delta failed"
    assert (info.value.status, info.value.retryable, info.value.retry_after_ms) == (503, True, 1500.0)
    assert info.value.__cause__ is last
    assert [r.getMessage() for r in caplog.records if r.name == "yiemagent.llm.fallback"] == [
        "model alpha failed (alpha down); asking beta",
        "model beta replied with an error (beta overloaded); asking Model",
        "model Model replied with an error (None); asking Model",
        "model Model failed (five down); asking ScriptedLLM",
    ]


def test_the_last_models_error_reply_is_the_answer_with_every_attempts_usage():
    """When the last model too replies with stop_reason "error", that reply is returned (the run reports it),
    named after that model, its error_message naming every model and its failure, carrying the usage of every attempt."""
    first = Model("alpha", [error_reply("alpha overloaded", LLMUsage(5, 1, total_tokens=6))])
    reply = FallbackLLM(first, Model("beta", [error_reply("beta overloaded", LLMUsage(2, 2, total_tokens=4))]))(FORMATTED)
    assert (reply.stop_reason, reply.model) == ("error", "beta")
    assert reply.error_message == "no model answered: alpha: alpha overloaded; beta: beta overloaded"
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.total_tokens) == (7, 3, 10)


def test_the_usage_a_failed_call_reports_on_its_error_adds_to_the_answer():
    """An LLMError carrying ``usage`` (a client that knows what a failed call spent) adds it to the answering
    reply's usage, summed over every such failure (decision 13: those tokens were spent too)."""
    failures = []
    for prompt, completion in ((2, 1), (5, 1)):
        error = LLMError("overloaded", status=503, retryable=True)
        error.usage = LLMUsage(prompt, completion, total_tokens=prompt + completion)
        failures.append(ScriptedLLM([error]))
    answer = AssistantMessage([TextContent("fine")], stop_reason="stop", model="gamma", usage=LLMUsage(7, 3, total_tokens=10))
    reply = FallbackLLM(*failures, ScriptedLLM([answer]))(FORMATTED)
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.total_tokens) == (14, 5, 19)


def test_the_error_replies_of_every_failed_model_add_to_the_answers_usage():
    """The usage of two models' error replies before a third answers is summed with the answer's, none dropped (decision 13)."""
    first = Model("alpha", [error_reply("alpha overloaded", LLMUsage(5, 1, total_tokens=6))])
    second = Model("beta", [error_reply("beta overloaded", LLMUsage(2, 2, total_tokens=4))])
    answer = AssistantMessage([TextContent("fine")], stop_reason="stop", model="gamma", usage=LLMUsage(7, 3, total_tokens=10))
    reply = FallbackLLM(first, second, ScriptedLLM([answer]))(FORMATTED)
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.total_tokens) == (14, 6, 20)


def test_an_answer_after_no_failure_keeps_its_usage_and_a_lone_error_reply_its_message():
    """With no earlier failure the reply is handed on as the model gave it: no usage stays None, and the one
    model's error reply keeps its own error_message (only a reply after other failures names them all)."""
    unreported = AssistantMessage([TextContent("fine")], stop_reason="stop", model="alpha")
    assert FallbackLLM(Model("alpha", [unreported]), ScriptedLLM(["second"]))(FORMATTED).usage is None
    reply = FallbackLLM(Model("alpha", [error_reply("alpha overloaded")]))(FORMATTED)
    assert (reply.stop_reason, reply.error_message) == ("error", "alpha overloaded")


def test_a_reply_without_a_model_is_named_after_the_model_that_answered():
    """A reply with no ``model`` gets the answering client's ``model``; a reply that names its model keeps that name."""
    unnamed = AssistantMessage([TextContent("hi")], stop_reason="stop")
    down = LLMError("down", status=500, retryable=True)
    assert FallbackLLM(ScriptedLLM([down]), Model("gamma", [unnamed]))(FORMATTED).model == "gamma"
    named = AssistantMessage([TextContent("hi")], stop_reason="stop", model="gamma-2024-01")
    assert FallbackLLM(Model("gamma", [named]))(FORMATTED).model == "gamma-2024-01"


def test_a_reply_that_is_not_an_assistant_message_is_handed_on_as_it_is():
    """A custom llm_call returning something else (a str) gets it back unchanged: the run refuses it and names it (decision 15)."""
    assert FallbackLLM(lambda formatted: "just text", ScriptedLLM(["fine"]))(FORMATTED) == "just text"


def test_a_failure_after_the_run_was_aborted_is_not_asked_of_another_model():
    """A retryable failure of a call during which the run's signal fired is raised: an aborted run asks no other model."""
    signal = AbortSignal()

    def abort_then_fail(formatted):
        signal.abort()
        raise LLMError("overloaded", status=503, retryable=True)

    second = ScriptedLLM(["fine"])
    with stream_to(lambda kind, text: None, signal):
        with pytest.raises(LLMError, match="^overloaded$"):
            FallbackLLM(abort_then_fail, second)(FORMATTED)
    assert second.requests == []
    with stream_to(lambda kind, text: None):  # a listener without a signal: the next model is asked
        assert FallbackLLM(ScriptedLLM([LLMError("down", status=503, retryable=True)]), second)(FORMATTED).content[0].text == "fine"


def test_an_abort_ends_the_http_call_a_fallback_makes():
    """The run's signal reaches the client inside the fallback: an abort while the server has not answered ends the call
    as aborted at once (docs/streaming.md), and no other model is asked."""
    signal, hold = AbortSignal(), threading.Event()

    def before():
        signal.abort()
        hold.wait(WAIT)

    try:
        with LocalServer(lambda r: Reply(body=answer("alpha"), before=before)) as slow, LocalServer(lambda r: Reply(body=answer("beta"))) as good:
            with stream_to(lambda kind, text: None, signal):
                with pytest.raises(LLMError, match="was aborted"):
                    FallbackLLM(client(slow, "alpha", timeout=WAIT), client(good, "beta"))(FORMATTED)
            assert not hold.is_set() and good.requests == []
    finally:
        hold.set()


def test_deltas_reach_the_runs_listener_with_their_kind():
    """A model's thinking and text fragments reach the run's listener through the fallback as (kind, text)."""
    seen = []

    def streaming(formatted):
        emit_delta("thinking", "hmm")
        emit_delta("text", "hi")
        return AssistantMessage([TextContent("hi")], stop_reason="stop", model="m")

    with stream_to(lambda kind, text: seen.append((kind, text))):
        FallbackLLM(streaming)(FORMATTED)
    assert seen == [("thinking", "hmm"), ("text", "hi")]


def test_falls_over_on_a_provider_failure_only():
    """``falls_over``: any 5xx (retryable or not), a retryable failure with no status, and 401/403/404/408/429 fall over;
    another 4xx (even one marked retryable), a non-retryable failure without a status or with a 3xx or 2xx do not;
    any other Exception does (a custom client's own), a BaseException that is not an Exception does not."""
    over = [LLMError("x", status=500), LLMError("x", status=501), LLMError("x", retryable=True), LLMError("x", status=401), LLMError("x", status=408)]
    not_over = [LLMError("x", status=400, retryable=True), LLMError("x", status=400), LLMError("x"), LLMError("x", status=302), LLMError("x", status=200)]
    assert [falls_over(e) for e in over + [KeyError("x"), ConnectionResetError()]] == [True] * 7
    assert [falls_over(e) for e in not_over + [KeyboardInterrupt()]] == [False] * 6


def test_a_501_is_not_retried_but_falls_over():
    """A 501 is not worth retrying at the same provider, but another provider may implement the call: the secondary answers."""
    with LocalServer(failing(501, "not implemented")) as bad, LocalServer(lambda r: Reply(body=answer("beta"))) as good:
        reply = FallbackLLM(client(bad, "alpha", max_retries=2), client(good, "beta"))(FORMATTED)
    assert reply.model == "beta" and len(bad.requests) == 1


def test_the_refusals_and_the_repr_name_what_is_wrong():
    """The constructor's errors say what is wrong (the position and type of a non-callable); the repr lists the models."""
    with pytest.raises(ValueError) as empty:
        FallbackLLM()
    assert str(empty.value) == "FallbackLLM needs at least one llm_call"
    with pytest.raises(TypeError) as bad:
        FallbackLLM(ScriptedLLM([]), "gpt")
    assert str(bad.value) == "FallbackLLM: llm_call 1 is not callable: str"
    a, b = ScriptedLLM([]), Model("beta", [])
    assert repr(FallbackLLM(a, b)) == f"FallbackLLM({a!r}, {b!r})"
