"""Alembic's environment for the store: migrations run on the connection :func:`upgrade` passes."""

from alembic import context
from sqlmodel import SQLModel

import personamem.store.tables  # noqa: F401  # the tables the baseline creates

context.configure(
    connection=context.config.attributes["connection"],
    target_metadata=SQLModel.metadata,
    render_as_batch=True,  # SQLite alters a table by copying it
)
with context.begin_transaction():
    context.run_migrations()
