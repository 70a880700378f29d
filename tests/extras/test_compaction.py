"""Long conversations: what a request sends once the history outgrows the context window (docs/sessions.md "Long conversations").

The invariants hold over random conversations (parallel calls, long results, approval
steps): a call is never sent without its result nor a result without its call, the
system prompt and the newest user message are always sent, the first message is a user
message, the order is kept, and the request's estimate fits, or the run ends "error"
naming the overflow. An agent that loads the session sends what the agent that wrote it
would have sent.
"""

from __future__ import annotations

import copy
import json

import pytest

import yiemagent.run
from hypothesis import event, given
from hypothesis import strategies as st

from helpers import FIXTURES, EventRecorder, call, calls_reply
from localserver import LocalServer, Reply
from session_backends import backend, postgres_server  # noqa: F401  fixtures: each backend in turn
from yiemagent import (
    ApprovalMessage,
    AssistantMessage,
    CompactionMessage,
    LLMCallStartEvent,
    LLMModel,
    LLMUsage,
    SummarizeHistory,
    TextContent,
    ToolResultMessage,
    TrimHistory,
    UserMessage,
    YiemAgent,
    ask,
    count_tokens,
    format_msg_for_llm,
    load_history,
    save_history,
    tool,
)
from yiemagent._format_cache import History, HistorySnapshot
from yiemagent.context import Compactor
from yiemagent.llm import OpenAIClient
from yiemagent.types import AgentContext

SYSTEM = "You are a careful assistant that answers from tool results."


@tool
def lookup(city: str) -> str:
    """A long report about a city."""
    return f"Report on {city}: " + "the weather stays mild and dry with a light breeze " * 40


# --- a conversation, built as an agent builds one ----------------------------------------


result_words = st.integers(0, 120) | st.integers(300, 700)  # results short and long


@st.composite
def conversations(draw):
    """A valid history, and the indices at which a request was made: turns of user messages, parallel calls with results of any length, approval steps."""
    history: list = []
    requests: list[int] = []
    ids = iter(range(10**6))
    for turn in range(draw(st.integers(1, 8))):
        history.append(UserMessage([TextContent(f"question {turn} " + "more words " * draw(st.integers(0, 60)))]))
        requests.append(len(history))
        for _ in range(draw(st.integers(0, 3))):
            names = [f"c{next(ids)}" for _ in range(draw(st.integers(1, 3)))]
            history.append(calls_reply(*(call(i, "lookup", json.dumps({"city": i})) for i in names)))
            waiting = draw(st.sampled_from(["none", "deferred", "between"])) if len(names) > 1 else "none"
            for i in names[:-1]:
                history.append(ToolResultMessage(i, "lookup", [TextContent("result " * draw(result_words))]))
            last = names[-1]
            if waiting == "deferred":  # approved later, then run (decision 18)
                history += [ApprovalMessage(last, "lookup", "deferred"), ApprovalMessage(last, "lookup", "approved"), ApprovalMessage(last, "lookup", "resumed")]
            elif waiting == "between":  # a message that came while the call waited; its result follows
                history += [ApprovalMessage(last, "lookup", "deferred"), UserMessage([TextContent("and also this")])]
            history.append(ToolResultMessage(last, "lookup", [TextContent("done " * draw(result_words))]))
            requests.append(len(history))
        history.append(AssistantMessage([TextContent("answer " * draw(st.integers(1, 50)))], stop_reason="stop"))
    return history, requests


class Host:
    """What the compaction step reads of its agent: the llm_call (for a summary and its max_tokens) and append."""

    def __init__(self, history, llm_call=None):
        self.history = history
        self.llm_call = llm_call or (lambda request: AssistantMessage([TextContent("a short summary of what was said")]))

    def append(self, message):
        self.history.append(message)


def Run():  # noqa: N802  the compaction step's run: its signal, usage and side requests
    return yiemagent.run.Run(0)


