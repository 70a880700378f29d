"""Images reach the model with every client, in the form each provider documents (docs/api.md "Images").

OpenAI's chat completions: a user message's images are ``image_url`` parts with a base64
``data:`` URL, in order; a ``tool`` message takes text only, so the images of a batch of
tool results follow every result in one user message, each after a text part naming its
call (the recorded, accepted request in tests/fixtures/openai-request-tool-image.json).
Anthropic's Messages API: image blocks ``{"type": "image", "source": {"type": "base64",
"media_type", "data"}}``, a tool's inside its ``tool_result`` content. Requests are read
as a real local HTTP server received them, or as the clients' public request builders
make them.
"""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import FIXTURES, WAIT, make_agent, openai_request_validator
from localserver import LocalServer, Reply
from yiemagent import (
    AgentContext,
    AssistantMessage,
    ImageContent,
    SQLiteSession,
    TextContent,
    ToolResultMessage,
    UserMessage,
    ask,
    format_msg_for_llm,
    load_history,
    save_history,
    shutdown,
    tool,
)
from yiemagent.llm import AnthropicClient, OpenAIClient
from yiemagent.llm.anthropic import build_anthropic_request
from yiemagent.llm.openai import build_openai_request
from yiemagent.types import split_data_url

ANTHROPIC_MAX_IMAGE_BYTES = 5 * 1024 * 1024  # Anthropic: 5 MB per image
OPENAI_MAX_IMAGE_BYTES = 20 * 1024 * 1024  # OpenAI: 20 MB per image

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(24)).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + bytes(20)).decode()


def openai_reply(message: dict) -> Reply:
    return Reply(body={"id": "c", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})


def anthropic_reply(content: list, stop_reason: str = "end_turn") -> Reply:
    return Reply(body={"id": "m", "type": "message", "role": "assistant", "model": "claude", "content": content, "stop_reason": stop_reason, "usage": {"input_tokens": 1, "output_tokens": 1}})


class Script:
    """A server's replies in order (the last one repeated); the LocalServer records each request."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.served = 0

    def __call__(self, request) -> Reply:
        reply = self.replies[min(self.served, len(self.replies) - 1)]
        self.served += 1
        return reply


@tool
def screenshot(page: str) -> ImageContent:
    """A screenshot of a page."""
    return ImageContent(PNG if page == "home" else JPEG, "image/png" if page == "home" else "image/jpeg")


@tool
def title(page: str) -> str:
    """A page's title."""
    return f"The {page} page"


@tool
def broken() -> list:
    """A tool whose image data is not base64."""
    return [TextContent("here it is"), ImageContent("not base64 at all!", "image/png")]


def calls(*entries: tuple[str, str, dict]) -> list[dict]:
    return [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in entries]


BATCH = calls(("c1", "screenshot", {"page": "home"}), ("c2", "title", {"page": "home"}), ("c3", "screenshot", {"page": "cart"}))


def test_tool_screenshots_reach_openai_in_one_user_message_after_every_result():
    """Chat completions: every call's result first (text only, saying an image follows), then one user message with each image after a part naming its call."""
    script = Script(openai_reply({"role": "assistant", "content": None, "tool_calls": BATCH}), openai_reply({"role": "assistant", "content": "Two pages."}))
    with LocalServer(script) as server:
        agent = make_agent(OpenAIClient(f"{server.url}/v1", "gpt-4o", "sk-test", max_retries=0), screenshot, title)
        try:
            assert ask(agent, "Show me the pages", timeout=WAIT).text == "Two pages."
        finally:
            shutdown(agent)
    body = server.requests[1].json()
    openai_request_validator().validate(body)
    messages = body["messages"][1:]  # after the system prompt
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "tool", "user"]
    assert [(m["tool_call_id"], m["content"]) for m in messages[2:5]] == [
        ("c1", "[image 1 (image/png) follows]"),
        ("c2", "The home page"),
        ("c3", "[image 1 (image/jpeg) follows]"),
    ]
    assert messages[5]["content"] == [
        {"type": "text", "text": "Image 1 of the result of tool call c1 (screenshot):"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "text", "text": "Image 1 of the result of tool call c3 (screenshot):"},
        {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG}"}},
    ]
    assert "omitted" not in json.dumps(body)


