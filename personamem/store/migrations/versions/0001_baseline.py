"""The baseline: every table, and what was added by hand at open before there were migrations.

On a new store it creates the tables as ``store/tables.py`` declares them; on a store made before
migrations it adds the columns (``ADDED_COLUMNS``) and the records' indexes it lacks.
"""

from alembic import op
from sqlalchemy import inspect, text
from sqlmodel import SQLModel

from personamem.store.tables import ADDED_COLUMNS

revision = "0001"
down_revision = None


def upgrade() -> None:
    """Create the tables, then what a store made before migrations lacks."""
    bind = op.get_bind()
    SQLModel.metadata.create_all(bind)
    tables = SQLModel.metadata.tables
    for table, column in ADDED_COLUMNS:
        if column not in {c["name"] for c in inspect(bind).get_columns(table)}:
            kind = tables[table].c[column].type.compile(dialect=bind.dialect)
            default = " NOT NULL DEFAULT false" if column == "bounded" else ""
            bind.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {kind}{default}"))
    for index in tables["records"].indexes:  # indexes on the columns just added
        index.create(bind, checkfirst=True)
