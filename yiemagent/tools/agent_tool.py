"""``agent_tool``: a sub-agent as a tool (beyond the spec; docs/api.md "Agents as tools, fallback models, usage limits").

The model calls it with ``{"task": "..."}``. Each call makes a fresh agent with
``make_agent()``, sends it the task (``run_agent``), waits for its response
(``take_response``) and shuts it down, so no thread of it is left after the call. In the
terms of the spec's tool contract (§3, §8.2):

- the sub-agent's final text is the call's result (``details["sub_agent"]`` holds its
  model and stop_reason; the result's ``usage`` its usage);
- a sub-run that does not end with an answer (stop_reason "error", "aborted",
  "max_rounds", "usage_limit", ...) raises ``ToolError``: the call gets an error result
  naming the tool, the stop_reason and why, and the parent's run goes on (§12);
- the sub-agent's events reach the parent's sink as ``SubAgentEvent(tool_call_id, event)``
  through the call's ``on_partial_result`` (``pipeline._PartialResultReporter`` passes them
  on unwrapped), so the parent's emitter serialises them with every other event
  (decision 8), also for sub-agents run in parallel; a sink the sub-agent was made with
  still gets its events too;
- the sub-run's usage joins the parent run's (the run sums the ``AgentRunEndEvent`` of
  each sub-run, through the call's reporter to the run's collector: ``_sub_runs.py``) and so ``agent.usage``; a sub-run that ends after
  its call timed out cannot be emitted any more, and its usage joins the run's while the
  run goes on, else ``agent.usage`` (run.py ``add_late_sub_run_usage``);
- the call's abort signal (the parent's abort, or the tool's ``timeout_s``) aborts the sub-run;
- sub-agents nest at most ``max_depth`` levels below the run that started the chain
  (``MAX_DEPTH`` by default): an agent that is its own tool, or a cycle of ``agent_tool``s,
  would otherwise nest without end, and neither ``max_rounds`` nor usage limits bound it
  (each level is a new run). The depth travels with the chain in a ``ContextVar``: the
  sub-run runs in the context its task was sent in (agent.py ``run_agent``), so unrelated
  agents, and parallel calls of one, never see each other's depth.

Thread safety: ``execute`` may run in several tool threads at once (the tool is
``parallel_tool_execute``); each call owns the agent it made.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable
from typing import Any, Optional

from ..agent import YiemAgent, abort, run_agent, shutdown, take_response
from ..errors import ToolDefinitionError, ToolError
from ..events import AgentRunEndEvent, SubAgentEvent
from ..run import add_late_sub_run_usage
from ..types import AssistantMessage, TextContent, text_of
from ..types import AbortSignal, AgentTool, AgentToolResult

__all__ = ["ANSWERED", "AGENT_TOOL_SCHEMA", "MAX_DEPTH", "agent_tool"]

logger = logging.getLogger("yiemagent.tools.agent_tool")

AGENT_TOOL_SCHEMA = {
    "type": "object",
    "properties": {"task": {"type": "string", "minLength": 1, "description": "What the sub-agent is asked to do, in full."}},
    "required": ["task"],
    "additionalProperties": False,
}

ANSWERED = frozenset({"stop", "length", "tool_use_terminated", None})
"""The stop reasons of a sub-run that answered; any other is a failure of the call."""

MAX_DEPTH = 5
"""How many levels of sub-agents an ``agent_tool`` nests below the run that started the chain, by default."""

_depth: contextvars.ContextVar[int] = contextvars.ContextVar("yiemagent_agent_tool_depth", default=0)
"""How many sub-agents deep the current run is: 0 in a run no ``agent_tool`` started."""

SHUTDOWN_TIMEOUT_S = 30.0
"""How long a sub-agent's shutdown waits for its run (which has already ended) before it aborts it."""


def _forwarder(tool_call_id: str, on_partial_result: Callable[[Any], Any], own: Optional[Callable[[Any], Any]]) -> Callable[[Any], None]:
    def forward(event: Any) -> None:
        emitted = on_partial_result(SubAgentEvent(tool_call_id, event))
        if emitted is False and isinstance(event, AgentRunEndEvent):  # the call ended first (a timeout): the tokens still count
            add_late_sub_run_usage(event.usage)
        if own is not None:
            own(event)

    return forward


def agent_tool(
    make_agent: Callable[[], YiemAgent],
    *,
    name: str,
    description: str,
    timeout_s: Optional[float] = None,
    max_depth: int = MAX_DEPTH,
) -> AgentTool:
    """An ``AgentTool`` that hands the model's ``task`` to a fresh sub-agent and answers with its final text.

    ``max_depth``: a call that would make a sub-agent more than this many levels below the
    run that started the chain makes none; its result is an error naming the bound.

    Raises:
        ToolDefinitionError: ``make_agent`` is not callable, ``max_depth`` is not an int of
            at least 1 (the name, description and timeout are checked by ``AgentTool``).
    """
    if not callable(make_agent):
        raise ToolDefinitionError(f"agent_tool {name!r}: make_agent must be callable, got {type(make_agent).__name__}")
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
        raise ToolDefinitionError(f"agent_tool {name!r}: max_depth must be an int of at least 1, got {max_depth!r}")

    def execute(tool_call_id: str, args: dict[str, Any], signal: Optional[AbortSignal], on_partial_result: Callable[[Any], Any]) -> AgentToolResult:
        if signal is not None and signal.aborted:
            raise ToolError(f"agent tool {name!r} was aborted before its sub-agent started")
        depth = _depth.get() + 1  # the level of the sub-agent this call would make
        if depth > max_depth:
            raise ToolError(
                f"agent tool {name!r}: a sub-agent here would be nested {depth} levels deep, past its max_depth of {max_depth} "
                "(an agent that is its own tool, or a cycle of agent tools?); no sub-agent was made"
            )
        agent = make_agent()
        if not isinstance(agent, YiemAgent):
            raise ToolError(f"agent tool {name!r}: make_agent() returned {type(agent).__name__}, expected a YiemAgent")
        try:
            agent.agent_event_sink = _forwarder(tool_call_id, on_partial_result, agent.agent_event_sink)
            forget = signal.on_abort(lambda: abort(agent, signal.reason or "the parent run was aborted")) if signal is not None else None
            token = _depth.set(depth)  # run_agent hands this context, and so the depth, to the sub-run
            try:
                run_agent(agent, args["task"])
                response = take_response(agent)
            finally:
                _depth.reset(token)
                if forget is not None:
                    forget()
            usage = agent.usage
        finally:
            shutdown(agent, timeout=SHUTDOWN_TIMEOUT_S)
        return _result(name, response, usage)

    return AgentTool(
        name=name,
        label=name,
        description=description,
        input_schema=AGENT_TOOL_SCHEMA,
        execute=execute,
        parallel_tool_execute=True,
        timeout_s=timeout_s,
    )


def _result(name: str, response: AssistantMessage, usage: Any) -> AgentToolResult:
    if response.stop_reason not in ANSWERED:
        why = response.error_message or "no reason given"
        raise ToolError(f"agent tool {name!r}: the sub-agent's run ended with stop_reason {response.stop_reason!r}: {why}")
    details = {"sub_agent": {"model": response.model, "stop_reason": response.stop_reason}}
    return AgentToolResult([TextContent(text_of(response.content))], details, usage)
