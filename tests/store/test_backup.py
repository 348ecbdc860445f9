"""``backup`` of an embedded store while another process writes it, and ``restore``.

The writer is a real process (from a ``forkserver`` that has imported personamem, Chroma and
sentence-transformers once) over the same folder: single ``add`` calls whose vectors reach Chroma
from the background indexer, bulk ``add_many`` batches indexed at once (past Chroma's 1,000-vector
persist threshold, so HNSW segment files change on disk under the backup), and a delete per round.
It appends each record to a file once its call returned: what it acknowledged. The backup is taken
while it writes; the restored store must check clean and hold every record acknowledged before the
backup began.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

import pytest
from filelock import Timeout

from personamem import PersonaMem, SentenceEncoder
from personamem.cli import main
from personamem.errors import InvalidInputError
from personamem.store.backup import BACKUP_INFO, backup, restore
from personamem.store.store import VECTOR_DIR
from personamem.store.vectors import writing_lock

TOPICS = [
    "I keep three beehives in the orchard",
    "My sister moved to Lisbon last spring",
    "I am learning to play the cello",
    "Our cat Miso hates the vacuum cleaner",
    "I train for a marathon every Sunday morning",
    "I am allergic to penicillin",
    "I brew cider from the apples in the garden",
]
BULK = 300  # records per add_many; a few batches pass Chroma's persist threshold of 1,000


def _write(root: str, acked: str, stop: Any) -> None:
    """In the child: write until ``stop`` is set; one line ``user, id, text`` per acknowledged record."""
    import numpy as np

    from personamem import PersonaMem, Record

    rng = np.random.default_rng(0)
    with PersonaMem.open(root) as mem, open(acked, "a", encoding="utf-8") as log:
        dim = mem.store.encoder.dim
        i = 0
        while not stop.is_set():
            for user in ("ana", "bob", "cy"):
                text = f"{TOPICS[i % len(TOPICS)]} (entry {i:03d})"
                log.write(f"{user}\t{mem.add(user, text).id}\t{text}\n")
                log.flush()
            bulk = [Record(user_id="bulk", id=f"b{i}-{j}", text=f"bulk row {i} {j}") for j in range(BULK)]
            vectors = rng.normal(size=(BULK, dim)).astype(np.float32)
            mem.store.add_many(bulk, vectors=vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
            log.write("".join(f"bulk\t{r.id}\t{r.text}\n" for r in bulk))
            log.flush()
            churn = mem.add("churn", f"a passing thought, number {i}")
            mem.delete("churn", [churn.id])  # its SQL step may commit while the backup holds the lock
            i += 1


def _acknowledged(acked: Path) -> dict[tuple[str, str], str]:
    """(user, id) -> text of each complete line the writer wrote so far."""
    lines = acked.read_text(encoding="utf-8").split("\n")[:-1]  # the last piece may be half written
    return {(user, rid): text for user, rid, text in (line.split("\t") for line in lines)}


def _wait_for(acked: Path, count: int, writer: Any) -> dict[tuple[str, str], str]:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert writer.is_alive(), f"the writer died (exit code {writer.exitcode})"
        if acked.exists() and len(seen := _acknowledged(acked)) >= count:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"the writer acknowledged fewer than {count} records in 90 s")


@pytest.fixture(scope="module")
def children() -> mp.context.ForkServerContext:
    """A fork server with the heavy imports done once, so the writer starts in about a second."""
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["personamem", "personamem.memory", "chromadb"])
    forkserver.ensure_running()
    return context


@pytest.mark.slow
def test_a_backup_under_write_load_restores_every_acknowledged_record(
    tmp_path: Path, children: mp.context.ForkServerContext, encoder: SentenceEncoder
) -> None:
    store, acked = tmp_path / "store", tmp_path / "acked.tsv"
    stop = children.Event()
    writer = children.Process(target=_write, args=(str(store), str(acked), stop))
    writer.start()
    try:
        before = _wait_for(acked, 4 * BULK, writer)  # the bulk user's segment is on disk by then
        taken = backup(store, tmp_path / "backup", encoder=encoder)
        after = _wait_for(acked, len(before) + 2 * BULK, writer)  # it kept writing through the backup
    finally:
        stop.set()
        writer.join(timeout=60)
    assert writer.exitcode == 0
    assert len(before) <= taken.records <= len(after) + 1  # + a churn record not yet deleted
    assert json.loads((tmp_path / "backup" / BACKUP_INFO).read_text())["records"] == taken.records
    assert list((tmp_path / "backup" / "chroma").glob("*/data_level0.bin")), "no HNSW file was copied"

    restored = restore(tmp_path / "backup", tmp_path / "restored", encoder=encoder)
    assert (restored.records, restored.taken_at, restored.source) == (
        taken.records,
        taken.taken_at,
        str(store),
    )
    with PersonaMem.open(tmp_path / "restored", encoder=encoder) as mem:
        report = mem.store.check()
        assert report.ok, report
        held = {(user, r.id) for user in mem.users() for r in mem.records(user)}
        lost = set(before) - held
        assert not lost, f"{len(lost)} acknowledged record(s) missing, e.g. {sorted(lost)[:3]}"
        (user, rid), text = next((key, text) for key, text in before.items() if key[0] == "bob")
        for method in ("dense", "bm25"):
            assert mem.search(user, text, k=1, method=method)[0].record.id == rid, method


def test_backup_and_restore_refuse_bad_paths_and_a_store_that_holds_data(
    tmp_path: Path, mem: PersonaMem, encoder: SentenceEncoder
) -> None:
    mem.add("ana", "I keep three beehives in the orchard")
    store, copy = tmp_path / "store", tmp_path / "copy"
    for kept in ("adapters/20260101T000000Z/config.json", "adapters/.work/step-10.pt"):  # improve's
        (store / kept).parent.mkdir(parents=True, exist_ok=True)
        (store / kept).write_text("{}")
    assert backup(store, copy, encoder=encoder).records == 1  # the store is open in this process too
    assert (copy / "adapters/20260101T000000Z/config.json").is_file()
    assert not (copy / "adapters/.work").exists()  # training scratch stays behind

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("keep me")
    bad = {
        "is not empty; give a new or empty folder": lambda: backup(store, copy),
        "is not a folder": lambda: backup(tmp_path / "nowhere", tmp_path / "b2"),
        "is not a personamem store folder": lambda: backup(notes, tmp_path / "b3"),
        "one inside the other": lambda: backup(store, store / "inside"),
        r"holds a store \(--force replaces it": lambda: restore(copy, store),
        "is not empty": lambda: restore(copy, notes, force=True),  # files, but no store: never replaced
    }
    for message, call in bad.items():
        with pytest.raises(InvalidInputError, match=message):
            call()
    assert (notes / "todo.txt").read_text() == "keep me"
    assert not (tmp_path / "b2").exists() and not list(tmp_path.glob(".*.partial"))

    other = tmp_path / "other"
    with PersonaMem.open(other, encoder=encoder) as theirs:
        theirs.add("bob", "I sail on weekends")
    (other / "todo.txt").write_text("not the store's")
    assert restore(copy, other, force=True, encoder=encoder).users == 1
    with PersonaMem.open(other, encoder=encoder) as restored:
        assert restored.users() == ["ana"] and restored.store.check().ok
    assert (other / "todo.txt").read_text() == "not the store's"  # only the store's files were replaced
    assert not list(tmp_path.glob(".other.*"))

    (copy / BACKUP_INFO).write_text(json.dumps({"format": 99, "personamem": "9.0"}))
    with pytest.raises(InvalidInputError, match=r"not a backup this personamem reads \(made by 9.0\)"):
        restore(copy, tmp_path / "fresh")


def test_the_commands(tmp_path: Path, mem: PersonaMem, capsys: pytest.CaptureFixture[str]) -> None:
    mem.add("ana", "I keep three beehives in the orchard")
    store = ["--store", str(tmp_path / "store")]
    assert main([*store, "backup", str(tmp_path / "copy")]) == 0
    captured = capsys.readouterr()
    assert "backed up 1 user(s), 1 record(s)" in captured.out
    assert "copying the records' database" in captured.err  # progress goes to stderr

    assert main([*store, "restore", str(tmp_path / "copy")]) == 2
    assert "holds a store (--force replaces it" in capsys.readouterr().err
    assert main(["--store", str(tmp_path / "new"), "restore", str(tmp_path / "missing")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert main(["--store", str(tmp_path / "new"), "restore", str(tmp_path / "copy")]) == 0
    assert "restored 1 user(s), 1 record(s)" in capsys.readouterr().out

    assert main(["--sql-url", "postgresql+psycopg://db/personamem", "backup", str(tmp_path / "pg")]) == 2
    said = " ".join(capsys.readouterr().err.split())
    assert "pg_dump" in said and "docs/DEPLOY.md, section 'Backups'" in said


def test_a_delete_holds_the_vector_folder_from_its_sql_step_to_the_rebuild(
    tmp_path: Path, encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backup between the two would copy vectors of rows it does not copy: a copy that checks unclean."""
    held: list[bool] = []
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add("ana", "I keep three beehives in the orchard")
        gone = mem.add("ana", "I sold the old car last week")
        mem.store.flush()
        catalog = mem.store.catalog
        real_delete = catalog.delete_records

        def delete_records(*args: Any, **kwargs: Any) -> list[str]:
            try:  # another lock object on the same file, as the backup's process takes it
                writing_lock(tmp_path / VECTOR_DIR).acquire(timeout=0).lock.release()
                held.append(False)
            except Timeout:
                held.append(True)
            return real_delete(*args, **kwargs)

        monkeypatch.setattr(catalog, "delete_records", delete_records)
        assert mem.delete("ana", [gone.id]) == [gone.id]
        assert held == [True] and mem.store.check().ok
