"""LLM clients: each is a callable ``llm_call(formatted) -> AssistantMessage`` (spec §14 llmCall).

``formatted`` is the OpenAI-format dict made by ``format_msg_for_llm``; only the client
changes between providers.
"""

from .anthropic import AnthropicClient
from .offline import OfflineLLM
from .openai import OpenAIClient
from .scripted import ScriptedLLM

__all__ = ["AnthropicClient", "OfflineLLM", "OpenAIClient", "ScriptedLLM"]
