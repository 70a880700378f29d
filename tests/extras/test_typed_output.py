"""Typed answers: ``YiemAgent(output_type=..., output_retries=...)`` (beyond the spec, docs/api.md "Typed answers").

Through ScriptedLLM, and over real HTTP (tests/support/localserver.py) with OpenAIClient
and AnthropicClient, whole and streamed.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Optional, TypedDict, Union

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import WAIT, make_agent
from localserver import LocalServer, Reply
from yiemagent import (
    AgentToolCall,
    AgentToolResult,
    AssistantMessage,
    LLMCallStartEvent,
    TextContent,
    ToolDefinitionError,
    ToolExecEndEvent,
    ToolResultMessage,
    ask,
    load_history,
    save_history,
    shutdown,
    tool,
)
from yiemagent.llm import AnthropicClient, OpenAIClient
from yiemagent.llm.scripted import ScriptedLLM, tool_call_reply
from yiemagent.typed._codecs import to_json_value
from yiemagent.typed.output import OutputSpec, Verdict


class Kind(enum.Enum):
    CAPITAL = "capital"
    TOWN = "town"


@dataclass(frozen=True)
class City:
    name: str
    population: int
    kind: Kind = Kind.TOWN
    districts: tuple[str, ...] = ()
    mayor: Optional[str] = None


class Point(NamedTuple):
    x: float
    y: float


class Row(TypedDict):
    id: int
    tags: list[str]


class Person(pydantic.BaseModel):
    name: str
    age: int = pydantic.Field(ge=0)


def answer(arguments: dict, call_id: str = "c1") -> AssistantMessage:
    return tool_call_reply((call_id, "final_result", json.dumps(arguments)))


def typed_agent(script, output_type, **kwargs):
    llm = ScriptedLLM(script)
    return llm, make_agent(llm, builtin_tools=False, output_type=output_type, **kwargs)


def test_a_dataclass_answer_through_the_final_answer_tool():
    """A valid final_result call ends the run; ``.output`` is the dataclass, ``.text`` its JSON."""
    llm, agent = typed_agent([answer({"name": "Paris", "population": 2100000, "kind": "capital"})], City)
    try:
        reply = ask(agent, "Which city?", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert reply.stop_reason == "stop"
    assert reply.output == City("Paris", 2100000, Kind.CAPITAL)
    assert json.loads(reply.text) == {"name": "Paris", "population": 2100000, "kind": "capital", "districts": [], "mayor": None}
    assert agent.history()[-1] is reply  # the answer is in the history, after the tool's result
    assert isinstance(agent.history()[-2], ToolResultMessage)


def test_the_final_answer_tool_is_offered_with_the_answers_schema():
    """The request lists final_result whose parameters are the answer's schema; a non-object answer is wrapped in "response"."""
    llm, agent = typed_agent([answer({"response": [1, 2]})], list[int])
    try:
        reply = ask(agent, "numbers?", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    (offered,) = [t["function"] for t in llm.requests[0]["tools"] if t["function"]["name"] == "final_result"]
    assert offered["parameters"]["properties"]["response"] == {"type": "array", "items": {"type": "integer"}}
    assert reply.output == [1, 2]


def test_an_invalid_answer_goes_back_naming_the_field_then_a_valid_one_is_taken():
    """The invalid call gets an error result naming the field; the model's next answer is the output."""
    llm, agent = typed_agent(
        [answer({"name": "Paris", "population": "many"}), answer({"name": "Paris", "population": 3}, "c2")], City
    )
    try:
        reply = ask(agent, "Which city?", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert reply.output == City("Paris", 3)
    feedback = llm.requests[1]["messages"][-1]
    assert feedback["role"] == "tool" and "population" in feedback["content"]


@pytest.mark.parametrize("retries", [{"output_retries": 1}, {}], ids=["one", "default"])
def test_after_the_retries_the_run_ends_output_invalid_naming_the_field(retries):
    """With output_retries=1 (the default, docs/api.md), the second invalid answer ends the run "output_invalid", the field named."""
    llm, agent = typed_agent([answer({"name": "A"}), answer({"name": "B"}, "c2"), "never sent"], City, **retries)
    try:
        reply = ask(agent, "Which city?", timeout=WAIT, check=False)
    finally:
        shutdown(agent, timeout=WAIT)
    assert reply.stop_reason == "output_invalid"
    assert reply.output is None
    assert reply.error_message == (
        "the final answer is invalid after 1 retry: Invalid arguments for tool 'final_result': "
        "population: 'population' is a required property. "
        'Received arguments: {"name": "B"}'
    )
    assert len(llm.requests) == 2
    assert not isinstance(agent.history()[-1], AssistantMessage) or agent.history()[-1].stop_reason != "output_invalid"


def test_output_retries_zero_ends_at_the_first_invalid_answer():
    """output_retries=0: no second chance."""
    llm, agent = typed_agent(["not json"], City, output_retries=0)
    try:
        reply = ask(agent, "Which city?", timeout=WAIT, check=False)
    finally:
        shutdown(agent, timeout=WAIT)
    assert reply.stop_reason == "output_invalid" and "not the answer's JSON" in reply.error_message
    assert len(llm.requests) == 1


def test_a_text_reply_is_read_as_the_answers_json_also_fenced():
    """A reply without tool calls (a provider's JSON mode) is the answer when its text is valid JSON of the type."""
    llm, agent = typed_agent(['```json\n{"x": 1.5, "y": -2}\n```'], Point)
    try:
        reply = ask(agent, "where?", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert reply.output == Point(1.5, -2.0) and isinstance(reply.output, Point)


def test_an_invalid_text_answer_gets_a_user_message_naming_the_field():
    """The retry message names the field that failed and asks for the final_result tool."""
    llm, agent = typed_agent(['{"id": "seven", "tags": []}', '{"id": 7, "tags": ["a"]}'], Row)
    try:
        reply = ask(agent, "row?", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert reply.output == {"id": 7, "tags": ["a"]}
    assert llm.requests[1]["messages"][-1] == {
        "role": "user",
        "content": "The answer is not valid: id: 'seven' is not of type 'integer'. "
        'Received arguments: {"id": "seven", "tags": []}. Call the final_result tool with a valid answer.',
    }


def test_invalid_text_answers_count_against_the_retries_and_the_last_one_is_named():
    """Each invalid text answer counts: with output_retries=1 the second ends the run "output_invalid", naming its field."""
    llm, agent = typed_agent(["not json", '{"x": "a"}', "never sent"], Point, output_retries=1)
    try:
        reply = ask(agent, "where?", timeout=WAIT, check=False)
    finally:
        shutdown(agent, timeout=WAIT)
    assert (reply.stop_reason, reply.output) == ("output_invalid", None)
    assert reply.error_message == (
        "the final answer is invalid after 1 retry: x: 'a' is not of type 'number'; y: 'y' is a required property. "
        'Received arguments: {"x": "a"}'
    )
    assert len(llm.requests) == 2


def test_a_paused_turn_is_not_read_as_the_answer():
    """A turn the server paused (stop_reason "pause_turn") goes back to the model; only the reply that ends the turn is the answer."""
    paused = AssistantMessage([TextContent("Searching the web")], stop_reason="pause_turn")
    llm, agent = typed_agent([paused, "the answer"], str)
    try:
        reply = ask(agent, "find it", timeout=WAIT)
        history = agent.history()
    finally:
        shutdown(agent, timeout=WAIT)
    assert reply.output == "the answer" and len(llm.requests) == 2
    assert [(m.stop_reason, m.output) for m in history if isinstance(m, AssistantMessage)] == [("pause_turn", None), ("stop", "the answer")]


def test_the_final_answer_tool_comes_with_the_agents_system_prompt():
    """Offering final_result beside the agent's tools keeps the rest of the round's context: the system prompt is sent."""
    llm, agent = typed_agent([answer({"name": "Paris", "population": 3})], City, system_prompt="Answer with a city.")
    try:
        ask(agent, "Which city?", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert llm.requests[0]["messages"][0] == {"role": "system", "content": "Answer with a city."}


def test_a_str_answer_is_the_text_and_offers_no_tool():
    """output_type=str: the reply's text is the output; no final_result tool is sent."""
    llm, agent = typed_agent(["plain words"], str)
    try:
        reply = ask(agent, "say", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert reply.output == "plain words"
    assert not any(t["function"]["name"] == "final_result" for t in llm.requests[0].get("tools", []))


@pytest.mark.parametrize(
    "output_type, sent, expected",
    [
        (Kind, "capital", Kind.CAPITAL),
        (Literal["yes", "no"], "no", "no"),
        (int, 42, 42),
        (Union[int, str], "x", "x"),
        (Optional[Point], None, None),
    ],
    ids=["enum", "literal", "int", "union", "optional"],
)
def test_answers_of_each_kind_of_type(output_type, sent, expected):
    """Enums, Literals, primitives and unions come back as the declared type."""
    llm, agent = typed_agent([answer({"response": sent})], output_type)
    try:
        reply = ask(agent, "?", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert reply.stop_reason == "stop", reply.error_message
    assert reply.output == expected and type(reply.output) is type(expected)


def test_a_pydantic_model_answer_is_validated_by_pydantic():
    """A pydantic constraint (age >= 0) refuses the answer; the corrected one is a Person."""
    llm, agent = typed_agent([answer({"name": "Ann", "age": -1}), answer({"name": "Ann", "age": 30}, "c2")], Person)
    try:
        reply = ask(agent, "who?", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert reply.output == Person(name="Ann", age=30)
    assert "age" in llm.requests[1]["messages"][-1]["content"]


def test_tool_accepts_a_pydantic_model_parameter():
    """tool() takes a pydantic parameter: its schema is the model's, the function receives an instance."""

    def greet(person: Person) -> str:
        """Greet someone."""
        return f"hello {person.name} ({type(person).__name__})"

    made = tool(greet)
    assert made.input_schema["properties"]["person"]["properties"]["age"]["minimum"] == 0
    result = made.execute("c1", {"person": {"name": "Bo", "age": 3}}, None, lambda p: None)
    assert result.content[0].text == "hello Bo (Person)"


def test_an_output_type_without_a_schema_is_refused_at_construction():
    """A type JSON Schema cannot express raises ToolDefinitionError naming it."""
    with pytest.raises(ToolDefinitionError, match="bytes"):
        make_agent(ScriptedLLM([]), builtin_tools=False, output_type=bytes)


def test_the_output_is_kept_in_the_json_form_of_the_history(tmp_path):
    """save_history writes the answer's JSON; load_history gives it back as that JSON."""
    llm, agent = typed_agent([answer({"name": "Oslo", "population": 700000})], City)
    try:
        reply = ask(agent, "city?", timeout=WAIT)
        save_history(agent.history(), tmp_path / "h.json")
    finally:
        shutdown(agent, timeout=WAIT)
    loaded = load_history(tmp_path / "h.json")
    assert loaded[-1].output == to_json_value(reply.output)


# --- over HTTP, with both clients -------------------------------------------------------


def _sse(events, named=False) -> bytes:
    return "".join((f"event: {e['type']}\n" if named else "") + f"data: {json.dumps(e)}\n\n" for e in events).encode()


def openai_answer(arguments: str, stream: bool) -> Reply:
    if stream:
        chunks = [
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "final_result", "arguments": ""}}]}}]},
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        ]
        return Reply(chunks=[_sse(chunks) + b"data: [DONE]\n\n"])
    call = {"id": "c1", "type": "function", "function": {"name": "final_result", "arguments": arguments}}
    return Reply(body={"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}, "finish_reason": "tool_calls"}]})


def anthropic_answer(arguments: str, stream: bool) -> Reply:
    if stream:
        events = [
            {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1}}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "final_result", "input": {}}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": arguments}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 1}},
            {"type": "message_stop"},
        ]
        return Reply(chunks=[_sse(events, named=True)])
    return Reply(body={"content": [{"type": "tool_use", "id": "t1", "name": "final_result", "input": json.loads(arguments)}], "stop_reason": "tool_use", "model": "m"})


CLIENTS = {
    "openai": (openai_answer, lambda url, stream: OpenAIClient(url, "m", max_retries=0, stream=stream)),
    "anthropic": (anthropic_answer, lambda url, stream: AnthropicClient("m", "k", base_url=url, max_retries=0, stream=stream)),
}


def _offered_tools(body: dict) -> dict[str, dict]:
    """The tools of a request body by name, either wire format, as their JSON Schema."""
    tools = {}
    for entry in body.get("tools", []):
        if "function" in entry:
            tools[entry["function"]["name"]] = entry["function"]["parameters"]
        else:
            tools[entry["name"]] = entry["input_schema"]
    return tools


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_typed_answer_over_http(client, stream):
    """Both clients: the server sees final_result with the schema, an invalid answer comes back naming the field, the valid one is the output."""
    make_reply, make_client = CLIENTS[client]
    answers = [json.dumps({"name": "Rome", "population": "lots"}), json.dumps({"name": "Rome", "population": 2800000, "kind": "capital"})]

    def respond(request):
        return make_reply(answers[len(server.requests) - 1], stream)

    with LocalServer(respond) as server:
        agent = make_agent(make_client(server.url, stream), builtin_tools=False, output_type=City)
        try:
            reply = ask(agent, "Which city?", timeout=WAIT)
        finally:
            shutdown(agent, timeout=WAIT)
        bodies = [r.json() for r in server.requests]
    assert reply.output == City("Rome", 2800000, Kind.CAPITAL), reply.error_message
    assert _offered_tools(bodies[0])["final_result"]["required"] == ["name", "population"]
    assert "population" in json.dumps(bodies[1]["messages"][-1]) and "integer" in json.dumps(bodies[1]["messages"][-1])
    assert len(bodies) == 2


# --- the property: any value of the declared type round-trips through the model's JSON ---

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_cities = st.builds(
    City,
    name=_text,
    population=st.integers(-(2**53), 2**53),
    kind=st.sampled_from(Kind),
    districts=st.lists(_text, max_size=3).map(tuple),
    mayor=st.none() | _text,
)
_points = st.builds(Point, st.floats(allow_nan=False, allow_infinity=False), st.floats(allow_nan=False, allow_infinity=False))
_people = st.builds(Person, name=_text, age=st.integers(0, 150))

ROUND_TRIPS = [
    (City, _cities),
    (list[Point], st.lists(_points, max_size=3)),
    (Union[Person, Kind], _people | st.sampled_from(Kind)),
    (Optional[Row], st.none() | st.fixed_dictionaries({"id": st.integers(), "tags": st.lists(_text, max_size=3)})),
]


@pytest.fixture(scope="module")
def shared_agents():
    agents = {}
    yield agents
    for agent in agents.values():
        shutdown(agent, timeout=WAIT)


@pytest.mark.parametrize("index", range(len(ROUND_TRIPS)), ids=["dataclass", "list-of-namedtuple", "union-pydantic-enum", "optional-typeddict"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_value_of_the_declared_type_round_trips_through_the_models_json(shared_agents, index, data):
    """Property: the value's JSON, sent by a model as final_result's arguments, comes back equal and of the declared type."""
    output_type, values = ROUND_TRIPS[index]
    value = data.draw(values)
    if index not in shared_agents:
        shared_agents[index] = make_agent(ScriptedLLM([]), builtin_tools=False, output_type=output_type)
    agent = shared_agents[index]
    spec = agent._core.output_spec
    sent = to_json_value(value)
    agent.llm_call = ScriptedLLM([answer({"response": sent} if spec.wrapped else sent)])
    reply = ask(agent, "answer", timeout=WAIT)
    assert reply.stop_reason == "stop", reply.error_message
    assert reply.output == value and type(reply.output) is type(value)


def test_an_abort_during_the_answers_batch_ends_the_run_aborted_not_output_invalid():
    """A final_result call answered "Operation aborted" is not an invalid answer: the run ends "aborted"."""
    holder = {}

    @tool
    def stop() -> str:
        """Abort the run."""
        from yiemagent import abort

        abort(holder["agent"], "the user left")
        return "stopping"

    llm = ScriptedLLM([tool_call_reply(("s1", "stop", "{}"), ("c1", "final_result", json.dumps({"name": "A", "population": 1})))])
    agent = holder["agent"] = make_agent(llm, stop, builtin_tools=False, output_type=City, output_retries=0)
    try:
        reply = ask(agent, "go", timeout=WAIT, check=False)
    finally:
        shutdown(agent, timeout=WAIT)
    assert reply.stop_reason == "aborted"


def test_a_store_with_a_final_result_tool_and_bad_retries_are_refused():
    """output_type needs the name final_result; output_retries must be an int of at least 0."""

    @tool
    def final_result(x: int) -> str:
        return ""

    with pytest.raises(ValueError, match="final_result"):
        make_agent(ScriptedLLM([]), final_result, builtin_tools=False, output_type=City)
    with pytest.raises(ValueError, match="output_retries"):
        make_agent(ScriptedLLM([]), builtin_tools=False, output_type=City, output_retries=-1)
    with pytest.raises(TypeError, match="output_retries"):
        make_agent(ScriptedLLM([]), builtin_tools=False, output_type=City, output_retries=True)


def test_an_answer_given_beside_another_tool_call_ends_the_run_after_both_ran():
    """final_result beside another call: both are answered, then the run ends with the output."""
    ran = []

    @tool
    def note(text: str) -> str:
        """Take a note."""
        ran.append(text)
        return "noted"

    llm = ScriptedLLM([tool_call_reply(("n1", "note", '{"text": "hi"}'), ("c1", "final_result", json.dumps({"name": "A", "population": 1})))])
    agent = make_agent(llm, note, builtin_tools=False, output_type=City)
    try:
        reply = ask(agent, "go", timeout=WAIT)
        results = [m.tool_call_id for m in agent.history() if isinstance(m, ToolResultMessage)]
    finally:
        shutdown(agent, timeout=WAIT)
    assert reply.output == City("A", 1) and ran == ["hi"] and results == ["n1", "c1"]


def test_a_session_keeps_the_answer_for_the_next_process(tmp_path):
    """An SQLiteSession stores .output in its JSON form; an agent opening the session sees it."""
    from yiemagent import SQLiteSession

    llm = ScriptedLLM([answer({"name": "Bern", "population": 140000})])
    agent = make_agent(llm, builtin_tools=False, output_type=City, session=SQLiteSession(tmp_path / "s.db", "chat"))
    try:
        ask(agent, "city?", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    later = make_agent(ScriptedLLM([]), builtin_tools=False, session=SQLiteSession(tmp_path / "s.db", "chat"))
    try:
        assert later.history()[-1].output == {"name": "Bern", "population": 140000, "kind": "town", "districts": [], "mayor": None}
    finally:
        shutdown(later, timeout=WAIT)


# --- what the model is offered, and what the run makes of each answer -------------------


def test_the_final_answer_tool_is_described_and_a_non_object_answer_wrapped_exactly():
    """final_result as the model sees it: its description names the type, and a non-object answer's
    schema is an object with one required "response" and nothing else (docs/api.md "Typed answers")."""
    llm, agent = typed_agent([answer({"response": [3]})], list[int])
    try:
        ask(agent, "numbers?", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    (offered,) = [t["function"] for t in llm.requests[0]["tools"] if t["function"]["name"] == "final_result"]
    assert offered == {
        "name": "final_result",
        "description": "Give the final answer (list[int]) with this tool, once, when you have it; its arguments are the answer.",
        "parameters": {
            "type": "object",
            "properties": {"response": {"type": "array", "items": {"type": "integer"}}},
            "required": ["response"],
            "additionalProperties": False,
        },
    }


def test_an_object_answer_without_properties_is_wrapped_too():
    """A dict[str, int] answer is an object with no "properties": it is wrapped in "response" like any non-record answer."""
    llm, agent = typed_agent([answer({"response": {"a": 1, "b": 2}})], dict[str, int])
    try:
        reply = ask(agent, "counts?", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    (offered,) = [t["function"]["parameters"] for t in llm.requests[0]["tools"] if t["function"]["name"] == "final_result"]
    assert offered["properties"] == {"response": {"type": "object", "additionalProperties": {"type": "integer"}}}
    assert (reply.output, reply.text) == ({"a": 1, "b": 2}, '{"a": 1, "b": 2}')


def test_the_final_answer_tool_in_the_rounds_context_is_labelled_final_result():
    """The LLMCallStartEvent's context holds the final_result tool the run adds, labelled "Final result"."""
    events = []
    llm, agent = typed_agent([answer({"name": "Oslo", "population": 1})], City, sink=events.append)
    try:
        ask(agent, "city?", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    (start,) = [e for e in events if isinstance(e, LLMCallStartEvent)]
    assert start.context.tools["final_result"].label == "Final result"


@dataclass(frozen=True)
class Span:
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"end {self.end} is before start {self.start}")


def test_an_answer_the_type_itself_refuses_goes_back_with_the_types_words_and_a_valid_one_is_acknowledged():
    """An answer the schema admits but the type's own check refuses (a dataclass __post_init__) is an error result
    with that check's message; the valid one's result is the plain acknowledgement, not an error (spec §12)."""
    events = []
    llm, agent = typed_agent([answer({"start": 5, "end": 1}), answer({"start": 5, "end": 9}, "c2")], Span, sink=events.append)
    try:
        reply = ask(agent, "when?", timeout=WAIT)
        results = [m for m in agent.history() if isinstance(m, ToolResultMessage)]
    finally:
        shutdown(agent, timeout=WAIT)
    assert reply.output == Span(5, 9)
    assert llm.requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "name": "final_result",
        "content": "Tool 'final_result' failed: ValueError: ValueError: end 1 is before start 5",
        "is_error": True,
    }
    ends = {e.tool_call_id: e for e in events if isinstance(e, ToolExecEndEvent)}
    assert ends["c2"].is_error is False
    assert ends["c2"].result == AgentToolResult([TextContent("Final answer received.")], {}, None, False)
    assert [(r.tool_call_id, r.is_error, r.content[0].text, r.details) for r in results] == [
        ("c1", True, "Tool 'final_result' failed: ValueError: ValueError: end 1 is before start 5", {}),
        ("c2", False, "Final answer received.", {}),
    ]


@pytest.mark.parametrize("retries", [0, 2])
def test_the_output_invalid_reply_counts_retries_in_words_and_has_no_content(retries):
    """After output_retries invalid answers the next one ends the run: the reply has no content and its
    error_message says "after N retries" (plural but for 1, whose "retry" the test above shows), then the last answer's fault."""
    script = [answer({"start": 5, "end": n}, f"c{n}") for n in range(retries + 1)] + ["never sent"]
    llm, agent = typed_agent(script, Span, output_retries=retries)
    try:
        reply = ask(agent, "when?", timeout=WAIT, check=False)
    finally:
        shutdown(agent, timeout=WAIT)
    assert (reply.stop_reason, reply.content, reply.output) == ("output_invalid", [], None)
    assert reply.error_message == (
        f"the final answer is invalid after {retries} retries: "
        f"Tool 'final_result' failed: ValueError: ValueError: end {retries} is before start 5"
    )
    assert len(llm.requests) == retries + 1


def test_the_agents_final_reply_keeps_the_models_api_provider_and_model_and_unescaped_text():
    """The reply the agent makes for a tool answer carries the api, provider and model of the reply that gave it,
    and its text is the answer's JSON with non-ASCII characters as they are."""
    given = dataclasses.replace(
        answer({"name": "Zürich", "population": 420000}), api="anthropic-messages", provider="acme", model="m-7"
    )
    llm, agent = typed_agent([given], City)
    try:
        reply = ask(agent, "city?", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert (reply.api, reply.provider, reply.model, reply.stop_reason) == ("anthropic-messages", "acme", "m-7", "stop")
    assert reply.text == '{"name": "Zürich", "population": 420000, "kind": "town", "districts": [], "mayor": null}'


def test_a_round_of_other_tool_calls_is_not_an_answer_and_the_run_goes_on():
    """A round whose calls do not include final_result runs them and asks the model again; its next answer is the output."""

    @tool
    def look(city: str) -> str:
        """Look a city up."""
        return f"{city}: 700000"

    llm = ScriptedLLM([tool_call_reply(("l1", "look", '{"city": "Oslo"}')), answer({"name": "Oslo", "population": 700000})])
    agent = make_agent(llm, look, builtin_tools=False, output_type=City)
    try:
        reply = ask(agent, "city?", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert (reply.stop_reason, reply.output) == ("stop", City("Oslo", 700000))
    assert llm.requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "l1",
        "name": "look",
        "content": "Oslo: 700000",
        "is_error": False,
    }


FEEDBACK_HOOKS = [
    ({"before_tool_call": lambda ctx, signal: {"block": True, "reason": "answers are closed"}}, "answers are closed"),
    ({"after_tool_call": lambda ctx, signal: {"content": [TextContent("first"), TextContent("second")], "is_error": True}}, "first second"),
    ({"after_tool_call": lambda ctx, signal: {"content": [], "is_error": True}}, "the final answer was not accepted"),
]


@pytest.mark.parametrize("hooks, why", FEEDBACK_HOOKS, ids=["blocked", "two-texts", "no-text"])
def test_a_valid_answer_whose_result_is_an_error_is_not_taken(hooks, why):
    """A final_result call whose result is an error (blocked by before_tool_call, or made one by after_tool_call) is
    an invalid answer even when its arguments are valid: the reason is its result's texts joined by spaces, or a
    fixed phrase when it has none."""
    llm, agent = typed_agent([answer({"response": [1]})], list[int], output_retries=0, **hooks)
    try:
        reply = ask(agent, "numbers?", timeout=WAIT, check=False)
    finally:
        shutdown(agent, timeout=WAIT)
    assert (reply.stop_reason, reply.output) == ("output_invalid", None)
    assert reply.error_message == f"the final answer is invalid after 0 retries: {why}"


def test_a_text_answer_of_a_non_object_type_is_read_whole():
    """A reply without tool calls for list[int] is the list itself, not {"response": ...}: the run wraps it to check it."""
    llm, agent = typed_agent(["[4, 5]"], list[int])
    try:
        reply = ask(agent, "numbers?", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert (reply.stop_reason, reply.output) == ("stop", [4, 5])


@pytest.mark.parametrize(
    "output_type, message",
    [
        (bytes, "output_type bytes cannot be an answer: JSON Schema cannot express it"),
        (list[bytes], "output_type bytes (in list[bytes]) cannot be an answer: JSON Schema cannot express it"),
    ],
    ids=["itself", "inside"],
)
def test_an_output_type_without_a_schema_is_refused_naming_the_part_and_the_whole(output_type, message):
    """The ToolDefinitionError names the part JSON Schema cannot express, and the whole type when the part is inside it."""
    with pytest.raises(ToolDefinitionError) as raised:
        make_agent(ScriptedLLM([]), builtin_tools=False, output_type=output_type)
    assert str(raised.value) == message


def test_output_retries_that_is_not_an_int_is_refused_naming_its_type():
    """output_retries=True is a bool, not an int: the TypeError names the type it got."""
    with pytest.raises(TypeError) as raised:
        make_agent(ScriptedLLM([]), builtin_tools=False, output_type=City, output_retries=True)
    assert str(raised.value) == "output_retries must be an int, got bool"


# --- OutputSpec itself (typed/output.py), for what no run reaches ------------------------


def test_an_output_spec_shows_its_type_and_retries_and_retries_once_by_default():
    """repr names the answer's type and its retries; OutputSpec's own default is docs/api.md's output_retries=1."""
    assert repr(OutputSpec(City)) == "OutputSpec(City, retries=1)"
    assert repr(OutputSpec(list[int], 3)) == "OutputSpec(list[int], retries=3)"


def test_the_retry_message_asks_a_str_answer_again_and_any_other_for_the_tool():
    """retry_message's request: a str answer (no tool offered) is asked again, any other to call final_result."""
    assert OutputSpec(str).retry_message("too short").content[0].text == "The answer is not valid: too short. Answer again."
    assert OutputSpec(City).retry_message("no name").content[0].text == "The answer is not valid: no name. Call the final_result tool with a valid answer."


def test_a_final_result_call_without_a_result_is_an_answer_not_accepted():
    """from_batch: a final_result call the batch gave no result is invalid, with the fixed reason; a round without one is None."""
    spec = OutputSpec(City)
    call = AgentToolCall("c1", "final_result", {"name": "Oslo", "population": 1})
    assert spec.from_batch([call], []) == Verdict(why="the final answer was not accepted")
    assert spec.from_batch([AgentToolCall("l1", "look", {})], []) is None


class Picky(pydantic.BaseModel):
    name: str

    @pydantic.field_validator("name")
    @classmethod
    def _not_boom(cls, value: str) -> str:
        if value == "boom":
            raise RuntimeError(f"the validator cannot check {value!r}")
        return value


def _picky_answer(path: str, name: str, call_id: str) -> object:
    return json.dumps({"name": name}) if path == "text" else answer({"name": name}, call_id)


@pytest.mark.parametrize("path", ["text", "tool"])
def test_a_validator_raising_anything_is_an_invalid_answer_retried_on_both_paths(path):
    """A pydantic validator raising RuntimeError makes the answer invalid, named by its cause, and the model is asked again."""
    llm, agent = typed_agent([_picky_answer(path, "boom", "c1"), _picky_answer(path, "Ann", "c2")], Picky)
    try:
        reply = ask(agent, "who?", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert (reply.stop_reason, reply.output) == ("stop", Picky(name="Ann"))
    assert "RuntimeError: the validator cannot check 'boom'" in llm.requests[1]["messages"][-1]["content"]


@pytest.mark.parametrize("path", ["text", "tool"])
def test_a_validator_raising_anything_ends_the_run_output_invalid_after_the_retries(path):
    """With output_retries=0 a validator raising RuntimeError ends the run "output_invalid" naming the exception, not "error"."""
    llm, agent = typed_agent([_picky_answer(path, "boom", "c1")], Picky, output_retries=0)
    try:
        reply = ask(agent, "who?", timeout=WAIT, check=False)
    finally:
        shutdown(agent, timeout=WAIT)
    assert reply.stop_reason == "output_invalid", reply.error_message
    assert "RuntimeError: the validator cannot check 'boom'" in reply.error_message


@dataclass
class Stamped:
    name: str
    seen: int = field(default=0, init=False)


def test_a_dataclass_field_with_init_false_is_in_neither_the_answers_schema_nor_a_tools():
    """A field the dataclass's __init__ does not take (init=False) is no property of the answer's schema nor of a tool parameter's."""

    @tool
    def keep(item: Stamped) -> str:
        """Keep an item."""
        return item.name

    for schema in (OutputSpec(Stamped).tool_schema, keep.input_schema["properties"]["item"]):
        assert set(schema["properties"]) == {"name"}
        assert "seen" not in schema.get("required", [])
    assert keep.execute("k1", {"item": {"name": "a"}}, None, lambda p: None).content[0].text == "a"
