"""Every recorded response in tests/fixtures parses, served by a real local HTTP server (spec §14 llmCall)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

import server_tool_fixtures
from localserver import LocalServer, Reply
from yiemagent import (
    AgentContext,
    AgentTool,
    AgentToolResult,
    AssistantMessage,
    LLMError,
    TextContent,
    ToolResultMessage,
    UserMessage,
    extract_tool_calls,
    format_msg_for_llm,
)
from yiemagent.llm import AnthropicClient, OpenAIClient
from yiemagent.llm.anthropic import build_anthropic_request
from yiemagent.llm.openai import build_openai_request, parse_openai_stream
from helpers import FIXTURES, openai_request_validator


FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}


def load(name: str):
    return json.loads((FIXTURES / name).read_text())


def sse_body(name: str) -> bytes:
    """The fixture as a server-sent event stream (``.jsonl`` files hold one data payload per line)."""
    text = (FIXTURES / name).read_text()
    if name.endswith(".sse"):
        return text.encode()
    lines = [line for line in text.splitlines() if line.strip()]
    events = []
    for line in lines:
        kind = json.loads(line).get("type")
        events.append((f"event: {kind}\n" if name.startswith("anthropic-") and kind else "") + f"data: {line}\n\n")
    return "".join(events).encode()


# name -> (number of calls, first call's name, first call's arguments, text or None, stop_reason, synthesised id?)
OPENAI_RESPONSES = {
    "openai-single-tool-call.json": (1, "final_result", {"city": "Mexico City", "country": "Mexico"}, None, "tool_use", False),
    "openai-empty-args.json": (1, "get_user_country", {}, None, "tool_use", False),
    "openai-docs-functions-example.json": (1, "get_current_weather", {"location": "Boston, MA"}, None, "tool_use", False),
    "deepseek-parallel-content-empty-args.json": (2, "get_player_name", {}, "Let me get your name and roll the die!", "tool_use", False),
    "gemini-openai-compat-empty-id.json": (1, "get_current_time", {}, None, "tool_use", True),
    "mistral-tool-call-no-type.json": (1, "get_weather", {"city": "Paris"}, None, "tool_use", False),
    "openrouter-claude-missing-arguments.json": (1, "find_education_content", {}, "I'll search for education content for you.", "tool_use", False),
    "together-hf-router-parallel.json": (2, "get_weather", {"city": "Paris"}, None, "tool_use", False),
    "vllm-crusoe-tool-call.json": (1, "get_weather", {"city": "Paris"}, None, "tool_use", False),
    "ollama-v1-cloud-tool-call.json": (1, "final_result", {"city": "Paris", "country": "France"}, None, "tool_use", False),
    "groq-parallel-tool-calls.json": (2, "get_weather", {"city": "Paris"}, None, "tool_use", False),
    "llamacpp-docs-stale-example.json": (1, "python", {"code": ' \nprint("Hello, World!")'}, None, "tool_use", True),
    "ollama-native-tool-call.json": (1, "get_weather", {"city": "Tokyo"}, None, "tool_use", True),
    "deepseek-thinking-tool-call.json": (1, "load_capability", {"id": "DICE_ROLL"}, "Let me load the dice rolling capability!", "tool_use", False),
    "gemini-openai-compat-extra-content.json": (1, "get_current_time", {}, None, "tool_use", True),
}
OPENAI_STREAMS = {
    "openai-stream-tool-call.sse": (1, "get_capital", {"country": "UK"}, None, "tool_use", False),
    "anthropic-openai-compat-stream-index1.sse": (1, "read_file", {"path": "a.txt"}, "Reading it.", "tool_use", False),
    "groq-stream-tool-call.sse": (1, "get_something_by_name", {"name": "example"}, None, "tool_use", False),
    "mistral-stream-incremental-empty-name.jsonl": (1, "webSearchTool", {"query": "current Berlin weather"}, None, "tool_use", False),
    "ollama-native-stream-tool-call.jsonl": (1, "get_weather", {"city": "Tokyo"}, None, "tool_use", True),
}
ANTHROPIC_RESPONSES = {
    "anthropic-parallel-tool-use.json": (4, "retrieve_entity_info", {"name": "Alice"}, "I'll help you find out", "tool_use", False),
}
ANTHROPIC_STREAMS = {
    "anthropic-stream-tool-use.jsonl": (1, "json", {"elements": [{"location": "San Francisco", "temperature": 58, "condition": "sunny"}]}, None, "tool_use", False),
    "anthropic-stream-tool-no-args.jsonl": (1, "updateIssueList", {}, "I'll update the issue list for you.", "tool_use", False),
}
# name -> (HTTP status, fragment of the server's words, retryable)
ERRORS = {
    "openai-error-400-invalid-value.json": (400, "Content blocks are expected to be either text or image_url type", False),
    "openai-error-insufficient-quota.json": (429, "You exceeded your current quota", False),
    "openrouter-error-429.json": (429, "temporarily rate-limited upstream", True),
    "groq-error-400-tool-use-failed.json": (400, "Tool call validation failed", False),
    "anthropic-error-400.json": (400, "does not support effort level 'xhigh'", False),
}
STREAM_ERRORS = {"groq-stream-error-event.sse": "Tool call validation failed"}
REQUESTS = {"openai-request-tool-roundtrip.json", "openai-request-tool-image.json", "anthropic-request-tool-result.json", "ollama-native-request-tool-result.json"}
# Shapes written from the providers' docs (docs/streaming.md "Reasoning sent back"); their tests are in test_llm_reasoning.py and test_llm_wire.py.
ISSUE_10 = {
    "anthropic-stream-thinking-tool-use.sse",
    "anthropic-stream-error-overloaded.sse",
    "anthropic-usage-cache.json",
    "openai-reasoning-usage.json",
    "deepseek-reasoner-response.json",
    "xai-reasoning-response.json",
    "mistral-magistral-thinking.json",
    "mistral-magistral-stream-thinking.sse",
    "openrouter-stream-midstream-error.sse",
}
# OpenAI custom tool calls and legacy function_call replies; their tests are in test_llm_openai_calls.py.
CALL_KINDS = {
    "openai-custom-tool-call.json",
    "openai-stream-custom-tool-call.sse",
    "openai-legacy-function-call.json",
    "openai-stream-legacy-function-call.sse",
}
# Reasoning sent back and refusals; their tests are in test_llm_reasoning_echo.py (docs/streaming.md "Reasoning sent back").
REASONING_ECHO = {
    "deepseek-request-thinking-tool-result.json",
    "openrouter-reasoning-details.json",
    "openrouter-request-reasoning-details.json",
    "openrouter-stream-claude-reasoning-details.sse",
    "openai-refusal.json",
    "openai-stream-refusal.sse",
}
# Citations: OpenAI's url_citation annotations, whole and streamed; their tests are in test_llm_citations.py (docs/api.md "Citations").
CITATIONS = {"openai-search-annotations.json", "openai-stream-search-annotation.sse", "openai-responses-web-search-citations.json", "openai-responses-stream-web-search-citations.jsonl"}
# Anthropic server-tool replies; their tests are in test_llm_server_tools*.py (docs/streaming.md "Server tools").
SERVER_TOOLS = {*server_tool_fixtures.STREAMS, *server_tool_fixtures.REPLIES, *server_tool_fixtures.REQUESTS, "anthropic-stream-tool-search-answer.jsonl"}
# "Too long" answers; their tests are in test_llm_overflow.py (docs/failures.md "The history outgrew the context").
OVERFLOW = {
    "openai-error-400-context-length-exceeded.json",
    "anthropic-error-400-prompt-too-long.json",
    "anthropic-stream-error-prompt-too-long.sse",
    "llamacpp-error-400-exceed-context.json",
    "llamacpp-python-error-400-context-length.json",
    "vllm-error-400-max-context.json",
    "gemini-error-400-input-token-count.json",
    "openrouter-stream-overflow-midstream.sse",
    # verbatim recordings of servers' "too long" answers (each .txt cites the issue it was pasted into)
    "anthropic-recorded-400-prompt-too-long.json",
    "anthropic-recorded-413-request-exceeds-context-window.json",
    "anthropic-recorded-400-exceed-context-limit.json",
    "llamacpp-recorded-400-exceed-context.json",
    "openai-recorded-400-context-length-exceeded.json",
    "gemini-recorded-400-input-token-count.json",
    "vllm-recorded-400-max-context.json",
    "openrouter-recorded-200-overflow-body.json",
    "openrouter-recorded-400-provider-raw-overflow.json",
    "openai-recorded-400-max-context-code-null.json",
    "llamacpp-recorded-500-context-size-exceeded.json",
}
# OpenAI Responses API replies and the request OpenAI accepted; their tests are in test_llm_responses.py (docs/streaming.md "The Responses API").
RESPONSES_API = {
    "openai-responses.schema.json",
    "openai-responses-reasoning-message.json",
    "openai-responses-reasoning-tool-call.json",
    "openai-responses-request-reasoning-tool-result.json",
    "openai-responses-stream-reasoning-tool-loop.jsonl",
    "openai-responses-stream-error-quota.jsonl",
    "openai-responses-reasoning-custom-tool-call.json",
    "openai-responses-request-custom-tool-result.json",
}
KNOWN = {*RESPONSES_API, *OVERFLOW, *CITATIONS, *SERVER_TOOLS, *CALL_KINDS, *REASONING_ECHO, *ISSUE_10, *OPENAI_RESPONSES, *OPENAI_STREAMS, *ANTHROPIC_RESPONSES, *ANTHROPIC_STREAMS, *ERRORS, *STREAM_ERRORS, *REQUESTS, "openai-chat-completions.schema.json", "README.md",
         "session-v1.db", "session-v2.db"}  # not wire data: SQLite sessions of schemas 1 and 2, read by tests/extras/test_session_rows.py


def check(message: AssistantMessage, expected) -> None:
    count, name, arguments, text, stop_reason, synthetic = expected
    has, calls, _ = extract_tool_calls(message)
    assert has and len(calls) == count
    assert calls[0].name == name and calls[0].arguments_error is None
    if arguments is not None:
        assert calls[0].arguments == arguments
    texts = [b.text for b in message.content if isinstance(b, TextContent)]
    assert (texts[0].startswith(text) if text else not texts), texts
    assert message.stop_reason == stop_reason
    if synthetic:
        assert len(calls[0].id) == 9 and calls[0].id.isalnum()
    else:
        assert calls[0].id
    assert len({c.id for c in calls}) == count


@pytest.mark.spec("7")
def test_every_fixture_is_covered():
    """Each file in tests/fixtures has a test here; a new fixture fails this until it does."""
    files = {p.name for p in FIXTURES.iterdir() if not p.name.endswith(".txt")}
    assert files - KNOWN == set()


@pytest.mark.spec("7")
@pytest.mark.parametrize("name", sorted(OPENAI_RESPONSES))
def test_openai_format_response_parses(name):
    """An OpenAI-format body from a real server parses into text, §7 tool-call blocks, usage and stop_reason."""
    with LocalServer(lambda r: Reply(body=load(name))) as server:
        client = OpenAIClient(f"{server.url}/v1", "m")
        message = client(FORMATTED)
        openai_request_validator().validate(server.requests[0].json())
    assert server.requests[0].path == "/v1/chat/completions"
    check(message, OPENAI_RESPONSES[name])
    assert message.usage is not None and message.usage.total_tokens > 0
    assert message.model == load(name)["model"]


@pytest.mark.spec("7")
@pytest.mark.parametrize("name", sorted(OPENAI_STREAMS))
def test_openai_format_stream_parses(name):
    """A streamed reply (fragments keyed by index, empty names later) accumulates into the same message."""
    with LocalServer(lambda r: Reply(body=sse_body(name), headers={"Content-Type": "text/event-stream"})) as server:
        message = OpenAIClient(f"{server.url}/v1", "m", options={"stream": True})(FORMATTED)
        sent = server.requests[0].json()
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    check(message, OPENAI_STREAMS[name])


@pytest.mark.spec("7")
@pytest.mark.parametrize("name", sorted(ANTHROPIC_RESPONSES))
def test_anthropic_response_parses(name):
    """A Messages API body parses: text beside tool_use blocks, usage, stop_reason."""
    with LocalServer(lambda r: Reply(body=load(name))) as server:
        message = AnthropicClient("claude-haiku-4-5", "key", base_url=server.url)(FORMATTED)
    assert server.requests[0].path == "/v1/messages"
    check(message, ANTHROPIC_RESPONSES[name])
    assert message.usage.input_tokens == 423 and message.usage.output_tokens == 202


@pytest.mark.spec("7")
@pytest.mark.parametrize("name", sorted(ANTHROPIC_STREAMS))
def test_anthropic_stream_parses(name):
    """A Messages API stream: partial_json joined per block; an empty input means {}."""
    with LocalServer(lambda r: Reply(body=sse_body(name), headers={"Content-Type": "text/event-stream"})) as server:
        message = AnthropicClient("m", "key", base_url=server.url, options={"stream": True})(FORMATTED)
    check(message, ANTHROPIC_STREAMS[name])


@pytest.mark.spec("12")
@pytest.mark.parametrize("name", sorted(ERRORS))
def test_error_bodies_become_llm_errors_with_the_servers_words(name):
    """A recorded error body gives an LLMError carrying the status and the server's own message."""
    status, words, retryable = ERRORS[name]
    with LocalServer(lambda r: Reply(status=status, body=load(name))) as server:
        client = (
            AnthropicClient("m", "k", base_url=server.url, backoff_factor=0.001)
            if name.startswith("anthropic")
            else OpenAIClient(f"{server.url}/v1", "m", backoff_factor=0.001)
        )
        with pytest.raises(LLMError) as info:
            client(FORMATTED)
    assert info.value.status == status and info.value.retryable is retryable
    assert words in str(info.value) and server.url in str(info.value)
    assert len(server.requests) == (3 if retryable else 1)


