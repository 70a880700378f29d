"""A conversation's history beyond one run: saved files, sessions, the JSON form of a message.

docs/sessions.md. ``save_history`` / ``load_history`` keep a history in one JSON file
(``files``); a session (``sessions``) is where an agent's history lives between runs and
processes; ``_json`` is the one JSON form of a message both use.
"""

from .files import FORMAT, LOST_RESULT_MESSAGE, VERSION, complete_tool_calls, history_from_session, load_history, save_history
from .sessions import HistoryWriter, Session, SQLiteSession

__all__ = [
    "FORMAT",
    "LOST_RESULT_MESSAGE",
    "VERSION",
    "HistoryWriter",
    "SQLiteSession",
    "Session",
    "complete_tool_calls",
    "history_from_session",
    "load_history",
    "save_history",
]
