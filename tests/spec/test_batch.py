"""Batches: dispatch, sequential and parallel execution, abort, termination (spec §9, §10)."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest

import yiemagent.batch as batch_module
from helpers import ASSISTANT, PARALLEL, SEQUENTIAL, WAIT, EventRecorder, context_with, make_tool, text_result
from yiemagent import (
    AbortSignal,
    AgentLoopConfig,
    AgentToolCall,
    AgentToolResult,
    FinalizedOutcome,
    PendingApproval,
    TextContent,
    ToolExecEndEvent,
    execute_tool_calls,
    execute_tool_calls_parallel,
    execute_tool_calls_sequential,
    should_terminate,
)



def calls(*names):
    return [AgentToolCall(f"id_{i}", name, {}) for i, name in enumerate(names)]


def texts(batch):
    return [m.content[0].text for m in batch.messages]


def recording_tool(name, log, parallel=False, **kw):
    def execute(tool_call_id, args, signal, on_partial_result):
        log.append((name, threading.current_thread().name))
        return text_result(name)

    return make_tool(name, execute, parallel=parallel, **kw)


@pytest.mark.spec("9")
def test_dispatch_is_sequential_when_config_says_so(monkeypatch):
    """tool_execution "sequential" runs the batch sequentially even if every tool allows parallel."""
    log = []
    ctx = context_with(recording_tool("a", log, parallel=True), recording_tool("b", log, parallel=True))
    execute_tool_calls(ctx, ASSISTANT, calls("a", "b"), SEQUENTIAL, None, None)
    assert {thread for _, thread in log} == {threading.current_thread().name}


@pytest.mark.spec("9")
def test_dispatch_is_sequential_when_any_tool_is_not_parallel():
    """One tool with parallel_tool_execute=False makes the whole batch sequential."""
    log = []
    ctx = context_with(recording_tool("a", log, parallel=True), recording_tool("b", log, parallel=False))
    execute_tool_calls(ctx, ASSISTANT, calls("a", "b"), PARALLEL, None, None)
    assert {thread for _, thread in log} == {threading.current_thread().name}


@pytest.mark.spec("9")
def test_dispatch_is_parallel_when_config_and_all_tools_allow_it():
    """Parallel config with only parallel tools runs calls on tool threads."""
    log = []
    ctx = context_with(recording_tool("a", log, parallel=True), recording_tool("b", log, parallel=True))
    execute_tool_calls(ctx, ASSISTANT, calls("a", "b", "nosuch"), PARALLEL, None, None)
    assert all(thread.startswith("yiemagent-tool") for _, thread in log) and len(log) == 2


@pytest.mark.spec("9")
def test_a_parallel_batch_of_one_call_runs_in_the_calling_thread_in_a_copy_of_its_context():
    """A parallel batch of a single call runs it in the caller's thread (no pool hand-off), isolated as a pool thread would be."""
    import contextvars

    mark = contextvars.ContextVar("mark", default="caller's")
    seen = []

    def execute(tool_call_id, args, signal, on_partial_result):
        seen.append((threading.current_thread().name, mark.get()))
        mark.set("the tool's")
        return text_result("a")

    ctx = context_with(make_tool("a", execute, parallel=True))
    batch = execute_tool_calls(ctx, ASSISTANT, calls("a"), PARALLEL, None, None)
    assert texts(batch) == ["a"] and seen == [(threading.current_thread().name, "caller's")]
    assert mark.get() == "caller's"  # what the tool set stayed in its copy


@pytest.fixture
def pools():
    """Tool pools of a test's own (``pools(keep=..., idle_s=...)``); their idle threads end with the test."""
    from yiemagent._threads import ToolPool

    made = []

    def make(**kwargs):
        made.append(ToolPool(**kwargs))
        return made[-1]

    yield make
    for pool in made:
        pool.retire_idle()


def _alive_at_most(threads, bound):
    """Wait (at most WAIT s) until no more than ``bound`` of ``threads`` are alive; the ones still alive."""
    deadline = time.monotonic() + WAIT
    while (alive := [t for t in threads if t.is_alive()]) and len(alive) > bound and time.monotonic() < deadline:
        alive[0].join(0.05)  # a wait on the condition, not a sleep: returns as soon as that thread ends
    return [t for t in threads if t.is_alive()]


