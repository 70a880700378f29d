"""The request AnthropicClient sends: the Messages API body built from the OpenAI-format dict, and the HTTP around it.

Shapes as Anthropic's Messages API takes them (the recorded accepted request in
tests/fixtures/anthropic-request-tool-result.json; docs.anthropic.com "Messages"): image
blocks with a base64 or url ``source``, ``tool_result`` blocks with ``is_error``,
``input_schema`` tools, ``tool_choice`` as an object, ``system`` apart. The client's own
defaults are those of docs/api.md. Bodies are read as a real local HTTP server received
them, or as ``build_anthropic_request`` (the module's public function) returns them.
"""

from __future__ import annotations

import copy

import pytest

from localserver import LocalServer, Reply
from yiemagent import AgentContext, AssistantMessage, ImageContent, LLMError, TextContent, UserMessage, format_msg_for_llm
from yiemagent.llm import AnthropicClient
from yiemagent.llm.anthropic import build_anthropic_request

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}
REPLY = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-haiku-4-5",
    "content": [{"type": "text", "text": "Hello."}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 2},
}
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"


def build(*messages, **formatted):
    return build_anthropic_request({"messages": list(messages), **formatted}, "claude-haiku-4-5", 1024)


def user_blocks(*parts) -> list:
    """The content of the one user turn a user message with these OpenAI-format parts becomes."""
    body = build({"role": "user", "content": list(parts)})
    assert [m["role"] for m in body["messages"]] == ["user"]
    return body["messages"][0]["content"]


# --- the client's request on the wire ------------------------------------------------


def test_a_default_client_posts_its_model_1024_max_tokens_and_anthropics_headers_asking_for_a_whole_reply():
    """What a real server receives from ``AnthropicClient(model, key)``: the model, max_tokens=1024 (docs/api.md), no stream, JSON with the API's version and key."""
    with LocalServer(lambda request: Reply(body=REPLY)) as server:
        reply = AnthropicClient("claude-haiku-4-5", "sk-ant-0123456789", base_url=server.url)(FORMATTED)
    assert reply.content == [TextContent("Hello.")]
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.json() == {"model": "claude-haiku-4-5", "max_tokens": 1024, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    headers = {name.lower(): value for name, value in request.headers.items()}
    assert headers["content-type"].lower() == "application/json"  # names and media types are case-insensitive (RFC 9110)
    assert headers["anthropic-version"] == "2023-06-01"
    assert headers["x-api-key"] == "sk-ant-0123456789"


def test_a_clients_max_tokens_and_model_are_the_ones_in_the_body():
    """``max_tokens`` given to the client is the body's, beside its model."""
    with LocalServer(lambda request: Reply(body=REPLY)) as server:
        AnthropicClient("claude-opus-4-1", None, base_url=server.url, max_tokens=64000)(FORMATTED)
    body = server.requests[0].json()
    assert (body["model"], body["max_tokens"]) == ("claude-opus-4-1", 64000)


def test_the_default_base_url_is_anthropics_api():
    """Without ``base_url`` the client posts to https://api.anthropic.com/v1/messages (docs/api.md)."""
    assert AnthropicClient("claude-haiku-4-5", "sk-ant-0123456789").url == "https://api.anthropic.com/v1/messages"


def test_a_base_urls_path_is_kept_whole_and_its_trailing_slash_dropped():
    """A gateway's path prefix, given with a trailing slash, is kept to its last character; the slash is not doubled nor kept."""
    with LocalServer(lambda request: Reply(body=REPLY)) as server:
        client = AnthropicClient("claude-haiku-4-5", None, base_url=f"{server.url}/gateway/X/")
        client(FORMATTED)
    assert server.requests[0].path == "/gateway/X/v1/messages"
    assert client.base_url == f"{server.url}/gateway/X"
    assert repr(client) == f"AnthropicClient(model='claude-haiku-4-5', base_url='{server.url}/gateway/X', api_key=None)"


def test_a_key_in_the_base_urls_query_is_masked():
    """A gateway key carried in ``base_url`` (``?key=...``) is a credential: the client's repr masks it."""
    client = AnthropicClient("claude-haiku-4-5", None, base_url="https://gateway.example/anthropic?key=gw-secret-0123456789")
    assert "gw-secret-0123456789" not in repr(client)
    assert "key=***" in repr(client)


def test_max_event_bytes_given_to_the_client_caps_a_whole_reply():
    """``max_event_bytes`` reaches the transport: a whole reply over it is an LLMError naming that cap."""
    body = {**REPLY, "content": [{"type": "text", "text": "x" * 5000}]}
    with LocalServer(lambda request: Reply(body=body)) as server:
        with pytest.raises(LLMError) as info:
            AnthropicClient("claude-haiku-4-5", None, base_url=server.url, max_retries=0, max_event_bytes=2048)(FORMATTED)
    assert "max_event_bytes=2048" in str(info.value)


def test_by_default_a_failing_call_is_tried_three_times_with_a_backoff_that_fits_a_three_second_deadline():
    """Defaults of docs/api.md: two retries (three attempts), backoff 0.5 (the second retry waits about 1 s, under a 3 s deadline_s), then the error."""
    with LocalServer(lambda request: Reply(status=503, body={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})) as server:
        with pytest.raises(LLMError) as info:
            AnthropicClient("claude-haiku-4-5", None, base_url=server.url, deadline_s=3.0)(FORMATTED)
    assert len(server.requests) == 3
    assert "gave up after 3 attempts" in str(info.value)


def test_by_default_a_server_asking_to_wait_over_a_minute_is_not_waited_for():
    """``max_retry_delay_ms`` is 60000 by default: a ``retry-after-ms`` of 60001 ends the call at once, naming that limit."""
    reply = Reply(status=429, body={"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}, headers={"retry-after-ms": "60001"})
    with LocalServer(lambda request: reply) as server:
        with pytest.raises(LLMError) as info:
            AnthropicClient("claude-haiku-4-5", None, base_url=server.url, deadline_s=10.0)(FORMATTED)
    assert len(server.requests) == 1
    assert "more than max_retry_delay_ms=60000; not retried" in str(info.value)


# --- user content: text and images ---------------------------------------------------


def test_a_user_image_becomes_a_base64_image_block_with_its_media_type():
    """An ``ImageContent`` reaches Anthropic as ``{"type": "image", "source": {"type": "base64", "media_type", "data"}}`` after its text."""
    message = UserMessage([TextContent("What is this?"), ImageContent(PNG, "image/png")])
    body = build_anthropic_request(format_msg_for_llm(AgentContext("", [message], {}), None), "claude-haiku-4-5", 1024)
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            ],
        }
    ]


