"""A job's waiting lines in chunks: ``job_chunks`` (runs of one user's lines) replaces ``job_lines``.

A row a line cost an import job of 100,000 lines a tenth of its throughput against ``add_many``
(100,000 rows written, read and deleted); a chunk holds up to 500 lines. The lines of a job waiting
or running when the store is upgraded are kept, each as a chunk of one.
"""

from alembic import op
from sqlalchemy import inspect, text

from personamem.store.tables import JobChunkRow

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    """Create ``job_chunks`` (a new store has it from the baseline), move any ``job_lines`` into it."""
    bind = op.get_bind()
    JobChunkRow.__table__.create(bind, checkfirst=True)  # type: ignore[attr-defined]
    if inspect(bind).has_table("job_lines"):
        bind.execute(
            text(
                "INSERT INTO job_chunks (job_id, line, last, user_id, records) "
                "SELECT job_id, line, line, user_id, '[' || record || ']' FROM job_lines"
            )
        )
        op.drop_table("job_lines")
