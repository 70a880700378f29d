"""``OfflineLLM``, the keyword planner of the demo and the CLI without a server, called in this process.

It is called as any ``llm_call`` is: with the OpenAI-format request the agent's formatter
makes (``{"messages": [...], "tools": [...]}``), directly and through a real ``YiemAgent``
running the built-in tools. Each keyword plan of its docstring, the replies it writes from
the tools' results and the one recovery it knows (getTime on an unknown zone) are here.
"""

from __future__ import annotations

import json
import re

import pytest

from helpers import WAIT, text_result
from localserver import LocalServer, Reply
from yiemagent import AgentTool, AssistantMessage, TextContent, run_agent, take_response
from yiemagent.formatting import assistant_message_to_openai
from yiemagent.llm import OfflineLLM

PREFIX = "(offline keyword planner, not a language model) "
HELP_ALL = (
    "I only understand a few requests: the time ('what time is it in Asia/Tokyo?'); the weather ('weather in Paris and Oslo'); "
    "my tools ('what tools do you have?'); any tool by name ('call getTime with {}')."
)


def offer(*names: str) -> list[dict]:
    """Tool definitions as the formatter writes them (OpenAI function form)."""
    return [{"type": "function", "function": {"name": n, "description": f"the {n} tool", "parameters": {"type": "object"}}} for n in names]


ALL = offer("getWeather", "getTime", "writeTool", "listTools")


def ask(text, tools=ALL) -> AssistantMessage:
    return OfflineLLM()({"messages": [{"role": "system", "content": "You are helpful assistant."}, {"role": "user", "content": text}], "tools": tools})


def calls_of(reply: AssistantMessage) -> list[tuple[str, str, dict]]:
    """(id, name, arguments) of each call the reply makes; the arguments are JSON text, decoded here."""
    return [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for block in reply.content
        if isinstance(block, dict)
        for c in block["tool_calls"]
    ]


def plan(text, tools=ALL) -> list[tuple[str, dict]]:
    return [(name, args) for _, name, args in calls_of(ask(text, tools))]


def said(reply: AssistantMessage) -> str:
    """The reply's text after the honest prefix; it must be a plain answer (no calls)."""
    assert reply.stop_reason == "stop" and len(reply.content) == 1 and isinstance(reply.content[0], TextContent)
    assert reply.content[0].text.startswith(PREFIX)
    return reply.content[0].text[len(PREFIX) :]


def result(call_id: str, content, *, is_error: bool = False, name: str = "") -> dict:
    """A tool result as the formatter writes it."""
    return {"role": "tool", "tool_call_id": call_id, "content": content, "name": name, "is_error": is_error}


# --- what it is ------------------------------------------------------------------------


def test_it_names_itself_and_every_reply_says_it_is_not_a_language_model():
    """repr, the model name on every reply, api "offline", provider "yiemagent"; a plan is a tool_use reply whose text names the calls."""
    llm = OfflineLLM()
    assert repr(llm) == "OfflineLLM()" and llm.model == "offline-keyword-planner"
    answer = ask("tell me a joke")
    assert (answer.api, answer.provider, answer.model, answer.stop_reason) == ("offline", "yiemagent", "offline-keyword-planner", "stop")
    calling = ask("what time is it?")
    assert (calling.api, calling.provider, calling.model, calling.stop_reason) == ("offline", "yiemagent", "offline-keyword-planner", "tool_use")
    assert calling.content == [
        TextContent(PREFIX + "Calling getTime."),
        {"type": "tool_calls", "tool_calls": [{"id": "offline_0_0", "type": "function", "function": {"name": "getTime", "arguments": "{}"}}]},
    ]


def test_without_a_user_message_there_is_no_question_to_answer():
    """No messages at all, or only a system prompt (even one full of keywords): it says so, and calls nothing."""
    assert said(OfflineLLM()({})) == "There is no question to answer yet."
    assert said(OfflineLLM()({"messages": [{"role": "system", "content": "weather in Paris, the time, your tools"}], "tools": ALL})) == (
        "There is no question to answer yet."
    )


