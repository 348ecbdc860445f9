"""API key scopes and rates over a real ``personamem serve --workers 2``, and the key ring under them.

The scope matrix is generated from the served app's own route list (``/openapi.json``): every route
must have a row in ``ROUTES`` saying which scope it needs, so a new route without a scope decision
fails here. Each row is then tried with no key (401), with every key scope below the one it needs
(403, nothing changed) and with the others (its success status). The store of the module's server
starts with an ``api_keys`` table as it was before scopes existed, holding one key: that key must
keep working as ``admin``.
"""

from __future__ import annotations

import hashlib
import itertools
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from personamem.cli import main
from personamem.client import Client
from personamem.errors import InvalidInputError, PermissionDeniedError, RateLimitedError
from personamem.store import KeyRing
from personamem.store.keys import KeyScope
from personamem.store.sql import SqlCatalog
from personamem.testing.postgres import find_postgres, postgres_cluster
from personamem.testing.servers import mcp_client, personamem_server

_fresh = itertools.count()
LEGACY_KEY = "pm_0123456789ab_legacy-secret-made-before-scopes"
SCOPES = list(KeyScope)
_server = [pytest.mark.server, pytest.mark.enable_socket]


@dataclass(frozen=True)
class Served:
    url: str
    keys: KeyRing
    folder: Path
    mine: dict[KeyScope, str]  # one key per scope, all of tenant "matrix"


def _legacy_store(folder: Path) -> None:
    """An ``api_keys`` table with the columns it had before scopes and rates, and one key in it."""
    folder.mkdir(parents=True, exist_ok=True)
    key_id, _, secret = LEGACY_KEY.removeprefix("pm_").partition("_")
    with sqlite3.connect(folder / "personamem.sqlite") as db:
        db.execute(
            "CREATE TABLE api_keys (key_id VARCHAR NOT NULL PRIMARY KEY, tenant VARCHAR NOT NULL, "
            "secret_sha256 VARCHAR NOT NULL, label VARCHAR NOT NULL, created_at VARCHAR NOT NULL, "
            "revoked_at VARCHAR)"
        )
        db.execute(
            "INSERT INTO api_keys VALUES (?, 'legacy', ?, 'deployed', '2025-01-01T00:00:00+00:00', NULL)",
            (key_id, hashlib.sha256(secret.encode()).hexdigest()),
        )
    db.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("store")
    _legacy_store(folder)
    reports = tmp_path_factory.mktemp("reports")
    (reports / "report.md").write_text("| method | recall@5 |\n|---|---|\n| dense | 0.75 |\n")
    config = folder.parent / f"{folder.name}.toml"
    config.write_text("[pipeline]\nlog_interactions = true\n")  # feedback needs a logged call
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PERSONAMEM_REPORTS", str(reports))
        with personamem_server(folder, "--config", str(config), workers=2) as url:
            catalog = SqlCatalog(f"sqlite:///{folder / 'personamem.sqlite'}")
            keys = KeyRing(catalog)
            mine = {scope: keys.create("matrix", scope=scope)[0] for scope in SCOPES}
            yield Served(url, keys, folder, mine)
            catalog.close()


def _http(url: str, key: str | None = None) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=60)


# -- the scope matrix ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A request to one route for user ``user``, who has record ``r1`` (and a logged search)."""

    user: str
    admin: httpx.Client  # a client with the tenant's admin key, to prepare and to look
    interaction_id: str
    throwaway_key_id: str


Build = Callable[[Case], dict[str, Any]]
_query = {"query": "which insects do I keep?"}