@pytest.mark.spec("12")
@pytest.mark.parametrize("name", sorted(STREAM_ERRORS))
def test_error_event_in_a_stream_is_an_llm_error(name):
    """An `event: error` after HTTP 200 raises an LLMError with the server's message."""
    with LocalServer(lambda r: Reply(body=sse_body(name), headers={"Content-Type": "text/event-stream"})) as server:
        with pytest.raises(LLMError, match=STREAM_ERRORS[name]) as info:
            OpenAIClient(f"{server.url}/v1", "m", options={"stream": True})(FORMATTED)
    assert info.value.status == 400 and info.value.retryable is False, "Groq's status_code says a retry cannot help"


def _tool(name, description, parameters):
    return AgentTool(name, name, description, parameters, lambda *a: AgentToolResult([]))


@pytest.mark.spec("11")
def test_request_matches_the_recorded_openai_round_trip():
    """Our request for the recorded conversation has the accepted shape and validates against OpenAI's schema."""
    fixture = load("openai-request-tool-roundtrip.json")
    call_id = fixture["messages"][1]["tool_calls"][0]["id"]
    history = [
        UserMessage([TextContent("What is the largest city in the user country?")]),
        AssistantMessage([{"type": "tool_calls", "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "get_user_country", "arguments": "{}"}}]}]),
        ToolResultMessage(call_id, "get_user_country", [TextContent("Mexico")]),
    ]
    tools = {t["function"]["name"]: _tool(t["function"]["name"], t["function"]["description"], t["function"]["parameters"]) for t in fixture["tools"]}
    formatted = format_msg_for_llm(AgentContext("", history, tools), None)
    body = build_openai_request({**formatted, "tool_choice": "required", "n": 1, "stream": False}, "gpt-4o")
    openai_request_validator().validate(body)
    expected = [dict(m) for m in fixture["messages"]]
    expected[1]["content"] = ""  # we send "" beside tool calls (llama.cpp rejects null); both are valid OpenAI
    assert body["messages"] == expected
    assert body["tools"] == fixture["tools"] and body["tool_choice"] == "required"


@pytest.mark.spec("11")
def test_request_matches_the_recorded_anthropic_tool_results():
    """Consecutive tool results merge into one user message of tool_result blocks, as the recorded request."""
    fixture = load("anthropic-request-tool-result.json")
    assistant = fixture["messages"][1]["content"]
    calls = [{"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": json.dumps(b["input"])}} for b in assistant[1:]]
    results = fixture["messages"][2]["content"]
    history = [
        UserMessage([TextContent(fixture["messages"][0]["content"][0]["text"])]),
        AssistantMessage([TextContent(assistant[0]["text"]), {"type": "tool_calls", "tool_calls": calls}]),
        *[ToolResultMessage(r["tool_use_id"], "retrieve_entity_info", [TextContent(r["content"])]) for r in results],
    ]
    spec = fixture["tools"][0]
    tools = {spec["name"]: _tool(spec["name"], spec["description"], spec["input_schema"])}
    formatted = format_msg_for_llm(AgentContext(fixture["system"], history, tools), None)
    body = build_anthropic_request({**formatted, "tool_choice": "auto", "stream": False}, "claude-haiku-4-5", 4096)
    assert body["messages"] == fixture["messages"]
    assert body["system"] == fixture["system"] and body["tools"] == fixture["tools"]
    assert body["tool_choice"] == {"type": "auto"} and body["max_tokens"] == 4096


@pytest.mark.spec("11")
def test_tool_result_content_is_a_string_as_ollama_accepts():
    """The recorded Ollama request sends the tool result as a string; so do we, and arguments as valid JSON."""
    fixture = load("ollama-native-request-tool-result.json")
    history = [
        UserMessage([TextContent(fixture["messages"][0]["content"])]),
        AssistantMessage([{"type": "tool_calls", "tool_calls": fixture["messages"][1]["tool_calls"]}]),
    ]
    call = extract_tool_calls(history[1])[1][0]
    history.append(ToolResultMessage(call.id, "get_weather", [TextContent(fixture["messages"][2]["content"])]))
    body = build_openai_request(format_msg_for_llm(AgentContext("", history, {}), None), "llama3.2")
    assert body["messages"][2] == {"role": "tool", "tool_call_id": call.id, "content": "11 degrees celsius"}
    assert json.loads(body["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {"city": "Toronto"}


def test_parse_openai_stream_keeps_the_first_name_and_id():
    """A later fragment with an empty name or id does not overwrite the first."""
    chunks = [
        {"choices": [{"delta": {"tool_calls": [{"index": 3, "id": "x1", "function": {"name": "a", "arguments": '{"k"'}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 3, "id": "", "function": {"name": "", "arguments": ": 1}"}}]}, "finish_reason": "stop"}]},
    ]
    message = parse_openai_stream(chunks)
    call = extract_tool_calls(message)[1][0]
    assert (call.id, call.name, call.arguments) == ("x1", "a", {"k": 1})
    assert message.stop_reason == "tool_use", "a turn with tool calls is a tool turn whatever finish_reason says"


def test_a_string_fragment_after_object_arguments_does_not_crash():
    """Arguments sent whole as an object (Ollama) then an empty string fragment keep the object."""
    chunks = [
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": {"k": 1}}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}, "finish_reason": "tool_calls"}]},
    ]
    assert extract_tool_calls(parse_openai_stream(chunks))[1][0].arguments == {"k": 1}
