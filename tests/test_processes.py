"""Several processes over one store: opening a fresh folder and writing one new user at the same moment."""

from __future__ import annotations

import multiprocessing as mp
import traceback
from pathlib import Path
from typing import Any

import pytest

from personamem import PersonaMem, SentenceEncoder

ROUNDS = 20


def _worker(name: str, root: str, rounds: int, barrier: Any, errors: Any) -> None:
    """Each round: wait for the other process, open the round's fresh folder, add, search, close."""
    import torch

    from personamem import PersonaMem
    from personamem.encoder import default_encoder

    torch.set_num_threads(1)
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
