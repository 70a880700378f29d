"""A long-lived process under a seeded fault load: is memory flat after warm-up, do idle tool threads exit?

docs/performance.md "A long-lived process". Waves of agents, each wave 20 agents x 25 runs
over HTTP against a real ``http.server`` on 127.0.0.1 that injects faults from a seeded
random generator (500s, 429s with Retry-After, connections closed mid-body, bodies that
are not JSON) and tools that raise now and then. Every agent is shut down at the end of
its wave, as a service's conversations come and go. After each wave: resident memory
(``/proc/self/statm``), the tool threads alive, and with ``--trace`` the memory
``tracemalloc`` traces. At the end: the growth per 1,000 runs after the warm-up (the first
third of the waves) and, with ``--trace``, what grew most.

Checks, failing with exit status 1: every run got a response, every tool call in every
history has exactly one result, at most ``TOOL_THREADS_KEPT`` tool threads outlive a wave,
and none is left once the pool has been idle for ``TOOL_THREAD_IDLE_S``. Memory is
reported, not asserted (a benchmark informs; the tests prove behaviour).

    python bench/soak.py [--waves 6] [--agents 20] [--runs 25] [--seed 7] [--trace] [--trim]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import logging
import os
import random
import sys
import threading
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
from localserver import LocalServer, Reply, Request  # noqa: E402  the tests' real http.server

from yiemagent import AssistantMessage, ToolResultMessage, YiemAgent, extract_tool_calls, register_tool, run_agent, shutdown, take_response, tool  # noqa: E402
from yiemagent._threads import TOOL_THREAD_IDLE_S, TOOL_THREADS_KEPT  # noqa: E402  the pool's bound and idle time
from yiemagent.llm import OpenAIClient  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE / 1e6


def tool_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("yiemagent-tool")]


def tool_threads_after(bound: int, timeout_s: float) -> int:
    """Wait until at most ``bound`` tool threads are alive, at most ``timeout_s``; how many are."""
    deadline = time.monotonic() + timeout_s
    while len(alive := tool_threads()) > bound and time.monotonic() < deadline:
        alive[0].join(0.1)
    return len(tool_threads())


class FaultyServer:
    """An OpenAI-compatible chat endpoint: two parallel calls, then a final text; a seeded share of faults."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.lock = threading.Lock()  # guards random, faults, replies
        self.faults = 0
        self.replies = 0

    def __call__(self, request: Request) -> Reply:
        with self.lock:
            roll = self.random.random()
            self.faults += roll < 0.2
            self.replies += 1
            reply_number = self.replies
        if roll < 0.08:
            return Reply(status=500, body={"error": {"message": "injected"}})
        if roll < 0.12:
            return Reply(status=429, body={"error": {"message": "slow down"}}, headers={"Retry-After": "0"})
        if roll < 0.16:
            return Reply(chunks=[b'{"choices": [{"mess'], cut=True, headers={"Content-Type": "application/json"})
        if roll < 0.2:
            return Reply(body=b"<html>not json</html>", headers={"Content-Type": "application/json"})
        messages = request.json()["messages"]
        if messages[-1]["role"] == "user":
            calls = [
                {"id": f"c{reply_number}_{n}", "type": "function", "function": {"name": name, "arguments": '{"x": %d}' % n}}
                for n, name in enumerate(("double", "flaky"))
            ]
            message = {"role": "assistant", "content": None, "tool_calls": calls}
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": "done"}, "stop"
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        return Reply(body={"model": "soak", "choices": [{"message": message, "finish_reason": finish}], "usage": usage})


@tool(parallel=True)
def double(x: int) -> int:
    """Double a number."""
    return 2 * x


@tool(parallel=True)
def flaky(x: int) -> int:
    """Fail now and then."""
    if random.random() < 0.1:
        raise RuntimeError("injected tool failure")
    return x


def answered_once(agent: YiemAgent) -> bool:
    called, answered = [], []
    for message in agent.history():
        if isinstance(message, AssistantMessage):
            called += [call.id for call in extract_tool_calls(message)[1]]
        elif isinstance(message, ToolResultMessage):
            answered.append(message.tool_call_id)
    return sorted(answered) == sorted(set(answered)) and (not called or set(called) == set(answered))


