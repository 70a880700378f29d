"""One run through its RunHost (spec §6 ``_processMessage``, §10; decisions 11, 13, 15, 16): exact responses,
events, log lines and tool results, and the run thread (``RunWorker``)."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace

import pytest

from helpers import WAIT, BareHost, EventRecorder, ResultFailsOnceHost, StrictLLM, call, calls_reply, make_tool, text_result
from yiemagent import (
    AgentLoopConfig,
    AgentToolResult,
    ApprovalMessage,
    AssistantMessage,
    ImageContent,
    LLMUsage,
    MessageFormatError,
    TextContent,
    ToolResultMessage,
    UserMessage,
)
from yiemagent.events import AgentRunEndEvent, AgentRunStartEvent, EventEmitter, LLMCallEndEvent, LLMCallStartEvent
from yiemagent.formatting import format_msg_for_llm, prepare_context
from yiemagent.run import CONTINUE, Run, add_late_sub_run_usage, process_message
from yiemagent._threads import RunWorker



def recorded_host(llm, queued, **kwargs):
    recorder = EventRecorder()
    host = BareHost(llm, queued, **kwargs)
    host.emit = EventEmitter(recorder)
    return host, recorder


def timed_run(host, run):
    """process_message, with the wall time around it (an upper bound for the durations it reports)."""
    started = time.perf_counter()
    response = process_message(host, run)
    return response, time.perf_counter() - started


@pytest.mark.spec("10")
def test_an_abort_without_a_reason_during_the_llm_call_ends_the_run_aborted_with_exact_texts_and_events():
    """The reply of an aborted call is dropped; the response says "Run aborted." and gives the default reason."""
    run = Run(7)

    def aborting(formatted):
        run.signal.abort()
        return AssistantMessage([TextContent("late")], usage=LLMUsage(input_tokens=3, output_tokens=2, total_tokens=5))

    host, recorder = recorded_host(StrictLLM(aborting), ["go"])
    response, elapsed = timed_run(host, run)

    assert response.stop_reason == "aborted" and response.error_message == "aborted by abort()"
    assert [(type(b), b.text) for b in response.content] == [(TextContent, "Run aborted.")]
    assert host.state.error_message is None  # only an "error" response sets it
    assert [type(m) for m in host.appended] == [UserMessage]
    (start,) = recorder.of_type(LLMCallStartEvent)
    assert (start.run_id, start.round, start.message_count) == (7, 1, 1)
    (end,) = recorder.of_type(LLMCallEndEvent)
    assert (end.run_id, end.round, end.response, end.error) == (7, 1, None, "aborted during the LLM call: aborted by abort()")
    assert end.usage == LLMUsage(input_tokens=3, output_tokens=2, total_tokens=5)
    assert 0 <= end.duration_s <= elapsed
    (run_end,) = recorder.of_type(AgentRunEndEvent)
    assert (run_end.run_id, run_end.response, run_end.rounds) == (7, response, 1)
    assert run_end.usage == LLMUsage(input_tokens=3, output_tokens=2, total_tokens=5)
    assert isinstance(run_end.duration_s, float) and 0 <= run_end.duration_s <= elapsed


def test_a_failure_after_one_result_answers_only_the_unanswered_call_and_logs_why(caplog):
    """A bug mid-batch: the call that has its result keeps it alone; the other gets an error result naming the failure."""

    class FlakyHost(BareHost):
        results = 0

        def append(self, message):
            if isinstance(message, ToolResultMessage):
                self.results += 1
                if self.results == 2:
                    raise RuntimeError("history store failed")
            super().append(message)

    host = FlakyHost(StrictLLM(calls_reply(call("c1", "work", {}), call("c2", "work", {}))), ["go"])
    host.state.tools = {"work": make_tool("work", lambda *a: text_result("worked"))}
    with caplog.at_level(logging.DEBUG, logger="yiemagent.run"):
        response = process_message(host, Run(3))

    why = "internal error: RuntimeError: history store failed"
    assert (response.stop_reason, response.error_message, response.content) == ("error", why, [])
    assert host.state.error_message == why
    results = [m for m in host.appended if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.tool_name, m.is_error, m.details) for m in results] == [
        ("c1", "work", False, {}),
        ("c2", "work", True, {}),
    ]
    assert [b.text for b in results[0].content] == ["worked"]
    assert [b.text for b in results[1].content] == [f"The tool call was not completed: {why}"]
    # above DEBUG: the run's start and end are DEBUG records (docs/tracing.md "Logging")
    records = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records if r.name == "yiemagent.run" and r.levelno > logging.DEBUG]
    assert records == [("ERROR", "run 3 failed", True), ("WARNING", f"run ended with an error: {why}", False)]


def test_the_context_hooks_get_the_runs_event_sink_and_a_raising_hook_is_named_with_its_error():
    """prepare_context and format_msg_for_llm are called with the agent's emitter; a hook that raises ends the run "error" naming it."""
    host, _ = recorded_host(StrictLLM(), ["go"])
    sinks = []

    def prepare(state, sink):
        sinks.append(("prepare", sink))
        return prepare_context(state)

    def format_(ctx, sink):
        sinks.append(("format", sink))
        return format_msg_for_llm(ctx)

    host.prepare_context, host.format_msg_for_llm = prepare, format_
    assert process_message(host, Run(1)).content[0].text == "done"
    assert sinks == [("prepare", host.emit), ("format", host.emit)]

    for hook, error in (("prepare_context", RuntimeError("no context")), ("format_msg_for_llm", ValueError("no format"))):

        def failing(ctx_or_state, sink, error=error):
            raise error

        host, _ = recorded_host(StrictLLM(), ["go"])
        setattr(host, hook, failing)
        response = process_message(host, Run(1))
        assert (response.stop_reason, response.error_message) == ("error", f"{hook} raised {type(error).__name__}: {error}")


