"""Prompt caching with Anthropic: AnthropicClient(cache=True) places cache_control breakpoints (docs/performance.md "Prompt caching").

Every request is sent to a real http.server on 127.0.0.1 (tests/support/anthropic_cache.py)
that reads the breakpoints as Anthropic documents them and reports usage by its cache
accounting.
"""

from __future__ import annotations

import json

import pytest

from anthropic_cache import CachingServer, billed
from helpers import make_tool, text_result
from localserver import LocalServer
from yiemagent import ToolStore, YiemAgent, ask, register_tool
from yiemagent.llm import AnthropicClient
from yiemagent.llm.anthropic import MAX_CACHE_BREAKPOINTS

SYSTEM = "You are an assistant that works through a task step by step with its tool. " * 90
SCHEMA = {"type": "object", "properties": {"step": {"type": "integer", "description": "the step to do next"}}, "required": ["step"]}


def step_store() -> ToolStore:
    store = ToolStore("steps")
    register_tool(store, make_tool("do_step", lambda call_id, args, signal, partial: text_result(f"step {args['step']} done: " + "ok " * 60), schema=SCHEMA))
    return store


def tool_loop(rounds: int, **client_options):
    """A run of ``rounds`` tool calls against the caching server; returns the server (its requests and usage) and the agent's usage."""
    server = CachingServer(rounds, "do_step")
    with LocalServer(server.respond) as http:
        client = AnthropicClient("claude-sonnet-4-5", "k", base_url=http.url, **client_options)
        with YiemAgent(llm_call=client, agent_event_sink=None, system_prompt=SYSTEM, tool_store=step_store(), max_rounds=rounds + 1) as agent:
            assert ask(agent, "Do the task.", timeout=60).text == "done"
            usage = agent.usage
    return server, usage


def marked(body):
    """Where the request's cache_control breakpoints are: ("tools", i), ("system", i), ("messages", i, j)."""
    found = [("tools", i) for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    system = body.get("system")
    found += [("system", i) for i, b in enumerate(system if isinstance(system, list) else []) if "cache_control" in b]
    for i, message in enumerate(body["messages"]):
        found += [("messages", i, j) for j, b in enumerate(message["content"]) if isinstance(b, dict) and "cache_control" in b]
    return found


def test_cache_puts_breakpoints_on_the_system_prompt_the_last_tool_and_the_newest_turn():
    """cache=True: each request carries cache_control {"type": "ephemeral"} on its last tool, its (last) system block and the last block of its newest turn, and nowhere else."""
    server, _ = tool_loop(3, cache=True)
    for body in server.bodies:
        last = len(body["messages"]) - 1
        assert marked(body) == [("tools", len(body["tools"]) - 1), ("system", 0), ("messages", last, len(body["messages"][last]["content"]) - 1)]
        assert body["system"][0]["text"] == SYSTEM.strip() or body["system"][0]["text"] == SYSTEM
        assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert server.bodies[-1]["messages"][-1]["content"][-1]["type"] == "tool_result"


def test_without_cache_no_breakpoint_is_sent():
    """The default (cache=False) sends no cache_control and the system prompt as a string, as before."""
    server, _ = tool_loop(2)
    assert all(marked(body) == [] and isinstance(body["system"], str) for body in server.bodies)


def test_breakpoints_the_options_hold_count_within_anthropics_four():
    """Breakpoints already in the caller's options (server tools marked) count: the client adds only up to four in all, tools first, then the system prompt, then the newest turn."""
    marked_tools = [{"type": "web_search_20250305", "name": f"search{i}", "cache_control": {"type": "ephemeral"}} for i in range(2)]
    server, _ = tool_loop(1, cache=True, options={"tools": marked_tools})
    for body in server.bodies:
        where = marked(body)
        assert len(where) == MAX_CACHE_BREAKPOINTS
        assert where[:3] == [("tools", 0), ("tools", 1), ("tools", len(body["tools"]) - 1)] and where[3] == ("system", 0)
    marked_tools = [{"type": "web_search_20250305", "name": f"search{i}", "cache_control": {"type": "ephemeral"}} for i in range(4)]
    server, _ = tool_loop(1, cache=True, options={"tools": marked_tools})
    assert all(len(marked(body)) == MAX_CACHE_BREAKPOINTS and isinstance(body["system"], str) for body in server.bodies)


@pytest.mark.parametrize("rounds", [50])
def test_a_tool_loop_reads_its_prefix_from_the_cache_and_is_billed_less(rounds):
    """A 50-round tool loop with cache=True: from the second request on, the prefix is read from the cache (usage.cache_read_tokens, decision 13), and the input billed is a fraction of the same loop without it."""
    cached_server, cached_usage = tool_loop(rounds, cache=True)
    plain_server, plain_usage = tool_loop(rounds)
    assert all(u["cache_read_input_tokens"] > 0 for u in cached_server.usages[1:])
    assert cached_usage.cache_read_tokens == sum(u["cache_read_input_tokens"] for u in cached_server.usages) > 0
    assert cached_usage.input_tokens == plain_usage.input_tokens  # decision 13: every prompt token, cached or not
    assert plain_usage.cache_read_tokens == 0 and plain_usage.cache_write_tokens == 0
    assert billed(cached_server.usages) < billed(plain_server.usages) / 3
    assert json.dumps(cached_server.bodies[-1]).count("cache_control") <= MAX_CACHE_BREAKPOINTS
