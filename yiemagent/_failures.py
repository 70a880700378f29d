"""What a failure becomes: error results and error texts (spec §12 "errors as results").

Shared by the per-call pipeline, the run, the agent core and sessions: each turns what
user code raised into a value that names its cause, and catches what ``user_code_errors``
says may be caught in the current thread. ``pipeline`` re-exports these names.
"""

from __future__ import annotations

import threading

from ._bounds import cap_text
from .errors import ToolError
from .types import AgentToolResult, TextContent

__all__ = ["ABORTED_MESSAGE", "USER_CODE_ERRORS", "create_error_tool_result", "describe_error", "user_code_errors"]

ABORTED_MESSAGE = "Operation aborted"
# What user code (tools, hooks) may raise and the pipeline turns into an error result.
# SystemExit too: in the agent's threads it would end the thread silently and strand the
# run. KeyboardInterrupt is left alone in the main thread, so that Ctrl-C still stops a
# script that runs the pipeline itself; see ``user_code_errors``.
USER_CODE_ERRORS = (Exception, SystemExit)
_EVERYTHING = (BaseException,)


def user_code_errors() -> tuple[type[BaseException], ...]:
    """What to catch from user code here: everything outside the main thread, else ``USER_CODE_ERRORS``.

    In the agent's own threads (run, tools) nothing may escape: any ``BaseException`` —
    ``SystemExit``, ``KeyboardInterrupt`` raised by hand, ``GeneratorExit`` — would end the
    thread and leave a call without its result (decision 1). Only the main thread receives
    a real Ctrl-C, and there it propagates.
    """
    return _EVERYTHING if threading.current_thread() is not threading.main_thread() else USER_CODE_ERRORS


def create_error_tool_result(message: str) -> AgentToolResult:
    """An error result: one text block with ``message`` (spec §12 createErrorToolResult).

    The text is capped at ``MAX_ECHO_CHARS`` with a note of what was cut: error texts
    echo model input (names, arguments), and one reply must not fill the history.
    """
    return AgentToolResult([TextContent(cap_text(message))], {})


def describe_error(exc: BaseException) -> str:
    """An exception in words for the model: a ``ToolError``'s message alone, else "Type: message" (capped)."""
    try:
        text = str(exc)
    except Exception:  # an exception whose __str__ raises still has a name
        text = "(its message could not be read)"
    return cap_text(text if isinstance(exc, ToolError) else f"{type(exc).__name__}: {text}")
