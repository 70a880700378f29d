"""Python types at the agent's edges: functions as tools (docs/adding-tools.md).

Beyond the spec. ``functions`` turns a typed Python function into a spec §3 ``AgentTool``
(``tool()``): its signature becomes the ``inputSchema``, the model's JSON becomes the
function's arguments, its return value becomes the result. ``_codecs`` is the one place
that turns Python types into JSON Schema and JSON into values of those types;
``_parameter_fill`` fills what the model never sends (the pipeline's parameters, fresh
defaults).
"""

from .functions import PIPELINE_PARAMETERS, TOOL_NAME_PATTERN, FunctionToolExecute, to_tool_result, tool

__all__ = ["PIPELINE_PARAMETERS", "TOOL_NAME_PATTERN", "FunctionToolExecute", "to_tool_result", "tool"]
