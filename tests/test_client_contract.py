"""The SDK's contract through ``personamem.client.Client`` against a real ``personamem serve``.

The server keeps records in SQLite and vectors in a real ``chroma run``, so this process can open
the same store to check it; each test gets a fresh tenant (a new API key), hence an empty memory.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from personamem import PersonaMem
from personamem.client import Client
from personamem.testing import MemoryContract
from personamem.testing.servers import chroma_server, personamem_server

pytestmark = [pytest.mark.server, pytest.mark.enable_socket]
_tenants = itertools.count()
_behind: list[PersonaMem] = []  # the served store, opened here too (for ``consistent``)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, PersonaMem]]:
    """A server over SQLite + a Chroma server, and the same store opened in this process."""
    root = tmp_path_factory.mktemp("served")
    with chroma_server(root / "chroma") as chroma_url:
        sql_url = f"sqlite:///{root / 'catalog.sqlite'}"
        with (
            personamem_server(root, "--sql-url", sql_url, "--chroma-url", chroma_url) as url,
            PersonaMem.connect(sql_url, chroma_url=chroma_url) as behind,
        ):
            _behind[:] = [behind]
            yield url, behind


class TestClientMemory(MemoryContract):
    @pytest.fixture
    def mem(self, served: tuple[str, PersonaMem]) -> Iterator[Client]:
        url, behind = served
        key, _ = behind.store.keys.create(f"contract-{next(_tenants)}", scope="admin")  # ttl, purge
        headers = {"Authorization": f"Bearer {key}"}
        with Client(url, key) as client, httpx.Client(base_url=url, headers=headers, timeout=60) as raw:
            self.raw = raw
            yield client

    def served(self, mem: object, method: str, path: str, **options: Any) -> Any:
        """The server's own JSON, sent by hand on the client's tenant."""
        answer = self.raw.request(method, path, **options)
        assert answer.is_success, answer.text
        return answer.json()

    def consistent(self, mem: object) -> bool:
        """The served store's check; the server indexes single adds behind, so allow it a moment."""
        deadline = time.monotonic() + 10
        while not (ok := _behind[0].store.check().ok) and time.monotonic() < deadline:
            time.sleep(0.1)
        return ok
