"""Bulk imports over a real ``personamem serve``: 202 and a job, a SIGKILL mid-job, the CLI following one.

The first test drives one server through the routes (a bad line refused with its number and
nothing kept, a job of 2,000 records queued → running → done, another tenant's 404s, a file sent
in chunks, a bad line in a later chunk) and ``personamem import FILE --server URL --follow`` as a
real process. The second kills a server with SIGKILL while it runs a job of 5,000 records in
batches of 200, checks what SQL holds then, and starts a second server on the same store, which
takes the job over once its lease runs out and finishes it: every record stored once, none lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from personamem.errors import IngestError
from personamem.job_client import JobClient
from personamem.job_runner import STEP
from personamem.memory import PersonaMem
from personamem.store import KeyRing
from personamem.store.jobs import JobQueue
from personamem.store.sql import SqlCatalog
from personamem.testing.servers import personamem_serve

pytestmark = [pytest.mark.server, pytest.mark.enable_socket, pytest.mark.slow]


def _records(count: int, users: int = 4, start: int = 0) -> bytes:
    rows = ({"user_id": f"u{i % users}", "text": f"Fact {i}: bees."} for i in range(start, start + count))
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def _http(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _until(
    http: httpx.Client, job_id: str, done: Callable[[dict[str, Any]], bool], seen: list[str]
) -> dict[str, Any]:
    """Poll the job until ``done`` says so (120 s at most); ``seen`` collects the states met."""
    deadline = time.monotonic() + 120
    while True:
        answer = http.get(f"/v1/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        job = answer.json()
        if not seen or seen[-1] != job["state"]:
            seen.append(job["state"])
        if done(job):
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.1)


def _records_in(catalog: SqlCatalog) -> int:
    with catalog.session() as s:
        return int(s.execute(text("SELECT COUNT(*) FROM records")).scalar_one())


def test_an_import_job_runs_in_the_background_and_the_cli_follows_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONAMEM_JOB_BATCH", "200")
    catalog = SqlCatalog(f"sqlite:///{tmp_path / 'personamem.sqlite'}")
    keys, queue = KeyRing(catalog), JobQueue(catalog)
    acme_key, beta_key = keys.create("acme", scope="write")[0], keys.create("beta", scope="write")[0]
    with (
        personamem_serve(tmp_path) as served,
        _http(served.url, acme_key) as acme,
        _http(served.url, beta_key) as beta,
    ):
        # a bad line: 400 naming it, and nothing of the upload is kept
        bad = acme.post("/v1/jobs/import", content=_records(4) + b'{"user_id": "u1", "text": ""}\n')
        assert bad.status_code == 400, bad.text
        error = bad.json()["error"]
        assert (error["type"], error["line"]) == ("IngestError", 5) and error["message"].startswith(
            "line 5: "
        )
        assert acme.get("/v1/jobs").json() == {"jobs": []} and queue.waiting_lines() == 0

        # 2,000 records: 202 at once, then queued -> running -> done in the background
        sent = acme.post(
            "/v1/jobs/import", content=_records(2000), headers={"Content-Type": "application/x-ndjson"}
        )
        assert sent.status_code == 202, sent.text
        job = sent.json()
        assert (job["state"], job["lines"], job["processed"]) == ("queued", 2000, 0)
        assert sent.headers["location"] == f"/v1/jobs/{job['job_id']}"
        seen = ["queued"]
        done = _until(acme, job["job_id"], lambda j: j["state"] == "done", seen)
        assert seen == ["queued", "running", "done"], seen
        counts = ("stored", "skipped", "failed", "forgotten", "processed", "progress")
        assert [done[k] for k in counts] == [2000, 0, 0, 0, 2000, 1.0]
        assert acme.get("/v1/count").json()["count"] == 2000 and queue.waiting_lines() == 0

        # another tenant: the job does not exist for it
        for answer in (beta.get(f"/v1/jobs/{job['job_id']}"), beta.delete(f"/v1/jobs/{job['job_id']}")):
            assert answer.status_code == 404 and answer.json()["error"]["type"] == "NotFound"
        assert beta.get("/v1/jobs").json() == {"jobs": []} and beta.get("/v1/count").json()["count"] == 0
        assert [j["job_id"] for j in acme.get("/v1/jobs").json()["jobs"]] == [job["job_id"]]

        # a file in chunks of ~8 KiB: one job; a bad line in a later chunk cancels it, nothing stored
        notes = tmp_path / "notes.jsonl"
        notes.write_bytes(_records(1000, start=5000))
        with JobClient(served.url, acme_key) as client:
            chunked = client.submit(notes, chunk_bytes=8192)
            assert (chunked.state, chunked.lines, chunked.last_line) == ("queued", 1000, 1000)
            ended = client.follow(chunked.job_id, lambda j: None, poll_s=0.1)
            assert (ended.state, ended.stored) == ("done", 1000)
            broken = tmp_path / "broken.jsonl"
            broken.write_bytes(_records(700, start=9000) + b"{oops\n" + _records(10, start=9700))
            with pytest.raises(IngestError, match=r"broken\.jsonl:701: invalid JSON"):
                client.submit(broken, chunk_bytes=8192)
        states = [j["state"] for j in acme.get("/v1/jobs").json()["jobs"]]
        assert states == ["cancelled", "done", "done"] and queue.waiting_lines() == 0
        assert acme.get("/v1/count").json()["count"] == 3000

        # the command line: uploads, follows with progress lines, exits 0
        small = tmp_path / "small.jsonl"
        small.write_bytes(_records(300, start=20_000))
        env = {**os.environ, "PERSONAMEM_API_KEY": acme_key, "HF_HUB_OFFLINE": "1"}
        command = [
            sys.executable,
            "-m",
            "personamem",
            "import",
            str(small),
            "--server",
            served.url,
            "--follow",
        ]
        cli = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert "done: 300 stored, 0 already stored, 0 failed, 0 forgotten, of 300 line(s)" in cli.stdout
        assert "importing small.jsonl: 300/300" in cli.stderr  # the progress line of a log
        assert acme.get("/v1/count").json()["count"] == 3300
    catalog.close()


def test_a_job_resumes_after_a_sigkill_and_stores_every_record_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONAMEM_JOB_BATCH", "200")
    monkeypatch.setenv("PERSONAMEM_JOB_LEASE_S", "3")  # the killed server's job waits this long
    catalog = SqlCatalog(f"sqlite:///{tmp_path / 'personamem.sqlite'}")
    keys, queue = KeyRing(catalog), JobQueue(catalog)
    key = keys.create("acme", scope="write")[0]
    total = 3200  # four steps of four 200-line batches: the kill comes with one or two still to run
    with personamem_serve(tmp_path) as served, _http(served.url, key) as http:
        job_id = http.post("/v1/jobs/import", content=_records(total)).json()["job_id"]
        _until(http, job_id, lambda j: j["processed"] >= 800, [])
        # the moment that matters: a batch's records are in SQL, the job not yet advanced past them
        deadline = time.monotonic() + 60
        while _records_in(catalog) <= queue.get("acme", job_id).processed:  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        served.process.kill()  # SIGKILL mid-job: no shutdown, no hand-over
        served.process.wait(timeout=30)
    at_kill = queue.get("acme", job_id)
    assert at_kill is not None and at_kill.state == "running" and at_kill.processed < total
    assert at_kill.next_line == at_kill.processed + 1  # every line before the resume point is in
    waiting = queue.waiting_lines(job_id)
    assert waiting == total - at_kill.processed  # the rest waits in SQL
    in_sql = _records_in(catalog)  # the committed batches, and (almost always) the one in flight
    in_flight = in_sql - at_kill.processed  # stored past the resume point: the step in flight
    assert in_flight % 200 == 0 and in_flight <= 200 * STEP  # a batch is stored in one transaction

    with personamem_serve(tmp_path) as served, _http(served.url, key) as http:
        seen: list[str] = []
        done = _until(http, job_id, lambda j: j["state"] in ("done", "failed", "cancelled"), seen)
        assert done["state"] == "done", done
        assert http.get("/v1/count").json()["count"] == total
    assert done["stored"] + done["skipped"] == total and done["failed"] == done["forgotten"] == 0
    assert done["skipped"] == in_sql - at_kill.processed  # the step in flight, stored again: no-ops
    assert queue.waiting_lines() == 0
    catalog.close()
    with PersonaMem.open(tmp_path) as mem:
        acme = mem.tenant("acme")
        ids = [(user, record.id) for user in acme.users() for record in acme.records(user)]
        assert len(ids) == len(set(ids)) == total  # each record once
        assert mem.store.check().ok  # and its vector once, read back
    print(
        f"\njobs: SIGKILL at {at_kill.processed} of {total} lines committed ({waiting} waiting in SQL, "
        f"{in_sql} records stored); "
        f"the restarted server resumed at line {at_kill.next_line}: {done['stored']} stored, "
        f"{done['skipped']} already stored (the step in flight), {len(ids)} records, no duplicate"
    )
