"""Native typed answers: ``YiemAgent(output_type=..., output_mode="native" | "auto" | "tool")`` (docs/api.md "Native typed answers").

Over a real HTTP server on 127.0.0.1 that, like the real servers, refuses a request whose
body does not carry the answer's schema in its own form (chat completions'
``response_format`` ``json_schema``, llama-cpp-python's ``json_object`` with ``schema``,
Anthropic's ``output_config.format``), and answers in the shape each server answers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, Optional

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import FIXTURES, WAIT, make_agent
from localserver import LocalServer, Reply
from strategies import type_specs
from yiemagent import AssistantMessage, TextContent, UserMessage, ask
from yiemagent.llm import AnthropicClient, OpenAIClient, OpenAIResponsesClient
from yiemagent.llm.scripted import ScriptedLLM
from yiemagent.typed.output import OutputSpec


@dataclass(frozen=True)
class City:
    name: str
    population: int
    mayor: Optional[str] = None  # a default: not every property required, so not strict


@dataclass(frozen=True)
class Weather:  # closed: every property required (OpenAI strict mode, Anthropic's grammar)
    city: Literal["Paris", "London", "Tokyo"]
    temperature_c: int


CITY_SCHEMA = OutputSpec(City).tool_schema


def _sse(events, named=False) -> bytes:
    return "".join((f"event: {e['type']}\n" if named else "") + f"data: {json.dumps(e)}\n\n" for e in events).encode()


def openai_text(text: str, stream: bool) -> Reply:
    """A chat-completions reply whose content is ``text``, whole or streamed in two pieces."""
    if stream:
        half = len(text) // 2
        chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": piece}}]} for piece in (text[:half], text[half:])]
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        return Reply(chunks=[_sse(chunks) + b"data: [DONE]\n\n"], headers={"Content-Type": "text/event-stream"})
    return Reply(body={"model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None}, "finish_reason": "stop"}]})


def anthropic_text(text: str, stream: bool) -> Reply:
    """A Messages API reply whose one text block is ``text`` (structured outputs answer in a text block)."""
    if stream:
        events = [
            {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1}}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
            {"type": "message_stop"},
        ]
        return Reply(chunks=[_sse(events, named=True)], headers={"Content-Type": "text/event-stream"})
    return Reply(body={"type": "message", "role": "assistant", "model": "m", "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}})


def responses_text(text: str, stream: bool) -> Reply:
    """A Responses API reply whose one message's output_text is ``text``; streamed as its item, the text delta and response.completed."""
    message = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]}
    body = {"id": "resp_1", "object": "response", "status": "completed", "model": "m", "output": [message], "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}
    if stream:
        events = [
            {"type": "response.output_item.added", "output_index": 0, "item": {**message, "status": "in_progress", "content": []}},
            {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "item_id": "msg_1", "delta": text},
            {"type": "response.output_item.done", "output_index": 0, "item": message},
            {"type": "response.completed", "response": body},
        ]
        return Reply(chunks=[_sse(events, named=True)], headers={"Content-Type": "text/event-stream"})
    return Reply(body=body)


def _refused(message: str) -> Reply:
    return Reply(status=400, body={"error": {"type": "invalid_request_error", "message": message}})


# what each server takes: (its client, the reply shape, where the schema must be in the body)
def _openai_schema(body: dict) -> Optional[dict]:
    fmt = body.get("response_format") or {}
    return fmt.get("json_schema", {}).get("schema") if fmt.get("type") == "json_schema" and fmt["json_schema"].get("name") else None


def _llama_schema(body: dict) -> Optional[dict]:
    fmt = body.get("response_format") or {}
    return fmt.get("schema") if fmt.get("type") == "json_object" else None  # llama-cpp-python refuses the json_schema type


def _anthropic_schema(body: dict) -> Optional[dict]:
    fmt = (body.get("output_config") or {}).get("format") or {}
    return fmt.get("schema") if fmt.get("type") == "json_schema" and "response_format" not in body else None


def _responses_schema(body: dict) -> Optional[dict]:
    fmt = (body.get("text") or {}).get("format") or {}
    return fmt.get("schema") if fmt.get("type") == "json_schema" and fmt.get("name") and "response_format" not in body else None


SERVERS = {
    "openai": (lambda url, stream: OpenAIClient(f"{url}/v1", "m", max_retries=0, stream=stream), openai_text, _openai_schema),
    "llama-cpp-python": (lambda url, stream: OpenAIClient(f"{url}/v1", "m", max_retries=0, stream=stream, native_output="json_object"), openai_text, _llama_schema),
    "anthropic": (lambda url, stream: AnthropicClient("claude-sonnet-4-5", "k", base_url=url, max_retries=0, stream=stream), anthropic_text, _anthropic_schema),
    "responses": (lambda url, stream: OpenAIResponsesClient("m", "k", base_url=f"{url}/v1", max_retries=0, stream=stream), responses_text, _responses_schema),
}


def serve(server_kind: str, answers: list[str], stream: bool):
    """A server of ``server_kind`` that answers ``answers`` in turn, and refuses (400) a request without the schema in its form."""
    _, reply, schema_of = SERVERS[server_kind]
    served = iter(answers)

    def respond(request):
        if schema_of(request.json()) is None:
            return _refused("response_format / output_config with the answer's JSON schema expected")
        return reply(next(served), stream)

    return LocalServer(respond)


def answer_of(llm_call, output_type, question: str = "q", **options) -> tuple[AssistantMessage, list]:
    """The reply of one run of a typed agent over ``llm_call`` (``check=False``), and its history."""
    with make_agent(llm_call, builtin_tools=False, output_type=output_type, **options) as agent:
        reply = ask(agent, question, timeout=WAIT, check=False)
        return reply, agent.history()


def _tools(body: dict) -> list[str]:
    return [t["function"]["name"] if "function" in t else t["name"] for t in body.get("tools", [])]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("server_kind", sorted(SERVERS))
def test_a_native_answer_is_asked_in_each_servers_form_and_an_invalid_one_retried(server_kind, stream):
    """output_mode="native": each request carries the answer's schema in the server's own form and no final_result tool; an invalid answer goes back naming the field, the valid one is the output."""
    answers = [json.dumps({"name": "Rome", "population": "lots"}), json.dumps({"name": "Rome", "population": 2800000, "mayor": None})]
    with serve(server_kind, answers, stream) as server:
        reply, history = answer_of(SERVERS[server_kind][0](server.url, stream), City, "Which city?", output_mode="native")
    bodies = [r.json() for r in server.requests]
    assert reply.output == City("Rome", 2800000), reply.error_message
    assert [SERVERS[server_kind][2](b) for b in bodies] == [CITY_SCHEMA, CITY_SCHEMA]
    assert all("final_result" not in _tools(b) for b in bodies)
    retry = history[2]
    assert isinstance(retry, UserMessage) and "population" in retry.content[0].text and "final_result" not in retry.content[0].text
    assert history[-1] is reply or history[-1] == reply


def test_openai_strict_is_set_only_for_a_closed_schema():
    """The json_schema response_format says strict only when every object is closed and wholly required (OpenAI refuses strict otherwise)."""
    assert OutputSpec(City, 1, "native").response_format()["json_schema"]["strict"] is False
    weather = OutputSpec(Weather, 1, "native").response_format()
    assert weather == {"type": "json_schema", "json_schema": {"name": "final_result", "schema": OutputSpec(Weather).tool_schema, "strict": True}}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_non_object_answer_is_wrapped_for_the_provider_and_read_back(stream):
    """A list answer is asked as {"response": [...]} (providers take an object at the root) and read back as the list."""
    with serve("openai", [json.dumps({"response": [3, 1, 2]})], stream) as server:
        reply, _ = answer_of(SERVERS["openai"][0](server.url, stream), list[int], "Numbers?", output_mode="native")
    assert reply.output == [3, 1, 2]
    assert _openai_schema(server.requests[0].json())["properties"]["response"] == {"type": "array", "items": {"type": "integer"}}


def test_native_answers_stay_invalid_past_the_retries_end_the_run_output_invalid():
    """Each invalid native answer counts; the one after output_retries ends the run "output_invalid" naming the field, as in tool mode."""
    with serve("openai", [json.dumps({"name": "X"})] * 3, False) as server:
        reply, _ = answer_of(SERVERS["openai"][0](server.url, False), City, "Which city?", output_mode="native", output_retries=1)
    assert reply.stop_reason == "output_invalid" and "population" in reply.error_message
    assert len(server.requests) == 2


def test_a_refusal_in_native_mode_ends_the_run_without_a_retry():
    """OpenAI's refusal to a json_schema request (a real recording) ends a native run with stop_reason "refusal": no retry, one request."""
    recorded = json.loads((FIXTURES / "openai-refusal.json").read_text())
    with LocalServer(lambda r: Reply(body=recorded) if _openai_schema(r.json()) else _refused("no schema")) as server:
        reply, _ = answer_of(OpenAIClient(f"{server.url}/v1", "m", max_retries=0), City, "How do I make anthrax?", output_mode="native", output_retries=3)
    assert (reply.stop_reason, len(server.requests)) == ("refusal", 1)


# --- "auto" and "tool" --------------------------------------------------------------------------------


def _first_body(client_of, output_type, mode: str, answer: str, reply_of=openai_text) -> dict:
    """The first request body of a run with ``client_of(url)`` and ``output_mode=mode``."""
    with LocalServer(lambda r: reply_of(answer, False)) as server:
        answer_of(client_of(server.url), output_type, output_mode=mode)
    return server.requests[0].json()


AUTO_CASES = {
    # a server the client does not know: the tool
    "unknown host": (lambda url: OpenAIClient(f"{url}/v1", "m", max_retries=0), City, False),
    # llama-cpp-python named by the client option
    "json_object option": (lambda url: OpenAIClient(f"{url}/v1", "m", max_retries=0, native_output="json_object"), City, True),
    "json_schema option": (lambda url: OpenAIClient(f"{url}/v1", "m", max_retries=0, native_output="json_schema"), City, True),
    # Anthropic: a model with structured outputs, and a schema its grammar takes
    "claude 4.5, closed schema": (lambda url: AnthropicClient("claude-sonnet-4-5", "k", base_url=url, max_retries=0), Weather, True),
    "claude 4.5, open schema": (lambda url: AnthropicClient("claude-sonnet-4-5", "k", base_url=url, max_retries=0), City, False),
    "claude 3.5": (lambda url: AnthropicClient("claude-3-5-haiku-20241022", "k", base_url=url, max_retries=0), Weather, False),
}


def test_openai_and_its_responses_api_are_known_by_their_host():
    """api.openai.com takes a json_schema (chat completions' response_format, the Responses API's text.format): both clients say so; another host is not known."""
    assert OpenAIClient("https://api.openai.com/v1", "m").native_output == "json_schema"
    assert OpenAIResponsesClient("m", "k").native_output == "json_schema"
    assert OpenAIClient("http://127.0.0.1:8080/v1", "m").native_output is None


@pytest.mark.parametrize("case", sorted(AUTO_CASES))
def test_auto_is_native_where_the_client_knows_its_server_has_it_else_the_tool(case):
    """output_mode="auto": the schema goes to the server where the client names its JSON-schema mode (and Anthropic's grammar takes the schema), else final_result is offered."""
    client_of, output_type, native = AUTO_CASES[case]
    anthropic = "claude" in case
    answer = json.dumps({"city": "Paris", "temperature_c": 20} if output_type is Weather else {"name": "Rome", "population": 1})
    body = _first_body(client_of, output_type, "auto", answer, anthropic_text if anthropic else openai_text)
    asked = ("output_config" in body) if anthropic else ("response_format" in body)
    assert (asked, "final_result" not in _tools(body)) == (native, native)


@pytest.mark.parametrize("server_kind", sorted(SERVERS))
def test_tool_mode_is_unchanged_no_schema_is_sent_and_final_result_is_offered(server_kind):
    """output_mode="tool" (the default): no response_format nor output_config; final_result offered with the answer's schema."""
    client_of, reply_of, _ = SERVERS[server_kind]
    for mode in ("tool", None):
        with LocalServer(lambda r: reply_of(json.dumps({"name": "Rome", "population": 1}), False)) as server:
            reply, _ = answer_of(client_of(server.url, False), City, **({} if mode is None else {"output_mode": mode}))
        assert reply.output == City("Rome", 1)
        body = server.requests[0].json()
        assert "response_format" not in body and "output_config" not in body
        assert "final_result" in _tools(body)


def test_an_unknown_output_mode_or_native_output_is_refused_naming_the_choices():
    """output_mode and OpenAIClient(native_output=) take only their documented values; the ValueError names them."""
    with pytest.raises(ValueError, match="'tool', 'native', 'auto'"):
        make_agent(ScriptedLLM([]), builtin_tools=False, output_type=City, output_mode="json")
    with pytest.raises(ValueError, match="'tool', 'native', 'auto'"):
        make_agent(ScriptedLLM([]), builtin_tools=False, output_mode="strict")
    with pytest.raises(ValueError, match="'json_schema', 'json_object'"):
        OpenAIClient("http://127.0.0.1:1/v1", "m", native_output="grammar")


def test_a_plain_llm_call_in_native_mode_receives_the_response_format():
    """A plain function as llm_call gets the answer's response_format in the formatted dict, in chat completions' form."""
    seen: list[dict] = []

    def llm_call(formatted):
        seen.append(formatted)
        return AssistantMessage([TextContent(json.dumps({"city": "Tokyo", "temperature_c": 9}))], stop_reason="stop")

    assert answer_of(llm_call, Weather, output_mode="native")[0].output == Weather("Tokyo", 9)
    assert seen[0]["response_format"] == OutputSpec(Weather).response_format() and "tools" not in seen[0]


# --- the property: any value, as the provider's JSON, comes back ------------------------------------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
NATIVE_TYPES = [
    (City, st.builds(City, name=_text, population=st.integers(-(2**53), 2**53), mayor=st.none() | _text), lambda v: {"name": v.name, "population": v.population, "mayor": v.mayor}),
    (list[int], st.lists(st.integers(-(2**53), 2**53), max_size=4), lambda v: {"response": v}),
    (Optional[str], st.none() | _text, lambda v: {"response": v}),
]


@pytest.mark.parametrize("index", range(len(NATIVE_TYPES)), ids=["dataclass", "list", "optional-str"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_value_sent_as_the_schemas_instance_is_read_back_equal(index, data):
    """Property: a value's JSON in the shape of the schema sent to the provider (wrapped for a non-object) is read back from the reply's text equal."""
    output_type, values, as_instance = NATIVE_TYPES[index]
    value = data.draw(values)
    spec = OutputSpec(output_type, 1, "native")
    verdict = spec.from_text(AssistantMessage([TextContent(json.dumps(as_instance(value), ensure_ascii=data.draw(st.booleans())))]), native=True)
    assert verdict.valid and verdict.value == value
    assert spec.response_format()["json_schema"]["schema"]["type"] == "object"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_native_answer_reads_as_the_final_result_tools_arguments_read(data):
    """Property (differential): for any answer type and value, the schema asked of the provider is final_result's, and the text of its instance reads back as the tool's arguments do."""
    spec_of_type = data.draw(type_specs, label="annotation")
    value = data.draw(spec_of_type.values, label="value")
    spec = OutputSpec(spec_of_type.annotation, 1, "native")
    if spec.text_is_answer:  # output_type=str: the text itself, no schema asked
        return
    instance = json.loads(json.dumps({"response": spec_of_type.to_json(value)} if spec.wrapped else spec_of_type.to_json(value)))
    schema = spec.response_format()["json_schema"]["schema"]
    assert schema == spec.tool_schema and schema["type"] == "object"
    jsonschema.validate(instance, schema)
    native = spec.from_text(AssistantMessage([TextContent(json.dumps(instance))]), native=True)
    assert native.valid and native.value == spec.decode(instance).value == value
