"""`make bench`: what the agent costs at its edges, beside the floor measured in the same run.

docs/performance.md "Cost at the edges". Three figures, each against the least a program
must do to get the same bytes in and out:

1. A run with one tool round over HTTP (a real ``http.server`` on 127.0.0.1) against a bare
   ``requests.Session`` loop that posts the very bodies the agent sent and parses the replies.
2. An agent run that streams 2,000 text deltas against an ``iter_lines`` + ``json.loads``
   consumer of the same stream.
3. A restart: a new agent from an ``SQLiteSession`` of 10,000 messages against
   ``json.loads`` of the stored rows; beside it, ``load_history`` of the same messages
   saved to a file against ``json.loads`` of the file.

Goals: 1.3x, 2x and 2x. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
from localserver import LocalServer, Reply, Request  # noqa: E402  the tests' real http.server

from yiemagent import (  # noqa: E402
    AssistantMessage,
    SQLiteSession,
    TextContent,
    ToolResultMessage,
    UserMessage,
    YiemAgent,
    load_history,
    register_tool,
    run_agent,
    save_history,
    shutdown,
    take_response,
    tool,
)
from yiemagent.llm import OpenAIClient  # noqa: E402
from yiemagent.llm.scripted import tool_call_reply  # noqa: E402

SSE = {"Content-Type": "text/event-stream"}
# a real client has a key, and then every reply and delta is masked for it (_secrets.py)
API_KEY = "sk-bench-0123456789abcdefghijklmnop"


@tool
def double(x: int) -> int:
    """Double a number."""
    return 2 * x


def tool_round(request: Request) -> Reply:
    if request.json()["messages"][-1]["role"] == "user":
        call = {"id": "c1", "type": "function", "function": {"name": "double", "arguments": '{"x": 21}'}}
        message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": "42"}, "stop"
    return Reply(body={"choices": [{"message": message, "finish_reason": finish}], "usage": {"prompt_tokens": 9, "completion_tokens": 3}})


def median_of(fn, repeat: int) -> float:
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def interleaved_medians(first, second, repeat: int) -> tuple[float, float]:
    """The medians of ``first`` and ``second`` timed turn about: a burst of load elsewhere on
    the machine weighs on both alike (one after the other, it could fall on one alone)."""
    timings: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for fn, spent in zip((first, second), timings):
            started = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - started)
    return statistics.median(timings[0]), statistics.median(timings[1])


def bench_http_round(runs: int = 300) -> None:
    with LocalServer(tool_round) as server:
        client = OpenAIClient(server.url, "m", api_key=API_KEY, max_retries=0)
        agent = YiemAgent(llm_call=client, agent_event_sink=None, builtin_tools=False)
        register_tool(agent.tool_store, double)

        def agent_run() -> None:
            agent.state.messages.clear()
            run_agent(agent, "double 21")
            take_response(agent, timeout=30)

        for _ in range(20):
            agent_run()
        bodies = [r.body for r in server.requests[-2:]]
        session = requests.Session()
        url = server.url + "/chat/completions"
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"}

        def bare_run() -> None:
            for body in bodies:
                session.post(url, data=body, headers=headers, timeout=30).json()

        # requests at its leanest: the environment not read per request, the request prepared by hand
        lean = requests.Session()
        lean.trust_env = False
        lean_headers = {**lean.headers, **headers}

        def lean_run() -> None:
            for body in bodies:
                request = requests.PreparedRequest()
                request.prepare(method="POST", url=url, headers=lean_headers, data=body)
                lean.send(request, timeout=30).json()

        for _ in range(20):
            bare_run()
            lean_run()
        agent_s, bare_s = interleaved_medians(agent_run, bare_run, runs)
        _, lean_s = interleaved_medians(agent_run, lean_run, runs)
        shutdown(agent)
    print("a run with one tool round over HTTP (two requests), median of", runs)
    print(f"  agent {agent_s * 1e3:.2f} ms, bare requests.Session loop {bare_s * 1e3:.2f} ms: {agent_s / bare_s:.2f}x   goal <= 1.3x")
    print(f"  (against requests at its leanest, prepared requests without the environment: {lean_s * 1e3:.2f} ms, {agent_s / lean_s:.2f}x)")


# the words of a reply as a model streams them, a word (and its space) a delta
WORDS = "The answer is simple: streaming shows each piece of text as soon as it is sent, so users see it start at once.".split()


def bench_streaming(deltas: int = 2000, runs: int = 30) -> None:
    """Twice: as filed (no API key, deltas "w0 ", "w1 "...), and as a user runs it, with a key
    (every event and delta is then masked for it) and deltas that are English words."""
    for api_key, texts in ((None, [f"w{i} " for i in range(deltas)]), (API_KEY, [f"{WORDS[i % len(WORDS)]} " for i in range(deltas)])):
        chunks = [{"choices": [{"delta": {"content": text}}]} for text in texts] + [{"choices": [{"delta": {}, "finish_reason": "stop"}]}]
        body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
        with LocalServer(lambda request: Reply(body=body, headers=SSE)) as server:
            client = OpenAIClient(server.url, "m", api_key=api_key, max_retries=0, stream=True)
            agent = YiemAgent(llm_call=client, agent_event_sink=lambda event: None, builtin_tools=False)

            def agent_run() -> None:
                agent.state.messages.clear()
                run_agent(agent, "talk")
                take_response(agent, timeout=30)

            session = requests.Session()
            url = server.url + "/chat/completions"
            headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

            def bare_run() -> None:
                text = []
                with session.post(url, data=b'{"stream": true}', headers=headers, stream=True, timeout=30) as reply:
                    for line in reply.iter_lines():
                        if line.startswith(b"data: ") and line != b"data: [DONE]":
                            choice = json.loads(line[6:])["choices"][0]
                            text.append(choice["delta"].get("content") or "")
                "".join(text)

            for _ in range(3):
                agent_run()
                bare_run()
            agent_s, bare_s = interleaved_medians(agent_run, bare_run, runs)
            shutdown(agent)
        kind = "with an API key, English words" if api_key else "no API key, deltas w0 w1 ..."
        print(f"an agent run streaming {deltas} deltas (a sink for each; {kind}), median of {runs}")
        print(f"  agent {agent_s * 1e3:.1f} ms, iter_lines + json.loads {bare_s * 1e3:.1f} ms: {agent_s / bare_s:.2f}x   goal <= 2x")


def bench_restart(count: int = 10_000, runs: int = 11) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "restart.db"
        with SQLiteSession(path, "bench", synchronous="OFF") as session:
            for i in range(count // 4):
                session.append(UserMessage([TextContent(f"question {i}: what is double {i}?")]))
                session.append(tool_call_reply((f"call_{i}", "double", {"x": i})))
                session.append(ToolResultMessage(f"call_{i}", "double", [TextContent(str(2 * i))], {"x": i}))
                session.append(AssistantMessage([TextContent(f"It is {2 * i}.")], stop_reason="stop"))
            file = Path(directory) / "restart.json"
            save_history(session.messages(), file)

        def restart() -> None:
            agent = YiemAgent(llm_call=lambda f: None, agent_event_sink=None, session=SQLiteSession(path, "bench"), builtin_tools=False)
            shutdown(agent)

        def floor() -> None:
            with closing(sqlite3.connect(path)) as conn:  # closed, as the agent's session is by shutdown
                [json.loads(body) for (body,) in conn.execute("SELECT body FROM yiemagent_messages WHERE session_id = ? ORDER BY id", ("bench",))]

        def file_floor() -> None:
            with open(file, "rb") as handle:
                json.loads(handle.read())

        restart()
        agent_s, floor_s = interleaved_medians(restart, floor, runs)
        load_s, file_floor_s = interleaved_medians(lambda: load_history(file), file_floor, runs)
    print(f"a restart from an SQLiteSession of {count} messages, median of {runs}")
    print(f"  new agent {agent_s * 1e3:.1f} ms, json.loads of the rows {floor_s * 1e3:.1f} ms: {agent_s / floor_s:.2f}x   goal <= 2x")
    print(f"  load_history of a file of {count} messages {load_s * 1e3:.1f} ms, json.loads of the file {file_floor_s * 1e3:.1f} ms: {load_s / file_floor_s:.2f}x")


FIGURES = {"http": bench_http_round, "stream": bench_streaming, "restart": bench_restart}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # no choices=: Python 3.11's argparse checks an empty nargs="*" list against them and refuses it
    parser.add_argument("figures", nargs="*", metavar="{" + ",".join(FIGURES) + "}", help="which figures (default: all)")
    names = parser.parse_args().figures or list(FIGURES)
    for name in names:
        if name not in FIGURES:
            parser.error(f"no figure {name!r}; choose from {', '.join(FIGURES)}")
    for name in names:
        FIGURES[name]()


if __name__ == "__main__":
    main()
