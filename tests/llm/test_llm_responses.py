"""OpenAIResponsesClient against recorded Responses API bytes, served by a real local HTTP server (docs/streaming.md "The Responses API").

Each reply is a real recording (tests/fixtures, a .txt beside each names its source); the
next request is checked against the request OpenAI accepted (pydantic-ai's cassette) or
against OpenAI's documented input item shapes (openai-python's ``types/responses``).
"""

from __future__ import annotations

import json
import threading

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import FIXTURES, make_agent, make_tool, text_result
from localserver import LocalServer, Reply
from yiemagent import (
    AssistantMessage,
    ContextOverflowError,
    ImageContent,
    LLMError,
    OpenAIResponsesClient,
    RunFailedError,
    ToolResultMessage,
    UserMessage,
    ask,
    format_msg_for_llm,
)
from yiemagent.events import stream_to
from yiemagent.llm import OpenAIClient
from yiemagent.llm._wire import message_text
from yiemagent.llm.responses import ResponsesStream, build_responses_request
from yiemagent.types import AgentContext, TextContent

SSE = {"Content-Type": "text/event-stream"}
REASONING = {"reasoning": {"effort": "high", "summary": "detailed"}}
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def load(name: str):
    return json.loads((FIXTURES / name).read_text())


def streams(name: str) -> list[list[dict]]:
    """The recorded events of ``name``, one list per streamed reply (each ends with its response.completed or response.failed)."""
    replies, events = [], []
    for line in (FIXTURES / name).read_text().splitlines():
        if line.strip():
            events.append(json.loads(line))
            if events[-1]["type"] in ("response.completed", "response.failed"):
                replies.append(events)
                events = []
    return replies + ([events] if events else [])


def sse(events: list[dict]) -> bytes:
    """Events as OpenAI sends them: each named after its type (``event: response.output_text.delta``)."""
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


SCHEMA = json.loads((FIXTURES / "openai-responses.schema.json").read_text())
REQUEST = jsonschema.Draft202012Validator({"$ref": "#/$defs/CreateResponse", "$defs": SCHEMA["$defs"]})


def valid(body: dict) -> dict:
    """``body``, after checking it against OpenAI's documented CreateResponse schema (tests/fixtures/openai-responses.schema.json)."""
    errors = [f"{list(e.absolute_path)}: {e.message[:200]}" for e in REQUEST.iter_errors(body)]
    assert errors == [], errors
    return body


def client_for(server: LocalServer, **kwargs) -> OpenAIResponsesClient:
    return OpenAIResponsesClient("gpt-5", "sk-test-key-0123456789", base_url=f"{server.url}/v1", **{"max_retries": 0, **kwargs})


def whole(name: str) -> Reply:
    return Reply(body=load(name))


# --- whole replies ----------------------------------------------------------------------------------------


@pytest.mark.spec("14")
def test_a_whole_reasoning_reply_parses_with_its_usage():
    """gpt-5-mini's recorded reply: its text, its reasoning summary as thinking, usage per decision 13, POSTed to /v1/responses."""
    with LocalServer(lambda r: whole("openai-responses-reasoning-message.json")) as server:
        reply = client_for(server)({"messages": [{"role": "user", "content": "q"}]})
    assert server.requests[0].path == "/v1/responses"
    assert reply.text == "12 + 7 = 19\n19 × 3 = 57\n57 × 10 = 570\n\nFinal result: 570"
    assert message_text(reply, "thinking").startswith("**Reporting final result**")
    assert (reply.stop_reason, reply.api, reply.model) == ("stop", "openai-responses", "gpt-5-mini-2025-08-07")
    usage = reply.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.reasoning_tokens, usage.total_tokens) == (865, 163, 0, 128, 1028)


