"""A full disk under an embedded store: every write fails fast and typed, reads go on, nothing is lost.

On a real tmpfs (mounted here when the test runs as root; skipped otherwise). The disk is filled with
ballast and then given back 16 KB after each failed write, so the store runs out of space again and
again at different steps: SQLite's staging, Chroma's log, Chroma's compaction. The last used to hang
the next Chroma upsert for good, inside Rust and holding the GIL, which froze every thread (issue 59):
a watchdog outside Python (faulthandler) ends the process if any write stops for 20 s.
"""

from __future__ import annotations

import faulthandler
import os
import random
import sqlite3
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from personamem import PersonaMem, PipelineConfig, SentenceEncoder
from personamem.errors import DiskFullError
from personamem.store import indexer
from personamem.store.store import SQL_FILE
from personamem.testing.filesystems import ballast, tmpfs

USERS = [f"user{i}" for i in range(4)]
WORDS = [f"{a}{b}" for a in ("bee", "oak", "sea", "sun", "owl", "fig", "elk", "ivy") for b in "aeiouyrs"]


class KnownTexts:
    """The real encoder, whose vectors for the test's notes are computed once, in one batch.

    The writes are what is tested: encoding each note again would make the test minutes long.
    """

    def __init__(self, encoder: SentenceEncoder, texts: list[str]) -> None:
        self._encoder, self.name, self.dim = encoder, encoder.name, encoder.dim
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # notes longer than the encoder's window: truncated alike
            self._known = dict(zip(texts, encoder.encode(texts), strict=True))

    def encode(self, texts: list[str]) -> np.ndarray:
        if all(text in self._known for text in texts):
            return np.stack([self._known[text] for text in texts])
        return self._encoder.encode(texts)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    try:
        with tmpfs(tmp_path / "disk", 8 << 20) as disk:
            yield disk
    except OSError as reason:
        pytest.skip(f"needs a real small filesystem: {reason}")


def _notes(count: int) -> list[str]:
    """About 1.5 KB each, as in the issue; written again and again under new ids."""
    rng = random.Random(59)
    return [" ".join(rng.choice(WORDS) for _ in range(300))[:1500] for _ in range(count)]


