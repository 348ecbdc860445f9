"""The contract through ``PersonaMem.connect`` against a real Chroma server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.testing import MemoryContract
from personamem.testing.servers import chroma_server

pytestmark = [pytest.mark.server, pytest.mark.enable_socket]


@pytest.fixture(scope="module")
def chroma_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with chroma_server(tmp_path_factory.mktemp("chroma-server")) as url:
        yield url


class TestServerMemory(MemoryContract):
    @pytest.fixture
    def mem(self, tmp_path: Path, chroma_url: str, encoder: SentenceEncoder) -> Iterator[PersonaMem]:
        with PersonaMem.connect(
            f"sqlite:///{tmp_path / 'catalog.sqlite'}", chroma_url=chroma_url, encoder=encoder
        ) as m:
            yield m
            for user in m.users():  # the server outlives the test: leave it empty for the next one
                m.forget(user)


def test_connect_needs_one_vector_location_except_on_postgres(tmp_path: Path) -> None:
    """Only PostgreSQL keeps vectors itself (pgvector, tests/store/test_pgvector.py); others need Chroma."""
    with pytest.raises(ValueError, match="only PostgreSQL keeps the vectors itself"):
        PersonaMem.connect(f"sqlite:///{tmp_path / 'x.sqlite'}")
    with pytest.raises(ValueError, match="not both"):
        PersonaMem.connect(
            f"sqlite:///{tmp_path / 'x.sqlite'}", chroma_url="http://127.0.0.1:1", chroma_path=tmp_path / "c"
        )
