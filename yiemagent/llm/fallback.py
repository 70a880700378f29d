"""``FallbackLLM``: one ``llm_call`` made of several, tried in order (beyond the spec; spec §14 ``llmCall``).

Each model is asked only after the one before it failed, and only for a failure that
another model may not share: a retryable ``LLMError`` (a timeout, a refused connection,
a 429 or 5xx that the client's own retries did not get past), any 5xx, or a 4xx that is
the provider's and not the request's — 401/403 (that provider's key), 404 (that
provider's model), 408, 429 (its rate or quota). A 4xx that is the request's fault (400,
413, 422 and the rest) would fail the same way everywhere, so it is raised at once. Any
other ``Exception`` falls over too: a custom ``llm_call`` (an application's own client)
is as likely to raise ``ConnectionResetError`` or ``RuntimeError`` as ``LLMError``, and
from outside a network failure cannot be told from a bug; so that a bug is not hidden,
its warning carries its traceback and, when every model fails, the error names it. A
failure after part of the reply was streamed to the run's sink is raised at once: asking
another model then would show two replies' fragments (the client's own retries stop
there too, docs/streaming.md). A ``BaseException`` that is not an ``Exception``
(``KeyboardInterrupt``) is never caught.

A ``ContextOverflowError`` (a 400 that says the request is longer than that model's context
window) falls over: a window is one model's, and the next may have a larger one. When the
last model asked overflowed too, the error raised is a ``ContextOverflowError`` naming every
model's failure, so that a caller, or a compaction step, still tells it apart
(docs/failures.md "The history outgrew the context").

A reply that reports its own failure (``stop_reason == "error"``) counts as a failure
worth falling over. The reply that answers says which model answered: its ``model`` is
the answering model's (filled from the client's ``model`` attribute when the reply has
none), and its ``usage`` is the sum over every attempt that reported usage (decision 13:
the tokens of a failed attempt were spent too). When every model fails, the failure names
each model and its failure, in order: an ``LLMError`` with the last failure as its cause,
or, when the last model replied with ``stop_reason "error"``, that reply with an
``error_message`` listing them all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Optional

from .._failures import describe_error
from ..errors import ContextOverflowError, LLMError
from ..tokens import reply_tokens
from ..types import AssistantMessage, LLMUsage, add_usage
from ..events import current_stream, stream_to

__all__ = ["FallbackLLM", "falls_over"]

logger = logging.getLogger("yiemagent.llm.fallback")

PROVIDER_STATUSES = frozenset({401, 403, 404, 408, 429})
"""4xx statuses that are one provider's (key, model, rate) and not the request's: another model may answer."""


def falls_over(error: BaseException) -> bool:
    """Whether the next model is asked after ``error``: not a request's own 4xx, nor a ``BaseException`` such as ``KeyboardInterrupt``.

    An ``LLMError`` falls over when it is retryable, a 5xx, a provider's own 4xx, or a
    ``ContextOverflowError`` (the next model's window may be larger); any other
    ``Exception`` (a custom client's ``ConnectionResetError``, ``RuntimeError``) does.
    """
    if not isinstance(error, LLMError):
        return isinstance(error, Exception)
    if isinstance(error, ContextOverflowError):
        return True
    status = error.status
    if status is not None and 400 <= status < 500:
        return status in PROVIDER_STATUSES
    return bool(error.retryable) or (status is not None and status >= 500)


def _name(llm_call: Any) -> str:
    model = getattr(llm_call, "model", None)
    return model if isinstance(model, str) and model else type(llm_call).__name__


class _Watch:
    """Passes one attempt's deltas on to the run's listener and notes that one went."""

    def __init__(self, on_delta: Callable[[str, str], None]) -> None:
        self.on_delta = on_delta
        self.emitted = False

    def __call__(self, kind: str, text: str) -> None:
        self.emitted = True
        self.on_delta(kind, text)


class FallbackLLM:
    """``llm_call`` that asks ``llm_calls[0]``, then the next on a failure another model may not share.

    Raises:
        ValueError: no ``llm_call`` given.
        TypeError: one of them is not callable.
    """

    def __init__(self, *llm_calls: Callable[[dict[str, Any]], AssistantMessage]) -> None:
        if not llm_calls:
            raise ValueError("FallbackLLM needs at least one llm_call")
        for index, llm_call in enumerate(llm_calls):
            if not callable(llm_call):
                raise TypeError(f"FallbackLLM: llm_call {index} is not callable: {type(llm_call).__name__}")
        self.llm_calls = tuple(llm_calls)

    @property
    def max_tokens(self) -> Optional[int]:
        """The largest reply its clients allow (``tokens.reply_tokens`` of each), or None: the room a request leaves whichever model answers (docs/sessions.md "Long conversations")."""
        asked = [tokens for tokens in map(reply_tokens, self.llm_calls) if tokens is not None]
        return max(asked) if asked else None

    @property
    def max_retry_delay_ms(self) -> Optional[float]:
        """The first client's cap on a server-asked delay; setting it sets it on every client that has one."""
        return next((c.max_retry_delay_ms for c in self.llm_calls if hasattr(c, "max_retry_delay_ms")), None)

    @max_retry_delay_ms.setter
    def max_retry_delay_ms(self, value: float) -> None:
        for llm_call in self.llm_calls:
            if hasattr(llm_call, "max_retry_delay_ms"):
                llm_call.max_retry_delay_ms = value

    def __call__(self, formatted: dict[str, Any]) -> AssistantMessage:
        target = current_stream()
        spent: Optional[LLMUsage] = None
        failures: list[str] = []  # "model: its failure", one per model that failed, in order
        last = len(self.llm_calls) - 1
        for index, llm_call in enumerate(self.llm_calls):
            watch = _Watch(target.on_delta) if target is not None else None
            try:
                if watch is not None:
                    with stream_to(watch, target.signal):  # type: ignore[union-attr]
                        reply = llm_call(formatted)
                else:
                    reply = llm_call(formatted)
            except Exception as exc:
                if isinstance(getattr(exc, "usage", None), LLMUsage):  # a client that knows what a failed call spent
                    spent = add_usage(spent or LLMUsage(), exc.usage)  # type: ignore[attr-defined]
                failures.append(f"{_name(llm_call)}: {exc if isinstance(exc, LLMError) else describe_error(exc)}")
                if index == last or not falls_over(exc) or (watch is not None and watch.emitted) or _aborted(target):
                    if len(failures) == 1:
                        raise
                    raise self._failed(failures, exc) from exc
                logger.warning(
                    "model %s failed (%s); asking %s", _name(llm_call), exc, _name(self.llm_calls[index + 1]),
                    exc_info=not isinstance(exc, LLMError),  # not a client's own error: perhaps a bug, shown whole
                )
                continue
            usage = reply.usage if isinstance(reply, AssistantMessage) and isinstance(reply.usage, LLMUsage) else None
            if isinstance(reply, AssistantMessage) and reply.stop_reason == "error":
                failures.append(f"{_name(llm_call)}: {reply.error_message or 'stop_reason error'}")
                if index < last and not (watch and watch.emitted):
                    spent = add_usage(spent or LLMUsage(), usage)
                    logger.warning("model %s replied with an error (%s); asking %s", _name(llm_call), reply.error_message, _name(self.llm_calls[index + 1]))
                    continue
                if len(failures) > 1:  # the run reports this reply: it names every model that failed, not only this one
                    reply = replace(reply, error_message=_no_model_answered(failures))
            if not isinstance(reply, AssistantMessage):
                return reply  # the run refuses it (decision 15) and names what came back
            if spent is not None:
                reply = replace(reply, usage=add_usage(spent, usage))
            if not reply.model:
                reply = replace(reply, model=_name(llm_call))
            return reply
        raise AssertionError("unreachable: the last model's failure is raised")  # pragma: no cover

    def _failed(self, failures: list[str], error: Exception) -> LLMError:
        if not isinstance(error, LLMError):  # a custom client's own exception: nothing says a retry would help
            return LLMError(_no_model_answered(failures))
        kind = ContextOverflowError if isinstance(error, ContextOverflowError) else LLMError  # the last failure's kind: an overflow stays one
        return kind(
            _no_model_answered(failures),
            status=error.status,
            retryable=error.retryable,
            retry_after_ms=error.retry_after_ms,
        )

    def __repr__(self) -> str:
        return f"FallbackLLM({', '.join(repr(c) for c in self.llm_calls)})"


def _no_model_answered(failures: list[str]) -> str:
    return f"no model answered: {'; '.join(failures)}"


def _aborted(target: Any) -> bool:
    return target is not None and target.signal is not None and target.signal.aborted
