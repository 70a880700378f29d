"""What the tests share: where things are, how long a wait may take, and builders of tools, agents, contexts, an event recorder."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

import jsonschema

from yiemagent.events import EventEmitter
from yiemagent.formatting import format_msg_for_llm, prepare_context
from yiemagent.types import AgentState
from yiemagent import (
    AgentContext,
    AgentLoopConfig,
    AgentTool,
    AgentToolResult,
    AssistantMessage,
    TextContent,
    ToolResultMessage,
    ToolStore,
    YiemAgent,
    register_tool,
    run_agent,
    take_response,
)

ROOT = Path(__file__).resolve().parents[2]
"""The repository."""
FIXTURES = ROOT / "tests" / "fixtures"
"""Real wire data recorded from LLM servers (tests/fixtures/README.md)."""


def openai_request_validator() -> jsonschema.Draft202012Validator:
    """A validator of chat-completions requests, from OpenAI's own schema (tests/fixtures)."""
    doc = json.loads((FIXTURES / "openai-chat-completions.schema.json").read_text())
    return jsonschema.Draft202012Validator({"$ref": "#/$defs/CreateChatCompletionRequest", "$defs": doc["$defs"]})


WAIT = 20
"""Seconds any single blocking wait in a test may take before the test fails; never reached when things work."""


def make_agent(llm: Any, *tools: AgentTool, sink: Any = None, **kwargs: Any) -> YiemAgent:
    """An agent whose store holds exactly ``tools`` (plus the built-ins asked for with ``builtin_tools=``); the caller shuts it down."""
    store = ToolStore("test")
    for tool in tools:
        register_tool(store, tool)
    return YiemAgent(llm_call=llm, agent_event_sink=sink, tool_store=store, **kwargs)

def take_waiting(agent: YiemAgent, responses: list) -> bool:
    """Take a response already on the output channel into ``responses``, without waiting; False when there is none."""
    try:
        responses.append(take_response(agent, timeout=0))
    except TimeoutError:
        return False
    return True


