"""``stream(agent, message)``: one run's events as they happen, its text, its reply (docs/streaming.md "Iterating over a run")."""

from __future__ import annotations

import gc
import json
import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import WAIT, EventRecorder, make_agent, make_tool
from strategies import streamed_replies
from localserver import LocalServer, Reply
from yiemagent import (
    AgentClosedError,
    AgentRunEndEvent,
    AgentRunStartEvent,
    AssistantMessage,
    LLMCallStartEvent,
    LLMDeltaEvent,
    OpenAIClient,
    RunFailedError,
    RunStream,
    SubAgentEvent,
    TextContent,
    ToolExecStartEvent,
    abort,
    agent_tool,
    ask,
    run_agent,
    shutdown,
    stream,
    take_response,
)
from yiemagent.events import current_abort_signal, emit_delta
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply


def answer(text: str, stop_reason: str = "stop") -> AssistantMessage:
    return AssistantMessage([TextContent(text)] if text else [], stop_reason=stop_reason)


def streaming(*deltas: str, stop_reason: str = "stop"):
    """An llm_call that emits ``deltas`` as text deltas, then returns them joined."""

    def llm_call(formatted: dict) -> AssistantMessage:
        for text in deltas:
            emit_delta("text", text)
        return answer("".join(deltas), stop_reason)

    return llm_call


def gated(*script: Any):
    """A ScriptedLLM whose first call waits for ``release``, after setting ``started``."""
    started, release = threading.Event(), threading.Event()

    def slow(formatted: dict) -> AssistantMessage:
        started.set()
        assert release.wait(WAIT), "the test never released the call"
        return answer("slow")

    return ScriptedLLM([slow, *script]), started, release


def stream_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.endswith("-stream-reply")]


def test_a_rounds_start_reaches_the_consumer_before_its_model_call_returns():
    """The consumer sees the round's ``LLMCallStartEvent`` while ``llm_call`` is still blocked on an event only the consumer sets."""
    seen_start = threading.Event()

    def llm_call(formatted: dict) -> AssistantMessage:
        assert seen_start.wait(WAIT), "the stream did not show the round's start while its call ran"
        return answer("after")

    with make_agent(llm_call, builtin_tools=False) as agent:
        run = stream(agent, "go", timeout=WAIT)
        kinds = []
        for event in run:
            kinds.append(type(event).__name__)
            if isinstance(event, LLMCallStartEvent):
                seen_start.set()
        assert kinds == ["AgentRunStartEvent", "LLMCallStartEvent", "LLMCallEndEvent", "AgentRunEndEvent"]
        assert run.reply.text == "after"