def _burst(n):
    """A tool whose n calls all run at once (a barrier of n parties), recording the threads they ran on."""
    at_once, threads = threading.Barrier(n, timeout=WAIT), set()

    def execute(tool_call_id, args, signal, on_partial_result):
        threads.add(threading.current_thread())
        at_once.wait()
        return text_result("ok")

    return make_tool("burst", execute, parallel=True), threads


@pytest.mark.spec("9")
def test_a_burst_larger_than_the_bound_runs_at_once_and_only_the_bound_outlives_it(monkeypatch):
    """40 calls at once on a pool that keeps 8 run on 40 threads; once the batch is done 32 exit and 8 stay, idle, until retire_idle."""
    from yiemagent._threads import ToolPool

    pool = ToolPool(keep=8, idle_s=10 * WAIT)
    monkeypatch.setattr(batch_module, "tool_pool", pool)
    tool, threads = _burst(40)
    batch = execute_tool_calls(context_with(tool), ASSISTANT, calls(*["burst"] * 40), PARALLEL, None, None)
    assert texts(batch) == ["ok"] * 40 and len(threads) == 40
    assert len(_alive_at_most(threads, 8)) == 8
    pool.retire_idle()
    assert _alive_at_most(threads, 0) == []


@pytest.mark.spec("9")
def test_a_second_batch_runs_on_the_threads_of_the_first(monkeypatch, pools):
    """Two batches of 32 calls at once: the second runs on the very threads of the first, none is started again."""
    monkeypatch.setattr(batch_module, "tool_pool", pools())
    runs = []
    for _ in range(2):
        tool, threads = _burst(32)
        batch = execute_tool_calls(context_with(tool), ASSISTANT, calls(*["burst"] * 32), PARALLEL, None, None)
        assert texts(batch) == ["ok"] * 32
        runs.append({t.ident for t in threads})
    assert len(runs[0]) == 32 and runs[1] == runs[0]


@pytest.mark.spec("9")
def test_busy_counts_the_calls_running_on_the_pool(pools):
    """busy() is the number of calls handed to a worker and not yet finished: 3 while three wait, 0 once each returned or raised."""
    pool, release, started = pools(keep=4, idle_s=10 * WAIT), threading.Event(), threading.Barrier(4, timeout=WAIT)

    def call(fail):
        started.wait()
        release.wait(WAIT)
        if fail:
            raise RuntimeError("a tool that raises")

    futures = [pool.submit(call, fail) for fail in (False, True, False)]
    started.wait()
    assert pool.busy() == 3
    release.set()
    assert [f.exception(WAIT) is None for f in futures] == [True, False, True]
    assert pool.busy() == 0


@pytest.mark.spec("9")
def test_idle_tool_threads_exit_after_idle_s(pools):
    """The threads a pool keeps after a batch exit once they have had no call for idle_s."""
    pool, threads, at_once = pools(keep=4, idle_s=0.2), set(), threading.Barrier(4, timeout=WAIT)

    def call():
        threads.add(threading.current_thread())
        at_once.wait()

    for future in [pool.submit(call) for _ in range(4)]:
        future.result(WAIT)
    assert len(threads) == 4
    assert _alive_at_most(threads, 0) == []


@pytest.mark.spec("9")
def test_threads_that_retired_or_were_retired_end_cleanly_and_the_pool_still_serves_calls(pools, monkeypatch):
    """Idle threads that time out, and idle threads ended by retire_idle, exit without an error; a call submitted after either still runs."""
    errors = []
    monkeypatch.setattr(threading, "excepthook", errors.append)
    for retire in ("timed out", "retire_idle"):
        pool = pools(keep=2, idle_s=0.2 if retire == "timed out" else 10 * WAIT)
        tool, threads = _burst(2)
        for future in [pool.submit(tool.execute, f"id_{i}", {}, None, None) for i in range(2)]:
            future.result(WAIT)
        if retire == "retire_idle":
            pool.retire_idle()
        assert _alive_at_most(threads, 0) == [], retire
        assert pool.submit(lambda: 42).result(WAIT) == 42, retire
    assert errors == []


