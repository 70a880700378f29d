"""The LLM calls' deadline_s on one watch thread (_threads.DeadlineWatch), not a timer thread per call (docs/performance.md)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from helpers import WAIT
from localserver import LocalServer, Reply
from yiemagent import LLMError
from yiemagent._threads import DeadlineWatch
from yiemagent.llm import OpenAIClient

FINAL = {"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}


def test_callbacks_run_in_deadline_order_and_a_nearer_one_added_later_runs_first():
    """A deadline added after a farther one wakes the watch: the watch never sleeps past it."""
    watch, fired, done = DeadlineWatch(), [], threading.Event()
    now = time.monotonic()
    watch.call_at(now + 0.3, lambda: (fired.append("far"), done.set()))
    watch.call_at(now + 0.05, lambda: fired.append("near"))
    watch.call_at(now, lambda: fired.append("now"))
    assert done.wait(WAIT)
    assert fired == ["now", "near", "far"]


def test_a_callback_never_runs_before_its_deadline():
    """A deadline a little ahead is waited for: the callback runs at or after it, never as soon as it is near."""
    watch, ran_at, done = DeadlineWatch(), [], threading.Event()
    when = time.monotonic() + 0.3
    watch.call_at(when, lambda: (ran_at.append(time.monotonic()), done.set()))
    assert done.wait(WAIT)
    assert ran_at[0] >= when


def test_a_cancelled_deadline_never_runs_and_does_not_stay_in_the_heap():
    """A call that ends before its deadline cancels it; 1,000 such calls leave the heap small."""
    watch, fired = DeadlineWatch(), []
    cancels = [watch.call_at(time.monotonic() + 600, lambda: fired.append("late")) for _ in range(1000)]
    for cancel in cancels:
        cancel()
        cancel()  # twice: harmless
    assert len(watch._heap) <= 64 and not fired
    ran = threading.Event()
    watch.call_at(time.monotonic(), ran.set)
    assert ran.wait(WAIT) and not fired


def test_a_callback_that_raises_leaves_the_watch_running(caplog):
    """A bug in one callback is logged, with its traceback; the next deadline still fires."""
    watch, ran = DeadlineWatch(), threading.Event()
    with caplog.at_level(logging.ERROR, logger="yiemagent.run"):
        watch.call_at(time.monotonic(), lambda: 1 / 0)
        watch.call_at(time.monotonic() + 0.01, ran.set)
        assert ran.wait(WAIT)
    (record,) = [r for r in caplog.records if r.name == "yiemagent.run"]
    assert record.getMessage() == "a deadline callback failed" and record.exc_info[0] is ZeroDivisionError


def hold(watch: DeadlineWatch) -> threading.Event:
    """Keep the watch's thread busy in a callback until the returned event is set."""
    go, held = threading.Event(), threading.Event()
    watch.call_at(time.monotonic(), lambda: (held.set(), go.wait(WAIT)))
    assert held.wait(WAIT)
    return go


def test_deadlines_at_the_same_instant_run_in_the_order_they_were_added():
    """Equal deadlines are no tie to break at random: they run first added, first run."""
    watch, fired, done = DeadlineWatch(), [], threading.Event()
    go = hold(watch)
    when = time.monotonic()
    for name in ("a", "b", "c"):
        watch.call_at(when, lambda name=name: fired.append(name))
    watch.call_at(when, done.set)
    go.set()
    assert done.wait(WAIT)
    assert fired == ["a", "b", "c"]


def test_each_callback_runs_once_when_deadlines_come_one_after_another():
    """A deadline added while the watch is idle runs once, and only its own callback runs."""
    watch, fired = DeadlineWatch(), []
    for n in range(20):
        done = threading.Event()
        watch.call_at(time.monotonic(), lambda n=n, done=done: (fired.append(n), done.set()))
        assert done.wait(WAIT)
    assert fired == list(range(20))


def test_cancelled_deadlines_are_dropped_once_they_are_more_than_32_and_more_than_half_of_the_heap():
    """Cancelling is cheap: the heap is cleaned only when its cancelled deadlines are both more
    than 32 and more than half of it, then counted afresh; those the watch dropped itself (at
    the head of the heap) no longer count."""
    watch, fired, dropped = DeadlineWatch(), [], threading.Event()
    go = hold(watch)
    now = time.monotonic()
    for cancel in [watch.call_at(now, lambda: fired.append("cancelled")) for _ in range(10)]:
        cancel()
    watch.call_at(now, dropped.set)  # after the 10 cancelled ones: the watch drops them first
    go.set()
    assert dropped.wait(WAIT) and watch._heap == []

    far = time.monotonic() + 600
    cancels = [watch.call_at(far, lambda: fired.append("far")) for _ in range(66)]
    for cancel in cancels[:33]:
        cancel()
    assert len(watch._heap) == 66  # 33 of 66: not more than half
    cancels[33]()
    assert len(watch._heap) == 32  # 34 of 66: cleaned

    cancels += [watch.call_at(far, lambda: fired.append("far")) for _ in range(8)]
    for cancel in cancels[34:66]:
        cancel()
    assert len(watch._heap) == 40  # 32 of 40: not more than 32
    cancels[66]()
    assert len(watch._heap) == 7  # 33 of 40: cleaned
    for cancel in cancels:
        cancel()
    assert not fired


def test_an_llm_call_with_a_deadline_starts_no_thread_of_its_own():
    """While a request is in flight, the threads alive hold no timer of that call: the process's one watch serves it."""
    seen = []

    def respond(request):
        seen.append({t.name for t in threading.enumerate() if not t.name.startswith("Thread-")} | {"a timer" for t in threading.enumerate() if isinstance(t, threading.Timer)})
        return Reply(body=FINAL)

    with LocalServer(respond) as server:
        client = OpenAIClient(server.url, "m", max_retries=0, deadline_s=30)
        for _ in range(3):
            assert client({"messages": [{"role": "user", "content": "hi"}]}).text == "ok"
    assert all("yiemagent-deadlines" in names for names in seen)
    assert not [name for names in seen for name in names if name == "a timer" or "llm-deadline" in name]


def test_an_openai_clients_deadline_s_ends_a_call_the_server_holds_past_it():
    """``OpenAIClient(deadline_s=0.5)`` ends a call whose server holds its headers back, naming that deadline, not the default of 600 s."""
    release = threading.Event()
    with LocalServer(lambda request: Reply(body=FINAL, before=lambda: release.wait(WAIT))) as server:
        try:
            with pytest.raises(LLMError) as info:
                OpenAIClient(server.url, "m", max_retries=0, deadline_s=0.5)({"messages": [{"role": "user", "content": "hi"}]})
        finally:
            release.set()
    assert "did not finish within deadline_s=0.5" in str(info.value)
