"""Python logging: one ``yiemagent`` logger tree, quiet at INFO for a run that goes well, secrets masked (docs/tracing.md "Logging")."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

from helpers import ROOT, WAIT, blocking_tool, make_tool
from localserver import LocalServer, Reply
from yiemagent import abort, continue_agent, run_agent, shutdown, take_response
from yiemagent.llm import OpenAIClient, ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply

SECONDS = r"\d+\.\d{3}"  # a duration as the debug lines give it: "%.3f"

OK = {"choices": [{"message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}], "model": "m"}


def test_a_run_that_goes_well_logs_nothing_at_info_and_its_story_at_debug(agents, caplog):
    """A run with a tool round logs only DEBUG records, all under 'yiemagent': its start, each round, its end with the stop reason."""
    agent = agents(ScriptedLLM([tool_call_reply(("c1", "echo", {})), "done"]), [make_tool("echo")])
    with caplog.at_level(logging.DEBUG):
        run_agent(agent, "go")
        assert take_response(agent, timeout=WAIT).stop_reason == "stop"
        shutdown(agent, timeout=WAIT)
    ours = [r for r in caplog.records if r.name.startswith("yiemagent")]
    assert ours and all(r.name == "yiemagent" or r.name.startswith("yiemagent.") for r in ours)
    assert [r for r in ours if r.levelno >= logging.INFO] == []
    story = [r.getMessage() for r in ours if r.name == "yiemagent.run"]
    assert len(story) == 4, story
    patterns = [
        r"run 1 started: 1 new message\(s\)",
        rf"run 1 round 1: llm_call took {SECONDS} s",
        rf"run 1 round 2: llm_call took {SECONDS} s",
        rf"run 1 ended: stop_reason 'stop' after 2 round\(s\) in {SECONDS} s, 0 input \+ 0 output tokens",
    ]
    assert all(re.fullmatch(pattern, line) for pattern, line in zip(patterns, story)), story


def test_a_continued_run_and_a_failed_round_say_so_in_their_debug_lines(agents, caplog):
    """A run that continue_agent asked for says so as it starts; a round whose llm_call failed gives the failure after its time."""

    def failing(formatted):
        raise RuntimeError("the model is down")

    agent = agents(ScriptedLLM(["first answer", failing]))
    run_agent(agent, "go")
    assert take_response(agent, timeout=WAIT).stop_reason == "stop"
    assert agent.wait_until_idle(WAIT)
    with caplog.at_level(logging.DEBUG, logger="yiemagent.run"):
        continue_agent(agent)
        assert take_response(agent, timeout=WAIT).stop_reason == "error"
        assert agent.wait_until_idle(WAIT)
    story = [r.getMessage() for r in caplog.records if r.name == "yiemagent.run" and r.levelno == logging.DEBUG]
    assert len(story) == 3, story
    assert story[0] == "run 2 started: 0 new message(s) (continue_agent)"
    assert re.fullmatch(rf"run 2 round 1: llm_call took {SECONDS} s; LLM call failed: RuntimeError: the model is down", story[1]), story
    assert re.fullmatch(rf"run 2 ended: stop_reason 'error' after 1 round\(s\) in {SECONDS} s, 0 input \+ 0 output tokens", story[2]), story


def test_an_aborted_run_is_logged_at_info_with_its_reason(agents, caplog):
    """abort() is something a person wants to see: one INFO record naming the run and the reason."""
    tool, entered, release = blocking_tool("slow")
    agent = agents(ScriptedLLM([tool_call_reply(("c1", "slow", {}))]), [tool])
    with caplog.at_level(logging.INFO, logger="yiemagent"):
        run_agent(agent, "go")
        assert entered.wait(WAIT)
        abort(agent, "the user pressed stop")
        release.set()
        take_response(agent, timeout=WAIT)
    assert [r.getMessage() for r in caplog.records if r.name == "yiemagent.run"] == ["run 1 aborted: the user pressed stop"]


def test_a_retry_is_logged_with_its_wait_and_the_key_masked(caplog):
    """A 503 that is retried logs one INFO record on yiemagent.llm with the wait; the key the server echoed is ***."""
    key = "sk-logging-0123456789abcdef"
    replies = [Reply(status=503, body={"error": {"message": f"overloaded for key {key}"}}), Reply(body=OK)]
    with LocalServer(lambda request: replies.pop(0) if len(replies) > 1 else replies[0]) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", api_key=key, backoff_factor=0.001)
        with caplog.at_level(logging.DEBUG, logger="yiemagent"):
            client({"messages": [{"role": "user", "content": "hi"}]})
    retries = [r for r in caplog.records if r.name == "yiemagent.llm" and r.levelno == logging.INFO]
    assert len(retries) == 1 and " s after attempt 1 failed" in retries[0].getMessage()
    assert all(key not in r.getMessage() for r in caplog.records)
    assert "***" in retries[0].getMessage()


# --- quiet unless asked (docs/tracing.md "Logging") ----------------------------------------

FAILING_RUN = """
import logging, sys
{setup}
from yiemagent import YiemAgent, run_agent, take_response

def broken_model(formatted):
    raise RuntimeError("the model is down")

with YiemAgent(llm_call=broken_model, agent_event_sink=None) as agent:
    run_agent(agent, "hi")
    reply = take_response(agent, timeout=20)
print(reply.stop_reason)
"""


def run_failing(setup: str = "") -> subprocess.CompletedProcess:
    """A fresh interpreter runs an agent whose model raises: its run ends with stop_reason "error"."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return subprocess.run(
        [sys.executable, "-c", FAILING_RUN.format(setup=setup)], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT
    )


def test_a_failing_run_prints_nothing_when_the_program_configured_no_logging():
    """With no logging configured, a run that fails writes nothing to stderr (the library's NullHandler keeps Python's last resort quiet)."""
    done = run_failing()
    assert (done.returncode, done.stdout, done.stderr) == (0, "error\n", "")


def test_a_program_that_configures_logging_still_sees_the_failed_runs_warning():
    """logging.basicConfig() in the program: the failed run's WARNING from 'yiemagent.run' reaches its handler on stderr."""
    done = run_failing("logging.basicConfig(format='%(name)s %(levelname)s %(message)s')")
    assert done.returncode == 0 and done.stdout == "error\n", done.stderr
    assert re.search(r"^yiemagent\.run WARNING run ended with an error: .*the model is down", done.stderr, re.M), done.stderr
