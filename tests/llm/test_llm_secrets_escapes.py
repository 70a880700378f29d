"""The masking of credentials leaves a reply's own text alone: escapes a model wrote as text stay as written."""

from __future__ import annotations

import json

from localserver import LocalServer, Reply
from yiemagent.llm import OpenAIClient

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}


def test_a_reply_that_writes_json_escapes_as_text_keeps_them_when_a_key_is_masked():
    """A reply explaining JSON ("\\u00e9 is é", "\\/ is /") holds backslash escapes as text: a client with
    a key walks such a reply for escaped credentials, and hands the text on unchanged when none is there."""
    text = 'In JSON, \\u00e9 is \u00e9 and \\/ is /; your key is sk-live-abcdefghijklmnop'
    body = {"choices": [{"message": {"content": text}, "finish_reason": "stop"}]}
    with LocalServer(lambda r: Reply(body=body)) as server:
        message = OpenAIClient(f"{server.url}/v1", "m", "sk-live-abcdefghijklmnop")(FORMATTED)
    assert message.content[0].text == 'In JSON, \\u00e9 is \u00e9 and \\/ is /; your key is ***'
    assert json.dumps(body).count("\\\\u00e9") == 1, "the body sends the backslash itself, escaped"