class _RetireAfterASubmit:
    """The pool's lock, with one interleaving forced: the worker's look after its idle wait (``_retire``) waits until a submit has handed it a call."""

    def __init__(self, lock):
        self.lock, self.armed, self.retiring, self.submitted = lock, False, threading.Event(), threading.Event()

    def __enter__(self):
        if self.armed and threading.current_thread().name.startswith("yiemagent-tool"):
            self.armed = False
            self.retiring.set()
            assert self.submitted.wait(WAIT)
        return self.lock.__enter__()

    def __exit__(self, *exc_info):
        return self.lock.__exit__(*exc_info)


@pytest.mark.spec("9")
def test_a_call_handed_to_a_thread_just_as_its_idle_wait_ends_still_runs(pools):
    """A submit that takes an idle thread off the stack just as its idle_s runs out gives it the call: the thread runs it instead of exiting."""
    pool = pools(keep=1, idle_s=0.2)
    lock = pool._lock = _RetireAfterASubmit(pool._lock)
    pool.submit(lambda: None).result(WAIT)
    lock.armed = True  # the worker, idle now, next takes the lock when its idle wait has ended
    assert lock.retiring.wait(WAIT)
    future = pool.submit(lambda: 42)
    lock.submitted.set()
    assert future.result(WAIT) == 42


@pytest.mark.spec("9")
def test_an_idle_tool_thread_holds_nothing_of_the_call_it_ran(pools):
    """Once a call has ended, the worker kept for the next one holds no reference to its arguments or result."""
    import gc
    import weakref

    class Owner:  # stands for the agent whose context and call a worker ran
        pass

    pool, owner = pools(idle_s=10 * WAIT), Owner()
    refs = [weakref.ref(owner)]
    result = pool.submit(lambda o: Owner(), owner).result(WAIT)
    refs.append(weakref.ref(result))
    del owner, result
    deadline = time.monotonic() + WAIT
    while any(ref() is not None for ref in refs) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    assert [ref() for ref in refs] == [None, None] and len(pool._idle) == 1


@pytest.mark.spec("9")
def test_sequential_runs_in_call_order_one_at_a_time():
    """Sequential execution runs each call to completion before the next starts."""
    order = []

    def tool(name):
        def execute(*a):
            order.append(f"start {name}")
            order.append(f"end {name}")
            return text_result(name)

        return make_tool(name, execute)

    batch = execute_tool_calls_sequential(context_with(tool("a"), tool("b")), ASSISTANT, calls("b", "a", "b"), SEQUENTIAL, None, None)
    assert order == ["start b", "end b", "start a", "end a", "start b", "end b"]
    assert texts(batch) == ["b", "a", "b"]


@pytest.mark.spec("9")
def test_parallel_runs_concurrently_proven_with_a_barrier():
    """All calls of a parallel batch are running at the same time: a barrier of N parties is passed."""
    n = 8
    barrier = threading.Barrier(n, timeout=WAIT)

    def execute(tool_call_id, args, signal, on_partial_result):
        barrier.wait()  # raises BrokenBarrierError unless all n calls run at once
        return text_result(tool_call_id)

    tool = make_tool("meet", execute, parallel=True)
    batch = execute_tool_calls_parallel(context_with(tool), ASSISTANT, calls(*["meet"] * n), PARALLEL, None, None)
    assert not any(m.is_error for m in batch.messages), texts(batch)


@pytest.mark.spec("9")
def test_parallel_results_come_back_in_call_order_whatever_finishes_first():
    """Decision 6: the last call finishes first, yet results are in call order."""
    n = 5
    gates = [threading.Event() for _ in range(n)]

    def execute(tool_call_id, args, signal, on_partial_result):
        index = int(tool_call_id.split("_")[1])
        if index + 1 < n:
            assert gates[index + 1].wait(WAIT)  # wait until the next call has finished
        gates[index].set()
        return text_result(tool_call_id)

    tool = make_tool("chain", execute, parallel=True)
    batch = execute_tool_calls_parallel(context_with(tool), ASSISTANT, calls(*["chain"] * n), PARALLEL, None, None)
    assert [m.tool_call_id for m in batch.messages] == [f"id_{i}" for i in range(n)]
    assert texts(batch) == [f"id_{i}" for i in range(n)]


