"""``OfflineLLM``: a deterministic keyword planner for the demo and for users without a server.

It is not a language model, and its replies say so. It reads the OpenAI-format dict every
``llm_call`` gets and plans tool calls from keywords in the last user message:

- "weather in Tokyo" (or "weather in Tokyo, Paris and Oslo") → ``getWeather`` per city;
- "time" → ``getTime``; "time in Asia/Tokyo" → with that IANA zone;
- "tools" → ``listTools``;
- "call <tool> with {json}" → that tool with those arguments (any tool, e.g. your own).

Several matches make several calls in one turn: a batch. After the tools answered, it
replies from their results. One recovery is built in, so the demo can show an error fed
back to the model and recovered from: when ``getTime`` fails on an unknown zone, it asks
again without a zone (local time) and says so. It only calls tools the request offers.

Thread safety: stateless; callable from any thread.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from ..extraction import arguments_json, parse_tool_arguments
from ..types import AssistantMessage, TextContent
from ._wire import content_text

__all__ = ["OfflineLLM"]

PREFIX = "(offline keyword planner, not a language model)"
_WEATHER = re.compile(r"weather (?:in|for|at) ([^?.!;\n]+)", re.I)
_ZONE = re.compile(r"\b([A-Za-z]+(?:/[A-Za-z0-9_+\-]+)+)\b")
_CALL = re.compile(r"call (\w+) with (\{.*\})", re.I | re.S)
_SPLIT_CITIES = re.compile(r"\s*(?:,|\band\b|&)\s*", re.I)


class OfflineLLM:
    """``llm_call`` that plans tool calls from keywords; deterministic, no network, honest about it."""

    model = "offline-keyword-planner"

    def __repr__(self) -> str:
        return "OfflineLLM()"

    def __call__(self, formatted: dict[str, Any]) -> AssistantMessage:
        messages = formatted.get("messages", [])
        available = {t["function"]["name"] for t in formatted.get("tools", []) if isinstance(t, dict) and "function" in t}
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
        if last_user is None:
            return self._say("There is no question to answer yet.")
        turn = messages[last_user + 1 :]
        round_number = sum(1 for m in messages if m.get("role") == "assistant")
        if not any(m.get("role") == "tool" for m in turn):
            calls = self._plan(content_text(messages[last_user].get("content")), available)
            if not calls:
                return self._say(self._help(available))
            return self._calls(calls, round_number)
        return self._answer(turn, available, round_number)

    # --- planning -------------------------------------------------------------------

    def _plan(self, text: str, available: set[str]) -> list[tuple[str, dict[str, Any]]]:
        calls: list[tuple[str, dict[str, Any]]] = []
        explicit = _CALL.search(text)
        if explicit and explicit.group(1) in available:
            calls.append((explicit.group(1), parse_tool_arguments(explicit.group(2))[0]))
            return calls
        lowered = text.lower()
        if "weather" in lowered and "getWeather" in available:
            match = _WEATHER.search(text)
            if match:
                for city in _SPLIT_CITIES.split(match.group(1)):
                    city = re.sub(r"\b(?:and|what|is|the|time|also)\b.*$", "", city, flags=re.I).strip()
                    if city:
                        calls.append(("getWeather", {"city": city}))
        if re.search(r"\btime\b", lowered) and "getTime" in available:
            zone = _ZONE.search(text)
            calls.append(("getTime", {"timezone": zone.group(1)} if zone else {}))
        if re.search(r"\btools?\b", lowered) and "listTools" in available:
            calls.append(("listTools", {}))
        return calls

    def _calls(self, calls: list[tuple[str, dict[str, Any]]], round_number: int) -> AssistantMessage:
        entries = [
            {"id": f"offline_{round_number}_{i}", "type": "function", "function": {"name": name, "arguments": arguments_json(args)}}
            for i, (name, args) in enumerate(calls)
        ]
        names = ", ".join(name for name, _ in calls)
        return AssistantMessage(
            [TextContent(f"{PREFIX} Calling {names}."), {"type": "tool_calls", "tool_calls": entries}],
            api="offline",
            provider="yiemagent",
            model=self.model,
            stop_reason="tool_use",
        )

    # --- answering ------------------------------------------------------------------

    def _answer(self, turn: list[dict[str, Any]], available: set[str], round_number: int) -> AssistantMessage:
        calls = {}
        for message in turn:
            for call in message.get("tool_calls") or []:
                calls[call.get("id")] = call.get("function", {})
        last_assistant = max(i for i, m in enumerate(turn) if m.get("role") == "assistant")
        results = [m for m in turn[last_assistant + 1 :] if m.get("role") == "tool"]
        retry = self._recovery(results, calls, available)
        if retry is not None:
            return self._calls([retry], round_number)
        lines = [self._line(r, calls) for r in turn[:last_assistant] if r.get("role") == "tool"]
        if lines:
            lines.append("  so I asked again without a time zone:")
        lines.extend(self._line(r, calls) for r in results)
        return self._say("Here is what the tools returned:\n" + "\n".join(lines))

    @staticmethod
    def _line(result: dict[str, Any], calls: dict[Any, dict[str, Any]]) -> str:
        name = calls.get(result.get("tool_call_id"), {}).get("name", "a tool")
        content = content_text(result.get("content"))
        if result.get("is_error") and not content.startswith("Tool "):
            return f"- {name} failed: {content}"
        return f"- {content}"

    def _recovery(self, results: list[dict[str, Any]], calls: dict[Any, dict[str, Any]], available: set[str]) -> Optional[tuple[str, dict[str, Any]]]:
        """A failed getTime with a zone is retried once without the zone (local time)."""
        for result in results:
            function = calls.get(result.get("tool_call_id"), {})
            if function.get("name") != "getTime" or "getTime" not in available:
                continue
            content = content_text(result.get("content"))
            arguments = function.get("arguments")
            had_zone = "timezone" in parse_tool_arguments(arguments)[0]
            if had_zone and ("was not found" in content or "not a valid" in content):
                return ("getTime", {})
        return None

    def _help(self, available: set[str]) -> str:
        hints = []
        if "getTime" in available:
            hints.append("the time ('what time is it in Asia/Tokyo?')")
        if "getWeather" in available:
            hints.append("the weather ('weather in Paris and Oslo')")
        if "listTools" in available:
            hints.append("my tools ('what tools do you have?')")
        hints.append("any tool by name ('call getTime with {}')")
        return "I only understand a few requests: " + "; ".join(hints) + "."

    def _say(self, text: str) -> AssistantMessage:
        return AssistantMessage([TextContent(f"{PREFIX} {text}")], api="offline", provider="yiemagent", model=self.model, stop_reason="stop")
