"""One turn of a conversation, safe to run again: what the Celery task calls (docs/scale.md).

``run_turn`` answers a user message in a conversation whose history lives in PostgreSQL
(``PostgresSession``). A broker with late acknowledgement delivers a task again when the
worker running it died, and may deliver it twice; ``run_turn`` makes that harmless:

* the turn's id is recorded in ``yiemagent_turns`` with the index its user message takes
  in the history, before the message is sent to the agent;
* run again, the turn finds its record. If the history holds a final reply after that
  index, the reply is returned and the model is not asked again ("stored"). If the user
  message is there but no final reply (the worker died mid-turn), the agent continues the
  conversation from what was stored — a tool batch cut short has its calls answered with
  error results on load — and the turn ends with one final reply ("completed"). If the
  record is there but not the message (the worker died in between), the message is sent
  ("restarted"). A turn never seen before is "new".

All of it happens while the task's agent holds the session (decision 17), so no two runs
of a conversation interleave: a second delivery waits up to ``hold_timeout`` for the
first and then finds its reply.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import psycopg

from yiemagent import (
    AgentTool,
    AssistantMessage,
    PostgresSession,
    TextContent,
    ToolStore,
    UserMessage,
    YiemAgent,
    continue_agent,
    extract_tool_calls,
    register_tool,
    run_agent,
    shutdown,
    take_response,
)

TURNS_LOCK = (0x59454D41, -1)  # (yiemagent's advisory lock class, a key no session id gets): serialises the table's creation
SYSTEM_PROMPT = "You answer questions. Call lookup for the facts first."

class TurnFailed(RuntimeError):
    """The agent's run for a turn ended without a final reply (an LLM error, say); running the task again completes the turn."""


def prepare(dsn: str) -> None:
    """Create the turns table (idempotent; safe from many processes at once)."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", TURNS_LOCK)
        conn.execute(
            "CREATE TABLE IF NOT EXISTS yiemagent_turns ("
            " session_id TEXT NOT NULL, turn_id TEXT NOT NULL, first_index INTEGER NOT NULL,"
            " PRIMARY KEY (session_id, turn_id))"
        )


def text_of(message: AssistantMessage) -> str:
    """The text blocks of a reply, joined."""
    return "".join(block.text for block in message.content if isinstance(block, TextContent))


def final_reply_after(history: list, start: int) -> Optional[AssistantMessage]:
    """The first assistant message after ``history[start]`` that calls no tool: the turn's answer, if stored."""
    for message in history[start + 1 :]:
        if isinstance(message, AssistantMessage) and not extract_tool_calls(message)[0]:
            return message
    return None


def run_turn(
    dsn: str,
    conversation_id: str,
    turn_id: str,
    text: str,
    *,
    llm_call: Callable[[dict], AssistantMessage],
    tools: list[AgentTool],
    hold_timeout: float = 60.0,
    reply_timeout: float = 120.0,
) -> dict[str, Any]:
    """Answer ``text`` as turn ``turn_id`` of ``conversation_id``, once, however often it is run.

    Returns ``{"conversation_id", "turn_id", "reply", "status"}``; status is "new",
    "stored", "completed" or "restarted" (the module's docstring says when).

    Raises:
        SessionInUseError: another run held the conversation for longer than ``hold_timeout``.
        TurnFailed: the run ended without a final reply; nothing of it is lost, and a
            new run of the task completes the turn.
        psycopg.Error: the database could not be reached.
    """
    store = ToolStore(conversation_id)
    for tool in tools:
        register_tool(store, tool)
    with PostgresSession(dsn, conversation_id, hold_timeout=hold_timeout) as session:
        # YiemAgent takes the session's hold (waiting up to hold_timeout) and gives it back at shutdown (decision 17)
        agent = YiemAgent(llm_call=llm_call, agent_event_sink=None, system_prompt=SYSTEM_PROMPT, session=session, tool_store=store, builtin_tools=False)
        try:
            with psycopg.connect(dsn, autocommit=True) as ledger:
                row = ledger.execute(
                    "SELECT first_index FROM yiemagent_turns WHERE session_id = %s AND turn_id = %s", (conversation_id, turn_id)
                ).fetchone()
                history = agent.history()
                if row is None:
                    status, start = "new", len(history)
                    ledger.execute(
                        "INSERT INTO yiemagent_turns (session_id, turn_id, first_index) VALUES (%s, %s, %s)", (conversation_id, turn_id, start)
                    )
                else:
                    start = row[0]
                    status = "restarted" if len(history) == start else "completed"
            if status == "completed":
                first = history[start]
                if not (isinstance(first, UserMessage) and "".join(b.text for b in first.content if isinstance(b, TextContent)) == text):
                    raise RuntimeError(f"turn {turn_id!r} of {conversation_id!r} should start at message {start}, which is not its user message")
                stored = final_reply_after(history, start)
                if stored is not None:
                    return {"conversation_id": conversation_id, "turn_id": turn_id, "reply": text_of(stored), "status": "stored"}
                continue_agent(agent)
            else:
                run_agent(agent, text)
            reply = take_response(agent, timeout=reply_timeout)
            if reply.stop_reason not in ("stop", None) or extract_tool_calls(reply)[0]:
                raise TurnFailed(f"turn {turn_id!r} of {conversation_id!r} ended with stop_reason {reply.stop_reason!r}: {reply.error_message}")
            return {"conversation_id": conversation_id, "turn_id": turn_id, "reply": text_of(reply), "status": status}
        finally:
            shutdown(agent, timeout=reply_timeout)
