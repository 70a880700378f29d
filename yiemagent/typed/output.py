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

``output_mode`` (docs/api.md "Native typed answers"): "tool" offers ``final_result`` as
above; "native" offers no such tool and asks the provider to hold the reply's text to the
answer's schema (``response_format()``, OpenAI's ``json_schema`` form in the formatted dict,
which each client puts in its own server's form); the text is then read, validated and
retried exactly as a text answer is, its JSON the schema's instance (a non-object answer
wrapped as ``{"response": ...}``, since the providers take an object at the root). "auto"
is "native" where ``llm_call`` names its server's JSON-schema mode (``native_output``),
else "tool". A refusal ends the run in every mode (run.py).

Thread safety: an ``OutputSpec`` is immutable after construction; its tool may run in any thread.
"""

from __future__ import annotations

import copy
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

__all__ = ["FINAL_RESULT_TOOL", "NATIVE_FORMS", "OUTPUT_MODES", "OutputSpec", "Verdict", "check_output_mode", "offered_tools", "output_invalid_response"]

OUTPUT_MODES = ("tool", "native", "auto")
"""``YiemAgent(output_mode=...)``'s values (shared/spec/API.md "Today's models, turn after turn")."""

NATIVE_FORMS = ("json_schema", "json_object", "output_config")
"""The values of a client's ``native_output``: its server's JSON-schema mode (docs/api.md "Native typed answers").

"json_schema": chat completions' ``response_format`` ``{"type": "json_schema", ...}`` (OpenAI,
vLLM, llama.cpp's own server); "json_object": llama-cpp-python's ``{"type": "json_object",
"schema": ...}``; "output_config": Anthropic's structured outputs. None (or no attribute):
not known, so "auto" gives the answer through the tool.
"""

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

    def __init__(self, output_type: Any, retries: int = 1, mode: str = "tool") -> None:
        if isinstance(retries, bool) or not isinstance(retries, int):
            raise TypeError(f"output_retries must be an int, got {type(retries).__name__}")
        if retries < 0:
            raise ValueError(f"output_retries must be at least 0, got {retries}")
        check_output_mode(mode)
        self.mode = mode
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
        self.strict = _closed(tool_schema)  # every object closed and wholly required: OpenAI's strict mode, Anthropic's grammar
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

    def from_text(self, reply: AssistantMessage, native: bool = False) -> Verdict:
        """A reply without tool calls, read as the answer; ``native``: its text is an instance of ``tool_schema`` (the schema the provider was given)."""
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
        return self.decode({_WRAPPED: value} if self.wrapped and not native else value)

    # --- the provider's JSON-schema mode ---------------------------------------------

    def native_for(self, llm_call: Any) -> bool:
        """Whether a run with ``llm_call`` asks the provider for the answer (no ``final_result`` tool): by ``mode`` and the client's ``native_output``.

        "auto" takes the native mode when the client names a form of ``NATIVE_FORMS``
        (Anthropic's only for a schema its grammar takes: every object closed, all its
        properties required). A text answer (``output_type=str``) needs no schema.
        """
        if self.text_is_answer or self.mode == "tool":
            return False
        if self.mode == "native":
            return True
        try:
            form = getattr(llm_call, "native_output", None)
        except user_code_errors():  # a property of the caller's own llm_call
            return False
        return form in ("json_schema", "json_object") or (form == "output_config" and self.strict)

    def response_format(self) -> dict[str, Any]:
        """The answer's schema as chat completions' ``response_format`` (a new dict each call): the one form the formatted dict carries, each client's to translate."""
        return {"type": "json_schema", "json_schema": {"name": FINAL_RESULT_TOOL, "schema": copy.deepcopy(self.tool_schema), "strict": self.strict}}

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

    def retry_message(self, why: str, native: bool = False) -> UserMessage:
        """The feedback on an invalid text answer (an invalid tool answer has its error result)."""
        how = "Answer again." if self.text_is_answer else "Answer again with the answer's JSON." if native else f"Call the {FINAL_RESULT_TOOL} tool with a valid answer."
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


def check_output_mode(mode: Any) -> str:
    """``mode`` when it is one of ``OUTPUT_MODES``.

    Raises:
        ValueError: it is not, naming the three.
    """
    if not isinstance(mode, str) or mode not in OUTPUT_MODES:
        raise ValueError(f"output_mode must be one of {', '.join(map(repr, OUTPUT_MODES))}, got {mode!r}")
    return mode


def _closed(schema: Any) -> bool:
    """Whether every object schema in ``schema`` has ``additionalProperties: false`` and requires all its properties (OpenAI's strict mode; Anthropic's structured outputs)."""
    if isinstance(schema, list):
        return all(_closed(item) for item in schema)
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is not False or not isinstance(properties, dict) or set(schema.get("required", [])) != set(properties):
            return False
    return all(_closed(value) for key, value in schema.items() if key not in ("enum", "const", "default", "examples"))


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
