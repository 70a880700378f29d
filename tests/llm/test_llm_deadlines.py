"""The LLM calls' deadline_s on one watch thread (_threads.DeadlineWatch), not a timer thread per call (docs/performance.md)."""

from __future__ import annotations

import threading
import time

from helpers import WAIT
from localserver import LocalServer, Reply
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


def test_a_callback_that_raises_leaves_the_watch_running():
    """A bug in one callback is logged; the next deadline still fires."""
    watch, ran = DeadlineWatch(), threading.Event()
    watch.call_at(time.monotonic(), lambda: 1 / 0)
    watch.call_at(time.monotonic() + 0.01, ran.set)
    assert ran.wait(WAIT)


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
