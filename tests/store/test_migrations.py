"""The schema is changed by migrations (``personamem/store/migrations``), which opening a store runs once."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory

from personamem import PersonaMem, SentenceEncoder
from personamem.errors import StoreError
from personamem.store import migrations


def _sql(folder: Path, *statements: str) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(folder / "personamem.sqlite")) as db, db:
        rows: list[tuple[object, ...]] = []
        for statement in statements:
            rows = db.execute(statement).fetchall()
        return rows


def _indexes(folder: Path) -> set[str]:
    return {str(name) for (name,) in _sql(folder, "SELECT name FROM sqlite_master WHERE type = 'index'")}


def test_head_is_the_newest_migration() -> None:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    assert ScriptDirectory.from_config(config).get_current_head() == migrations.HEAD


def test_a_store_made_before_migrations_is_brought_to_the_head_with_its_records(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        kept = mem.add("ana", "I keep bees on the roof.")
    _sql(
        tmp_path,
        "DROP INDEX ix_records_user_status",  # what the store lacked before migrations
        "ALTER TABLE interactions DROP COLUMN interleaving",
        "DROP TABLE alembic_version",
    )
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        assert mem.get("ana", kept.id) == kept
        assert [h.record.id for h in mem.search("ana", "bees", k=1)] == [kept.id]
    assert _sql(tmp_path, "SELECT version_num FROM alembic_version") == [(migrations.HEAD,)]
    assert "ix_records_user_status" in _indexes(tmp_path)
    assert "interleaving" in {row[1] for row in _sql(tmp_path, "PRAGMA table_info(interactions)")}


def test_a_store_at_the_baseline_gains_the_records_user_and_status_index(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add("ana", "I keep bees on the roof.")
    _sql(tmp_path, "DROP INDEX ix_records_user_status", "UPDATE alembic_version SET version_num = '0001'")
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        assert mem.count("ana") == 1
    assert "ix_records_user_status" in _indexes(tmp_path)
    assert _sql(tmp_path, "SELECT version_num FROM alembic_version") == [(migrations.HEAD,)]


def test_a_store_from_a_newer_personamem_is_refused_and_left_as_it_is(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add("ana", "I keep bees on the roof.")
    _sql(tmp_path, "UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(StoreError, match="revision '9999', newer than this personamem knows"):
        PersonaMem.open(tmp_path, encoder=encoder)
    assert _sql(tmp_path, "SELECT count(*) FROM records") == [(1,)]
    assert _sql(tmp_path, "SELECT version_num FROM alembic_version") == [("9999",)]
