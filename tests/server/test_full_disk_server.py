"""``personamem serve`` on a full disk: a write is a 507 naming the disk, reads go on, space back heals it.

A real server over a store on a real tmpfs (mounted when the test runs as root; skipped otherwise).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from personamem.client import Client
from personamem.errors import DiskFullError
from personamem.store import KeyRing
from personamem.store.sql import SqlCatalog
from personamem.testing.filesystems import ballast, tmpfs
from personamem.testing.servers import personamem_server

pytestmark = [pytest.mark.server, pytest.mark.enable_socket]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    try:
        with tmpfs(tmp_path / "disk", 16 << 20) as disk:
            yield disk
    except OSError as reason:  # at the mount only: a test's own errors are not thrown in here
        pytest.skip(f"needs a real small filesystem: {reason}")


def test_a_full_disk_answers_507_and_the_client_raises_the_same_error(
    tmp_path: Path, small_disk: Path
) -> None:
    disk, store = small_disk, small_disk / "store"
    with personamem_server(tmp_path / "server", "--store", str(store)) as url:
        catalog = SqlCatalog(f"sqlite:///{store / 'personamem.sqlite'}")
        key = KeyRing(catalog).create("t")[0]
        catalog.close()
        headers = {"Authorization": f"Bearer {key}"}
        with Client(url, key) as client, httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            client.add("ana", "I keep three beehives in the orchard", id="bees")
            ballast(disk / "filler", leave=0)

            answer = http.post("/v1/records", json={"user_id": "ana", "text": "I sold my car"})
            assert answer.status_code == 507, answer.text
            error = answer.json()["error"]
            assert error["type"] == "DiskFullError" and str(store) in error["message"], error
            assert "bytes free" in error["message"] and error["free"] is not None
            with pytest.raises(DiskFullError) as raised:
                client.add("ana", "I ride a bicycle now")
            assert str(raised.value).split(" failed (")[0] == error["message"].split(" failed (")[0]

            assert client.get("ana", "bees") is not None  # reads while the disk is full
            assert client.search("ana", "honey", k=1)[0].record.id == "bees"

            (disk / "filler").unlink()
            assert client.add("ana", "I ride a bicycle now", id="bike").id == "bike"
            assert {r.id for r in client.records("ana")} == {"bees", "bike"}
