"""Model Context Protocol servers' tools as yiemagent tools (the optional extra ``yiemagent[mcp]``).

docs/mcp.md; docs/api.md "MCP servers"::

    from yiemagent.mcp import MCPClient

    with MCPClient.stdio(["mcp-server-time"]) as time_server:
        for tool in time_server.tools():
            register_tool(agent.tool_store, tool)
        ...

Importing ``yiemagent`` never imports this package or the SDK; importing this package
without the extra raises ``ImportError`` saying what to install. docs/mcp.md explains
the threading and what happens on each failure.
"""

from __future__ import annotations

from importlib import metadata as _metadata

_HINT = 'yiemagent.mcp needs the MCP Python SDK 2.x: pip install "yiemagent[mcp]"'

try:
    _sdk_version = _metadata.version("mcp")
except _metadata.PackageNotFoundError:
    raise ImportError(_HINT) from None
if not _sdk_version.split(".")[0].isdigit() or int(_sdk_version.split(".")[0]) < 2:
    raise ImportError(f"{_HINT} (found mcp {_sdk_version})")

from ._convert import MCPPrompt, MCPPromptArgument, MCPResource
from .client import MCPClient, MCPConnectionError, MCPListError, MCPRequestError

__all__ = ["MCPClient", "MCPConnectionError", "MCPListError", "MCPPrompt", "MCPPromptArgument", "MCPRequestError", "MCPResource"]
