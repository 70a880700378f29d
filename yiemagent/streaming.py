"""The streaming side channel under its documented path (docs/api.md "Streaming side channel", docs/streaming.md).

The names live in ``yiemagent.events`` beside what reaches the sink; this module gives the
four a custom ``llm_call`` uses, the very same objects. Thread safety: as ``yiemagent.events``
(each run's target is a ``contextvars`` value, so agents streaming at once never mix).
"""

from .events import current_abort_signal, current_stream, emit_delta, stream_to

__all__ = ["current_abort_signal", "current_stream", "emit_delta", "stream_to"]
