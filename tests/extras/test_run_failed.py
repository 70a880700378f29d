"""A run that fails says so: ``ask`` raises ``RunFailedError`` unless ``check=False`` (docs/api.md "A run that fails says so")."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import ROOT, WAIT, make_agent, make_tool
from localserver import free_port_url
from yiemagent import (
    FAILED_RUN_STOP_REASONS,
    AssistantMessage,
    OpenAIClient,
    RunFailedError,
    TextContent,
    YiemAgentError,
    ask,
    continue_agent,
    pending_approvals,
    approve,
    take_response,
)
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.otel import _content as otel_content

KNOWN_STOP_REASONS = ["stop", "length", "tool_use", "content_filter", "pause_turn", "tool_use_terminated", "awaiting_approval", None]


def test_the_failed_stop_reasons_are_the_six_the_spec_names_and_the_otel_sink_reads_the_same_set():
    """One definition: the six stop reasons of a failed run, which the OTel sink shares."""
    assert FAILED_RUN_STOP_REASONS == {"error", "max_rounds", "usage_limit", "output_invalid", "refusal", "aborted"}
    assert otel_content.FAILED_RUN_STOP_REASONS is FAILED_RUN_STOP_REASONS


@given(
    stop_reason=st.sampled_from(sorted(FAILED_RUN_STOP_REASONS) + KNOWN_STOP_REASONS) | st.text(max_size=12),
    cause=st.none() | st.text(min_size=1, max_size=40),
)
def test_raise_for_failure_raises_exactly_for_a_failed_stop_reason_naming_it_and_its_cause(stop_reason, cause):
    """``raise_for_failure`` returns the reply itself, or raises a ``RunFailedError`` that names the stop reason and the cause and holds the reply."""
    reply = AssistantMessage([TextContent("partial")], stop_reason=stop_reason, error_message=cause)
    if stop_reason not in FAILED_RUN_STOP_REASONS:
        assert reply.raise_for_failure() is reply
        return
    with pytest.raises(RunFailedError) as raised:
        reply.raise_for_failure()
    assert raised.value.reply is reply and isinstance(raised.value, YiemAgentError)
    assert repr(stop_reason) in str(raised.value)
    assert (cause or "no cause given") in str(raised.value)


def test_a_run_failed_error_pickles_with_its_reply():
    """A ``RunFailedError`` crosses a process boundary (a Celery result, a pool) with its reply and its message."""
    error = RunFailedError(AssistantMessage([], stop_reason="error", error_message="the server said 503"))
    back = pickle.loads(pickle.dumps(error))
    assert back.reply == error.reply and str(back) == str(error)


def test_ask_raises_when_the_models_server_is_down_and_check_false_returns_the_reply():
    """With nothing listening at the model's URL, ``ask`` raises ``RunFailedError`` naming stop_reason 'error' and the
    connection failure; ``check=False`` returns the same kind of reply, as before."""
    client = OpenAIClient(f"{free_port_url()}/v1", "m", max_retries=0, timeout=WAIT)
    with make_agent(client, builtin_tools=False) as agent:
        with pytest.raises(RunFailedError) as raised:
            ask(agent, "hello?", timeout=WAIT)
        assert raised.value.reply.stop_reason == "error" and raised.value.reply.text == ""
        assert "stop_reason 'error'" in str(raised.value) and "127.0.0.1" in str(raised.value)
        reply = ask(agent, "hello again?", timeout=WAIT, check=False)
        assert reply.stop_reason == "error" and reply.error_message


def test_a_script_whose_model_is_down_exits_non_zero_naming_the_failure():
    """The user study's script (an ``ask`` and a print, the server down) now stops with status 1 and a traceback naming
    ``RunFailedError`` and the stop reason, where it printed '' and exited 0."""
    script = textwrap.dedent(
        f"""
        from yiemagent import YiemAgent, OpenAIClient, ask
        with YiemAgent(llm_call=OpenAIClient("{free_port_url()}/v1", "m", max_retries=0), agent_event_sink=None) as agent:
            print(repr(ask(agent, "hello?", timeout=60).text))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == ""
    assert "yiemagent.errors.RunFailedError: the run failed with stop_reason 'error'" in done.stderr


def test_a_run_stopped_by_max_rounds_raises_and_a_refusal_raises():
    """Every failed stop reason raises from ``ask``: a run cut by ``max_rounds``, a reply that refuses."""
    looping = ScriptedLLM([tool_call_reply(("c1", "echo", {"text": "a"})), tool_call_reply(("c2", "echo", {"text": "b"}))])
    with make_agent(looping, make_tool("echo"), builtin_tools=False, max_rounds=1) as agent:
        with pytest.raises(RunFailedError, match="stop_reason 'max_rounds'"):
            ask(agent, "go", timeout=WAIT)
    refusing = ScriptedLLM([AssistantMessage([TextContent("I can't help with that.")], stop_reason="refusal")])
    with make_agent(refusing, builtin_tools=False) as agent:
        with pytest.raises(RunFailedError, match="stop_reason 'refusal'") as raised:
            ask(agent, "go", timeout=WAIT)
        assert raised.value.reply.text == "I can't help with that."


def test_a_run_waiting_for_approval_is_not_a_failure():
    """``ask`` returns a reply with stop_reason 'awaiting_approval': the run waits for a person, it did not fail."""
    llm = ScriptedLLM([tool_call_reply(("c1", "echo", {"text": "a"})), "done"])
    defer = lambda ctx, signal: {"defer": True, "reason": "needs a person"}  # noqa: E731
    with make_agent(llm, make_tool("echo"), builtin_tools=False, before_tool_call=defer) as agent:
        reply = ask(agent, "go", timeout=WAIT)
        assert reply.stop_reason == "awaiting_approval"
        (pending,) = pending_approvals(agent)
        approve(agent, pending.tool_call_id)
        continue_agent(agent)
        assert take_response(agent, WAIT).text == "done"