@pytest.mark.spec("9")
def test_parallel_prepares_in_call_order_before_running():
    """Preparation (validation, before hook) happens in call order in the calling thread."""
    prepared = []

    def before(ctx, signal):
        prepared.append((ctx.tool_call.id, threading.current_thread().name))


    config = AgentLoopConfig(before_tool_call=before, tool_execution="parallel")
    tool = make_tool("p", parallel=True)
    execute_tool_calls_parallel(context_with(tool), ASSISTANT, calls("p", "p", "p"), config, None, None)
    assert prepared == [(f"id_{i}", threading.current_thread().name) for i in range(3)]


@pytest.mark.spec("9")
def test_parallel_pool_is_never_smaller_than_the_batch():
    """A batch of 32 calls has 32 calls running at once (the pool grows to the batch)."""
    n = 32
    barrier = threading.Barrier(n, timeout=WAIT)
    tool = make_tool("wide", lambda *a: (barrier.wait(), text_result("ok"))[1], parallel=True)
    batch = execute_tool_calls_parallel(context_with(tool), ASSISTANT, calls(*["wide"] * n), PARALLEL, None, None)
    assert texts(batch) == ["ok"] * n


@pytest.mark.spec("9")
@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_abort_mid_batch_answers_every_remaining_call(mode):
    """Decision 1: after the signal fires, every call not yet run is answered "Operation aborted"."""
    signal = AbortSignal()

    def first(tool_call_id, args, sig, on_partial_result):
        sig.abort()
        return text_result("did it")

    ran = []
    ctx = context_with(make_tool("first", first, parallel=True), make_tool("later", lambda *a: ran.append(1), parallel=True))
    run = execute_tool_calls_sequential if mode == "sequential" else execute_tool_calls_parallel
    if mode == "parallel":
        # in parallel mode the abort must come during preparation of the second call
    
        config = AgentLoopConfig(before_tool_call=lambda c, s: s.abort() if c.tool_call.id == "id_1" else None)
    else:
        config = SEQUENTIAL
    batch = run(ctx, ASSISTANT, calls("first", "later", "later"), config, signal, None)
    assert [m.tool_call_id for m in batch.messages] == ["id_0", "id_1", "id_2"]
    assert texts(batch)[1:] == ["Operation aborted", "Operation aborted"]
    assert all(m.is_error for m in batch.messages[1:]) and ran == []


@pytest.mark.spec("10")
def test_should_terminate_requires_every_result_to_ask():
    """terminate is true only for a non-empty batch whose every result asks for it."""
    yes = FinalizedOutcome(AgentToolCall("a", "t", {}), text_result("x", terminate=True), False)
    no = FinalizedOutcome(AgentToolCall("b", "t", {}), text_result("x"), False)
    assert should_terminate([yes, yes]) is True
    assert should_terminate([yes, no]) is False
    assert should_terminate([]) is False


@pytest.mark.spec("10")
@pytest.mark.parametrize("mode", [SEQUENTIAL, PARALLEL])
def test_batch_terminates_only_when_all_tools_ask(mode):
    """A batch of terminating tools terminates; one non-terminating or failing call prevents it."""
    stop = make_tool("stop", lambda *a: text_result("done", terminate=True), parallel=True)
    go = make_tool("go", parallel=True)
    ctx = context_with(stop, go)
    assert execute_tool_calls(ctx, ASSISTANT, calls("stop", "stop"), mode, None, None).terminate is True
    assert execute_tool_calls(ctx, ASSISTANT, calls("stop", "go"), mode, None, None).terminate is False
    assert execute_tool_calls(ctx, ASSISTANT, calls("stop", "missing"), mode, None, None).terminate is False
    assert execute_tool_calls(ctx, ASSISTANT, [], mode, None, None).terminate is False  # a batch of no call never terminates


@pytest.mark.spec("11")
def test_batch_messages_are_tool_result_messages_in_call_order():
    """The batch holds one ToolResultMessage per call, bound to its id and name."""
    ctx = context_with(make_tool("a"), make_tool("b"))
    batch = execute_tool_calls(ctx, ASSISTANT, calls("a", "b", "zzz"), SEQUENTIAL, None, None)
    assert [(m.tool_call_id, m.tool_name, m.is_error, m.role) for m in batch.messages] == [
        ("id_0", "a", False, "tool"),
        ("id_1", "b", False, "tool"),
        ("id_2", "zzz", True, "tool"),
    ]


