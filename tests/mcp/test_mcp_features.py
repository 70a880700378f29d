"""MCP beyond tools: resources, prompts and a tool list that changes, against an SDK-built server over stdio and streamable HTTP."""

from __future__ import annotations

import logging
import sys

import pytest

import mcp  # noqa: E402,F401  make test installs the mcp extra (Makefile): these tests run there, never skip

from helpers import WAIT, make_agent, make_tool  # noqa: E402
from mcp_support import HERE, HttpServer  # noqa: E402
from mcp_http_server import PNG  # noqa: E402
from yiemagent import (
    AssistantMessage,
    ImageContent,
    TextContent,
    ToolResultMessage,
    ToolStore,
    UserMessage,
    register_tool,
    run_agent,
    shutdown,
    take_response,
)
from yiemagent.llm.scripted import ScriptedLLM, tool_call_reply
from yiemagent.mcp import MCPClient, MCPConnectionError, MCPPrompt, MCPPromptArgument, MCPRequestError, MCPResource

SERVER = [sys.executable, str(HERE / "mcp_features_server.py")]


@pytest.fixture(scope="module")
def http_url():
    server = HttpServer(SERVER + ["--http"])
    yield server.url
    server.close()


@pytest.fixture(params=["stdio", "http"])
def client(request, http_url):
    """A fresh connection to the features server (fresh: the tool-list tests change the server's tools)."""
    if request.param == "stdio":
        made = MCPClient.stdio(SERVER, name="feat", timeout_s=WAIT)
    else:
        made = MCPClient.http(http_url, name="feat", timeout_s=WAIT)
    with made:
        yield made


def test_resources_are_listed_with_their_fields(client):
    """resources() gives each resource's uri, name, description and mime type."""
    listed = {r.uri: r for r in client.resources()}
    assert listed["notes://readme"] == MCPResource("notes://readme", "readme", "what this server is", "text/plain")
    assert listed["images://dot"].mime_type == "image/png"


def test_a_text_resource_reads_as_text_and_a_blob_as_an_image(client):
    """read_resource turns text contents into TextContent and an image blob into ImageContent."""
    assert client.read_resource("notes://readme") == [TextContent("This server has resources, prompts and tools that change.")]
    assert client.read_resource("images://dot") == [ImageContent(PNG, "image/png")]


def test_a_missing_resource_is_an_mcp_error_naming_server_and_uri(client):
    """Reading a resource that does not exist raises MCPRequestError naming the server and the URI."""
    with pytest.raises(MCPRequestError) as info:
        client.read_resource("notes://nope")
    assert "'feat'" in str(info.value) and "notes://nope" in str(info.value) and isinstance(info.value.code, int)


def test_prompts_are_listed_with_their_arguments(client):
    """prompts() gives each prompt's name, description and arguments (required or not)."""
    (review,) = [p for p in client.prompts() if p.name == "review"]
    assert review == MCPPrompt("review", "Ask for a code review", (MCPPromptArgument("code", None, True), MCPPromptArgument("language", None, False)))


def test_get_prompt_gives_yiemagent_messages(client):
    """get_prompt fills the arguments and gives the messages as UserMessage and AssistantMessage."""
    user, assistant = client.get_prompt("review", {"code": "x = 1", "language": "julia"})
    assert isinstance(user, UserMessage) and user.content == [TextContent("Review this julia code:\nx = 1")]
    assert isinstance(assistant, AssistantMessage) and assistant.content == [TextContent("I will look for bugs first.")]


@pytest.mark.parametrize(("name", "arguments", "named"), [("review", None, "code"), ("nope", {}, "nope")])
def test_a_bad_prompt_request_is_an_mcp_error_naming_server_and_prompt(client, name, arguments, named):
    """A prompt that does not exist, or lacks a required argument, raises MCPRequestError naming the server, the prompt and why."""
    with pytest.raises(MCPRequestError) as info:
        client.get_prompt(name, arguments)
    text = str(info.value)
    assert "'feat'" in text and f"prompt {name!r}" in text and named in text


def test_a_store_followed_gets_the_new_tool_list_when_the_server_changes_it(client):
    """tools(store) registers the tools; after tools/list_changed the store gains the new tool, and loses it again, before the call returns."""
    store = ToolStore("followed")
    client.tools(store)
    assert "feat_secret" not in store.tools
    client.call_tool("unlock", {})
    assert "feat_secret" in store.tools
    client.call_tool("lock", {})
    assert "feat_secret" not in store.tools and "feat_unlock" in store.tools


def test_an_agent_sees_the_new_tool_at_its_next_round(client):
    """An agent whose store follows the server can call a tool the server added during the previous round."""
    llm = ScriptedLLM([tool_call_reply(("u", "feat_unlock", {})), tool_call_reply(("s", "feat_secret", {})), "done"])
    agent = make_agent(llm, builtin_tools=False)
    try:
        client.tools(agent.tool_store)
        run_agent(agent, "find the secret")
        assert take_response(agent, timeout=WAIT).content[0].text == "done"
        results = {m.tool_call_id: m for m in agent.history() if isinstance(m, ToolResultMessage)}
        assert results["s"].content == [TextContent("the secret is 42")] and not results["s"].is_error
        assert "feat_secret" in [t["function"]["name"] for t in llm.requests[1]["tools"]]
        assert "feat_secret" not in [t["function"]["name"] for t in llm.requests[0]["tools"]]
    finally:
        client.call_tool("lock", {})
        shutdown(agent, timeout=WAIT)


def test_a_tool_the_user_registered_under_a_dropped_name_stays(client):
    """A dropped MCP tool is removed from a store only while the store still holds that very tool."""
    store = ToolStore("mine")
    client.tools(store)
    client.call_tool("unlock", {})
    mine = make_tool("feat_secret")
    register_tool(store, mine)
    client.call_tool("lock", {})
    assert store.tools["feat_secret"] is mine


def test_every_store_followed_gets_the_new_list_once_with_one_log_line_each(caplog):
    """One client can follow several stores (docs/mcp.md "Tools that change"): each gets the new list, and
    each change is logged once per store, naming the server, the store, its tools and those removed; a
    store given to tools() again is followed once, not twice."""
    first, second = ToolStore("first"), ToolStore("second")
    with MCPClient.stdio(SERVER, name="feat", timeout_s=WAIT) as client:
        client.tools(first)
        client.tools(second)
        client.tools(first)
        with caplog.at_level(logging.INFO, logger="yiemagent.mcp"):
            client.call_tool("unlock", {})
            assert "feat_secret" in first.tools and "feat_secret" in second.tools
            client.call_tool("lock", {})
            assert "feat_secret" not in first.tools and "feat_secret" not in second.tools
    changed = [r.getMessage() for r in caplog.records if "changed its tools" in r.getMessage()]
    assert changed == [
        "MCP server 'feat' changed its tools: store 'second' has ['feat_big', 'feat_lock', 'feat_secret', 'feat_unlock'] now (removed [])",
        "MCP server 'feat' changed its tools: store 'first' has ['feat_big', 'feat_lock', 'feat_secret', 'feat_unlock'] now (removed [])",
        "MCP server 'feat' changed its tools: store 'second' has ['feat_big', 'feat_lock', 'feat_unlock'] now (removed ['feat_secret'])",
        "MCP server 'feat' changed its tools: store 'first' has ['feat_big', 'feat_lock', 'feat_unlock'] now (removed ['feat_secret'])",
    ]


def test_after_close_resources_raise_a_connection_error(client):
    """Listing after close() raises MCPConnectionError naming the server."""
    client.close()
    with pytest.raises(MCPConnectionError, match="'feat'"):
        client.resources()