ROUTES: dict[tuple[str, str], tuple[KeyScope | None, int, Build]] = {
    # (method, path as /openapi.json lists it): (scope needed or None for no key, success status, request)
    ("GET", "/v1/health"): (None, 200, lambda c: {}),
    ("GET", "/v1/metrics"): (None, 200, lambda c: {}),
    ("POST", "/v1/records"): (KeyScope.WRITE, 201, lambda c: {"json": {"user_id": c.user, "text": "Hi."}}),
    ("POST", "/v1/records/supersede"): (
        KeyScope.WRITE,
        201,
        lambda c: {"json": {"user_id": c.user, "old_id": "r1", "record": {"text": "I keep wasps now."}}},
    ),
    ("GET", "/v1/ttl"): (KeyScope.ADMIN, 200, lambda c: {}),
    ("PUT", "/v1/ttl"): (KeyScope.ADMIN, 200, lambda c: {"json": {"seconds": None}}),
    ("POST", "/v1/purge"): (KeyScope.ADMIN, 200, lambda c: {}),
    ("POST", "/v1/records/batch"): (
        KeyScope.WRITE,
        201,
        lambda c: {"json": {"user_id": c.user, "records": ["One.", "Two."]}},
    ),
    ("POST", "/v1/records/delete"): (
        KeyScope.WRITE,
        200,
        lambda c: {"json": {"user_id": c.user, "ids": ["r1"]}},
    ),
    ("GET", "/v1/records"): (KeyScope.READ, 200, lambda c: {"params": {"user_id": c.user}}),
    ("GET", "/v1/export"): (KeyScope.READ, 200, lambda c: {"params": {"user_id": c.user}}),
    ("GET", "/v1/history"): (
        KeyScope.READ,
        200,
        lambda c: {"params": {"user_id": c.user, "record_id": "r1"}},
    ),
    ("POST", "/v1/import"): (
        KeyScope.WRITE,
        201,
        lambda c: {
            "params": {"user_id": f"{c.user}-copy"},
            "content": c.admin.get("/v1/export", params={"user_id": c.user}).content,
        },
    ),
    ("GET", "/v1/records/{record_id}"): (KeyScope.READ, 200, lambda c: {"params": {"user_id": c.user}}),
    ("PATCH", "/v1/records/{record_id}"): (
        KeyScope.WRITE,
        200,
        lambda c: {"params": {"user_id": c.user}, "json": {"category": "hobby"}},
    ),
    ("DELETE", "/v1/records/{record_id}"): (KeyScope.WRITE, 200, lambda c: {"params": {"user_id": c.user}}),
    ("POST", "/v1/search"): (KeyScope.READ, 200, lambda c: {"json": {"user_id": c.user, **_query}}),
    ("POST", "/v1/feedback"): (
        KeyScope.WRITE,
        200,
        lambda c: {"json": {"interaction_id": c.interaction_id, "rating": 1}},
    ),
    ("POST", "/v1/context"): (KeyScope.READ, 200, lambda c: {"json": {"user_id": c.user, **_query}}),
    # no preference memory is configured: 400 (MethodError) once past the key check
    ("GET", "/v1/memory"): (KeyScope.READ, 400, lambda c: {"params": {"user_id": c.user}}),
    ("POST", "/v1/memory/refresh"): (KeyScope.WRITE, 400, lambda c: {"json": {"user_ids": [c.user]}}),
    ("POST", "/v1/rerank"): (
        KeyScope.WRITE,
        400,
        lambda c: {"json": {"user_id": c.user, "query": "bees", "candidates": ["a", "b"]}},
    ),
    ("GET", "/v1/users"): (KeyScope.READ, 200, lambda c: {}),
    ("DELETE", "/v1/users"): (KeyScope.WRITE, 200, lambda c: {"params": {"user_id": c.user}}),
    ("GET", "/v1/count"): (KeyScope.READ, 200, lambda c: {}),
    ("GET", "/v1/keys"): (KeyScope.ADMIN, 200, lambda c: {}),
    ("POST", "/v1/keys"): (KeyScope.ADMIN, 201, lambda c: {"json": {"scope": "read", "label": "matrix"}}),
    ("DELETE", "/v1/keys/{key_id}"): (KeyScope.ADMIN, 200, lambda c: {}),
    ("GET", "/v1/ui/users"): (KeyScope.READ, 200, lambda c: {}),
    ("GET", "/v1/ui/records"): (KeyScope.READ, 200, lambda c: {"params": {"user_id": c.user}}),
    ("GET", "/v1/ui/memory"): (KeyScope.READ, 200, lambda c: {"params": {"user_id": c.user}}),
    ("GET", "/v1/ui/calls"): (KeyScope.READ, 200, lambda c: {"params": {"user_id": c.user}}),
    ("POST", "/v1/ui/compare"): (
        KeyScope.READ,
        200,
        lambda c: {"json": {"user_id": c.user, "query": "bees"}},
    ),
    ("GET", "/v1/ui/pipeline"): (KeyScope.READ, 200, lambda c: {}),
    ("GET", "/v1/ui/reports"): (KeyScope.READ, 200, lambda c: {}),
    ("GET", "/v1/ui/report"): (KeyScope.READ, 200, lambda c: {"params": {"path": "report.md"}}),
    ("POST", "/v1/webhooks"): (
        KeyScope.ADMIN,
        201,
        lambda c: {"json": {"url": "http://127.0.0.1:9/hook", "events": ["pipeline.live"]}},
    ),
    ("GET", "/v1/webhooks"): (KeyScope.ADMIN, 200, lambda c: {}),
    ("GET", "/v1/webhooks/dead"): (KeyScope.ADMIN, 200, lambda c: {}),
    # no such webhook or dead letter: 404 once past the key check
    ("DELETE", "/v1/webhooks/{webhook_id}"): (KeyScope.ADMIN, 404, lambda c: {}),
    ("POST", "/v1/webhooks/dead/{event_id}/retry"): (KeyScope.ADMIN, 404, lambda c: {}),
    ("DELETE", "/v1/webhooks/dead/{event_id}"): (KeyScope.ADMIN, 404, lambda c: {}),
    # bulk imports: records of the case's user (who exists, so the tenant's users stay as they were)
    ("POST", "/v1/jobs/import"): (
        KeyScope.WRITE,
        202,
        lambda c: {"content": f'{{"user_id": "{c.user}", "text": "I keep wasps."}}\n'.encode()},
    ),
    ("GET", "/v1/jobs"): (KeyScope.WRITE, 200, lambda c: {}),
    # no such job: 404 once past the key check
    ("GET", "/v1/jobs/{job_id}"): (KeyScope.WRITE, 404, lambda c: {}),
    ("DELETE", "/v1/jobs/{job_id}"): (KeyScope.WRITE, 404, lambda c: {}),
    ("POST", "/v1/jobs/{job_id}/start"): (KeyScope.WRITE, 404, lambda c: {}),
    ("POST", "/v1/jobs/{job_id}/lines"): (
        KeyScope.WRITE,
        404,
        lambda c: {"params": {"from_line": 2}, "content": b'{"user_id": "x", "text": "More."}\n'},
    ),
}