def test_text_deltas_reach_the_consumer_as_the_server_sends_them_over_http():
    """With ``OpenAIClient(stream=True)`` against a real server, ``text()`` yields the first delta while the server still holds the rest back."""
    first_seen = threading.Event()

    def sse(*texts: str, finish: Any = None) -> bytes:
        events = [{"model": "m", "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}]} for t in texts]
        if finish:
            events.append({"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        return ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + ("data: [DONE]\n\n" if finish else "")).encode()

    body = [sse("Hello"), lambda: first_seen.wait(WAIT), sse(", world", finish="stop")]
    with LocalServer(lambda request: Reply(chunks=body, headers={"Content-Type": "text/event-stream"})) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", stream=True, timeout=WAIT)
        with make_agent(client, builtin_tools=False) as agent:
            run = stream(agent, "greet", timeout=WAIT)
            pieces = []
            for piece in run.text():
                pieces.append(piece)
                first_seen.set()
            assert pieces == ["Hello", ", world"] and run.reply.text == "Hello, world"


def test_the_stream_yields_what_the_sink_gets_in_the_same_order_and_the_sink_still_gets_it():
    """Every event of the run (deltas and tool events included) reaches the stream and the agent's own sink, the same objects in the same order."""
    llm = ScriptedLLM([tool_call_reply(("c1", "echo", {"text": "a"})), streaming("It ", "is ", "done.")])
    recorder = EventRecorder()
    with make_agent(llm, make_tool("echo"), sink=recorder, builtin_tools=False) as agent:
        run = stream(agent, "go", timeout=WAIT)
        events = list(run)
    assert events == recorder.events and all(a is b for a, b in zip(events, recorder.events))
    assert [e.text for e in events if isinstance(e, LLMDeltaEvent)] == ["It ", "is ", "done."]
    assert isinstance(events[0], AgentRunStartEvent) and isinstance(events[-1], AgentRunEndEvent)
    assert run.reply is events[-1].response and run.reply.text == "It is done."


def test_text_yields_the_deltas_or_the_whole_text_of_a_round_that_did_not_stream():
    """``text()``: a streamed round's text deltas; a round whose llm_call did not stream, its whole text once; tool-call rounds without text nothing."""
    llm = ScriptedLLM([tool_call_reply(("c1", "echo", {"text": "a"}), text="Looking. "), tool_call_reply(("c2", "echo", {"text": "b"})), streaming("Found ", "it.")])
    with make_agent(llm, make_tool("echo"), builtin_tools=False) as agent:
        run = stream(agent, "go", timeout=WAIT)
        assert list(run.text()) == ["Looking. ", "Found ", "it."]
        assert run.reply.text == "Found it."


def test_a_sub_agents_events_pass_through_as_the_sink_sees_them():
    """An ``agent_tool``'s sub-run reaches the stream as ``SubAgentEvent``s, between its call's start and end; its text is not the run's text."""
    made: list = []

    def make_sub():
        sub = make_agent(streaming("sub ", "answer"), builtin_tools=False)
        made.append(sub)
        return sub

    expert = agent_tool(make_sub, name="expert", description="asks an expert")
    llm = ScriptedLLM([tool_call_reply(("c1", "expert", {"task": "help"})), answer("top")])
    with make_agent(llm, expert, builtin_tools=False) as agent:
        run = stream(agent, "go", timeout=WAIT)
        events = list(run)
        inner = [e.event for e in events if isinstance(e, SubAgentEvent)]
        assert [type(e).__name__ for e in inner][0] == "AgentRunStartEvent" and isinstance(inner[-1], AgentRunEndEvent)
        assert [e.text for e in inner if isinstance(e, LLMDeltaEvent)] == ["sub ", "answer"]
        first_sub = next(i for i, e in enumerate(events) if isinstance(e, SubAgentEvent))
        assert any(isinstance(e, ToolExecStartEvent) for e in events[:first_sub])
        assert ask(agent, "again", timeout=WAIT, check=False) is not None  # the agent takes the next request
    assert made and all(sub.closing for sub in made)


def test_a_failed_run_raises_when_the_iteration_ends_unless_check_is_false():
    """With ``check`` the stream yields every event, then raises ``RunFailedError``; ``reply`` is set; ``check=False`` just ends."""

    def down(formatted: dict) -> AssistantMessage:
        raise ConnectionRefusedError("the model's server is down")

    with make_agent(down, builtin_tools=False) as agent:
        run = stream(agent, "go", timeout=WAIT)
        seen = []
        with pytest.raises(RunFailedError, match="stop_reason 'error'.*the model's server is down") as raised:
            for event in run:
                seen.append(event)
        assert isinstance(seen[-1], AgentRunEndEvent) and raised.value.reply is run.reply
        quiet = stream(agent, "again", timeout=WAIT, check=False)
        assert isinstance(list(quiet)[-1], AgentRunEndEvent) and quiet.reply.stop_reason == "error"
        with pytest.raises(RunFailedError):
            list(stream(agent, "text too", timeout=WAIT).text())


@pytest.mark.parametrize("how", ["break", "raise", "close"])
def test_stopping_early_lets_the_run_end_and_the_next_ask_gets_its_own_reply(how):
    """A consumer that breaks, raises or closes mid-run: the run goes on to its end, the sink gets every event, its reply is taken,
    the next ask gets its own reply, and no thread of the stream is left."""
    llm, started, release = gated(answer("second"))
    recorder = EventRecorder()
    with make_agent(llm, sink=recorder, builtin_tools=False) as agent:
        run = stream(agent, "first", timeout=WAIT)
        seen = []
        if how == "break":
            for event in run:
                seen.append(event)
                break
        elif how == "raise":
            with pytest.raises(KeyError):
                for event in run:
                    seen.append(event)
                    raise KeyError("the consumer failed")
        else:
            events = iter(run)
            seen.append(next(events))
            run.close()
            assert list(events) == []
        assert isinstance(seen[0], AgentRunStartEvent) and started.wait(WAIT)
        release.set()
        assert ask(agent, "second?", timeout=WAIT).text == "second"
        for thread in stream_threads():
            thread.join(WAIT)
        assert stream_threads() == []
        assert run.reply.text == "slow"
        ends = recorder.of_type(AgentRunEndEvent)
        assert [e.response.text for e in ends] == ["slow", "second"]
        assert agent.output_channel.empty()


def test_a_stream_dropped_unread_lets_its_run_go():
    """A ``RunStream`` never iterated and dropped: its run ends, its reply is taken, the next ask gets its own."""
    with make_agent(ScriptedLLM(["first", "second"]), builtin_tools=False) as agent:
        stream(agent, "first", timeout=WAIT)
        gc.collect()
        assert ask(agent, "second?", timeout=WAIT).text == "second"


def test_a_consumer_that_does_not_read_never_holds_up_the_run():
    """The run, its sink and its reply go on while the stream's consumer reads nothing: the stream keeps the events for it."""
    llm = ScriptedLLM([tool_call_reply(("c1", "echo", {"text": "a"})), streaming(*"abcdefghij")])
    recorder = EventRecorder()
    with make_agent(llm, make_tool("echo"), sink=recorder, builtin_tools=False) as agent:
        run = stream(agent, "go", timeout=WAIT)
        assert agent.wait_until_idle(WAIT), "the run waited for the consumer"
        assert isinstance(recorder.events[-1], AgentRunEndEvent)
        assert list(run) == recorder.events


def test_the_timeout_bounds_the_whole_stream_and_the_run_goes_on():
    """A run longer than the stream's timeout: iterating raises ``TimeoutError`` naming it; the run ends later and the next ask gets its own reply."""
    llm, started, release = gated(answer("next"))
    with make_agent(llm, builtin_tools=False) as agent:
        run = stream(agent, "slow", timeout=0.5)
        with pytest.raises(TimeoutError, match="timeout of 0.5 s"):
            for _ in run:
                pass
        release.set()
        assert ask(agent, "next?", timeout=WAIT).text == "next"


def test_a_stream_waits_for_a_run_already_going_and_follows_its_own_run_only():
    """Sent while another run is active, ``stream`` waits until the agent is idle; its events are those of its own run."""
    llm, started, release = gated(answer("mine"))
    with make_agent(llm, builtin_tools=False) as agent:
        run_agent(agent, "theirs")
        assert started.wait(WAIT)
        made: list[RunStream] = []
        waiter = threading.Thread(target=lambda: made.append(stream(agent, "mine", timeout=WAIT)))
        waiter.start()
        waiter.join(0.2)
        assert waiter.is_alive(), "stream did not wait for the run going on"
        release.set()
        assert take_response(agent, WAIT).text == "slow"
        waiter.join(WAIT)
        events = list(made[0])
        assert {e.run_id for e in events if isinstance(e, (AgentRunStartEvent, AgentRunEndEvent))} == {2}
        assert made[0].reply.text == "mine"


def test_two_streams_from_two_threads_each_get_their_own_run():
    """Two threads streaming at once get two runs: each its own events and its own reply."""
    llm = ScriptedLLM([streaming("one"), streaming("two")])
    results: dict[str, tuple[list[str], str]] = {}

    def consume(name: str) -> None:
        run = stream(agent, name, timeout=WAIT)
        results[name] = (list(run.text()), run.reply.text)

    with make_agent(llm, builtin_tools=False) as agent:
        threads = [threading.Thread(target=consume, args=(name,)) for name in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
    assert sorted(results.values()) == [(["one"], "one"), (["two"], "two")]


def test_a_stream_on_a_closed_agent_or_one_closed_while_it_waits_raises_agent_closed():
    """``stream`` on an agent shut down raises ``AgentClosedError``, also when the shutdown comes while it waits for the agent to be idle."""
    agent = make_agent(ScriptedLLM(["x"]), builtin_tools=False)
    shutdown(agent)
    with pytest.raises(AgentClosedError):
        stream(agent, "late")
    llm, started, release = gated()
    agent = make_agent(llm, builtin_tools=False)
    run_agent(agent, "busy")
    assert started.wait(WAIT)
    failures: list[BaseException] = []

    def try_stream() -> None:
        try:
            stream(agent, "waiting", timeout=WAIT)
        except BaseException as exc:
            failures.append(exc)

    waiter = threading.Thread(target=try_stream)
    waiter.start()
    closer = threading.Thread(target=lambda: shutdown(agent, timeout=WAIT))
    closer.start()
    release.set()
    waiter.join(WAIT)
    closer.join(WAIT)
    assert len(failures) == 1 and isinstance(failures[0], AgentClosedError)


def test_a_sink_that_raises_changes_nothing_for_the_stream():
    """An agent sink raising on every event: the stream still yields every event and the reply."""

    def broken(event: Any) -> None:
        raise RuntimeError("sink down")

    with make_agent(streaming("a", "b"), sink=broken, builtin_tools=False) as agent:
        run = stream(agent, "go", timeout=WAIT)
        assert [type(e).__name__ for e in run] == ["AgentRunStartEvent", "LLMCallStartEvent", "LLMDeltaEvent", "LLMDeltaEvent", "LLMCallEndEvent", "AgentRunEndEvent"]
        assert run.reply.text == "ab"


def test_a_stream_is_iterated_once_and_its_reply_waits_for_the_end():
    """Reading ``reply`` before the run ended, or iterating a second time, raises ``RuntimeError`` saying so."""
    llm, started, release = gated()
    with make_agent(llm, builtin_tools=False) as agent:
        run = stream(agent, "go", timeout=WAIT)
        with pytest.raises(RuntimeError, match="not in yet"):
            run.reply
        release.set()
        assert isinstance(list(run)[-1], AgentRunEndEvent)
        with pytest.raises(RuntimeError, match="iterated once"):
            iter(run)


def test_an_ask_inside_the_loop_over_a_stream_of_the_same_agent_raises_instead_of_waiting_for_ever():
    """``ask`` in the consumer's loop body would wait for the stream's own run: it raises ``RuntimeError`` naming that; the stream lets go, the agent goes on."""
    with make_agent(ScriptedLLM(["first", "second"]), builtin_tools=False) as agent:
        with pytest.raises(RuntimeError, match="inside the loop over a stream"):
            for _ in stream(agent, "first"):
                ask(agent, "nested", timeout=1)
        assert ask(agent, "second?", timeout=WAIT).text == "second"


def test_ask_from_inside_the_agents_own_run_raises_instead_of_waiting_for_ever():
    """A tool that asks its own agent gets a ``RuntimeError`` (an error result naming it), not a wait for its own run to end."""
    holder: list = []

    def asks_itself(tool_call_id, args, signal, on_partial_result):
        return ask(holder[0], "inner", timeout=1)

    llm = ScriptedLLM([tool_call_reply(("c1", "selfish", {})), answer("done")])
    with make_agent(llm, make_tool("selfish", asks_itself), builtin_tools=False) as agent:
        holder.append(agent)
        assert ask(agent, "go", timeout=WAIT).text == "done"
        (result,) = [m for m in agent.history() if getattr(m, "tool_call_id", None) == "c1"]
        assert result.is_error and "from inside the agent's own run" in result.content[0].text


def scripted_rounds(rounds: list[tuple[bool, tuple[str, str, list[tuple[str, str]]]]]):
    """An llm_call for ``rounds``: each (streams?, (thinking, text, deltas)); every round but the last also calls the tool "echo"."""
    script = list(enumerate(rounds))

    def llm_call(formatted: dict) -> AssistantMessage:
        index, (streams, (thinking, text, deltas)) = script.pop(0)
        if streams:
            for kind, piece in deltas:
                emit_delta(kind, piece)
        content: list[Any] = ([{"type": "thinking", "thinking": thinking}] if thinking else []) + ([TextContent(text)] if text else [])
        if index < len(rounds) - 1:
            return AssistantMessage(content + tool_call_reply((f"c{index}", "echo", {})).content, stop_reason="tool_use")
        return AssistantMessage(content, stop_reason="stop")

    return llm_call


@given(rounds=st.lists(st.tuples(st.booleans(), streamed_replies()), min_size=1, max_size=3), stop_at=st.none() | st.integers(min_value=0, max_value=40))
def test_the_text_is_each_rounds_text_and_wherever_the_consumer_stops_the_agent_goes_on(rounds, stop_at):
    """Property: streamed or not, ``text()`` joins to the rounds' texts in order; a consumer stopping after any piece leaves the sink
    every event and the next ask its own reply."""
    recorder = EventRecorder()
    with make_agent(scripted_rounds(rounds), make_tool("echo"), sink=recorder, builtin_tools=False) as agent:
        run = stream(agent, "go", timeout=WAIT)
        pieces = []
        for piece in run.text():
            pieces.append(piece)
            if stop_at is not None and len(pieces) > stop_at:
                break
        else:
            assert "".join(pieces) == "".join(text for _, (_, text, _) in rounds)
            assert run.reply.text == rounds[-1][1][1]
        agent.llm_call = ScriptedLLM(["next"])
        assert ask(agent, "next?", timeout=WAIT).text == "next"
    ends = recorder.of_type(AgentRunEndEvent)
    assert len(ends) == 2 and ends[0].rounds == len(rounds)


def test_an_abort_or_a_shutdown_during_a_stream_ends_it_with_the_aborted_reply():
    """``abort`` while a consumer reads: the stream ends with the run's "aborted" reply (``RunFailedError``, or the reply with ``check=False``);
    ``shutdown`` from another thread while it reads: the same, and the agent is closed."""
    started = threading.Event()

    def until_aborted(formatted: dict) -> AssistantMessage:
        started.set()
        assert current_abort_signal().wait(WAIT), "the run was never aborted"
        return answer("too late")

    with make_agent(until_aborted, builtin_tools=False) as agent:
        run = stream(agent, "go", timeout=WAIT, check=False)
        for event in run:
            if isinstance(event, LLMCallStartEvent):
                assert started.wait(WAIT)
                abort(agent, "the user left")
        assert run.reply.stop_reason == "aborted" and "the user left" in run.reply.error_message
    started.clear()
    agent = make_agent(until_aborted, builtin_tools=False)
    closer = threading.Thread(target=lambda: shutdown(agent, timeout=0.2))
    with pytest.raises(RunFailedError, match="stop_reason 'aborted'"):
        for event in stream(agent, "go", timeout=WAIT):
            if isinstance(event, LLMCallStartEvent):
                assert started.wait(WAIT)
                closer.start()
    closer.join(WAIT)
    assert agent.closing and stream_threads() == []


def test_an_ask_that_waits_for_a_stream_past_its_timeout_names_the_stream():
    """``stream`` holds the agent's ask lock until its reply is taken: an ``ask`` from another thread that gives up names ``stream()``."""
    llm, started, release = gated(answer("after"))
    with make_agent(llm, builtin_tools=False) as agent:
        run = stream(agent, "go", timeout=WAIT)
        assert started.wait(WAIT)
        failures: list[BaseException] = []

        def impatient() -> None:
            try:
                ask(agent, "me?", timeout=0.1)
            except BaseException as exc:
                failures.append(exc)

        other = threading.Thread(target=impatient)
        other.start()
        other.join(WAIT)
        assert [str(f) for f in failures] == ["another stream() on this agent did not finish within 0.1 s"]
        release.set()
        assert list(run.text()) == ["slow"]
        assert ask(agent, "me?", timeout=WAIT).text == "after"


def test_close_from_another_thread_ends_an_iteration_that_waits():
    """A consumer blocked waiting for the next event wakes when another thread calls ``close()``: its loop ends, the run goes on."""
    started, release = threading.Event(), threading.Event()

    def slow(formatted: dict) -> AssistantMessage:
        started.set()
        release.wait(3 * WAIT)  # longer than the consumer is given to end: only close() can end its wait
        return answer("slow")

    with make_agent(ScriptedLLM([slow, answer("next")]), builtin_tools=False) as agent:
        run = stream(agent, "go", timeout=3 * WAIT)
        seen: list[Any] = []
        waiting = threading.Event()

        def consume() -> None:
            for event in run:
                seen.append(event)
                if isinstance(event, LLMCallStartEvent):
                    waiting.set()  # its next step waits for the round's end

        consumer = threading.Thread(target=consume)
        consumer.start()
        assert started.wait(WAIT) and waiting.wait(WAIT)
        run.close()
        consumer.join(WAIT)
        assert not consumer.is_alive() and [type(e).__name__ for e in seen][:2] == ["AgentRunStartEvent", "LLMCallStartEvent"]
        release.set()
        assert ask(agent, "next?", timeout=WAIT).text == "next"
