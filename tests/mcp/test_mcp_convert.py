"""The pure parts of yiemagent.mcp: tool names, secrets, and keeping the SDK out of ``import yiemagent``."""

from __future__ import annotations

import logging
import re
import subprocess
import sys

import pytest
from hypothesis import given

import mcp  # noqa: E402,F401  make test installs the mcp extra (Makefile): these tests run there, never skip

from strategies import mcp_prefixes, mcp_tool_names  # noqa: E402
from yiemagent.mcp._convert import agent_tool_names
from yiemagent._log_masking import install_log_filter, remove_log_filter
from yiemagent._secrets import Secrets

VALID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@given(mcp_tool_names, mcp_prefixes)
def test_every_mcp_name_gets_a_distinct_valid_tool_name(names, prefix):
    """Whatever names a server lists, each maps to its own name valid for LLM APIs, in listing order."""
    mapping = agent_tool_names(names, prefix)
    assert list(mapping.values()) == names
    assert all(VALID.match(name) for name in mapping)


def test_names_are_prefixed_and_cleaned():
    """The prefix joins with '_'; characters LLM APIs refuse become '_'; a clash gets a number."""
    assert agent_tool_names(["get_time", "fs/read.file", "fs_read_file"], "srv") == {
        "srv_get_time": "get_time",
        "srv_fs_read_file": "fs/read.file",
        "srv_fs_read_file_2": "fs_read_file",
    }
    assert agent_tool_names(["get_time"], None) == {"get_time": "get_time"}


def test_long_names_are_cut_and_stay_apart():
    """Two names over 64 characters that differ only at the end map to two different names."""
    a, b = "x" * 90 + "a", "x" * 90 + "b"
    mapping = agent_tool_names([a, b], None)
    assert len(mapping) == 2 and all(len(name) == 64 for name in mapping)


def test_mcp_secrets_hide_values_and_bearer_tokens_but_not_short_words():
    """Header and env values and the token of a 'Bearer <token>' value become ***; values under 6 characters stay."""
    secrets = Secrets(values={"Authorization": "Bearer tok-123456", "DEBUG": "1", "KEY": "abcdef"})
    assert secrets.redact("sent Bearer tok-123456, echoed tok-123456, key abcdef, level 1") == "sent ***, echoed ***, key ***, level 1"
    assert Secrets(values={"X": "12345"}).redact("12345") == "12345"
    assert Secrets(values={"Authorization": "Bearer x", "DEBUG": "1"}).masked_headers({"Authorization": "Bearer x", "DEBUG": "1"}) == {
        "Authorization": "***",
        "DEBUG": "***",
    }


def test_sdk_log_records_are_redacted_while_a_client_is_open(caplog):
    """A secret in a log record of the SDK's loggers is replaced while registered, and shown again after."""
    secrets = Secrets(values={"Authorization": "Bearer sdk-secret-42"})
    sdk_logger = logging.getLogger("mcp.client.streamable_http")
    with caplog.at_level(logging.DEBUG, logger="mcp"):
        install_log_filter(secrets)
        sdk_logger.debug("SSE message: %s", "token Bearer sdk-secret-42")
        remove_log_filter(secrets)
        sdk_logger.debug("after close: %s", "sdk-secret-42")
    assert [r.getMessage() for r in caplog.records] == ["SSE message: token ***", "after close: sdk-secret-42"]


def test_importing_yiemagent_does_not_import_the_sdk():
    """`import yiemagent` loads neither mcp nor anyio: the extra costs nothing unless used."""
    code = "import sys, yiemagent, yiemagent.cli; print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'anyio') or m.startswith('yiemagent.mcp')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "[]"