def _path(path: str, case: Case) -> str:
    path = path.replace("{webhook_id}", "wh_none").replace("{event_id}", "no-such-event")
    path = path.replace("{job_id}", "job_none")
    return path.replace("{record_id}", "r1").replace("{key_id}", case.throwaway_key_id)


def _case(served: Served, admin: httpx.Client, path: str) -> Case:
    user = f"u{next(_fresh)}"
    added = admin.post("/v1/records", json={"user_id": user, "id": "r1", "text": "I keep bees on my roof."})
    assert added.status_code == 201, added.text
    logged = ""
    if path == "/v1/feedback":
        logged = admin.post("/v1/search", json={"user_id": user, **_query}).json()["interaction_id"]
    throwaway = served.keys.create("matrix", label="to revoke")[1].key_id if "{key_id}" in path else ""
    return Case(user, admin, logged, throwaway)


def _tenant_state(admin: httpx.Client, case: Case) -> Any:
    """What a refused request must leave as it was: the user's records, the tenant's users and keys."""
    records = admin.get("/v1/records", params={"user_id": case.user}).json()
    return records, admin.get("/v1/users").json(), admin.get("/v1/keys").json(), admin.get("/v1/ttl").json()


@pytest.mark.server
@pytest.mark.enable_socket
@pytest.mark.slow
def test_every_route_has_a_scope_and_each_scope_gets_what_it_should(served: Served) -> None:
    with _http(served.url) as anonymous:
        spec = anonymous.get("/openapi.json").json()["paths"]
    listed = {(method.upper(), path) for path, methods in spec.items() for method in methods}
    undecided, gone = sorted(listed - set(ROUTES)), sorted(set(ROUTES) - listed)
    assert not undecided and not gone, f"routes without a scope decision: {undecided}; gone: {gone}"
    clients = {scope: _http(served.url, key) for scope, key in served.mine.items()}
    admin = clients[KeyScope.ADMIN]
    try:
        for (method, path), (needed, status, build) in ROUTES.items():
            case = _case(served, admin, path)
            url = _path(path, case)
            before = _tenant_state(admin, case)
            answer = httpx.request(method, served.url + url, timeout=60, **build(case))
            if needed is None:
                assert answer.status_code == status, (method, path, answer.text)
                continue
            assert answer.status_code == 401, (method, path, answer.text)
            assert answer.json()["error"]["type"] == "AuthenticationError"
            for scope in (s for s in SCOPES if not s.allows(needed)):
                answer = clients[scope].request(method, url, **build(case))
                assert answer.status_code == 403, (method, path, scope, answer.text)
                error = answer.json()["error"]
                assert (error["type"], error["needed"], error["scope"]) == ("PermissionDenied", needed, scope)
                assert f"'{scope.value}'" in error["message"] and f"'{needed.value}'" in error["message"]
            assert _tenant_state(admin, case) == before, (method, path)  # the refusals changed nothing
            for scope in (s for s in SCOPES if s.allows(needed)):
                case = _case(served, admin, path)
                answer = clients[scope].request(method, _path(path, case), **build(case))
                assert answer.status_code == status, (method, path, scope, answer.text)
    finally:
        for client in clients.values():
            client.close()


