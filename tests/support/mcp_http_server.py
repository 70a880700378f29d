"""A small MCP server for the tests, written with the SDK's own ``MCPServer`` class.

Run as ``python tests/support/mcp_http_server.py``: it serves streamable HTTP on 127.0.0.1 at
a free port and prints ``PORT <n>`` on stdout, then one line per event the tests wait
on (``STARTED slow``, ``CANCELLED slow``), so a test can latch on them instead of
sleeping. Every response echoes the request's Authorization header (``x-echo-authorization``).
"""

from __future__ import annotations

import socket
import sys
from typing import TypedDict

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

# a real 1x1 PNG
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

server = MCPServer("yiemagent-test")
cancelled = 0


def say(line: str) -> None:
    print(line, flush=True)


class Forecast(TypedDict):
    city: str
    temperature_c: float
    sky: str


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool(name="weather.forecast")
def forecast(city: str) -> Forecast:
    """A forecast as structured content (a dotted MCP tool name)."""
    return Forecast(city=city, temperature_c=21.5, sky="clear")


@server.tool()
def picture(caption: str = "a dot") -> CallToolResult:
    """An image and its caption."""
    return CallToolResult(content=[TextContent(text=caption), ImageContent(data=PNG, mime_type="image/png")])


@server.tool()
def mixed() -> CallToolResult:
    """One block of every other kind MCP has."""
    return CallToolResult(
        content=[
            AudioContent(data="AAAA", mime_type="audio/wav"),
            ResourceLink(name="readme", uri="file:///srv/readme.md", description="the readme"),
            EmbeddedResource(resource=TextResourceContents(uri="file:///srv/notes.txt", text="some notes")),
            EmbeddedResource(resource=BlobResourceContents(uri="file:///srv/dot.png", blob=PNG, mime_type="image/png")),
            EmbeddedResource(resource=BlobResourceContents(uri="file:///srv/data.bin", blob="AAAA", mime_type="application/octet-stream")),
            ImageContent(data="not base64!", mime_type="image/png"),
        ]
    )


@server.tool()
def fail(why: str) -> str:
    """Fail with the given reason (an isError result)."""
    raise ToolError(why)


@server.tool()
def leak(ctx: Context) -> str:
    """Fail with a message that repeats the Authorization header the client sent."""
    headers = ctx.headers or {}
    raise ToolError(f"token rejected: {headers.get('authorization', '(none)')}")


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, announcing the start and any cancellation on stdout."""
    global cancelled
    say("STARTED slow")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        cancelled += 1
        say("CANCELLED slow")
        raise
    return f"slept {seconds} s"


@server.tool()
async def countdown(steps: int, ctx: Context) -> str:
    """Report progress once per step, then finish."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
    return "lift-off"


@server.tool()
def cancellations() -> int:
    """How many slow calls were cancelled so far."""
    return cancelled


def echo_authorization(app):
    """The app, answering each request with the Authorization it carried in ``x-echo-authorization``, as some gateways do.

    The client's HTTP stack logs response headers at DEBUG: a test can see whether the echo is masked.
    """

    async def wrapped(scope, receive, send):
        sent = dict(scope.get("headers") or []).get(b"authorization") if scope["type"] == "http" else None

        async def send_with_echo(message):
            if sent is not None and message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"x-echo-authorization", sent)]}
            await send(message)

        await app(scope, receive, send_with_echo)

    return wrapped


def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    app = echo_authorization(server.streamable_http_app())
    config = uvicorn.Config(app, log_level="warning")
    say(f"PORT {sock.getsockname()[1]}")
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    sys.exit(main())