def test_a_full_disk_fails_writes_fast_keeps_reads_and_loses_nothing(
    small_disk: Path, encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(indexer, "MAX_BACKOFF_S", 2.0)  # the retry cadence, shortened for the test
    notes = _notes(8)
    config = PipelineConfig(log_interactions=False)  # a logged call would be lost on a full disk, warned
    with PersonaMem.open(small_disk / "store", encoder=KnownTexts(encoder, notes), pipeline=config) as mem:  # type: ignore[arg-type]
        acked: list[tuple[str, str]] = []
        for user in USERS:
            mem.add(user, f"{user} keeps three beehives in the orchard", id="first")
            acked.append((user, "first"))
        reserve = small_disk / "reserve"
        ballast(reserve, leave=(2 << 20) + (1 << 20))  # freed at the end: space returns
        filler = small_disk / "filler"
        left = ballast(filler, leave=1 << 20)
        failures, slowest, first_failure = 0, 0.0, None
        started = time.monotonic()
        for i in range(3000):
            user, note = USERS[i % 4], notes[i % len(notes)]
            faulthandler.dump_traceback_later(20, exit=True)  # a hang holds the GIL: only this can end it
            began = time.monotonic()
            try:
                if i % 5 == 4:
                    mem.add_many([{"user_id": user, "text": note, "id": f"n{i}"}])
                else:
                    mem.add(user, note, id=f"n{i}")
                acked.append((user, f"n{i}"))
            except DiskFullError as error:
                failures += 1
                first_failure = first_failure or time.monotonic() - started
                assert str(small_disk) in str(error) and "bytes free" in str(error), error
                left = max(0, left - (16 << 10))
                os.truncate(filler, left)  # a little space back: the next write fails somewhere else
            finally:
                faulthandler.cancel_dump_traceback_later()
                slowest = max(slowest, time.monotonic() - began)
            if failures >= 40 or left == 0:
                break
        assert failures >= 10, f"the disk never filled ({failures} failures in {i + 1} writes)"
        assert slowest < 10, f"a write took {slowest:.1f} s"
        print(f"first failure after {first_failure:.2f} s, slowest write {slowest:.2f} s, {failures} failed")

        faulthandler.dump_traceback_later(60, exit=True)  # for the rest: reads, recovery, check
        for user in USERS:  # reads while the disk is full
            assert mem.search(user, "beehives in the orchard", k=3)
            assert mem.get(user, "first") is not None
            # a batch whose rows were staged before its vectors ran out of space failed, yet is kept
            assert {r.id for r in mem.records(user)} >= {rid for u, rid in acked if u == user}

        reserve.unlink()
        filler.unlink()
        freed = time.monotonic()
        mem.add(USERS[0], "space came back", id="after")  # at once: SQL alone takes an add
        acked.append((USERS[0], "after"))
        while mem.store.catalog.pending():  # the background indexer resumes by itself
            assert time.monotonic() - freed < 30, "pending rows still not indexed 30 s after space returned"
            time.sleep(0.1)
        print(f"pending rows indexed {time.monotonic() - freed:.2f} s after space returned")
        assert mem.store.check().ok
        assert all(mem.get(user, record_id) is not None for user, record_id in acked)
        faulthandler.cancel_dump_traceback_later()


def test_a_new_store_on_a_full_disk_fails_typed(small_disk: Path, encoder: SentenceEncoder) -> None:
    ballast(small_disk / "filler", leave=0)
    with pytest.raises(DiskFullError, match="bytes free"):
        PersonaMem.open(small_disk / "store", encoder=encoder)


@pytest.fixture
def reader_and_writer(small_disk: Path, encoder: SentenceEncoder) -> Iterator[tuple[PersonaMem, PersonaMem]]:
    """Two handles on one store on the small disk, as two workers; logged calls are not kept."""
    config = PipelineConfig(log_interactions=False)
    with (
        PersonaMem.open(small_disk / "store", encoder=encoder, pipeline=config) as reader,
        PersonaMem.open(small_disk / "store", encoder=encoder, pipeline=config) as writer,
    ):
        yield reader, writer


def test_a_user_this_worker_never_read_is_read_from_sql_on_a_full_disk(
    small_disk: Path, reader_and_writer: tuple[PersonaMem, PersonaMem]
) -> None:
    """After a failed write, Chroma cannot be opened again without space: SQL keeps every vector.

    Before rows kept their vectors once indexed, this search failed with DiskFullError.
    """
    reader, writer = reader_and_writer
    reader.add("ana", "I keep three beehives in the orchard", id="bees")
    reader.store.flush()
    writer.add_many(  # the bulk path stages rows without vectors: indexing keeps them
        [{"id": "lisbon", "text": "My sister moved to Lisbon last spring"}], user_id="bo"
    )
    writer.add("bo", "My sister lives in Porto now", id="porto")  # one add: the row keeps its own
    writer.store.flush()
    ballast(small_disk / "filler", leave=0)
    with pytest.raises(DiskFullError):  # the reader's client is now one a failed write left
        for n in range(50):
            reader.add("ana", f"note {n}: " + " ".join(WORDS[:40]), id=f"note{n}")
            reader.store.flush()
    hits = reader.search("bo", "where does my sister live", k=2, method="dense")
    assert sorted(h.record.id for h in hits) == ["lisbon", "porto"]


def _forget_kept_vectors(store: Path) -> None:
    """The rows as a store written before indexed rows kept their vectors has them."""
    with sqlite3.connect(store / SQL_FILE) as db:
        db.execute("UPDATE records SET pending_vector = NULL WHERE status = 'indexed'")


def test_a_read_whose_copy_is_behind_answers_on_a_full_disk(
    small_disk: Path, reader_and_writer: tuple[PersonaMem, PersonaMem]
) -> None:
    """Bringing a copy up to date applies Chroma's log, a write: on a full disk, where SQL keeps no
    vectors (a store written before it did), the read uses the copy."""
    reader, writer = reader_and_writer
    writer.add("ana", "I keep three beehives in the orchard", id="bees")
    writer.store.flush()
    assert reader.search("ana", "honey bees", k=1, method="dense")[0].record.id == "bees"
    writer.add("ana", "My sister moved to Lisbon last spring", id="lisbon")
    writer.store.flush()  # the reader's copy is now behind the index
    writer.delete("ana", ["bees"])  # and holds a record that is gone
    _forget_kept_vectors(small_disk / "store")
    ballast(small_disk / "filler", leave=0)
    hits = reader.search("ana", "honey bees", k=2, method="dense")
    assert [h.record.id for h in hits] in ([], ["lisbon"])  # never the erased record
