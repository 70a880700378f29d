"""Exporting spans over OTLP/HTTP, configured by the standard environment (``yiemagent --otel``).

Beyond the spec (docs/tracing.md "From the command line"). ``otlp_tracer_provider`` makes
an OpenTelemetry SDK ``TracerProvider`` whose spans go, in batches, to the OTLP/HTTP
(protobuf) endpoint the ``OTEL_EXPORTER_OTLP_*`` variables name:
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (the whole URL) or ``OTEL_EXPORTER_OTLP_ENDPOINT``
(a base URL, ``/v1/traces`` appended), ``..._HEADERS``, ``..._TIMEOUT``,
``..._CERTIFICATE``, ``..._COMPRESSION``; with none of them, ``http://localhost:4318``.
The exporter reads them itself (``opentelemetry-exporter-otlp-proto-http``, in the
``otel`` extra); ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` name the service
(``yiemagent`` when unset). gRPC (``OTEL_EXPORTER_OTLP_PROTOCOL=grpc``) is refused with a
``ValueError``: the extra carries only the HTTP exporter.

The caller owns the provider and calls ``shutdown()`` on it when done: that flushes the
last batch (the SDK also does it at interpreter exit).
"""

from __future__ import annotations

import os

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

__all__ = ["otlp_tracer_provider"]

_PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


def otlp_tracer_provider() -> TracerProvider:
    """An SDK tracer provider exporting over OTLP/HTTP to where the environment says.

    Raises:
        ValueError: the environment asks for a protocol other than ``http/protobuf``.
    """
    for name in _PROTOCOL_VARIABLES:
        protocol = os.environ.get(name, "").strip()
        if protocol:
            if protocol != "http/protobuf":
                raise ValueError(f"{name}={protocol!r}: yiemagent --otel exports with OTLP/HTTP only (http/protobuf)")
            break
    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or "yiemagent"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider
