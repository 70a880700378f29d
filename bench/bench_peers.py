"""`make bench`: three workloads through yiemagent and through peer frameworks, each beside its plain-loop floor.

docs/performance.md "Against other frameworks". The workloads:

- W1: an agent run in which a scripted model asks one tool call per round (ROUNDS rounds,
  then a text answer); the tool adds two integers; the arguments come as JSON text, as a
  server sends them. CPU time of the whole process (``time.process_time``: every thread)
  per tool call, in µs. Floor: a plain loop doing the same work without a framework: the
  scripted "model" gives one call per round, ``json.loads`` of its arguments, the function
  called, the result appended to a list.
- W2: an agent run in which the model asks 32 calls of a tool that sleeps 0.1 s, all in one
  reply, then answers. Wall time of the run / 0.1 s. Floor: 32 threads started and joined,
  each sleeping 0.1 s. A sync tool (``time.sleep``) everywhere, and an async one
  (``asyncio.sleep``) where the framework takes ``async def`` tools.
- W11: a session of 400 stored messages (user, a reply calling a tool, its result, a text
  reply, 100 times) opened and read back, µs per message. Floor: ``SELECT`` + ``json.loads``
  of yiemagent's own rows.

"bound" is not a framework: it is W1 and W1 long done by the steps any conforming run of
yiemagent's API takes, each one call and nothing around them (docs/performance.md "The
design's bound"): per run, the user message handed to another thread and the response handed
back (spec §5: the run is not the caller's); per round, the context's own copy of the history
(§14 prepareContext) and a new request of its wires and the tool's definition (§14
formatMsgForLLM), the scripted model's reply as yiemagent's W1 gets it, checked and its calls
read (decision 15, §7: ``normalize_reply``), the arguments checked against the tool's schema
(§8.1) and copied for the tool, the ``tool()`` tool run (§8.2) and its result checked, its
``ToolResultMessage`` made and checked (§11, decision 15), both messages kept in the history
and their read-only wires made. Where the API's check has no cheaper form, the step is the
library's own function. Left out: the run's bookkeeping, hooks, events, caps, the batch's and
the pipeline's dispatch: yiemagent's distance above the bound is what those layers cost.

Each framework runs in a worker process of its own (``--worker NAME``): yiemagent and the
floor in this interpreter, the peers in the virtualenv ``make bench`` makes for them
(``.venv-peers``: smolagents, pydantic-ai-slim, openai-agents, from PyPI), each driven
offline by a scripted model (smolagents: a ``Model`` subclass; pydantic-ai: ``FunctionModel``;
openai-agents: a ``Model`` subclass, tracing off). The workers are warmed up, then asked
for one sample each in turn, workload by workload, the order of the frameworks rotated
each repetition (REPEATS of them): load on the machine weighs on all alike. A framework that
cannot be installed or driven is named in the table with why, never left out silently.
Nothing is asserted: a benchmark informs, the tests prove behaviour.

    python bench/bench_peers.py [--repeats 5] [--peers-python .venv-peers/bin/python]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = 10  # W1: tool rounds per run
W1_RUNS = 10  # W1: runs per sample
LONG_ROUNDS, LONG_RUNS = 50, 2  # "W1 long": the run's own cost shared by more calls, a longer history each round
WIDTH, NAP_S = 32, 0.1  # W2
PAIRS = 100  # W11: 4 messages each
W11_READS = 10  # W11: reads per sample
ARGS_JSON = '{"a": 1, "b": 2}'
WORKLOADS = ("W1", "W1 long", "W2", "W2 async", "W11")
FRAMEWORKS = ("floor", "bound", "yiemagent", "smolagents", "pydantic-ai", "openai-agents")
PEERS = ("smolagents", "pydantic-ai", "openai-agents")


CALLS = {"add": 0, "nap": 0}  # the tools' calls, counted: the warm-up checks every framework really ran them
COUNTING = threading.Lock()  # guards CALLS (W2's tools run on many threads)


def add(a: int, b: int) -> int:
    """Add two integers."""
    with COUNTING:
        CALLS["add"] += 1
    return a + b


def napped() -> str:
    """What every framework's W2 tool does after its 0.1 s sleep."""
    with COUNTING:
        CALLS["nap"] += 1
    return "ok"


def nap() -> str:
    """Sleep 0.1 s."""
    time.sleep(NAP_S)
    return napped()


async def nap_async() -> str:
    """Sleep 0.1 s."""
    await asyncio.sleep(NAP_S)
    return napped()


