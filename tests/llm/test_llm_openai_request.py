"""What OpenAIClient sends (``build_openai_request``) and how it reads a reply's tool calls and content parts (llm/openai.py).

The request side: a history in OpenAI's own recorded form, text beside tool calls, custom
and legacy calls however they are given (docs/failures.md "OpenAI custom and legacy
calls"), tool results as one string (decision 9), and the body's top-level keys. Every
request is checked against OpenAI's own schema (tests/fixtures). The client: its headers,
its base URL and the provider its replies name, against a real ``http.server`` on
127.0.0.1.
"""

from __future__ import annotations

import copy
import json

import pytest

from helpers import FIXTURES, openai_request_validator
from localserver import LocalServer, Reply
from yiemagent import LLMError, extract_tool_calls
from yiemagent.llm import OpenAIClient
from yiemagent.llm._wire import ReplyError
from yiemagent.llm.openai import build_openai_request, parse_openai_response

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}
FINAL = {"model": "m", "choices": [{"message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}]}
WEATHER = {"name": "get_weather", "arguments": '{"city": "SF"}'}


def load(name: str):
    return json.loads((FIXTURES / name).read_text())


def request(*messages: dict, **keys) -> dict:
    """The body build_openai_request makes of ``messages`` (after a user message), checked against OpenAI's schema."""
    body = build_openai_request({"messages": [{"role": "user", "content": "go"}, *messages], **keys}, "gpt-4o")
    openai_request_validator().validate(body)
    return body


def reply(message: dict):
    return parse_openai_response({"model": "m", "choices": [{"message": {"role": "assistant", **message}, "finish_reason": "tool_calls"}]})


# --- the request -------------------------------------------------------------------


@pytest.mark.spec("11")
def test_a_history_in_openais_recorded_form_goes_as_it_is_with_empty_text_beside_the_calls():
    """The recorded request's assistant message has no content beside its call: it goes with "" (llama.cpp's server answers 500 to null), the rest unchanged."""
    fixture = load("openai-request-tool-roundtrip.json")
    body = build_openai_request({key: value for key, value in fixture.items() if key != "model"}, fixture["model"])
    openai_request_validator().validate(body)
    expected = copy.deepcopy(fixture)
    expected["messages"][1]["content"] = ""
    assert body == expected
    assert "content" not in fixture["messages"][1], "formatted is not modified"


@pytest.mark.spec("11")
@pytest.mark.parametrize(
    "call, sent",
    [
        ({"id": "c1", "type": "function", "function": WEATHER}, {"tool_calls": [{"id": "c1", "type": "function", "function": WEATHER}]}),
        ({"id": "c1", "type": "function_call", "function": WEATHER}, {"function_call": WEATHER}),
    ],
    ids=["tool_calls", "function_call"],
)
@pytest.mark.parametrize("content, content_sent", [("Let me check.", "Let me check."), (None, "")], ids=["text", "null"])
def test_text_beside_a_call_is_kept_and_null_beside_it_goes_as_empty_text(call, sent, content, content_sent):
    """Beside a modern or a legacy call, the model's text goes as it was; null goes as "" (not null: llama.cpp); a legacy call's arguments go as they were."""
    body = request({"role": "assistant", "content": content, "tool_calls": [call]}, {"role": "tool", "tool_call_id": "c1", "content": "sunny", "name": "get_weather"})
    assert body["messages"][1] == {"role": "assistant", "content": content_sent, **sent}


@pytest.mark.spec("7")
def test_a_legacy_call_given_without_id_name_or_arguments_goes_as_a_valid_function_call():
    """A history written by hand from gpt-3.5's replies (which carry no id): the call goes with name "" and arguments "{}" (nothing made up), answered by the function message its empty id names."""
    body = request(
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function_call", "function": {}}]},
        {"role": "tool", "tool_call_id": "", "content": "no tool has no name"},
    )
    assistant, result = body["messages"][1:]
    assert assistant == {"role": "assistant", "content": "", "function_call": {"name": "", "arguments": "{}"}}
    assert result == {"role": "function", "name": "", "content": "no tool has no name"}


@pytest.mark.spec("7")
def test_the_function_message_answering_a_legacy_call_names_the_call_and_holds_its_text_as_one_string():
    """A tool result given as parts, for a call whose tool the history does not name: one string, and the call's own (empty) name, never a made-up one."""
    body = request(
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function_call", "function": {"name": "", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "unknown "}, {"type": "text", "text": "tool"}]},
    )
    assert body["messages"][2] == {"role": "function", "name": body["messages"][1]["function_call"]["name"], "content": "unknown tool"}


@pytest.mark.spec("11")
def test_a_tool_result_given_as_parts_goes_as_one_string_without_our_extra_keys():
    """Decision 9: a tool message's content is one string (a hook may give parts); "name" and "is_error" are ours and not sent."""
    body = request(
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": WEATHER}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "sunny, "}, {"type": "text", "text": "21 C"}], "name": "get_weather", "is_error": False},
    )
    assert body["messages"][2] == {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"}


@pytest.mark.spec("7")
def test_a_custom_call_alone_goes_as_a_custom_call_not_as_a_function_call():
    """One custom call in a message is still a custom call (only a legacy call goes as function_call), answered by a tool message."""
    body = request(
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "custom", "function": {"name": "code_exec", "arguments": '{"input": "ls -l"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "total 0", "name": "code_exec"},
    )
    assert body["messages"][1:] == [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "custom", "custom": {"name": "code_exec", "input": "ls -l"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "total 0"},
    ]


@pytest.mark.spec("7")
def test_a_legacy_call_beside_other_calls_goes_as_a_function_call_among_them():
    """A history holding a legacy call beside a custom and a function call (a FallbackLLM's, a hand-made one): the only form that holds them all is tool_calls, the legacy one as type "function"."""
    body = request(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "custom", "function": {"name": "code_exec", "arguments": '{"input": "ls"}'}},
                {"id": "c2", "type": "function", "function": WEATHER},
                {"id": "c3", "type": "function_call", "function": {"name": "get_time", "arguments": "{}"}},
            ],
        },
        *({"role": "tool", "tool_call_id": f"c{i}", "content": "ok", "name": "t"} for i in (1, 2, 3)),
    )
    assert body["messages"][1]["tool_calls"] == [
        {"id": "c1", "type": "custom", "custom": {"name": "code_exec", "input": "ls"}},
        {"id": "c2", "type": "function", "function": WEATHER},
        {"id": "c3", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
    ]
    assert "function_call" not in body["messages"][1]
    assert [m["role"] for m in body["messages"][2:]] == ["tool", "tool", "tool"]


@pytest.mark.spec("7")
@pytest.mark.parametrize(
    "arguments, text",
    [
        ("{}", ""),  # what formatting sends for a custom call whose input was not text (extraction gave {} and an error)
        ('{"input": ["ls", "-l"]}', '["ls", "-l"]'),
        ('{"input": {"cmd": "ls"}}', '{"cmd": "ls"}'),
    ],
    ids=["no-input", "list", "object"],
)
def test_a_custom_calls_input_goes_as_text_whatever_its_arguments_hold(arguments, text):
    """OpenAI takes a custom call's input only as text: none is "", anything else its JSON text."""
    body = request(
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "custom", "function": {"name": "code_exec", "arguments": arguments}}, {"id": "c2", "type": "function", "function": WEATHER}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok", "name": "code_exec"},
        {"role": "tool", "tool_call_id": "c2", "content": "ok", "name": "get_weather"},
    )
    assert body["messages"][1]["tool_calls"][0]["custom"] == {"name": "code_exec", "input": text}


@pytest.mark.spec("7")
def test_a_custom_call_given_without_id_or_name_goes_with_empty_strings_not_made_up_ones():
    """A hand-made custom call missing its id and name: "" for each (OpenAI's schema needs strings), nothing invented."""
    body = request(
        {"role": "assistant", "content": "", "tool_calls": [{"type": "custom", "function": {"arguments": '{"input": "ls"}'}}, {"id": "c2", "type": "function", "function": WEATHER}]},
        {"role": "tool", "tool_call_id": "", "content": "ok"},
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
    )
    assert body["messages"][1]["tool_calls"][0] == {"id": "", "type": "custom", "custom": {"name": "", "input": "ls"}}


def test_a_message_of_a_role_openai_does_not_define_goes_with_all_its_keys():
    """A format hook's message for a server's own role (Llama's "ipython" on vLLM) is not trimmed to OpenAI's keys."""
    message = {"role": "ipython", "content": "42", "name": "python"}
    body = build_openai_request({"messages": [{"role": "user", "content": "go"}, message]}, "llama-3.1")
    assert body["messages"][1] == message


@pytest.mark.spec("5")
@pytest.mark.parametrize("tools", [[], None], ids=["empty", "null"])
def test_an_empty_tool_list_is_not_sent(tools):
    """A hook that leaves no tools: the key is left out, as format_msg_for_llm does (some servers reject an empty list)."""
    body = build_openai_request({**FORMATTED, "tools": tools, "tool_choice": "none"}, "m")
    assert body == {"model": "m", "tool_choice": "none", "messages": FORMATTED["messages"]}


def test_a_body_can_be_changed_without_changing_the_defaults_it_was_made_from():
    """A client reuses its defaults for every call: a body's nested values are its own, so editing one leaves the next request as it was."""
    defaults = {"response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}}}}
    kept = copy.deepcopy(defaults)
    body = build_openai_request(FORMATTED, "m", defaults)
    body["response_format"]["json_schema"]["strict"] = True
    assert defaults == kept
    assert "strict" not in build_openai_request(FORMATTED, "m", defaults)["response_format"]["json_schema"]


# --- the reply's tool calls and content parts --------------------------------------------


@pytest.mark.spec("7")
@pytest.mark.parametrize("name", ["openai-single-tool-call.json", "openai-custom-tool-call.json"], ids=["function", "custom"])
def test_a_recorded_replys_tool_calls_are_kept_in_its_content_as_the_server_sent_them(name):
    """The §7 format-1 block holds each call as it came (type, id, name, arguments or input), for hooks, sessions and the next request."""
    fixture = load(name)
    message = parse_openai_response(fixture)
    assert message.content == [{"type": "tool_calls", "tool_calls": fixture["choices"][0]["message"]["tool_calls"]}]


@pytest.mark.spec("7")
def test_a_call_sent_without_its_name_or_input_is_kept_with_empty_strings():
    """A custom call with an empty custom object and a function call with no name: "" where the server sent nothing, never a made-up value."""
    message = reply({"tool_calls": [{"id": "c1", "type": "custom", "custom": {}}, {"id": "c2", "type": "function", "function": {"arguments": "{}"}}]})
    assert message.content == [
        {
            "type": "tool_calls",
            "tool_calls": [
                {"id": "c1", "type": "custom", "custom": {"name": "", "input": ""}},
                {"id": "c2", "type": "function", "function": {"name": "", "arguments": "{}"}},
            ],
        }
    ]
    assert [(c.name, c.arguments) for c in extract_tool_calls(message)[1]] == [("", {"input": ""}), ("", {})]


@pytest.mark.spec("7")
def test_a_call_labelled_custom_without_a_custom_object_is_read_from_its_function():
    """A proxy that labels a call "custom" but sends it in the function shape: the call is read from its function object."""
    message = reply({"tool_calls": [{"id": "c1", "type": "custom", "function": {"name": "code_exec", "arguments": '{"input": "ls"}'}}]})
    assert [(c.id, c.name, c.arguments) for c in extract_tool_calls(message)[1]] == [("c1", "code_exec", {"input": "ls"})]


def test_a_tool_calls_entry_that_is_not_an_object_is_refused_naming_it():
    """parse_openai_response's documented ReplyError says which part of the reply was wrong."""
    with pytest.raises(ReplyError, match="^a tool_calls entry is not a JSON object but str 'get_weather'$"):
        reply({"tool_calls": ["get_weather"]})


def test_mistral_thinking_parts_are_joined_into_one_thinking_block_before_the_text():
    """Several thinking parts (text parts or a string each) make one thinking block, their texts joined as they are."""
    message = reply({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "Two and "}]}, {"type": "thinking", "thinking": "two: four."}, {"type": "text", "text": "4"}]})
    assert message.content[0] == {"type": "thinking", "thinking": "Two and two: four."}
    assert [b.text for b in message.content[1:]] == ["4"]


