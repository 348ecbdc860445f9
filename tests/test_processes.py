"""Several processes over one store: opening a fresh folder and writing one new user at the same moment."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from personamem import PersonaMem, SentenceEncoder

ROUNDS = 20


def _worker(name: str, root: str, rounds: int, barrier: Any, errors: Any) -> None:
    """Each round: wait for the other process, open the round's fresh folder, add, search, close."""
    from personamem import PersonaMem
    from personamem.encoder import default_encoder

    encoder = default_encoder()
    encoder.encode(["warm up"])
    for r in range(rounds):
        barrier.wait(timeout=120)  # both processes start the round together
        try:
            with PersonaMem.open(Path(root) / f"round-{r}", encoder=encoder) as mem:
                mem.add("shared-user", f"{name} was here in round {r}", id=name)
                mem.search("shared-user", "who was here", k=2)
        except Exception:
            errors.put(f"{name} round {r}:\n{traceback.format_exc()}")
        barrier.wait(timeout=120)  # neither opens the next folder before both closed this one


@pytest.mark.slow
def test_two_processes_open_a_fresh_store_and_write_one_new_user(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    context = mp.get_context("spawn")
    barrier, errors = context.Barrier(2), context.Queue()
    workers = [
        context.Process(target=_worker, args=(name, str(tmp_path), ROUNDS, barrier, errors))
        for name in ("alpha", "beta")
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    hung = [w for w in workers if w.is_alive()]
    for worker in hung:
        worker.kill()
    assert not hung, "a worker hung (a lock never released, or its peer died at the barrier)"
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert failures == [], "\n".join(failures)
    assert [w.exitcode for w in workers] == [0, 0]
    for r in range(ROUNDS):
        with PersonaMem.open(tmp_path / f"round-{r}", encoder=encoder) as mem:
            assert sorted(rec.id for rec in mem.records("shared-user")) == ["alpha", "beta"], r
            assert mem.store.check().ok, r
            assert len(mem.search("shared-user", "who was here", k=5)) == 2, r


# -- one process sees what another wrote (issue: stale dense results, forget races) -------------------


def _peer(root: str, commands: Any) -> None:
    """Another process over the store: runs each ``(method, args, kwargs)`` it is sent on its own
    PersonaMem, waits for the background indexer, and answers "ok" or the traceback."""
    from personamem import PersonaMem

    with PersonaMem.open(root) as mem:
        while (command := commands.recv()) is not None:
            method, args, kwargs = command
            try:
                getattr(mem, method)(*args, **kwargs)
                mem.store.flush()  # indexed, so the other process's view is stale if it is ever
                commands.send("ok")
            except Exception:
                commands.send(traceback.format_exc())


class Peer:
    """A second process over the same store, driven call by call."""

    def __init__(self, root: Path) -> None:
        context = mp.get_context("spawn")
        self._conn, theirs = context.Pipe()
        self._process = context.Process(target=_peer, args=(str(root), theirs), daemon=True)
        self._process.start()

    def __call__(self, method: str, *args: Any, **kwargs: Any) -> None:
        self._conn.send((method, args, kwargs))
        answer = self._conn.recv()
        assert answer == "ok", answer

    def close(self) -> None:
        self._conn.send(None)
        self._process.join(timeout=60)


def _dense_top(mem: PersonaMem, user: str, text: str) -> tuple[str, str, float] | None:
    hits = mem.search(user, text, k=1, method="dense")
    return (hits[0].record.id, hits[0].record.text, hits[0].score) if hits else None


@pytest.mark.slow
def test_a_process_searches_what_another_indexed_updated_and_deleted(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    texts = [f"Note {i}: I spent the afternoon sorting tomato seedling tray number {i}." for i in range(50)]
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add_many([{"id": f"r{i}", "text": text} for i, text in enumerate(texts)], user_id="u")
        assert _dense_top(mem, "u", texts[7])[0] == "r7"  # type: ignore[index]  # this process's view is built
        peer = Peer(tmp_path)
        try:
            peer("add", "u", "My cat Zanzibar only eats sardines on Sundays.", id="b1")
            assert _dense_top(mem, "u", "My cat Zanzibar only eats sardines on Sundays.")[:2] == (  # type: ignore[index]
                "b1",
                "My cat Zanzibar only eats sardines on Sundays.",
            )
            peer("update", "u", "r3", text="I sold my vintage motorbike to a collector in Lyon.")
            rid, text, score = _dense_top(mem, "u", "I sold my vintage motorbike to a collector in Lyon.")  # type: ignore[misc]
            assert (rid, text) == (
                "r3",
                "I sold my vintage motorbike to a collector in Lyon.",
            ) and score > 0.99
            old = _dense_top(mem, "u", texts[3])
            assert old is not None and (old[0] != "r3" or old[2] < 0.9), old  # not the stale vector
            peer("delete", "u", ["r5"])
            assert "r5" not in [h.record.id for h in mem.search("u", texts[5], k=10, method="dense")]
            records, vectors = mem.store.vectors("u")  # Chroma's own get failed here before
            assert len(records) == len(vectors) == 50 and "r5" not in {r.id for r in records}
            for method in ("dense", "hybrid", "default"):
                assert mem.search("u", texts[5], k=50, method=method), method
        finally:
            peer.close()


@pytest.mark.slow
def test_a_write_never_fails_because_another_process_forgot_the_user(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    rounds, failures, acked = 25, [], []
    done = threading.Event()
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add("v", "the first note")
        peer = Peer(tmp_path)
        try:
            peer("add", "warm-up", "the peer has loaded its encoder")

            def forget_now_and_then() -> None:
                """This process forgets ``v`` while the peer writes; acked records must then be gone."""
                try:
                    for _ in range(rounds):
                        time.sleep(0.15)
                        before = list(acked)
                        mem.forget("v")
                        alive = {r.id for r in mem.store.get_many("v", before)}
                        if alive:
                            failures.append(f"resurrected after forget: {sorted(alive)}")
                finally:
                    done.set()

            forgetter = threading.Thread(target=forget_now_and_then)
            forgetter.start()
            i = 0
            while not done.is_set():
                batch = [{"id": f"w{i}-{j}", "text": f"note {i}.{j} about the garden"} for j in range(3)]
                try:
                    peer("add_many", batch, user_id="v")
                except AssertionError as error:
                    failures.append(str(error))
                    break
                acked.extend(record["id"] for record in batch)
                i += 1
            forgetter.join()
        finally:
            peer.close()
        assert failures == [], failures[0]
        assert i > rounds, "the writer barely wrote: the test did not interleave"
        assert mem.store.check().ok
        for record in mem.records("v"):  # whatever survived the last forget is searchable
            assert _dense_top(mem, "v", record.text)[0] == record.id  # type: ignore[index]
