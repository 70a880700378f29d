"""Async tools: ``tool()`` takes ``async def`` functions (beyond the spec, docs/api.md "A context for tools, async tools").

Each call runs on an event loop of its own in the thread that runs the call; ``abort`` and
``timeout_s`` cancel the task, the coroutine sees ``CancelledError``, and nothing is left
running (no thread, no loop).
"""

from __future__ import annotations

import asyncio
import collections.abc
import gc
import threading

import pytest

from helpers import WAIT, make_agent
from yiemagent._threads import CLEANUP_GRACE_S
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


def _leaky(helper):
    """A tool ``leaky`` that starts a task of ``helper`` (a coroutine function) and returns "done" without awaiting it."""

    @tool
    async def leaky() -> str:
        """Start a helper and return at once."""
        asyncio.get_running_loop().create_task(helper())
        await asyncio.sleep(0)
        return "done"

    return leaky


def test_tasks_an_async_tool_leaves_behind_are_cancelled():
    """A task the coroutine started and did not await is cancelled before the call returns."""
    orphan_cancelled = threading.Event()

    async def orphan() -> None:
        try:
            await asyncio.sleep(WAIT * 10)
        except asyncio.CancelledError:
            orphan_cancelled.set()
            raise

    leaky = _leaky(orphan)
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


def _stubborn_task(stop: threading.Event):
    """A coroutine function for a task that catches its every cancellation until ``stop`` is set."""

    async def stubborn() -> None:
        while not stop.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                pass

    return stubborn


class _HandMadeCoroutine(collections.abc.Coroutine):
    """A coroutine object of a class (no ``__qualname__`` of its own) whose task refuses every cancellation: it waits on a new future each time."""

    def send(self, value):
        return self._wait()

    def throw(self, *exc_info):
        return self._wait()

    def close(self) -> None:
        pass

    def __await__(self):
        return self

    def _wait(self):
        future = asyncio.get_running_loop().create_future()
        future._asyncio_future_blocking = True  # what a Task waits on (asyncio's own futures set it in __await__)
        return future


def test_a_task_left_behind_gets_the_grace_to_finish_its_cleanup(caplog):
    """A task left behind that needs a few steps of the loop to end once cancelled gets them (docs/failures.md): its cleanup ends before the call returns, and nothing is abandoned."""
    cleaned = threading.Event()

    async def orphan() -> None:
        try:
            await asyncio.sleep(WAIT * 10)
        except asyncio.CancelledError:
            for _ in range(5):  # a cleanup of several steps
                await asyncio.sleep(0)
            cleaned.set()
            raise

    leaky = _leaky(orphan)
    with caplog.at_level("WARNING", logger="yiemagent.run"):
        assert leaky.execute("c1", {}, None, lambda p: None).content[0].text == "done"
    assert cleaned.is_set() and not [r for r in caplog.records if "abandoned" in r.getMessage()]


def test_the_warning_for_tasks_left_behind_names_the_tool_and_every_task_and_asyncio_adds_none(caplog):
    """Two tasks that refuse their cancellation are named in one warning, each by its coroutine's name or else the task's; once they are collected asyncio logs no "Task was destroyed" of its own."""
    stop = threading.Event()
    stubborn = _stubborn_task(stop)

    @tool
    async def leaky() -> str:
        """Start two helpers and return at once."""
        loop = asyncio.get_running_loop()
        loop.create_task(stubborn())
        loop.create_task(_HandMadeCoroutine(), name="hand-made")
        await asyncio.sleep(0)
        return "done"

    try:
        with caplog.at_level("WARNING"):
            assert leaky.execute("c1", {}, None, lambda p: None).content[0].text == "done"
            gc.collect()
    finally:
        stop.set()
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "yiemagent.run"]
    called = "async tool 'leaky' returned, but 2 task(s) it left behind did not end within 1 s of being cancelled; abandoned so that they cannot hold the call: "
    assert warning.startswith(called) and sorted(warning[len(called) :].split(", ")) == sorted([stubborn.__qualname__, "hand-made"])  # in no set order
    destroyed = [r.getMessage() for r in caplog.records if r.name == "asyncio" and "Task was destroyed" in r.getMessage()]
    assert not [m for m in destroyed if "stubborn" in m or "hand-made" in m], destroyed


def test_async_generators_left_open_are_closed_before_the_call_returns():
    """An async generator the coroutine left suspended is closed (its finally runs) before execute returns, even while something still refers to it."""
    closed, kept = threading.Event(), []

    async def numbers():
        try:
            yield 1
            yield 2
        finally:
            closed.set()

    @tool
    async def first() -> int:
        """Read one number and leave the generator open."""
        kept.append(numbers())
        return await kept[0].__anext__()

    assert first.execute("c1", {}, None, lambda p: None).content[0].text == "1"
    assert closed.is_set()


def test_the_grace_is_one_deadline_for_the_tasks_and_the_generators_left_behind(caplog):
    """Once a task that refuses its cancellation has used the whole grace, a generator whose finally still waits is abandoned at once, named with it: one grace in all, not one per step."""
    stop, kept = threading.Event(), []

    async def slow_to_close():
        try:
            yield 1
        finally:
            await asyncio.sleep(CLEANUP_GRACE_S / 2)

    @tool
    async def leaky() -> str:
        """Leave a stubborn task and an open generator behind."""
        asyncio.get_running_loop().create_task(_stubborn_task(stop)())
        kept.append(slow_to_close())
        await kept[0].__anext__()
        return "done"

    try:
        with caplog.at_level("WARNING", logger="yiemagent.run"):
            assert leaky.execute("c1", {}, None, lambda p: None).content[0].text == "done"
    finally:
        stop.set()
    (warning,) = [r.getMessage() for r in caplog.records if "abandoned" in r.getMessage()]
    assert "2 task(s)" in warning and warning.endswith(", BaseEventLoop.shutdown_asyncgens")


def test_an_async_tool_called_by_hand_from_async_code_names_itself_in_the_warning_for_what_it_left(caplog):
    """From inside a running loop too, the warning for a task left behind names the tool."""
    stop = threading.Event()
    leaky = _leaky(_stubborn_task(stop))

    async def main() -> str:
        return leaky.execute("c1", {}, None, lambda p: None).content[0].text

    try:
        with caplog.at_level("WARNING", logger="yiemagent.run"):
            assert asyncio.run(main()) == "done"
    finally:
        stop.set()
    (warning,) = [r.getMessage() for r in caplog.records if "abandoned" in r.getMessage()]
    assert warning.startswith("async tool 'leaky' returned, but 1 task(s)")
