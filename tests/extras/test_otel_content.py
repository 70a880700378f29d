"""What OTelSink's spans say with capture_content: the GenAI conventions' message shapes and names (docs/tracing.md "Attributes", "Message content")."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from yiemagent.llm import OpenAIClient
from yiemagent.otel._content import (
    finish_reason,
    input_messages,
    output_messages,
    provider_name,
    system_instructions,
    tool_arguments,
)
from yiemagent.types import ApprovalMessage, AssistantMessage, ImageContent, TextContent, ToolResultMessage, UserMessage

A_CALL = {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"city": "Zürich"}}


def test_every_kind_of_message_a_round_sent_is_recorded_in_the_conventions_shape():
    """gen_ai.input.messages: user text and images, the model's reasoning, texts and calls, tool answers, as role and parts; an approval step is not sent, so not recorded."""
    sent = [
        UserMessage([TextContent("what is in this café?"), ImageContent("aGk=", "image/png")]),
        AssistantMessage(
            [
                {"type": "thinking", "thinking": "look it up", "signature": "s"},
                {"type": "redacted_thinking", "data": "opaque", "thinking": "not shown"},  # redacted: not reasoning
                {"type": "text", "text": "cited text", "citations": [{"url": "https://example.org"}]},
                TextContent("let me look"),
                A_CALL,
            ],
            stop_reason="tool_use",
        ),
        ApprovalMessage("c1", "lookup", "approved", {"city": "Zürich"}),
        ToolResultMessage("c1", "lookup", [TextContent("a cat")]),
    ]
    expected = [
        {"role": "user", "parts": [
            {"type": "text", "content": "what is in this café?"},
            {"type": "blob", "modality": "image", "mime_type": "image/png", "content": "aGk="},
        ]},
        {"role": "assistant", "parts": [
            {"type": "reasoning", "content": "look it up"},
            {"type": "text", "content": "cited text"},
            {"type": "text", "content": "let me look"},
            {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"city": "Zürich"}},
        ]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "a cat"}]},
    ]
    recorded = input_messages(sent)
    assert json.loads(recorded) == expected
    assert recorded == json.dumps(expected, ensure_ascii=False)  # as json.dumps writes it: text readable, not \u-escaped


def test_a_round_sent_again_records_the_same_text_from_the_runs_cache():
    """A run's later round sends the same messages again: their recorded text is the same as when first converted."""
    sent = [UserMessage([TextContent("hi")]), AssistantMessage([TextContent("hello")], stop_reason="stop")]
    cache: dict = {}
    first = input_messages(sent[:1], cache)
    assert input_messages(sent, cache) == input_messages(sent) and input_messages(sent[:1], cache) == first


def test_a_value_json_cannot_say_is_recorded_by_its_repr():
    """What JSON cannot hold (a prepare_context hook's own text object, a hook's argument) is recorded as its repr, not lost."""
    assert json.loads(input_messages([UserMessage([TextContent(Decimal("1.5"))])])) == [
        {"role": "user", "parts": [{"type": "text", "content": "Decimal('1.5')"}]}
    ]
    assert json.loads(tool_arguments({"amount": Decimal("2.50")})) == {"amount": "Decimal('2.50')"}
    assert tool_arguments({"city": "Zürich"}) == '{"city": "Zürich"}'


def test_a_reply_is_recorded_with_its_finish_reason_in_the_conventions_words():
    """gen_ai.output.messages: the reply's parts and its finish reason ("tool_use" is "tool_call")."""
    reply = AssistantMessage([TextContent("checking"), A_CALL], stop_reason="tool_use")
    assert json.loads(output_messages(reply)) == [{
        "role": "assistant",
        "parts": [{"type": "text", "content": "checking"}, {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"city": "Zürich"}}],
        "finish_reason": "tool_call",
    }]
    cache: dict = {}
    assert output_messages(reply, cache) == output_messages(reply)
    assert input_messages([reply], cache) == input_messages([reply])  # the next round sends the reply it kept


@pytest.mark.parametrize("stop_reason, expected", [
    ("tool_use", "tool_call"), ("stop", "stop"), ("length", "length"), ("content_filter", "content_filter"), ("error", "error"), (None, "stop"),
])
def test_a_stop_reason_becomes_the_conventions_finish_reason(stop_reason, expected):
    """Stop reasons are kept but tool_use, which the conventions call tool_call; a reply without one finished with "stop"."""
    assert finish_reason(stop_reason) == expected
    reply = AssistantMessage([TextContent("x")], stop_reason=stop_reason)
    assert json.loads(output_messages(reply))[0]["finish_reason"] == expected


def test_the_system_prompt_is_recorded_as_one_text_part_masked():
    """gen_ai.system_instructions: the system prompt as a list of one text part, a live client's key in it masked."""
    key = "sk-test-system-prompt-0123456789SECRET"
    client = OpenAIClient(base_url="http://127.0.0.1:9/v1", api_key=key, model="m")
    assert json.loads(system_instructions(f"be brief, café; key {key}")) == [{"type": "text", "content": "be brief, café; key ***"}]
    del client


@pytest.mark.parametrize("provider, api, expected", [
    ("openai", None, "openai"),
    ("OpenAI", None, "openai"),
    ("api.anthropic.com", None, "anthropic"),
    ("Mistral", None, "mistral_ai"),
    ("generativelanguage.googleapis.com", None, "gcp.gemini"),
    ("my-resource.openai.azure.com", None, "azure.ai.openai"),
    ("My-Resource.OpenAI.Azure.com", "openai-chat", "azure.ai.openai"),
    ("bedrock-runtime.us-east-1.amazonaws.com", None, "aws.bedrock"),
    ("s3.us-east-1.amazonaws.com", None, None),
    ("bedrock.example.org", None, None),
    ("127.0.0.1:8080", "openai-chat", "openai"),
    ("localhost", "anthropic-messages", "anthropic"),
    ("localhost", None, None),
    (None, "openai-chat", "openai"),
    ("", "anthropic-messages", "anthropic"),
    (None, "something-else", None),
    (None, None, None),
])
def test_the_provider_is_named_as_the_conventions_name_it(provider, api, expected):
    """gen_ai.provider.name: a known provider or host by its conventions' name, Azure and Bedrock hosts by their suffix, else the wire protocol's flavour."""
    assert provider_name(provider, api) == expected
