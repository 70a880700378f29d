"""Async tools: ``tool()`` takes ``async def`` functions (beyond the spec, docs/api.md "A context for tools, async tools").

Each call runs on an event loop of its own in the thread that runs the call; ``abort`` and
``timeout_s`` cancel the task, the coroutine sees ``CancelledError``, and nothing is left
running (no thread, no loop).
"""

from __future__ import annotations

import asyncio
import gc
import threading

import pytest

from helpers import WAIT, make_agent
from yiemagent import AbortSignal, RunContext, ToolDefinitionError, ToolError, abort, ask, run_agent, shutdown, take_response, tool
from yiemagent.llm.scripted import ScriptedLLM, tool_call_reply


def _open_loops() -> list[asyncio.AbstractEventLoop]:
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop) and not o.is_closed()]


def test_an_async_tool_runs_and_its_result_reaches_the_model():
    """An async def tool is awaited on its own loop in the worker thread; its return value is the result."""
    where: list = []

    @tool
    async def fetch(url: str, ctx: RunContext) -> str:
        """Fetch a page."""
        await asyncio.sleep(0)
        where.append((threading.current_thread().name, asyncio.get_running_loop(), ctx.tool_call_id))
        return f"page of {url}"

    assert fetch.input_schema["properties"] == {"url": {"type": "string"}}
    llm = ScriptedLLM([tool_call_reply(("c1", "fetch", '{"url": "x"}')), "ok"])
    agent = make_agent(llm, fetch, builtin_tools=False)
    try:
        assert ask(agent, "go", timeout=WAIT).text == "ok"
    finally:
        shutdown(agent, timeout=WAIT)
    assert llm.requests[1]["messages"][-1]["content"] == "page of x"
    ((thread_name, loop, call_id),) = where
    assert thread_name.endswith("-run") and call_id == "c1"
    assert loop.is_closed()