def one_agent(url: str, runs: int, problems: list[str]) -> None:
    client = OpenAIClient(url, "soak", max_retries=3, backoff_factor=0.0, max_retry_delay_ms=1, timeout=10)
    agent = YiemAgent(llm_call=client, agent_event_sink=None, builtin_tools=False, parallel_tool_execute=True)
    register_tool(agent.tool_store, double)
    register_tool(agent.tool_store, flaky)
    try:
        for n in range(runs):
            run_agent(agent, f"run {n}")
            response = take_response(agent, timeout=60)
            if response is None:
                problems.append("a run got no response")
    finally:
        shutdown(agent, timeout=30)
    if not answered_once(agent):
        problems.append("a tool call without exactly one result")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waves", type=int, default=12)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--trace", action="store_true", help="also trace Python's allocations (tracemalloc): its own tables grow with every new traceback, so resident memory does too")
    parser.add_argument("--trim", action="store_true", help="give the C allocator's free pages back (glibc malloc_trim) before each measure")
    args = parser.parse_args()
    random.seed(args.seed)
    logging.basicConfig(level=logging.ERROR)  # the runs that end in an injected fault log a warning each
    respond = FaultyServer(args.seed)
    problems: list[str] = []
    if args.trace:
        tracemalloc.start(25)
    rows, snapshots = [], []
    started = time.perf_counter()
    with LocalServer(respond) as server:
        for wave in range(args.waves):
            threads = [threading.Thread(target=one_agent, args=(server.url, args.runs, problems)) for _ in range(args.agents)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            with server._lock:
                server.requests.clear()  # the test server's own record, not the agents'
            tool_threads_after(TOOL_THREADS_KEPT, 5)  # a burst's threads past the bound exit as their calls end
            gc.collect()
            if args.trim:
                ctypes.CDLL("libc.so.6").malloc_trim(0)
            traced = tracemalloc.get_traced_memory()[0] / 1e6 if tracemalloc.is_tracing() else float("nan")
            rows.append((wave, resident_mb(), traced, len(tool_threads())))
            if tracemalloc.is_tracing():
                snapshots.append(tracemalloc.take_snapshot())
    seconds = time.perf_counter() - started
    runs_per_wave = args.agents * args.runs
    print(f"soak: {args.waves} waves of {args.agents} agents x {args.runs} runs over HTTP, {respond.faults} faults injected, {seconds:.0f} s")
    print("  wave   resident MB   traced MB   tool threads alive")
    for wave, rss, traced, alive in rows:
        print(f"  {wave:4d}   {rss:11.1f}   {traced:9.2f}   {alive:18d}")
    warm = max(1, len(rows) // 3)  # the first third of the waves is the warm-up (pools, caches, allocator arenas)
    if len(rows) > warm + 1:
        runs_after = (len(rows) - 1 - warm) * runs_per_wave
        traced = f", traced {1000 * (rows[-1][2] - rows[warm][2]) / runs_after:+.3f} MB" if snapshots else ""
        print(f"  after warm-up (end of wave {warm} -> last wave): resident {1000 * (rows[-1][1] - rows[warm][1]) / runs_after:+.2f} MB{traced} per 1,000 runs")
        if snapshots:
            print(f"  grew most (tracemalloc, end of wave {warm} -> last wave):")
        for stat in snapshots[-1].compare_to(snapshots[warm], "traceback")[:5] if snapshots else ():
            frame = stat.traceback[-1]
            print(f"    {stat.size_diff / 1e3:+9.1f} KB  {stat.count_diff:+6d} blocks  {frame.filename}:{frame.lineno}")
    if rows and max(row[3] for row in rows) > TOOL_THREADS_KEPT:
        problems.append(f"{max(row[3] for row in rows)} tool threads alive after a wave (at most {TOOL_THREADS_KEPT} stay for the next batch)")
    left = tool_threads_after(0, TOOL_THREAD_IDLE_S + 10)
    print(f"  tool threads alive {TOOL_THREAD_IDLE_S + 10:.0f} s after the last wave (idle ones exit after {TOOL_THREAD_IDLE_S:.0f} s): {left}")
    if left:
        problems.append(f"{left} tool threads still alive {TOOL_THREAD_IDLE_S + 10:.0f} s after the pool went idle")
    for problem in sorted(set(problems)):
        print(f"  FAILED: {problem} ({problems.count(problem)}x)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