def test_without_the_extra_the_import_error_says_what_to_install():
    """Importing yiemagent.mcp without the SDK (or with SDK 1.x) raises ImportError naming the extra."""
    code = (
        "import importlib.metadata as md\n"
        "real = md.version\n"
        "def fake(name):\n"
        "    if name == 'mcp':\n"
        "        if FOUND is None: raise md.PackageNotFoundError(name)\n"
        "        return FOUND\n"
        "    return real(name)\n"
        "md.version = fake\n"
        "try:\n"
        "    import yiemagent.mcp\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    for found, expected in ((None, 'pip install "yiemagent[mcp]"'), ("'1.27.0'", "(found mcp 1.27.0)")):
        out = subprocess.run([sys.executable, "-c", f"FOUND = {found}\n{code}"], capture_output=True, text=True, timeout=60, check=True).stdout
        assert expected in out and "MCP Python SDK 2.x" in out


# --- what the model sees of a server's content: the SDK's own result objects, converted -------

from types import SimpleNamespace  # noqa: E402

from mcp import types as mcp_types  # noqa: E402

from yiemagent.mcp import MCPPrompt, MCPPromptArgument  # noqa: E402
from yiemagent.mcp._convert import content_blocks, error_text, prompt_messages, prompt_record, resource_blocks, tool_label  # noqa: E402
from yiemagent.types import AssistantMessage, ImageContent, TextContent, UserMessage  # noqa: E402

PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def test_a_name_of_exactly_64_characters_is_kept_as_it_is():
    """Only a name over 64 characters is cut: one of 64, prefixed or not, is the name the model sees."""
    name = "t" * 64
    assert agent_tool_names([name], None) == {name: name}
    assert agent_tool_names(["r" * 60], "srv") == {"srv_" + "r" * 60: "r" * 60}
    assert [len(n) for n in agent_tool_names(["r" * 61], "srv")] == [64]


def test_audio_and_binary_blobs_are_described_with_their_own_size():
    """The line standing for audio or a non-image blob gives the decoded size of that block's data."""
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.AudioContent(data="A" * 40, mime_type="audio/wav"),
            mcp_types.EmbeddedResource(resource=mcp_types.BlobResourceContents(uri="file:///a.bin", mime_type="application/zip", blob="B" * 16)),
        ]
    )
    assert content_blocks(result) == [
        TextContent("[audio (audio/wav, 30 bytes) omitted: yiemagent carries no audio]"),
        TextContent("[resource <file:///a.bin> (application/zip, 12 bytes) omitted: binary data]"),
    ]


def test_a_resource_link_without_a_description_is_its_name_and_uri_alone():
    """A link with no description gets no ': ...' after its URI (not ': None')."""
    result = mcp_types.CallToolResult(content=[mcp_types.ResourceLink(name="readme", uri="file:///srv/readme.md")])
    assert content_blocks(result) == [TextContent("[resource link 'readme' <file:///srv/readme.md>]")]


def test_an_embedded_blob_without_a_mime_type_is_of_unknown_type():
    """An embedded blob whose MIME type the server left out is described as of unknown type, and is no image."""
    result = mcp_types.CallToolResult(content=[mcp_types.EmbeddedResource(resource=mcp_types.BlobResourceContents(uri="file:///x", blob=PIXEL))])
    assert content_blocks(result) == [TextContent(f"[resource <file:///x> (unknown type, {len(PIXEL) * 3 // 4} bytes) omitted: binary data]")]


def test_image_data_that_only_a_lenient_decoder_takes_is_not_sent_as_an_image():
    """A data: URL or base64 with line breaks is not base64 as LLM APIs take it: the image becomes a line of text."""
    for data in ("data:image/png;base64,iVBORw0KGgoAA", "AAAA\nAAAA\n"):
        result = mcp_types.CallToolResult(content=[mcp_types.ImageContent(data=data, mime_type="image/png")])
        assert content_blocks(result) == [TextContent("[image (image/png) omitted: its data is not valid base64]")]
    good = mcp_types.CallToolResult(content=[mcp_types.ImageContent(data=PIXEL, mime_type="image/png")])
    assert content_blocks(good) == [ImageContent(PIXEL, "image/png")]


def test_a_block_of_a_kind_this_version_does_not_know_becomes_a_line_naming_its_type():
    """A later SDK's new kind of block (here a stand-in of its shape) is not dropped: the model reads that it was left out."""
    result = SimpleNamespace(content=[SimpleNamespace(type="video", data="AAAA")], structured_content=None)
    assert content_blocks(result) == [TextContent("[content of type 'video' omitted: not known to yiemagent]")]


def test_structured_content_given_as_text_keeps_non_ascii_characters():
    """The JSON text of structured-only content shows 'Zürich' as it is, not as \\u escapes."""
    result = mcp_types.CallToolResult(content=[], structured_content={"city": "Zürich", "sky": "☀"})
    assert content_blocks(result) == [TextContent('{"city": "Zürich", "sky": "☀"}')]


