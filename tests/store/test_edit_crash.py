"""``delete`` and ``update`` killed (SIGKILL) between the write protocol's steps, then repaired on open.

Each case runs the edit in a child process that opens the store and arms one crash point: the real
``SqlCatalog`` or ``VectorIndex`` method, wrapped on the class in the child only, kills the process
just before or just after it runs. The test process then reopens the store (which runs ``repair``)
and checks the outcome that crash point must give:

* delete, killed before its SQL transaction: the record is all there, unchanged and searchable;
* delete, killed after it (before the collection is dropped, after the drop, or after the
  re-index's upsert but before ``mark_indexed``): the record is gone from SQL, the vector index,
  every search and every file of the store;
* update, killed before the new version is staged: the old text with the old vector;
* update, killed after staging (before or after the background upsert): the new text with the
  new vector, never one text with the other's vector.

Either way every other record of the user, and of a second user, is intact and searchable, and
``check()`` finds SQL and the vector index in agreement.

The children come from a ``forkserver`` that has imported personamem, Chroma and
sentence-transformers once: importing sentence-transformers alone takes ~5 s, and an update child
must encode. Each child is still a fresh process that opens the store itself, as a restarted
worker would.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
from dataclasses import dataclass
from multiprocessing import forkserver
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from personamem import PersonaMem, PipelineConfig, Record, SentenceEncoder
from personamem.store.read import NOW
from tests.bytescan import files_containing, store_files, vectors_in

GONE_ID, GONE_TEXT = "ZQXGONEID", "ZQXGONETEXT my old address was 12 Elm Street"
CAR_ID, OLD_TEXT, NEW_TEXT = "car", "I drive a red car", "I sold the car and ride a bicycle to work"
ANA_FACTS = [
    "I am vegan and avoid dairy",
    "My sister lives in Lisbon",
    "I keep three beehives in the orchard",
    "I play chess on Tuesday evenings",
    "I am allergic to penicillin",
    "My favourite band is Radiohead",
    "I work as a nurse on night shifts",
    "I am learning Japanese",
    "My cat is called Miso",
    "I run a marathon every spring",
    "I grew up on a farm in Wales",
    "I collect vintage fountain pens",
    "My daughter starts school in September",
    "I hate flying and take the train",
    "I brew my own cider",
    "I read science fiction before bed",
    "My knee hurts when it rains",
    "I volunteer at the food bank on Saturdays",
]
BOB_TOPICS = [
    "sailing", "jazz piano", "sourdough", "birdwatching", "rock climbing", "pottery", "astronomy",
    "woodworking", "salsa dancing", "fly fishing", "origami", "beekeeping", "calligraphy", "surfing",
    "chess openings", "bonsai", "kayaking", "stamp collecting", "karaoke", "mountain biking",
]  # fmt: skip
METHODS = ("dense", "bm25", "hybrid")


@dataclass(frozen=True)
class Crash:
    """Where the child dies: ``when`` the real ``owner.method`` runs, during ``op``; and what must survive."""

    op: Literal["delete", "update"]
    owner: Literal["SqlCatalog", "VectorIndex"]
    method: str
    when: Literal["before", "after"]
    outcome: Literal["kept", "gone", "old", "new"]


CRASHES = {
    # delete: SqlCatalog.delete_records (one transaction) -> VectorIndex.drop -> upsert -> mark_indexed
    "delete-before-sql-commit": Crash("delete", "SqlCatalog", "delete_records", "before", "kept"),
    "delete-before-drop": Crash("delete", "VectorIndex", "drop", "before", "gone"),
    "delete-after-drop": Crash("delete", "VectorIndex", "drop", "after", "gone"),
    "delete-after-upsert": Crash("delete", "SqlCatalog", "mark_indexed", "before", "gone"),
    # update: encode -> SqlCatalog.stage (row + vector) -> background upsert -> mark_indexed
    "update-before-staging": Crash("update", "SqlCatalog", "stage", "before", "old"),
    "update-after-staging": Crash("update", "SqlCatalog", "stage", "after", "new"),
    "update-before-upsert": Crash("update", "VectorIndex", "upsert", "before", "new"),
    "update-after-upsert": Crash("update", "VectorIndex", "upsert", "after", "new"),
}


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _edit_and_crash(root: str, crash: Crash) -> None:
    """In the child: open the store, arm the crash point, run the edit (which must not return)."""
    from personamem.store.sql import SqlCatalog
    from personamem.store.vectors import VectorIndex

    owner: Any = {"SqlCatalog": SqlCatalog, "VectorIndex": VectorIndex}[crash.owner]
    real = getattr(owner, crash.method)

    def armed(self: object, *args: object, **kwargs: object) -> object:
        if crash.when == "before":
            _die()
        result = real(self, *args, **kwargs)
        _die()
        return result

    with PersonaMem.open(root) as mem:  # armed after opening, so the open's own repair runs unharmed
        setattr(owner, crash.method, armed)
        if crash.op == "delete":
            mem.delete("ana", [GONE_ID])
        else:
            mem.update("ana", CAR_ID, text=NEW_TEXT)
            mem.store.flush()  # the background indexer dies in its upsert


@pytest.fixture(scope="session")
def children() -> mp.context.ForkServerContext:
    """A fork server with the heavy imports done once (see the module docstring).

    Session-scoped and requested before ``encoder``, so its imports run beside the encoder's load.
    """
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["personamem", "chromadb", "sentence_transformers"])
    forkserver.ensure_running()
    return context


@dataclass(frozen=True)
class Seeded:
    """A closed store to copy for each case, what it holds, and the vectors its texts must have."""

    root: Path
    records: dict[str, list[Record]]
    truth: dict[str, np.ndarray]  # text -> the encoder's vector, computed once for every case
    gone_vector_id: bytes
    gone_vector: np.ndarray


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory, encoder: SentenceEncoder) -> Seeded:
    """Two users of 20 records each, all indexed, written by this process and closed."""
    root = tmp_path_factory.mktemp("seeded") / "store"
    with PersonaMem.open(root, encoder=encoder) as mem:
        ana = [{"id": f"a{i}", "text": text} for i, text in enumerate(ANA_FACTS)]
        ana += [{"id": GONE_ID, "text": GONE_TEXT}, {"id": CAR_ID, "text": OLD_TEXT, "category": "transport"}]
        mem.add_many(ana, user_id="ana")
        bob = [{"id": f"b{i}", "text": f"bob's weekend hobby is {t}"} for i, t in enumerate(BOB_TOPICS)]
        mem.add_many(bob, user_id="bob")
        assert mem.store.check().ok
        records = {user: mem.records(user) for user in ("ana", "bob")}
        stored, vectors = mem.store.vectors("ana")
        gone_vector = vectors[[r.id for r in stored].index(GONE_ID)][None]
        gone_vector_id = mem.store.names.vector_id("ana", GONE_ID).encode()
    texts = [r.text for user in records.values() for r in user] + [NEW_TEXT]
    truth = dict(zip(texts, encoder.encode(texts), strict=True))
    files = store_files(root)  # the scans after a delete must be able to see what they look for
    assert files_containing(files, b"ZQXGONETEXT") and files_containing(files, gone_vector_id)
    assert vectors_in(files, gone_vector) == {0}
    return Seeded(root, records, truth, gone_vector_id, gone_vector)


def _assert_consistent(
    mem: PersonaMem, user: str, expected: list[Record], truth: dict[str, np.ndarray]
) -> None:
    """The user's records are exactly ``expected``, each indexed under its own text's vector, found by it."""
    assert mem.records(user) == expected
    records, vectors = mem.store.vectors(user)
    by_id = dict(zip([r.id for r in records], vectors, strict=True))
    assert sorted(by_id) == sorted(r.id for r in expected)
    for record in expected:
        assert float(by_id[record.id] @ truth[record.text]) > 0.999, f"{record.id}'s vector is not its text's"
        assert mem.store.nearest(user, truth[record.text], 1, NOW)[0][0].id == record.id
    sample = expected[len(expected) // 2]
    for method in METHODS:
        assert mem.search(user, sample.text, k=3, method=method)[0].record.id == sample.id, method


@pytest.mark.parametrize("name", list(CRASHES))
def test_a_killed_edit_is_all_or_nothing_after_reopen(
    name: str,
    tmp_path: Path,
    children: mp.context.ForkServerContext,
    seeded: Seeded,
    encoder: SentenceEncoder,
) -> None:
    crash = CRASHES[name]
    root = tmp_path / "store"
    shutil.copytree(seeded.root, root)

    child = children.Process(target=_edit_and_crash, args=(str(root), crash))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL, f"the child was not killed at its crash point: {child.exitcode}"

    expected = {user: list(records) for user, records in seeded.records.items()}
    if crash.outcome == "gone":
        expected["ana"] = [r for r in expected["ana"] if r.id != GONE_ID]
    elif crash.outcome == "new":
        expected["ana"] = [
            r.model_copy(update={"text": NEW_TEXT}) if r.id == CAR_ID else r for r in expected["ana"]
        ]
    # opening repairs; the probes below quote the deleted text, and logged they would be on disk
    # as queries of the user's own, so the check's memory logs nothing
    quiet = PipelineConfig(log_interactions=False)
    with PersonaMem.open(root, encoder=encoder, pipeline=quiet) as mem:
        report = mem.store.check()
        assert report.ok, report
        for user in ("ana", "bob"):
            _assert_consistent(mem, user, expected[user], seeded.truth)
        if crash.op == "delete":
            for method in METHODS:
                ids = [hit.record.id for hit in mem.search("ana", GONE_TEXT, k=25, method=method)]
                assert (ids[:1] == [GONE_ID]) if crash.outcome == "kept" else (GONE_ID not in ids), method
        else:
            car = mem.get("ana", CAR_ID)
            assert car is not None and car.text == (OLD_TEXT if crash.outcome == "old" else NEW_TEXT)
            for method in METHODS:
                assert mem.search("ana", car.text, k=1, method=method)[0].record.id == CAR_ID, method
        if crash.outcome == "gone":
            assert mem.get("ana", GONE_ID) is None
            files = store_files(root)
            for needle in (b"ZQXGONETEXT", GONE_ID.encode(), seeded.gone_vector_id):
                assert files_containing(files, needle) == [], needle
            assert vectors_in(files, seeded.gone_vector) == set(), (
                "the deleted record's vector is still on disk"
            )