def drain_until_idle(agent: YiemAgent, responses: list) -> bool:
    """Take responses into ``responses`` until the agent is idle with nothing queued; False if that never happens within WAIT."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if take_waiting(agent, responses):
            continue
        if agent.wait_until_idle(0.05) and agent.output_channel.empty():
            return True
    return False


SCHEMA_CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "minLength": 1}},
    "required": ["city"],
}


def text_result(text: str, *, terminate: bool = False, details: Optional[dict] = None) -> AgentToolResult:
    return AgentToolResult([TextContent(text)], details or {}, None, terminate)


def make_tool(
    name: str,
    execute: Optional[Callable[..., Any]] = None,
    *,
    schema: Optional[dict] = None,
    parallel: bool = False,
    **kwargs: Any,
) -> AgentTool:
    """A tool that echoes its arguments unless given another ``execute``."""

    def echo(tool_call_id, args, signal, on_partial_result):
        return text_result(f"{name}:{sorted(args.items())}")

    return AgentTool(
        name=name,
        label=name.title(),
        description=f"test tool {name}",
        input_schema=schema if schema is not None else {"type": "object"},
        execute=execute or echo,
        parallel_tool_execute=parallel,
        **kwargs,
    )


def blocking_tool(name: str, wait: float = 10) -> tuple[AgentTool, threading.Event, threading.Event]:
    """A tool that sets ``entered``, waits (up to ``wait`` s) for ``release``, then returns "done"."""
    entered, release = threading.Event(), threading.Event()

    def execute(*args):
        entered.set()
        release.wait(wait)
        return text_result("done")

    return make_tool(name, execute), entered, release


def context_with(*tools: AgentTool) -> AgentContext:
    store = ToolStore("test")
    for tool in tools:
        register_tool(store, tool)
    return AgentContext("You are a test.", [], store.tools)


ASSISTANT = AssistantMessage([TextContent("calling tools")])
SEQUENTIAL = AgentLoopConfig()
PARALLEL = AgentLoopConfig(tool_execution="parallel")


class EventRecorder:
    """An event sink that records events and notices overlapping calls."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self._inside = 0
        self.overlaps = 0
        self._guard = threading.Lock()  # guards _inside and overlaps

    def __call__(self, event: Any) -> None:
        with self._guard:
            self._inside += 1
            if self._inside > 1:
                self.overlaps += 1
        try:
            self.events.append(event)
        finally:
            with self._guard:
                self._inside -= 1

    def of_type(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    def for_call(self, call_id: str) -> list[Any]:
        return [e for e in self.events if getattr(e, "tool_call_id", None) == call_id]


class LingeringSink(EventRecorder):
    """An event sink that stays inside its first call of a ``kind`` event until a second call enters, or ``linger`` s pass.

    A quick sink lets two threads through one after the other by luck; this one holds the
    door open, so two threads that emit at once meet in it unless something serialises them
    (decision 8). ``met`` is set when a call entered while another was inside.
    """

    def __init__(self, kind: type, linger: float = 2.0) -> None:
        super().__init__()
        self.kind = kind
        self.linger = linger
        self.met = threading.Event()  # a second call entered while one was inside
        self._lingered = False  # guarded by _guard: only the first call of ``kind`` lingers

    def __call__(self, event: Any) -> None:
        with self._guard:
            self._inside += 1
            if self._inside > 1:
                self.overlaps += 1
                self.met.set()
            linger = isinstance(event, self.kind) and not self._lingered
            self._lingered = self._lingered or linger
        try:
            if linger:
                self.met.wait(self.linger)
            self.events.append(event)
        finally:
            with self._guard:
                self._inside -= 1


def run_tool(tool: AgentTool, args: dict, partials: Optional[list] = None):
    """Run one tool as the agent does (EXECUTE phase) and return the ExecutedOutcome."""
    from yiemagent import AgentToolCall, PreparedToolCall, execute_prepared_tool_call
    from yiemagent.events import EventEmitter

    def sink(event):
        if partials is not None:
            partials.append(event.partial_result)

    return execute_prepared_tool_call(PreparedToolCall(tool, AgentToolCall("call-1", tool.name, args), args), None, EventEmitter(sink))


def check_wire(formatted: dict) -> None:
    """Raise ValueError where a strict LLM server would reject ``formatted`` (decision 15).

    Strict JSON (no NaN), encodable as UTF-8, every tool call of an assistant message
    answered by exactly one tool message before the next user or assistant message, ids
    unique within a reply, no tool message without its call.
    """
    import json

    json.dumps(formatted, allow_nan=False, ensure_ascii=False).encode("utf-8")
    open_calls: set = set()
    for message in formatted["messages"]:
        role = message["role"]
        if role == "tool":
            if message["tool_call_id"] not in open_calls:
                raise ValueError(f"tool message answers no open call: {message['tool_call_id']!r}")
            open_calls.discard(message["tool_call_id"])
            continue
        if open_calls:
            raise ValueError(f"calls without results: {sorted(open_calls)}")
        if role == "assistant":
            ids = [c["id"] for c in message.get("tool_calls", [])]
            if len(ids) != len(set(ids)):
                raise ValueError(f"duplicate tool-call ids in one reply: {ids}")
            for call in message.get("tool_calls", []):
                if not isinstance(json.loads(call["function"]["arguments"]), dict):
                    raise ValueError("arguments are not a JSON object")
            open_calls = set(ids)
    if open_calls:
        raise ValueError(f"calls without results: {sorted(open_calls)}")


class StrictLLM:
    """An ``llm_call`` that checks each request as a strict server would, then answers from a script.

    Each script entry is an ``AssistantMessage`` (or anything: it is returned as it is),
    an exception to raise, or a callable ``formatted -> reply``. An exhausted script
    answers "done". Thread safety: ``_lock`` guards ``_script`` and ``requests``.
    """

    def __init__(self, *script: Any) -> None:
        self._lock = threading.Lock()  # guards _script and requests
        self._script = list(script)
        self.requests: list = []

    def add(self, *replies: Any) -> None:
        with self._lock:
            self._script.extend(replies)

    def __call__(self, formatted: dict) -> Any:
        check_wire(formatted)
        with self._lock:
            self.requests.append(formatted)
            reply = self._script.pop(0) if self._script else AssistantMessage([TextContent("done")], stop_reason="stop")
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            return reply(formatted)
        return reply


def gated_llm(*script: Any) -> tuple[Any, threading.Event, threading.Event]:
    """A ScriptedLLM whose first reply ("slow") waits for ``release``; ``started`` is set when that call begins."""
    from yiemagent.llm import ScriptedLLM

    started, release = threading.Event(), threading.Event()

    def slow(formatted):
        started.set()
        release.wait(WAIT)
        return AssistantMessage([TextContent("slow")], stop_reason="stop")

    return ScriptedLLM([slow, *script]), started, release


def calls_reply(*calls: Any) -> AssistantMessage:
    """A reply whose one ``tool_calls`` block holds ``calls`` as given (raw dicts, any shape)."""
    return AssistantMessage([{"type": "tool_calls", "tool_calls": list(calls)}], stop_reason="tool_use")


def call(call_id: Any, name: Any, arguments: Any) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


class BareHost:
    """The smallest RunHost: a run needs nothing else of its agent."""

    def __init__(self, llm, queued, closing=False):
        self.state = AgentState()
        self.llm_call = llm
        self.prepare_context = prepare_context
        self.format_msg_for_llm = format_msg_for_llm
        self.emit = EventEmitter(None)
        self.closing = closing
        self._queued = list(queued)
        self.appended = []
        self._config = AgentLoopConfig()
        self.max_rounds = None
        self.usage_limits = None
        self.usage = []

    def loop_config(self):
        return self._config

    def take_input(self):
        taken, self._queued = self._queued, []
        return taken

    def append(self, message):
        self.appended.append(message)
        self.state.messages.append(message)

    def history(self):
        return list(self.state.messages)

    def ring(self):
        pass

    def take_added(self):
        return []

    def take_session_failure(self):
        return None

    def record_usage(self, usage):
        self.usage.append(usage)


class ResultFailsOnceHost(BareHost):
    """A BareHost whose first append of a tool result raises: a bug that escapes the run mid-batch."""

    failed = False

    def append(self, message):
        if isinstance(message, ToolResultMessage) and not self.failed:
            self.failed = True
            raise RuntimeError("history store failed")
        super().append(message)


def planner(formatted):
    """A deterministic LLM: a user message ending in an even digit asks for tools; anything else gets text."""
    last = formatted["messages"][-1]
    if last["role"] == "user" and last["content"][-1:] in "02468":
        n = last["content"]
        calls = [{"id": f"{n}-{i}", "function": {"name": "echo", "arguments": {"i": i}}} for i in range(2)]
        return AssistantMessage([{"type": "tool_calls", "tool_calls": calls}], stop_reason="tool_use")
    return AssistantMessage([TextContent(f"reply to {last['role']}")], stop_reason="stop")


def check_a_cut_reply_is_answered_not_run(client: Any) -> None:
    """An agent on ``client``, whose next reply is cut at its limit with a call of the tool "json" and whose reply after
    that says "re-issued": the call is not run, and it is answered with the error result asking for it again (decision 10)."""
    ran: list[Any] = []
    store = ToolStore("cut")
    register_tool(store, make_tool("json", lambda call_id, args, *rest: ran.append(args) or text_result("done"), schema={"type": "object"}))
    with YiemAgent(llm_call=client, agent_event_sink=None, tool_store=store) as agent:
        run_agent(agent, "go")
        response = take_response(agent, timeout=WAIT)
    assert ran == [] and response.content[0].text == "re-issued"
    [result] = [m for m in agent.history() if m.role == "tool"]
    assert result.is_error and "cut off by the token limit" in result.content[0].text