def test_the_words_of_an_error_result_are_its_text_blocks_one_a_line():
    """An is_error result with two text blocks (and an image) gives their texts joined by a line break."""
    result = mcp_types.CallToolResult(
        is_error=True,
        content=[
            mcp_types.TextContent(text="city not found: Atlantis"),
            mcp_types.ImageContent(data=PIXEL, mime_type="image/png"),
            mcp_types.TextContent(text="try a real city"),
        ],
    )
    assert error_text(result) == "city not found: Atlantis\ntry a real city"
    assert error_text(mcp_types.CallToolResult(is_error=True, content=[])) == "the server reported an error without a message"


def test_every_content_of_a_read_resource_is_kept_after_a_text_one():
    """resources/read with a text, then an image blob, then another text gives all three blocks in order."""
    result = mcp_types.ReadResourceResult(
        contents=[
            mcp_types.TextResourceContents(uri="notes://a", mime_type="text/plain", text="first"),
            mcp_types.BlobResourceContents(uri="notes://b", mime_type="image/png", blob=PIXEL),
            mcp_types.TextResourceContents(uri="notes://c", text="last"),
        ]
    )
    assert resource_blocks(result) == [TextContent("first"), ImageContent(PIXEL, "image/png"), TextContent("last")]


def test_a_prompts_arguments_keep_their_descriptions_and_whether_they_are_required():
    """prompts/list: each argument's description and required flag (absent: not required) reach MCPPrompt."""
    prompt = mcp_types.Prompt(
        name="review",
        description="review some code",
        arguments=[
            mcp_types.PromptArgument(name="code", description="the code to review", required=True),
            mcp_types.PromptArgument(name="style"),
        ],
    )
    assert prompt_record(prompt) == MCPPrompt(
        "review",
        "review some code",
        (MCPPromptArgument("code", "the code to review", True), MCPPromptArgument("style", None, False)),
    )


def test_a_prompts_assistant_message_is_a_finished_reply():
    """prompts/get: an assistant message becomes an AssistantMessage with stop_reason "stop" (docs/mcp.md), a user one a UserMessage."""
    result = mcp_types.GetPromptResult(
        messages=[
            mcp_types.PromptMessage(role="user", content=mcp_types.TextContent(text="review x = 1")),
            mcp_types.PromptMessage(role="assistant", content=mcp_types.TextContent(text="looks fine")),
        ]
    )
    user, assistant = prompt_messages(result)
    assert isinstance(user, UserMessage) and user.content == [TextContent("review x = 1")]
    assert isinstance(assistant, AssistantMessage) and assistant.content == [TextContent("looks fine")]
    assert assistant.stop_reason == "stop"


def test_a_tools_label_is_its_title_else_its_annotations_title_else_its_name():
    """MCP's display-name order: title, then annotations.title, then the name; an empty title counts as none."""
    schema = {"type": "object"}
    titled = mcp_types.ToolAnnotations(title="Forecast (annotated)")
    assert tool_label(mcp_types.Tool(name="forecast", input_schema=schema, title="Forecast", annotations=titled)) == "Forecast"
    assert tool_label(mcp_types.Tool(name="forecast", input_schema=schema, annotations=titled)) == "Forecast (annotated)"
    assert tool_label(mcp_types.Tool(name="forecast", input_schema=schema, title="", annotations=titled)) == "Forecast (annotated)"
    assert tool_label(mcp_types.Tool(name="forecast", input_schema=schema, title="", annotations=mcp_types.ToolAnnotations(title=""))) == "forecast"
    assert tool_label(mcp_types.Tool(name="forecast", input_schema=schema, annotations=mcp_types.ToolAnnotations(read_only_hint=True))) == "forecast"


def test_a_read_resources_blob_that_is_no_image_is_a_line_with_its_type_and_size():
    """resources/read: a base64 PDF, or a blob without a MIME type, is described (type, decoded size), never an image."""
    result = mcp_types.ReadResourceResult(
        contents=[
            mcp_types.BlobResourceContents(uri="docs://a.pdf", mime_type="application/pdf", blob="JVBERi0x"),
            mcp_types.BlobResourceContents(uri="docs://b", blob=PIXEL),
            mcp_types.BlobResourceContents(uri="docs://c.png", mime_type="image/png", blob="not base64!"),
        ]
    )
    assert resource_blocks(result) == [
        TextContent("[resource <docs://a.pdf> (application/pdf, 6 bytes) omitted: binary data]"),
        TextContent(f"[resource <docs://b> (unknown type, {len(PIXEL) * 3 // 4} bytes) omitted: binary data]"),
        TextContent("[resource <docs://c.png> (image/png, 8 bytes) omitted: binary data]"),
    ]