@pytest.mark.server
@pytest.mark.enable_socket
def test_the_clients_raise_permission_denied_with_both_scopes(served: Served) -> None:
    with Client(served.url, served.mine[KeyScope.READ]) as reader:
        assert reader.count() >= 0
        with pytest.raises(PermissionDeniedError) as refused:
            reader.add("ana", "I keep bees.")
        assert (refused.value.status, refused.value.needed, refused.value.scope) == (403, "write", "read")
    with Client(served.url, served.mine[KeyScope.WRITE]) as writer, pytest.raises(PermissionDeniedError):
        writer.set_ttl(60)


# -- the keys routes -----------------------------------------------------------------------------


@pytest.mark.server
@pytest.mark.enable_socket
def test_admin_keys_manage_their_own_tenants_keys_only(served: Served) -> None:
    keys = served.keys
    admin_key, admin = keys.create("acme", scope="admin", label="ops")
    other_key, other = keys.create("other", scope="admin")
    with _http(served.url, admin_key) as http:
        made = http.post("/v1/keys", json={"scope": "read", "rate": 30, "label": "dashboard"})
        assert made.status_code == 201, made.text
        new = made.json()
        assert (new["tenant"], new["scope"], new["rate"], new["label"]) == ("acme", "read", 30, "dashboard")
        assert new["key"].startswith(f"pm_{new['key_id']}_") and new["revoked_at"] is None
        listed = http.get("/v1/keys").json()["keys"]
        assert {k["key_id"] for k in listed} == {admin.key_id, new["key_id"]}  # acme's only
        assert {k["scope"] for k in listed} == {"admin", "read"}
        secret = new["key"].split("_", 2)[2]
        assert secret not in http.get("/v1/keys").text and "secret" not in http.get("/v1/keys").text

        with _http(served.url, new["key"]) as reader:  # the new key works, with its scope
            assert reader.get("/v1/users").status_code == 200
            assert reader.post("/v1/records", json={"user_id": "a", "text": "x"}).status_code == 403
            assert reader.get("/v1/keys").status_code == 403

        for bad in ({"scope": "root"}, {"rate": 0}, {"rate": "fast"}, {"tenant": "other"}):
            answer = http.post("/v1/keys", json=bad)
            assert answer.status_code == 422, (bad, answer.text)

        refused = http.delete(f"/v1/keys/{other.key_id}")  # another tenant's key: not found, not revoked
        assert refused.status_code == 404 and refused.json()["error"]["type"] == "NotFound"
        assert keys.check(other_key) is not None
        assert http.delete("/v1/keys/nothere").status_code == 404

        revoked = http.delete(f"/v1/keys/{new['key_id']}")
        assert revoked.status_code == 200 and revoked.json()["revoked_at"]
        with _http(served.url, new["key"]) as reader:
            assert reader.get("/v1/users").status_code == 401  # at once, on every worker
    with _http(served.url, other_key) as http:
        assert [k["key_id"] for k in http.get("/v1/keys").json()["keys"]] == [other.key_id]