def test_parallel_async_calls_each_get_a_loop_of_their_own():
    """Two parallel async calls run at once, each on its own loop."""
    barrier = threading.Barrier(2, timeout=WAIT)
    loops: list = []

    @tool(parallel=True)
    async def step(n: int) -> int:
        loops.append(asyncio.get_running_loop())
        await asyncio.to_thread(barrier.wait)  # both at once: neither loop blocks the other
        return n * 2

    llm = ScriptedLLM([tool_call_reply(("a", "step", '{"n": 1}'), ("b", "step", '{"n": 2}')), "ok"])
    agent = make_agent(llm, step, builtin_tools=False, parallel_tool_execute=True)
    try:
        ask(agent, "go", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert [m["content"] for m in llm.requests[1]["messages"][-2:]] == ["2", "4"]
    assert len({id(loop) for loop in loops}) == 2 and all(loop.is_closed() for loop in loops)


def _cancellable():
    started, cancelled, finished = threading.Event(), threading.Event(), threading.Event()
    threads: list = []

    async def wait_forever() -> str:
        threads.append(threading.current_thread())
        started.set()
        try:
            await asyncio.sleep(WAIT * 10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        finally:
            finished.set()
        return "never"

    return wait_forever, started, cancelled, finished, threads


def test_abort_cancels_an_async_tool_and_leaves_nothing_running():
    """abort(): the coroutine sees CancelledError, the call gets an error result, the loop is closed."""
    fn, started, cancelled, finished, threads = _cancellable()
    slow = tool(fn, name="slow")
    agent = make_agent(ScriptedLLM([tool_call_reply(("c1", "slow", "{}"))]), slow, builtin_tools=False)
    before = _open_loops()
    try:
        run_agent(agent, "go")
        assert started.wait(WAIT)
        assert abort(agent, "the user left")
        reply = take_response(agent, timeout=WAIT)
        assert reply.stop_reason == "aborted"
        assert cancelled.wait(WAIT) and finished.wait(WAIT)
        (result,) = [m for m in agent.history() if getattr(m, "tool_call_id", None) == "c1"]
        assert result.is_error
    finally:
        shutdown(agent, timeout=WAIT)
    assert _open_loops() == before


def test_timeout_s_cancels_an_async_tool_and_its_thread_ends():
    """timeout_s: the call ends "timed out", the coroutine sees CancelledError, and its thread ends (no thread, no loop left)."""
    fn, started, cancelled, finished, threads = _cancellable()
    slow = tool(fn, name="slow", timeout_s=0.2)
    llm = ScriptedLLM([tool_call_reply(("c1", "slow", "{}")), "ok"])
    agent = make_agent(llm, slow, builtin_tools=False)
    before = _open_loops()
    try:
        assert ask(agent, "go", timeout=WAIT).text == "ok"
    finally:
        shutdown(agent, timeout=WAIT)
    assert "timed out" in llm.requests[1]["messages"][-1]["content"]
    assert cancelled.wait(WAIT) and finished.wait(WAIT)
    (thread,) = threads
    thread.join(WAIT)
    assert not thread.is_alive()
    assert _open_loops() == before


def test_tasks_an_async_tool_leaves_behind_are_cancelled():
    """A task the coroutine started and did not await is cancelled before the call returns."""
    orphan_cancelled = threading.Event()

    async def orphan() -> None:
        try:
            await asyncio.sleep(WAIT * 10)
        except asyncio.CancelledError:
            orphan_cancelled.set()
            raise

    @tool
    async def leaky() -> str:
        asyncio.get_running_loop().create_task(orphan())
        await asyncio.sleep(0)
        return "done"

    assert leaky.execute("c1", {}, None, lambda p: None).content[0].text == "done"
    assert orphan_cancelled.is_set()


def test_a_task_left_behind_that_swallows_its_cancellation_does_not_hold_the_call(caplog):
    """A task the coroutine left behind that catches CancelledError for ever is abandoned after a grace, with a warning: the tool's result reaches the model."""
    stop, refused = threading.Event(), threading.Event()

    async def stubborn() -> None:
        while not stop.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                refused.set()  # swallowed: the loop goes on

    @tool
    async def leaky() -> str:
        """Start a helper and return at once."""
        asyncio.get_running_loop().create_task(stubborn())
        await asyncio.sleep(0)
        return "done"

    llm = ScriptedLLM([tool_call_reply(("c1", "leaky", "{}")), "ok"])
    agent = make_agent(llm, leaky, builtin_tools=False)
    before = _open_loops()
    try:
        with caplog.at_level("WARNING", logger="yiemagent.run"):
            assert ask(agent, "go", timeout=WAIT).text == "ok"
    finally:
        stop.set()  # lets the task end should the call still be holding it (the test then failed)
        shutdown(agent, timeout=WAIT)
    assert llm.requests[1]["messages"][-1]["content"] == "done"
    assert refused.is_set()
    (warning,) = [r.getMessage() for r in caplog.records if "abandoned" in r.getMessage()]
    assert "async tool 'leaky'" in warning and "stubborn" in warning and "1 task(s)" in warning
    assert _open_loops() == before


def test_a_thread_left_blocked_in_the_loops_executor_does_not_hold_the_call(caplog):
    """A to_thread call still blocked when the coroutine returns is abandoned after a grace, with a warning: execute returns the result."""
    release, entered = threading.Event(), threading.Event()

    def blocked() -> None:
        entered.set()
        release.wait(WAIT)

    @tool
    async def leaky() -> str:
        asyncio.get_running_loop().create_task(asyncio.to_thread(blocked))
        await asyncio.to_thread(entered.wait, WAIT)
        return "done"

    try:
        with caplog.at_level("WARNING", logger="yiemagent.run"):
            assert leaky.execute("c1", {}, None, lambda p: None).content[0].text == "done"
        assert not release.is_set()  # the call returned while the thread was still blocked
    finally:
        release.set()
    (warning,) = [r.getMessage() for r in caplog.records if "abandoned" in r.getMessage()]
    assert "shutdown_default_executor" in warning


def test_an_async_tool_that_raises_is_an_error_result():
    """An exception in the coroutine is an error result naming it, as for a plain function."""

    @tool
    async def broken() -> str:
        raise RuntimeError("no network")

    llm = ScriptedLLM([tool_call_reply(("c1", "broken", "{}")), "ok"])
    agent = make_agent(llm, broken, builtin_tools=False)
    try:
        ask(agent, "go", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert "no network" in llm.requests[1]["messages"][-1]["content"]


def test_an_async_generator_is_refused():
    """An async generator function is refused at decoration: a tool returns one result."""
    with pytest.raises(ToolDefinitionError, match="async generator"):

        @tool
        async def stream():
            yield 1


def test_an_async_tool_called_by_hand_from_async_code_still_runs():
    """execute called inside a running event loop runs the coroutine on a loop (and thread) of its own."""

    threads: list = []

    @tool
    async def double(n: int) -> int:
        await asyncio.sleep(0)
        threads.append(threading.current_thread().name)
        return n * 2

    async def main() -> str:
        return double.execute("c1", {"n": 21}, None, lambda p: None).content[0].text

    assert asyncio.run(main()) == "42"
    assert threads == ["yiemagent-tool-async"]


def test_an_async_tool_called_by_hand_from_async_code_raises_what_its_coroutine_raised():
    """From inside a running loop too, the coroutine's exception reaches the caller unchanged."""

    @tool
    async def broken() -> str:
        await asyncio.sleep(0)
        raise RuntimeError("no network")

    async def main() -> None:
        broken.execute("c1", {}, None, lambda p: None)

    with pytest.raises(RuntimeError, match="^no network$"):
        asyncio.run(main())


def test_an_async_tool_called_by_hand_from_async_code_is_cancelled_by_its_signal():
    """From inside a running loop too, the call's signal cancels the coroutine: a ToolError giving the signal's reason."""
    fn, started, cancelled, finished, threads = _cancellable()
    slow = tool(fn, name="slow")
    signal = AbortSignal()

    def fire_once_started() -> None:
        assert started.wait(WAIT)
        signal.abort("the user left")

    firing = threading.Thread(target=fire_once_started)
    firing.start()

    async def main() -> None:
        slow.execute("c1", {}, signal, lambda p: None)

    try:
        with pytest.raises(ToolError, match="^Tool 'slow' was cancelled: the user left$"):
            asyncio.run(main())
    finally:
        firing.join(WAIT)
    assert cancelled.is_set() and finished.is_set()
