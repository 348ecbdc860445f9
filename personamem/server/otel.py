"""OpenTelemetry in ``serve``: REST calls join the caller's trace, and spans go out over OTLP/HTTP.

A request's W3C ``traceparent`` (and ``tracestate``) header is the parent of the spans its handler
makes (``personamem/telemetry.py``), so a caller's trace holds personamem's operations. ``serve``
is an application, so it may install the SDK: where the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``
(or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set and no provider is yet, each worker exports its
spans in batches, and its metrics every minute (``OTEL_METRIC_EXPORT_INTERVAL``), to that collector
(the ``otel`` extra); ``OTEL_SERVICE_NAME`` names it (default ``personamem``).
"""

import os
from collections.abc import Callable

from opentelemetry import context, metrics, propagate, trace
from starlette.types import ASGIApp, Receive, Scope, Send

from personamem.errors import MissingExtraError

__all__ = ["TraceContext", "export_from_env"]

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


class TraceContext:
    """ASGI middleware: the request's trace context is current while it is handled.

    Plain ASGI rather than an ``http`` middleware function: a second ``BaseHTTPMiddleware`` layer
    cancelled a batch whose client hung up before reading the answer (the write must still commit).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one request (or pass a lifespan or websocket scope through as it is)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        token = context.attach(propagate.extract(headers))
        try:
            await self.app(scope, receive, send)
        finally:
            context.detach(token)


def export_from_env() -> Callable[[], None] | None:
    """Install an SDK provider exporting over OTLP/HTTP where the environment names a collector.

    Returns what flushes and stops it at shutdown, or None where nothing was installed (no
    endpoint, or the application already set a provider).

    Raises:
        MissingExtraError: an endpoint is set but the ``otel`` extra is not installed.
    """
    if not any(os.environ.get(name) for name in _ENDPOINTS):
        return None
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise MissingExtraError(
            ["opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"], "otel"
        ) from None
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "personamem"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    meters = MeterProvider(
        resource=resource, metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())]
    )
    metrics.set_meter_provider(meters)

    def stop() -> None:
        provider.shutdown()
        meters.shutdown()

    return stop