@pytest.mark.spec("14")
def test_the_reasoning_tool_turn_goes_back_as_openai_accepted_it():
    """gpt-5's reasoning item and function call go back whole, in order, by call_id: the input equals the request OpenAI answered 200."""
    accepted = load("openai-responses-request-reasoning-tool-result.json")
    replies = iter([whole("openai-responses-reasoning-tool-call.json"), whole("openai-responses-reasoning-message.json")])
    with LocalServer(lambda r: next(replies)) as server:
        client = client_for(server, options={"reasoning": {"effort": "low", "summary": "detailed"}})
        question = accepted["input"][0]["content"]
        reply = client({"messages": [{"role": "system", "content": accepted["instructions"]}, {"role": "user", "content": question}]})
        call = reply.content[-1]["tool_calls"][0]
        assert (reply.stop_reason, call["id"], call["function"]["name"]) == ("tool_use", "call_gL7JE6GDeGGsFubqO2XGytyO", "update_plan")
        assert reply.usage.reasoning_tokens == 1792
        history = [UserMessage([TextContent(question)]), reply, ToolResultMessage(call["id"], "update_plan", [TextContent("plan updated")])]
        client(format_msg_for_llm(AgentContext(accepted["instructions"], history, {})))
    sent = valid(server.requests[1].json())
    assert (sent["instructions"], sent["include"], sent["reasoning"], sent["store"]) == (accepted["instructions"], accepted["include"], accepted["reasoning"], False)
    assert [item.get("type", "message") for item in sent["input"]] == [item.get("type", "message") for item in accepted["input"]]
    assert sent["input"][:2] == accepted["input"][:2]  # the user's message; the reasoning item whole, with its encrypted content
    ours, theirs = sent["input"][2], accepted["input"][2]  # the function call: its arguments re-serialised (decision 9), the same JSON
    assert {**ours, "arguments": json.loads(ours["arguments"])} == {**theirs, "arguments": json.loads(theirs["arguments"])}
    assert sent["input"][3] == accepted["input"][3]


@pytest.mark.spec("14")
def test_a_reasoning_custom_tool_turn_goes_back_as_openai_accepted_it():
    """gpt-5's free-text custom_tool_call is a custom call; it goes back after its reasoning item, its result as custom_tool_call_output, as OpenAI accepted."""
    accepted = load("openai-responses-request-custom-tool-result.json")
    replies = iter([whole("openai-responses-reasoning-custom-tool-call.json"), whole("openai-responses-reasoning-message.json")])
    tools = {"tools": accepted["tools"], "reasoning": {"effort": "medium"}}
    with LocalServer(lambda r: next(replies)) as server:
        client = client_for(server, options=tools)
        reply = client({"messages": [{"role": "user", "content": accepted["input"][0]["content"]}]})
        call = reply.content[-1]["tool_calls"][0]
        assert (reply.stop_reason, call["type"], call["custom"]) == ("tool_use", "custom", {"name": "execute_sql", "input": "SELECT * FROM users;"})
        history = [UserMessage([TextContent(accepted["input"][0]["content"])]), reply, ToolResultMessage(call["id"], "execute_sql", [TextContent("Result: 3 rows returned")])]
        client(format_msg_for_llm(AgentContext("", history, {})))
    sent = valid(server.requests[1].json())
    accepted["input"][2]["input"] = "SELECT * FROM users;"  # the model's own text: pydantic-ai sent back its parsed form
    assert sent["input"] == accepted["input"] and sent["tools"] == accepted["tools"]


# --- streamed replies, and an agent's tool loop ---------------------------------------------------------------


@pytest.mark.spec("14")
def test_a_streamed_reasoning_reply_emits_deltas_that_join_into_the_reply():
    """The recorded stream of gpt-5.1-codex-max: thinking and text deltas, joined, equal the reply's; arguments join from their deltas."""
    first, *_, last = streams("openai-responses-stream-reasoning-tool-loop.jsonl")
    replies = iter([Reply(chunks=[sse(first)], headers=SSE), Reply(chunks=[sse(last)], headers=SSE)])
    deltas: list[tuple[str, str]] = []
    with LocalServer(lambda r: next(replies)) as server:
        client = client_for(server, stream=True)
        with stream_to(lambda kind, text: deltas.append((kind, text))):
            tool_turn = client({"messages": [{"role": "user", "content": "q"}]})
            answer = client({"messages": [{"role": "user", "content": "q"}]})
    assert server.requests[0].json()["stream"] is True
    thinking = "".join(text for kind, text in deltas if kind == "thinking")
    assert thinking == message_text(tool_turn, "thinking") and thinking.startswith("**Calculating step-by-step")
    assert "".join(text for kind, text in deltas if kind == "text") == answer.text and answer.text == "The final result is **570**."
    assert tool_turn.content[-1]["tool_calls"][0]["function"]["arguments"] == '{"a":12,"b":7,"op":"add"}'