def cpu_per(fn: Callable[[], None], runs: int, count: int) -> float:
    """CPU time of the whole process for ``runs`` calls of ``fn``, in µs per ``count``."""
    start = time.process_time()
    for _ in range(runs):
        fn()
    return (time.process_time() - start) / count * 1e6


def wall_over_nap(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) / NAP_S


def agent_workloads(run: Callable[[Any], None], adder: Any, long_adder: Any, nappers: Any, async_nappers: Any = None,
                    w11_read: Callable[[], None] | None = None) -> dict[str, Callable[[], float]]:
    """A framework's workloads, from how it runs an agent and its agents for each (None: it has no such thing)."""
    measures = {
        "W1": lambda: cpu_per(lambda: run(adder), W1_RUNS, W1_RUNS * ROUNDS),
        "W1 long": lambda: cpu_per(lambda: run(long_adder), LONG_RUNS, LONG_RUNS * LONG_ROUNDS),
        "W2": lambda: wall_over_nap(lambda: run(nappers)),
    }
    if async_nappers is not None:
        measures["W2 async"] = lambda: wall_over_nap(lambda: run(async_nappers))
    if w11_read is not None:
        measures["W11"] = lambda: cpu_per(w11_read, W11_READS, W11_READS * 4 * PAIRS)
    return measures


def conversation() -> list[tuple[str, int]]:
    """The 400 stored messages, as (kind, number): the same conversation for every framework."""
    return [(kind, i) for i in range(PAIRS) for kind in ("user", "call", "result", "answer")]


# --- the floor: plain Python, no framework -----------------------------------------------


