"""yiemagent: an LLM agent that calls tools (the YiemAgent tool lifecycle).

An agent sends its conversation to a model (``llm_call``), runs each tool
call of the reply through PREPARE -> EXECUTE -> FINALIZE, hands the results
back and asks again, until the model answers. Synchronous, thread-based.

Start with five names:
    YiemAgent(llm_call=f, agent_event_sink=None)  the agent, in a `with`
    ask(agent, "question", timeout=30)       one request, one reply (.text)
    tool(function)                           an AgentTool from a typed function
    register_tool(agent.tool_store, a_tool)  give the agent that tool
    OpenAIClient(base_url, model, api_key)   a model (or AnthropicClient)

Where each part lives (the spec's sections):
    agent, loop, run         §1, §5, §6, §10: the agent, its loop, a run
    extraction, formatting   §7 calls in a reply; §14 the request to the model
    pipeline, batch          §8-§12: one call's path; sequential, parallel
    registry, types, events  §3, §4 tools and stores; §19 messages; §13 events
    tools/                   §15, §17, §18: getWeather, getTime, writeTool, ...
    typed/                   tool() and output_type: Python types, JSON Schema
    approvals                calls that wait for a person: approve, reject
    context/                 long conversations: TrimHistory, SummarizeHistory
    llm/                     the clients, FallbackLLM, OfflineLLM, ScriptedLLM
    history/                 save_history, load_history, SQLite and PostgreSQL
    cli/                     python -m yiemagent demo | ask | chat

Extras (from a clone: pip install -e '.[otel]'; README.md "Install"):
    mcp        yiemagent.mcp.MCPClient: an MCP server's tools, resources
    otel       yiemagent.otel.OTelSink: OpenTelemetry spans of every run
    postgres   PostgresSession: one conversation across many machines
    celery     yiemagent.celery.TurnService: turns as Celery tasks

The documentation is in the source tree (a clone), not in the wheel:
README.md (install, examples), docs/api.md (every public name and its
signature, by topic), docs/architecture.md (a line per module),
docs/conformance.md (each spec rule, its code and its test).
"""

import logging

from .agent import (
    YiemAgent,
    abort,
    add_message,
    ask,
    continue_agent,
    follow_up,
    resume,
    run_agent,
    shutdown,
    stream,
    take_response,
)
from .types import (
    AbortSignal,
    AfterToolCallContext,
    AgentContext,
    AgentLoopConfig,
    AgentMessage,
    AgentState,
    AgentTool,
    AgentToolCall,
    AgentToolCallBatch,
    AgentToolResult,
    ApprovalMessage,
    AssistantMessage,
    BeforeToolCallContext,
    Citation,
    CompactionMessage,
    FAILED_RUN_STOP_REASONS,
    ExecutedOutcome,
    FinalizedOutcome,
    ImageContent,
    ImmediateOutcome,
    LLMModel,
    LLMUsage,
    MessageContent,
    PendingApproval,
    PreparedToolCall,
    RunContext,
    TextContent,
    ToolResultMessage,
    UsageLimits,
    UserMessage,
    current_run_context,
    message_from_dict,
)
from .approvals import (
    approve,
    pending_approvals,
    reject,
)
from .batch import (
    execute_tool_calls,
    execute_tool_calls_parallel,
    execute_tool_calls_sequential,
    should_terminate,
)
from .loop import (
    LoopState,
)
from .errors import (
    AgentClosedError,
    ContextOverflowError,
    EmptyHistoryError,
    LLMError,
    MessageFormatError,
    RunFailedError,
    SessionInUseError,
    ToolArgumentsError,
    ToolDefinitionError,
    ToolError,
    ToolSchemaError,
    YiemAgentError,
)
from .events import (
    AgentRunEndEvent,
    AgentRunStartEvent,
    LLMCallEndEvent,
    LLMCallStartEvent,
    LLMDeltaEvent,
    SubAgentEvent,
    ToolExecEndEvent,
    ToolExecStartEvent,
    ToolExecUpdateEvent,
    tee,
)
from .extraction import (
    extract_tool_calls,
)
from .typed import (
    tool,
)
from .llm import (
    AnthropicClient,
    OfflineLLM,
    OpenAIClient,
    OpenAIResponsesClient,
)
from .llm.fallback import FallbackLLM
from .run_stream import RunStream
from .formatting import (
    format_msg_for_llm,
    openai_to_user_message,
    prepare_context,
)
from .history import load_history, save_history
from .pipeline import (
    create_error_tool_result,
    create_tool_result_message,
    execute_prepared_tool_call,
    finalize_executed_tool_call,
    prepare_tool_call,
    prepare_tool_call_arguments,
    validate_required_args,
    validate_tool_arguments,
)
from .registry import (
    ToolStore,
    clear_tools,
    get_tools,
    register_tool,
)
from .history.sessions import (
    SQLiteSession,
)
from .history.postgres import PostgresSession
from .tools.agent_tool import agent_tool
from .tokens import count_tokens
from .context import SummarizeHistory, TrimHistory
from .tools import (
    get_time_tool,
    get_weather_tool,
    list_tool,
    register_all_tools,
    write_tool_tool,
)