def carries(merged, original):
    """Whether ``merged`` is ``original`` with a summary at the head of its first text."""
    if not isinstance(original, UserMessage) or not isinstance(merged, UserMessage) or merged is original:
        return merged is original
    first, text = merged.content[0].text, original.content[0].text
    return first.startswith("Summary of the earlier conversation") and first.endswith("\n\n" + text) and merged.content[1:] == original.content[1:]


def check_sent(history, sent, window):
    """The invariants of what is sent: pairs whole, newest user message in, user message first, order kept, the estimate within the room."""
    calls, answered = {}, set()
    for message in sent:
        if isinstance(message, AssistantMessage):
            for block in message.content:
                for entry in block.get("tool_calls", []) if isinstance(block, dict) else []:
                    calls[entry["id"]] = True
        if isinstance(message, ToolResultMessage):
            assert message.tool_call_id in calls, "a result sent without its call"
            answered.add(message.tool_call_id)
    assert set(calls) == answered, "a call sent without its result"
    sendable = [m for m in sent if isinstance(m, (UserMessage, AssistantMessage, ToolResultMessage))]
    assert isinstance(sendable[0], UserMessage), "the first message is not a user message"
    newest_user = max(i for i, m in enumerate(history) if isinstance(m, UserMessage))
    assert any(m is history[newest_user] for m in sent) or carries(sent[0], history[newest_user]), "the newest user message is not sent"
    positions = [next(i for i, h in enumerate(history) if h is m or (m is sent[0] and carries(m, h))) for m in sent]
    assert positions == sorted(positions), "the order is not kept"
    assert count_tokens(wire(sent), system_prompt=SYSTEM, tools=[lookup]) <= window - window // 4, "the request does not fit"


@given(conversations(), st.integers(600, 6000), st.integers(40, 2000), st.booleans())
def test_what_is_sent_keeps_every_invariant_and_a_loaded_agent_sends_the_same(conversation, window, keep, summarize):
    """Property: at every request of a random conversation the compacted request keeps the invariants (or nothing fits and the step says so), and a compactor starting from the stored history sends the same."""
    full, requests = conversation
    strategy = SummarizeHistory(keep) if summarize else TrimHistory(keep)
    compactor, history = Compactor(strategy, window), History()
    host = Host(history)
    for end in requests:
        history.extend(m for m in full[len([h for h in history if not isinstance(h, CompactionMessage)]):end])
        ctx = AgentContext(SYSTEM, HistorySnapshot(history), {"lookup": lookup})
        chosen = compactor.compact(host, Run(), ctx, False)
        event("nothing fits" if isinstance(chosen, AssistantMessage) else f"sent {len(wire(chosen.messages))} of {len(wire(history))}" if len(chosen.messages) < len(history) else "all sent")
        if isinstance(chosen, AssistantMessage):  # nothing fits: not even the newest user message with the last batch
            assert chosen.stop_reason == "error" and chosen.error_message.startswith("context overflow")
            assert count_tokens(least_of(history), system_prompt=SYSTEM, tools=[lookup]) > window - window // 4, "a request could fit"
            return
        check_sent(history, list(chosen.messages), window)
        assert chosen.system_prompt == SYSTEM
    fresh = Compactor(strategy, window).compact(Host(list(history)), Run(), AgentContext(SYSTEM, list(history), {"lookup": lookup}), False)
    assert sendable(fresh.messages) == sendable(chosen.messages)


def wire(messages):
    """The messages that reach the wire (approval steps and compaction markers never do)."""
    return [m for m in messages if isinstance(m, (UserMessage, AssistantMessage, ToolResultMessage))]


def sendable(messages):
    """What reaches the wire: user messages by their content (the first may carry the summary), replies and results as they are."""
    return [[b.to_dict() for b in m.content] if isinstance(m, UserMessage) else m for m in wire(messages)]


