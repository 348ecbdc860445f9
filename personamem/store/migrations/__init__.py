"""The store's SQL schema, changed only by migrations (Alembic), which opening a store runs.

``versions/`` holds one file per change, oldest first, each with its ``revision``, its
``down_revision`` and an ``upgrade()``. ``0001`` is the baseline: every table as ``store/tables.py``
declares them, and the columns and indexes added by hand at open before there were migrations, so a
store made before them is brought to the baseline and one made since starts there. Later files change
what they name, written so that running on a store that already has it changes nothing (the baseline
creates tables from the current declarations).

Opening a store reads its version with one statement and runs Alembic only when the store is behind
:data:`HEAD` (a one-shot command on a current store imports no Alembic); under the store's file lock
on SQLite and a transaction-scoped advisory lock on PostgreSQL, so processes opening one store at
once upgrade it once. A store newer than this version of the library is refused rather than written.

To change the schema: change the table in ``store/tables.py``, add ``versions/NNNN_<what>.py`` whose
``down_revision`` is the previous head, and set :data:`HEAD` to its revision
(``tests/store/test_migrations.py`` checks that ``HEAD`` is the scripts' head).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, inspect, text

from personamem.errors import StoreError

__all__ = ["HEAD", "VERSION_TABLE", "upgrade", "version"]

HEAD = "0003"
"""The newest revision in ``versions/``: the schema this version of the library reads and writes."""
VERSION_TABLE = "alembic_version"
_PG_LOCK = 0x7065_7273_6D69_67  # pg_advisory_xact_lock key: "persmig"
_FOLDER = Path(__file__).resolve().parent


def version(engine: Engine) -> str | None:
    """The store's schema revision (None: no migration has run, a new store or one made before them)."""
    if not inspect(engine).has_table(VERSION_TABLE):
        return None
    with engine.connect() as connection:
        return connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


def upgrade(engine: Engine) -> None:
    """Bring the store's schema to :data:`HEAD`; nothing when it is there already.

    The caller holds the store's file lock on SQLite; PostgreSQL's upgrade takes an advisory lock
    in its transaction.

    Raises:
        StoreError: the store's schema is at a revision this version of the library does not know
            (written by a newer personamem).
    """
    found = version(engine)
    if found == HEAD:
        return
    from alembic import command
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(_FOLDER))
    known = {script.revision for script in ScriptDirectory.from_config(config).walk_revisions()}
    if found is not None and found not in known:
        raise StoreError(
            f"the store's schema is at revision {found!r}, newer than this personamem knows ({HEAD}): "
            "upgrade personamem to open it"
        )
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})
        config.attributes["connection"] = connection
        command.upgrade(config, HEAD)