@pytest.mark.spec("14")
def test_an_agent_tool_loop_over_three_rounds_sends_the_reasoning_item_back_each_round():
    """An agent run over the recorded 4-reply stream: 3 calculator rounds, and every later request carries the reasoning item then its call."""
    recorded = streams("openai-responses-stream-reasoning-tool-loop.jsonl")
    replies = iter(Reply(chunks=[sse(events)], headers=SSE) for events in recorded)
    ops = {"add": lambda a, b: a + b, "multiply": lambda a, b: a * b}
    seen: list[dict] = []

    def calculate(tool_call_id, args, signal, on_partial_result):
        seen.append(args)
        result = ops[args["op"]](args["a"], args["b"])
        return text_result(str(result))

    schema = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}, "op": {"type": "string"}}, "required": ["a", "b", "op"]}
    with LocalServer(lambda r: next(replies)) as server:
        client = client_for(server, stream=True, options=REASONING)
        with make_agent(client, make_tool("calculator", calculate, schema=schema)) as agent:
            reply = ask(agent, "Compute ((12 + 7) * 3) * 10 step by step.", timeout=30)
    assert reply.text == "The final result is **570**."
    assert [(s["op"], s["a"], s["b"]) for s in seen] == [("add", 12, 7), ("multiply", 19, 3), ("multiply", 57, 10)]
    reasoning = recorded[0][-1]["response"]["output"][0]  # as response.completed carries it (its encrypted content differs from output_item.done's)
    bodies = [valid(request.json()) for request in server.requests]
    assert len(bodies) == 4
    for body in bodies:
        assert (body["store"], body["include"], body["stream"]) == (False, ["reasoning.encrypted_content"], True)
    for body in bodies[1:]:
        items = body["input"]
        at = items.index(reasoning)  # whole, with its encrypted content
        assert items[at + 1] == {"type": "function_call", "call_id": "call_AB6AaRZ1FYZB2RwS6A5vbdqn", "name": "calculator", "arguments": '{"a": 12, "b": 7, "op": "add"}', "id": "fc_01830d662ab3856501693c32151234819091cfca267e98cc5f"}
        outputs = [item for item in items if item.get("type") == "function_call_output"]
        calls = [item for item in items if item.get("type") == "function_call"]
        assert [o["call_id"] for o in outputs] == [c["call_id"] for c in calls] and len(calls) == bodies.index(body)
    assert [o["output"] for o in bodies[3]["input"] if o.get("type") == "function_call_output"] == ["19", "57", "570"]


# --- what is asked, and what goes back --------------------------------------------------------------------------


def test_encrypted_reasoning_is_asked_only_when_reasoning_is_asked_and_nothing_is_stored():
    """include reasoning.encrypted_content goes with store=False and a reasoning option alone: a model that does not reason answers 400 to it."""
    formatted = {"messages": [{"role": "user", "content": "q"}]}
    assert "include" not in build_responses_request(formatted, "gpt-4o")
    assert build_responses_request(formatted, "gpt-4o")["store"] is False
    assert build_responses_request(formatted, "gpt-5", REASONING)["include"] == ["reasoning.encrypted_content"]
    assert "include" not in build_responses_request(formatted, "gpt-5", REASONING, store=True)
    assert build_responses_request({**formatted, "include": ["reasoning.encrypted_content"]}, "gpt-5", REASONING)["include"] == ["reasoning.encrypted_content"]