def test_a_request_it_does_not_understand_gets_help_naming_only_the_offered_tools():
    """The help lists the time, the weather and the tools only when those tools are offered; calling by name always."""
    assert said(ask("tell me a joke")) == HELP_ALL
    assert said(ask("tell me a joke", tools=[])) == "I only understand a few requests: any tool by name ('call getTime with {}')."
    assert said(OfflineLLM()({"messages": [{"role": "user", "content": "hello"}]})) == (
        "I only understand a few requests: any tool by name ('call getTime with {}')."
    )
    assert said(ask("hello", tools=offer("getWeather"))) == (
        "I only understand a few requests: the weather ('weather in Paris and Oslo'); any tool by name ('call getTime with {}')."
    )
    assert said(ask("hello", tools=offer("listTools", "getTime"))) == (
        "I only understand a few requests: the time ('what time is it in Asia/Tokyo?'); my tools ('what tools do you have?'); "
        "any tool by name ('call getTime with {}')."
    )


def test_only_function_tools_of_the_request_count_as_offered():
    """A tool entry not in function form (an Anthropic server tool) is passed over, not read as a function."""
    server_tool = {"type": "web_search_20250305", "name": "web_search"}
    assert plan("what time is it?", tools=[server_tool, *offer("getTime")]) == [("getTime", {})]
    assert said(ask("what time is it?", tools=[server_tool])) == "I only understand a few requests: any tool by name ('call getTime with {}')."


# --- the keyword plans -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, cities",
    [
        ("What's the weather in Tokyo?", ["Tokyo"]),
        ("Weather for Paris!", ["Paris"]),
        ("WEATHER AT Oslo", ["Oslo"]),
        ("weather in Tokyo, Paris and Oslo", ["Tokyo", "Paris", "Oslo"]),
        ("weather in Rome & Milan,Turin AND Naples", ["Rome", "Milan", "Turin", "Naples"]),
        ("weather in Isfahan and Andorra la Vella", ["Isfahan", "Andorra la Vella"]),  # "and", "is" only as words
        ("weather in Xiamen", ["Xiamen"]),
        ("weather in Lyon, , and Nice,", ["Lyon", "Nice"]),  # empty pieces are no city
        ("weather in Bergen; also Oslo", ["Bergen"]),  # ; ends the list
        ("how is the weather today?", []),  # no "in/for/at <city>"
    ],
)
def test_weather_in_one_or_several_cities_is_one_getweather_call_per_city(text, cities):
    """"weather in/for/at" then cities separated by commas, "and" or "&"; the list ends at ? . ! ;"""
    assert plan(text, tools=offer("getWeather")) == [("getWeather", {"city": c}) for c in cities]


@pytest.mark.parametrize(
    "text, cities",
    [
        ("weather in Tokyo\nthanks!", ["Tokyo"]),
        ("weather in \tTokyo\t", ["Tokyo"]),
        ("weather for Oslo \r\nand Bergen", ["Oslo"]),
    ],
)
def test_the_cities_end_at_a_line_break_and_carry_no_whitespace(text, cities):
    """A city is sent as the user wrote it, without tabs or line breaks around it; the next line is not part of it."""
    assert plan(text, tools=offer("getWeather")) == [("getWeather", {"city": c}) for c in cities]


@pytest.mark.parametrize(
    "text, cities, time_args",
    [
        ("weather in Tokyo and the time", ["Tokyo"], {}),
        ("weather in Tokyo what is the time there", ["Tokyo"], {}),
        ("weather for Oslo, Also the time in Europe/Oslo", ["Oslo"], {"timezone": "Europe/Oslo"}),
        ("weather at Kyiv, and What TIME is it", ["Kyiv"], {}),
    ],
)
def test_words_after_the_cities_that_ask_for_more_are_no_city(text, cities, time_args):
    """A piece from "and", "what", "is", "the", "time" or "also" on (in any case) is cut off; the time is asked too."""
    assert plan(text) == [*[("getWeather", {"city": c}) for c in cities], ("getTime", time_args)]