@pytest.mark.spec("12")
@pytest.mark.parametrize("mode", [SEQUENTIAL, PARALLEL], ids=["sequential", "parallel"])
@pytest.mark.parametrize("broken, listened", [("finalize_executed_tool_call", True), ("call_tool", False)], ids=["three-phases", "plain-call"])
def test_a_bug_inside_the_library_still_answers_the_call_and_logs_it(mode, broken, listened, monkeypatch, caplog):
    """A fault injected into the library itself (FINALIZE on the three phases' way, the tool's run on the plain call's
    way, batch._plain_call, taken when nobody listens) must not lose the call: its result is an error naming the tool
    and the exception, the end event carries it, and the log says which tool."""

    def broken_step(*args, **kwargs):
        raise RuntimeError(f"{broken} is broken")

    monkeypatch.setattr(batch_module, broken, broken_step)
    recorder = EventRecorder() if listened else None
    ctx = context_with(make_tool("a", parallel=True))
    with caplog.at_level("ERROR", logger="yiemagent.batch"):
        batch = execute_tool_calls(ctx, ASSISTANT, calls("a"), mode, AbortSignal(), recorder)
    [message] = batch.messages
    assert (message.tool_call_id, message.tool_name, message.is_error) == ("id_0", "a", True)
    assert message.content[0].text == f"Internal error running tool 'a': RuntimeError: {broken} is broken"
    if recorder is not None:
        [end] = recorder.of_type(ToolExecEndEvent)
        assert (end.tool_call_id, end.tool_name, end.is_error) == ("id_0", "a", True)
        assert end.result.content[0].text == message.content[0].text
    assert [r.getMessage() for r in caplog.records] == ["internal error while running tool 'a'"]
    assert caplog.records[0].exc_info[1].args == (f"{broken} is broken",)


@pytest.mark.spec("13")
@pytest.mark.parametrize("mode", [SEQUENTIAL, PARALLEL], ids=["sequential", "parallel"])
def test_end_events_name_the_tool_whether_it_ran_or_ended_in_prepare(mode):

    recorder = EventRecorder()
    ctx = context_with(make_tool("a", parallel=True))
    execute_tool_calls(ctx, ASSISTANT, calls("a", "nosuch"), mode, None, recorder)
    ends = recorder.of_type(ToolExecEndEvent)
    assert sorted((e.tool_call_id, e.tool_name, e.is_error) for e in ends) == [("id_0", "a", False), ("id_1", "nosuch", True)]


@pytest.mark.spec("13")
@pytest.mark.parametrize("mode", [SEQUENTIAL, PARALLEL], ids=["sequential", "parallel"])
def test_a_deferred_call_ends_awaiting_approval_not_as_an_error_and_has_no_message(mode):
    """Decision 18 (docs/api.md "Approvals that wait for a person"): the end event of a call before_tool_call
    deferred carries "Awaiting approval: <reason>" with details {"deferred": True, "reason": ...}, not an
    error; the batch lists it as deferred and has no message for it."""

    def before(ctx, signal):
        return {"defer": True, "reason": "needs a person"} if ctx.tool_call.id == "id_1" else None

    recorder = EventRecorder()
    config = AgentLoopConfig(before_tool_call=before, tool_execution=mode.tool_execution)
    batch = execute_tool_calls(context_with(make_tool("a", parallel=True)), ASSISTANT, calls("a", "a"), config, None, recorder)
    assert [m.tool_call_id for m in batch.messages] == ["id_0"]
    assert batch.deferred == [PendingApproval("id_1", "a", {}, "needs a person")]
    waiting = AgentToolResult([TextContent("Awaiting approval: needs a person")], {"deferred": True, "reason": "needs a person"})
    assert recorder.for_call("id_1")[1:] == [ToolExecEndEvent("id_1", "a", waiting, False)]


