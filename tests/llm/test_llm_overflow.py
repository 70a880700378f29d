"""A request longer than the model's context: every provider's "too long" answer is a ContextOverflowError (docs/failures.md "The history outgrew the context").

Each recorded answer is served by a real http.server on 127.0.0.1 with its real status,
whole and as the answer to a streamed request; a 400 of any other kind stays a plain
``LLMError``.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localserver import LocalServer, Reply
from yiemagent import ContextOverflowError, FallbackLLM, LLMCallEndEvent, LLMError, YiemAgent, run_agent, take_response
from yiemagent.llm import AnthropicClient, OpenAIClient
from helpers import FIXTURES, EventRecorder

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}
# fixture -> the server's words the error keeps
OVERFLOW_BODIES = {
    "openai-error-400-context-length-exceeded.json": "exceeds the context window of this model",
    "anthropic-error-400-prompt-too-long.json": "prompt is too long: 213462 tokens > 200000 maximum",
    "llamacpp-error-400-exceed-context.json": "exceeds the available context size (128 tokens)",
    "vllm-error-400-max-context.json": "maximum context length is 2048 tokens",
    "llamacpp-python-error-400-context-length.json": "you requested 4018 tokens",
    "gemini-error-400-input-token-count.json": "exceeds the maximum number of tokens allowed (1048575)",
}
# 200 streams whose error event says the request is too long
OVERFLOW_STREAMS = {
    "anthropic-stream-error-prompt-too-long.sse": "prompt is too long",
    "openrouter-stream-overflow-midstream.sse": "maximum context length is 32768 tokens",
}
# verbatim recordings of real servers' "too long" answers -> (status served, status the error keeps, the server's words it keeps)
RECORDED = {
    "anthropic-recorded-400-prompt-too-long.json": (400, 400, "prompt is too long: 208310 tokens > 200000 maximum"),
    "anthropic-recorded-413-request-exceeds-context-window.json": (413, 413, "Request size exceeds model context window"),
    "anthropic-recorded-400-exceed-context-limit.json": (400, 400, "exceed context limit: 199759 + 8192 > 200000"),
    "llamacpp-recorded-400-exceed-context.json": (400, 400, "exceeds the available context size (8192 tokens)"),
    "openai-recorded-400-context-length-exceeded.json": (400, 400, "maximum context length is 4097 tokens"),
    "gemini-recorded-400-input-token-count.json": (400, 400, "exceeds the maximum number of tokens allowed (131072)"),
    "vllm-recorded-400-max-context.json": (400, 400, "maximum context length is 6048 tokens"),
    "openrouter-recorded-200-overflow-body.json": (200, 400, "This endpoint's maximum context length is 131072 tokens"),
    "openrouter-recorded-400-provider-raw-overflow.json": (400, 400, "maximum context length is 262144 tokens"),
    "openai-recorded-400-max-context-code-null.json": (400, 400, "maximum context length is 4097 tokens, however you requested 4130"),
}
# recorded 400s that are not an overflow
OTHER_400S = ["openai-error-400-invalid-value.json", "anthropic-error-400.json", "groq-error-400-tool-use-failed.json"]


def _client(name: str, url: str, stream: bool = False):
    options = {"stream": True} if stream else None
    if name.startswith("anthropic"):
        return AnthropicClient("m", "k", base_url=url, backoff_factor=0.001, options=options)
    return OpenAIClient(f"{url}/v1", "m", backoff_factor=0.001, options=options)


def _error_reply(name: str, status: int = 400) -> Reply:
    return Reply(status=status, body=(FIXTURES / name).read_bytes(), headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("name", sorted(OVERFLOW_BODIES))
def test_a_too_long_answer_is_a_context_overflow_error(name, stream):
    """Each provider's recorded "too long" 400 is a ContextOverflowError, not retried, keeping the server's words and the status."""
    with LocalServer(lambda r: _error_reply(name)) as server:
        with pytest.raises(ContextOverflowError) as info:
            _client(name, server.url, stream)(FORMATTED)
    error = info.value
    assert isinstance(error, LLMError) and error.status == 400 and error.retryable is False
    assert OVERFLOW_BODIES[name] in str(error) and "longer than the model's context window" in str(error)
    assert len(server.requests) == 1, "sending the same request again fails the same way"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("name", sorted(RECORDED))
def test_a_recorded_too_long_answer_is_a_context_overflow_error(name, stream):
    """Each server's "too long" answer as it was recorded, served with its status, is a ContextOverflowError, not retried, keeping the server's words."""
    served, kept, words = RECORDED[name]
    with LocalServer(lambda r: _error_reply(name, status=served)) as server:
        with pytest.raises(ContextOverflowError) as info:
            _client(name, server.url, stream)(FORMATTED)
    assert info.value.status == kept and info.value.retryable is False and words in str(info.value)
    assert len(server.requests) == 1, "sending the same request again fails the same way"


def test_llama_servers_recorded_500_context_size_exceeded_stays_a_retried_llm_error():
    """The documented limit (docs/failures.md "The history outgrew the context"): llama-server's 500 "Context size has been exceeded." is a 5xx, retried, and names its words."""
    with LocalServer(lambda r: _error_reply("llamacpp-recorded-500-context-size-exceeded.json", status=500)) as server:
        with pytest.raises(LLMError, match="Context size has been exceeded") as info:
            OpenAIClient(f"{server.url}/v1", "m", max_retries=1, backoff_factor=0.001)(FORMATTED)
    assert type(info.value) is LLMError and info.value.status == 500 and len(server.requests) == 2