__version__ = "0.1.0"

# A library is quiet unless its user configures logging (Python's logging HOWTO, "Configuring
# Logging for a Library"): without a handler anywhere, logging.lastResort would print each
# WARNING of a failed run to stderr. Records still propagate to the user's handlers
# (docs/tracing.md "Logging").
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "AbortSignal",
    "AfterToolCallContext",
    "AgentClosedError",
    "AgentContext",
    "AgentLoopConfig",
    "AgentMessage",
    "AgentRunEndEvent",
    "AgentRunStartEvent",
    "AgentState",
    "AgentTool",
    "AgentToolCall",
    "AgentToolCallBatch",
    "AgentToolResult",
    "AnthropicClient",
    "ApprovalMessage",
    "AssistantMessage",
    "BeforeToolCallContext",
    "Citation",
    "CompactionMessage",
    "ContextOverflowError",
    "EmptyHistoryError",
    "ExecutedOutcome",
    "FAILED_RUN_STOP_REASONS",
    "FallbackLLM",
    "FinalizedOutcome",
    "ImageContent",
    "ImmediateOutcome",
    "LLMCallEndEvent",
    "LLMCallStartEvent",
    "LLMDeltaEvent",
    "LLMError",
    "LLMModel",
    "LLMUsage",
    "LoopState",
    "MessageContent",
    "MessageFormatError",
    "OfflineLLM",
    "OpenAIClient",
    "OpenAIResponsesClient",
    "PendingApproval",
    "PostgresSession",
    "PreparedToolCall",
    "RunContext",
    "RunFailedError",
    "RunStream",
    "SQLiteSession",
    "SessionInUseError",
    "SubAgentEvent",
    "SummarizeHistory",
    "TextContent",
    "ToolArgumentsError",
    "ToolDefinitionError",
    "ToolError",
    "ToolExecEndEvent",
    "ToolExecStartEvent",
    "ToolExecUpdateEvent",
    "ToolResultMessage",
    "ToolSchemaError",
    "ToolStore",
    "TrimHistory",
    "UsageLimits",
    "UserMessage",
    "YiemAgent",
    "YiemAgentError",
    "abort",
    "add_message",
    "agent_tool",
    "approve",
    "ask",
    "clear_tools",
    "continue_agent",
    "count_tokens",
    "create_error_tool_result",
    "create_tool_result_message",
    "current_run_context",
    "execute_prepared_tool_call",
    "execute_tool_calls",
    "execute_tool_calls_parallel",
    "execute_tool_calls_sequential",
    "extract_tool_calls",
    "finalize_executed_tool_call",
    "follow_up",
    "format_msg_for_llm",
    "get_time_tool",
    "get_tools",
    "get_weather_tool",
    "list_tool",
    "load_history",
    "message_from_dict",
    "openai_to_user_message",
    "pending_approvals",
    "prepare_context",
    "prepare_tool_call",
    "prepare_tool_call_arguments",
    "register_all_tools",
    "register_tool",
    "reject",
    "resume",
    "run_agent",
    "save_history",
    "should_terminate",
    "shutdown",
    "stream",
    "take_response",
    "tee",
    "tool",
    "validate_required_args",
    "validate_tool_arguments",
    "write_tool_tool",
]