def floor_workloads(db: Path) -> dict[str, Callable[[], float]]:
    def scripted(messages: list, round_: int, call: bool) -> dict:
        if call:
            return {"role": "assistant", "tool_calls": [{"id": f"c{round_}", "function": {"name": "add", "arguments": ARGS_JSON}}]}
        return {"role": "assistant", "content": "done"}

    tools = {"add": add}

    def w1_run(rounds: int) -> None:
        messages: list = [{"role": "user", "content": "go"}]
        for round_ in range(rounds + 1):
            reply = scripted(messages, round_, round_ < rounds)
            messages.append(reply)
            for call in reply.get("tool_calls", ()):
                result = tools[call["function"]["name"]](**json.loads(call["function"]["arguments"]))
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": str(result)})

    def w2() -> None:
        threads = [threading.Thread(target=time.sleep, args=(NAP_S,)) for _ in range(WIDTH)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    import sqlite3
    from contextlib import closing

    yiemagent_db(db)

    def w11_read() -> None:
        with closing(sqlite3.connect(db)) as conn:
            [json.loads(body) for (body,) in conn.execute("SELECT body FROM yiemagent_messages WHERE session_id = ? ORDER BY id", ("bench",))]

    return {
        "W1": lambda: cpu_per(lambda: w1_run(ROUNDS), W1_RUNS, W1_RUNS * ROUNDS),
        "W1 long": lambda: cpu_per(lambda: w1_run(LONG_ROUNDS), LONG_RUNS, LONG_RUNS * LONG_ROUNDS),
        "W2": lambda: wall_over_nap(w2),
        "W11": lambda: cpu_per(w11_read, W11_READS, W11_READS * 4 * PAIRS),
    }


# --- the design's bound: what W1 needs in yiemagent's design, without the library's layers --


def bound_workloads(db: Path) -> dict[str, Callable[[], float]]:
    import queue

    from yiemagent import AgentContext, AssistantMessage, TextContent, ToolResultMessage, UserMessage, tool
    from yiemagent._bounds import json_copy
    from yiemagent._format_cache import FrozenDict, History, snapshot
    from yiemagent.formatting import tool_to_openai
    from yiemagent.llm.scripted import tool_call_reply
    from yiemagent.normalize import normalize_reply, normalize_tool_result
    from yiemagent.pipeline import _check_result, schema_admits

    adder = tool(add)
    schema, tools = adder.input_schema, {"add": adder}
    handed, back = queue.SimpleQueue(), queue.SimpleQueue()

    def run_thread() -> None:  # spec §5: the run is another thread's; it takes the input and hands the response back
        while (item := handed.get()) is not None:
            back.put(item)

    threading.Thread(target=run_thread, daemon=True).start()

    def w1_run(rounds: int) -> None:
        handed.put(UserMessage([TextContent("go")]))
        history = History([back.get()])
        wires: list = [FrozenDict(role="user", content="go")]
        for round_ in range(rounds + 1):
            ctx = AgentContext("", snapshot(history), tools)  # spec §14 prepareContext: the round's own list
            sent = {"messages": wires[:], "tools": [tool_to_openai(t) for t in ctx.tools.values()]}  # §14 formatMsgForLLM: a new request
            if round_ == rounds:
                history.append(normalize_reply(AssistantMessage([TextContent("done")], stop_reason="stop")).message)
                break
            checked = normalize_reply(tool_call_reply((f"c{round_}", "add", ARGS_JSON)))  # decision 15; §7's calls, each argument parsed once
            call = checked.calls[0]
            if not schema_admits(call.arguments, schema):  # §8.1, decision 4
                raise AssertionError(call.arguments)
            result = adder.execute(call.id, json_copy(call.arguments), None, None)  # §8.2, on a copy of the arguments
            if _check_result(adder, result) is not None:
                raise AssertionError(result)
            message = normalize_tool_result(ToolResultMessage(call.id, "add", result.content, result.details))  # §11, decision 15
            history += (checked.message, message)
            raw = checked.message.content[-1]["tool_calls"][0]["function"]["arguments"]
            wires += (FrozenDict(role="assistant", content="", tool_calls=[FrozenDict(id=call.id, type="function", function=FrozenDict(name="add", arguments=raw))]),
                      FrozenDict(role="tool", tool_call_id=call.id, content=message.content[0].text, name="add", is_error=False))
        assert len(sent["messages"]) == 2 * rounds + 1  # the last request held the question and every round's two wires

    return {
        "W1": lambda: cpu_per(lambda: w1_run(ROUNDS), W1_RUNS, W1_RUNS * ROUNDS),
        "W1 long": lambda: cpu_per(lambda: w1_run(LONG_ROUNDS), LONG_RUNS, LONG_RUNS * LONG_ROUNDS),
    }


# --- yiemagent ---------------------------------------------------------------------------


def yiemagent_db(db: Path) -> None:
    """The 400 messages in an SQLiteSession at ``db`` (the floor reads the same rows)."""
    from yiemagent import AssistantMessage, SQLiteSession, TextContent, ToolResultMessage, UserMessage
    from yiemagent.llm.scripted import tool_call_reply

    if db.exists():
        return
    with SQLiteSession(db, "bench", synchronous="OFF") as session:
        for kind, i in conversation():
            if kind == "user":
                session.append(UserMessage([TextContent(f"question {i}: what is double {i}?")]))
            elif kind == "call":
                session.append(tool_call_reply((f"call_{i}", "double", {"x": i})))
            elif kind == "result":
                session.append(ToolResultMessage(f"call_{i}", "double", [TextContent(str(2 * i))], {"x": i}))
            else:
                session.append(AssistantMessage([TextContent(f"It is {2 * i}.")], stop_reason="stop"))


def yiemagent_workloads(db: Path) -> dict[str, Callable[[], float]]:
    from yiemagent import AssistantMessage, SQLiteSession, TextContent, YiemAgent, register_tool, run_agent, take_response, tool
    from yiemagent.llm.scripted import tool_call_reply

    def script(per_run: int, reply: Callable[[int], AssistantMessage]) -> Callable[[dict], AssistantMessage]:
        count = iter(range(10**9))

        def llm(formatted: dict) -> AssistantMessage:
            n = next(count) % (per_run + 1)
            if n < per_run:
                return reply(n)
            return AssistantMessage([TextContent("done")], stop_reason="stop")

        return llm

    def agent(llm: Callable, *tools: Any) -> YiemAgent:
        made = YiemAgent(llm_call=llm, agent_event_sink=None, builtin_tools=False, parallel_tool_execute=True, max_rounds=LONG_ROUNDS + 2)
        for t in tools:
            register_tool(made.tool_store, t)
        return made

    def run(made: YiemAgent) -> None:
        run_agent(made, "go")
        take_response(made, timeout=60)
        made.wait_until_idle(60)
        made.state.messages.clear()

    adder, long_adder = (agent(script(rounds, lambda n: tool_call_reply((f"c{n}", "add", ARGS_JSON))), tool(add)) for rounds in (ROUNDS, LONG_ROUNDS))

    wide = lambda n: tool_call_reply(*[(f"c{i}", "nap", "{}") for i in range(WIDTH)])  # noqa: E731
    nappers = agent(script(1, wide), tool(parallel=True)(nap))
    async_nappers = agent(script(1, wide), tool(name="nap", parallel=True)(nap_async))
    yiemagent_db(db)

    def w11_read() -> None:
        with SQLiteSession(db, "bench") as session:
            assert len(session.messages()) == 4 * PAIRS

    return agent_workloads(run, adder, long_adder, nappers, async_nappers, w11_read)


# --- smolagents ---------------------------------------------------------------------------


def smolagents_workloads(db: Path) -> dict[str, Callable[[], float]]:
    from smolagents import Model, ToolCallingAgent
    from smolagents import tool as smol_tool
    from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole
    from smolagents.monitoring import LogLevel

    def calls(*pairs: tuple[str, str, str]) -> ChatMessage:
        made = [ChatMessageToolCall(ChatMessageToolCallFunction(name=name, arguments=args), id=call_id, type="function") for call_id, name, args in pairs]
        return ChatMessage(role=MessageRole.ASSISTANT, content=None, tool_calls=made)

    class Scripted(Model):
        def __init__(self, per_run: int, reply: Callable[[int], ChatMessage]) -> None:
            super().__init__(model_id="scripted")
            self.per_run, self.reply, self.count = per_run, reply, 0

        def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs) -> ChatMessage:
            n, self.count = self.count % (self.per_run + 1), self.count + 1
            if n < self.per_run:
                return self.reply(n)
            return calls((f"f{self.count}", "final_answer", '{"answer": "done"}'))

    @smol_tool
    def add_tool(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first.
            b: the second.
        """
        return add(a, b)

    add_tool.name = "add"

    def agent(model: Model, tool: Any) -> ToolCallingAgent:
        return ToolCallingAgent(tools=[tool], model=model, max_steps=LONG_ROUNDS + 2, verbosity_level=LogLevel.OFF, max_tool_threads=WIDTH)

    adder, long_adder = (agent(Scripted(rounds, lambda n: calls((f"c{n}", "add", ARGS_JSON))), add_tool) for rounds in (ROUNDS, LONG_ROUNDS))
    nappers = agent(Scripted(1, lambda n: calls(*[(f"c{i}", "nap", "{}") for i in range(WIDTH)])), smol_tool(nap))

    def run(made: ToolCallingAgent) -> None:
        assert made.run("go", reset=True) == "done"

    return agent_workloads(run, adder, long_adder, nappers)


# --- pydantic-ai --------------------------------------------------------------------------


def pydantic_ai_workloads(db: Path) -> dict[str, Callable[[], float]]:
    from pydantic_ai import Agent, Tool, UsageLimits
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def script(per_run: int, reply: Callable[[int], list]) -> FunctionModel:
        count = iter(range(10**9))

        def respond(messages, info) -> ModelResponse:
            n = next(count) % (per_run + 1)
            return ModelResponse(parts=reply(n) if n < per_run else [TextPart("done")])

        return FunctionModel(respond)

    adder, long_adder = (Agent(script(rounds, lambda n: [ToolCallPart("add", ARGS_JSON, f"c{n}")]), tools=[add]) for rounds in (ROUNDS, LONG_ROUNDS))
    wide = lambda n: [ToolCallPart("nap", "{}", f"c{i}") for i in range(WIDTH)]  # noqa: E731

    nappers = Agent(script(1, wide), tools=[nap])
    async_nappers = Agent(script(1, wide), tools=[Tool(nap_async, name="nap")])

    def run(made: Agent) -> None:
        assert made.run_sync("go", usage_limits=UsageLimits(request_limit=LONG_ROUNDS + 2)).output == "done"

    return agent_workloads(run, adder, long_adder, nappers, async_nappers)


# --- openai-agents ------------------------------------------------------------------------


def openai_agents_workloads(db: Path) -> dict[str, Callable[[], float]]:
    from agents import Agent, Model, ModelResponse, Runner, SQLiteSession, Usage, function_tool, set_tracing_disabled
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    set_tracing_disabled(True)

    class Scripted(Model):
        def __init__(self, per_run: int, reply: Callable[[int], list]) -> None:
            self.per_run, self.reply, self.count = per_run, reply, 0

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            n, self.count = self.count % (self.per_run + 1), self.count + 1
            if n < self.per_run:
                output = self.reply(n)
            else:
                text = ResponseOutputText(text="done", type="output_text", annotations=[])
                output = [ResponseOutputMessage(id=f"m{self.count}", content=[text], role="assistant", status="completed", type="message")]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the benchmark does not stream")

    def call(call_id: str, name: str, args: str) -> ResponseFunctionToolCall:
        return ResponseFunctionToolCall(arguments=args, call_id=call_id, name=name, type="function_call", id=f"fc_{call_id}")

    wide = lambda n: [call(f"c{i}", "nap", "{}") for i in range(WIDTH)]  # noqa: E731
    adder, long_adder = (Agent(name="adder", model=Scripted(rounds, lambda n: [call(f"c{n}", "add", ARGS_JSON)]), tools=[function_tool(add)]) for rounds in (ROUNDS, LONG_ROUNDS))
    nappers = Agent(name="nappers", model=Scripted(1, wide), tools=[function_tool(nap)])
    async_nappers = Agent(name="nappers", model=Scripted(1, wide), tools=[function_tool(nap_async, name_override="nap")])

    def run(made: Agent) -> None:
        assert Runner.run_sync(made, "go", max_turns=LONG_ROUNDS + 2).final_output == "done"

    loop = asyncio.new_event_loop()
    path = db.with_name("openai-agents.db")
    if not path.exists():
        items: list[Any] = []
        for kind, i in conversation():
            if kind == "user":
                items.append({"role": "user", "content": f"question {i}: what is double {i}?"})
            elif kind == "call":
                items.append({"type": "function_call", "call_id": f"call_{i}", "name": "double", "arguments": json.dumps({"x": i})})
            elif kind == "result":
                items.append({"type": "function_call_output", "call_id": f"call_{i}", "output": str(2 * i)})
            else:
                items.append({"id": f"msg_{i}", "type": "message", "role": "assistant", "status": "completed",
                              "content": [{"type": "output_text", "text": f"It is {2 * i}.", "annotations": []}]})
        writer = SQLiteSession("bench", path)
        loop.run_until_complete(writer.add_items(items))
        writer.close()

    def w11_read() -> None:
        session = SQLiteSession("bench", path)
        assert len(loop.run_until_complete(session.get_items())) == 4 * PAIRS
        session.close()

    return agent_workloads(run, adder, long_adder, nappers, async_nappers, w11_read)


SETUPS = {
    "floor": floor_workloads,
    "bound": bound_workloads,
    "yiemagent": yiemagent_workloads,
    "smolagents": smolagents_workloads,
    "pydantic-ai": pydantic_ai_workloads,
    "openai-agents": openai_agents_workloads,
}
MISSING = {  # what a framework has no counterpart of (said in the table, not measured)
    ("smolagents", "W2 async"): "no async tools",
    ("smolagents", "W11"): "no session store",
    ("pydantic-ai", "W11"): "no session store",
    ("floor", "W2 async"): "the floor is W2's",
    ("bound", "W2"): "W1 only",
    ("bound", "W2 async"): "W1 only",
    ("bound", "W11"): "W1 only",
}


def worker(name: str, db: Path) -> None:
    """Answer one JSON line per workload name read from stdin: ``{"value": ...}`` or ``{"error": ...}``."""
    out = sys.stdout
    sys.stdout = sys.stderr  # a framework that prints must not garble the answers
    try:
        workloads = SETUPS[name](db)
        expected = {"W1": ("add", W1_RUNS * ROUNDS), "W1 long": ("add", LONG_RUNS * LONG_ROUNDS), "W2": ("nap", WIDTH), "W2 async": ("nap", WIDTH)}
        for workload, measure in workloads.items():  # warm-up: imports, caches, the first threads
            before = dict(CALLS)
            measure()
            tool, count = expected.get(workload, ("", 0))
            if name != "floor" and tool and CALLS[tool] - before[tool] != count:
                raise RuntimeError(f"{workload} ran its tool {CALLS[tool] - before[tool]} times, not {count}")
        answer: dict[str, Any] = {"ready": sorted(workloads)}
    except Exception as exc:  # the orchestrator says why in the table
        answer = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    print(json.dumps(answer), file=out, flush=True)
    if "error" in answer:
        return
    for line in sys.stdin:
        try:
            answer = {"value": workloads[line.strip()]()}
        except Exception as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        print(json.dumps(answer), file=out, flush=True)


class Worker:
    """A framework's worker process, spoken to one line at a time."""

    def __init__(self, name: str, python: str, db: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        self.name = name
        self.process = subprocess.Popen(
            [python, __file__, "--worker", name, "--db", str(db)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
        )
        self.ready, self.error = self._answer(), ""
        if "error" in self.ready:
            self.error = self.ready["error"]

    def _answer(self) -> dict:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        return json.loads(line) if line else {"error": f"the worker exited ({self.process.wait()})"}

    def measure(self, workload: str) -> dict:
        assert self.process.stdin is not None
        self.process.stdin.write(workload + "\n")
        self.process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def peers_python(given: str | None) -> tuple[str | None, str]:
    path = Path(given) if given else ROOT / ".venv-peers" / "bin" / "python"
    if path.exists():
        return str(path), ""
    return None, f"no {path} (make bench makes it: pip install smolagents pydantic-ai-slim openai-agents)"


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):8.2f} [{min(values):.2f}-{max(values):.2f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--peers-python", default=os.environ.get("PEERS_PYTHON"))
    parser.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, Path(args.db))
        return 0
    peer_python, no_peers = peers_python(args.peers_python)
    by_repeat: dict[tuple[str, str], dict[int, float]] = {}  # each sample by its repetition: ratios of two frameworks taken in the same one
    errors: dict[tuple[str, str], str] = {}
    with tempfile.TemporaryDirectory() as directory:
        db = Path(directory) / "yiemagent.db"
        workers: list[Worker] = []
        down: dict[str, str] = {}
        for name in FRAMEWORKS:
            python = peer_python if name in PEERS else sys.executable
            if python is None:
                down[name] = no_peers
                continue
            started = Worker(name, python, db)
            if started.error:
                down[name] = f"its worker did not start (not installed, or not drivable offline): {started.error}"
                started.close()
            else:
                workers.append(started)
        try:
            for repeat in range(args.repeats):
                order = workers[repeat % len(workers):] + workers[: repeat % len(workers)]
                for workload in WORKLOADS:
                    for each in order:
                        if workload not in each.ready["ready"]:
                            continue
                        answer = each.measure(workload)
                        if "error" in answer:
                            errors[each.name, workload] = answer["error"]
                        else:
                            by_repeat.setdefault((each.name, workload), {})[repeat] = answer["value"]
        finally:
            for each in workers:
                each.close()
    samples = {key: list(values.values()) for key, values in by_repeat.items()}  # in the order of the repetitions
    units = {"W1": f"CPU µs per tool call, runs of {ROUNDS} rounds of one call", "W1 long": f"the same, runs of {LONG_ROUNDS} rounds", "W2": "wall / 0.1 s, 32 parallel sleeping tools", "W2 async": "the same, async tools",
             "W11": "CPU µs per message read back, 400 in SQLite"}
    print(f"yiemagent against peer frameworks, median [min-max] of {args.repeats} interleaved repetitions, the order rotated:")
    for workload in WORKLOADS:
        print(f"  {workload}: {units[workload]}")
        floor = samples.get(("floor", "W2" if workload == "W2 async" else workload))
        for name in FRAMEWORKS:
            if (name, workload) in samples:
                values = samples[name, workload]
                ratio = f"   {statistics.median(values) / statistics.median(floor):5.2f}x the floor" if floor and name != "floor" else ""
                print(f"    {name:14s} {summary(values)}{ratio}")
            elif name in down:
                print(f"    {name:14s} not measured: {down[name]}")
            elif (name, workload) in errors:
                print(f"    {name:14s} failed: {errors[name, workload]}")
            elif (name, workload) in MISSING and name not in ("floor", "bound"):
                print(f"    {name:14s} n/a: {MISSING[name, workload]}")
    for workload in ("W1", "W1 long"):
        if ("bound", workload) in samples and ("yiemagent", workload) in samples:
            least = statistics.median(samples["bound", workload])
            print(f"  {workload}: yiemagent {statistics.median(samples['yiemagent', workload]) / least:.2f}x the design's bound (its layers), the bound"
                  f" {least / statistics.median(samples['floor', workload]) if ('floor', workload) in samples else float('nan'):.2f}x the floor")
    for workload, peer in (("W1", "smolagents"), ("W11", "openai-agents")):  # the peers yiemagent is held against: each repetition's two samples, taken in the same repetition
        ours, theirs = by_repeat.get(("yiemagent", workload), {}), by_repeat.get((peer, workload), {})
        paired = [ours[r] / theirs[r] for r in sorted(ours.keys() & theirs.keys())]
        if paired:
            spread = f"median {statistics.median(paired):.2f}x [{min(paired):.2f}-{max(paired):.2f}]"
            print(f"  {workload}: yiemagent / {peer}, each repetition's pair: {spread}, below 1 in {sum(x < 1 for x in paired)} of {len(paired)}")
    print("  goal: W1 <= 4.5x the floor, W2 <= 1.10 for yiemagent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
