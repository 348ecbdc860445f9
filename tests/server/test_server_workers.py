"""Worker processes over one embedded store: what one acknowledged, another's dense search finds.

Two ``personamem serve`` processes over the same folder are exactly ``serve --workers 2`` (uvicorn
starts one app per process, each opening the store), with the choice of worker made by the test
rather than by the kernel, so every search lands on the process that did not write.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from personamem.cli.server import network_filesystem
from personamem.client import Client
from personamem.store import KeyRing
from personamem.store.sql import SqlCatalog
from personamem.testing.servers import personamem_server

pytestmark = [pytest.mark.server, pytest.mark.enable_socket, pytest.mark.slow]


def test_writes_through_one_worker_are_found_by_dense_search_through_the_other(tmp_path: Path) -> None:
    catalog = SqlCatalog(f"sqlite:///{tmp_path / 'personamem.sqlite'}")
    key, _ = KeyRing(catalog).create("acme")
    catalog.close()
    with (
        personamem_server(tmp_path) as writer_url,
        personamem_server(tmp_path / "second", "--store", str(tmp_path)) as reader_url,
        Client(writer_url, key) as writer,
        Client(reader_url, key) as reader,
    ):
        for i in range(12):
            text = f"Turn {i}: I repotted my {['fern', 'cactus', 'orchid'][i % 3]} number {i} on the balcony."
            writer.add("u", text, id=f"t{i}")
            assert reader.search("u", text, k=1, method="dense")[0].record.id == f"t{i}", i
            reader.search("u", "balcony plants", k=3, method="hybrid")
        writer.update("u", "t4", text="I gave the orchid number 4 to my neighbour Ines.")
        found = reader.search("u", "I gave the orchid number 4 to my neighbour Ines.", k=1, method="dense")
        assert (found[0].record.id, found[0].score > 0.99) == ("t4", True)
        writer.delete("u", ["t5"])
        assert "t5" not in [
            h.record.id for h in reader.search("u", "fern cactus orchid", k=12, method="dense")
        ]
        writer.forget("u")
        assert reader.search("u", "balcony", k=3, method="dense") == []
        writer.add("u", "After the forget I only keep succulents.", id="new")
        assert [h.record.id for h in reader.search("u", "succulents", k=3, method="dense")] == ["new"]


def test_serve_with_two_workers_answers_from_either(tmp_path: Path) -> None:
    catalog = SqlCatalog(f"sqlite:///{tmp_path / 'personamem.sqlite'}")
    key, _ = KeyRing(catalog).create("acme")
    catalog.close()
    with personamem_server(tmp_path, workers=2) as url:
        for i in range(10):  # a client per call: connections spread over both workers
            with Client(url, key) as writer:
                writer.add("u", f"Fact {i}: the spare key is under flowerpot {i}.", id=f"f{i}")
            with Client(url, key) as reader:
                hits = reader.search("u", f"Fact {i}: the spare key is under flowerpot {i}.", k=1)
                assert hits[0].record.id == f"f{i}", i


def test_a_store_on_a_network_filesystem_is_recognized_for_refusal(tmp_path: Path) -> None:
    """``serve --workers N`` refuses an embedded store there: SQLite's WAL needs one host."""
    assert network_filesystem(tmp_path) is None  # this machine's real mount table
    mounts = "/dev/sda1 / ext4 rw 0 0\nfiler:/export /mnt/team\\040share nfs4 rw 0 0\n"
    assert network_filesystem(Path("/mnt/team share/personamem"), mounts) == "nfs4"
    assert network_filesystem(Path("/mnt/team"), mounts) is None
