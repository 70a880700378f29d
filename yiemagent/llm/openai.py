"""A client for OpenAI's chat-completions API and every server that speaks it (spec §14 llmCall).

OpenAI, Ollama ``/v1``, vLLM, llama.cpp's server, Groq, Together, DeepSeek, OpenRouter,
Mistral. ``OpenAIClient`` sends the body module ``_openai_request`` builds
(``build_openai_request``: custom and legacy calls, images, reasoning sent back, native
typed answers) and reads the reply with module ``_openai_reply`` (``parse_openai_response``,
``OpenAIStream``: lenient parsing, reasoning, refusals, citations, decision 13's usage);
both are importable from here.
"""

from __future__ import annotations

from typing import Any, Optional
from urllib.parse import urlsplit

from ..types import AssistantMessage
from ._client import DEFAULT_DEADLINE_S, DEFAULT_MAX_REPLY_BYTES, HTTPClient, StreamAccumulator
from ._openai_reply import CUSTOM as CUSTOM, ECHOED_FIELDS, OpenAIStream, parse_openai_response, parse_openai_stream
from ._openai_reply import _assistant_message as _assistant_message, _usage as _usage  # module _responses_reply reads with them
from ._openai_request import MAX_IMAGE_BYTES as MAX_IMAGE_BYTES, NATIVE_BY_HOST, _NATIVE_FORMS, build_openai_request, sent_response_format
from ._openai_request import _custom_input as _custom_input, _sendable_image as _sendable_image  # module responses builds with them
from ._sse import DEFAULT_MAX_EVENT_BYTES
from ._wire import Emit, join_url

__all__ = ["ECHOED_FIELDS", "OpenAIClient", "OpenAIStream", "build_openai_request", "parse_openai_response", "parse_openai_stream"]


class OpenAIClient(HTTPClient):
    """``llm_call`` for an OpenAI-compatible server: POST ``{base_url}/chat/completions``.

    ``options`` are request defaults (``temperature``, ``tool_choice``, ``max_tokens``,
    ``parallel_tool_calls``, …); keys a formatted dict carries beyond ``messages`` and
    ``tools`` override them for that call. ``stream=True`` (or ``"stream": True`` in the
    options or the formatted dict) reads the reply as server-sent events and emits each
    text and thinking fragment as it arrives (module ``_client``). ``deadline_s`` bounds
    the whole call (module ``_guard``); ``timeout`` bounds each connect and each read.
    ``headers`` are sent with every request; those that carry credentials are masked
    like the key (module ``_secrets``). ``max_retry_delay_ms`` may be changed after
    construction (``YiemAgent(max_retry_delay_ms=...)`` does).

    Args (beyond docs/api.md's first list, all keyword-only):
        stream: read replies as server-sent events and emit deltas (docs/streaming.md).
        deadline_s: the longest the whole call may take, retries included (default 600;
            None: no limit). ``timeout`` bounds each connect and each read.
        headers: extra request headers (Azure's ``api-key``, OpenRouter's ``HTTP-Referer``).
        max_event_bytes: the largest one server-sent event, or one whole JSON reply, may be (default 16 MiB).
        max_reply_bytes: the largest a whole reply may be, streamed or not (default 64 MiB,
            ``DEFAULT_MAX_REPLY_BYTES`` says why); past it an ``LLMError`` naming the cap, and
            nothing more is read. None: no cap.
        native_output: the server's JSON-schema mode, for typed answers
            (docs/api.md "Native typed answers"): "json_schema" (OpenAI's
            ``response_format``, vLLM, llama.cpp's own server), "json_object"
            (llama-cpp-python's server, which takes the schema beside ``json_object``), or
            None: known by the host (``NATIVE_BY_HOST``: api.openai.com), else not known, so
            ``output_mode="auto"`` gives the answer through the ``final_result`` tool.
        options, backoff_factor: request defaults; the base of the exponential backoff.

    Thread safety: a client may serve several agents and threads at once.
    """

    _LABEL = "OpenAI-compatible"  # the server's name in error messages

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: Optional[str] = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_retry_delay_ms: float = 60000,
        backoff_factor: float = 0.5,
        options: Optional[dict[str, Any]] = None,
        headers: Optional[dict[str, str]] = None,
        stream: bool = False,
        deadline_s: Optional[float] = DEFAULT_DEADLINE_S,
        max_event_bytes: Optional[int] = DEFAULT_MAX_EVENT_BYTES,
        max_reply_bytes: Optional[int] = DEFAULT_MAX_REPLY_BYTES,
        native_output: Optional[str] = None,
    ) -> None:
        if native_output is not None and native_output not in _NATIVE_FORMS:
            raise ValueError(f"native_output must be one of {', '.join(map(repr, _NATIVE_FORMS))} or None, got {native_output!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.options = dict(options or {})
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        if api_key:
            all_headers["Authorization"] = f"Bearer {api_key}"
        self.provider = urlsplit(self.base_url).hostname or "openai"
        self.native_output = native_output or NATIVE_BY_HOST.get(self.provider)
        self._init_http(
            self._LABEL,
            api_key=api_key,
            headers=all_headers,
            custom_headers=headers,
            base_url=self.base_url,
            timeout=timeout,
            max_retries=max_retries,
            max_retry_delay_ms=max_retry_delay_ms,
            backoff_factor=backoff_factor,
            deadline_s=deadline_s,
            stream=stream,
            max_event_bytes=max_event_bytes,
            max_reply_bytes=max_reply_bytes,
        )

    @property
    def url(self) -> str:
        return join_url(self.base_url, "/chat/completions")

    def __repr__(self) -> str:
        base_url = self._transport.secrets.redact(self.base_url)
        return f"OpenAIClient(base_url={base_url!r}, model={self.model!r}, {self._repr_tail()})"

    def _body(self, formatted: dict[str, Any]) -> dict[str, Any]:
        body = build_openai_request(formatted, self.model, self.options, self.provider)
        sent_response_format(body, self.native_output)
        if self.stream:
            body.setdefault("stream", True)
        if body.get("stream"):
            body.setdefault("stream_options", {"include_usage": True})
        return body

    def _parse(self, reply: Any) -> AssistantMessage:
        return parse_openai_response(reply, self.provider)

    def _accumulator(self, emit: Emit) -> StreamAccumulator:
        return OpenAIStream(self.provider, emit)
