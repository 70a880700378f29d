"""Session rows: the compact form, the writer's mark, and rows of the first form (docs/sessions.md "Rows and their mark")."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from yiemagent import ApprovalMessage, AssistantMessage, ImageContent, LLMUsage, TextContent, ToolResultMessage, UserMessage

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "session-v1.db"
STAMP = datetime(2026, 12, 6, 9, 2, 4, 633046, tzinfo=timezone.utc)


def first_form_messages() -> list[Any]:
    """The messages of tests/fixtures/session-v1.db: one of each kind and field, as the first form (schema 1) stored them."""
    ahead = timezone(timedelta(hours=5, minutes=30))
    return [
        UserMessage([TextContent("What is the weather in Paris?"), ImageContent("aGk=", "image/png")], STAMP),
        AssistantMessage(
            [{"type": "tool_calls", "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}],
            api="openai-completions",
            provider="openai",
            model="gpt-4o",
            usage=LLMUsage(100, 20, 0, 0, 120, 0),
            stop_reason="tool_use",
            timestamp=STAMP,
        ),
        ApprovalMessage("call_0", "get_weather", "approved", {"city": "Paris"}, "", STAMP),
        ToolResultMessage("call_0", "get_weather", [TextContent("Sunny, 22 C")], {}, None, None, False, STAMP),
        AssistantMessage([{"type": "tool_call", "id": "call_1", "name": "lookup", "arguments": {"q": [1, 2.5, None, True]}}], usage=LLMUsage(5, 6, 1, 2, 11, 3), timestamp=STAMP),
        ToolResultMessage(
            "call_1",
            "lookup",
            [TextContent("found ☃ 👋")],
            {"when": STAMP, "pair": (1, "a"), "raw": b"\x00\xff", 3: "int key"},
            LLMUsage(1, 2, 0, 0, 3, 0),
            ["added_tool"],
            True,
            datetime(2026, 12, 6, 14, 32, 4, tzinfo=ahead),
        ),
        UserMessage([TextContent("naive and old")], datetime(2001, 2, 3, 4, 5, 6)),
        AssistantMessage([TextContent("It is sunny.")], model="gpt-4o", stop_reason="stop", error_message="", timestamp=STAMP, output={"answer": "sunny"}),
        AssistantMessage([TextContent("")], stop_reason="error", error_message="the server said 500", timestamp=STAMP),
    ]
