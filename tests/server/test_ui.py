"""The inspector's routes over a real ``personamem serve``: keys, tenants, bad input, erasure of traces."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.pipeline import PipelineConfig
from personamem.store import KeyRing
from personamem.store.sql import SqlCatalog
from personamem.testing.servers import personamem_server
from tests.bytescan import files_containing, store_files

pytestmark = [pytest.mark.server, pytest.mark.enable_socket]
_fresh = itertools.count()
ROUTES = [
    ("GET", "/v1/ui/users", {}),
    ("GET", "/v1/ui/records", {"params": {"user_id": "ana"}}),
    ("GET", "/v1/ui/memory", {"params": {"user_id": "ana"}}),
    ("GET", "/v1/ui/calls", {"params": {"user_id": "ana"}}),
    ("POST", "/v1/ui/compare", {"json": {"user_id": "ana", "query": "bees"}}),
    ("GET", "/v1/ui/pipeline", {}),
    ("GET", "/v1/ui/reports", {}),
    ("GET", "/v1/ui/report", {"params": {"path": "run/report.md"}}),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, KeyRing, Path]]:
    folder = tmp_path_factory.mktemp("store")
    reports = tmp_path_factory.mktemp("reports")
    (reports / "run").mkdir()
    (reports / "run" / "report.md").write_text("| method | recall@5 |\n|---|---|\n| dense | 0.75 |\n")
    (folder.parent / "secret.txt").write_text("not a report")
    config = folder.parent / f"{folder.name}.toml"
    config.write_text("[pipeline]\nlog_interactions = true\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PERSONAMEM_REPORTS", str(reports))
        with personamem_server(folder, "--config", str(config)) as url:
            catalog = SqlCatalog(f"sqlite:///{folder / 'personamem.sqlite'}")
            yield url, KeyRing(catalog), reports
            catalog.close()


def _http(url: str, key: str | None = None) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=60)


def _tenant(served: tuple[str, KeyRing, Path]) -> str:
    return served[1].create(f"ui{next(_fresh)}")[0]


def test_the_page_is_served_and_every_data_route_needs_a_key(served: tuple[str, KeyRing, Path]) -> None:
    url = served[0]
    with _http(url) as http:
        page = http.get("/ui/")
        assert page.status_code == 200 and "personamem inspector" in page.text
        assert http.get("/ui/ui.js").status_code == 200 and http.get("/ui/ui.css").status_code == 200
        for method, path, options in ROUTES:
            assert http.request(method, path, **options).status_code == 401, path
    with _http(url, "pm_not_a_key") as http:
        for method, path, options in ROUTES:
            assert http.request(method, path, **options).status_code == 401, path


def test_every_route_sees_one_tenant(served: tuple[str, KeyRing, Path]) -> None:
    url = served[0]
    mine, theirs = _tenant(served), _tenant(served)
    with _http(url, mine) as http:
        http.post(
            "/v1/records", json={"user_id": "ana", "text": "I keep bees on my roof.", "kind": "knowledge"}
        )
        http.post("/v1/records", json={"user_id": "ana", "text": "I like jazz records."})
        http.post("/v1/context", json={"user_id": "ana", "query": "what are my hobbies?"})
        users = http.get("/v1/ui/users").json()
        assert users["count"] == 1 and users["users"][0]["records"] == 2 and users["users"][0]["last_call"]
        calls = http.get("/v1/ui/calls", params={"user_id": "ana"}).json()
        assert calls["logging"] and "bees" in calls["calls"][0]["trace"]["text"]
        assert set(calls["calls"][0]["trace"]["timings_ms"]) >= {"first_stage", "fit"}
        assert http.get("/v1/ui/pipeline").json()["trials"] == {"running": None, "decided": []}
        moved = http.post(
            "/v1/ui/compare", json={"user_id": "ana", "query": "bees", "left": "bm25", "right": "dense"}
        )
        assert (
            moved.status_code == 200
            and moved.json()["left"][0]["record"]["text"] == "I keep bees on my roof."
        )
    with _http(url, theirs) as http:
        assert http.get("/v1/ui/users").json() == {"count": 0, "users": []}
        assert http.get("/v1/ui/records", params={"user_id": "ana"}).json()["count"] == 0
        assert http.get("/v1/ui/calls", params={"user_id": "ana"}).json()["calls"] == []
        compared = http.post("/v1/ui/compare", json={"user_id": "ana", "query": "bees"}).json()
        assert compared["left"] == [] and compared["right"] == [] and compared["moved"] == []


def test_records_filter_and_page(served: tuple[str, KeyRing, Path]) -> None:
    url = served[0]
    with _http(url, _tenant(served)) as http:
        batch = [{"text": f"note {i} about my week", "kind": "note"} for i in range(230)]
        batch.append({"text": "I bought a cello.", "kind": "purchase", "category": "music"})
        old = {
            "text": "I live in Lisbon.",
            "kind": "knowledge",
            "id": "home",
            "valid_from": "2020-01-01T00:00:00Z",
        }
        http.post("/v1/records/batch", json={"user_id": "ana", "records": [*batch, old]})
        moved = {
            "user_id": "ana",
            "old_id": "home",
            "record": {"text": "I live in Porto.", "kind": "knowledge"},
        }
        assert http.post("/v1/records/supersede", json=moved).status_code == 201
        page = http.get("/v1/ui/records", params={"user_id": "ana", "offset": 200, "limit": 100}).json()
        assert page["count"] == 233 and len(page["records"]) == 33
        assert set(page["kinds"]) == {"note", "purchase", "knowledge"}
        only = http.get("/v1/ui/records", params={"user_id": "ana", "kind": "purchase", "category": "music"})
        assert [r["text"] for r in only.json()["records"]] == ["I bought a cello."]
        superseded = http.get("/v1/ui/records", params={"user_id": "ana", "validity": "superseded"}).json()
        assert [r["id"] for r in superseded["records"]] == ["home"]
        current = http.get("/v1/ui/records", params={"user_id": "ana", "validity": "current"}).json()
        assert current["count"] == 232


def test_bad_input_is_refused_with_a_reason(served: tuple[str, KeyRing, Path]) -> None:
    url = served[0]
    with _http(url, _tenant(served)) as http:
        bad = http.get("/v1/ui/records", params={"user_id": "ana", "validity": "someday"})
        assert bad.status_code == 422 and "validity must be one of" in bad.json()["error"]["message"]
        assert http.get("/v1/ui/records", params={"user_id": "ana", "limit": 0}).status_code == 422
        assert http.get("/v1/ui/records", params={"user_id": " "}).status_code == 422
        wrong = http.post("/v1/ui/compare", json={"user_id": "ana", "query": "x", "left": "magic"})
        assert (
            wrong.status_code in (400, 422) and "unknown method 'magic'" in wrong.json()["error"]["message"]
        )
        for outside in ("../secret.txt", "/etc/passwd", "run/../../secret.txt"):
            refused = http.get("/v1/ui/report", params={"path": outside})
            assert refused.status_code == 422 and "no report" in refused.json()["error"]["message"], outside
        listed = http.get("/v1/ui/reports").json()
        assert [r["path"] for r in listed["reports"]] == ["run/report.md"]
        assert "dense | 0.75" in http.get("/v1/ui/report", params={"path": "run/report.md"}).text


def test_a_delete_erases_the_calls_traces(tmp_path: Path, encoder: SentenceEncoder) -> None:
    config = PipelineConfig(log_interactions=True)
    with PersonaMem.open(tmp_path, encoder=encoder, pipeline=config) as mem:
        secret = mem.add("ana", "ZQXTRACEMARK my door code is 5521")
        mem.add("ana", "I like jazz records.")
        mem.context("ana", "what is my door code?")
        [call] = mem.store.interactions.calls("ana")
        assert "ZQXTRACEMARK" in call["trace"]["text"]
        mem.delete("ana", [secret.id])
        [call] = mem.store.interactions.calls("ana")
        assert call["trace"] is None and [r["record_id"] for r in call["results"]] != [secret.id]
        assert files_containing(store_files(tmp_path), b"ZQXTRACEMARK") == []
        assert datetime.fromisoformat(call["time"]) > datetime.now(UTC) - timedelta(minutes=5)
