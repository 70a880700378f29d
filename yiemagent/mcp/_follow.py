"""The tool stores an ``MCPClient`` keeps in step with its server (docs/mcp.md "Tools that change").

``MCPClient.tools(store)`` registers the server's tools in ``store`` and asks the client
to follow the server: when the server sends ``notifications/tools/list_changed``, the
connection relists its tools (``_session.Connection``) and ``ToolFollower.update``
registers the new list in every store followed — a new tool is added, a changed one
replaced, one the server dropped removed. The agent's ``state.tools`` is its store's own
dict (spec §4), so its next LLM round sees the new list; the tool call during which the
server announced the change returns only once the new list is in place.

Stores are held weakly: a dropped agent's store is not kept alive by its server.

Thread safety: ``follow`` runs on a caller's thread, ``update`` on the client's loop
thread; ``_lock`` guards ``_stores``. Each store is changed under its own lock, as
``register_tool`` does; readers take snapshots (``tuple(store.tools.values())``).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable

from ..registry import ToolStore, register_tool
from ..types import AgentTool

__all__ = ["ToolFollower"]

logger = logging.getLogger("yiemagent.mcp")


class ToolFollower:
    """Each followed store, with the names this client registered in it."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._lock = threading.Lock()  # guards _stores
        self._stores: list[tuple[weakref.ref[ToolStore], dict[str, AgentTool]]] = []  # the tools this client put there

    def follow(self, store: ToolStore, tools: Iterable[AgentTool]) -> None:
        """Register ``tools`` in ``store`` and keep it in step from now on."""
        tools = list(tools)
        for tool in tools:
            register_tool(store, tool)
        with self._lock:
            self._stores = [(ref, names) for ref, names in self._stores if ref() is not None and ref() is not store]
            self._stores.append((weakref.ref(store), {tool.name: tool for tool in tools}))

    def update(self, tools: Iterable[AgentTool]) -> None:
        """Put the server's new list in every store followed: register each tool, remove those no longer listed."""
        new = {tool.name: tool for tool in tools}
        with self._lock:
            followed = [(store, old) for ref, old in self._stores if (store := ref()) is not None]
            self._stores = [(weakref.ref(store), dict(new)) for store, _ in followed]
        for store, old in followed:
            for tool in new.values():
                register_tool(store, tool)
            gone = sorted(set(old) - set(new))
            with store._lock:
                for name in gone:
                    if store.tools.get(name) is old[name]:  # still ours: a tool the user put under that name stays
                        del store.tools[name]
            logger.info("MCP server %r changed its tools: store %r has %s now (removed %s)", self.label, store.name, sorted(new), gone)