def least_of(history):
    """What every request must carry: the newest user message that may come first (a question, not one that came while a call waited), the newest user message, the last batch."""
    sent = wire(history)
    first = max(i for i, m in enumerate(sent) if isinstance(m, UserMessage) and m.content[0].text != "and also this")
    newest = max(i for i, m in enumerate(sent) if isinstance(m, UserMessage))
    last = max(i for i, m in enumerate(sent) if isinstance(m, AssistantMessage) or i == first)
    batch = range(newest, newest + 1)  # a message that came while a call waited goes with its whole batch
    if newest != first:
        start = max(i for i in range(newest) if isinstance(sent[i], AssistantMessage))
        end = next((i for i in range(newest + 1, len(sent)) if not isinstance(sent[i], ToolResultMessage)), len(sent))
        batch = range(start, end)
    return [m for i, m in enumerate(sent) if i == first or i in batch or i >= last]


def test_a_request_that_fits_goes_as_prepared():
    """Below the window the step hands back the very context prepared (the formatting cache's shortcut kept)."""
    history = History([UserMessage([TextContent("hi")])])
    ctx = AgentContext(SYSTEM, HistorySnapshot(history), {})
    assert Compactor(TrimHistory(100), 4096).compact(Host(history), Run(), ctx, False) is ctx


# --- the agent ---------------------------------------------------------------------------


def tool_loop_llm(requests, summaries=None):
    """A model that calls lookup once per question, then answers; a summary request gets a short summary."""

    def answer(formatted):
        messages = formatted["messages"]
        if messages[0]["role"] == "system" and messages[0]["content"].startswith("You summarise"):
            if summaries is not None:
                summaries.append(formatted)
            return AssistantMessage([TextContent("The user asked about cities; each report said mild and dry.")])
        requests.append(formatted)
        if messages[-1]["role"] == "user":
            return calls_reply(call(f"call_{len(requests)}", "lookup", json.dumps({"city": f"city {len(requests)}"})))
        return AssistantMessage([TextContent(f"answer {len(requests)}")], stop_reason="stop")

    return answer


def wire_pairs_whole(formatted):
    """No call without its result, no result without its call, a user message first."""
    messages = [m for m in formatted["messages"] if m["role"] != "system"]
    assert messages[0]["role"] == "user"
    open_calls = set()
    for message in messages:
        if message["role"] == "assistant":
            assert not open_calls
            open_calls = {c["id"] for c in message.get("tool_calls") or []}
        elif message["role"] == "tool":
            assert message["tool_call_id"] in open_calls
            open_calls.discard(message["tool_call_id"])
        else:
            assert not open_calls
    assert not open_calls


@pytest.mark.parametrize("strategy", [TrimHistory(600), SummarizeHistory(600)], ids=["trim", "summarize"])
def test_an_agent_answers_25_turns_whose_results_outgrow_the_window(strategy):
    """With a 2,048-token window, 25 turns of long tool results are all answered; every request fits, keeps its pairs and is what formatting its messages afresh gives; the history keeps every message."""
    requests, summaries, recorder = [], [], EventRecorder()
    with YiemAgent(llm_call=tool_loop_llm(requests, summaries), agent_event_sink=recorder, system_prompt=SYSTEM, tools=[lookup], context_window=2048, compaction=strategy) as agent:
        for turn in range(25):
            assert ask(agent, f"What about city {turn}?", timeout=30).text.startswith("answer")
        history = agent.history()
    for start, formatted in zip(recorder.of_type(LLMCallStartEvent), requests, strict=True):  # the formatting cache stays exact
        fresh = AgentContext(start.context.system_prompt, copy.deepcopy(list(start.context.messages)), start.context.tools)
        assert format_msg_for_llm(fresh) == formatted
    assert sum(isinstance(m, UserMessage) for m in history) == 25 and sum(isinstance(m, ToolResultMessage) for m in history) == 25
    for formatted in requests:
        wire_pairs_whole(formatted)
        assert len(json.dumps(formatted)) < 2048 * 4  # far below what 25 reports weigh (about 40,000 characters)
    assert requests[-1]["messages"][-1]["role"] == "tool" and "What about city 24?" in json.dumps(requests[-1])
    markers = [m for m in history if isinstance(m, CompactionMessage)]
    if isinstance(strategy, SummarizeHistory):
        assert markers and summaries and "mild and dry" in json.dumps(requests[-1]["messages"][1])
    else:
        assert not markers and not summaries