def test_an_image_url_becomes_a_url_image_block():
    """An OpenAI ``image_url`` part with a web address (object or bare string) becomes an image with a ``url`` source."""
    assert user_blocks(
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "image_url", "image_url": "https://example.com/dog.png"},
    ) == [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/dog.png"}},
    ]


def test_only_a_data_url_marked_base64_is_sent_as_base64_data():
    """A web address holding ``;base64,`` in its path, and a data URL that is not base64, go as the URLs they are."""
    web = "https://cdn.example/img;base64,abc.png"
    plain = "data:image/svg+xml,<svg xmlns='http://www.w3.org/2000/svg'/>"
    assert user_blocks({"type": "image_url", "image_url": {"url": web}}, {"type": "image_url", "image_url": {"url": plain}}) == [
        {"type": "image", "source": {"type": "url", "url": web}},
        {"type": "image", "source": {"type": "url", "url": plain}},
    ]


def test_a_data_urls_media_type_ends_at_its_first_base64_marker_and_the_rest_is_its_data():
    """The builder does not judge the data: what follows the first ``;base64,`` goes as it is (the server says what is wrong with it)."""
    url = "data:image/png;base64,AAAA;base64,BBBB"
    assert user_blocks({"type": "image_url", "image_url": {"url": url}}) == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA;base64,BBBB"}}
    ]


def test_an_image_part_without_an_address_is_sent_with_an_empty_url_not_a_crash():
    """An ``image_url`` part with no url, or none at all, builds (an empty url, nothing invented); Anthropic answers with its own error."""
    assert user_blocks({"type": "image_url", "image_url": {}}, {"type": "image_url"}) == [
        {"type": "image", "source": {"type": "url", "url": ""}},
        {"type": "image", "source": {"type": "url", "url": ""}},
    ]


def test_user_parts_keep_their_order_and_what_anthropic_cannot_take_is_left_out():
    """Text and image parts go in their order; a part that is not an object, or of another type, is skipped and the parts after it still go."""
    assert user_blocks(
        {"type": "text", "text": "first"},
        "stray",
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{PNG}"}},
        {"type": "text", "text": "last"},
    ) == [
        {"type": "text", "text": "first"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": PNG}},
        {"type": "text", "text": "last"},
    ]


def test_empty_user_text_is_not_sent_since_anthropic_refuses_empty_text_blocks():
    """Anthropic answers 400 "text content blocks must be non-empty": an empty user message, or an empty text part beside an image, sends no text block."""
    image = UserMessage([TextContent(""), ImageContent(PNG, "image/png")])
    body = build_anthropic_request(format_msg_for_llm(AgentContext("", [UserMessage([TextContent("")]), image], {}), None), "claude-haiku-4-5", 1024)
    assert body["messages"] == [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}]
    assert user_blocks({"type": "text", "text": ""}, {"type": "text"}, {"type": "text", "text": "kept"}) == [{"type": "text", "text": "kept"}]