@pytest.mark.parametrize(
    "text, arguments",
    [
        ("what time is it?", {}),
        ("What TIME is it in Asia/Tokyo?", {"timezone": "Asia/Tokyo"}),
        ("the time in America/Argentina/Buenos_Aires please", {"timezone": "America/Argentina/Buenos_Aires"}),
        ("time at Etc/GMT+9", {"timezone": "Etc/GMT+9"}),
        ("time in Mars/Olympus", {"timezone": "Mars/Olympus"}),  # any zone-shaped name: getTime says if it is unknown
    ],
)
def test_time_is_a_gettime_call_with_the_zone_when_one_is_named(text, arguments):
    assert plan(text) == [("getTime", arguments)]


@pytest.mark.parametrize("text", ["my timezone is Europe/Paris", "sometimes it rains", "a toolbox"])
def test_time_and_tools_count_only_as_whole_words(text):
    assert said(ask(text)) == HELP_ALL


@pytest.mark.parametrize("text", ["what tools do you have?", "Any TOOL for me"])
def test_tools_is_a_listtools_call(text):
    assert plan(text) == [("listTools", {})]


def test_several_requests_in_one_message_are_one_batch_numbered_in_order():
    """Weather for each city, then the time, then the tools: one turn, ids offline_<round>_<i>, the text names each call."""
    reply = ask("weather in Tokyo, Paris and Oslo, and the time in Europe/Paris? also your tools")
    assert calls_of(reply) == [
        ("offline_0_0", "getWeather", {"city": "Tokyo"}),
        ("offline_0_1", "getWeather", {"city": "Paris"}),
        ("offline_0_2", "getWeather", {"city": "Oslo"}),
        ("offline_0_3", "getTime", {"timezone": "Europe/Paris"}),
        ("offline_0_4", "listTools", {}),
    ]
    assert reply.content[0] == TextContent(PREFIX + "Calling getWeather, getWeather, getWeather, getTime, listTools.")
    assert reply.stop_reason == "tool_use"


def test_it_only_plans_calls_of_tools_the_request_offers():
    assert plan("weather in Rome and the time", tools=offer("getTime")) == [("getTime", {})]
    assert plan("weather in Rome and the time, and what tools you have", tools=offer("getWeather")) == [("getWeather", {"city": "Rome"})]
    assert said(ask("weather in Rome, the time and your tools", tools=offer("writeTool"))) == (
        "I only understand a few requests: any tool by name ('call getTime with {}')."
    )


def test_call_a_tool_by_name_with_json_arguments():
    """"call X with {json}": that call alone (keywords after it are not read), JSON over lines, any case of "call"."""
    assert plan('call getTime with {"timezone": "UTC"}') == [("getTime", {"timezone": "UTC"})]
    assert plan('Call myTool WITH {\n  "items": [1, {"a": null}],\n  "note": "the time in Asia/Tokyo"\n}', tools=offer("myTool", "getTime")) == [
        ("myTool", {"items": [1, {"a": None}], "note": "the time in Asia/Tokyo"})
    ]
    assert plan("call listTools with {} and the weather in Paris") == [("listTools", {})]


def test_call_with_arguments_that_are_not_json_calls_the_tool_with_none():
    assert plan("call getTime with {timezone: Asia/Tokyo}") == [("getTime", {})]
    assert plan('call getTime with {"timezone": "UTC",}') == [("getTime", {})]


def test_call_of_a_tool_the_request_does_not_offer_falls_back_to_the_keywords():
    assert plan('call deleteFiles with {"path": "/"}') == []
    assert said(ask('call deleteFiles with {"path": "/"}')) == HELP_ALL
    assert plan('call deleteFiles with {"path": "/"} and tell me the time') == [("getTime", {})]
    assert plan('call myTool with {"a": 1}', tools=offer("getTime")) == []


