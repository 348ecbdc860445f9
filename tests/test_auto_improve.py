"""improve on its own: a lease kept with the data, and a run started by new feedback, once per store."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.auto_improve import LAST_KEY, AutoImprove
from personamem.errors import ConfigError
from personamem.store.lease import Lease
from personamem.store.sql import SqlCatalog
from tests.trainers.test_improve_ranker import improvable_store


def test_a_lease_has_one_holder_until_it_expires_or_is_released(tmp_path: Path) -> None:
    catalog = SqlCatalog(f"sqlite:///{tmp_path / 'lease.sqlite'}")
    first, second = Lease(catalog, "job", ttl_s=0.3), Lease(catalog, "job", ttl_s=0.3)
    assert first.acquire("a") and first.holder() == "a"
    assert not second.acquire("b") and first.acquire("a")  # held: refused; its holder renews it
    second.release("b")  # not b's to give up
    assert first.holder() == "a"
    time.sleep(0.4)
    assert first.holder() is None and second.acquire("b")  # expired: taken over
    assert not first.acquire("a")
    second.release("b")
    assert first.holder() is None and first.acquire("a")
    catalog.close()


@pytest.mark.slow
def test_enough_new_feedback_runs_improve_once_for_the_store(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    folder = improvable_store(tmp_path / "store", encoder)
    options = ["--steps", "20", "--weights", "0.8"]
    with PersonaMem.open(folder, encoder=encoder) as one, PersonaMem.open(folder, encoder=encoder) as two:
        with pytest.raises(ConfigError, match="tenant"):
            AutoImprove(one.tenant("acme"))
        workers = [AutoImprove(mem, every=30, interval=3600, options=options) for mem in (one, two)]
        assert workers[0].due() >= 30  # every logged call was reported on
        ran: list[bool] = []
        threads = [threading.Thread(target=lambda w=w: ran.append(w.tick())) for w in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(ran) == [False, True]  # two workers noticed; the lease let one run
        assert one.store.catalog.info(LAST_KEY) is not None and workers[0].due() == 0
        trial = two.trials.running()  # the child's improve put its candidate on trial
        assert trial is not None and trial.role == "challenger" and two.store.live_pipeline is None
        assert not workers[1].tick()  # nothing new since: no run
