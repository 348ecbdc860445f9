"""``personamem import FILE --server URL``: a file sent to a server, and an import job followed."""

from __future__ import annotations

import json
from pathlib import Path

from personamem.console import err, out, progress_bar
from personamem.errors import IngestError
from personamem.jobs import Job

__all__ = ["send_export", "send_records", "user_export"]

_ERRORS_SHOWN = 10  # per-line errors printed after a job (the job keeps up to 100)


def user_export(path: Path) -> bool:
    """Whether ``path`` is a user's export (its first line is the export's header), not records."""
    try:
        with path.open("rb") as handle:
            for raw in handle:
                if raw.strip():
                    header = json.loads(raw)
                    return isinstance(header, dict) and "personamem_export" in header
    except FileNotFoundError:
        raise IngestError("file not found", path=str(path)) from None
    except (OSError, ValueError):
        return False  # not readable as an export: the job's validation says what is wrong
    return False


def send_export(path: Path, server: str, key: str, user: str | None) -> None:
    """A user's export, stored by the server in one request (``POST /v1/import``)."""
    from personamem.client import Client

    with Client(server, key) as remote:
        added = remote.import_user(path, user_id=user)
    out.print(f"imported {added.records} new record(s), {added.interactions} new interaction(s) from {path}")


def send_records(path: Path, server: str, key: str, user: str | None, *, follow: bool) -> bool:
    """A records JSONL sent as one import job (and followed); whether all went well."""
    from personamem.job_client import JobClient

    with JobClient(server, key) as jobs:
        size = path.stat().st_size
        with progress_bar() as bar:
            task = bar.add_task(f"uploading {path.name} (bytes)", total=size)
            job = jobs.submit(path, user_id=user, sent=lambda n: bar.advance(task, n))
        where = f"{server.rstrip('/')}/v1/jobs/{job.job_id}"
        out.print(
            f"job {job.job_id}: {job.state}, {job.lines} line(s); its progress: GET {where}", soft_wrap=True
        )
        if not follow:
            return True
        with progress_bar() as bar:
            task = bar.add_task(f"importing {path.name}", total=job.lines)
            ended = jobs.follow(job.job_id, lambda now: bar.update(task, completed=now.processed))
            bar.update(task, completed=ended.lines if ended.state == "done" else ended.processed)
    _report(ended)
    return ended.state == "done" and not ended.failed


def _report(job: Job) -> None:
    """What the job came to: its counts, then the first per-line errors (on stderr)."""
    out.print(
        f"job {job.job_id}: {job.state}: {job.stored} stored, {job.skipped} already stored, "
        f"{job.failed} failed, {job.forgotten} forgotten, of {job.lines} line(s)",
        soft_wrap=True,
    )
    if job.message and job.state != "done":
        err.print(f"[red]{job.state}:[/red] {job.message}", highlight=False, soft_wrap=True)
    for error in job.errors[:_ERRORS_SHOWN]:
        err.print(f"line {error.line}: {error.message}", highlight=False, markup=False, soft_wrap=True)
    if job.failed > _ERRORS_SHOWN:
        err.print(f"... {job.failed - _ERRORS_SHOWN} more failed line(s) (GET /v1/jobs/{job.job_id})")
