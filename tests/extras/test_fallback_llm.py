"""FallbackLLM over HTTP: two real local servers, one failing; the next model after the client's own retries."""

from __future__ import annotations

import pytest

from helpers import WAIT, EventRecorder
from localserver import LocalServer, Reply, free_port_url
from yiemagent import AssistantMessage, LLMDeltaEvent, LLMError, LLMUsage, run_agent, take_response
from yiemagent.llm import OpenAIClient, ScriptedLLM
from yiemagent.llm.fallback import FallbackLLM

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


def test_a_bug_in_a_model_is_not_hidden_by_the_next():
    """An exception that is not an LLMError is raised as it is: the secondary is not asked."""
    second = ScriptedLLM(["fine"])
    with pytest.raises(KeyError):
        FallbackLLM(ScriptedLLM([KeyError("oops")]), second)(FORMATTED)
    assert second.requests == []


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


def test_fallback_needs_callables():
    """No llm_call, or one that is not callable, is refused."""
    with pytest.raises(ValueError):
        FallbackLLM()
    with pytest.raises(TypeError, match="1"):
        FallbackLLM(ScriptedLLM([]), "gpt")