def _reasoning_turn(server: LocalServer, **kwargs) -> tuple[OpenAIResponsesClient, AssistantMessage]:
    client = client_for(server, options={"reasoning": {"effort": "low"}}, **kwargs)
    return client, client({"messages": [{"role": "user", "content": "q"}]})


def _next_input(client, history) -> list[dict]:
    return valid(build_responses_request(format_msg_for_llm(AgentContext("", history, {})), "gpt-5", client.options, client.provider, store=client.store))["input"]


def test_a_reasoning_item_without_encrypted_content_is_not_sent_under_store_false():
    """Under store=False a reasoning item that came without encrypted_content stays out, its call without its id (the API answers "Item not found", or 400 for a call missing its reasoning); with store=True it goes by id."""
    body = load("openai-responses-reasoning-tool-call.json")
    del body["output"][0]["encrypted_content"]
    with LocalServer(lambda r: Reply(body=body)) as server:
        client, reply = _reasoning_turn(server)
        stored, stored_reply = _reasoning_turn(server, store=True)
    result = ToolResultMessage("call_gL7JE6GDeGGsFubqO2XGytyO", "update_plan", [TextContent("ok")])
    assert [(i.get("type"), "id" in i) for i in _next_input(client, [UserMessage([TextContent("q")]), reply, result])] == [(None, False), ("function_call", False), ("function_call_output", False)]
    assert [i.get("type") for i in _next_input(stored, [UserMessage([TextContent("q")]), stored_reply, result])] == [None, "reasoning", "function_call", "function_call_output"]


def test_a_reasoning_item_without_its_id_is_not_sent():
    """A reasoning item that came without an id (the API requires one on input) stays out, its encrypted content notwithstanding."""
    body = load("openai-responses-reasoning-tool-call.json")
    del body["output"][0]["id"]
    with LocalServer(lambda r: Reply(body=body)) as server:
        client, reply = _reasoning_turn(server)
    result = ToolResultMessage("call_gL7JE6GDeGGsFubqO2XGytyO", "update_plan", [TextContent("ok")])
    assert [(i.get("type"), "id" in i) for i in _next_input(client, [UserMessage([TextContent("q")]), reply, result])] == [(None, False), ("function_call", False), ("function_call_output", False)]


def test_a_reasoning_item_goes_only_with_the_item_that_followed_it():
    """When the call that followed a reasoning item is gone from the turn (a hook dropped it), the reasoning item is not sent alone (the API answers 400)."""
    with LocalServer(lambda r: whole("openai-responses-reasoning-tool-call.json")) as server:
        client, reply = _reasoning_turn(server)
    bare = AssistantMessage([TextContent("no call after all")], api=reply.api, provider=reply.provider, stop_reason="stop")
    kept_thinking = AssistantMessage([reply.content[0], TextContent("no call after all")], api=reply.api, provider=reply.provider, stop_reason="stop")
    for turn in (bare, kept_thinking):
        assert _next_input(client, [UserMessage([TextContent("q")]), turn]) == [{"role": "user", "content": "q"}, {"role": "assistant", "content": "no call after all"}]


def test_reasoning_items_go_back_to_the_server_that_produced_them_alone():
    """The same turn sent to another Responses server, or through the chat client, carries no reasoning item; back to its own server it does."""
    with LocalServer(lambda r: whole("openai-responses-reasoning-tool-call.json")) as server:
        client, reply = _reasoning_turn(server)
        other = OpenAIResponsesClient("gpt-5", base_url=server.url.replace("127.0.0.1", "localhost") + "/v1", options=REASONING)
        chat = OpenAIClient(f"{server.url}/v1", "gpt-5")
    history = [UserMessage([TextContent("q")]), reply, ToolResultMessage("call_gL7JE6GDeGGsFubqO2XGytyO", "update_plan", [TextContent("ok")])]
    assert "reasoning" in [i.get("type") for i in _next_input(client, history)]
    assert "reasoning" not in [i.get("type") for i in _next_input(other, history)]
    formatted = format_msg_for_llm(AgentContext("", history, {}))
    assert all(set(m) <= {"role", "content", "tool_calls", "tool_call_id"} for m in chat._body(formatted)["messages"])


