"""yiemagent: the Python reference implementation of the YiemAgent tool lifecycle.

Every public name is importable from here and listed, with its signature, in docs/api.md; docs/naming.md maps
each spec name to its Python name and docs/conformance.md each spec rule to its code.
"""

from . import _moved  # noqa: F401  (old import paths of moved modules: docs/architecture.md)
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
    EmptyHistoryError,
    LLMError,
    MessageFormatError,
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
)
from .llm.fallback import FallbackLLM
from .formatting import (
    format_msg_for_llm,
    openai_to_user_message,
    prepare_context,
)
from .agent import add_message
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
from .tools import (
    get_time_tool,
    get_weather_tool,
    list_tool,
    register_all_tools,
    write_tool_tool,
)

__version__ = "0.1.0"

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
    "EmptyHistoryError",
    "ExecutedOutcome",
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
    "PendingApproval",
    "PostgresSession",
    "PreparedToolCall",
    "RunContext",
    "SQLiteSession",
    "SessionInUseError",
    "SubAgentEvent",
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
    "take_response",
    "tee",
    "tool",
    "validate_required_args",
    "validate_tool_arguments",
    "write_tool_tool",
]
