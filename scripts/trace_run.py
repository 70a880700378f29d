"""Which of the package's modules one agent run enters, traced with ``sys.setprofile``.

The run: one user message, one LLM round with two parallel ``tool()`` calls, then a
final text reply, through ``ScriptedLLM`` (docs/architecture.md "One run's path").
Prints each module entered with its number of calls, and the number of times a call
crossed from one of the package's modules into another. ``--max N`` exits 1 when more
than N modules were entered.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections import Counter


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=None, help="fail when more modules than this are entered")
    args = parser.parse_args()

    import yiemagent
    from yiemagent import YiemAgent, register_tool, run_agent, shutdown, take_response, tool
    from yiemagent.llm import ScriptedLLM
    from yiemagent.llm.scripted import tool_call_reply

    @tool(parallel=True)
    def double(x: int) -> int:
        """Double a number."""
        return 2 * x

    @tool(parallel=True)
    def square(x: int) -> int:
        """Square a number."""
        return x * x

    prefix = yiemagent.__name__ + "."
    calls: Counter = Counter()
    crossings = 0
    lock = threading.Lock()  # guards calls and crossings (the profiler runs in every thread)
    counting = False  # only the run is counted; the agent is made (and its threads started) with the profiler on

    def profile(frame, event, arg):  # noqa: ANN001
        nonlocal crossings
        if event != "call" or not counting:
            return
        module = frame.f_globals.get("__name__", "")
        if not (module == yiemagent.__name__ or module.startswith(prefix)):
            return
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back is not None else ""
        with lock:
            calls[module] += 1
            if caller != module and (caller == yiemagent.__name__ or caller.startswith(prefix)):
                crossings += 1

    # threads started from here on (the agent's loop and run threads, the tool pool's) carry the profiler
    threading.setprofile(profile)
    sys.setprofile(profile)
    llm = ScriptedLLM([tool_call_reply(("c1", "double", {"x": 3}), ("c2", "square", {"x": 4})), "6 and 16."])
    agent = YiemAgent(llm_call=llm, agent_event_sink=lambda event: None, builtin_tools=False, parallel_tool_execute=True)
    register_tool(agent.tool_store, double)
    register_tool(agent.tool_store, square)
    agent.wait_until_idle(10)
    counting = True
    try:
        run_agent(agent, "double 3 and square 4")
        reply = take_response(agent, timeout=30)
        agent.wait_until_idle(10)
    finally:
        counting = False
        sys.setprofile(None)
        threading.setprofile(None)
    shutdown(agent, timeout=10)
    assert reply.stop_reason == "stop", reply
    for module, count in sorted(calls.items()):
        print(f"{count:6d}  {module}")
    print(f"{len(calls)} modules entered, {crossings} crossings between them")
    if args.max is not None and len(calls) > args.max:
        print(f"more than {args.max} modules", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
