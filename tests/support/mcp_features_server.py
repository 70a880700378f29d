"""An MCP server with resources, prompts and a tool list that changes, written with the SDK's own ``MCPServer``.

``python tests/support/mcp_features_server.py`` speaks stdio; with ``--http`` it serves
streamable HTTP on 127.0.0.1 at a free port and prints ``PORT <n>`` first (as
mcp_http_server.py does). ``unlock`` adds the tool ``secret`` and ``lock`` removes it,
each announcing the change with ``notifications/tools/list_changed``. ``big`` returns a
text of the size asked (bench/bench_mcp.py measures large results with it).
"""

from __future__ import annotations

import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolListChangedNotification

from mcp_http_server import PNG

server = MCPServer("yiemagent-features")


@server.resource("notes://readme", name="readme", description="what this server is", mime_type="text/plain")
def readme() -> str:
    return "This server has resources, prompts and tools that change."


@server.resource("images://dot", name="dot", description="a 1x1 PNG", mime_type="image/png")
def dot() -> bytes:
    import base64

    return base64.b64decode(PNG)


@server.prompt(name="review", description="Ask for a code review")
def review(code: str, language: str = "python") -> list:
    from mcp.server.mcpserver.prompts.base import AssistantMessage, UserMessage

    return [UserMessage(f"Review this {language} code:\n{code}"), AssistantMessage("I will look for bugs first.")]


def secret() -> str:
    """A tool that exists only after unlock."""
    return "the secret is 42"


async def changed(ctx: Context) -> None:
    """notifications/tools/list_changed on the call's own stream (over HTTP: the POST's), so it comes before the call's answer."""
    await ctx.session.send_notification(ToolListChangedNotification(), related_request_id=ctx.request_id)


@server.tool()
async def unlock(ctx: Context) -> str:
    """Add the tool 'secret' and tell the client the list changed."""
    server.add_tool(secret, name="secret")
    await changed(ctx)
    return "unlocked"


@server.tool()
async def lock(ctx: Context) -> str:
    """Remove the tool 'secret' and tell the client the list changed."""
    server.remove_tool("secret")
    await changed(ctx)
    return "locked"


@server.tool(structured_output=False)
def big(megabytes: float, char: str = "x") -> str:
    """A text of ``megabytes`` million characters ``char``.

    Sent once, as text content: by default the SDK also sends a ``str`` result as
    ``structuredContent`` ``{"result": ...}``, a message twice the size (50 MB of text would
    be a 100 MB message, past the client's 64 MiB cap; docs/mcp.md "Large results").
    """
    return char * int(megabytes * 1_000_000)


def main() -> None:
    if "--http" not in sys.argv:
        server.run("stdio")
        return
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    sys.exit(main())
