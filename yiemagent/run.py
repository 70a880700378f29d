"""One run of the agent: the message processing pipeline (spec §6 ``_processMessage``).

Drain the input channel into the history, then loop: prepare_context -> format_msg_for_llm
-> llm_call -> append the reply -> extract_tool_calls -> execute_tool_calls -> append the
results -> stop (a reply without tool calls, a terminating batch, an abort, a failure) or
go round again. The run always ends with an ``AssistantMessage`` for the output channel;
nothing it does raises out of it (decision 11).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Optional

from .batch import answer_tool_calls_with_error, execute_tool_calls
from .events import AgentRunEndEvent, AgentRunStartEvent, LLMCallEndEvent, LLMCallStartEvent
from .extraction import extract_tool_calls
from .formatting import openai_to_user_message
from .limits import max_rounds_response, rounds_exhausted
from .pipeline import USER_CODE_ERRORS, describe_error
from .messages import AgentMessage, AssistantMessage, LLMUsage, TextContent
from .stream_relay import relay_deltas
from .tooling import AbortSignal, AgentContext, AgentLoopConfig, AgentToolCallBatch
from .usage import add_usage

if TYPE_CHECKING:
    from .agent import YiemAgent

__all__ = ["CONTINUE", "Run", "RunWorker", "process_message"]

logger = logging.getLogger("yiemagent.run")

CONTINUE = object()
"""Put on the input channel by ``continue_agent``: asks for a run without adding a message."""

TRUNCATED_CALL_MESSAGE = (
    "This tool call was cut off by the token limit (stop_reason 'length') and was not run. "
    "Re-issue it complete, with all of its arguments."
)


@dataclass
class Run:
    """One run: its number, its abort signal, and what it has done so far.

    Thread safety: made by the loop thread, then used by the run thread; ``signal`` may
    be fired from any thread (``abort``).
    """

    id: int
    signal: AbortSignal = field(default_factory=AbortSignal)
    rounds: int = 0
    took_first_input: bool = False  # until then, queued input is what this run is about to take
    usage: LLMUsage = field(default_factory=LLMUsage)  # summed over the run's LLM rounds (API.md "Usage")


def _take_input(agent: "YiemAgent") -> int:
    """Spec §6 step 1: move every queued input message into the history; return how many.

    Messages given to ``add_message`` during the run join first (issue 13).
    """
    agent._take_added()
    taken = 0
    for raw in agent.input_channel.drain():
        if raw is CONTINUE:
            continue
        try:
            message = raw if isinstance(raw, AgentMessage) else openai_to_user_message(raw)
        except ValueError:
            # run_agent validates; only a message put on the channel by hand can fail here
            logger.error("dropped a message put on the input channel that is not a valid user message: %r", raw, exc_info=True)
            continue
        agent._append(message)
        taken += 1
    return taken


def _error_response(why: str) -> AssistantMessage:
    """Decision 11: a failed run ends with stop_reason "error" and says why."""
    logger.warning("run ended with an error: %s", why)
    return AssistantMessage([], stop_reason="error", error_message=why)


def _aborted_response(run: Run) -> AssistantMessage:
    reason = run.signal.reason or "aborted by abort()"
    return AssistantMessage([TextContent("Run aborted.")], stop_reason="aborted", error_message=reason)


def _terminated_response(reply: AssistantMessage, batch: AgentToolCallBatch) -> AssistantMessage:
    """Spec §10 "Batch Processing": the final response of a batch whose tools all asked to stop."""
    content: list[Any] = [TextContent("Tool execution completed.")]
    for result in batch.messages:
        for block in result.content:
            if isinstance(block, TextContent):
                content.append(block)
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                content.append(TextContent(block["text"]))
    failed = any(m.is_error for m in batch.messages)
    return AssistantMessage(
        content,
        api=reply.api,
        provider=reply.provider,
        model=reply.model,
        usage=reply.usage,
        stop_reason="tool_use_terminated",
        error_message="One or more tool calls failed" if failed else None,
    )


def _call_llm(agent: "YiemAgent", run: Run) -> tuple[Optional[AssistantMessage], Optional[AgentContext], Optional[str]]:
    """Steps 2-4: prepare the context, format it, call the LLM. Returns (reply, context, error).

    Issue 14: the call runs inside ``relay_deltas``, so a streaming client's deltas reach
    the sink between this round's start and end events. If the run was aborted by the
    time ``llm_call`` returns or raises, its reply is dropped (None): whether cut short or
    complete, it does not enter the history, and the run ends "aborted".
    """
    emit = agent._emit
    try:
        ctx = agent.prepare_context(agent.state, emit)
    except USER_CODE_ERRORS as exc:
        return None, None, f"prepare_context raised {describe_error(exc)}"
    if not isinstance(ctx, AgentContext):
        return None, None, f"prepare_context returned {type(ctx).__name__}; expected an AgentContext"
    try:
        formatted = agent.format_msg_for_llm(ctx, emit)
    except USER_CODE_ERRORS as exc:
        return None, None, f"format_msg_for_llm raised {describe_error(exc)}"
    emit(LLMCallStartEvent(run.id, run.rounds, len(ctx.messages)))
    started = time.perf_counter()
    reply, error = None, None
    try:
        with relay_deltas(emit, run.id, run.rounds, run.signal):  # issue 14: its deltas reach the sink until it returns
            reply = agent.llm_call(formatted)
        if not isinstance(reply, AssistantMessage):
            error = f"llm_call returned {type(reply).__name__}; expected an AssistantMessage"
            reply = None
    except USER_CODE_ERRORS as exc:
        error = f"LLM call failed: {describe_error(exc)}"
    usage = reply.usage if reply else None
    if reply is not None:
        run.usage = add_usage(run.usage, usage)  # tokens spent count even when an abort drops the reply
    if run.signal.aborted:  # issue 14: a reply cut short by abort (or finished after it) never enters the history
        reply, error = None, f"aborted during the LLM call: {run.signal.reason or 'aborted by abort()'}"
    emit(LLMCallEndEvent(run.id, run.rounds, time.perf_counter() - started, reply, usage, error))
    return reply, ctx, error


def _rounds(agent: "YiemAgent", run: Run) -> AssistantMessage:
    while True:
        if run.rounds and rounds_exhausted(run.rounds, agent.max_rounds):  # decision 12; before input, which waits for the next run
            return max_rounds_response(agent.max_rounds)  # type: ignore[arg-type]
        if run.rounds and not agent.closing:
            _take_input(agent)  # step 1 again: messages that arrived meanwhile join this run
        if run.signal.aborted:
            return _aborted_response(run)
        failure = agent._take_session_failure()  # issue 13: a message the session could not store
        if failure is not None:
            return _error_response(failure)
        run.rounds += 1
        reply, ctx, error = _call_llm(agent, run)
        if reply is None and run.signal.aborted:  # issue 14: _call_llm dropped the reply of an aborted call
            return _aborted_response(run)
        if error is not None or reply is None or ctx is None:
            return _error_response(error or "no reply")
        if reply.stop_reason == "error":  # an llm_call that reports its failure instead of raising
            return reply if reply.error_message else replace(reply, error_message="llm_call returned stop_reason 'error'")
        agent._append(reply)

        has_tool_calls, tool_calls, assistant_msg = extract_tool_calls(reply)  # step 5
        if not has_tool_calls:
            return reply  # no tool calls: this is the final response
        if reply.stop_reason == "length":  # decision 10: a cut-off call is never run
            batch = answer_tool_calls_with_error(tool_calls, TRUNCATED_CALL_MESSAGE, agent._emit)
        else:  # step 6
            context = AgentContext(ctx.system_prompt, agent.history(), ctx.tools)
            config = AgentLoopConfig(
                agent.before_tool_call, agent.after_tool_call, "parallel" if agent.parallel_tool_execute else "sequential"
            )
            agent.state.pending_tool_calls = {c.id for c in tool_calls}
            try:
                batch = execute_tool_calls(context, assistant_msg, tool_calls, config, run.signal, agent._emit)
            finally:
                agent.state.pending_tool_calls = set()
        for tool_result in batch.messages:
            agent._append(tool_result)
        if batch.terminate:
            return _terminated_response(reply, batch)
        if run.signal.aborted:
            return _aborted_response(run)


def process_message(agent: "YiemAgent", run: Run) -> AssistantMessage:
    """Process queued messages until a final response (spec §6 ``_processMessage``).

    Returns the LLM's final reply (already appended to the history), or a response the
    agent made: "tool_use_terminated" (spec §10), "aborted", or "error" (decision 11). Those
    made by the agent are not appended to the history, so that the history stays a valid
    conversation to send to an LLM again. Never raises.
    """
    started = time.perf_counter()
    taken = _take_input(agent)
    run.took_first_input = True
    agent._ring()
    agent._emit(AgentRunStartEvent(run.id, taken))
    try:
        response = _rounds(agent, run)
    except BaseException as exc:  # a bug here or in a hook must not strand the run: the loop waits for its response
        logger.exception("run %d failed", run.id)
        response = _error_response(f"internal error: {describe_error(exc)}")
    agent.state.error_message = response.error_message if response.stop_reason == "error" else None
    agent._usage.add(run.usage)
    agent._emit(AgentRunEndEvent(run.id, response, run.rounds, time.perf_counter() - started, run.usage))
    return response


class RunWorker:
    """The one thread that runs ``process_message`` (the spec's ``@spawn _processMessage``).

    A long-lived daemon thread fed by a queue: starting a thread per run would cost more
    than a whole run with a fast LLM. Daemon, so that an LLM call that never returns
    cannot keep the interpreter alive.

    Thread safety: ``submit`` and ``stop`` may be called from any thread (a ``SimpleQueue``).
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[Optional[Callable[[], None]]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._work, name=name, daemon=True)
        self.thread.start()

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def stop(self) -> None:
        self._jobs.put(None)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()
