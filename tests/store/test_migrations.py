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


def test_a_job_waiting_in_a_store_at_0002_keeps_its_lines_as_chunks_and_runs(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        job = mem.jobs.submit_import(b'{"user_id": "ana", "text": "I keep bees."}\n', start=False)
    bees, honey = '{"user_id":"ana","text":"I keep bees."}', '{"user_id":"ana","text":"I sell honey."}'
    _sql(  # the job as 0002 kept it: a row a line (line 2 was blank)
        tmp_path,
        "DROP TABLE job_chunks",
        "CREATE TABLE job_lines (job_id VARCHAR NOT NULL, line INTEGER NOT NULL, user_id VARCHAR NOT NULL, "
        "record VARCHAR NOT NULL, PRIMARY KEY (job_id, line))",
        f"INSERT INTO job_lines VALUES ('{job.job_id}', 1, 'ana', '{bees}')",
        f"INSERT INTO job_lines VALUES ('{job.job_id}', 3, 'ana', '{honey}')",
        f"UPDATE jobs SET lines = 2, last_line = 3, state = 'queued' WHERE job_id = '{job.job_id}'",
        "UPDATE alembic_version SET version_num = '0002'",
    )
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        assert mem.jobs.run_pending() == 1
        done = mem.jobs.get(job.job_id)
        assert (done.state, done.stored, done.processed) == ("done", 2, 2)
        assert sorted(r.text for r in mem.records("ana")) == ["I keep bees.", "I sell honey."]
    tables = {name for (name,) in _sql(tmp_path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "job_chunks" in tables and "job_lines" not in tables
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