def test_a_reply_with_stop_reason_error_ends_the_run_with_its_message_or_a_default_one():
    """An llm_call that reports its failure: the reply is the response, with "llm_call returned stop_reason 'error'"
    when it gave no error_message; it does not enter the history."""
    host = BareHost(StrictLLM(AssistantMessage([TextContent("partial")], stop_reason="error")), ["go"])
    response = process_message(host, Run(1))
    assert (response.stop_reason, response.error_message) == ("error", "llm_call returned stop_reason 'error'")
    assert [b.text for b in response.content] == ["partial"]
    assert host.state.error_message == "llm_call returned stop_reason 'error'"
    assert [type(m) for m in host.appended] == [UserMessage]

    host = BareHost(StrictLLM(AssistantMessage([TextContent("partial")], stop_reason="error", error_message="quota")), ["go"])
    response = process_message(host, Run(1))
    assert (response.stop_reason, response.error_message, [b.text for b in response.content]) == ("error", "quota", ["partial"])


@pytest.mark.spec("13")
def test_usage_that_is_not_an_llm_usage_of_a_reply_counts_nothing():
    """Only an AssistantMessage's LLMUsage counts: a look-alike usage, or a usage on a reply that is not an
    AssistantMessage, adds nothing to the run's usage."""
    look_alike = SimpleNamespace(input_tokens=5, output_tokens=7, total_tokens=12)
    host, recorder = recorded_host(StrictLLM(AssistantMessage([TextContent("hi")], usage=look_alike)), ["go"])
    assert process_message(host, Run(1)).content[0].text == "hi"
    assert host.usage == [LLMUsage()]
    assert recorder.of_type(LLMCallEndEvent)[0].usage is None

    not_a_message = SimpleNamespace(usage=LLMUsage(input_tokens=5, output_tokens=7, total_tokens=12))
    host, recorder = recorded_host(StrictLLM(not_a_message), ["go"])
    response = process_message(host, Run(1))
    assert response.error_message == "llm_call returned SimpleNamespace; expected an AssistantMessage"
    assert host.usage == [LLMUsage()]
    assert recorder.of_type(LLMCallEndEvent)[0].usage is None


@pytest.mark.spec("6")
def test_once_closing_the_next_round_asks_for_no_input():
    """RunHost: the run takes no input once ``closing`` (shutdown returns it), but goes on with its rounds."""

    class ClosingHost(BareHost):
        asked_while_closing = 0

        def take_input(self):
            if self.closing:
                self.asked_while_closing += 1
            return super().take_input()

    def execute(*args):
        host.closing = True
        host._queued.append("late")
        return text_result("ok")

    host = ClosingHost(StrictLLM(calls_reply(call("c1", "work", {}))), ["go"])
    host.state.tools = {"work": make_tool("work", execute)}
    response = process_message(host, Run(1))
    assert response.content[0].text == "done"
    assert host.asked_while_closing == 0 and host._queued == ["late"]
    assert [m.content[0].text for m in host.appended if isinstance(m, UserMessage)] == ["go"]


@pytest.mark.spec("14")
def test_a_before_hook_sees_the_reply_in_the_history_and_the_rounds_context():
    """The batch gets the reply that entered the history, the round's system prompt, and the history up to the reply."""
    seen = []

    def before(ctx, signal):
        seen.append(ctx)

    host = BareHost(StrictLLM(calls_reply(call("c1", "work", {}))), ["go"])
    host.state.tools = {"work": make_tool("work")}
    host.state.system_prompt = "be brief"
    host._config = AgentLoopConfig(before_tool_call=before)
    process_message(host, Run(1))
    (ctx,) = seen
    assert ctx.assistant_message is host.appended[1]
    assert ctx.context.system_prompt == "be brief"
    assert ctx.context.messages == host.appended[:2]