@pytest.mark.parametrize(
    "content, texts",
    [
        (["stray", None, {"type": "text", "text": "hi"}], ["hi"]),
        ({"type": "text", "text": "hi"}, []),
        (42, []),
    ],
    ids=["list-with-non-objects", "object", "number"],
)
def test_content_of_an_unexpected_shape_is_read_without_failing(content, texts):
    """A content list's non-object parts are skipped; content that is neither a string nor a list is no text."""
    message = reply({"content": content})
    assert [b.text for b in message.content] == texts
    assert all(isinstance(b.text, str) for b in message.content)


# --- the client ------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_reply_names_the_servers_host_as_its_provider(stream):
    """OpenAIClient's provider is the base URL's host, on the client (LLMCallStartEvent reads it) and on every reply, whole or streamed."""
    chunk = {"model": "m", "choices": [{"index": 0, "delta": {"content": "done"}, "finish_reason": "stop"}]}
    sse = Reply(body=b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n", headers={"Content-Type": "text/event-stream"})
    with LocalServer(lambda r: sse if stream else Reply(body=FINAL)) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", max_retries=0, stream=stream)
        message = client(FORMATTED)
    assert client.provider == "127.0.0.1"
    assert (message.provider, message.content[0].text) == ("127.0.0.1", "done")


def test_the_request_is_sent_as_json_with_the_key_as_a_bearer_token():
    """Content-Type application/json (FastAPI-based servers such as vLLM read the body only then) and Authorization, beside the caller's headers."""
    with LocalServer(lambda r: Reply(body=FINAL)) as server:
        OpenAIClient(f"{server.url}/v1", "m", "sk-test", max_retries=0, headers={"HTTP-Referer": "https://example.org"})(FORMATTED)
        headers = {k.lower(): v for k, v in server.requests[0].headers.items()}
    assert headers["content-type"] == "application/json"
    assert headers["authorization"] == "Bearer sk-test" and headers["http-referer"] == "https://example.org"


@pytest.mark.parametrize(
    "suffix, base, path",
    [("/v1/", "/v1", "/v1/chat/completions"), ("/v1//", "/v1", "/v1/chat/completions"), ("/team/X/", "/team/X", "/team/X/chat/completions")],
    ids=["slash", "slashes", "path-ending-in-X"],
)
def test_a_base_urls_trailing_slashes_are_dropped_and_nothing_else(suffix, base, path):
    """client.base_url (and the repr) loses the trailing slashes only; the request goes to the path as given."""
    with LocalServer(lambda r: Reply(body=FINAL)) as server:
        client = OpenAIClient(f"{server.url}{suffix}", "m", max_retries=0)
        client(FORMATTED)
        assert client.base_url == f"{server.url}{base}" and f"base_url='{server.url}{base}'" in repr(client)
        assert server.requests[0].path == path


def test_by_default_the_second_retry_waits_about_a_second_as_backoff_factor_0_5_makes_it():
    """docs/api.md: backoff_factor=0.5, so the second retry waits 0.5 * 2 s (and up to a quarter second of jitter).

    The deadline of 2.9 s leaves room for that wait and refuses a longer one ("not retried: the wait ... would
    pass the call's deadline_s"): the call ends by giving up after its 3 attempts, not by refusing the wait.
    """
    with LocalServer(lambda r: Reply(status=503, body={"error": {"message": "overloaded"}})) as server:
        with pytest.raises(LLMError) as info:
            OpenAIClient(f"{server.url}/v1", "m", deadline_s=2.9)(FORMATTED)
        assert len(server.requests) == 3
    assert "gave up after 3 attempts" in str(info.value) and "not retried" not in str(info.value)


# --- the request's edges the sixth mutation pass found untested (docs/mutation.md) --------

PNG = "iVBORw0KGgo="


def test_a_reasoning_echo_goes_back_only_when_both_its_api_and_its_provider_are_this_clients():
    """An echo of another API is not sent even to the same provider, and an echo of calls beside a message without calls is dropped (docs/streaming.md "Reasoning sent back")."""
    def sent(echo: dict, **message) -> dict:
        formatted = {"messages": [{"role": "assistant", "content": "a", "reasoning_echo": echo, **message}]}
        return build_openai_request(formatted, "m", provider="h")["messages"][0]

    fields = {"reasoning_content": "thought"}
    assert sent({"api": "openai-chat", "provider": "h", "fields": fields})["reasoning_content"] == "thought"
    assert "reasoning_content" not in sent({"api": "anthropic-messages", "provider": "h", "fields": fields})
    assert sent({"api": "openai-chat", "provider": "h", "tool_calls": [{"google": {}}]}) == {"role": "assistant", "content": "a"}


def test_a_user_content_part_that_is_not_an_image_goes_as_it_is_whatever_keys_it_holds():
    """Only an ``image_url`` part is read as an image: a text part holding an ``image_url`` key, and a bare string, go unchanged (docs/api.md "Images")."""
    bmp = "data:image/bmp;base64,Qk0="
    parts = [{"type": "text", "text": "x", "image_url": bmp}, "plain"]
    body = build_openai_request({"messages": [{"role": "user", "content": parts}]}, "m")
    assert body["messages"][0]["content"] == parts


def test_an_image_openai_refuses_goes_as_a_note_naming_the_chat_completions_api():
    """The note sent instead of an image of a type OpenAI refuses names its API exactly (docs/api.md "Images")."""
    part = {"type": "image_url", "image_url": {"url": "data:image/bmp;base64,Qk0="}}
    body = build_openai_request({"messages": [{"role": "user", "content": [part]}]}, "m")
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "[an image of type image/bmp was not sent: OpenAI's chat completions API takes only image/png, image/jpeg, image/gif, image/webp]"}
    ]