def test_a_saved_and_loaded_history_still_sends_its_reasoning_back():
    """A tool turn read back from its JSON form goes back with the same reasoning item (a session resumed with the same client)."""
    with LocalServer(lambda r: whole("openai-responses-reasoning-tool-call.json")) as server:
        client, reply = _reasoning_turn(server)
    loaded = AssistantMessage.from_dict(json.loads(json.dumps(reply.to_dict())))
    result = ToolResultMessage("call_gL7JE6GDeGGsFubqO2XGytyO", "update_plan", [TextContent("ok")])
    assert _next_input(client, [UserMessage([TextContent("q")]), loaded, result]) == _next_input(client, [UserMessage([TextContent("q")]), reply, result])


# --- refusals, images, per-request options -----------------------------------------------------------------------

# Built from OpenAI's documented shapes (openai-python types/responses: ResponseOutputRefusal, ResponseRefusalDeltaEvent);
# no public test suite holds a recorded Responses refusal.
REFUSAL = "I'm sorry, but I can't help with that."
REFUSED = {
    "id": "resp_1", "object": "response", "status": "completed", "model": "gpt-4o", "error": None, "incomplete_details": None,
    "output": [{"id": "msg_1", "type": "message", "status": "completed", "role": "assistant", "content": [{"type": "refusal", "refusal": REFUSAL}]}],
    "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 19},
}


def _refusal_events() -> list[dict]:
    item = {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}
    pieces = ["I'm sorry, ", "but I can't help with that."]
    return [
        {"type": "response.created", "response": {**REFUSED, "status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.content_part.added", "output_index": 0, "content_index": 0, "item_id": "msg_1", "part": {"type": "refusal", "refusal": ""}},
        *({"type": "response.refusal.delta", "output_index": 0, "content_index": 0, "item_id": "msg_1", "delta": p} for p in pieces),
        {"type": "response.refusal.done", "output_index": 0, "content_index": 0, "item_id": "msg_1", "refusal": REFUSAL},
        {"type": "response.completed", "response": {**REFUSED, "output": []}},  # the items come only as events here
    ]


@pytest.mark.parametrize("streamed", [False, True])
def test_a_refusal_part_is_stop_reason_refusal_and_fails_the_run(streamed):
    """A refusal content part, whole or streamed as response.refusal.delta, is stop_reason "refusal" with its words; ask raises naming it; it goes back in its message."""
    reply_of = (lambda: Reply(chunks=[sse(_refusal_events())], headers=SSE)) if streamed else (lambda: Reply(body=REFUSED))
    with LocalServer(lambda r: reply_of()) as server:
        client = client_for(server, stream=streamed)
        reply = client({"messages": [{"role": "user", "content": "q"}]})
        with make_agent(client) as agent, pytest.raises(RunFailedError, match="refusal"):
            ask(agent, "q", timeout=20)
    assert (reply.stop_reason, reply.refusal, reply.text) == ("refusal", REFUSAL, "")
    sent = _next_input(client, [UserMessage([TextContent("q")]), reply, UserMessage([TextContent("next")])])
    assert sent[1] == {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed", "content": [{"type": "refusal", "refusal": REFUSAL}]}


def test_images_of_user_messages_and_tool_results_go_as_input_image():
    """A user's image is an input_image part; a tool's image goes inside its function_call_output (openai-python's ResponseInputImageParam)."""
    image = ImageContent(PNG, "image/png")
    call = AssistantMessage([{"type": "tool_calls", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}]}], stop_reason="tool_use")
    history = [UserMessage([TextContent("look"), image]), call, ToolResultMessage("call_1", "shot", [TextContent("a screenshot"), image])]
    items = valid(build_responses_request(format_msg_for_llm(AgentContext("", history, {})), "gpt-5"))["input"]
    url = f"data:image/png;base64,{PNG}"
    assert items[0] == {"role": "user", "content": [{"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": url, "detail": "auto"}]}
    assert items[1] == {"type": "function_call", "call_id": "call_1", "name": "shot", "arguments": "{}"}
    assert items[2]["type"] == "function_call_output" and items[2]["call_id"] == "call_1"
    assert items[2]["output"] == [{"type": "input_text", "text": "a screenshot\n[image 1 (image/png) follows]"}, {"type": "input_image", "image_url": url, "detail": "auto"}]


