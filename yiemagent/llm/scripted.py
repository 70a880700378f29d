"""A scripted LLM: replies from a list, for tests and for writing examples without a server."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Union

from ..errors import LLMError
from ..types import AssistantMessage, TextContent

__all__ = ["ScriptedLLM", "tool_call_reply"]

Reply = Union[AssistantMessage, str, Callable[[dict[str, Any]], AssistantMessage], BaseException]


def tool_call_reply(*calls: tuple[str, str, dict[str, Any]], text: str = "") -> AssistantMessage:
    """An assistant reply holding tool calls in spec §7 format 1: ``(id, name, arguments)`` each."""
    block = {
        "type": "tool_calls",
        "tool_calls": [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls],
    }
    content: list[Any] = ([TextContent(text)] if text else []) + [block]
    return AssistantMessage(content, stop_reason="tool_use", model="scripted")


class ScriptedLLM:
    """``llm_call`` that answers from a script, in order, and records every request.

    Each script entry is an ``AssistantMessage``, a string (a text reply), a callable
    ``formatted -> AssistantMessage`` (to answer from what was sent), or an exception to
    raise. When the script runs out it raises ``LLMError`` — a test that expects fewer
    LLM rounds fails loudly instead of hanging.

    Thread safety: callable from any thread; ``_lock`` guards ``_script`` and ``requests``.
    """

    def __init__(self, script: Iterable[Reply] = (), *, record: bool = True) -> None:
        self._lock = threading.Lock()  # guards _script and requests
        self._script: list[Reply] = list(script)
        self._record = record
        self.requests: list[dict[str, Any]] = []  # every formatted dict received, as received

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self._script.extend(replies)

    def __call__(self, formatted: dict[str, Any]) -> AssistantMessage:
        with self._lock:
            if self._record:
                self.requests.append(formatted)
            if not self._script:
                raise LLMError(f"ScriptedLLM: the script ran out at request {len(self.requests)}")
            reply = self._script.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, str):
            return AssistantMessage([TextContent(reply)], stop_reason="stop", model="scripted")
        if callable(reply):
            return reply(formatted)
        return reply