def test_a_loaded_session_sends_what_the_agent_that_wrote_it_would_send(backend):
    """An agent that loads a summarised session sends the same request as the agent that wrote it would have: the markers are stored, the cut follows from them."""
    strategy = SummarizeHistory(600)
    first = []
    with YiemAgent(llm_call=tool_loop_llm(first), agent_event_sink=None, system_prompt=SYSTEM, tools=[lookup], context_window=2048, compaction=strategy, session=backend.open("a")) as agent:
        for turn in range(12):
            ask(agent, f"What about city {turn}?", timeout=30)
    cut_short = []
    with YiemAgent(llm_call=tool_loop_llm(cut_short), agent_event_sink=None, system_prompt=SYSTEM, tools=[lookup], context_window=2048, compaction=strategy, session=backend.open("b")) as agent:
        for turn in range(11):
            ask(agent, f"What about city {turn}?", timeout=30)
    stored = backend.open("b").messages()
    assert any(isinstance(m, CompactionMessage) for m in stored)
    loaded = []
    with YiemAgent(llm_call=tool_loop_llm(loaded), agent_event_sink=None, system_prompt=SYSTEM, tools=[lookup], context_window=2048, compaction=strategy, session=backend.open("b")) as agent:
        assert agent.history() == stored
        ask(agent, "What about city 11?", timeout=30)
    assert strip_ids(loaded[0]) == strip_ids(first[-2])


def strip_ids(formatted):
    """A request with its call ids left out (the scripted model numbers its calls by the requests it saw)."""
    text = json.dumps(formatted)
    import re

    return re.sub(r"call_\d+|city \d+\"?\}?", "", text)


def test_a_compaction_message_is_stored_and_loaded_as_it_was(backend, tmp_path):
    """A CompactionMessage goes through a session (SQLite, PostgreSQL) and a history file and comes back equal, its role "compaction"."""
    marker = CompactionMessage("the user asked about Paris", 3)
    messages = [UserMessage([TextContent("hi")]), AssistantMessage([TextContent("hello")]), UserMessage([TextContent("more")]), marker]
    session = backend.open("rows")
    for message in messages:
        session.append(message)
    assert backend.open("rows").messages() == messages
    assert json.loads(backend.rows()[-1][1])["role"] == "compaction"
    save_history(messages, tmp_path / "h.json")
    assert load_history(tmp_path / "h.json") == messages


def test_a_message_alone_too_long_ends_the_run_naming_the_overflow():
    """When nothing can make the request fit (the newest message alone passes the window) the run ends "error" naming the overflow, and nothing is sent."""
    requests = []
    with YiemAgent(llm_call=tool_loop_llm(requests), agent_event_sink=None, context_window=512, compaction=TrimHistory(100)) as agent:
        reply = ask(agent, "word " * 2000, timeout=30, check=False)
    assert reply.stop_reason == "error" and reply.error_message.startswith("context overflow: the request does not fit context_window=512")
    assert requests == []


