"""A reply larger than ``max_reply_bytes``, streamed or not: an LLMError naming the cap, and the client stops reading.

docs/failures.md "A reply too large". A real ``http.server`` on 127.0.0.1 streams the
bytes in chunks and counts how many it could send before the client dropped the
connection: a client that kept reading would take all of them.
"""

from __future__ import annotations

import json

import pytest

from localserver import LocalServer, Reply, StreamingServer
from yiemagent import LLMError
from yiemagent.llm import AnthropicClient, OpenAIClient
from yiemagent.llm._client import DEFAULT_MAX_REPLY_BYTES
from helpers import WAIT

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}
MiB = 1024 * 1024
CAP = 1 * MiB
OFFERED = 128 * MiB  # what the server would send if the client kept reading
SLACK = 24 * MiB  # socket buffers on both sides of a loopback connection, and one read ahead


def openai_events():
    chunk = {"model": "m", "choices": [{"index": 0, "delta": {"content": "x" * 900}, "finish_reason": None}]}
    return b"", f"data: {json.dumps(chunk)}\n\n".encode()


def anthropic_events():
    start = [
        {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ]
    head = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in start).encode()
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x" * 900}}
    return head, f"event: content_block_delta\ndata: {json.dumps(delta)}\n\n".encode()


def ndjson_events():
    line = {"model": "m", "message": {"role": "assistant", "content": "x" * 900}, "done": False}
    return b"", (json.dumps(line) + "\n").encode()


CLIENTS = {
    "openai": (openai_events, "text/event-stream", lambda url, **kw: OpenAIClient(url, "m", max_retries=0, stream=True, **kw)),
    "anthropic": (anthropic_events, "text/event-stream", lambda url, **kw: AnthropicClient("m", "k", base_url=url, max_retries=0, stream=True, **kw)),
    "ollama-ndjson": (ndjson_events, "application/x-ndjson", lambda url, **kw: OpenAIClient(url, "m", max_retries=0, stream=True, **kw)),
}


@pytest.mark.spec("14")
@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_a_stream_past_max_reply_bytes_is_an_llm_error_and_the_rest_is_not_read(provider):
    """128 MiB offered, a 1 MiB cap: an LLMError naming max_reply_bytes, and the server could send only what the buffers held."""
    make_events, content_type, make_client = CLIENTS[provider]
    head, event = make_events()
    batch = event * max(1, 65536 // len(event))
    with StreamingServer(head, batch, OFFERED // len(batch), content_type=content_type) as server:
        client = make_client(server.url, max_reply_bytes=CAP)
        with pytest.raises(LLMError, match=r"the reply passed max_reply_bytes=1048576 \(\d+ bytes read, the stream not finished\)") as info:
            client(FORMATTED)
        assert server.done.wait(WAIT), "the server was still sending: the client kept the connection open"
    assert info.value.retryable is False
    assert server.sent < CAP + SLACK, f"the server sent {server.sent} bytes: the client read on past the cap"


@pytest.mark.spec("14")
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_reply_of_exactly_max_reply_bytes_is_read_and_one_byte_more_is_refused(stream):
    """The cap counts the bytes read: a reply as long as the cap is read whole, one byte longer is an LLMError naming the cap."""
    body = {"model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": "x" * 5000}, "finish_reason": "stop"}]}
    if stream:
        chunk = {"model": "m", "choices": [{"index": 0, "delta": {"content": "x" * 5000}, "finish_reason": "stop"}]}
        raw = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
        reply = Reply(chunks=[raw[i : i + 1000] for i in range(0, len(raw), 1000)])
    else:
        raw = json.dumps(body).encode()
        reply = Reply(body=raw, headers={"Content-Type": "application/json"})
    with LocalServer(lambda request: reply) as server:
        message = OpenAIClient(server.url, "m", max_retries=0, stream=stream, max_reply_bytes=len(raw))(FORMATTED)
        assert message.content[0].text == "x" * 5000
        with pytest.raises(LLMError, match=f"max_reply_bytes={len(raw) - 1}"):
            OpenAIClient(server.url, "m", max_retries=0, stream=stream, max_reply_bytes=len(raw) - 1)(FORMATTED)


def test_a_whole_reply_past_max_reply_bytes_below_max_event_bytes_names_max_reply_bytes():
    """A whole JSON reply is one event and the whole reply: the smaller cap holds and the error names it."""
    raw = json.dumps({"choices": [{"message": {"content": "x" * 300_000}, "finish_reason": "stop"}]}).encode()
    with LocalServer(lambda request: Reply(chunks=[raw[i : i + 65536] for i in range(0, len(raw), 65536)], headers={"Content-Type": "application/json"})) as server:
        client = AnthropicClient("m", "k", base_url=server.url, max_retries=0, max_reply_bytes=100_000, max_event_bytes=200_000)
        with pytest.raises(LLMError, match=r"exceeds 100000 bytes \(max_reply_bytes=100000\)"):
            client(FORMATTED)


def test_both_clients_cap_a_reply_at_64_mib_by_default_and_none_means_no_cap():
    """The default is DEFAULT_MAX_REPLY_BYTES (64 MiB, docs/failures.md says why); None turns the cap off."""
    assert DEFAULT_MAX_REPLY_BYTES == 64 * MiB
    assert OpenAIClient("http://127.0.0.1:9", "m").max_reply_bytes == 64 * MiB
    assert AnthropicClient("m", "k").max_reply_bytes == 64 * MiB
    assert OpenAIClient("http://127.0.0.1:9", "m", max_reply_bytes=None).max_reply_bytes is None