def test_chat_options_become_their_responses_names():
    """max_tokens, reasoning_effort, a named tool_choice and response_format's JSON schema take the names the Responses API documents."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}
    formatted = {
        "messages": [{"role": "user", "content": "q"}],
        "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "Location", "schema": schema, "strict": True}},
    }
    body = valid(build_responses_request(formatted, "gpt-5", {"max_tokens": 100, "reasoning_effort": "low", "text": {"verbosity": "low"}}))
    assert body["max_output_tokens"] == 100 and "max_tokens" not in body
    assert body["reasoning"] == {"effort": "low"} and body["include"] == ["reasoning.encrypted_content"]
    assert body["tool_choice"] == {"type": "function", "name": "f"}
    assert body["text"] == {"verbosity": "low", "format": {"type": "json_schema", "name": "Location", "schema": schema, "strict": True}}
    assert "response_format" not in body
    assert body["tools"] == [{"type": "function", "name": "f", "parameters": {"type": "object"}, "description": "d", "strict": False}]


# --- failures ------------------------------------------------------------------------------------------------------


def test_a_streamed_error_event_is_an_llm_error_not_retried():
    """The recorded insufficient_quota error event inside a 200 stream is an LLMError with the server's words, asked once."""
    with LocalServer(lambda r: Reply(chunks=[sse(streams("openai-responses-stream-error-quota.jsonl")[0])], headers=SSE)) as server:
        with pytest.raises(LLMError, match="exceeded your current quota") as info:
            client_for(server, stream=True, max_retries=2)({"messages": [{"role": "user", "content": "q"}]})
    assert (info.value.retryable, len(server.requests)) == (False, 1)


def test_an_error_event_with_its_code_at_the_top_level_keeps_the_retry_rules():
    """An error event shaped as OpenAI's reference documents it (code and message at its top level) is retried for a rate limit."""
    event = {"type": "error", "code": "rate_limit_exceeded", "message": "Rate limit reached", "param": None, "sequence_number": 1}
    with LocalServer(lambda r: Reply(chunks=[sse([event])], headers=SSE)) as server:
        with pytest.raises(LLMError, match="Rate limit reached") as info:
            client_for(server, stream=True, max_retries=1, backoff_factor=0)({"messages": [{"role": "user", "content": "q"}]})
    assert (info.value.status, info.value.retryable, len(server.requests)) == (429, True, 2)


def test_a_failed_response_is_an_llm_error_naming_its_code():
    """A whole body with status "failed" is an LLMError with its error's words, retried when its code is a server error."""
    failed = {"id": "r", "object": "response", "status": "failed", "output": [], "error": {"code": "server_error", "message": "The model failed"}}
    with LocalServer(lambda r: Reply(body=failed)) as server:
        with pytest.raises(LLMError, match="The model failed") as info:
            client_for(server, max_retries=1, backoff_factor=0)({"messages": [{"role": "user", "content": "q"}]})
    assert (info.value.retryable, len(server.requests)) == (True, 2)


def test_context_length_exceeded_is_a_context_overflow_error():
    """OpenAI's recorded context_length_exceeded 400 from /v1/responses is a ContextOverflowError, not retried."""
    with LocalServer(lambda r: Reply(status=400, body=load("openai-error-400-context-length-exceeded.json"))) as server:
        with pytest.raises(ContextOverflowError):
            client_for(server, max_retries=2)({"messages": [{"role": "user", "content": "q"}]})
    assert len(server.requests) == 1


