"""A ``tools/list`` page checked tool by tool, so that one bad tool does not cost the others.

docs/mcp.md, "What happens on each failure": a tool that is not valid MCP (an
``inputSchema`` that is a list or a string, or lacks ``"type": "object"``; a tool without
a name) is left out of ``tools()`` with a warning naming the server and the tool, and the
rest are listed. The SDK validates a page whole and refuses all of it for one such tool,
so the check sits between the transport and the SDK's ``ClientSession``: ``wrap`` wraps
the transport's two streams. The write side notes the id of each ``tools/list`` request;
the read side checks each tool of the answer to such an id with the SDK's own validator
for the negotiated protocol version (``mcp_types.methods.parse_server_result``, public
API) and drops those that fail. The SDK then gets a valid page and keeps its own state
(the output schemas it checks each call's result against, which it relists by itself)
exactly as for a server that behaves.

The read side also sees ``notifications/tools/list_changed`` in wire order, before any
response read after it, and tells the connection at once (``on_list_changed``): the SDK
hands notifications to a task of their own, which may run after the response of the very
call during which the server changed its tools (docs/mcp.md "Tools that change").

A page whose fault is not one tool's (``nextCursor`` not a string, ``tools`` not a list)
is passed on as it came: the SDK refuses it and ``tools()`` raises ``MCPConnectionError``.

Thread safety: none needed; a ``ToolListing`` and its streams live on the client's event
loop thread (``_session``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Optional

from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse
from mcp_types.methods import parse_server_result
from pydantic import ValidationError

__all__ = ["ToolListing"]

logger = logging.getLogger("yiemagent.mcp")

_METHOD = "tools/list"
_CHANGED = "notifications/tools/list_changed"
_FALLBACK_VERSION = "2025-11-25"  # what the SDK assumes before the handshake has named one


class ToolListing:
    """Notes the ``tools/list`` requests sent and cleans the pages answering them (see the module docstring).

    ``version`` is the negotiated protocol version, set once ``initialize`` is answered.
    """

    def __init__(self, label: str, redact: Callable[[str], str], on_list_changed: Optional[Callable[[], None]] = None) -> None:
        self.label = label
        # called at once, in wire order, for notifications/tools/list_changed: before any later response is read
        self.on_list_changed = on_list_changed
        self.version: Optional[str] = None
        self._redact = redact
        self._pending: set[Any] = set()  # ids of tools/list requests not answered yet

    def wrap(self, read: Any, write: Any) -> tuple[Any, Any]:
        """The transport's (read, write) streams, with the listing checked on the way in."""
        return _Reader(read, self), _Writer(write, self)

    def sent(self, item: Any) -> None:
        message = getattr(item, "message", None)
        if isinstance(message, JSONRPCRequest) and message.method == _METHOD:
            self._pending.add(message.id)

    def received(self, item: Any) -> Any:
        message = getattr(item, "message", None)
        if isinstance(message, JSONRPCNotification) and message.method == _CHANGED and self.on_list_changed is not None:
            self.on_list_changed()
        if isinstance(message, (JSONRPCResponse, JSONRPCError)) and message.id in self._pending:
            self._pending.discard(message.id)
            if isinstance(message, JSONRPCResponse):
                self._clean(message.result)
        return item

    def _clean(self, page: dict[str, Any]) -> None:
        """Drop, in place, each tool of ``page`` that the SDK would refuse, with a warning for each."""
        tools = page.get("tools")
        version = self.version or _FALLBACK_VERSION
        if not isinstance(tools, list) or _fault(version, {**page, "tools": []}) is not None:
            return  # not one tool's fault: the SDK says what is wrong with the page
        kept = []
        for position, tool in enumerate(tools, 1):
            fault = _fault(version, {**page, "tools": [tool]})
            if fault is None:
                kept.append(tool)
                continue
            name = tool.get("name") if isinstance(tool, dict) else None
            shown = repr(name) if isinstance(name, str) else f"#{position} of the page (it has no name)"
            logger.warning("%s", self._redact(f"MCP server {self.label!r}: tool {shown} left out: it is not valid MCP ({fault})"))
        if len(kept) != len(tools):
            page["tools"] = kept


def _fault(version: str, page: dict[str, Any]) -> Optional[str]:
    """Why the SDK would refuse ``page`` (``at <field>: <reason>``), or None if it takes it."""
    try:
        parse_server_result(_METHOD, version, page)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first.get("loc", ()))
        if loc[:2] == ("tools", 0):
            loc = loc[2:]
        where = ".".join(str(part) for part in loc) or "the tool itself"
        return f"at {where}: {first.get('msg', exc)}"
    except (KeyError, ValueError):  # a version the SDK does not know: nothing to check against (it refuses that itself)
        return None
    return None


class _Stream:
    """One of the transport's streams, wrapped: what is not overridden is the transport's own."""

    def __init__(self, inner: Any, listing: ToolListing) -> None:
        self._inner = inner
        self._listing = listing

    def __getattr__(self, name: str) -> Any:  # last_context, close, clone...
        return getattr(self._inner, name)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Any:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self._inner.__aexit__(*exc_info)


class _Reader(_Stream):
    """The transport's read stream; each item goes through ``ToolListing.received``."""

    async def receive(self) -> Any:
        return self._listing.received(await self._inner.receive())

    def __aiter__(self) -> _Reader:
        return self

    async def __anext__(self) -> Any:
        return self._listing.received(await self._inner.__anext__())


class _Writer(_Stream):
    """The transport's write stream; each item goes through ``ToolListing.sent`` first."""

    async def send(self, item: Any) -> None:
        self._listing.sent(item)
        await self._inner.send(item)