@pytest.mark.parametrize("name", sorted(OVERFLOW_STREAMS))
def test_a_too_long_error_inside_a_200_stream_is_a_context_overflow_error(name):
    """An overflow reported inside a 200 stream (Anthropic's `error` event, OpenRouter's mid-stream error) is a ContextOverflowError."""
    body = (FIXTURES / name).read_bytes()
    with LocalServer(lambda r: Reply(body=body, headers={"Content-Type": "text/event-stream"})) as server:
        with pytest.raises(ContextOverflowError, match=OVERFLOW_STREAMS[name]) as info:
            _client(name, server.url, stream=True)(FORMATTED)
    assert info.value.retryable is False and len(server.requests) == 1


def test_a_too_long_error_in_a_200_body_is_a_context_overflow_error():
    """An overflow error object in the body of a 200 (a gateway passing the provider's error on) is a ContextOverflowError."""
    with LocalServer(lambda r: _error_reply("openai-error-400-context-length-exceeded.json", status=200)) as server:
        with pytest.raises(ContextOverflowError, match="context_length_exceeded") as info:
            _client("openai", server.url)(FORMATTED)
    assert info.value.retryable is False and len(server.requests) == 1


@pytest.mark.parametrize("name", OTHER_400S)
def test_a_400_that_is_not_an_overflow_stays_a_plain_llm_error(name):
    """A recorded 400 of another kind (invalid value, Anthropic's effort error, Groq's tool_use_failed) is an LLMError, not an overflow."""
    with LocalServer(lambda r: _error_reply(name)) as server:
        with pytest.raises(LLMError) as info:
            _client(name, server.url)(FORMATTED)
    assert type(info.value) is LLMError and info.value.status == 400