def overflowing_server(limit_bytes, requests):
    """A llama.cpp-like server: a request longer than ``limit_bytes`` gets its recorded "exceeds the available context size" 400."""
    body = (FIXTURES / "llamacpp-error-400-exceed-context.json").read_bytes()

    def respond(request):
        requests.append(request.json())
        if len(request.body) > limit_bytes:
            return Reply(status=400, body=body, headers={"Content-Type": "application/json"})
        last = request.json()["messages"][-1]
        message = {"role": "assistant", "content": "ok"}
        if last["role"] == "user":
            message = {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{len(requests)}", "type": "function", "function": {"name": "lookup", "arguments": '{"city": "Oslo"}'}}]}
        return Reply(body={"id": "x", "object": "chat.completion", "model": "m", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": {"prompt_tokens": 10, "completion_tokens": 2}})

    return respond


def test_a_context_overflow_from_the_server_is_compacted_once_and_asked_again():
    """The server counts more tokens than the estimate: after its ContextOverflowError the agent compacts further and asks again, once; every turn is answered."""
    requests = []
    with LocalServer(overflowing_server(6000, requests)) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", backoff_factor=0.001)
        with YiemAgent(llm_call=client, agent_event_sink=None, tools=[lookup], context_window=2000, compaction=TrimHistory(1000)) as agent:
            for turn in range(6):
                assert ask(agent, f"city {turn}?", timeout=30).text == "ok"
    sizes = [len(json.dumps(r)) for r in requests]
    assert any(size > 6000 for size in sizes)  # the estimate let one through, the server refused it
    refused = [i for i, size in enumerate(sizes) if size > 6000]
    assert all(sizes[i + 1] < sizes[i] for i in refused)  # each refusal is followed by a smaller request


def test_an_overflow_that_compaction_cannot_cure_ends_the_run_without_sending_it_again():
    """A server that refuses every request: a request made again is always smaller than the one refused; when nothing smaller can be sent the run ends "error" with the server's overflow, never a loop."""
    requests = []
    with LocalServer(overflowing_server(0, requests)) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", backoff_factor=0.001)
        with YiemAgent(llm_call=client, agent_event_sink=None, context_window=8000, compaction=TrimHistory(4000)) as agent:
            reply = ask(agent, "hello", timeout=30, check=False)
    assert reply.stop_reason == "error" and "ContextOverflowError" in reply.error_message
    assert len(requests) == 1


def test_the_options_are_checked_where_the_agent_is_made():
    """A window without a strategy, a strategy without a window, or a bad keep_last_tokens is refused naming the argument; the model's window is used when none is given."""
    with pytest.raises(ValueError, match=r"context_window=\.\.\.\) needs compaction="):
        YiemAgent(llm_call=print, agent_event_sink=None, context_window=1000)
    with pytest.raises(ValueError, match="needs a context window"):
        YiemAgent(llm_call=print, agent_event_sink=None, compaction=TrimHistory(10))
    with pytest.raises(ValueError, match="keep_last_tokens"):
        TrimHistory(0)
    with pytest.raises(TypeError, match="compaction="):
        YiemAgent(llm_call=print, agent_event_sink=None, context_window=1000, compaction="trim")
    with YiemAgent(llm_call=print, agent_event_sink=None, model=LLMModel("m", context_window=3000), compaction=TrimHistory(10)) as agent:
        assert agent._core.compactor.window == 3000


def test_a_summary_that_fails_leaves_the_old_turns_out_and_the_run_answers(caplog):
    """A summariser that raises: the warning names it, no marker is stored, the request goes without the oldest turns and every turn is answered."""

    def failing(formatted):
        raise RuntimeError("summariser down")

    requests = []
    with YiemAgent(llm_call=tool_loop_llm(requests), agent_event_sink=None, tools=[lookup], context_window=2048, compaction=SummarizeHistory(600, llm_call=failing)) as agent:
        for turn in range(8):
            assert ask(agent, f"What about city {turn}?", timeout=30).text.startswith("answer")
        history = agent.history()
    assert not any(isinstance(m, CompactionMessage) for m in history)
    assert "the summary could not be made (RuntimeError: summariser down)" in caplog.text
    assert all(len(json.dumps(r)) < 2048 * 4 for r in requests)


def test_the_summary_s_tokens_count_in_the_run_s_usage():
    """What the summary request spent joins the run's usage (decision 13), beside the rounds' own."""
    summaries = []

    def summariser(formatted):
        summaries.append(formatted)
        return AssistantMessage([TextContent("short")], usage=LLMUsage(1000, 7))

    with YiemAgent(llm_call=tool_loop_llm([]), agent_event_sink=None, tools=[lookup], context_window=2048, compaction=SummarizeHistory(600, llm_call=summariser)) as agent:
        for turn in range(8):
            ask(agent, f"What about city {turn}?", timeout=30)
        usage = agent.usage
    assert summaries and usage.input_tokens == 1000 * len(summaries) and usage.output_tokens == 7 * len(summaries)