def test_caps_and_secrets_hold_as_in_the_chat_client():
    """A reply past max_reply_bytes, or a streamed event past max_event_bytes, is an LLMError naming the cap; a key the server echoes in an error is masked."""
    with LocalServer(lambda r: whole("openai-responses-reasoning-tool-call.json")) as server:
        with pytest.raises(LLMError, match="max_reply_bytes=1000"):
            client_for(server, max_reply_bytes=1000)({"messages": [{"role": "user", "content": "q"}]})
    first = streams("openai-responses-stream-reasoning-tool-loop.jsonl")[0]
    with LocalServer(lambda r: Reply(chunks=[sse(first)], headers=SSE)) as server:
        with pytest.raises(LLMError, match="exceeds 1000 bytes"):
            client_for(server, stream=True, max_event_bytes=1000)({"messages": [{"role": "user", "content": "q"}]})
    with LocalServer(lambda r: Reply(status=401, body={"error": {"message": "Incorrect API key provided: sk-test-key-0123456789"}})) as server:
        with pytest.raises(LLMError) as info:
            client_for(server)({"messages": [{"role": "user", "content": "q"}]})
    assert "sk-test-key-0123456789" not in str(info.value) and "sk-test-key-0123456789" not in repr(client_for(server))


def test_a_stream_that_stalls_ends_at_the_deadline():
    """The recorded stream held back after its first events ends at deadline_s with an LLMError naming it, not a partial reply."""
    first = streams("openai-responses-stream-reasoning-tool-loop.jsonl")[0]
    gate = threading.Event()
    with LocalServer(lambda r: Reply(chunks=[sse(first[:5]), lambda: gate.wait(20), sse(first[5:])], headers=SSE)) as server:
        try:
            with pytest.raises(LLMError, match="deadline_s=0.5"):
                client_for(server, stream=True, deadline_s=0.5)({"messages": [{"role": "user", "content": "q"}]})
        finally:
            gate.set()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_stream_cut_anywhere_before_its_end_is_never_a_reply(data):
    """The recorded reasoning stream, cut after any event before response.completed, raises a retryable ReplyError; whole, it is a reply."""
    events = streams("openai-responses-stream-reasoning-tool-loop.jsonl")[0]
    cut = data.draw(st.integers(0, len(events) - 1))
    stream = ResponsesStream()
    ended = [stream.add(event) for event in events[:cut]]
    assert not any(ended)
    with pytest.raises(ValueError, match="before response.completed") as info:
        stream.finish(done=False)
    assert info.value.retryable
    whole_stream = ResponsesStream()
    assert [whole_stream.add(e) for e in events][-1] is True and whole_stream.finish().stop_reason == "tool_use"


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_any_cutting_of_several_summaries_emits_thinking_that_joins_into_the_reply(data):
    """gpt-5's recorded five reasoning summaries, streamed in pieces cut anywhere, emit thinking that joins into the reply's (a blank line between two)."""
    body = load("openai-responses-reasoning-tool-call.json")
    reasoning = body["output"][0]
    events: list[dict] = [{"type": "response.output_item.added", "output_index": 0, "item": {**reasoning, "summary": []}}]
    for index, part in enumerate(reasoning["summary"]):
        cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(part["text"]) - 1)), max_size=4)))
        pieces = [part["text"][a:b] for a, b in zip([0, *cuts], [*cuts, len(part["text"])])]
        events.append({"type": "response.reasoning_summary_part.added", "output_index": 0, "summary_index": index, "part": {"type": "summary_text", "text": ""}})
        events += [{"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": index, "delta": p} for p in pieces]
    events += [{"type": "response.output_item.done", "output_index": 0, "item": reasoning}, {"type": "response.completed", "response": body}]
    emitted: list[str] = []
    stream = ResponsesStream(emit=lambda kind, text: emitted.append(text) if kind == "thinking" else None)
    for event in events:
        stream.add(event)
    reply = stream.finish()
    assert "".join(emitted) == message_text(reply, "thinking") == "\n\n".join(p["text"] for p in reasoning["summary"])