@pytest.mark.server
@pytest.mark.enable_socket
def test_a_key_made_before_scopes_existed_acts_as_admin(served: Served) -> None:
    with sqlite3.connect(served.folder / "personamem.sqlite") as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(api_keys)")}
    db.close()
    assert {"scope", "rate_per_minute"} <= columns  # added when the server opened the old store
    legacy = served.keys.check(LEGACY_KEY)
    assert legacy is not None and (legacy.tenant, legacy.scope, legacy.rate) == (
        "legacy",
        KeyScope.ADMIN,
        None,
    )
    with Client(served.url, LEGACY_KEY) as client:
        client.add("ana", "I keep bees on my roof.")
        client.set_ttl(None)
        assert client.ttl() is None and client.purge() == 0 and client.count() == 1
    with _http(served.url, LEGACY_KEY) as http:
        listed = http.get("/v1/keys").json()["keys"]
        assert [(k["label"], k["scope"], k["rate"]) for k in listed] == [("deployed", "admin", None)]


# -- MCP -----------------------------------------------------------------------------------------

MCP_CALLS: dict[str, Callable[[str], dict[str, Any]]] = {
    "remember": lambda user: {"user_id": user, "text": "I prefer aisle seats."},
    "recall": lambda user: {"user_id": user, "query": "insects"},
    "context": lambda user: {"user_id": user, "query": "insects"},
    "report_answer": lambda user: {"user_id": user, "interaction_id": "i1", "answer": "Keep bees."},
    "forget_record": lambda user: {"user_id": user, "record_id": "r1"},
    "list_records": lambda user: {"user_id": user},
    "record_history": lambda user: {"user_id": user, "record_id": "r1"},
    "preferences": lambda user: {"user_id": user},
}


@pytest.mark.server
@pytest.mark.enable_socket
async def test_mcp_tools_check_the_keys_scope(served: Served) -> None:
    pytest.importorskip("mcp")
    from mcp.types import TextContent

    user = f"mcp{next(_fresh)}"
    with _http(served.url, served.mine[KeyScope.WRITE]) as http:
        http.post("/v1/records", json={"user_id": user, "id": "r1", "text": "I keep bees on my roof."})
    async with mcp_client(served.url, served.mine[KeyScope.READ]) as reader:
        tools = (await reader.list_tools()).tools
        assert {tool.name for tool in tools} == set(MCP_CALLS)  # a new tool needs a row here
        for tool in tools:
            result = await reader.call_tool(tool.name, MCP_CALLS[tool.name](user))
            text = " ".join(block.text for block in result.content if isinstance(block, TextContent))
            refused = "this API key's scope is 'read'; this tool needs 'write'" in text
            # a tool that may change records (no read-only hint) needs a write key; the others do not
            assert refused == (not tool.annotations or not tool.annotations.read_only_hint), (tool.name, text)
            assert result.is_error == refused or tool.name == "preferences", (tool.name, text)
        hits = (await reader.call_tool("recall", MCP_CALLS["recall"](user))).structured_content
        assert hits is not None and [h["id"] for h in hits["hits"]] == ["r1"]  # forget_record did nothing
        listed = (await reader.call_tool("list_records", {"user_id": user})).structured_content
        assert listed is not None and listed["count"] == 1  # nor did remember
    async with mcp_client(served.url, served.mine[KeyScope.WRITE]) as writer:
        stored = await writer.call_tool("remember", MCP_CALLS["remember"](user))
        assert not stored.is_error
        gone = await writer.call_tool("forget_record", MCP_CALLS["forget_record"](user))
        assert gone.structured_content == {"deleted": ["r1"]}