@pytest.mark.spec("8")
@pytest.mark.parametrize("mode", [SEQUENTIAL, PARALLEL], ids=["sequential", "parallel"])
def test_hooks_and_tools_get_the_batchs_assistant_message_context_and_signal(mode):
    """Spec §14: both hooks see the assistant message and the context; the tool and the after
    hook get the batch's signal, in either mode (the parallel path passes them on its own)."""

    seen = []

    def before(ctx, signal):
        seen.append(("before", ctx.assistant_message, ctx.context, signal))

    def after(ctx, signal):
        seen.append(("after", ctx.assistant_message, ctx.context, signal))

    def execute(tool_call_id, args, signal, on_partial_result):
        seen.append(("tool", None, None, signal))
        return text_result("ok")

    signal = AbortSignal()
    context = context_with(make_tool("a", execute, parallel=True))
    config = AgentLoopConfig(before, after, mode.tool_execution)
    batch = execute_tool_calls(context, ASSISTANT, calls("a"), config, signal, None)
    assert texts(batch) == ["ok"]
    assert [s[0] for s in seen] == ["before", "tool", "after"]
    for stage, message, hook_context, hook_signal in seen:
        assert hook_signal is signal, stage
        if stage != "tool":
            assert message is ASSISTANT and hook_context is context, stage


@pytest.mark.spec("9")
def test_a_forked_child_runs_its_calls_on_threads_of_its_own(pools):
    """A process forked while the pool has an idle thread and a call running runs its own calls on its own threads, and counts none of the parent's calls as running."""
    import os

    pool, release = pools(idle_s=10 * WAIT), threading.Event()
    running = pool.submit(release.wait, WAIT)
    pool.submit(lambda: None).result(WAIT)  # on a second thread, idle again once its result is in
    assert len(pool._idle) == 1 and pool.busy() == 1
    try:
        pid = os.fork()
        if pid == 0:  # the child: exit status 0 only if the call ran and nothing else counts as running
            try:
                ok = pool.busy() == 0 and pool.submit(lambda: 42).result(WAIT) == 42 and pool.busy() == 0
            except BaseException:
                ok = False
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
    assert os.waitstatus_to_exitcode(status) == 0
    assert running.result(WAIT) is True


@pytest.mark.spec("9")
def test_a_pools_threads_are_named_by_the_order_they_were_started_in(pools):
    """A pool's first thread is yiemagent-tool_1 and the next one started yiemagent-tool_2: a thread in a dump says which pool thread it is."""
    pool, at_once = pools(keep=2, idle_s=10 * WAIT), threading.Barrier(2, timeout=WAIT)

    def meet():
        at_once.wait()
        return threading.current_thread().name

    assert sorted(f.result(WAIT) for f in [pool.submit(meet) for _ in range(2)]) == ["yiemagent-tool_1", "yiemagent-tool_2"]


@pytest.mark.spec("9")
def test_a_light_load_is_served_by_the_thread_that_went_idle_last(pools):
    """Calls one after another on a pool holding 8 idle threads all run on the same one: the other 7 are left to retire."""
    pool, threads, at_once = pools(keep=8, idle_s=10 * WAIT), set(), threading.Barrier(8, timeout=WAIT)

    def meet():
        at_once.wait()

    for future in [pool.submit(meet) for _ in range(8)]:
        future.result(WAIT)
    for _ in range(20):
        pool.submit(lambda: threads.add(threading.current_thread())).result(WAIT)
    assert len(threads) == 1


@pytest.mark.spec("9")
def test_calls_submitted_from_many_threads_all_run_and_the_bound_holds(pools):
    """64 threads submit at once, 20 times over, to a pool that keeps 8: every call runs, and at most 8 threads stay."""
    pool = pools(keep=8, idle_s=10 * WAIT)
    for _ in range(20):
        start, release, threads = threading.Barrier(64, timeout=WAIT), threading.Event(), set()
        futures, failures = [], []

        def call():
            threads.add(threading.current_thread())
            return release.wait(WAIT)

        def submit():
            start.wait()
            try:
                futures.append(pool.submit(call))
            except RuntimeError as exc:
                failures.append(exc)

        submitters = [threading.Thread(target=submit) for _ in range(64)]
        for thread in submitters:
            thread.start()
        for thread in submitters:
            thread.join(WAIT)
        release.set()
        assert not failures and [f.result(WAIT) for f in futures] == [True] * 64
        assert len(_alive_at_most(threads, 8)) <= 8 and len(pool._idle) <= 8


