"""A conversation's history beyond one run: saved files, sessions, the JSON form of a message.

docs/sessions.md. ``save_history`` / ``load_history`` keep a history in one JSON file and
``complete_tool_calls`` mends what a crash or two writers left (``files``); a session
(``sessions``) is where an agent's history lives between runs and processes, held by one
agent at a time (decision 17); ``_json`` is the one JSON form of a message both use, and
``_locked_files`` the atomic write and the OS file locks.
"""

from .files import (
    FORMAT,
    LOST_RESULT_MESSAGE,
    VERSION,
    ToolResultRepair,
    complete_tool_calls,
    each_message,
    history_from_session,
    load_history,
    save_history,
)
from .sessions import HeldSession, Session, SQLiteSession, hold_session, release_session

__all__ = [
    "FORMAT",
    "LOST_RESULT_MESSAGE",
    "VERSION",
    "HeldSession",
    "SQLiteSession",
    "Session",
    "ToolResultRepair",
    "complete_tool_calls",
    "each_message",
    "history_from_session",
    "hold_session",
    "load_history",
    "release_session",
    "save_history",
]
