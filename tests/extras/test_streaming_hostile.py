"""The agent side of streaming against a sink that does more than print (review)."""

from __future__ import annotations

import json
import threading

from localserver import LocalServer, Reply
from yiemagent import LLMDeltaEvent, YiemAgent, run_agent, shutdown, take_response
from yiemagent.llm import OpenAIClient
from helpers import WAIT

FORMATTED = {"messages": [{"role": "user", "content": "translate"}]}


def stream_of(*pieces: str) -> Reply:
    events = [{"choices": [{"delta": {"content": p}}]} for p in pieces] + [{"choices": [{"delta": {}, "finish_reason": "stop"}]}]
    return Reply(chunks=["".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n"])


def test_a_sink_that_makes_a_streaming_llm_call_of_its_own_on_a_delta_does_not_deadlock_the_run():
    """The sink's own client emitted into the run's relay from inside it and waited for ever on the relay's lock."""
    with LocalServer(lambda request: stream_of("Hello", " world")) as run_server, LocalServer(lambda request: stream_of("Hallo")) as sink_server:
        sink_client = OpenAIClient(sink_server.url, "m", stream=True, max_retries=0)
        shown: list[str] = []
        translated: list[str] = []

        def sink(event):
            if isinstance(event, LLMDeltaEvent):
                shown.append(event.text)
                if not translated:
                    translated.append(sink_client(FORMATTED).content[0].text)

        agent = YiemAgent(llm_call=OpenAIClient(run_server.url, "m", stream=True, max_retries=0), agent_event_sink=sink)
        try:
            run_agent(agent, "hi")
            finished = threading.Event()
            outcome: list = []
            threading.Thread(target=lambda: (outcome.append(take_response(agent, WAIT)), finished.set()), daemon=True).start()
            assert finished.wait(WAIT * 2), "the run is stuck inside its sink"
            assert outcome[0] is not None and outcome[0].stop_reason == "stop"
        finally:
            shutdown(agent, 1)
    assert translated == ["Hallo"]
    assert "".join(shown) == "Hello world"  # the sink's own deltas are not the run's
