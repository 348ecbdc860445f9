"""The synchronous clients' one retry loop, ``remote.send``, as ``Client`` and ``JobClient`` use it.

Both repeat a repeatable request through 503s with ``Retry-After`` until their budget is spent.
``Client`` reports a refused connection at once (no server there is often a wrong URL);
``JobClient`` waits out a restarting server, so it sends again after one. Served by
``httpx.MockTransport``: no server, no sockets.
"""

from __future__ import annotations

import functools
from pathlib import Path

import httpx
import pytest

from personamem import remote
from personamem.client import Client
from personamem.errors import RemoteError, ServiceUnavailableError
from personamem.job_client import JobClient

JOB = {
    "job_id": "j1", "kind": "import", "state": "running", "lines": 10, "processed": 4, "progress": 0.4,
    "next_line": 5, "last_line": 10, "stored": 4, "skipped": 0, "failed": 0, "forgotten": 0,
    "errors": [], "message": None, "created_at": "2025-01-01T00:00:00+00:00",
    "started_at": None, "finished_at": None,
}  # fmt: skip


def _server(*outcomes: int | Exception, retry_after: str = "0") -> tuple[httpx.MockTransport, list[str]]:
    """A transport meeting each request with the next outcome (a status, or an error raised); what it saw."""
    seen: list[str] = []
    pending = iter(outcomes)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        outcome = next(pending)
        if isinstance(outcome, Exception):
            raise outcome
        if outcome == 503:
            error = {"type": "ServiceUnavailableError", "message": "the store is restarting"}
            return httpx.Response(503, headers={"Retry-After": retry_after}, json={"error": error})
        return httpx.Response(outcome, json=JOB)

    return httpx.MockTransport(handle), seen


@pytest.mark.parametrize("repeatable", [True, False])
def test_only_a_repeatable_request_is_sent_again_through_503s(repeatable: bool) -> None:
    transport, seen = _server(503, 503, 200)
    request = remote.Request("GET", "/v1/jobs/j1", repeatable=repeatable)
    with httpx.Client(transport=transport, base_url="http://server") as http:
        response = remote.send(http, request, 10.0, (httpx.ReadError,))
    assert (response.status_code, len(seen)) == ((200, 3) if repeatable else (503, 1))


def test_a_wait_that_would_outlast_the_budget_is_not_waited() -> None:
    transport, seen = _server(503, 200, retry_after="60")
    request = remote.Request("GET", "/v1/jobs/j1", repeatable=True)
    with httpx.Client(transport=transport, base_url="http://server") as http:
        response = remote.send(http, request, 10.0, (httpx.ReadError,))
    assert (response.status_code, len(seen)) == (503, 1)


def test_the_client_reports_a_refused_connection_at_once() -> None:
    transport, seen = _server(httpx.ConnectError("connection refused"), 200)
    with (
        Client("http://server", "key", transport=transport) as client,
        pytest.raises(RemoteError, match="cannot reach"),
    ):
        client.health()
    assert seen == ["GET /v1/health"]


def test_the_job_client_waits_out_a_restarting_server(monkeypatch: pytest.MonkeyPatch) -> None:
    transport, seen = _server(httpx.ConnectError("connection refused"), 503, 200)
    monkeypatch.setattr(httpx, "Client", functools.partial(httpx.Client, transport=transport))
    with JobClient("http://server", "key") as client:
        assert client.job("j1").processed == 4
    assert seen == ["GET /v1/jobs/j1"] * 3


def test_the_job_client_sends_a_new_job_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    transport, seen = _server(503, 200)  # a new job twice would be two jobs: the first answer stands
    monkeypatch.setattr(httpx, "Client", functools.partial(httpx.Client, transport=transport))
    (tmp_path / "notes.jsonl").write_text('{"user_id": "u1", "text": "Bees."}\n')
    with JobClient("http://server", "key") as client, pytest.raises(ServiceUnavailableError):
        client.submit(tmp_path / "notes.jsonl")
    assert seen == ["POST /v1/jobs/import"]
