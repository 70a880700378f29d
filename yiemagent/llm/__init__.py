"""LLM clients: each is a callable ``llm_call(formatted) -> AssistantMessage`` (spec §14 llmCall).

``formatted`` is the OpenAI-format dict made by ``format_msg_for_llm``; only the client
changes between providers. ``OpenAIResponsesClient`` speaks OpenAI's Responses API.

The HTTP clients share their wire (decisions 13 and 14): ``_sse`` parses server-sent
events, ``_guard`` bounds a call by its deadline and ends it on abort, ``_http`` sends,
retries and reads, ``_secrets`` masks credentials, ``_wire`` reads errors and counts,
``_client`` calls with or without a stream.
"""

from .anthropic import AnthropicClient
from .offline import OfflineLLM
from .openai import OpenAIClient
from .responses import OpenAIResponsesClient
from .scripted import ScriptedLLM

__all__ = ["AnthropicClient", "OfflineLLM", "OpenAIClient", "OpenAIResponsesClient", "ScriptedLLM"]