# -- rates ---------------------------------------------------------------------------------------


def _count(url: str, key: str) -> httpx.Response:
    """One request on a fresh connection, so requests spread over the server's worker processes."""
    return httpx.get(f"{url}/v1/count", headers={"Authorization": f"Bearer {key}"}, timeout=60)


@pytest.mark.server
@pytest.mark.enable_socket
@pytest.mark.slow
def test_a_rate_is_one_limit_shared_by_every_worker(served: Served) -> None:
    rate = 6  # one request per 10 s after a burst of 6
    key, _ = served.keys.create("rated", rate=rate)
    # a second server process over the same store: requests alternate between it and the two workers
    with personamem_server(served.folder / "second", "--store", str(served.folder)) as second:
        urls = [served.url, second] * 12
        start = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda url: _count(url, key), urls))
        elapsed = time.monotonic() - start
        accepted = [a for a in answers if a.status_code == 200]
        limited = [a for a in answers if a.status_code == 429]
        assert len(accepted) + len(limited) == len(urls), {a.status_code for a in answers}
        assert len(accepted) <= rate + int(elapsed / (60 / rate)), (len(accepted), elapsed)
        assert len(accepted) >= rate  # the burst
        for answer in limited:
            error = answer.json()["error"]
            retry = answer.headers["retry-after"]
            assert error["type"] == "RateLimited" and retry.isdigit() and 1 <= int(retry) <= 60
            assert error["retry_after"] == int(retry) and f"{rate} requests per minute" in error["message"]
        with Client(second, key) as client, pytest.raises(RateLimitedError) as refused:
            client.count()
        assert refused.value.status == 429 and 1 <= refused.value.retry_after <= 60
        with _http(served.url) as anonymous:  # operators' probes are never limited
            assert all(anonymous.get("/v1/health").status_code == 200 for _ in range(10))
            assert anonymous.get("/v1/metrics").status_code == 200


@pytest.mark.server
@pytest.mark.enable_socket
def test_a_key_without_a_rate_is_never_limited(served: Served) -> None:
    key = served.mine[KeyScope.READ]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: _count(served.url, key).status_code, range(60)))
    assert answers == [200] * 60


# -- the key ring, in process ----------------------------------------------------------------------


@pytest.fixture
def ring(tmp_path: Path) -> Iterator[KeyRing]:
    catalog = SqlCatalog(f"sqlite:///{tmp_path / 'keys.sqlite'}")
    yield KeyRing(catalog)
    catalog.close()


def test_gcra_bursts_the_rate_then_spaces_requests(ring: KeyRing) -> None:
    _, key = ring.create("acme", rate=7)
    now = time.time()
    assert [ring.admit(key, now=now) for _ in range(7)] == [0.0] * 7  # a burst of 7
    interval = 60 / 7
    for _ in range(3):  # refused requests move nothing: the wait stays one interval
        assert ring.admit(key, now=now) == pytest.approx(interval, abs=1e-3)
    assert ring.admit(key, now=now + interval - 0.5) == pytest.approx(0.5, abs=1e-3)
    assert ring.admit(key, now=now + interval) == 0.0  # one more per interval
    assert ring.admit(key, now=now + interval) > 0
    assert ring.admit(key, now=now + 3 * interval) == 0.0 and ring.admit(key, now=now + 3 * interval) == 0.0
    assert ring.admit(key, now=now + 3 * interval) > 0  # idle time earns back at most the burst
    later = now + 3600
    assert [ring.admit(key, now=later) for _ in range(8)].count(0.0) == 7


