"""The command line: ``yiemagent ask``, ``yiemagent chat``, ``yiemagent demo`` (``commands``), the
console event sink that shows a run live (``console``), and the offline demo (``demo``)."""

from .commands import build_llm, main

__all__ = ["build_llm", "main"]
