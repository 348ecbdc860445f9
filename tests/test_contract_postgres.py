"""The contract on PostgreSQL (a throwaway cluster, ``personamem.testing.postgres``) + embedded Chroma.

The server binaries are the system's, or else the ``pgserver`` wheel's (in the ``dev`` extra), so
this runs in CI; it skips only where neither is installed, or psycopg is missing.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.testing import MemoryContract
from personamem.testing.postgres import PostgresCluster, find_postgres, postgres_cluster

pytest.importorskip("psycopg", reason='psycopg not installed: pip install "personamem[postgres]"')
BINARIES = find_postgres()
pytestmark = pytest.mark.skipif(
    BINARIES is None,
    reason="no PostgreSQL server binaries: neither initdb and pg_ctl on PATH nor the pgserver wheel "
    '(pip install "personamem[dev]")',
)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresCluster]:
    with postgres_cluster(BINARIES) as cluster:
        yield cluster


def test_the_cluster_runs_the_binaries_found(postgres: PostgresCluster) -> None:
    """The server answering is the one ``find_postgres`` chose (the system's first, else pgserver's)."""
    import psycopg

    with psycopg.connect(f"host={postgres.socket_dir} user=postgres dbname=postgres") as conn:
        row = conn.execute("SHOW server_version").fetchone()
    found = subprocess.run([postgres.binaries.tool("postgres"), "--version"], capture_output=True, text=True)
    assert row is not None and found.stdout.split()[2] == row[0].split()[0]  # "postgres (PostgreSQL) 16.2"


class TestPostgresMemory(MemoryContract):
    @pytest.fixture
    def mem(
        self, tmp_path: Path, postgres: PostgresCluster, encoder: SentenceEncoder
    ) -> Iterator[PersonaMem]:
        url = postgres.create_database()
        with PersonaMem.connect(url, chroma_path=tmp_path / "chroma", encoder=encoder) as memory:
            yield memory
