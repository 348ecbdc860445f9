"""The interaction log's writer across a database outage: rows wait for it, up to a limit, then warn.

The write is a plain function that refuses like a restarting database for a while: what is tested is
the writer's control flow (the real PostgreSQL restart is ``tests/server/test_postgres_restart.py``).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from personamem.errors import PersonaMemWarning, StoreUnavailableError
from personamem.store.interaction_writer import InteractionWriter


class Restarting:
    """A database that refuses every write for ``down_s`` seconds, then keeps what it is given."""

    def __init__(self, down_s: float) -> None:
        self.up_at, self.rows, self.refused = time.monotonic() + down_s, list[dict[str, Any]](), 0

    def write(self, rows: list[dict[str, Any]]) -> int:
        if time.monotonic() < self.up_at:
            self.refused += 1
            raise StoreUnavailableError("the SQL database is unavailable: connection refused")
        self.rows += rows
        return len(rows)


def test_rows_queued_during_an_outage_are_written_once_the_database_is_back() -> None:
    database = Restarting(down_s=1.0)
    writer = InteractionWriter(database.write, outage_s=10)
    for i in range(5):
        writer.submit({"id": f"i{i}"})
    writer.flush()  # no warning: nothing was lost
    assert [row["id"] for row in database.rows] == [f"i{i}" for i in range(5)]
    assert database.refused >= 2  # it was tried, backed off and tried again
    writer.close()


def test_an_outage_longer_than_the_limit_gives_the_rows_up_with_a_warning() -> None:
    database = Restarting(down_s=60)
    writer = InteractionWriter(database.write, outage_s=0.5)
    writer.submit({"id": "i0"})
    with pytest.warns(PersonaMemWarning, match=r"logged calls not kept: 1 \(the SQL database is unavailable"):
        writer.flush()
    assert database.rows == []
    writer.close()