def test_a_question_given_as_content_blocks_is_read_from_its_text_blocks():
    """A user message with an image: its text parts, joined, are the question."""
    content = [
        {"type": "text", "text": "what time is it in "},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "Europe/Oslo?"},
    ]
    reply = OfflineLLM()({"messages": [{"role": "user", "content": content}], "tools": ALL})
    assert calls_of(reply) == [("offline_0_0", "getTime", {"timezone": "Europe/Oslo"})]
    assert said(OfflineLLM()({"messages": [{"role": "user", "content": None}], "tools": ALL})) == HELP_ALL


def test_a_new_question_after_a_finished_round_is_planned_afresh_in_the_next_round():
    """The last user message counts: the tool results before it belong to the previous question; the ids name round 1."""
    first = ask("what time is it?")
    messages = [
        {"role": "user", "content": "what time is it?"},
        assistant_message_to_openai(first),
        result("offline_0_0", "Current local time: 2026-12-05 12:00:00 UTC (UTC+00:00)", name="getTime"),
        {"role": "user", "content": "and what tools do you have?"},
    ]
    reply = OfflineLLM()({"messages": messages, "tools": ALL})
    assert calls_of(reply) == [("offline_1_0", "listTools", {})]


def test_a_reply_after_the_question_without_tool_results_is_followed_by_a_fresh_plan():
    """The question, then an assistant message that called nothing: no result to answer from, so it plans (round 1)."""
    messages = [{"role": "user", "content": "what time is it?"}, {"role": "assistant", "content": "Let me see."}]
    assert calls_of(OfflineLLM()({"messages": messages, "tools": ALL})) == [("offline_1_0", "getTime", {})]


# --- answering from results ------------------------------------------------------------


def answer_to(question: str, *contents, tools=ALL, errors=()) -> tuple[AssistantMessage, list[dict]]:
    """Its reply once each call it planned for ``question`` got the result in ``contents`` (in order); also the messages."""
    first = ask(question, tools)
    planned = calls_of(first)
    assert len(planned) == len(contents)
    messages = [{"role": "user", "content": question}, assistant_message_to_openai(first)]
    for (call_id, name, _), content, failed in zip(planned, contents, [i in errors for i in range(len(contents))]):
        messages.append(result(call_id, content, is_error=failed, name=name))
    return OfflineLLM()({"messages": messages, "tools": tools}), messages


def test_it_answers_with_each_result_on_a_line_in_order():
    reply, _ = answer_to("weather in Tokyo and Paris", "Weather in Tokyo: Clear sky, 22°C", "Weather in Paris: Overcast, 9°C")
    assert said(reply) == "Here is what the tools returned:\n- Weather in Tokyo: Clear sky, 22°C\n- Weather in Paris: Overcast, 9°C"


def test_a_failed_result_is_named_by_its_tool_unless_it_names_the_tool_itself():
    """The pipeline's errors start with "Tool 'x' ...": as they are; any other error text gets "<tool> failed:" before it."""
    reply, _ = answer_to(
        "weather in Tokyo and Paris, and what tools do you have",
        "the geocoding service is down",
        "Tool 'getWeather' failed: City 'Paris' was not found",
        "Tool list: getTime",
        errors=(0, 1),
    )
    assert said(reply) == (
        "Here is what the tools returned:\n"
        "- getWeather failed: the geocoding service is down\n"
        "- Tool 'getWeather' failed: City 'Paris' was not found\n"
        "- Tool list: getTime"
    )


def test_a_result_given_as_text_blocks_is_read_from_them():
    first = ask("what tools do you have?")
    blocks = [{"type": "text", "text": "Available tools:"}, {"type": "text", "text": " getTime"}]
    messages = [{"role": "user", "content": "what tools do you have?"}, assistant_message_to_openai(first), result("offline_0_0", blocks, name="listTools")]
    assert said(OfflineLLM()({"messages": messages, "tools": ALL})) == "Here is what the tools returned:\n- Available tools: getTime"


