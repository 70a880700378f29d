"""What a long conversation sends: compaction of the history (docs/sessions.md "Long conversations").

``YiemAgent(context_window=..., compaction=...)`` takes one of the strategies here:
``TrimHistory`` leaves the oldest turns out of what is sent, ``SummarizeHistory`` has the
model summarise them into a ``CompactionMessage`` kept in the history. The history itself
keeps every message.
"""

from .compaction import Compactor, SummarizeHistory, TrimHistory, make_compactor

__all__ = ["Compactor", "SummarizeHistory", "TrimHistory", "make_compactor"]