def test_odd_parts_of_items_are_read_or_refused_by_name():
    """A reasoning item whose summary is not a list parses, and its turn goes back without reasoning or ids (the API would refuse it); a message whose content is not a list is an LLMError naming it."""
    body = load("openai-responses-reasoning-tool-call.json")
    body["output"][0]["summary"] = True
    with LocalServer(lambda r: Reply(body=body)) as server:
        client, reply = _reasoning_turn(server)
    result = ToolResultMessage("call_gL7JE6GDeGGsFubqO2XGytyO", "update_plan", [TextContent("ok")])
    sent = _next_input(client, [UserMessage([TextContent("q")]), reply, result])
    assert [(i.get("type"), "id" in i) for i in sent] == [(None, False), ("function_call", False), ("function_call_output", False)]
    odd = load("openai-responses-reasoning-message.json")
    odd["output"][1]["content"] = True
    with LocalServer(lambda r: Reply(body=odd)) as server, pytest.raises(LLMError, match="content is not a list but bool"):
        client_for(server)({"messages": [{"role": "user", "content": "q"}]})


def _paths(value, path=()):
    """Every path into a JSON value, the root included."""
    yield path
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        yield from _paths(child, (*path, key))


def _replaced(value, path, new):
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replaced(value[path[0]], path[1:], new)
    return copy


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_value_anywhere_in_a_recorded_reply_is_a_reply_error_or_a_turn_that_goes_back(data):
    """A recorded body with any part replaced by any JSON value raises ValueError (an LLMError from the client) or reads into a turn whose next request can be sent."""
    from strategies import json_values
    from yiemagent.llm.responses import parse_responses_response

    name = data.draw(st.sampled_from(["openai-responses-reasoning-tool-call.json", "openai-responses-reasoning-custom-tool-call.json", "openai-responses-reasoning-message.json"]))
    body = load(name)
    path = data.draw(st.sampled_from(list(_paths(body))))
    hostile = _replaced(body, path, data.draw(json_values))
    try:
        reply = parse_responses_response(hostile, "h")
    except ValueError:
        return
    history = [UserMessage([TextContent("q")]), reply, UserMessage([TextContent("next")])]
    request = valid(build_responses_request(format_msg_for_llm(AgentContext("", history, {})), "gpt-5", REASONING, "h"))
    json.dumps(request, allow_nan=False)
    for index, item in enumerate(request["input"]):
        if item.get("type") == "reasoning":  # with its id and encrypted content, never alone: the item after it, named by its id, followed it
            assert isinstance(item["id"], str) and isinstance(item["encrypted_content"], str)
            assert index + 1 < len(request["input"]) and isinstance(request["input"][index + 1].get("id"), str)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_value_anywhere_in_a_recorded_stream_is_a_reply_error_or_a_reply(data):
    """The recorded reasoning stream with any part of one event replaced by any JSON value raises ValueError (an LLMError from the client) or gives a reply."""
    from strategies import json_values

    events = streams("openai-responses-stream-reasoning-tool-loop.jsonl")[0]
    at = data.draw(st.integers(0, len(events) - 1))
    path = data.draw(st.sampled_from(list(_paths(events[at]))))
    events = [*events[:at], _replaced(events[at], path, data.draw(json_values)), *events[at + 1 :]]
    stream = ResponsesStream()
    try:
        for event in events:
            if stream.add(event):
                break
        reply = stream.finish(done=False)
    except ValueError:
        return
    assert isinstance(reply, AssistantMessage)


def test_a_call_id_sent_twice_goes_back_once_per_call():
    """Two function_call items sharing one call_id (the second renamed on the way in, docs/failures.md) go back once each, each call_id once."""
    body = load("openai-responses-reasoning-tool-call.json")
    body["output"].append({**body["output"][1], "id": "fc_second"})
    with LocalServer(lambda r: Reply(body=body)) as server:
        client, reply = _reasoning_turn(server)
    calls = [i for i in _next_input(client, [UserMessage([TextContent("q")]), reply]) if i.get("type") == "function_call"]
    assert [(c["call_id"], c.get("id")) for c in calls] == [("call_gL7JE6GDeGGsFubqO2XGytyO", body["output"][1]["id"]), ("call_gL7JE6GDeGGsFubqO2XGytyO_2", None)]
