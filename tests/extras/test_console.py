"""The console printer: a streamed reply is shown as it is written (issue 14)."""

from __future__ import annotations

import io
import threading

from yiemagent import (
    AgentRunEndEvent,
    AssistantMessage,
    LLMCallEndEvent,
    LLMCallStartEvent,
    LLMDeltaEvent,
    TextContent,
    YiemAgent,
    abort,
    run_agent,
    take_response,
)
from yiemagent.cli.console import ConsolePrinter
from yiemagent.events import current_abort_signal, emit_delta
from helpers import WAIT



def printer_pair(**kwargs) -> tuple[ConsolePrinter, io.StringIO, io.StringIO]:
    err, out = io.StringIO(), io.StringIO()
    return ConsolePrinter(err, color=False, answer=out, **kwargs), err, out


def a_round(printer: ConsolePrinter, reply: AssistantMessage, *deltas: tuple[str, str], round: int = 1) -> None:
    printer(LLMCallStartEvent(1, round, 2))
    for kind, text in deltas:
        printer(LLMDeltaEvent(1, round, kind, text))
    printer(LLMCallEndEvent(1, round, 0.25, reply, None, None))


def test_text_goes_to_the_answer_stream_and_thinking_to_the_progress_stream():
    """Text deltas are written to `answer` as they come; thinking, marked, to the progress stream; each line is ended before anything else."""
    printer, err, out = printer_pair()
    reply = AssistantMessage([TextContent("It is noon.")])
    a_round(printer, reply, ("thinking", "The user "), ("thinking", "asks the time."), ("text", "It is "), ("text", "noon."))
    assert out.getvalue() == "It is noon.\n"
    assert err.getvalue() == (
        "  llm round 1: thinking over 2 messages…\n"
        "  thinking: The user asks the time.\n"
        "  llm round 1 done in 0.25s\n"
    )
    assert printer.streamed(reply)


def test_one_stream_for_both_keeps_lines_apart():
    """With one stream (the default), switching kinds and ending the round each end the open line; a delta ending in a newline leaves none open."""
    stream = io.StringIO()
    printer = ConsolePrinter(stream, color=False)
    a_round(printer, AssistantMessage([TextContent("Hi\n")]), ("thinking", "hm"), ("text", "Hi"), ("thinking", "again"), ("text", "Hi\n"))
    assert stream.getvalue() == (
        "  llm round 1: thinking over 2 messages…\n  thinking: hm\nHi\n  thinking: again\nHi\n  llm round 1 done in 0.25s\n"
    )


def test_thinking_is_dimmed_on_a_terminal():
    """With colours, thinking is painted dim; the answer is written as it came."""
    err, out = io.StringIO(), io.StringIO()
    printer = ConsolePrinter(err, color=True, answer=out)
    printer(LLMDeltaEvent(1, 1, "thinking", "hm"))
    printer(LLMDeltaEvent(1, 1, "text", "Hi"))
    assert "\033[2mhm\033[0m" in err.getvalue() and out.getvalue() == "Hi"


def test_streamed_knows_only_replies_whose_text_was_shown():
    """streamed(): a reply with text deltas yes; a reply that streamed only thinking, or none, or a response the agent made, no."""
    printer, _, out = printer_pair()
    thought_only = AssistantMessage([TextContent("Hello")])
    a_round(printer, thought_only, ("thinking", "hm"))
    plain = AssistantMessage([TextContent("Hello")])
    a_round(printer, plain, round=2)
    assert not printer.streamed(thought_only) and not printer.streamed(plain)
    streamed = AssistantMessage([TextContent("Hello")])
    a_round(printer, streamed, ("text", "Hello"), round=3)
    assert printer.streamed(streamed) and not printer.streamed(AssistantMessage([TextContent("Hello")]))
    assert out.getvalue() == "Hello\n"


def test_without_progress_only_the_streamed_reply_is_shown():
    """progress=False (the CLI's --quiet): no round or run lines, the streamed text and thinking still shown."""
    printer, err, out = printer_pair(progress=False)
    reply = AssistantMessage([TextContent("Hi")])
    a_round(printer, reply, ("thinking", "hm"), ("text", "Hi"))
    printer(AgentRunEndEvent(1, AssistantMessage([], stop_reason="error", error_message="boom"), 1, 0.3))
    assert out.getvalue() == "Hi\n" and err.getvalue() == "  thinking: hm\n"
    assert printer.streamed(reply)


def test_each_delta_is_on_the_screen_before_the_next_is_written():
    """Live: inside the llm_call, right after emitting a delta, the printer has already written it out."""
    printer, err, out = printer_pair()
    seen_while_streaming: list[str] = []

    def llm_call(formatted: dict) -> AssistantMessage:
        for piece in ("It ", "is ", "noon."):
            emit_delta("text", piece)
            seen_while_streaming.append(out.getvalue())
        return AssistantMessage([TextContent("It is noon.")], stop_reason="stop")

    with YiemAgent(llm_call=llm_call, agent_event_sink=printer) as agent:
        run_agent(agent, "time?")
        response = take_response(agent, timeout=WAIT)
    assert seen_while_streaming == ["It ", "It is ", "It is noon."]
    assert out.getvalue() == "It is noon.\n" and printer.streamed(response)


def test_an_aborted_stream_ends_its_line_and_is_not_taken_for_the_answer():
    """Abort mid-stream: the partial line is ended, the run's end is reported, and the aborted response is not 'streamed'."""
    printer, err, out = printer_pair()
    streaming = threading.Event()

    def llm_call(formatted: dict) -> AssistantMessage:
        emit_delta("text", "Hel")
        streaming.set()
        signal = current_abort_signal()
        assert signal is not None and signal.wait(WAIT)
        return AssistantMessage([TextContent("Hel")], stop_reason="stop")

    with YiemAgent(llm_call=llm_call, agent_event_sink=printer) as agent:
        run_agent(agent, "hi")
        assert streaming.wait(WAIT)
        abort(agent, "Ctrl-C")
        response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "aborted" and not printer.streamed(response)
    assert out.getvalue() == "Hel\n"
    assert "run 1 ended: aborted: Ctrl-C" in err.getvalue()
