"""Crashes and faults: a killed ingest, an interrupted write or forget, a failing vector index."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from personamem import PartialWriteError, PersonaMem, Record, SentenceEncoder, StoreError
from personamem.store import sql

WRITER = textwrap.dedent(
    """
    import sys
    from personamem import PersonaMem

    start = int(sys.argv[2])
    with PersonaMem.open(sys.argv[1]) as mem:
        for i in range(start, start + 100_000):
            record = mem.add(f"user{i % 7}", f"entry {i}: note number {i * 7919 % 1000} about my week")
            print(record.user_id, record.id, flush=True)
    """
)


def _kill_after(store: Path, start: int, returned: int) -> list[tuple[str, str]]:
    """Run a writer, SIGKILL it once ``returned`` adds have returned; give back what it reported."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(store), str(start)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.stdout is not None
    done: list[tuple[str, str]] = []
    deadline = time.monotonic() + 120
    while len(done) < returned and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        done.append(tuple(line.split()))  # type: ignore[arg-type]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert len(done) == returned, f"writer died early after {len(done)} adds"
    return done


@pytest.mark.slow
def test_sigkill_during_ingest_loses_no_returned_record(tmp_path: Path, encoder: SentenceEncoder) -> None:
    store = tmp_path / "store"
    returned = _kill_after(store, 0, 60) + _kill_after(store, 1000, 90)
    with PersonaMem.open(store, encoder=encoder) as mem:
        report = mem.store.check()
        assert report.ok, report
        for user_id, record_id in returned:
            assert mem.get(user_id, record_id) is not None, (user_id, record_id)
        assert mem.count() >= len(returned)
        user, rid = returned[-1]
        hits = mem.search(user, mem.get(user, rid).text, k=1)  # type: ignore[union-attr]
        assert hits[0].record.id == rid


def test_pending_rows_are_indexed_on_reopen(tmp_path: Path, encoder: SentenceEncoder) -> None:
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.store.catalog.stage(
            [Record(user_id="u", text="I adopted a greyhound named Pixel.")], mem.store.names
        )  # crash here
        assert mem.store.check().pending
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        assert mem.store.check().ok
        assert mem.search("u", "my dog", k=1)[0].record.text == "I adopted a greyhound named Pixel."


def test_interrupted_forget_finishes_on_reopen(
    tmp_path: Path, encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql, "FORGET_WAIT_S", 0.2)  # a write waits this long for a forget to finish
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add("u", "secret")
        mem.add("v", "other")
        mem.store.catalog.begin_forget("u")  # crash here
        with pytest.raises(StoreError, match=r"being forgotten .* interrupted"):
            mem.add("u", "new data must not mix with a half-forgotten user")
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        assert mem.users() == ["v"]
        assert mem.store.check().ok


def test_vector_index_failure_keeps_rows_pending_then_repairs(
    tmp_path: Path, encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add("u", "already stored")

        def index_down(*_: object) -> None:
            raise ConnectionError("vector index unreachable")

        monkeypatch.setattr(mem.store.index, "upsert", index_down)
        mem.add("u", "written while the index was down")  # acknowledged: the row and vector are in SQL
        assert mem.search("u", "index down", k=1)[0].record.text == "written while the index was down"
        with pytest.raises(StoreError, match="pending"):
            mem.store.flush()
        with pytest.raises(PartialWriteError, match="pending"):
            mem.add_many(["a batch written while the index was down"], user_id="u")
        monkeypatch.undo()
        assert mem.get("u", Record(user_id="u", text="already stored").id) is not None
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        assert mem.store.check().ok
        assert mem.count("u") == 3


def test_store_refuses_a_different_encoder(tmp_path: Path, encoder: SentenceEncoder) -> None:
    class Other:
        name, dim = "other-model", 8

        def encode(self, texts: list[str]) -> np.ndarray:
            return np.ones((len(texts), 8), dtype=np.float32) / np.sqrt(8)

    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add("u", "hello")
    with PersonaMem.open(tmp_path, encoder=Other()) as mem, pytest.raises(StoreError, match="encoder"):
        mem.add("u", "world")


def _index_fails_after(monkeypatch: pytest.MonkeyPatch, calls: int) -> None:
    """Let the vector index take ``calls`` upserts, then fail like a full disk."""
    from personamem.store.vectors import VectorIndex

    real, seen = VectorIndex.upsert, [0]

    def upsert(self: VectorIndex, *args: object) -> None:
        seen[0] += 1
        if seen[0] > calls:
            raise OSError(28, "No space left on device")
        real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(VectorIndex, "upsert", upsert)


def test_a_batch_that_fails_at_the_write_says_what_is_stored_and_resumes(
    tmp_path: Path, encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = [f"note {i} about my garden" for i in range(300)]
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        _index_fails_after(monkeypatch, 1)
        with pytest.raises(PartialWriteError, match="stored 256 of 300") as caught:
            mem.add_many(texts, user_id="ana")
        assert (caught.value.stored, caught.value.total) == (256, 300)
        monkeypatch.undo()
        assert mem.add_many(texts, user_id="ana") and mem.count("ana") == 300
        assert mem.store.check().ok


def test_ingest_that_fails_at_the_write_reports_and_the_same_command_finishes(
    tmp_path: Path,
    encoder: SentenceEncoder,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from personamem.cli import main

    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(f'{{"text": "note {i}", "id": "n{i}"}}\n' for i in range(300)), encoding="utf-8")
    command = ["--store", str(tmp_path / "store"), "ingest", str(notes), "--user", "ana"]
    _index_fails_after(monkeypatch, 1)
    assert main(command) == 1
    err = capsys.readouterr().err
    assert "stored 256 of 300" in err and "No space left" in err and "Traceback" not in err
    monkeypatch.undo()
    assert main(command) == 0
    assert "stored 300 record(s)" in capsys.readouterr().out
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as mem:
        assert mem.count("ana") == 300 and mem.store.check().ok


def test_a_store_from_before_kept_vectors_gains_the_column(tmp_path: Path, encoder: SentenceEncoder) -> None:
    import sqlite3

    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add_many(["I keep bees"], user_id="ana")
    with sqlite3.connect(tmp_path / "personamem.sqlite") as db:
        db.execute("ALTER TABLE records DROP COLUMN pending_vector")  # the table as older versions made it
        db.execute("DROP TABLE alembic_version")  # which had no migrations
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add("ana", "my hives are in the orchard")
        assert [h.record.text for h in mem.search("ana", "orchard hives", k=1)] == [
            "my hives are in the orchard"
        ]
        assert mem.store.check().ok


def test_a_store_from_before_validity_gains_its_columns(tmp_path: Path, encoder: SentenceEncoder) -> None:
    import sqlite3

    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        kept = mem.add("ana", "I keep bees")
    with sqlite3.connect(tmp_path / "personamem.sqlite") as db:  # the tables as older versions made them
        db.execute("DROP INDEX ix_records_user_bounded")
        db.execute("DROP INDEX ix_records_expires_at")
        for column in ("valid_from", "valid_until", "supersedes", "expires_at", "bounded"):
            db.execute(f"ALTER TABLE records DROP COLUMN {column}")
        db.execute("ALTER TABLE users DROP COLUMN bounds_token")
        db.execute("DROP TABLE alembic_version")
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        assert mem.get("ana", kept.id) == kept  # its content hash is unchanged: re-adding is a no-op
        mem.supersede("ana", kept.id, "I gave my hives to a neighbour.")
        assert [h.record.text for h in mem.search("ana", "bees hives", k=2)] == [
            "I gave my hives to a neighbour."
        ]
        assert mem.store.check().ok
