"""Typed answers: ``YiemAgent(output_type=..., output_retries=1)`` (beyond the spec, docs/api.md "Typed answers").

The final answer of a run is checked against ``output_type`` and handed back as that type
in ``AssistantMessage.output``. The type machinery is the function tools' own
(``_codecs``: the one place a type becomes JSON Schema and JSON becomes a value), so an
answer can be whatever a ``tool()`` parameter can be: a dataclass, TypedDict, NamedTuple,
Enum, ``Literal``, a primitive, a ``list``/``Optional``/union of those, a pydantic model.

How the model gives its answer, portably (any tool-calling model, either client):

- a final-answer tool, ``final_result``, is offered beside the agent's tools, its
  ``input_schema`` the answer's schema (an answer that is not an object with properties is
  wrapped as ``{"response": ...}``). Its arguments pass the pipeline's validation (spec
  §8.1), so an invalid answer comes back to the model as an error result naming the field;
  a valid one ends the run: the agent appends a final ``AssistantMessage`` whose text is
  the answer's JSON and whose ``output`` is the value (so the history holds it, and a
  session stores it in its JSON form).
- a reply without tool calls is read as the answer's JSON (a provider's JSON-schema mode
  sends just that; a fenced ```json block is taken too). For ``output_type=str`` the text
  is the answer and no tool is offered. An invalid text goes back as a user message
  naming the field.

Each invalid answer counts; after ``output_retries`` of them the next invalid one ends the
run with ``stop_reason "output_invalid"`` and an ``error_message`` naming the field (not
added to the history, which stays valid to send again).

Thread safety: an ``OutputSpec`` is immutable after construction; its tool may run in any thread.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from ._codecs import Codec, InexpressibleType, codec_for, to_json_value, type_name
from .._bounds import loads_json
from .._failures import describe_error, user_code_errors
from ..errors import ToolDefinitionError
from ..types import (
    AgentTool,
    AgentToolCall,
    AgentToolResult,
    AssistantMessage,
    TextContent,
    ToolResultMessage,
    UserMessage,
)
from ..pipeline import validate_required_args

__all__ = ["FINAL_RESULT_TOOL", "OutputSpec", "Verdict", "offered_tools", "output_invalid_response"]

FINAL_RESULT_TOOL = "final_result"
"""The final-answer tool's name (pydantic-ai's too)."""

_WRAPPED = "response"
_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```$", re.DOTALL)


@dataclass(frozen=True)
class Verdict:
    """What an answer is worth: ``value`` when it is valid (``why`` None), else ``why`` names the field."""

    value: Any = None
    why: Optional[str] = None

    @property
    def valid(self) -> bool:
        return self.why is None


class OutputSpec:
    """An agent's ``output_type``, compiled once: the answer's schema, its decoder, its tool.

    Raises (constructor):
        ToolDefinitionError: the type has no JSON Schema (the message names the part).
        TypeError, ValueError: ``output_retries`` is not an int of at least 0.
    """

    def __init__(self, output_type: Any, retries: int = 1) -> None:
        if isinstance(retries, bool) or not isinstance(retries, int):
            raise TypeError(f"output_retries must be an int, got {type(retries).__name__}")
        if retries < 0:
            raise ValueError(f"output_retries must be at least 0, got {retries}")
        try:
            codec = codec_for(output_type)
        except InexpressibleType as exc:
            inner = "" if exc.tp is output_type else f" (in {type_name(output_type)})"
            raise ToolDefinitionError(f"output_type {type_name(exc.tp)}{inner} cannot be an answer: {exc.why}") from None
        self.output_type = output_type
        self.retries = retries
        self.codec: Codec = codec
        self.text_is_answer = codec.schema == {"type": "string"}  # output_type=str: the reply's text
        self.wrapped = not (codec.schema.get("type") == "object" and "properties" in codec.schema)
        if self.wrapped:
            tool_schema: dict[str, Any] = {
                "type": "object",
                "properties": {_WRAPPED: codec.schema},
                "required": [_WRAPPED],
                "additionalProperties": False,
            }
        else:
            tool_schema = codec.schema
        self.tool_schema = tool_schema
        self.tool: Optional[AgentTool] = None
        if not self.text_is_answer:
            self.tool = AgentTool(
                name=FINAL_RESULT_TOOL,
                label="Final result",
                description=(
                    f"Give the final answer ({type_name(output_type)}) with this tool, once, when you have it; "
                    "its arguments are the answer."
                ),
                input_schema=tool_schema,
                execute=self._execute,
            )

    # --- reading an answer -----------------------------------------------------------

    def decode(self, arguments: Any) -> Verdict:
        """The final-answer tool's arguments (or a text answer's JSON, ``wrapped`` False) as the declared type.

        Whatever the type's own check raises (a pydantic validator, a ``__post_init__``: user
        code) makes the answer invalid, named by the exception: one rule for a text answer
        and one given through the tool, retried up to ``retries`` (module docstring).
        """
        problem = validate_required_args(arguments, self.tool_schema)
        if problem is not None:
            return Verdict(why=problem)
        raw = arguments[_WRAPPED] if self.wrapped else arguments
        try:
            return Verdict(self.codec.decode(raw))
        except user_code_errors() as exc:  # pydantic's ValidationError names the field (loc); a validator may raise anything
            return Verdict(why=describe_error(exc))

    def from_text(self, reply: AssistantMessage) -> Verdict:
        """A reply without tool calls, read as the answer."""
        text = reply.text.strip()
        if self.text_is_answer:
            return Verdict(reply.text)
        match = _FENCE.match(text)
        if match:
            text = match.group(1)
        try:
            value = loads_json(text)
        except ValueError as exc:
            return Verdict(why=f"the reply is not the answer's JSON ({exc})")
        return self.decode({_WRAPPED: value} if self.wrapped else value)

    def from_batch(self, calls: list[AgentToolCall], results: list[ToolResultMessage]) -> Optional[Verdict]:
        """The answer given through the final-answer tool in this round: None when it was not called.

        The first valid call wins; an error result (the pipeline's validation, a decode that
        failed) is an invalid answer, its text already the model's feedback.
        """
        answered = {r.tool_call_id: r for r in results}
        verdict: Optional[Verdict] = None
        for call in calls:
            if call.name != FINAL_RESULT_TOOL:
                continue
            result = answered.get(call.id)
            if result is not None and not result.is_error:
                found = self.decode(call.arguments)
                if found.valid:
                    return found
            text = " ".join(b.text for b in (result.content if result else []) if isinstance(b, TextContent))
            verdict = verdict or Verdict(why=text or "the final answer was not accepted")
        return verdict

    # --- what the run adds -----------------------------------------------------------

    def retry_message(self, why: str) -> UserMessage:
        """The feedback on an invalid text answer (an invalid tool answer has its error result)."""
        how = "Answer again." if self.text_is_answer else f"Call the {FINAL_RESULT_TOOL} tool with a valid answer."
        return UserMessage([TextContent(f"The answer is not valid: {why}. {how}")])

    def final_message(self, reply: AssistantMessage, value: Any) -> AssistantMessage:
        """The agent's final reply for an answer given through the tool: its JSON text, and the value."""
        text = json.dumps(to_json_value(value), ensure_ascii=False)
        return AssistantMessage(
            [TextContent(text)], api=reply.api, provider=reply.provider, model=reply.model, stop_reason="stop", output=value
        )

    def _execute(self, tool_call_id: str, args: dict[str, Any], signal: Any, on_partial_result: Any) -> AgentToolResult:
        verdict = self.decode(args)
        if not verdict.valid:
            raise ValueError(verdict.why)  # the pipeline makes it an error result, the model's feedback (spec §12)
        return AgentToolResult([TextContent("Final answer received.")], {}, None, False)

    def __repr__(self) -> str:
        return f"OutputSpec({type_name(self.output_type)}, retries={self.retries})"


def offered_tools(tools: Mapping[str, AgentTool], spec: Optional[OutputSpec]) -> Mapping[str, AgentTool]:
    """The tools a run offers and runs: the agent's, and the final-answer tool when the answer is typed.

    The one place the final-answer tool joins them: each round's context (run.py), a
    deferred call resumed after its approval and ``approve``'s check of new arguments
    (approvals.py), so a deferred ``final_result`` is found when it resumes. ``tools``
    itself when there is no tool to add.
    """
    if spec is None or spec.tool is None:
        return tools
    return {**tools, spec.tool.name: spec.tool}


def output_invalid_response(why: str, retries: int) -> AssistantMessage:
    """The response of a run whose answer stayed invalid after ``retries`` retries (not added to the history)."""
    return AssistantMessage(
        [], stop_reason="output_invalid", error_message=f"the final answer is invalid after {retries} retr{'y' if retries == 1 else 'ies'}: {why}"
    )
