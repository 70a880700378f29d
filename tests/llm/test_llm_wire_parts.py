"""What both clients read off the wire the same way (llm/_wire.py): error bodies, token counts, text parts, previews."""

from __future__ import annotations

import pytest

from yiemagent import AssistantMessage, TextContent
from yiemagent.llm._wire import ReplyError, content_text, error_code, join_url, message_text, payload_error, require_object, server_message, token_count


@pytest.mark.parametrize(
    "value, shown",
    [
        ("x" * 78, repr("x" * 78)),  # 80 characters with its quotes: shown whole
        ("x" * 79, repr("x" * 79)[:77] + "..."),  # 81: cut to 77 and "..."
        ([1], "[1]"),
    ],
    ids=["80-whole", "81-cut", "short"],
)
def test_a_value_that_is_not_an_object_is_named_with_a_preview_of_at_most_80_characters(value, shown):
    """require_object's error names what came and shows its repr, cut to 77 characters and "..." beyond 80."""
    with pytest.raises(ReplyError) as info:
        require_object(value, "the reply")
    assert str(info.value) == f"the reply is not a JSON object but {type(value).__name__} {shown}"


def test_an_object_is_returned_as_it_is():
    body = {"a": 1}
    assert require_object(body, "the reply") is body


@pytest.mark.parametrize(
    "content, separator, text",
    [
        ("plain", "", "plain"),
        ([{"type": "text", "text": "a"}, {"text": "b"}, {"type": "image_url", "text": "no"}, {"type": "text", "text": 3}, "c"], "", "ab"),
        ([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "\n", "a\nb"),
        (None, "", ""),
        (42, "", ""),
    ],
    ids=["str", "parts", "separator", "none", "number"],
)
def test_content_text_joins_the_text_parts_only(content, separator, text):
    """A string is its text; a list gives its "text" parts (a part without a type is text) joined by the separator; anything else is ""."""
    assert content_text(content, separator) == text


def test_message_text_joins_each_kind_by_newlines_and_reads_text_blocks_in_both_forms():
    """Text blocks (TextContent or a dict with citations) joined by newlines; thinking blocks likewise; other blocks and non-text values left out."""
    message = AssistantMessage(
        [
            TextContent("one"),
            {"type": "thinking", "thinking": "hm"},
            {"type": "text", "text": "two", "citations": []},
            {"type": "text", "text": 5},
            {"type": "thinking", "thinking": None},
            {"type": "tool_call", "id": "c", "name": "t", "arguments": {}},
            {"type": "web_search_tool_result", "text": "a server block's field, not reply text"},
            {"type": "thinking", "thinking": "ah"},
        ]
    )
    assert message_text(message, "text") == "one\ntwo"
    assert message_text(message, "thinking") == "hm\nah"


@pytest.mark.parametrize(
    "raw, keys, count",
    [({"a": 3}, ("a",), 3), ({"b": "12"}, ("a", "b"), 12), ({"a": None, "b": 7}, ("a", "b"), 7), ({"a": 4.0}, ("a",), 4), ({}, ("a",), 0), ({"a": 10**12 - 1}, ("a",), 10**12 - 1), ({"a": 0}, ("a",), 0),
     ({"a": " 0000000000000000042 "}, ("a",), 42), ({"a": "999999999999"}, ("a",), 10**12 - 1)],
    ids=["int", "second-key-digits", "none-skipped", "whole-float", "absent", "largest", "zero", "padded-digits", "largest-digits"],
)
def test_token_count_reads_the_first_key_present(raw, keys, count):
    assert token_count(raw, *keys) == count


@pytest.mark.parametrize(
    "value",
    [True, 2.5, float("nan"), -1, 10**12, "3 tokens", [1], "1000000000000", "\u00b2", "\u0663", "9" * 5000, ""],
    ids=["bool", "fraction", "nan", "negative", "too-large", "text", "list", "too-large-digits", "superscript", "arabic-indic", "past-digit-limit", "empty"],
)
def test_a_value_that_is_not_a_token_count_raises_naming_the_key(value):
    with pytest.raises(ReplyError, match="^usage field 'n' is not a token count: "):
        token_count({"n": value}, "n")


@pytest.mark.parametrize(
    "body, text, message",
    [
        ({"error": {"message": "slow down", "code": "rate_limited"}}, "", "slow down [rate_limited]"),
        ({"error": {"message": "bad", "type": "invalid_request_error"}}, "", "bad [invalid_request_error]"),
        ({"error": {"message": "Provider returned error", "code": 502, "metadata": {"raw": "upstream died"}}}, "", "Provider returned error (upstream died) [502]"),
        ({"error": {"metadata": "not a dict"}}, "the raw text", "the raw text"),
        ({"error": {}}, "y" * 600, "y" * 500),
        ({"error": "just words"}, "", "just words"),
        ({"message": "top-level"}, "", "top-level"),
        ({"detail": "other"}, "  spaced  ", "spaced"),
        ("not a dict", "", "(empty body)"),
        (None, "z" * 600, "z" * 500),
    ],
    ids=["code", "type", "openrouter-raw", "no-message", "text-capped", "error-str", "message", "text-stripped", "empty", "no-body-text-capped"],
)
def test_server_message_takes_the_servers_own_words(body, text, message):
    assert server_message(body, text) == message


@pytest.mark.parametrize(
    "body, code",
    [({"error": {"code": "insufficient_quota", "type": "x"}}, "insufficient_quota"), ({"error": {"type": "overloaded_error"}}, "overloaded_error"), ({"error": {"code": 429}}, "429"), ({"error": {}}, None), ({"error": "x"}, None), ([], None)],
)
def test_error_code_is_the_code_or_type_as_text(body, code):
    assert error_code(body) == code


@pytest.mark.parametrize(
    "data, status, retryable",
    [
        ({"error": {"code": 502, "message": "upstream"}}, 502, True),
        ({"error": {"status_code": 503, "message": "x"}}, 503, True),
        ({"error": {"status": 400, "message": "x"}}, 400, False),
        ({"error": {"code": True, "type": "overloaded_error"}}, 529, True),
        ({"error": {"code": 99, "type": "rate_limit_error"}}, 429, True),
        ({"error": {"code": 600, "type": "api_error"}}, 500, True),
        ({"error": {"code": 100, "type": "api_error"}}, 100, False),
        ({"error": {"code": 599, "type": "api_error"}}, 599, False),
        ({"error": {"code": "timeout"}}, 408, True),
        ({"error": {"type": "invalid_request_error"}}, None, False),
        ({"error": "words"}, None, False),
    ],
    ids=["code", "status_code", "status", "bool-code-then-type", "code-below-100", "code-600", "code-100", "code-599", "code-as-type", "unknown-type", "error-str"],
)
def test_an_error_inside_a_200_body_becomes_a_reply_error_with_its_status(data, status, retryable):
    """payload_error: the status is the error's numeric code (100-599, not a bool), its status_code or status, else what its type stands for."""
    error = payload_error(data)
    assert isinstance(error, ReplyError) and error.status == status and error.retryable is retryable
    assert str(error).startswith("error reported after HTTP 200: ")


@pytest.mark.parametrize("data", [{"choices": []}, {"error": None}, {"error": {}}, {"error": ""}, "text"])
def test_a_body_without_an_error_gives_none_unless_forced(data):
    """No error, an empty one, or no object: None; forced (an ``event: error``), a ReplyError whatever the body."""
    assert payload_error(data) is None
    forced = payload_error(data, forced=True)
    assert isinstance(forced, ReplyError) and forced.status is None and not forced.retryable


def test_an_error_event_keeps_the_servers_words():
    error = payload_error({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, forced=True)
    assert str(error) == "error reported after HTTP 200: Overloaded [overloaded_error]" and error.status == 529


@pytest.mark.parametrize(
    "base, url",
    [
        ("https://h/v1", "https://h/v1/chat/completions"),
        ("https://h/v1/", "https://h/v1/chat/completions"),
        ("https://h/MAX/", "https://h/MAX/chat/completions"),
        ("https://h/openai/deployments/d?api-version=2024-10-21", "https://h/openai/deployments/d/chat/completions?api-version=2024-10-21"),
    ],
)
def test_join_url_appends_the_path_before_the_query(base, url):
    assert join_url(base, "/chat/completions") == url


def test_content_text_joins_parts_with_nothing_between_by_default():
    """OpenAI's text parts are pieces of one text: by default they are joined as they are."""
    assert content_text([{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]) == "Hello"


def test_an_error_with_no_words_is_shown_by_the_body_it_came_in():
    """An error event whose error says nothing: the ReplyError shows the body itself."""
    assert str(payload_error({"type": "error", "error": {}}, forced=True)) == "error reported after HTTP 200: {'type': 'error', 'error': {}}"