def test_keys_default_to_write_without_a_rate_and_check_what_they_are_given(ring: KeyRing) -> None:
    key, listing = ring.create("acme")
    assert (listing.scope, listing.rate) == (KeyScope.WRITE, None) and ring.check(key) == listing
    assert ring.admit(listing) == 0.0  # no rate: never refused
    assert KeyScope.ADMIN.allows(KeyScope.WRITE) and KeyScope.WRITE.allows(KeyScope.READ)
    assert not KeyScope.READ.allows(KeyScope.WRITE) and not KeyScope.WRITE.allows(KeyScope.ADMIN)
    for bad in ({"scope": "root"}, {"rate": 0}, {"rate": 1.5}, {"rate": True}):
        with pytest.raises(InvalidInputError):
            ring.create("acme", **bad)  # type: ignore[arg-type]
    _, other = ring.create("other", scope="admin")
    with pytest.raises(InvalidInputError, match="no API key"):
        ring.revoke(other.key_id, tenant="acme")
    assert ring.check(key) is not None and ring.revoke(listing.key_id, tenant="acme").revoked_at


def test_an_old_store_opens_and_its_keys_act_as_admin(tmp_path: Path) -> None:
    _legacy_store(tmp_path)
    catalog = SqlCatalog(f"sqlite:///{tmp_path / 'personamem.sqlite'}")
    try:
        keys = KeyRing(catalog)
        legacy = keys.check(LEGACY_KEY)
        assert legacy is not None and (legacy.scope, legacy.rate, legacy.label) == (
            KeyScope.ADMIN,
            None,
            "deployed",
        )
        assert keys.admit(legacy) == 0.0 and keys.list("legacy") == [legacy]
    finally:
        catalog.close()


def test_keys_cli_sets_and_lists_scope_and_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ["--store", str(tmp_path / "s")]
    assert main([*store, "keys", "create", "--tenant", "acme", "--scope", "read", "--rate", "5"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip().startswith("pm_") and "(read, 5 requests/minute)" in captured.err
    assert main([*store, "keys", "create", "--tenant", "acme"]) == 0
    assert "(write)" in capsys.readouterr().err
    assert main([*store, "keys", "list"]) == 0
    listing = capsys.readouterr().out
    rows = [line for line in listing.splitlines() if "acme" in line]
    cells = sorted([cell.strip() for cell in row.split("│")][3:5] for row in rows)  # scope, rate/min
    assert cells == [["read", "5"], ["write", ""]]
    assert main([*store, "keys", "create", "--tenant", "acme", "--scope", "root"]) != 0
    assert main([*store, "keys", "create", "--tenant", "acme", "--rate", "0"]) != 0


@pytest.mark.skipif(find_postgres() is None, reason="no PostgreSQL server binaries")
def test_gcra_on_postgres_counts_concurrent_requests_once_each() -> None:
    pytest.importorskip("psycopg")
    binaries = find_postgres()
    assert binaries is not None
    with postgres_cluster(binaries) as cluster:
        catalogs = [SqlCatalog(cluster.create_database())]
        catalogs.append(SqlCatalog(catalogs[0].url))  # a second "machine" over the same database
        try:
            _, key = KeyRing(catalogs[0]).create("acme", rate=10)
            rings = [KeyRing(c) for c in catalogs]
            now = time.time()
            with ThreadPoolExecutor(16) as pool:
                waits = list(pool.map(lambda i: rings[i % 2].admit(key, now=now), range(40)))
            assert waits.count(0.0) == 10
        finally:
            for catalog in catalogs:
                catalog.close()
