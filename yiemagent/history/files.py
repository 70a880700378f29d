"""The conversation history beyond the run: saving it, loading it, mending it.

Beyond the spec (docs/sessions.md). ``save_history`` / ``load_history`` keep a history in one versioned JSON document;
``complete_tool_calls`` mends what a crash or two writers left (calls without a result,
results out of place, orphaned or doubled), so whatever was stored loads valid to send
(decisions 15 and 17).

The document (version 1)::

    {"format": "yiemagent-history", "version": 1, "messages": [<message>, ...]}

Each message is in the form ``history._json`` describes: the fields of ``to_dict()``,
with datetimes, bytes, tuples, sets and non-string keys inside ``details`` kept as
tagged objects (docs/sessions.md has the table).
"""

from __future__ import annotations

import json
import logging
import os
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple, Optional, TypeVar, Union, cast

from ._json import message_from_data, message_to_data, utf8_json
from ._locked_files import write_atomically
from ._stored import stored_calls
from ..errors import MessageFormatError
from ..extraction import extract_tool_calls
from ..types import AgentMessage, ApprovalMessage, AssistantMessage, TextContent, ToolResultMessage, UserMessage
from ..normalize import normalize_message

from .sessions import Session, loads_checked

__all__ = [
    "FORMAT",
    "LOST_RESULT_MESSAGE",
    "ToolResultRepair",
    "VERSION",
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
    file or the new one, never half of one. Temporaries that saves of ``path`` killed
    mid-write left are removed first (``_locked_files.write_atomically``).

    Whatever a message's ``details`` holds is written (docs/sessions.md, "The JSON form").

    Raises:
        MessageFormatError: an entry is not an ``AgentMessage``, or is one no agent would
            take (decision 15), so it would not load again; named by its index. Nothing
            is written.
        OSError: the file could not be written; ``path`` is left as it was.
    """
    entries = each_message(messages, message_to_data)
    write_atomically(Path(path), utf8_json({"format": FORMAT, "version": VERSION, "messages": entries}, indent=1))


def load_history(path: PathLike) -> list[AgentMessage]:
    """The messages of a document written by ``save_history``, valid to send (decision 17).

    Each message is checked as it is read (docs/sessions.md); the history is then mended
    by ``complete_tool_calls`` (calls without a result, results out of place, orphans,
    duplicates), with a warning naming the file when that changed anything.

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
    messages = [message_from_data(entry, f"{where}: messages[{index}]") for index, entry in enumerate(entries)]
    return _mend(messages, where, stored_calls).messages  # valid to send, whatever the file holds (decision 17)


class ToolResultRepair(NamedTuple):
    """What ``complete_tool_calls`` made of a history, and each change it made.

    ``added``: the error results that answer calls which had none, with their index in
    ``messages``. ``moved``: results found later than their call's batch (another writer's
    messages came between), as (index in the input, index in ``messages``). ``dropped``:
    results left out, with their index in the input and why, ``"orphan"`` (no call of
    the batch they are in, or no batch at all) or ``"duplicate"`` (a second result for
    one call; the first is kept).
    """

    messages: list[AgentMessage]
    added: list[tuple[int, ToolResultMessage]]
    moved: list[tuple[int, int]]
    dropped: list[tuple[int, ToolResultMessage, str]]

    @property
    def changed(self) -> bool:
        return bool(self.added or self.moved or self.dropped)


def complete_tool_calls(messages: list[AgentMessage], where: Optional[str] = None) -> ToolResultRepair:
    """The history made valid to send: each tool call answered once, right after its batch (decision 17).

    LLM APIs reject a history in which a tool call has no result, or a tool result follows
    no call of the assistant message it answers. A crash between an assistant message
    and the last of its results leaves calls unanswered; two writers on one session (a
    history written before sessions were held, a session of one's own without a hold)
    leave results out of place, orphaned or doubled. So, for each assistant message with
    tool calls, in order:

    - the results right after it that answer one of its calls are kept, in their order;
      a second result for the same call is dropped (``"duplicate"``), one for no call of
      this batch too (``"orphan"``), as is a result that follows no assistant message;
    - a call still unanswered takes the first result for it found later in the history,
      before the next assistant message that makes a call of the same id (that one owns
      what follows): the result is moved after the batch;
    - a call still unanswered gets an error result (``LOST_RESULT_MESSAGE``) whose timestamp
      is the assistant message's, so mending the same history twice gives equal messages.

    Approval steps (``ApprovalMessage``, decision 18) among a batch's results are kept in
    place and pass over: a call of the last batch that was deferred and not yet started
    ("resumed") is waiting for a person, not lost, and gets no result.

    Moved and added results come after the batch's own, in call order. A whole history
    comes back unchanged. When anything changed, a warning on the ``yiemagent.history``
    logger names ``where`` and says what (docs/sessions.md says why logging).

    Returns:
        A ``ToolResultRepair``; ``.messages`` is the mended list.
    """
    return _mend(messages, where, _extracted_calls)


def _extracted_calls(message: AssistantMessage) -> list[tuple[str, str]]:
    _, calls, _ = extract_tool_calls(message)
    return [(call.id, call.name) for call in calls]


def _whole(messages: list[AgentMessage], calls_of: Callable[[AssistantMessage], list[tuple[str, str]]]) -> bool:
    """Whether ``complete_tool_calls`` would change nothing: each call answered once, in the results right after its batch.

    One walk, for the common case (a history one agent wrote): no result out of place, no
    call unanswered, no approval step (those take the full walk of ``_mend``).
    """
    pending: set[str] = set()
    for message in messages:
        kind = type(message)
        if kind is UserMessage or kind is AssistantMessage:  # the common cases first, without isinstance
            if pending:
                return False
            if kind is AssistantMessage:
                pending = {call_id for call_id, _ in calls_of(cast(AssistantMessage, message))}  # kind is AssistantMessage: no isinstance to narrow it
            continue
        if isinstance(message, ToolResultMessage):
            call_id = message.tool_call_id
            if type(call_id) is not str or call_id not in pending:
                return False
            pending.discard(call_id)
        elif pending or isinstance(message, ApprovalMessage):
            return False
        elif isinstance(message, AssistantMessage):
            pending = {call_id for call_id, _ in calls_of(message)}
    return not pending


def _mend(
    messages: list[AgentMessage], where: Optional[str], calls_of: Callable[[AssistantMessage], list[tuple[str, str]]]
) -> ToolResultRepair:
    """``complete_tool_calls``, reading each assistant message's calls as ``(id, name)`` with ``calls_of``.

    ``calls_of`` is ``extract_tool_calls`` for any history; for messages already checked as
    the agent checks them (``normalize_message``), ``_stored.stored_calls`` reads the same
    calls from their blocks without extracting them again.
    """
    if _whole(messages, calls_of):
        return ToolResultRepair(list(messages), [], [], [])
    return _walk(messages, where, calls_of)


def _walk(
    messages: list[AgentMessage], where: Optional[str], calls_of: Callable[[AssistantMessage], list[tuple[str, str]]]
) -> ToolResultRepair:
    """The repair itself, batch by batch (``complete_tool_calls`` says what it does)."""
    calls_at: dict[int, dict[str, str]] = {}  # assistant index -> its calls' names by id (the first of an id)
    calls_by_id: defaultdict[str, list[int]] = defaultdict(list)  # id -> indices of the assistant messages calling it
    results_by_id: defaultdict[str, list[int]] = defaultdict(list)  # id -> indices of its results
    for index, message in enumerate(messages):
        if isinstance(message, AssistantMessage):
            calls_at[index] = {}
            for call_id, name in calls_of(message):
                calls_at[index].setdefault(call_id, name)
            for call_id in calls_at[index]:
                calls_by_id[call_id].append(index)
        elif isinstance(message, ToolResultMessage) and isinstance(message.tool_call_id, str):
            results_by_id[message.tool_call_id].append(index)
    taken: set[int] = set()  # results moved to an earlier batch
    last_batch = max(calls_at, default=-1)  # only its deferred calls may still wait (decision 18)

    def later_result(start: int, call_id: str) -> Optional[int]:
        owners = calls_by_id[call_id]
        end = owners[bisect_left(owners, start)] if bisect_left(owners, start) < len(owners) else len(messages)
        candidates = results_by_id.get(call_id, [])
        for j in candidates[bisect_left(candidates, start):]:
            if j >= end:
                break
            if j not in taken:
                return j
        return None

    repair = ToolResultRepair([], [], [], [])
    mended = repair.messages
    index = 0
    while index < len(messages):
        message = messages[index]
        if index in taken:
            index += 1
            continue
        if isinstance(message, ToolResultMessage):
            repair.dropped.append((index, message, "orphan"))
            index += 1
            continue
        mended.append(message)
        index += 1
        at = index - 1
        wanted = calls_at.get(at, {})
        if not wanted:
            continue
        answered: set[str] = set()
        steps: dict[str, str] = {}  # call id -> its latest approval decision (decision 18)
        while index < len(messages) and isinstance(messages[index], (ToolResultMessage, ApprovalMessage)):
            result = messages[index]
            if isinstance(result, ApprovalMessage):
                mended.append(result)
                steps[result.tool_call_id] = result.decision if steps.get(result.tool_call_id) != "resumed" else "resumed"
                index += 1
                continue
            if index not in taken:
                if result.tool_call_id in answered:  # type: ignore[attr-defined]
                    repair.dropped.append((index, result, "duplicate"))  # type: ignore[arg-type]
                elif result.tool_call_id in wanted:  # type: ignore[attr-defined]
                    answered.add(result.tool_call_id)  # type: ignore[attr-defined]
                    mended.append(result)
                else:
                    repair.dropped.append((index, result, "orphan"))  # type: ignore[arg-type]
            index += 1
        if len(answered) == len(wanted):
            continue
        assistant = message
        for call_id, name in wanted.items():
            if call_id in answered:
                continue
            if at == last_batch and steps.get(call_id, "resumed") != "resumed" and later_result(index, call_id) is None:
                continue  # deferred and not started: it waits for approval, it is not lost
            found = later_result(index, call_id)
            if found is not None:
                taken.add(found)
                repair.moved.append((found, len(mended)))
                mended.append(messages[found])
                continue
            lost = ToolResultMessage(call_id, name, [TextContent(LOST_RESULT_MESSAGE)], {}, is_error=True, timestamp=assistant.timestamp)
            repair.added.append((len(mended), lost))
            mended.append(lost)
    if repair.changed:
        logger.warning("%s: %s", where or "a history", _describe(repair))
    return repair


def _describe(repair: ToolResultRepair) -> str:
    def ids(results: Iterable[ToolResultMessage]) -> str:
        listed = [repr(r.tool_call_id) for r in results]
        return ", ".join(listed[:5]) + (f" and {len(listed) - 5} more" if len(listed) > 5 else "")

    parts = []
    if repair.added:
        parts.append(f"{len(repair.added)} tool call(s) without a result answered with an error result ({ids(r for _, r in repair.added)})")
    if repair.moved:
        parts.append(f"{len(repair.moved)} result(s) moved after their call ({ids(repair.messages[i] for _, i in repair.moved)})")  # type: ignore[misc]
    for why, what in (("orphan", "without a call in their batch"), ("duplicate", "answering a call already answered")):
        dropped = [r for _, r, reason in repair.dropped if reason == why]
        if dropped:
            parts.append(f"{len(dropped)} result(s) {what} left out ({ids(dropped)})")
    return "mended to be valid to send: " + "; ".join(parts)


def history_from_session(session: Session) -> list[AgentMessage]:
    """The history an agent given ``session`` starts from: every stored message, mended (decision 17).

    Called once the agent holds the session, so nothing else writes it meanwhile. The
    results a crash leaves missing are at the tail (the last batch was cut short): they
    are appended to the session too, so it is whole again. Any other repair
    (``complete_tool_calls``: a gap inside, results out of place, orphans, duplicates;
    only a session written by other means, or by two agents before sessions were held,
    has them) is made in memory only, the same way at every load, with a warning each time.

    Every message comes back checked as the agent checks what enters its history
    (``normalize_message``, decision 15), once: by the session's reader when it is a
    shipped one (``sessions.loads_checked``), else here, after mending.

    Raises:
        MessageFormatError: a message the check refuses (``messages[3]: ...``, its index
            in the mended history), or the session's reader's (naming the session and row).
    """
    checked = loads_checked(session)
    repair = _mend(list(session.messages()), f"session {session!r}", stored_calls if checked else _extracted_calls)
    history = repair.messages
    lost_ids = {id(result) for _, result in repair.added}
    tail = len(history)
    while tail and id(history[tail - 1]) in lost_ids:
        tail -= 1
    for result in history[tail:]:
        session.append(result)
    # decision 15: what enters the history is checked, once. A shipped session's reader
    # checked each message as it read it (message_from_data); the results added above are
    # made here, as the check leaves them. Any other session's messages are checked now.
    return history if checked else each_message(history, normalize_message)
