"""The library's exceptions: one root, and leaves that also inherit the built-in they resemble.

Exceptions are for the programmer (a bad tool definition, a schema that is not JSON
Schema, an agent used after shutdown, an LLM server that fails). Problems caused by the
model or by a tool never raise: they become error tool results (spec §12).
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = [
    "AgentClosedError",
    "ContextOverflowError",
    "EmptyHistoryError",
    "LLMError",
    "MessageFormatError",
    "RunFailedError",
    "SessionInUseError",
    "ToolArgumentsError",
    "ToolDefinitionError",
    "ToolError",
    "ToolSchemaError",
    "YiemAgentError",
]


class YiemAgentError(Exception):
    """Root of every exception this library raises on purpose."""


class ToolSchemaError(YiemAgentError, ValueError):
    """A tool's ``input_schema`` is not a valid JSON Schema (raised by ``register_tool``)."""


class ToolDefinitionError(YiemAgentError, TypeError, ValueError):
    """An ``AgentTool`` was built with a field of the wrong type or value."""


class ToolError(YiemAgentError):
    """Raised by a tool's ``execute`` to report a failure in words the model can act on.

    The pipeline turns any exception from ``execute`` into an error result (spec §8.2);
    for a ``ToolError`` the result carries the message alone, without the exception's
    type name: ``Tool 'getTime' failed: Time zone 'Mars/Olympus' was not found ...``.
    """


class ToolArgumentsError(YiemAgentError, ValueError):
    """Arguments failed validation (raised by ``validate_tool_arguments``, spec §8.1).

    The pipeline catches it and turns it into an error result for the model; it only
    reaches a caller who validates by hand.
    """


class AgentClosedError(YiemAgentError, RuntimeError):
    """A message was sent to an agent that has been shut down."""


class MessageFormatError(YiemAgentError, ValueError):
    """A message given to the agent is not of a form it can take (e.g. a dict with role "system")."""


class SessionInUseError(YiemAgentError):
    """A session id is held by another live agent: one agent holds a session at a time (decision 17, docs/sessions.md)."""


class EmptyHistoryError(YiemAgentError, ValueError):
    """``continue_agent`` was asked to continue a conversation that has no messages."""


class RunFailedError(YiemAgentError):
    """A run asked for with ``check=True`` ended failed (docs/api.md "A run that fails says so").

    Raised by ``ask``, ``stream`` and ``AssistantMessage.raise_for_failure`` for a reply whose
    ``stop_reason`` is in ``FAILED_RUN_STOP_REASONS`` (``types.py``). The message names the
    stop reason and the cause the reply gives (its ``error_message``, or its refusal), so a
    script that does not catch it stops with a non-zero status saying why.

    Attributes:
        reply: the ``AssistantMessage`` the run ended with, as ``check=False`` returns it.
    """

    def __init__(self, reply: Any) -> None:
        stop_reason = getattr(reply, "stop_reason", None)
        cause = getattr(reply, "error_message", None) or getattr(reply, "refusal", None) or "no cause given"
        super().__init__(f"the run failed with stop_reason {stop_reason!r}: {cause}")
        self.reply = reply

    def __reduce__(self) -> Any:
        return (type(self), (self.reply,))  # pickled (a Celery result, a process pool) with its reply


class LLMError(YiemAgentError):
    """An LLM call failed.

    Attributes:
        status: the HTTP status, or None when no response came (refused, timed out).
        retryable: whether the failure is of a kind worth trying again.
        retry_after_ms: the delay the server asked for, in milliseconds, if it asked.
        url: the endpoint that failed.
    """

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        retryable: bool = False,
        retry_after_ms: Optional[float] = None,
        url: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.retry_after_ms = retry_after_ms
        self.url = url


class ContextOverflowError(LLMError):
    """The provider said the request is longer than the model's context window (docs/failures.md "The history outgrew the context").

    Raised by the clients for the "too long" answers of OpenAI, Anthropic, llama.cpp,
    vLLM, OpenRouter and Gemini, as an error status or inside a 200 stream; ``retryable``
    is always False: the same request fails the same way until less is sent. A run ends
    ``stop_reason "error"`` with an ``error_message`` that starts ``LLM call failed:
    ContextOverflowError:`` and ``LLMCallEndEvent.error_type == "ContextOverflowError"``,
    so a caller (or a compaction step) tells an overflow from any other failure.
    """

    def __init__(self, message: str, **fields: Any) -> None:
        fields["retryable"] = False  # asking again with the same request cannot help
        super().__init__(message, **fields)