@pytest.mark.spec("8.1")
@pytest.mark.parametrize("mode", [SEQUENTIAL, PARALLEL], ids=["sequential", "parallel"])
def test_arguments_a_schema_beyond_the_fast_check_refuses_never_reach_the_tool_on_the_short_way(mode):
    """Decision 4 on the plain call: a schema the fast check leaves to jsonschema, with no top-level type (so that null would pass it), refuses arguments it refuses and the tool never runs."""
    ran = []
    schema = {"properties": {"city": {"type": "string", "minLength": 2}}}
    tool = make_tool("a", lambda *a: ran.append(a[1]) or text_result("ran"), schema=schema, parallel=True)
    ctx = context_with(tool)
    [bad] = execute_tool_calls(ctx, ASSISTANT, [AgentToolCall("id_0", "a", {"city": "x"})], mode, None, None).messages
    [good] = execute_tool_calls(ctx, ASSISTANT, [AgentToolCall("id_1", "a", {"city": "Tokyo"})], mode, None, None).messages
    assert (bad.is_error, good.is_error) == (True, False)
    assert bad.content[0].text.startswith("Invalid arguments for tool 'a': city: 'x' is too short")
    assert ran == [{"city": "Tokyo"}]


@pytest.mark.spec("14")
@pytest.mark.parametrize("run", [execute_tool_calls_sequential, execute_tool_calls_parallel], ids=["sequential", "parallel"])
def test_the_hooks_see_the_batchs_assistant_message_and_context_and_its_events_reach_the_sink(run):
    """Each call of a batch run by execute_tool_calls_sequential or _parallel shows both hooks the assistant message and the context the batch was given, its tool gets the batch's signal, and its events reach the sink given."""
    seen, signals, signal = [], [], AbortSignal()

    def execute(tool_call_id, args, given, on_partial_result):
        signals.append(given)
        return text_result("ran")

    config = AgentLoopConfig(
        before_tool_call=lambda c, s: seen.append(("before", c.tool_call.id, c.assistant_message, c.context.system_prompt)),
        after_tool_call=lambda c, s: seen.append(("after", c.tool_call.id, c.assistant_message, c.context.system_prompt)),
    )
    recorder = EventRecorder()
    tools = context_with(make_tool("a", execute, parallel=True), make_tool("b", execute, parallel=True))
    batch = run(tools, ASSISTANT, calls("a", "b"), config, signal, recorder)
    assert [m.is_error for m in batch.messages] == [False, False]
    assert signals == [signal, signal]
    assert sorted(seen, key=lambda s: (s[0], s[1])) == [
        (when, call_id, ASSISTANT, "You are a test.") for when in ("after", "before") for call_id in ("id_0", "id_1")
    ]
    assert sorted(end.tool_call_id for end in recorder.of_type(ToolExecEndEvent)) == ["id_0", "id_1"]


@pytest.mark.spec("13")
@pytest.mark.parametrize("mode", [SEQUENTIAL, PARALLEL], ids=["sequential", "parallel"])
def test_a_partial_result_reported_when_nobody_listens_is_taken_and_the_call_ends_with_what_it_returned(mode):
    """A batch of one call with no sink (batch._plain_call's way): the tool's partial result is taken (True) and its result is what it returned."""
    answers = []

    def execute(tool_call_id, args, signal, on_partial_result):
        answers.append(on_partial_result("half"))
        return text_result("done")

    [message] = execute_tool_calls(context_with(make_tool("a", execute, parallel=True)), ASSISTANT, calls("a"), mode, None, None).messages
    assert (message.is_error, message.content[0].text, answers) == (False, "done", [True])


_SET_BY_A_TOOL = contextvars.ContextVar("set_by_a_tool", default="unset")


def test_a_sequential_batch_runs_its_calls_in_one_context_on_the_short_way_as_on_the_three_phases():
    """A sequential batch runs its calls one after another in this thread's context whichever way each takes (batch._plain_call with no sink, the three phases with one): a context variable one call sets is seen by the next."""

    def execute(tool_call_id, args, signal, on_partial_result):
        seen = _SET_BY_A_TOOL.get()
        _SET_BY_A_TOOL.set(tool_call_id)
        return text_result(seen)

    ctx = context_with(make_tool("a", execute))
    for sink in (None, EventRecorder()):
        batch = contextvars.copy_context().run(execute_tool_calls, ctx, ASSISTANT, calls("a", "a"), SEQUENTIAL, None, sink)
        assert texts(batch) == ["unset", "id_0"], sink