def test_tool_screenshots_reach_anthropic_inside_their_tool_result():
    """Messages API: each image is an image block inside its own tool_result, after the result's text; a text-only result stays a string."""
    uses = [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"], "input": json.loads(c["function"]["arguments"])} for c in BATCH]
    script = Script(anthropic_reply(uses, "tool_use"), anthropic_reply([{"type": "text", "text": "Two pages."}]))
    with LocalServer(script) as server:
        agent = make_agent(AnthropicClient("claude-sonnet-4-5", "key", base_url=server.url, max_retries=0), screenshot, title)
        try:
            assert ask(agent, "Show me the pages", timeout=WAIT).text == "Two pages."
        finally:
            shutdown(agent)
    messages = server.requests[1].json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    results = messages[2]["content"]
    assert [r["type"] for r in results] == ["tool_result"] * 3
    assert results[0] == {
        "type": "tool_result",
        "tool_use_id": "c1",
        "content": [
            {"type": "text", "text": "[image 1 (image/png) follows]"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        ],
        "is_error": False,
    }
    assert results[1] == {"type": "tool_result", "tool_use_id": "c2", "content": "The home page", "is_error": False}
    assert results[2]["content"][1] == {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": JPEG}}


def test_our_request_for_the_recorded_conversation_has_the_accepted_shape():
    """The recorded request OpenAI accepted (a tool's image in a user message after the tool message) is the shape OpenAIClient sends, schema-valid."""
    fixture = json.loads((FIXTURES / "openai-request-tool-image.json").read_text())
    call_id = fixture["messages"][1]["tool_calls"][0]["id"]
    url = fixture["messages"][3]["content"][1]["image_url"]["url"]
    mime_type, data = url[5:].split(";base64,")
    history = [
        UserMessage([TextContent(fixture["messages"][0]["content"][0]["text"])]),
        AssistantMessage([{"type": "tool_calls", "tool_calls": fixture["messages"][1]["tool_calls"]}]),
        ToolResultMessage(call_id, "get_image", [TextContent("See file 241a70"), ImageContent(data, mime_type)]),
    ]
    body = build_openai_request(format_msg_for_llm(AgentContext("", history, {}), None), "gpt-4o")
    openai_request_validator().validate(body)
    assert [m["role"] for m in body["messages"]] == [m["role"] for m in fixture["messages"]]
    assert isinstance(body["messages"][2]["content"], str) and body["messages"][2]["tool_call_id"] == call_id
    label, image = body["messages"][3]["content"]
    recorded_label, recorded_image = fixture["messages"][3]["content"]
    assert label.keys() == recorded_label.keys() and label["type"] == "text" and call_id in label["text"]
    assert image == recorded_image


def user_image_history() -> list:
    return [UserMessage([TextContent("Before"), ImageContent(PNG, "image/png"), TextContent("between"), ImageContent(JPEG, "image/jpeg"), TextContent("after")])]


def test_a_user_message_with_text_and_images_reaches_openai_as_parts_in_order():
    """Chat completions: a user message's text and images are content parts in their order, sent by OpenAIClient."""
    with LocalServer(lambda request: openai_reply({"role": "assistant", "content": "ok"})) as server:
        OpenAIClient(f"{server.url}/v1", "gpt-4o", "sk-test")(format_msg_for_llm(AgentContext("", user_image_history(), {}), None))
    (content,) = [m["content"] for m in server.requests[0].json()["messages"]]
    assert content == [
        {"type": "text", "text": "Before"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "text", "text": "between"},
        {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG}"}},
        {"type": "text", "text": "after"},
    ]


def test_a_user_message_with_text_and_images_reaches_anthropic_as_blocks_in_order():
    """Messages API: a user message's text and images are text and base64 image blocks in their order, sent by AnthropicClient."""
    with LocalServer(lambda request: anthropic_reply([{"type": "text", "text": "ok"}])) as server:
        AnthropicClient("claude-sonnet-4-5", "key", base_url=server.url)(format_msg_for_llm(AgentContext("", user_image_history(), {}), None))
    (content,) = [m["content"] for m in server.requests[0].json()["messages"]]
    assert content == [
        {"type": "text", "text": "Before"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "text", "text": "between"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": JPEG}},
        {"type": "text", "text": "after"},
    ]


def tool_image_request(image: ImageContent) -> dict:
    history = [
        UserMessage([TextContent("go")]),
        AssistantMessage([{"type": "tool_calls", "tool_calls": calls(("c1", "screenshot", {"page": "home"}))}]),
        ToolResultMessage("c1", "screenshot", [image]),
        UserMessage([TextContent("and this one"), image]),
    ]
    return format_msg_for_llm(AgentContext("", history, {}), None)


def sent_texts(body: object) -> str:
    return json.dumps(body)


@pytest.mark.parametrize("mime_type", ["image/bmp", "image/svg+xml", "application/pdf"])
def test_an_image_type_the_providers_do_not_take_goes_as_a_note_naming_it(mime_type):
    """A type other than PNG, JPEG, GIF, WebP is not sent (the provider answers 400): both clients send a note naming the type instead."""
    formatted = tool_image_request(ImageContent(PNG, mime_type))
    openai_body = build_openai_request(formatted, "gpt-4o")
    anthropic_body = build_anthropic_request(formatted, "claude", 1024)
    for body in (openai_body, anthropic_body):
        assert PNG not in sent_texts(body)
        assert f"an image of type {mime_type} was not sent" in sent_texts(body)
    openai_request_validator().validate(openai_body)
    assert anthropic_body["messages"][2]["content"][0]["content"][0]["type"] == "text"


def test_an_image_past_anthropics_5_mb_goes_to_anthropic_as_a_note_and_to_openai_whole():
    """More than 5 MB of base64 is refused by Anthropic, so its client sends a note naming the cap; OpenAI takes up to 20 MB, so it is sent."""
    big = "A" * (ANTHROPIC_MAX_IMAGE_BYTES + 4)
    formatted = tool_image_request(ImageContent(big, "image/png"))
    anthropic_text = sent_texts(build_anthropic_request(formatted, "claude", 1024))
    assert big not in anthropic_text and "Anthropic takes at most 5 MB of base64 per image" in anthropic_text
    assert sent_texts(build_openai_request(formatted, "gpt-4o")).count(big) == 2


def test_an_image_past_openais_20_mb_goes_to_openai_as_a_note():
    """More than 20 MB of base64 is past OpenAI's cap: its client sends a note naming the cap instead of a request the API refuses."""
    big = "A" * (OPENAI_MAX_IMAGE_BYTES + 4)
    text = sent_texts(build_openai_request(tool_image_request(ImageContent(big, "image/png")), "gpt-4o"))
    assert big not in text and "takes at most 20 MB of base64 per image" in text


def test_a_tools_image_that_is_not_base64_is_refused_where_it_enters_and_never_sent():
    """normalize turns an image whose data is not base64 into a note in the history; the request carries the note, not the data."""
    script = Script(openai_reply({"role": "assistant", "content": None, "tool_calls": calls(("c1", "broken", {}))}), openai_reply({"role": "assistant", "content": "done"}))
    with LocalServer(script) as server:
        agent = make_agent(OpenAIClient(f"{server.url}/v1", "gpt-4o", "sk-test", max_retries=0), broken)
        try:
            ask(agent, "go", timeout=WAIT)
            result = [m for m in agent.history() if isinstance(m, ToolResultMessage)][0]
        finally:
            shutdown(agent)
    assert result.content[0] == TextContent("here it is")
    assert isinstance(result.content[1], TextContent) and "not valid base64" in result.content[1].text
    text = sent_texts(server.requests[1].json())
    assert "not base64 at all" not in text and "not valid base64" in text


@pytest.mark.parametrize("mime_type", ["image/png;base64,AAAA", "image/png; charset=x", "png", ""])
def test_an_image_whose_mime_type_is_not_a_media_type_is_refused_where_it_enters(mime_type):
    """A mime_type that would break the data URL it goes in (a parameter, a second ";base64,", no subtype) enters the history as a note; the request never holds a broken URL."""
    with LocalServer(lambda request: openai_reply({"role": "assistant", "content": "ok"})) as server:
        agent = make_agent(OpenAIClient(f"{server.url}/v1", "gpt-4o", "sk-test", max_retries=0))
        try:
            ask(agent, UserMessage([TextContent("look"), ImageContent(PNG, mime_type)]), timeout=WAIT)
        finally:
            shutdown(agent)
    user = server.requests[0].json()["messages"][1]
    assert PNG not in json.dumps(user) and "is not a media type such as image/png" in json.dumps(user)


@pytest.mark.parametrize("data", ["%%%not-base64%%%", "aGk=\n", "aG k=", "aGk=\u00e9"])
def test_a_user_image_that_is_not_base64_is_refused_where_it_enters(data):
    """A user message holding an image whose data is not strict base64 (characters outside its alphabet, whitespace, a
    non-ASCII letter) enters the history as a note, and the request is one the provider takes."""
    with LocalServer(lambda request: openai_reply({"role": "assistant", "content": "ok"})) as server:
        agent = make_agent(OpenAIClient(f"{server.url}/v1", "gpt-4o", "sk-test", max_retries=0))
        try:
            ask(agent, UserMessage([TextContent("look"), ImageContent(data, "image/png")]), timeout=WAIT)
        finally:
            shutdown(agent)
    user = json.dumps(server.requests[0].json()["messages"][1])
    assert "image_url" not in user and "not valid base64" in user


@pytest.mark.parametrize(
    ("url", "parts"),
    [
        ("data:image/png;base64,AAAA", ("image/png", "AAAA")),
        ("data:image/png;base64,AA;base64,BB", ("image/png", "AA;base64,BB")),  # split at the first marker: the rest is the data
        ("data:text/plain,hello", None),  # a data: URL that is not base64
        ("https://example.com/x;base64,AAAA", None),  # not a data: URL
        (None, None),
    ],
)
def test_a_data_url_splits_at_its_first_base64_marker_and_any_other_url_is_none(url, parts):
    """split_data_url, which both clients read an image part's URL with, gives (mime type, data) of a base64 data: URL split at its first ";base64,", and None for any other URL."""
    assert split_data_url(url) == parts


def test_a_history_with_tool_images_round_trips_through_a_file_and_a_session_and_sends_the_same(tmp_path):
    """Decision 15: a history holding a tool's images, saved and loaded (a file, an SQLite session), gives byte for byte the same requests to both clients."""
    history = [
        UserMessage([TextContent("go"), ImageContent(JPEG, "image/jpeg")]),
        AssistantMessage([{"type": "tool_calls", "tool_calls": BATCH}]),
        ToolResultMessage("c1", "screenshot", [ImageContent(PNG, "image/png")]),
        ToolResultMessage("c2", "title", [TextContent("The home page")]),
        ToolResultMessage("c3", "screenshot", [TextContent("cart"), ImageContent(JPEG, "image/jpeg")]),
    ]
    save_history(history, tmp_path / "h.jsonl")
    loaded = load_history(tmp_path / "h.jsonl")
    session = SQLiteSession(tmp_path / "s.db", "images")
    try:
        for message in history:
            session.append(message)
        stored = session.messages()
    finally:
        session.close()
    for messages in (history, loaded, stored):
        formatted = format_msg_for_llm(AgentContext("", messages, {}), None)
        assert json.dumps(build_openai_request(formatted, "m")) == json.dumps(build_openai_request(format_msg_for_llm(AgentContext("", history, {}), None), "m"))
        assert json.dumps(build_anthropic_request(formatted, "m", 10)) == json.dumps(build_anthropic_request(format_msg_for_llm(AgentContext("", history, {}), None), "m", 10))


# --- any mix of text and images ---------------------------------------------------------

images = st.builds(ImageContent, st.binary(min_size=1, max_size=12).map(lambda raw: base64.b64encode(raw).decode()), st.sampled_from(["image/png", "image/jpeg", "image/gif", "image/webp"]))
texts = st.builds(TextContent, st.text(alphabet="abc xyz", min_size=1, max_size=8).filter(str.strip))
contents = st.lists(texts | images, min_size=1, max_size=5)


def as_openai_parts(content: list) -> list:
    return [{"type": "text", "text": b.text} if isinstance(b, TextContent) else {"type": "image_url", "image_url": {"url": f"data:{b.mime_type};base64,{b.data}"}} for b in content]


@settings(max_examples=60, deadline=None)
@given(user=contents, results=st.lists(contents, min_size=1, max_size=4))
def test_any_mix_of_text_and_images_keeps_its_order_and_every_call_its_result(user, results):
    """Any mix: user parts keep their order in both clients; every call has its result right after the calls, in order; each tool image comes once, in order, labelled with its call."""
    ids = [f"call_{i}" for i in range(len(results))]
    history = [
        UserMessage(user),
        AssistantMessage([{"type": "tool_calls", "tool_calls": calls(*[(i, "shot", {}) for i in ids])}]),
        *[ToolResultMessage(i, "shot", content) for i, content in zip(ids, results)],
    ]
    formatted = format_msg_for_llm(AgentContext("", history, {}), None)
    body = build_openai_request(formatted, "gpt-4o")
    openai_request_validator().validate(body)
    messages = body["messages"]
    sent_user = messages[0]["content"]
    assert sent_user == (user[0].text if len(user) == 1 and isinstance(user[0], TextContent) else as_openai_parts(user))
    assert [(m["role"], m["tool_call_id"]) for m in messages[2 : 2 + len(ids)]] == [("tool", i) for i in ids]
    tool_images = [(i, b) for i, content in zip(ids, results) for b in content if isinstance(b, ImageContent)]
    if tool_images:
        (after,) = messages[2 + len(ids) :]
        labels, parts = after["content"][0::2], after["content"][1::2]
        assert [p["image_url"]["url"] for p in parts] == [f"data:{b.mime_type};base64,{b.data}" for _, b in tool_images]
        assert all(f"tool call {i} " in label["text"] for label, (i, _) in zip(labels, tool_images))
    else:
        assert len(messages) == 2 + len(ids)

    anthropic = build_anthropic_request(formatted, "claude", 1024)["messages"]
    assert [m["role"] for m in anthropic] == ["user", "assistant", "user"]
    blocks = anthropic[2]["content"]
    assert [b["tool_use_id"] for b in blocks] == ids
    for block, content in zip(blocks, results):
        sent_images = [b["source"]["data"] for b in block["content"] if b["type"] == "image"] if isinstance(block["content"], list) else []
        assert sent_images == [b.data for b in content if isinstance(b, ImageContent)]
    sent_user_blocks = anthropic[0]["content"]
    assert [b.get("text") or b["source"]["data"] for b in sent_user_blocks] == [b.text if isinstance(b, TextContent) else b.data for b in user]
