"""OpenTelemetry spans for every memory operation, through the API alone (library-style).

personamem never installs a tracer or meter provider: where the application has set one (its own SDK setup,
or ``opentelemetry-instrument``; ``serve`` sets one from the standard ``OTEL_*`` variables when the
``otel`` extra is installed), every operation of the facade is a span ``personamem.<operation>``,
so the SDK, the REST routes, MCP's tools and the adapters all trace through the same place; the
pipeline's stages are child spans (``personamem.personalize``, ``personamem.first_stage``,
``personamem.select``, ``personamem.memory``, ``personamem.fit``), as are encoding, vector search
and each SQL transaction or fast read (``personamem.sql``, with ``db.system.name`` and whether it
writes; never a statement's values). Without one, the API hands out
non-recording spans and nothing here computes an attribute. Each operation's latency is also the
histogram ``personamem.operation.duration`` (seconds; by operation and outcome), beside the
Prometheus metrics ``serve`` has always had.

Attributes follow the GenAI memory conventions where they exist (``gen_ai.operation.name`` of
``search_memory``, ``create_memory``, ``update_memory``, ``delete_memory``; ``gen_ai.memory.store.id``,
``gen_ai.memory.record.count``, ``gen_ai.retrieval.top_k``) and ``personamem.*`` elsewhere (method,
tokens, interaction id). Users and tenants appear only as the store's keyed pseudonyms; query text
only with ``PERSONAMEM_OTEL_CONTENT=1`` (``gen_ai.memory.query.text``), record text never.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import version
from typing import Any, Protocol, TypeVar, cast

from opentelemetry import metrics, trace

from personamem.settings import settings

__all__ = ["MEMORY_OPERATIONS", "staged", "step", "traced"]

tracer = trace.get_tracer("personamem", version("personamem"))
"""A proxy: it follows whatever provider the application sets, before or after this import."""
duration = metrics.get_meter("personamem", version("personamem")).create_histogram(
    "personamem.operation.duration", unit="s", description="Seconds per memory operation"
)
"""Beside Prometheus' ``/v1/metrics``: each operation's latency, by operation and outcome."""
enabled = settings().otel is not False
"""False (``PERSONAMEM_OTEL=0``): the wrappers call straight through, no span at all."""

MEMORY_OPERATIONS = {
    "add": "create_memory",
    "add_many": "create_memory",
    "update": "update_memory",
    "supersede": "update_memory",
    "delete": "delete_memory",
    "forget": "delete_memory",
    "search": "search_memory",
    "context": "search_memory",
}
"""personamem's operations that the GenAI memory conventions name (the rest keep ``personamem.*``)."""

_F = TypeVar("_F", bound=Callable[..., Any])


class _Pseudonyms(Protocol):
    def telemetry(self, kind: str, value: str) -> str: ...


class _Keyed(Protocol):
    """What a span reads of the facade's store (a ``Store``): its tenant and the keyed pseudonyms.

    A protocol, not the store's type, so the store, the encoder and SQL can use :func:`staged` and
    :func:`step` without this module importing them back.
    """

    @property
    def tenant(self) -> str | None: ...

    @property
    def names(self) -> _Pseudonyms: ...


def traced(operation: str) -> Callable[[_F], _F]:
    """A facade method as the span ``personamem.<operation>`` (its attributes only when recorded)."""

    def wrap(method: _F) -> _F:
        signature = inspect.signature(method)

        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not enabled:
                return method(self, *args, **kwargs)
            start, outcome = time.perf_counter(), "error"
            try:
                with tracer.start_as_current_span(f"personamem.{operation}") as span:
                    if not span.is_recording():
                        result = method(self, *args, **kwargs)
                    else:
                        bound = signature.bind_partial(self, *args, **kwargs).arguments
                        span.set_attributes(_call_attributes(self.store, operation, bound))
                        result = method(self, *args, **kwargs)
                        span.set_attributes(_result_attributes(result))
                outcome = "ok"
                return result
            finally:
                attributes = {"personamem.operation": operation, "personamem.outcome": outcome}
                duration.record(time.perf_counter() - start, attributes)

        return cast("_F", run)

    return wrap


def staged(name: str) -> Callable[[_F], _F]:
    """A step of an operation (a pipeline stage, encoding, a vector search) as its child span."""

    def wrap(function: _F) -> _F:
        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            if not enabled:
                return function(*args, **kwargs)
            with tracer.start_as_current_span(f"personamem.{name}"):
                return function(*args, **kwargs)

        return cast("_F", run)

    return wrap


@contextlib.contextmanager
def step(name: str, attributes: Mapping[str, Any]) -> Iterator[None]:
    """A step that is no function of its own (a SQL transaction) as a child span with ``attributes``."""
    if not enabled:
        yield
        return
    with tracer.start_as_current_span(f"personamem.{name}", attributes=attributes):
        yield


def _call_attributes(store: _Keyed, operation: str, bound: Mapping[str, Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {"personamem.operation": operation, "gen_ai.provider.name": "personamem"}
    if operation in MEMORY_OPERATIONS:
        attributes["gen_ai.operation.name"] = MEMORY_OPERATIONS[operation]
    names = store.names
    tenant = store.tenant or ""
    if tenant:
        attributes["personamem.tenant"] = names.telemetry("tenant", tenant)
    user = bound.get("user_id")
    if isinstance(user, str):
        attributes["gen_ai.memory.store.id"] = names.telemetry("user", f"{tenant}\x00{user}")
    method = bound.get("method")
    if method is not None or operation in ("search", "context"):
        attributes["personamem.method"] = method if isinstance(method, str) else "pipeline"
    k = bound.get("k")
    if isinstance(k, int):
        attributes["gen_ai.retrieval.top_k"] = k
    query = bound.get("query")
    if isinstance(query, str) and settings().otel_content:
        attributes["gen_ai.memory.query.text"] = query
    return attributes


def _result_attributes(result: Any) -> dict[str, Any]:
    """How many records an answer holds (a ``Context``'s hits, ``Hits``, any list), its call's id, its tokens.

    Read by attribute, so this module needs none of the contract's types.
    """
    attributes: dict[str, Any] = {}
    hits = getattr(result, "hits", result)
    if isinstance(hits, list):
        attributes["gen_ai.memory.record.count"] = len(hits)
    interaction_id = getattr(result, "interaction_id", None)
    if isinstance(interaction_id, str):
        attributes["personamem.interaction_id"] = interaction_id
    tokens = getattr(result, "tokens", None)
    if isinstance(tokens, int):
        attributes["personamem.tokens"] = tokens
    return attributes
