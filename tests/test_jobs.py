"""Bulk imports as jobs in process (``mem.jobs``, ``personamem/job_runner.py``), on a real SQLite store.

The server's routes and a SIGKILL mid-job are ``tests/server/test_jobs_server.py``'s; here the
protocol itself: validation before anything is kept, chunks appended once, a resume after a runner
died between storing a batch and advancing, forgets winning over waiting and in-flight lines,
cancels, tenants, and (where PostgreSQL's binaries are installed) two runners on one queue.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from personamem import PersonaMem, Record, SentenceEncoder
from personamem.errors import IngestError, InvalidInputError
from personamem.job_runner import JobRunner
from personamem.store import jobs as jobs_table
from personamem.store.jobs import Batch, JobQueue
from personamem.testing.postgres import find_postgres, postgres_cluster
from tests.bytescan import files_containing, store_files


def _lines(count: int, users: int = 3, start: int = 0) -> bytes:
    rows = [
        {"user_id": f"u{i % users}", "text": f"Note {i}: I keep {i} bees."}
        for i in range(start, start + count)
    ]
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def _queue(mem: PersonaMem) -> JobQueue:
    return JobQueue(mem.store.catalog)


def test_a_job_stores_its_lines_once_and_keeps_none_of_them(mem: PersonaMem) -> None:
    acme = mem.tenant("acme")
    job = acme.jobs.submit_import(_lines(30) + b"\n")  # a blank line is counted, not a record
    assert (job.state, job.lines, job.last_line, job.next_line) == ("queued", 30, 31, 1)
    assert _queue(mem).waiting_lines(job.job_id) == 30
    assert acme.jobs.run_pending() == 1
    done = acme.jobs.get(job.job_id)
    assert (done.state, done.stored, done.skipped, done.failed, done.processed, done.progress) == (
        "done", 30, 0, 0, 30, 1.0,
    )  # fmt: skip
    assert done.started_at and done.finished_at and not done.errors
    assert acme.count() == 30 and mem.count() == 0  # the tenant's users, nobody else's
    assert _queue(mem).waiting_lines() == 0  # the lines left the database as they committed

    again = acme.jobs.submit_import(_lines(30))
    acme.jobs.run_pending()
    assert (acme.jobs.get(again.job_id).stored, acme.jobs.get(again.job_id).skipped) == (0, 30)
    assert acme.count() == 30
    assert [j.job_id for j in acme.jobs.list()] == [again.job_id, job.job_id]  # newest first
    assert mem.jobs.list() == [] and mem.tenant("beta").jobs.list() == []
    with pytest.raises(InvalidInputError, match="no job"):
        mem.tenant("beta").jobs.get(job.job_id)  # another tenant's job is an unknown one


def test_a_users_consecutive_lines_wait_as_one_chunk_and_each_line_counts(
    mem: PersonaMem, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_table, "CHUNK", 4)  # 500 in use: the same runs, at a size a test can store
    body = _lines(10, users=1) + b"\n" + _lines(3, users=1, start=10) + _lines(5, users=1, start=13)
    body += b"".join(
        json.dumps({"user_id": "bo", "text": f"Bo's note {i}."}).encode() + b"\n" for i in range(2)
    )
    job = mem.jobs.submit_import(body + _lines(1, users=1, start=20))
    with mem.store.catalog.session() as s:
        rows = s.execute(text("SELECT line, last, user_id FROM job_chunks ORDER BY line")).all()
    # a blank line (11) and a change of user end a run; a run is cut every CHUNK lines
    assert [tuple(r) for r in rows] == [
        (1, 4, "u0"), (5, 8, "u0"), (9, 10, "u0"), (12, 15, "u0"), (16, 19, "u0"),
        (20, 21, "bo"), (22, 22, "u0"),
    ]  # fmt: skip
    assert (job.lines, job.last_line, _queue(mem).waiting_lines(job.job_id)) == (21, 22, 21)
    JobRunner(_queue(mem), lambda _: mem.store, batch=3, tenant="").run_pending()  # batches cut chunks
    done = mem.jobs.get(job.job_id)
    assert (done.state, done.stored, done.processed, done.next_line) == ("done", 21, 21, 23)
    assert (mem.count("u0"), mem.count("bo"), _queue(mem).waiting_lines()) == (19, 2, 0)


def test_a_bad_line_refuses_the_whole_upload_naming_it(mem: PersonaMem, tmp_path: Path) -> None:
    for body, line, message in [
        (_lines(2) + b'{"user_id": "u1", "text": ""}\n', 3, "text must be non-empty"),
        (_lines(1) + b"\n" + b"{not json\n", 3, "invalid JSON"),
        (b'["a list"]\n', 1, "expected a JSON object"),
        (_lines(1) + b'{"user_id": "u\\u001fx", "text": "hi"}\n', 2, "U\\+001F"),
        (b'{"text": "whose?"}\n', 1, "user_id"),
    ]:
        with pytest.raises(IngestError, match=message) as refused:
            mem.jobs.submit_import(body)
        assert refused.value.line == line, body
    path = tmp_path / "notes.jsonl"
    path.write_bytes(_lines(4) + b"\xff\n")
    with pytest.raises(IngestError, match=rf"{path.name}:5: not valid UTF-8"):
        mem.jobs.submit_import(path)
    # records and dicts from the SDK: a Record goes as it is, a dict is validated; the bad one is named
    items = [Record(user_id="ana", text="I keep bees."), {"user_id": "bo", "text": "not ana's"}]
    with pytest.raises(IngestError, match=r"the records:2: .*'bo'"):
        mem.jobs.submit_import(items, user_id="ana")
    assert mem.jobs.list() == [] and _queue(mem).waiting_lines() == 0
    owned = mem.jobs.submit_import(b'{"text": "I keep wasps."}\n', user_id="ana")  # --user's lines
    mem.jobs.run_pending()
    assert mem.jobs.get(owned.job_id).stored == 1 and mem.count("ana") == 1


def test_chunks_are_appended_once_in_order_then_started(mem: PersonaMem) -> None:
    jobs = mem.jobs
    job = jobs.submit_import(_lines(3), start=False)
    assert job.state == "open" and jobs.run_pending() == 0  # an open job waits for its last chunk
    chunk = _lines(6, start=3)
    assert jobs.append(job.job_id, chunk, from_line=4).lines == 9
    assert jobs.append(job.job_id, chunk, from_line=4).lines == 9  # a retried chunk is taken once
    with pytest.raises(InvalidInputError, match="starts at line 10, not 12"):
        jobs.append(job.job_id, _lines(1, start=9), from_line=12)
    with pytest.raises(IngestError) as refused:
        jobs.append(job.job_id, _lines(2, start=9) + b"oops\n", from_line=10)
    assert refused.value.line == 12 and jobs.get(job.job_id).lines == 9  # nothing of that chunk kept
    assert jobs.start(job.job_id).state == "queued"
    with pytest.raises(InvalidInputError, match="open job only"):
        jobs.append(job.job_id, _lines(1, start=9), from_line=10)
    jobs.run_pending()
    assert (jobs.get(job.job_id).state, jobs.get(job.job_id).stored, mem.count()) == ("done", 9, 9)


def test_a_cancel_deletes_the_waiting_lines_and_an_ended_job_stays(mem: PersonaMem) -> None:
    job = mem.jobs.submit_import(_lines(10))
    cancelled = mem.jobs.cancel(job.job_id)
    assert (cancelled.state, cancelled.message) == ("cancelled", "cancelled") and cancelled.finished_at
    assert _queue(mem).waiting_lines() == 0 and mem.jobs.run_pending() == 0 and mem.count() == 0
    assert mem.jobs.cancel(job.job_id) == cancelled
    with pytest.raises(InvalidInputError):
        mem.jobs.cancel("job_nothere")


def test_a_runner_killed_after_storing_a_batch_is_resumed_without_duplicates(mem: PersonaMem) -> None:
    job = mem.jobs.submit_import(_lines(10))
    queue = _queue(mem)
    dead = JobRunner(queue, lambda _: mem.store, batch=4, tenant="")
    claim = queue.claim(30.0, "")
    assert claim is not None and claim.next_line == 1
    dead._store(mem.store, queue.batch(claim, 1, 4))  # stored, then "killed" before advancing
    assert mem.count() == 4 and queue.get("", job.job_id).next_line == 1  # type: ignore[union-attr]
    assert mem.jobs.run_pending() == 0  # its lease holds
    with mem.store.catalog.session(write=True) as s:  # ... and runs out
        s.execute(text("UPDATE jobs SET claimed_until = 0"))
    JobRunner(queue, lambda _: mem.store, batch=4, tenant="").run_pending()
    done = mem.jobs.get(job.job_id)
    assert (done.state, done.stored, done.skipped, done.processed) == ("done", 6, 4, 10)
    assert mem.count() == 10 == len({r.id for u in mem.users() for r in mem.records(u)})
    assert queue.advance(claim, Batch([]), 1.0) == (False, [])  # the old claim is void


def test_a_forget_erases_the_users_waiting_lines_and_wins_over_a_batch_in_flight(
    mem: PersonaMem, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = mem.jobs.submit_import(_lines(12, users=3))  # u0, u1, u2: four lines each
    catalog = mem.store.catalog
    with catalog.session() as s:  # the lines are kept under the users' store keys
        assert {r for (r,) in s.execute(text("SELECT DISTINCT user_id FROM job_chunks"))} == {
            "u0",
            "u1",
            "u2",
        }
    assert mem.forget("u0")  # no record yet, but waiting lines: a user to forget
    assert _queue(mem).waiting_lines() == 8
    assert mem.store.folder is not None
    files = store_files(mem.store.folder)  # not a byte of u0's lines is left in any file
    assert [
        i for i in range(0, 12, 3) if files_containing(files, f"Note {i}: I keep {i} bees.".encode())
    ] == []
    assert files_containing(files, b"Note 1: I keep 1 bees.")  # u1's still wait (the scan sees them)

    store = JobRunner._store
    forgotten: list[bool] = []

    def forget_meanwhile(self: JobRunner, *args: Any) -> Batch:
        if not forgotten:  # the batch is read, then u1 is forgotten, then the batch is stored
            forgotten.append(mem.forget("u1"))
        return store(self, *args)

    monkeypatch.setattr(JobRunner, "_store", forget_meanwhile)
    mem.jobs.run_pending()
    done = mem.jobs.get(job.job_id)
    assert forgotten == [True]
    assert (done.state, done.stored, done.forgotten, done.processed) == ("done", 4, 8, 12)
    assert (mem.count("u0"), mem.count("u1"), mem.count("u2")) == (
        0,
        0,
        4,
    )  # u1 written afresh, forgotten again
    assert mem.users() == ["u2"]


POSTGRES = find_postgres("vector")


@pytest.mark.skipif(
    POSTGRES is None, reason='no PostgreSQL binaries with pgvector (pip install "personamem[dev]")'
)
def test_two_runners_on_postgresql_take_different_jobs_and_finish_both(encoder: SentenceEncoder) -> None:
    with (
        postgres_cluster(POSTGRES) as cluster,
        PersonaMem.connect(cluster.create_database(), encoder=encoder) as mem,
    ):
        acme = mem.tenant("acme")
        jobs = [acme.jobs.submit_import(_lines(40, start=100 * n)) for n in range(2)]
        queue = _queue(mem)
        first = queue.claim(30.0)
        second = queue.claim(30.0)  # SKIP LOCKED / the lease: never the same job twice
        assert first and second and {first.job_id, second.job_id} == {j.job_id for j in jobs}
        assert queue.claim(30.0) is None
        for claim in (first, second):
            queue.release(claim, 0.0)  # handed back at once
        runners = [JobRunner(queue, lambda _: acme.store, batch=7) for _ in range(2)]
        threads = [threading.Thread(target=r.run_pending) for r in runners]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        ended = [acme.jobs.get(j.job_id) for j in jobs]
        assert [(j.state, j.stored, j.skipped) for j in ended] == [("done", 40, 0)] * 2
        assert acme.count() == 80 and queue.waiting_lines() == 0
