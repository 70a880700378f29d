"""The console printer: a streamed reply is shown as it is written (docs/streaming.md)."""

from __future__ import annotations

import io
import re
import threading
import time
from datetime import datetime

from yiemagent import (
    AgentRunEndEvent,
    AgentRunStartEvent,
    AgentToolResult,
    AssistantMessage,
    LLMCallEndEvent,
    LLMCallStartEvent,
    LLMDeltaEvent,
    LLMUsage,
    TextContent,
    ToolExecEndEvent,
    ToolExecStartEvent,
    ToolExecUpdateEvent,
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


def tool_call(printer: ConsolePrinter, name: str, arguments: dict, result: str, *, is_error: bool = False, partials=()) -> None:
    printer(ToolExecStartEvent("c1", name, arguments))
    for partial in partials:
        printer(ToolExecUpdateEvent("c1", name, arguments, partial))
    printer(ToolExecEndEvent("c1", name, AgentToolResult([TextContent(result)]), is_error))


def test_a_tool_call_is_shown_as_it_starts_reports_progress_and_ends_with_its_time_and_result():
    """`▸ name {arguments}` (JSON, non-ASCII as written), `· name: progress`, `✓ name 0.00s result`; the time is the call's own."""
    printer, err, out = printer_pair()
    before = time.monotonic()
    tool_call(printer, "getWeather", {"city": "東京"}, "Weather in Tokyo:\n  sunny, 21°C", partials=[{"step": "fetching"}, "50%"])
    observed = time.monotonic() - before
    start, update_1, update_2, end = err.getvalue().splitlines()
    assert start == '  ▸ getWeather {"city": "東京"}'
    assert update_1 == '    · getWeather: {"step": "fetching"}' and update_2 == "    · getWeather: 50%"
    shown = re.fullmatch(r"  ✓ getWeather (\d+\.\d\d)s Weather in Tokyo: sunny, 21°C", end)
    assert shown is not None and float(shown.group(1)) <= observed + 0.005
    assert out.getvalue() == ""


def test_a_failed_tool_call_is_marked_as_an_error():
    printer, err, _ = printer_pair()
    tool_call(printer, "getWeather", {"city": "Atlantis"}, "Unknown city: Atlantis", is_error=True)
    end = err.getvalue().splitlines()[-1]
    assert re.fullmatch(r"  ✗ getWeather \d+\.\d\ds \(error\) Unknown city: Atlantis", end)


def test_a_tool_end_whose_start_the_printer_did_not_see_is_shown_without_a_time():
    """A printer attached mid-run (or one whose start another agent's call of the same id took) still shows the end, with no time."""
    printer, err, _ = printer_pair()
    printer(ToolExecEndEvent("c9", "getWeather", AgentToolResult([TextContent("sunny")]), False))
    printer(ToolExecEndEvent("c9", "getWeather", AgentToolResult([TextContent("no such city")]), True))
    assert err.getvalue() == "  ✓ getWeather sunny\n  ✗ getWeather (error) no such city\n"


def test_a_partial_result_that_is_not_json_is_shown_by_its_repr():
    """A tool may report any object as progress; the printer shows what it can instead of failing."""
    printer, err, _ = printer_pair()
    printer(ToolExecUpdateEvent("c1", "backup", {}, {"at": datetime(2026, 1, 2, 3, 4)}))
    assert err.getvalue() == '    · backup: {"at": "datetime.datetime(2026, 1, 2, 3, 4)"}\n'


def test_names_arguments_and_results_are_each_one_line_cut_to_160_characters():
    """Whitespace runs (newlines too) in a text become one space; a value of 160 characters is whole, a longer one cut to 160 with an ellipsis."""
    printer, err, _ = printer_pair()
    whole, cut = "x" * 150 + "\n\n  " + "x" * 9, "y" * 200
    printer(ToolExecUpdateEvent("c1", "write", {}, whole))
    printer(ToolExecUpdateEvent("c1", "write", {}, cut))
    printer(ToolExecUpdateEvent("c1", "write", {}, {"text": "z" * 200}))
    update_whole, update_cut, update_json = err.getvalue().splitlines()
    assert update_whole == "    · write: " + "x" * 150 + " " + "x" * 9
    assert update_cut == "    · write: " + "y" * 159 + "…"
    assert update_json == '    · write: {"text": "' + "z" * 149 + "…"


def test_round_lines_say_the_round_its_time_and_the_tokens_when_the_server_counted_any():
    """Tokens are shown when either count is known (some servers report only the output); not for no usage or zero counts."""
    printer, err, _ = printer_pair()
    reply = AssistantMessage([TextContent("Hi")])
    for round, usage in enumerate([LLMUsage(120, 30), LLMUsage(0, 30), LLMUsage(120, 0), LLMUsage(), None], start=1):
        printer(LLMCallStartEvent(1, round, 2 * round))
        printer(LLMCallEndEvent(1, round, 0.5 * round, reply, usage, None))
    assert err.getvalue().splitlines()[0::2] == [f"  llm round {r}: thinking over {2 * r} messages…" for r in range(1, 6)]
    assert err.getvalue().splitlines()[1::2] == [
        "  llm round 1 done in 0.50s, 120→30 tokens",
        "  llm round 2 done in 1.00s, 0→30 tokens",
        "  llm round 3 done in 1.50s, 120→0 tokens",
        "  llm round 4 done in 2.00s",
        "  llm round 5 done in 2.50s",
    ]


def test_a_failed_round_and_a_run_ended_by_an_error_are_reported_with_the_error():
    printer, err, _ = printer_pair()
    printer(LLMCallEndEvent(1, 2, 1.5, None, None, "HTTP 500: overloaded"))
    printer(AgentRunEndEvent(1, AssistantMessage([], stop_reason="error", error_message="HTTP 500: overloaded"), 2, 3.0))
    assert err.getvalue() == "  llm round 2 failed after 1.50s: HTTP 500: overloaded\n  run 1 ended: error: HTTP 500: overloaded\n"


def test_events_the_printer_has_no_line_for_write_nothing():
    """A run's start and a run that ended normally: no line, no error."""
    printer, err, out = printer_pair()
    printer(AgentRunStartEvent(1, 1))
    printer(AgentRunEndEvent(1, AssistantMessage([TextContent("Hi")], stop_reason="stop"), 1, 0.3))
    assert err.getvalue() == "" and out.getvalue() == ""


def test_a_printer_shared_by_two_agents_does_not_take_the_second_agents_reply_for_streamed():
    """Each agent numbers its runs from 1: the second agent's run 1, round 1 did not stream, so its answer must still be printed."""
    printer, _, out = printer_pair()

    def streaming(formatted: dict) -> AssistantMessage:
        emit_delta("text", "Hello")
        return AssistantMessage([TextContent("Hello")], stop_reason="stop")

    def plain(formatted: dict) -> AssistantMessage:
        return AssistantMessage([TextContent("Good day")], stop_reason="stop")

    streamed_too = []
    for llm_call in (streaming, plain):
        with YiemAgent(llm_call=llm_call, agent_event_sink=printer) as agent:
            run_agent(agent, "hi")
            streamed_too.append(printer.streamed(take_response(agent, timeout=WAIT)))
    assert streamed_too == [True, False]
    assert out.getvalue() == "Hello\n"
