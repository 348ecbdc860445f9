"""OpenTelemetry: a span per operation with the pipeline's stages under it, pseudonyms not ids, and
a REST call that joins its caller's trace and reaches a real OTLP/HTTP collector."""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import personamem.telemetry
from personamem import PersonaMem
from personamem.contract import MemoryApi
from personamem.testing.servers import free_port, personamem_server

QUERY = "ZQXQUERY what instrument do I play?"


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """personamem's tracer on an SDK provider of this test's own (the global one stays unset)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(personamem.telemetry, "tracer", provider.get_tracer("personamem"))
    yield exporter
    provider.shutdown()


def _children(found: tuple[ReadableSpan, ...], parent: ReadableSpan) -> list[str]:
    assert parent.context is not None
    return [s.name for s in found if s.parent is not None and s.parent.span_id == parent.context.span_id]


def test_every_operation_is_a_span(mem: PersonaMem, spans: InMemorySpanExporter) -> None:
    operations = [n for n, v in vars(MemoryApi).items() if inspect.isfunction(v) and not n.startswith("_")]
    untraced = [n for n in operations if not hasattr(vars(type(mem)).get(n), "__wrapped__")]
    assert untraced == [], "operations of MemoryApi without a span"

    mem.add("ana", "I play the cello in a small orchestra.", id="cello")
    context = mem.context("ana", QUERY)
    found = spans.get_finished_spans()
    (add,) = [s for s in found if s.name == "personamem.add"]
    (root,) = [s for s in found if s.name == "personamem.context"]
    assert root.parent is None and add.attributes is not None and root.attributes is not None
    assert add.attributes["gen_ai.operation.name"] == "create_memory"
    assert {"personamem.memory", "personamem.first_stage", "personamem.fit"} <= set(_children(found, root))
    (first,) = [s for s in found if s.name == "personamem.first_stage"]
    assert "personamem.ranker" in _children(found, first)  # the default's learned ranker, under it
    assert "personamem.sql" in _children(found, add)  # the add's transaction
    sql = [s for s in found if s.name == "personamem.sql"]
    assert {(s.attributes or {}).get("db.system.name") for s in sql} == {"sqlite"}
    assert any((s.attributes or {}).get("personamem.sql.write") for s in sql)
    # the context's reads are in its trace (its log row is written behind it, in a trace of its own)
    in_trace = [s for s in sql if s.context and root.context and s.context.trace_id == root.context.trace_id]
    assert in_trace
    attributes = dict(root.attributes)
    assert attributes["gen_ai.operation.name"] == "search_memory"
    assert attributes["personamem.interaction_id"] == context.interaction_id
    assert attributes["gen_ai.memory.record.count"] == len(context.hits) == 1
    store_id = attributes["gen_ai.memory.store.id"]
    assert isinstance(store_id, str) and len(store_id) == 16 and "ana" not in store_id
    every = [str(v) for s in found for v in (s.attributes or {}).values()]
    assert not any("ZQXQUERY" in v or "cello" in v for v in every)  # no query or record text


def test_query_text_only_when_the_operator_opts_in(
    mem: PersonaMem, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem.add("ana", "I play the cello.")
    monkeypatch.setenv("PERSONAMEM_OTEL_CONTENT", "1")
    mem.search("ana", QUERY, k=3, method="bm25")
    (search,) = [s for s in spans.get_finished_spans() if s.name == "personamem.search"]
    assert search.attributes is not None
    assert search.attributes["gen_ai.memory.query.text"] == QUERY
    assert (search.attributes["personamem.method"], search.attributes["gen_ai.retrieval.top_k"]) == (
        "bm25",
        3,
    )


@pytest.fixture
def switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off before the store opens and ``spans`` installs this test's tracer: otherwise a background
    thread (the store's own, or one an earlier test left running) may start a span in between."""
    monkeypatch.setattr(personamem.telemetry, "enabled", False)


def test_no_span_at_all_when_switched_off(
    switched_off: None, mem: PersonaMem, spans: InMemorySpanExporter
) -> None:
    mem.add("ana", "I play the cello.")
    mem.search("ana", "cello")
    assert spans.get_finished_spans() == ()


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: keeps each export request's body."""

    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/traces":
            type(self).bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.slow
@pytest.mark.enable_socket
def test_a_rest_call_joins_its_callers_trace_and_reaches_the_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    collector = ThreadingHTTPServer(("127.0.0.1", port), _Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    with PersonaMem.open(tmp_path / "store") as mem:
        key, _ = mem.inspection.keys.create("acme")
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    try:
        with (
            personamem_server(tmp_path / "store") as url,
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        ):
            http.post("/v1/records", json={"user_id": "ana", "text": "I play the cello."}).raise_for_status()
            traced = {"traceparent": f"00-{trace_id}-{parent_id}-01"}
            http.post(
                "/v1/context", json={"user_id": "ana", "query": "music?"}, headers=traced
            ).raise_for_status()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not _spans(_Collector.bodies, "personamem.context"):
                time.sleep(0.2)
    finally:
        collector.shutdown()
        collector.server_close()
    (context,) = _spans(_Collector.bodies, "personamem.context")
    assert context.trace_id.hex() == trace_id and context.parent_span_id.hex() == parent_id
    names = {s.name for s in _spans(_Collector.bodies, None) if s.trace_id == context.trace_id}
    assert {"personamem.first_stage", "personamem.fit"} <= names


def _spans(bodies: list[bytes], name: str | None) -> list[Any]:
    found = []
    for body in list(bodies):
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                found += [s for s in scope.spans if name is None or s.name == name]
    return found


def test_each_operations_latency_is_a_histogram(mem: PersonaMem, monkeypatch: pytest.MonkeyPatch) -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    histogram = meters.get_meter("personamem").create_histogram("personamem.operation.duration", unit="s")
    monkeypatch.setattr(personamem.telemetry, "duration", histogram)
    mem.add("ana", "I play the cello.")
    mem.search("ana", "cello", k=2)
    data = reader.get_metrics_data()
    assert data is not None
    (metric,) = [m for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics]
    points = [p for p in metric.data.data_points if isinstance(p, HistogramDataPoint)]
    counted = {dict(p.attributes or {})["personamem.operation"]: p.count for p in points}
    assert counted == {"add": 1, "search": 1} and metric.unit == "s"
    meters.shutdown()
