"""Lists on many pages (docs/mcp.md "Lists on many pages"): tools(), resources() and prompts() follow every cursor, and a
list that does not end is an MCPListError naming the server, the list and the cause, never a list cut short.

The server is tests/support/mcp_raw_server.py in mode ``pages``, a real subprocess over stdio or streamable HTTP.
"""

from __future__ import annotations

import json

import pytest

import mcp  # noqa: E402,F401  make test installs the mcp extra (Makefile): these tests run there, never skip

import yiemagent.mcp._session

from helpers import WAIT  # noqa: E402
from mcp_support import HttpServer, raw_server_command  # noqa: E402
from yiemagent.mcp import MCPClient, MCPConnectionError, MCPListError

# each list: how to list it, the name of an item, what the client says it could not do
LISTS = {
    "tools/list": (lambda client: [t.name for t in client.tools()], "pages_t{}", "did not list its tools"),
    "resources/list": (lambda client: [r.uri for r in client.resources()], "notes://r{}", "could not list its resources"),
    "prompts/list": (lambda client: [p.name for p in client.prompts()], "p{}", "could not list its prompts"),
}


@pytest.fixture(params=["stdio", "http"])
def serve(request):
    """Connect to the raw server in mode ``pages`` with the given SPEC, over the parametrised transport."""
    servers: list[HttpServer] = []

    def connect(**spec: object) -> MCPClient:
        args = raw_server_command("pages", json.dumps(spec), http=request.param == "http")
        if request.param == "stdio":
            return MCPClient.stdio(args, name="pages", timeout_s=WAIT)
        servers.append(HttpServer(args))
        return MCPClient.http(servers[-1].url, name="pages", timeout_s=WAIT)

    yield connect
    for server in servers:
        server.close()


@pytest.mark.parametrize("method", LISTS)
def test_a_list_of_150_pages_is_listed_whole(serve, method):
    """A list of 150 items one a page gives all 150, in order: every cursor is followed, past any page count below MAX_LIST_PAGES."""
    listing, item, _ = LISTS[method]
    with serve(count=150, per_page=1) as client:
        assert listing(client) == [item.format(n) for n in range(1, 151)]


@pytest.mark.parametrize("method", LISTS)
def test_a_list_on_two_pages_of_100_is_listed_whole(serve, method):
    """150 items 100 a page (a server's usual page size) give all 150, not the first page."""
    listing, item, _ = LISTS[method]
    with serve(count=150, per_page=100) as client:
        assert listing(client) == [item.format(n) for n in range(1, 151)]


@pytest.mark.parametrize("method", LISTS)
def test_a_list_whose_cursor_comes_twice_is_an_error_naming_server_list_and_cause(serve, method):
    """A server whose last page points back at an earlier cursor makes the listing raise MCPListError (an
    MCPConnectionError) naming the server, the list and the repeated cursor, at once rather than after MAX_LIST_PAGES pages."""
    listing, _, could_not = LISTS[method]
    with serve(count=3, per_page=1, loop=True) as client:
        with pytest.raises(MCPListError) as info:
            listing(client)
        assert str(info.value) == f"MCP server 'pages' {could_not}: {method} gave the cursor '1' a second time (page 4): its list loops"
        assert info.value.method == method and isinstance(info.value, MCPConnectionError)
        with pytest.raises(MCPListError):  # the connection stays usable: the next listing gets as far
            listing(client)


@pytest.mark.parametrize("method", LISTS)
def test_more_pages_than_max_list_pages_is_an_error_naming_the_limit(serve, method, monkeypatch):
    """A list of exactly MAX_LIST_PAGES pages is listed whole; one page more raises MCPListError naming the server, the
    list and the limit, instead of the first MAX_LIST_PAGES pages without a word."""
    monkeypatch.setattr(yiemagent.mcp._session, "MAX_LIST_PAGES", 5)
    listing, item, could_not = LISTS[method]
    with serve(count=5, per_page=1) as client:
        assert listing(client) == [item.format(n) for n in range(1, 6)]
    with serve(count=6, per_page=1) as client:
        with pytest.raises(MCPListError) as info:
            listing(client)
    assert str(info.value) == f"MCP server 'pages' {could_not}: {method} has more than MAX_LIST_PAGES=5 pages; the rest was not read"
