"""The summary of ``SummarizeHistory``: its request, the transcript it is asked of, its text kept within its room (docs/sessions.md "Long conversations").

``compaction.py`` decides what is left out of a request; this module makes the summary of
what was left out: the oldest messages as transcript lines (``_line``) joined into chunks
that fit (``_chunks``), each asked of the model as one request of the run
(``_summary_reply``: it counts against ``max_requests``, sees the run's abort signal and is
checked by ``normalize_reply``), and the summary cut to its room (``_cut_to``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Optional

from .._failures import describe_error, user_code_errors
from ..events import stream_to
from ..extraction import extract_tool_calls
from ..normalize import normalize_reply
from ..tokens import estimate_text_tokens
from ..types import AgentMessage, AssistantMessage, ImageContent, LLMUsage, TextContent, ToolResultMessage, UserMessage, add_usage

SUMMARY_HEADER = "Summary of the earlier conversation (the messages it replaces are not shown):"
"""What precedes a summary at the head of the first user message sent."""

DEFAULT_INSTRUCTIONS = (
    "You summarise a conversation between a user and an assistant that uses tools, for the assistant "
    "that will continue it without seeing these messages. Keep every fact, name, number, decision, "
    "result and open task it needs; say in brief which tools were called and what they returned. "
    "Write the summary only."
)

_CUT_MARK = " [...]"
"""What ends a summary cut to fit."""


_SUMMARY_FAILED = frozenset({"error", "refusal", "content_filter"})
"""The stop reasons of a reply that holds no summary (a refusal's words are not one)."""


def _summary_reply(llm_call: Callable[[dict[str, Any]], Any], request: dict[str, Any], run: Any, max_requests: Optional[int]) -> tuple[Optional[str], str]:
    """One summary request, a request of the run: (the summary, "") or (None, why there is none).

    It counts against ``max_requests`` (``run.side_requests``; it is not sent when the
    round's own request would then pass the cap), sees the run's abort signal as a round's
    call does (``current_abort_signal``; its deltas are not shown), its tokens join the
    run's usage, and its reply is checked by ``normalize_reply`` (decision 15) before its
    text is read.
    """
    if run.signal.aborted:
        return None, _aborted(run)
    if max_requests is not None and run.rounds + run.side_requests + 2 > max_requests:
        return None, f"max_requests={max_requests} leaves no request for it"
    run.side_requests += 1
    try:
        with stream_to(_not_shown, run.signal):
            raw = llm_call(request)
    except user_code_errors() as exc:
        return None, describe_error(exc)
    usage = getattr(raw, "usage", None) if isinstance(raw, AssistantMessage) else None
    run.usage = add_usage(run.usage, usage if isinstance(usage, LLMUsage) else None)
    if run.signal.aborted:
        return None, _aborted(run)
    reply, _, error = normalize_reply(raw)
    if reply is None:
        return None, error or "the reply could not be read"
    if reply.stop_reason in _SUMMARY_FAILED:
        return None, reply.error_message or f"the reply's stop_reason is {reply.stop_reason!r}"
    text = reply.text.strip()
    return (text, "") if text else (None, "the reply had no text")


def _aborted(run: Any) -> str:
    """Why an aborted run gets no summary: its abort's reason."""
    return f"the run was aborted: {run.signal.reason or 'aborted by abort()'}"


def _not_shown(kind: str, text: str) -> None:
    """Where a summary request's deltas go: nowhere (the user sees the rounds' replies only)."""


def _prefix_within(text: str, tokens: int) -> int:
    """The length of the longest prefix of ``text`` (found by halving) whose estimate is at most ``tokens``; 0 when none."""
    if tokens <= 0:
        return 0
    chars = min(len(text), tokens * 4)
    while chars > 0 and estimate_text_tokens(text[:chars]) > tokens:
        chars = chars * 3 // 4
    return chars


def _cut_to(text: str, tokens: int) -> str:
    """``text``, or its longest prefix within about ``tokens`` ending ``_CUT_MARK`` when it is longer."""
    if estimate_text_tokens(text) <= tokens:
        return text
    return text[: _prefix_within(text, tokens - estimate_text_tokens(_CUT_MARK))] + _CUT_MARK


def _summary_room(limit: int) -> int:
    """What a summary may take of the room: a quarter, at most 1,024 tokens."""
    return max(16, min(limit // 4, 1024))


def _line(message: AgentMessage, cap: int) -> str:
    """One message as a line of the transcript, cut to about ``cap`` tokens; "" for what is never sent."""
    if isinstance(message, UserMessage):
        text = f"User: {_text_of(message.content)}"
    elif isinstance(message, AssistantMessage):
        calls = extract_tool_calls(message)[1]
        called = "".join(f"\n(called {c.name} with {json.dumps(c.arguments, ensure_ascii=False, default=str)})" for c in calls)
        text = f"Assistant: {message.text}{called}"
    elif isinstance(message, ToolResultMessage):
        text = f"Tool {message.tool_name} returned{' an error' if message.is_error else ''}: {_text_of(message.content)}"
    else:
        return ""
    tokens = estimate_text_tokens(text)
    if tokens <= cap:
        return text
    keep = max(1, len(text) * cap // tokens)
    return f"{text[:keep]} [... {len(text) - keep} characters cut]"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or ():
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent):
            parts.append("[an image]")
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return " ".join(parts)


def _chunks(lines: list[str], budget: int) -> list[str]:
    """The lines joined into texts of at most about ``budget`` tokens each (a line is never split: ``_line`` cut it)."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for line in lines:
        cost = estimate_text_tokens(line) + 1
        if current and size + cost > budget:
            chunks.append("\n".join(current))
            current, size = [], 0
        current.append(line)
        size += cost
    if current:
        chunks.append("\n".join(current))
    return chunks