def test_a_failed_result_whose_call_is_not_known_is_named_a_tool():
    """A result for an id no call of the turn has, or for a call entry without its function: "a tool failed"."""
    messages = [
        {"role": "user", "content": "do it"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function"}]},
        result("c1", "boom", is_error=True),
        result("c9", "bang", is_error=True),
    ]
    assert said(OfflineLLM()({"messages": messages, "tools": ALL})) == "Here is what the tools returned:\n- a tool failed: boom\n- a tool failed: bang"


TOKYO_UNKNOWN = "Tool 'getTime' failed: Time zone 'Mars/Olympus' was not found in the IANA time zone database. Use a name such as 'Asia/Tokyo'"
NOT_VALID = "Tool 'getTime' failed: Time zone '/etc/passwd' is not a valid IANA time zone name (like 'Asia/Tokyo')"


@pytest.mark.parametrize("error", [TOKYO_UNKNOWN, NOT_VALID])
def test_gettime_failing_on_its_zone_is_asked_again_without_a_zone(error):
    """"was not found" or "not a valid" from a getTime call with a zone: one call of getTime with no arguments, round 1."""
    reply, _ = answer_to("what time is it in Mars/Olympus?", error, errors=(0,))
    assert calls_of(reply) == [("offline_1_0", "getTime", {})]
    assert reply.content[0] == TextContent(PREFIX + "Calling getTime.") and reply.stop_reason == "tool_use"


def test_the_zone_recovery_is_found_among_the_results_of_a_batch():
    reply, _ = answer_to("weather in Tokyo and the time in Mars/Olympus", "Weather in Tokyo: Clear sky, 22°C", TOKYO_UNKNOWN, errors=(1,))
    assert calls_of(reply) == [("offline_1_0", "getTime", {})]


def test_no_recovery_when_gettime_had_no_zone_succeeded_or_failed_otherwise_or_is_no_longer_offered():
    ok = "Current time in Asia/Tokyo: 2026-12-05 21:00:00 JST (UTC+09:00)"
    reply, _ = answer_to("what time is it in Asia/Tokyo?", ok)
    assert said(reply) == f"Here is what the tools returned:\n- {ok}"
    no_database = "Tool 'getTime' failed: No IANA time zone database is installed on this machine"
    reply, _ = answer_to("what time is it in Asia/Tokyo?", no_database, errors=(0,))
    assert said(reply) == f"Here is what the tools returned:\n- {no_database}"
    reply, _ = answer_to("what time is it?", "Tool 'getTime' failed: the zone was not found", errors=(0,))
    assert said(reply) == "Here is what the tools returned:\n- Tool 'getTime' failed: the zone was not found"
    _, messages = answer_to("what time is it in Mars/Olympus?", TOKYO_UNKNOWN, errors=(0,))
    gone = OfflineLLM()({"messages": messages, "tools": offer("getWeather", "listTools")})
    assert said(gone) == f"Here is what the tools returned:\n- {TOKYO_UNKNOWN}"


def test_another_tool_failing_on_a_zone_is_not_retried_as_gettime():
    """The recovery is getTime's own: a user's tool with a "timezone" argument that fails the same way is reported."""
    failed = "Tool 'convertTime' failed: Time zone 'Mars/Olympus' was not found"
    reply, _ = answer_to('call convertTime with {"timezone": "Mars/Olympus"}', failed, tools=offer("getTime", "convertTime"), errors=(0,))
    assert said(reply) == f"Here is what the tools returned:\n- {failed}"


def test_after_the_recovery_it_answers_with_the_error_then_the_local_time():
    """Both rounds' results, in order, with the retry said in between; no second retry."""
    reply, messages = answer_to("what time is it in Mars/Olympus?", TOKYO_UNKNOWN, errors=(0,))
    local = "Current local time: 2026-12-05 12:00:00 UTC (UTC+00:00)"
    messages += [assistant_message_to_openai(reply), result("offline_1_0", local, name="getTime")]
    final = OfflineLLM()({"messages": messages, "tools": ALL})
    assert said(final) == f"Here is what the tools returned:\n- {TOKYO_UNKNOWN}\n  so I asked again without a time zone:\n- {local}"


# --- in an agent -----------------------------------------------------------------------


def test_in_an_agent_it_calls_gettime_and_answers_from_its_result(agents):
    agent = agents(OfflineLLM(), builtin_tools=True)
    run_agent(agent, "What time is it in Asia/Tokyo?")
    response = take_response(agent, timeout=WAIT)
    assert re.fullmatch(
        re.escape(PREFIX + "Here is what the tools returned:\n- Current time in Asia/Tokyo: ") + r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d JST \(UTC\+09:00\)",
        response.text,
    )
    history = agent.history()
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[1].content[0] == TextContent(PREFIX + "Calling getTime.")
    assert (history[2].tool_call_id, history[2].tool_name, history[2].is_error) == ("offline_0_0", "getTime", False)
    assert (response.model, response.stop_reason) == ("offline-keyword-planner", "stop")


@pytest.mark.parametrize(
    "question, error",
    [
        ("What time is it in Mars/Olympus?", "Time zone 'Mars/Olympus' was not found in the IANA time zone database."),
        ('call getTime with {"timezone": "/etc/passwd"}', "Time zone '/etc/passwd' is not a valid IANA time zone name"),
    ],
)
def test_in_an_agent_an_unknown_zone_is_recovered_from_with_the_local_time(agents, question, error):
    """The demo's step 3: the error goes back to the planner, which asks for the local time and says so."""
    agent = agents(OfflineLLM(), builtin_tools=True)
    run_agent(agent, question)
    response = take_response(agent, timeout=WAIT)
    history = agent.history()
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert history[2].is_error and not history[4].is_error and history[4].tool_call_id == "offline_1_0"
    lines = response.text.split("\n")
    assert lines[0] == PREFIX + "Here is what the tools returned:"
    assert lines[1].startswith(f"- Tool 'getTime' failed: {error}")
    assert lines[2:3] == ["  so I asked again without a time zone:"] and lines[3].startswith("- Current local time: ") and len(lines) == 4


def test_in_an_agent_a_batch_of_weather_and_tools_is_one_turn(agents, monkeypatch):
    """Each city is looked up (a local server answering like Open-Meteo), listTools runs; one answer with every result."""

    def respond(request):
        if request.path == "/v1/search":
            return Reply(body={"results": [{"name": request.query["name"][0], "latitude": 1.0, "longitude": 2.0, "country": "X"}]})
        return Reply(body={"current": {"temperature_2m": 21.6, "weather_code": 3}})

    with LocalServer(respond) as server:
        monkeypatch.setenv("YIEMAGENT_GEOCODING_URL", f"{server.url}/v1")
        monkeypatch.setenv("YIEMAGENT_FORECAST_URL", f"{server.url}/v1")
        agent = agents(OfflineLLM(), builtin_tools=True)
        run_agent(agent, "weather in Tokyo & Paris, and what tools do you have?")
        response = take_response(agent, timeout=WAIT)
    history = agent.history()
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "tool", "assistant"]
    assert sorted(r.query["name"][0] for r in server.requests if r.path == "/v1/search") == ["Paris", "Tokyo"]
    lines = response.text.split("\n")
    assert lines[:3] == [PREFIX + "Here is what the tools returned:", "- Weather in Tokyo: Overcast, 22°C", "- Weather in Paris: Overcast, 22°C"]
    assert lines[3] == "- Available tools:" and "- getWeather: Weather Lookup" in response.text


def test_in_an_agent_a_users_own_tool_is_called_by_name(agents):
    seen = []

    def shout(tool_call_id, args, signal, on_partial_result):
        seen.append(args)
        return text_result(args["text"].upper() + "!")

    tool = AgentTool(
        name="shout", label="Shout", description="Say it loud.", input_schema={"type": "object", "properties": {"text": {"type": "string"}}}, execute=shout
    )
    agent = agents(OfflineLLM(), tools=[tool])
    run_agent(agent, 'call shout with {"text": "hello"}')
    response = take_response(agent, timeout=WAIT)
    assert seen == [{"text": "hello"}]
    assert response.text == PREFIX + "Here is what the tools returned:\n- HELLO!"
