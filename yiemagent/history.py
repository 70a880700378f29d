"""The conversation history beyond the run: adding to it, saving it, loading it, mending it.

API.md "History and sessions". ``add_message`` appends without starting a run;
``save_history`` / ``load_history`` keep a history in one versioned JSON document;
``complete_tool_calls`` answers the tool calls a crash left without a result, so a stored
history is always valid to send (decision 15).

The document (version 1)::

    {"format": "yiemagent-history", "version": 1, "messages": [<message>, ...]}

Each message is in the form ``_history_json`` describes: the fields of ``to_dict()``,
with datetimes, bytes, tuples, sets and non-string keys inside ``details`` kept as
tagged objects (docs/sessions.md has the table).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union

from ._history_json import message_from_data, message_to_data, utf8_json
from .errors import MessageFormatError
from .extraction import extract_tool_calls
from .messages import AgentMessage, AssistantMessage, TextContent, ToolResultMessage
from .normalize import normalize_message

if TYPE_CHECKING:
    from .agent import YiemAgent
    from .sessions import Session

__all__ = [
    "FORMAT",
    "LOST_RESULT_MESSAGE",
    "VERSION",
    "add_message",
    "complete_tool_calls",
    "each_message",
    "history_from_session",
    "load_history",
    "save_history",
]

logger = logging.getLogger("yiemagent.history")

FORMAT = "yiemagent-history"
VERSION = 1

LOST_RESULT_MESSAGE = (
    "No result was recorded for this tool call: the process running it stopped before the call "
    "finished, so it may or may not have taken effect. Check before repeating it."
)

PathLike = Union[str, "os.PathLike[str]"]
T = TypeVar("T")


def add_message(agent: "YiemAgent", message: AgentMessage) -> None:
    """Append ``message`` to the agent's history without starting a run (API.md; spec §10 hand-off).

    While the agent is idle the message is appended at once (stored in the agent's session
    first). While a run is active it joins the history at that run's next LLM round, as
    input does; a run that ends without another round appends it when it ends, before
    the next run can start. Either way no run is started: ``continue_agent`` asks the LLM
    to go on, e.g. after a terminating tool handed work to an external system whose result
    this message carries. If ``shutdown`` gives up on the run it waits for, ``shutdown``
    returns it (decision 16).

    Thread safety: callable from any thread; a run cannot start between the decision
    "idle or not" and the append (``AgentCore.add_message``), and the session is called
    without the agent's loop lock held. The message is checked (decision 15) in the
    caller's thread.

    Raises:
        MessageFormatError: ``message`` is not an ``AgentMessage``, or cannot be sent to an
            LLM again (decision 15).
        AgentClosedError: the agent has been shut down.
        Exception: while idle, whatever the agent's session raised storing the message
            (e.g. ``sqlite3.OperationalError``); the message was then not added.
    """
    if not isinstance(message, AgentMessage):
        raise MessageFormatError(f"add_message takes an AgentMessage (UserMessage, AssistantMessage, ToolResultMessage), got {type(message).__name__}")
    agent._core.add_message(normalize_message(message))  # decision 15: checked in the caller's thread


def each_message(messages: Iterable[Any], convert: Callable[[AgentMessage], T]) -> list[T]:
    """``convert(message)`` for each of ``messages``, in order (``save_history``, ``YiemAgent(messages=)``).

    Raises:
        MessageFormatError: an entry is not an ``AgentMessage``, or ``convert`` refused it;
            the message names its index (``messages[3]: ...``).
    """
    out = []
    for index, message in enumerate(messages):
        if not isinstance(message, AgentMessage):
            raise MessageFormatError(f"messages[{index}] is {type(message).__name__}; expected an AgentMessage")
        try:
            out.append(convert(message))
        except MessageFormatError as exc:
            raise MessageFormatError(f"messages[{index}]: {exc}") from None
    return out


def save_history(messages: Iterable[AgentMessage], path: PathLike) -> None:
    """Write ``messages`` to ``path`` as one versioned JSON document, atomically.

    The document goes to a temporary file in the same directory, is flushed and fsynced,
    then replaces ``path`` in one ``os.replace``: a reader (or a crash) sees the old
    file or the new one, never half of one.

    Whatever a message's ``details`` holds is written (docs/sessions.md, "The JSON form").

    Raises:
        MessageFormatError: an entry is not an ``AgentMessage``, or is one no agent would
            take (decision 15), so it would not load again; named by its index. Nothing
            is written.
        OSError: the file could not be written; ``path`` is left as it was.
    """
    entries = each_message(messages, message_to_data)
    _write_atomically(Path(path), utf8_json({"format": FORMAT, "version": VERSION, "messages": entries}, indent=1))


def _write_atomically(target: Path, data: bytes) -> None:
    directory = target.parent if str(target.parent) else Path(".")
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (POSIX); a platform without directory fds skips it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load_history(path: PathLike) -> list[AgentMessage]:
    """The messages of a document written by ``save_history``.

    Raises:
        MessageFormatError: the file is not such a document, or an entry is malformed;
            the message names the file and the entry (``messages[3]: has no 'content'``).
        OSError: the file cannot be read.
    """
    where = f"history file {str(path)!r}"
    with open(path, "rb") as handle:
        raw = handle.read()
    try:
        document = json.loads(raw)  # bytes: bad UTF-8 is a ValueError here, inside the try
    except (ValueError, RecursionError) as exc:
        raise MessageFormatError(f"{where} is not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise MessageFormatError(f"{where} is not a yiemagent history (no \"format\": {FORMAT!r})")
    if document.get("version") != VERSION:
        raise MessageFormatError(f"{where} has version {document.get('version')!r}; this yiemagent reads version {VERSION}")
    entries = document.get("messages")
    if not isinstance(entries, list):
        raise MessageFormatError(f"{where}: 'messages' is {type(entries).__name__}; expected a list")
    return [message_from_data(entry, f"{where}: messages[{index}]") for index, entry in enumerate(entries)]


def complete_tool_calls(messages: list[AgentMessage]) -> tuple[list[AgentMessage], list[tuple[int, ToolResultMessage]]]:
    """Answer every tool call that has no result, so the history is valid to send (decision 15).

    A crash between an assistant message with tool calls and the last of its results
    leaves calls unanswered, and LLM APIs reject such a history. Each missing result
    becomes an error result (``LOST_RESULT_MESSAGE``), placed after the results the batch
    has; its timestamp is the assistant message's, so mending the same history twice
    gives equal messages.

    Returns:
        The mended list, and each added result with its index in that list.
    """
    mended: list[AgentMessage] = []
    added: list[tuple[int, ToolResultMessage]] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        mended.append(message)
        index += 1
        if not isinstance(message, AssistantMessage):
            continue
        answered = set()
        while index < len(messages) and isinstance(messages[index], ToolResultMessage):
            answered.add(messages[index].tool_call_id)  # type: ignore[attr-defined]
            mended.append(messages[index])
            index += 1
        _, calls, _ = extract_tool_calls(message)
        for call in calls:
            if call.id not in answered:
                lost = ToolResultMessage(call.id, call.name, [TextContent(LOST_RESULT_MESSAGE)], {}, is_error=True, timestamp=message.timestamp)
                added.append((len(mended), lost))
                mended.append(lost)
    if added:
        logger.warning("answered %d tool call(s) that had no result with an error result", len(added))
    return mended, added


def history_from_session(session: "Session") -> list[AgentMessage]:
    """The history an agent given ``session`` starts from: every stored message, mended.

    The results a crash leaves missing are at the tail (the last batch was cut short):
    they are appended to the session too, so it is whole again. A gap elsewhere (only a
    session written by other means has one) is mended in memory only, the same way at
    every load (``complete_tool_calls`` is deterministic).
    """
    history, lost = complete_tool_calls(list(session.messages()))
    lost_ids = {id(result) for _, result in lost}
    tail = len(history)
    while tail and id(history[tail - 1]) in lost_ids:
        tail -= 1
    for result in history[tail:]:
        session.append(result)
    return history
