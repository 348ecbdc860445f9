"""The contract on PostgreSQL (a throwaway cluster on a Unix socket) + embedded Chroma.

Skipped where the PostgreSQL server binaries or psycopg are missing.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.testing import MemoryContract

psycopg = pytest.importorskip("psycopg", reason='psycopg not installed: pip install "personamem[postgres]"')
INITDB, PG_CTL = shutil.which("initdb"), shutil.which("pg_ctl")
pytestmark = pytest.mark.skipif(
    not (INITDB and PG_CTL), reason="PostgreSQL server binaries (initdb, pg_ctl) not on PATH"
)
_databases = itertools.count()


@pytest.fixture(scope="module")
def postgres_socket() -> Iterator[str]:
    """Start a cluster listening only on a Unix socket in a fresh folder; yield that folder."""
    base = Path(tempfile.mkdtemp(prefix="personamem-pg-"))
    as_postgres: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        shutil.chown(base, "nobody")
        as_postgres = ["runuser", "-u", "nobody", "--"]
    data = base / "data"
    try:
        subprocess.run(
            [*as_postgres, INITDB, "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"],
            check=True,
            capture_output=True,
        )
        options = f"-k {base} -c listen_addresses='' -c fsync=off"
        subprocess.run(
            [*as_postgres, PG_CTL, "-D", str(data), "-o", options, "-l", str(base / "log"), "-w", "start"],
            check=True,
            capture_output=True,
        )
        yield str(base)
        subprocess.run(
            [*as_postgres, PG_CTL, "-D", str(data), "-m", "immediate", "stop"], capture_output=True
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


class TestPostgresMemory(MemoryContract):
    @pytest.fixture
    def mem(self, tmp_path: Path, postgres_socket: str, encoder: SentenceEncoder) -> Iterator[PersonaMem]:
        name = f"t{next(_databases)}"
        with psycopg.connect(
            f"host={postgres_socket} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url = f"postgresql+psycopg://postgres@/{name}?host={postgres_socket}"
        with PersonaMem.connect(url, chroma_path=tmp_path / "chroma", encoder=encoder) as memory:
            yield memory
