"""A model's reply must not break the next run (review): real agent, real client, real local server."""

from __future__ import annotations

import pytest

from localserver import LocalServer, Reply
from yiemagent import YiemAgent, run_agent, shutdown, take_response
from yiemagent.llm import OpenAIClient
from helpers import WAIT



@pytest.mark.parametrize("arguments", ["[" * 5000, "1" * 5000], ids=["nested-5000", "int-5000-digits"])
def test_tool_arguments_json_cannot_read_do_not_break_the_next_run(arguments):
    replies = [
        {"choices": [{"message": {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": arguments}}]}, "finish_reason": "tool_calls"}]},
    ]
    done = {"choices": [{"message": {"content": "done"}, "finish_reason": "stop"}]}
    with LocalServer(lambda request: Reply(body=replies.pop(0) if replies else done)) as server:
        agent = YiemAgent(llm_call=OpenAIClient(server.url, "m", max_retries=0), agent_event_sink=None)
        try:
            run_agent(agent, "what time is it?")
            take_response(agent, WAIT)
            run_agent(agent, "and now?")
            assert take_response(agent, WAIT).stop_reason == "stop"
        finally:
            shutdown(agent, WAIT)
