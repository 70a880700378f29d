"""Spans exported over OTLP/HTTP to a real receiver: a local http.server that decodes each protobuf request (docs/tracing.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from cli_support import _env, cli
from localserver import LocalServer, Reply
from yiemagent.otel.export import otlp_tracer_provider


def receiver() -> LocalServer:
    """An OTLP/HTTP receiver: answers every export with an empty protobuf response."""
    return LocalServer(lambda request: Reply(200, b"", headers={"Content-Type": "application/x-protobuf"}))


def received_spans(server: LocalServer) -> tuple[list, list]:
    """The spans of every export the receiver got, decoded, and the resources they came with."""
    spans, resources = [], []
    for request in server.requests:
        headers = {k.lower(): v for k, v in request.headers.items()}
        assert request.path == "/v1/traces" and headers.get("content-type") == "application/x-protobuf"
        export = ExportTraceServiceRequest()
        export.ParseFromString(request.body)
        for resource_spans in export.resource_spans:
            resources.append({a.key: a.value.string_value for a in resource_spans.resource.attributes})
            for scope_spans in resource_spans.scope_spans:
                spans.extend(scope_spans.spans)
    return spans, resources


def attributes(span) -> dict:
    return {a.key: (a.value.string_value or a.value.int_value or list(a.value.array_value.values)) for a in span.attributes}


def test_cli_otel_exports_the_runs_spans_to_the_endpoint_in_the_environment():
    """`yiemagent --otel ask` sends invoke_agent, chat and execute_tool spans, nested, to OTEL_EXPORTER_OTLP_ENDPOINT."""
    with receiver() as server:
        done = cli("--otel", "-q", "ask", "What time is it in Asia/Tokyo?", env={"OTEL_EXPORTER_OTLP_ENDPOINT": server.url, "OTEL_SERVICE_NAME": "cli-test"})
        assert done.returncode == 0, done.stderr
        spans, resources = received_spans(server)
    names = [s.name for s in spans]
    assert names.count("invoke_agent") == 1 and "execute_tool getTime" in names and any(n.startswith("chat") for n in names), names
    run = next(s for s in spans if s.name == "invoke_agent")
    for span in spans:
        assert span.trace_id == run.trace_id
        if span is not run:
            assert span.parent_span_id == run.span_id
    call = next(s for s in spans if s.name == "execute_tool getTime")
    assert attributes(call)["gen_ai.tool.name"] == "getTime" and attributes(call)["gen_ai.tool.call.id"]
    assert resources and all(r["service.name"] == "cli-test" for r in resources)


def test_cli_otel_refuses_grpc():
    """--otel with OTEL_EXPORTER_OTLP_PROTOCOL=grpc exits 2 saying only OTLP/HTTP is exported."""
    done = cli("--otel", "ask", "hi", env={"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert done.returncode == 2 and "http/protobuf" in done.stderr


DROPPED_AGENT = textwrap.dedent(
    """
    import threading
    from yiemagent import YiemAgent, run_agent
    from yiemagent.otel import OTelSink
    from yiemagent.otel.export import otlp_tracer_provider

    provider = otlp_tracer_provider()
    entered = threading.Event()

    def llm_call(formatted):
        entered.set()
        threading.Event().wait()  # never answers

    agent = YiemAgent(llm_call=llm_call, agent_event_sink=OTelSink(provider))
    run_agent(agent, "hi")
    assert entered.wait(10)
    print("entered", flush=True)
    # the script ends here without shutdown: the run never ends
    """
)


def test_a_run_that_never_ends_is_exported_as_abandoned_when_the_process_exits():
    """A process that exits while its run waits on the model still exports invoke_agent and chat, ended, error.type "abandoned"."""
    with receiver() as server:
        done = subprocess.run(
            [sys.executable, "-c", DROPPED_AGENT], capture_output=True, text=True, timeout=60, env=_env({"OTEL_EXPORTER_OTLP_ENDPOINT": server.url})
        )
        assert "entered" in done.stdout, done.stderr
        spans, _ = received_spans(server)
    by_name = {s.name: s for s in spans}
    assert set(by_name) == {"invoke_agent", "chat"}, list(by_name)
    for span in by_name.values():
        assert span.end_time_unix_nano >= span.start_time_unix_nano > 0
        assert attributes(span)["error.type"] == "abandoned"
    assert by_name["invoke_agent"].status.message == "the run had not ended when the process exited"


def test_yiemagent_never_imports_opentelemetry_and_the_extra_is_named_when_missing():
    """`import yiemagent` loads no OpenTelemetry; without it, importing yiemagent.otel raises ImportError naming the extra."""
    script = textwrap.dedent(
        """
        import sys
        import yiemagent, yiemagent.cli.commands
        assert not any(name.startswith("opentelemetry") for name in sys.modules), "opentelemetry imported"
        sys.modules["opentelemetry"] = None  # as if the extra were not installed
        try:
            import yiemagent.otel
        except ImportError as exc:
            print(exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=_env())
    assert done.returncode == 0, done.stderr
    assert 'pip install "yiemagent[otel]"' in done.stdout


@pytest.fixture
def otel_environment(monkeypatch):
    """No OTEL_* variable but those the test sets."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    return monkeypatch


def export_one_span(provider) -> None:
    """A span "work" made with ``provider``, then the provider shut down (which flushes its batch)."""
    with provider.get_tracer("a test").start_as_current_span("work"):
        pass
    provider.shutdown()


@pytest.mark.parametrize("protocol_variables", [{}, {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
                                                {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": " http/protobuf ", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}],
                         ids=["unset", "http", "traces-variable-first"])
def test_otlp_tracer_provider_exports_to_the_endpoint_and_service_the_environment_names(otel_environment, protocol_variables):
    """otlp_tracer_provider() sends its spans over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT as OTEL_SERVICE_NAME; the traces variable of the protocol wins."""
    with receiver() as server:
        otel_environment.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server.url)
        otel_environment.setenv("OTEL_SERVICE_NAME", "in-process")
        for name, value in protocol_variables.items():
            otel_environment.setenv(name, value)
        export_one_span(otlp_tracer_provider())
        spans, resources = received_spans(server)
    assert [s.name for s in spans] == ["work"] and [r["service.name"] for r in resources] == ["in-process"]


def test_otlp_tracer_provider_names_the_service_yiemagent_when_the_environment_does_not(otel_environment):
    """Without OTEL_SERVICE_NAME the exported spans' service.name is "yiemagent"; OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is the whole URL."""
    with receiver() as server:
        otel_environment.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", server.url + "/v1/traces")
        export_one_span(otlp_tracer_provider())
        spans, resources = received_spans(server)
    assert [s.name for s in spans] == ["work"] and [r["service.name"] for r in resources] == ["yiemagent"]


@pytest.mark.parametrize("name", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"])
def test_otlp_tracer_provider_refuses_grpc_naming_the_variable(otel_environment, name):
    """A protocol other than http/protobuf is a ValueError that names the variable, its value and what is exported."""
    otel_environment.setenv(name, "grpc")
    with pytest.raises(ValueError) as refused:
        otlp_tracer_provider()
    assert str(refused.value) == f"{name}='grpc': yiemagent --otel exports with OTLP/HTTP only (http/protobuf)"