def test_a_user_message_without_content_sends_nothing():
    """``content`` None (or anything neither text nor a list of parts) adds no turn; the next user message is the first."""
    body = build({"role": "user", "content": None}, {"role": "user", "content": {"type": "text", "text": "lost"}}, {"role": "user", "content": "hi"})
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


# --- system, tool results, the turn to continue ----------------------------------------


def test_system_and_developer_messages_join_into_the_system_prompt():
    """OpenAI's ``system`` and ``developer`` messages both go to Anthropic's top-level ``system``, a blank line apart."""
    body = build({"role": "system", "content": "Be brief."}, {"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "hi"})
    assert body["system"] == "Be brief.\n\nAnswer in French."
    assert [m["role"] for m in body["messages"]] == ["user"]


def test_a_tool_result_is_an_error_only_when_its_message_says_so():
    """A ``tool`` message in plain OpenAI form (no ``is_error``) is a ``tool_result`` with ``is_error: false``; ``is_error: true`` is kept."""
    call = {"id": "toolu_01", "type": "function", "function": {"name": "getWeather", "arguments": '{"city": "Paris"}'}}
    body = build(
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [call, {**call, "id": "toolu_02"}]},
        {"role": "tool", "tool_call_id": "toolu_01", "content": "Sunny, 22°C"},
        {"role": "tool", "tool_call_id": "toolu_02", "content": "service down", "is_error": True},
    )
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "Sunny, 22°C", "is_error": False},
            {"type": "tool_result", "tool_use_id": "toolu_02", "content": "service down", "is_error": True},
        ],
    }


def test_a_final_assistant_turn_after_tool_results_loses_its_trailing_whitespace():
    """The turn Anthropic is to continue is the last one, however many came before: its text is cut at the end, or the turn dropped if nothing is left."""
    history = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "toolu_01", "type": "function", "function": {"name": "getWeather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "toolu_01", "content": "Sunny"},
    ]
    body = build(*history, {"role": "assistant", "content": "It is sunny \n"})
    assert body["messages"][-1] == {"role": "assistant", "content": [{"type": "text", "text": "It is sunny"}]}
    assert body["messages"][1]["content"][-1]["type"] == "tool_use"
    body = build(*history, {"role": "assistant", "content": " \n"})
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]


def test_a_dict_without_messages_builds_a_body_with_none():
    """``{}`` or a dict holding only a system message builds (the server says a message is needed); ``messages`` is an empty list."""
    assert build_anthropic_request({}, "claude-haiku-4-5", 1024) == {"model": "claude-haiku-4-5", "max_tokens": 1024, "messages": []}
    assert build({"role": "system", "content": "Be brief."})["messages"] == []


# --- assistant blocks sent back --------------------------------------------------------


def test_thinking_blocks_sent_back_are_the_signed_ones_and_the_redacted_ones_with_data():
    """Of ``thinking_blocks``, a signed thinking block and a redacted one holding its data go back, in order; the rest (not objects, unsigned, no data) is skipped."""
    body = build(
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "Hello.",
            "thinking_blocks": [
                "stray",
                {"type": "redacted_thinking"},
                {"type": "thinking", "thinking": "unsigned, another provider's"},
                {"type": "thinking", "thinking": "Let me greet.", "signature": "sig-1"},
                {"type": "redacted_thinking", "data": "EncryptedData"},
            ],
        },
        {"role": "user", "content": "again"},
    )
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Let me greet.", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "EncryptedData"},
        {"type": "text", "text": "Hello."},
    ]


def test_a_signed_thinking_block_that_came_without_its_text_goes_back_with_empty_text():
    """A whole reply's thinking block may lack ``thinking`` (the stream reader makes it ""): it goes back as "" beside its signature, a string as Anthropic's schema has it."""
    message = AssistantMessage([{"type": "thinking", "signature": "sig-1"}, TextContent("Hello.")])
    body = build_anthropic_request(format_msg_for_llm(AgentContext("", [UserMessage([TextContent("hi")]), message, UserMessage([TextContent("again")])], {}), None), "m", 1024)
    assert body["messages"][1]["content"] == [{"type": "thinking", "thinking": "", "signature": "sig-1"}, {"type": "text", "text": "Hello."}]


def test_content_blocks_go_back_in_order_without_empty_text_and_with_citations_only_when_there_are_some():
    """``content_blocks`` (a reply with server tools or citations): redacted thinking kept; an empty text, a block that is not an object skipped; ``citations`` only as a non-empty list."""
    citation = {"type": "web_search_result_location", "url": "https://example.com", "title": "Example", "encrypted_index": "Eo8B", "cited_text": "Example"}
    body = build(
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "Found it. See below.",
            "content_blocks": [
                "stray",
                {"type": "redacted_thinking", "data": "EncryptedData"},
                {"type": "text", "text": ""},
                {"type": "text", "text": "Found it.", "citations": [citation]},
                {"type": "text", "text": " See", "citations": []},
                {"type": "text", "text": " below.", "citations": "none"},
            ],
        },
        {"role": "user", "content": "thanks"},
    )
    assert body["messages"][1]["content"] == [
        {"type": "redacted_thinking", "data": "EncryptedData"},
        {"type": "text", "text": "Found it.", "citations": [citation]},
        {"type": "text", "text": " See"},
        {"type": "text", "text": " below."},
    ]


def test_a_cited_text_without_server_blocks_goes_back_block_for_block_with_its_citations():
    """A reply citing a document (no server tool): each text block goes back with its own citations, a whitespace segment joined to the block before it."""
    first = {"type": "char_location", "cited_text": "The grass is green.", "document_index": 0, "document_title": "Notes", "start_char_index": 0, "end_char_index": 20}
    second = {"type": "char_location", "cited_text": "The sky is blue.", "document_index": 0, "document_title": "Notes", "start_char_index": 20, "end_char_index": 36}
    reply = AssistantMessage([TextContent("The grass is green", [first]), TextContent(" ", []), TextContent("and the sky is blue", [second]), TextContent(".", [])])
    body = build_anthropic_request(format_msg_for_llm(AgentContext("", [UserMessage([TextContent("colours?")]), reply, UserMessage([TextContent("thanks")])], {}), None), "m", 1024)
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "The grass is green ", "citations": [first]},
            {"type": "text", "text": "and the sky is blue", "citations": [second]},
            {"type": "text", "text": "."},
        ],
    }
    assert body["messages"][2] == {"role": "user", "content": [{"type": "text", "text": "thanks"}]}


# --- tools, tool_choice and the other keys ---------------------------------------------


def test_a_function_declared_without_description_or_parameters_gets_an_empty_description_and_an_object_schema():
    """OpenAI makes both optional; Anthropic needs ``input_schema`` of type object and a string description: "" and ``{"type": "object"}``, nothing invented."""
    body = build({"role": "user", "content": "hi"}, tools=[{"type": "function", "function": {"name": "ping"}}])
    assert body["tools"] == [{"name": "ping", "description": "", "input_schema": {"type": "object"}}]


def test_tool_entries_anthropic_cannot_take_are_left_out_and_the_rest_kept_in_order():
    """An entry that is not an object, has no type, or is a ``function`` without its function object is skipped; OpenAI functions and Anthropic's typed tools after it still go."""
    web_search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}
    body = build(
        {"role": "user", "content": "hi"},
        tools=[
            "stray",
            {"name": "no_type"},
            {"type": "function", "name": "flat_form", "parameters": {"type": "object"}},
            {"type": "function", "function": {"name": "getTime", "description": "The time.", "parameters": {"type": "object", "properties": {}}}},
            web_search,
        ],
    )
    assert body["tools"] == [{"name": "getTime", "description": "The time.", "input_schema": {"type": "object", "properties": {}}}, web_search]


def test_no_tools_key_is_sent_when_no_tool_is_declared():
    """An empty ``tools`` list, or one holding nothing Anthropic takes, sends no ``tools`` key (as ``format_msg_for_llm`` leaves it out)."""
    assert "tools" not in build({"role": "user", "content": "hi"}, tools=[])
    assert "tools" not in build({"role": "user", "content": "hi"}, tools=[{"type": "function"}])


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"type": "auto"}),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        ({"type": "function", "function": {"name": "getWeather"}}, {"type": "tool", "name": "getWeather"}),
        ({"type": "any", "disable_parallel_tool_use": True}, {"type": "any", "disable_parallel_tool_use": True}),
    ],
)
def test_tool_choice_is_translated_to_anthropics_form(choice, expected):
    """OpenAI's "auto", "required", "none" and a named function become Anthropic's objects; a choice already in Anthropic's form goes as it is."""
    body = build({"role": "user", "content": "hi"}, tools=[{"type": "function", "function": {"name": "getWeather"}}], tool_choice=choice)
    assert body["tool_choice"] == expected