def test_input_after_a_dropped_item_is_taken_and_the_drop_is_logged_with_the_item(caplog):
    """A bad item on the input channel is dropped (logged with its traceback); the items after it are taken."""
    bad = {"role": "system", "content": "x"}
    host, recorder = recorded_host(StrictLLM(), [bad, "a", "b"])
    with caplog.at_level(logging.ERROR, logger="yiemagent.run"):
        assert process_message(host, Run(1)).content[0].text == "done"
    assert recorder.of_type(AgentRunStartEvent)[0].new_messages == 2
    assert [m.content[0].text for m in host.appended if isinstance(m, UserMessage)] == ["a", "b"]
    (record,) = [r for r in caplog.records if r.name == "yiemagent.run"]
    assert record.levelname == "ERROR" and record.exc_info[0] is MessageFormatError
    assert record.getMessage() == f"dropped a message put on the input channel that is not a valid user message: {bad!r}"


@pytest.mark.spec("10")
def test_continue_with_only_a_dropped_item_still_runs_on_the_history():
    """continue_agent asked for the run: a dropped item next to it does not turn the run into an error."""
    host = BareHost(StrictLLM(), [CONTINUE, {"role": "system", "content": "x"}])
    host.state.messages.append(UserMessage([TextContent("earlier")]))
    response = process_message(host, Run(1))
    assert (response.stop_reason, response.content[0].text) == ("stop", "done")


@pytest.mark.spec("10")
def test_a_terminating_batch_collects_only_the_text_of_its_results():
    """The final response of a terminating batch: "Tool execution completed." and each text block; an image is left out."""
    image = ImageContent("aGk=", "image/png")

    def execute(*args):
        return AgentToolResult([TextContent("a"), image, TextContent("b")], {}, None, True)

    host = BareHost(StrictLLM(calls_reply(call("c1", "stop", {}))), ["go"])
    host.state.tools = {"stop": make_tool("stop", execute)}
    response = process_message(host, Run(1))
    assert response.stop_reason == "tool_use_terminated" and response.error_message is None
    assert [b.text for b in response.content] == ["Tool execution completed.", "a", "b"]
    assert host.state.error_message is None


@pytest.mark.spec("10")
def test_a_run_aborted_before_its_first_round_makes_no_llm_call_and_gives_the_abort_reason():
    llm = StrictLLM()
    run = Run(1)
    run.signal.abort("stopped by the test")
    response = process_message(BareHost(llm, ["go"]), run)
    assert (response.stop_reason, response.error_message) == ("aborted", "stopped by the test")
    assert [b.text for b in response.content] == ["Run aborted."]
    assert llm.requests == []


@pytest.mark.spec("16")
def test_a_run_whose_input_shutdown_took_ends_aborted_with_no_content_and_the_exact_reason():
    response = process_message(BareHost(StrictLLM(), [], closing=True), Run(1))
    assert (response.stop_reason, response.content) == ("aborted", [])
    assert response.error_message == "the agent was shut down before the run took its input"


def test_the_run_worker_is_a_named_daemon_thread_that_logs_a_failing_job_and_lives_on(caplog):
    worker = RunWorker("yiem-run-test")
    try:
        assert worker.thread.name == "yiem-run-test" and worker.thread.daemon
        done = threading.Event()

        def failing():
            raise RuntimeError("job bug")

        with caplog.at_level(logging.ERROR, logger="yiemagent.run"):
            worker.submit(failing)
            worker.submit(done.set)
            assert done.wait(WAIT), "the worker did not run the job after a failing one"
        (record,) = [r for r in caplog.records if r.name == "yiemagent.run"]
        assert record.getMessage() == "a run job failed" and record.exc_info[0] is RuntimeError
    finally:
        worker.stop()
        worker.thread.join(WAIT)
    assert not worker.thread.is_alive()


class _UsageReadOnce(AssistantMessage):
    """A reply whose usage raises AttributeError when first read, then reads as 5 tokens."""

    reads = 0

    @property
    def usage(self):
        type(self).reads += 1
        if type(self).reads == 1:
            raise AttributeError("usage not ready")
        return LLMUsage(input_tokens=5, total_tokens=5)

    @usage.setter
    def usage(self, value):
        pass


@pytest.mark.spec("13")
def test_a_reply_whose_usage_cannot_be_read_counts_no_usage_and_is_still_the_answer():
    """The run reads a reply's usage as an absent attribute when reading it raises AttributeError: no tokens, no failure."""
    host = BareHost(StrictLLM(_UsageReadOnce([TextContent("hi")])), ["go"])
    response = process_message(host, Run(1))
    assert (response.stop_reason, response.error_message, [b.text for b in response.content]) == (None, None, ["hi"])
    assert host.usage == [LLMUsage()]