_PHRASES = [
    "prompt is too long: 5 tokens > 4 maximum",
    "This model's maximum context length is 4096 tokens",
    "request (9 tokens) exceeds the available context size (8 tokens)",
    "The input token count (9) exceeds the maximum number of tokens allowed (8).",
    "Your input exceeds the context window of this model.",
    "This model's maximum prompt length is 131072 but the request contains 537812 tokens",
    "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length",
    "Request size exceeds model context window",
    "input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000",
]
_BY_CHANCE = ["prompt is too long", "exceeds the context window", "exceeds model context window", "exceed context limit", "exceeds the available context size"]
_words = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=60)
_OVERFLOW_KINDS = ["context_length_exceeded", "exceed_context_size_error"]
_kinds = st.sampled_from(["invalid_request_error", "invalid_value", "tool_use_failed", "BadRequestError", None, *_OVERFLOW_KINDS])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    before=_words,
    after=_words,
    kind=_kinds,
    phrase=st.one_of(st.none(), st.sampled_from(_PHRASES)),
    status=st.sampled_from([400, 404, 413, 422, 429]),
    anthropic=st.booleans(),
)
def test_only_the_recognised_shapes_become_context_overflow_errors(before, after, kind, phrase, status, anthropic):
    """Over error bodies of many shapes and statuses: an overflow error exactly when a 4xx other than 429 carries a recognised phrase or code."""
    message = before + (f" {phrase} " if phrase else "") + after
    body = {"type": "error", "error": {"type": kind, "message": message}} if anthropic else {"error": {"message": message, "type": kind, "code": kind}}
    said = phrase is not None or kind in _OVERFLOW_KINDS
    said = said or any(p in message.lower() for p in _BY_CHANCE)  # spelt by chance
    recognised = said and status != 429
    with LocalServer(lambda r: Reply(status=status, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})) as server:
        client = AnthropicClient("m", "k", base_url=server.url, max_retries=0) if anthropic else OpenAIClient(f"{server.url}/v1", "m", max_retries=0)
        with pytest.raises(LLMError) as info:
            client(FORMATTED)
    assert isinstance(info.value, ContextOverflowError) is recognised, str(info.value)


def test_a_run_that_overflows_ends_error_naming_the_overflow():
    """The run ends stop_reason "error", its error_message and LLMCallEndEvent name ContextOverflowError (decision 11)."""
    recorder = EventRecorder()
    with LocalServer(lambda r: _error_reply("llamacpp-error-400-exceed-context.json")) as server:
        with YiemAgent(llm_call=OpenAIClient(f"{server.url}/v1", "m"), agent_event_sink=recorder) as agent:
            run_agent(agent, "hi")
            reply = take_response(agent, timeout=30)
    assert reply.stop_reason == "error"
    assert "ContextOverflowError" in reply.error_message and "exceeds the available context size" in reply.error_message
    (end,) = recorder.of_type(LLMCallEndEvent)
    assert end.error_type == "ContextOverflowError" and "ContextOverflowError" in end.error


def test_fallback_asks_the_next_model_after_an_overflow():
    """FallbackLLM falls over on a ContextOverflowError: the next model's window may be larger."""
    answer = {"choices": [{"message": {"role": "assistant", "content": "fits"}, "finish_reason": "stop"}]}
    with LocalServer(lambda r: _error_reply("openai-error-400-context-length-exceeded.json")) as small:
        with LocalServer(lambda r: Reply(body=answer)) as large:
            reply = FallbackLLM(OpenAIClient(f"{small.url}/v1", "small"), OpenAIClient(f"{large.url}/v1", "large"))(FORMATTED)
    assert reply.content[0].text == "fits" and reply.model == "large"


def test_fallback_whose_every_model_overflows_raises_a_context_overflow_error():
    """When the last model overflows too, FallbackLLM raises a ContextOverflowError naming every model's failure."""
    with LocalServer(lambda r: _error_reply("openai-error-400-context-length-exceeded.json")) as first:
        with LocalServer(lambda r: _error_reply("vllm-error-400-max-context.json")) as second:
            with pytest.raises(ContextOverflowError) as info:
                FallbackLLM(OpenAIClient(f"{first.url}/v1", "first"), OpenAIClient(f"{second.url}/v1", "second"))(FORMATTED)
    assert "first:" in str(info.value) and "second:" in str(info.value) and info.value.retryable is False