def test_tool_images_of_a_result_without_id_or_name_are_labelled_with_an_empty_id_and_tool():
    """A tool result's images without a call id or tool name get the label's empty id and the word "tool", never "None" (docs/api.md "Images")."""
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    formatted = {"messages": [{"role": "user", "content": "go"}, {"role": "tool", "content": "r", "images": [image]}]}
    (_, _, images) = build_openai_request(formatted, "m")["messages"]
    assert images["content"][0] == {"type": "text", "text": "Image 1 of the result of tool call  (tool):"}


def test_each_batch_of_tool_results_gets_its_own_message_of_images_after_it():
    """Two batches holding images, with a message between them, each get one user message of images right after their results (docs/api.md "Images")."""
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    calls = [{"id": "c1", "type": "function", "function": WEATHER}]
    again = [{"id": "c2", "type": "function", "function": WEATHER}]
    body = request(
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "name": "shot", "content": "r", "images": [image]},
        {"role": "assistant", "content": None, "tool_calls": again},
        {"role": "tool", "tool_call_id": "c2", "name": "shot", "content": "r", "images": [image]},
    )
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "user", "assistant", "tool", "user"]
    assert body["messages"][6]["content"][0]["text"] == "Image 1 of the result of tool call c2 (shot):"


@pytest.mark.parametrize("json_schema", [None, {"name": "City"}, "City"])
def test_a_json_schema_format_without_a_schema_goes_to_llama_cpp_as_json_object_with_an_empty_schema(json_schema):
    """A ``json_schema`` ``response_format`` without a schema object is sent in llama-cpp-python's form with ``{}`` (docs/api.md "Native typed answers")."""
    from yiemagent.llm._openai_request import sent_response_format

    wanted = {"type": "json_schema"} if json_schema is None else {"type": "json_schema", "json_schema": json_schema}
    body = {"response_format": wanted}
    sent_response_format(body, "json_object")
    assert body["response_format"] == {"type": "json_object", "schema": {}}