@pytest.mark.spec("6")
def test_a_host_without_usage_limits_runs_without_limits():
    """RunHost: ``usage_limits`` came with UsageLimits; a host that has no such member runs as one whose limits are None."""
    host = BareHost(StrictLLM(calls_reply(call("c1", "work", {}))), ["go"])
    host.state.tools = {"work": make_tool("work")}
    del host.usage_limits
    response = process_message(host, Run(1))
    assert (response.stop_reason, response.error_message, response.content[0].text) == ("stop", None, "done")


class _AddedHost(BareHost):
    """A host whose ``add_message`` queue holds ``added`` when the run starts (messages added during the last run)."""

    def __init__(self, llm, added):
        super().__init__(llm, [])
        self._added = list(added)

    def take_added(self):
        taken, self._added = self._added, []
        return taken


def test_a_deferred_step_among_the_runs_input_holds_its_call_and_the_run_ends_awaiting_approval():
    """Decision 18: an approval step that comes with the run's input counts as one already in the history: the call it
    defers waits for a decision, and no LLM round is sent while that call has no result."""
    llm = StrictLLM()
    step = ApprovalMessage("c1", "delete", "deferred", {}, "deleting needs a person")
    host = _AddedHost(llm, [step])
    host.state.tools = {"delete": make_tool("delete")}
    host.state.messages += [UserMessage([TextContent("clean up")]), calls_reply(call("c1", "delete", {}))]
    response = process_message(host, Run(1))
    assert response.stop_reason == "awaiting_approval"
    assert [b.text for b in response.content] == ["Awaiting approval of 1 tool call(s): delete (c1): deleting needs a person"]
    assert host.appended == [step] and llm.requests == []


def test_a_failure_storing_an_approved_calls_result_still_answers_that_call():
    """Decision 1 with decision 18: the approval steps between the reply and the failure answer nothing, so the
    approved call whose result could not be appended gets the error result naming the failure."""

    host = ResultFailsOnceHost(StrictLLM(), [CONTINUE])
    host.state.tools = {"delete": make_tool("delete", lambda *a: text_result("deleted"))}
    host.state.messages += [
        UserMessage([TextContent("clean up")]),
        calls_reply(call("c1", "delete", {})),
        ApprovalMessage("c1", "delete", "deferred", {}, "deleting needs a person"),
        ApprovalMessage("c1", "delete", "approved", {}, ""),
    ]
    response = process_message(host, Run(1))
    why = "internal error: RuntimeError: history store failed"
    assert (response.stop_reason, response.error_message) == ("error", why)
    assert [(m.decision, m.tool_call_id) for m in host.appended if isinstance(m, ApprovalMessage)] == [("resumed", "c1")]
    results = [m for m in host.appended if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.tool_name, m.is_error) for m in results] == [("c1", "delete", True)]
    assert [b.text for b in results[0].content] == [f"The tool call was not completed: {why}"]


@pytest.mark.spec("13")
def test_late_sub_run_usage_joins_the_run_of_the_tool_thread_and_is_refused_outside_a_run():
    """add_late_sub_run_usage from a tool's thread adds to that run's usage (True); outside a run it takes nothing (False)."""
    late = LLMUsage(input_tokens=4, output_tokens=1, total_tokens=5)
    taken = []

    def execute(*args):
        taken.append(add_late_sub_run_usage(late))
        return text_result("ok")

    host = BareHost(StrictLLM(calls_reply(call("c1", "work", {}))), ["go"])
    host.state.tools = {"work": make_tool("work", execute)}
    assert process_message(host, Run(1)).content[0].text == "done"
    assert taken == [True] and host.usage == [late]
    assert add_late_sub_run_usage(late) is False


@pytest.mark.spec("6")
def test_input_that_arrives_after_the_run_took_its_own_waits_until_after_the_first_round():
    """Spec §6: step 1 reads the input once per round, the first time as the run starts; a message arriving
    after that read (here while the start event is emitted) is not in the first round: it joins at the next
    round (after tool calls), or the next run."""
    seen = []

    def llm(formatted):
        seen.append([m["content"] for m in formatted["messages"] if m["role"] == "user"])
        return AssistantMessage([TextContent("answered")])

    host = BareHost(StrictLLM(llm), ["first"])

    def sink(event):
        if isinstance(event, AgentRunStartEvent):
            host._queued.append("second")  # sent just after the run read its input

    host.emit = EventEmitter(sink)
    response = process_message(host, Run(1))
    assert response.content == [TextContent("answered")]
    assert seen == [["first"]]
    assert host.take_input() == ["second"]  # still queued: the next run's
