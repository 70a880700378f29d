"""Reading an agent's spans back from the OpenTelemetry SDK's in-memory exporter (tests/extras/test_otel_*.py)."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from yiemagent.llm import ScriptedLLM
from yiemagent.otel import OTelSink


class Traced:
    """A tracer provider of its own (made with ``options``: a sampler...) whose ended spans land in memory."""

    def __init__(self, **options):
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(**options)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def sink(self, **kwargs) -> OTelSink:
        return OTelSink(self.provider, **kwargs)

    def spans(self) -> list:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list:
        return [s for s in self.spans() if s.name == name]

    def one(self, name: str):
        found = self.named(name)
        assert len(found) == 1, [s.name for s in self.spans()]
        return found[0]


class NamedLLM(ScriptedLLM):
    """ScriptedLLM that says which model and provider it is, as the HTTP clients do."""

    model = "test-model"
    provider = "openai"