def test_parallel_tool_calls_is_not_sent_since_anthropic_has_no_such_field():
    """OpenAI's ``parallel_tool_calls`` is dropped (Anthropic refuses unknown fields); other keys of the dict go as they are."""
    body = build({"role": "user", "content": "hi"}, parallel_tool_calls=False, temperature=0.2)
    assert "parallel_tool_calls" not in body
    assert body["temperature"] == 0.2


def test_a_body_shares_no_nested_option_with_the_defaults():
    """Editing a built body's nested option (``thinking``) leaves the defaults, and so the next request, as they were."""
    defaults = {"thinking": {"type": "enabled", "budget_tokens": 2048}, "metadata": {"user_id": "u-1"}}
    kept = copy.deepcopy(defaults)
    body = build_anthropic_request(FORMATTED, "claude-haiku-4-5", 4096, defaults)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    body["thinking"]["budget_tokens"] = 1
    body["metadata"]["user_id"] = "someone else"
    assert defaults == kept
    assert build_anthropic_request(FORMATTED, "claude-haiku-4-5", 4096, defaults)["thinking"]["budget_tokens"] == 2048


def _refuses_blank_text(request) -> Reply:
    """An Anthropic-like server: 400 for a text block of whitespace alone, as Anthropic answers; else a tool call, then an answer."""
    body = request.json()
    texts = [b.get("text") for m in body["messages"] if isinstance(m["content"], list) for b in m["content"] if b.get("type") == "text"]
    if any(not t.strip() for t in texts):
        return Reply(status=400, body={"type": "error", "error": {"type": "invalid_request_error", "message": "messages: text content blocks must contain non-whitespace text"}})
    if body["messages"][-1]["content"][-1].get("type") == "tool_result":
        return Reply(body={**REPLY, "content": [{"type": "text", "text": "It is sunny."}], "stop_reason": "end_turn"})
    # what models write: a blank line before the call
    call = {"type": "tool_use", "id": "toolu_01", "name": "getWeather", "input": {"city": "Paris"}}
    return Reply(body={**REPLY, "content": [{"type": "text", "text": "\n\n"}, call], "stop_reason": "tool_use"})


def test_a_reply_whose_text_is_only_whitespace_does_not_break_the_next_request():
    """Anthropic refuses a text block of whitespace alone; a model's "\\n\\n" before a call is not sent back, so the run goes on to its answer."""
    from yiemagent import YiemAgent, run_agent, take_response, shutdown

    with LocalServer(_refuses_blank_text) as server:
        agent = YiemAgent(llm_call=AnthropicClient("k", base_url=server.url, stream=False), agent_event_sink=None)
        try:
            run_agent(agent, "weather in Paris?")
            reply = take_response(agent, timeout=30)
        finally:
            shutdown(agent)
    assert reply.stop_reason == "stop" and reply.content == [TextContent("It is sunny.")]
    assert len(server.requests) == 2


def test_text_of_whitespace_alone_is_left_out_of_assistant_turns_but_a_users_is_sent():
    """In an assistant turn, whole or block by block, blank text is not sent (a turn of nothing else is left out); a user's is, for Anthropic to name."""
    call = {"id": "toolu_01", "type": "function", "function": {"name": "getWeather", "arguments": "{}"}}
    body = build(
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "\n\n", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "toolu_01", "content": "Sunny"},
        {"role": "assistant", "content": " \n "},
        {"role": "user", "content": "and tomorrow?"},
        {"role": "assistant", "content_blocks": [{"type": "text", "text": " "}, {"type": "text", "text": "Let me see."}, {**call, "id": "toolu_02"}], "tool_calls": []},
        {"role": "tool", "tool_call_id": "toolu_02", "content": "Rain"},
        {"role": "user", "content": "  "},
    )
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert body["messages"][1]["content"] == [{"type": "tool_use", "id": "toolu_01", "name": "getWeather", "input": {}}]
    assert body["messages"][2]["content"][1:] == [{"type": "text", "text": "and tomorrow?"}]  # the blank turn between is gone: one user turn
    assert [b["type"] for b in body["messages"][3]["content"]] == ["text", "tool_use"]
    assert body["messages"][4]["content"][-1] == {"type": "text", "text": "  "}
