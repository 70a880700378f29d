"""The command line, run as a subprocess, and the offline keyword planner."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from localserver import LocalServer, Reply
from yiemagent import AssistantMessage, TextContent, YiemAgent, run_agent, take_response
from yiemagent.llm import OfflineLLM
from cli_support import cli
from helpers import WAIT



@pytest.mark.spec("14")
def test_ask_without_endpoint_uses_the_offline_planner_and_says_so():
    """No endpoint: the offline planner answers, and the CLI says so on start; tool calls are shown live."""
    result = cli("ask", "What time is it in Asia/Tokyo?")
    assert result.returncode == 0, result.stderr
    assert "using the offline keyword planner" in result.stderr
    assert "▸ getTime" in result.stderr and "✓ getTime" in result.stderr and "llm round 1" in result.stderr
    assert "Current time in Asia/Tokyo" in result.stdout and "not a language model" in result.stdout


@pytest.mark.spec("14")
def test_ask_against_a_server_from_the_environment():
    """OPENAI_BASE_URL / YIEMAGENT_MODEL select an OpenAI-compatible server; the answer goes to stdout."""
    call = {"id": "c1", "type": "function", "function": {"name": "getTime", "arguments": "{}"}}
    replies = [
        {"choices": [{"message": {"role": "assistant", "content": "", "tool_calls": [call]}, "finish_reason": "tool_calls"}], "model": "tiny"},
        {"choices": [{"message": {"role": "assistant", "content": "It is noon."}, "finish_reason": "stop"}], "model": "tiny"},
    ]
    with LocalServer(lambda r: Reply(body=replies.pop(0))) as server:
        result = cli("--no-stream", "ask", "time?", env={"OPENAI_BASE_URL": f"{server.url}/v1", "YIEMAGENT_MODEL": "tiny", "OPENAI_API_KEY": "sk-cli-secret"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "It is noon."
    assert f"OpenAI-compatible server at {server.url}/v1, model tiny" in result.stderr and "✓ getTime" in result.stderr
    assert server.requests[0].json()["model"] == "tiny" and "sk-cli-secret" not in result.stderr + result.stdout


@pytest.mark.spec("14")
def test_ask_reports_a_failing_server_and_exits_1():
    """A server that fails: the error (naming the server) on stderr, exit status 1."""
    with LocalServer(lambda r: Reply(status=400, body={"error": {"message": "model not found"}})) as server:
        result = cli("--base-url", f"{server.url}/v1", "--model", "x", "ask", "hi")
    assert result.returncode == 1
    assert "model not found" in result.stderr and server.url in result.stderr


@pytest.mark.spec("14")
def test_chat_session_reads_lines_until_quit():
    """chat: one answer per line typed, /tools lists the tools, /quit ends."""
    result = cli("--quiet", "chat", stdin="What tools do you have?\n/tools\n/quit\n")
    assert result.returncode == 0, result.stderr
    assert "Available tools:" in result.stdout and "  writeTool: Write Tool" in result.stdout


@pytest.mark.spec("10")
def test_demo_runs_every_step_offline_and_exits_0():
    """make demo's session: round trip, parallel batch, recovered error, listTools, terminating tool; exit 0."""
    result = cli("demo")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for step in ("[1/5] a tool round trip", "[2/5] a parallel batch", "[3/5] an error fed back", "[4/5] listTools", "[5/5] a terminating tool"):
        assert step in out
    assert "so I asked again without a time zone" in out
    assert "agent (tool_use_terminated)> Tool execution completed." in out
    assert result.stderr.count("▸ getWeather") == 2 and "✗ getTime" in result.stderr


# --- OfflineLLM ------------------------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": n, "description": "", "parameters": {}}} for n in ("getWeather", "getTime", "listTools")]


def plan(text: str, tools=TOOLS) -> list[tuple[str, dict]]:
    reply = OfflineLLM()({"messages": [{"role": "user", "content": text}], "tools": tools})
    calls = [b for b in reply.content if isinstance(b, dict)]
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for b in calls for c in b["tool_calls"]]


def test_offline_planner_plans_a_batch_from_keywords():
    """Several requests in one message become several calls in one turn."""
    assert plan("weather in Tokyo, Paris and Oslo, and the time in Europe/Paris? also your tools") == [
        ("getWeather", {"city": "Tokyo"}),
        ("getWeather", {"city": "Paris"}),
        ("getWeather", {"city": "Oslo"}),
        ("getTime", {"timezone": "Europe/Paris"}),
        ("listTools", {}),
    ]


