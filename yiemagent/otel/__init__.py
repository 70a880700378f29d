"""Tracing with OpenTelemetry (the optional extra ``yiemagent[otel]``; docs/tracing.md).

Beyond the spec::

    from yiemagent import YiemAgent, tee
    from yiemagent.otel import OTelSink

    agent = YiemAgent(llm_call=..., agent_event_sink=tee(printer, OTelSink()))

Each run becomes an ``invoke_agent`` span, each LLM round a ``chat {model}`` span and each
tool call an ``execute_tool {name}`` span, after the OpenTelemetry GenAI semantic
conventions. The sink needs only ``opentelemetry-api``; the extra also brings the SDK and
the OTLP/HTTP exporter that ``yiemagent --otel`` uses (``yiemagent.otel.export``).

Importing ``yiemagent`` never imports this package or OpenTelemetry; importing this
package without the extra raises ``ImportError`` saying what to install.
"""

from __future__ import annotations

_HINT = 'yiemagent.otel needs the OpenTelemetry API: pip install "yiemagent[otel]"'

try:
    import opentelemetry.trace  # noqa: F401 - the one dependency of the sink
except ImportError as _missing:
    raise ImportError(_HINT) from _missing

from .sink import OTelSink

__all__ = ["OTelSink"]