def test_offline_planner_is_honest_and_only_calls_offered_tools():
    """Its replies say what it is; it calls only the tools the request offers; explicit calls work."""
    reply = OfflineLLM()({"messages": [{"role": "user", "content": "tell me a joke"}], "tools": TOOLS})
    assert "not a language model" in reply.content[0].text and reply.stop_reason == "stop"
    assert plan("weather in Rome", tools=TOOLS[1:]) == []
    assert plan('call getTime with {"timezone": "UTC"}') == [("getTime", {"timezone": "UTC"})]


def test_offline_planner_answers_from_tool_results_in_an_agent():
    """In an agent, it answers from the tools' results after they ran."""
    with YiemAgent(llm_call=OfflineLLM(), agent_event_sink=None, builtin_tools=True) as agent:
        run_agent(agent, "what tools do you have?")
        response = take_response(agent, timeout=WAIT)
    assert isinstance(response, AssistantMessage) and "Available tools:" in response.content[0].text
    assert [m.role for m in agent.history()] == ["user", "assistant", "tool", "assistant"]
    assert isinstance(agent.history()[1].content[0], TextContent)


def test_console_script_is_installed():
    """`yiemagent` is installed as a console script beside the interpreter."""
    from pathlib import Path

    script = Path(sys.executable).parent / "yiemagent"
    assert script.exists()
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "ask" in result.stdout and "chat" in result.stdout and "demo" in result.stdout


# --- the command line's own options --------------------------------------------------------


def test_version_prints_the_installed_package_version():
    """yiemagent --version: "yiemagent <version>" on stdout (the distribution's, from importlib.metadata), exit 0, no command needed."""
    import importlib.metadata

    result = cli("--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"yiemagent {importlib.metadata.version('yiemagent')}\n", "")


OK_REPLY = {"choices": [{"message": {"role": "assistant", "content": "It is noon."}, "finish_reason": "stop"}], "model": "m"}


@pytest.mark.parametrize(
    "argv, model",
    [
        (["ask", "time?", "--model", "after", "--no-stream", "-q", "--base-url", "URL"], "after"),
        (["--model", "before", "--no-stream", "ask", "time?", "--base-url", "URL", "--timeout", "30"], "before"),
        (["--model", "before", "ask", "time?", "--model", "after", "--no-stream", "--base-url", "URL"], "after"),
    ],
)
def test_options_are_taken_after_the_command_as_before_it(argv, model):
    """yiemagent ask "q" --model m ...: an option after the command counts as before it; one given before is kept; after wins over before."""
    with LocalServer(lambda r: Reply(body=OK_REPLY)) as server:
        result = cli(*[f"{server.url}/v1" if arg == "URL" else arg for arg in argv])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "It is noon.\n"
    assert [request.json()["model"] for request in server.requests] == [model]
    assert "stream" not in server.requests[0].json() or server.requests[0].json()["stream"] is False


def test_mcp_servers_given_before_and_after_the_command_are_all_started():
    """--mcp before the command and --mcp after it: both servers' tools are offered."""
    from mcp_support import raw_server_command

    def server(name: str) -> str:
        tool = {"name": name, "description": f"answers {name}", "inputSchema": {"type": "object"}}
        return shlex.join(raw_server_command("scripted") + [json.dumps({"tools": [tool]})])

    result = cli("-q", "--mcp", server("ping"), "chat", "--mcp", server("pong"), stdin="/tools\n/quit\n")
    assert result.returncode == 0, result.stderr
    assert "  ping: ping — answers ping" in result.stdout and "  pong: pong — answers pong" in result.stdout


def test_demo_shows_the_weather_without_leaving_the_machine():
    """python -m yiemagent demo: getWeather's real HTTP requests go to the demo's local stand-in for Open-Meteo; both cities get their weather, no call fails."""
    result = cli("demo", env={"YIEMAGENT_FORECAST_URL": "http://127.0.0.1:9"})
    assert result.returncode == 0, result.stderr
    assert "- Weather in Tokyo: Clear sky, 22°C\n- Weather in Paris: Partly cloudy, 18°C\n" in result.stdout
    assert "getWeather asks a local stand-in for Open-Meteo at http://127.0.0.1:" in result.stderr
    assert result.stderr.count("✓ getWeather") == 2 and "✗ getWeather" not in result.stderr
    assert "unreachable" not in result.stdout + result.stderr and "ConnectionError" not in result.stdout + result.stderr
    assert "- getWeather: Weather Lookup" in result.stdout and "- writeTool: Write Tool" in result.stdout
