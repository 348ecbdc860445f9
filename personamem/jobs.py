"""Bulk imports as background jobs: a tenant's jobs (``mem.jobs``) and how an upload is read.

``POST /v1/jobs/import`` and :meth:`Jobs.submit_import` take records as JSON Lines (one record per
line, what ``personamem ingest`` reads) and answer at once with a job; a runner in a server process
(``job_runner.py``), or :meth:`Jobs.run_pending` in this one, stores them a batch at a time and
counts what happened. The upload is validated whole before the job exists: a line that is not
UTF-8, not JSON, not an object or not a valid record refuses the upload with its line number, and
nothing of it is kept, as ``ingest`` refuses a file. Per-line errors in a job are for lines that
fail when they are stored. A big file goes up in chunks (:meth:`Jobs.append`), each under the
server's body limit, and the job is started once all of it is there, so the whole file is validated
before any record is stored.

The lines wait in SQL (``job_chunks``, runs of one user's lines) until their step commits, then are
deleted; a job that ends deletes what is left, and a ``forget`` of a user erases that user's waiting
lines with the user's other rows (they count as ``forgotten`` in the job).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from personamem.errors import IngestError, InvalidInputError, InvalidRecordError
from personamem.job_runner import JobRunner
from personamem.records import Record, parse_item, parse_record
from personamem.store import Store
from personamem.store.jobs import Chunk, JobQueue, chunked
from personamem.store.tables import JobRow

__all__ = ["IMPORT", "Job", "JobError", "Jobs", "Upload", "read_upload"]

IMPORT = "import"
UPLOAD = "the upload"  # how a bad line's error names the body (a file has its own name)
RECORDS = "the records"  # how a bad item's error names records and dicts given in the SDK


class JobError(BaseModel):
    """A line that could not be stored: its line number in the uploaded file, and why."""

    line: int
    message: str


class Job(BaseModel):
    """A job as ``GET /v1/jobs/{job_id}`` and ``mem.jobs.get`` give it: state, progress, counts, errors.

    ``progress`` is ``processed / lines`` (1.0 once done); ``next_line`` is the resume point in the
    file: every line before it is committed. ``stored`` + ``skipped`` + ``failed`` + ``forgotten``
    is ``processed``. After a runner was killed, the batch it was storing is stored again and its
    records count as ``skipped`` (they were in already).
    """

    job_id: str
    kind: str
    state: str
    lines: int
    processed: int
    progress: float
    next_line: int
    last_line: int
    stored: int
    skipped: int
    failed: int
    forgotten: int
    errors: list[JobError]
    message: str | None
    created_at: str
    started_at: str | None
    finished_at: str | None

    @classmethod
    def of(cls, row: JobRow) -> Job:
        """The listing of a stored job."""
        done = row.lines if row.state == "done" else row.processed
        return cls(
            job_id=row.job_id,
            kind=row.kind,
            state=row.state,
            lines=row.lines,
            processed=row.processed,
            progress=1.0 if not row.lines else round(done / row.lines, 4),
            next_line=row.next_line,
            last_line=row.last_line,
            stored=row.stored,
            skipped=row.skipped,
            failed=row.failed,
            forgotten=row.forgotten,
            errors=[JobError(**e) for e in row.errors],
            message=row.message,
            created_at=_iso(row.created_at),
            started_at=None if row.started_at is None else _iso(row.started_at),
            finished_at=None if row.finished_at is None else _iso(row.finished_at),
        )

    @property
    def ended(self) -> bool:
        """Whether the job is done, failed or cancelled (it changes no more)."""
        return self.state in ("done", "failed", "cancelled")


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


@dataclass(frozen=True)
class Upload:
    """An upload read and validated: its lines as chunks for ``job_chunks``, and the last line number."""

    chunks: list[Chunk]
    last_line: int


def read_upload(
    body: bytes, store: Store, *, first_line: int = 1, user_id: str | None = None, source: str = UPLOAD
) -> Upload:
    """Validate JSON Lines ``body`` (its first line is ``first_line`` of the file) as records of ``store``.

    Blank lines are skipped but counted, so line numbers are the file's. ``user_id`` owns the
    lines that name no user (one naming another user is an error, as in ``ingest --user``).

    Raises:
        IngestError: a line that is not UTF-8, not JSON, not an object or not a valid record, naming
            the line (``.line``); nothing of the upload is kept.
    """
    if first_line < 1:
        raise InvalidInputError(f"from_line must be 1 or more, got {first_line}")
    pieces = body.split(b"\n")
    if pieces and pieces[-1] == b"":
        pieces.pop()  # the newline that ends the last line starts no line of its own
    lines = []
    for number, raw in enumerate(pieces, start=first_line):
        record = _record(raw, number, user_id, source)
        if record is not None:
            lines.append(_line(record, number, store, source))
    return Upload(chunked(lines), last_line=first_line + len(pieces) - 1)


def records_upload(
    items: Iterable[Record | Mapping[str, Any]], store: Store, *, user_id: str | None = None
) -> Upload:
    """Records and dicts as an upload's lines, validated as :func:`read_upload` validates a file's.

    A :class:`Record` is valid already: it goes to its chunk as it is, with no JSON text made and
    read back (a fifth of a bulk submit's time went to that round trip).

    Raises:
        IngestError: a bad item, naming its line (its position, from 1); no job is made.
    """
    lines = []
    for number, item in enumerate(items, start=1):
        try:
            record = parse_item(item, user_id=user_id)
        except InvalidRecordError as exc:
            raise IngestError(str(exc), path=RECORDS, line=number) from None
        lines.append(_line(record, number, store, RECORDS))
    return Upload(chunked(lines), last_line=len(lines))


def _line(record: Record, number: int, store: Store, source: str) -> tuple[int, str, Record]:
    """A valid record as line ``number`` of an upload, under its user's store key (the scope's check)."""
    try:
        key = store.tenancy.key(record.user_id)
    except InvalidInputError as exc:
        raise IngestError(str(exc), path=source, line=number) from None
    return number, key, record


def _record(raw: bytes, number: int, user_id: str | None, source: str) -> Record | None:
    """The record of one line (None: a blank line); the messages are ``ingest``'s."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        message = f"not valid UTF-8 (byte {exc.start}); re-encode the file as UTF-8"
        raise IngestError(message, path=source, line=number) from None
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise IngestError(
            f"invalid JSON: {exc.msg} at column {exc.colno}", path=source, line=number
        ) from None
    if not isinstance(data, dict):
        raise IngestError(f"expected a JSON object, got {type(data).__name__}", path=source, line=number)
    try:
        return parse_record(data, default_user=user_id)
    except InvalidRecordError as exc:
        raise IngestError(str(exc), path=source, line=number) from None


class Jobs:
    """One tenant's background jobs (``mem.jobs``; ``mem.tenant(name).jobs``).

    The whole store's view (no tenant) has the jobs of the store's own users; a tenant's view those
    of its tenant, whose records go to that tenant's users only. Another tenant's job id is unknown
    here, as an id that never existed.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._tenant = store.tenant or ""
        self._queue = JobQueue(store.catalog)

    def submit_import(
        self,
        source: str | Path | bytes | Iterable[Record | Mapping[str, Any]],
        *,
        user_id: str | None = None,
        start: bool = True,
    ) -> Job:
        """A job storing ``source``'s records: a JSONL file's path, JSONL bytes, or records and dicts.

        Validated whole first (see the module). ``start=False`` leaves the job ``open`` for more
        lines (:meth:`append`) until :meth:`start`. Returns the job, ``queued`` or ``open``.

        Raises:
            IngestError: a bad line, naming it (and the file, for a path); no job is made.
        """
        upload = self._read(source, user_id)
        return Job.of(self._queue.create(self._tenant, IMPORT, upload.chunks, upload.last_line, start=start))

    def _read(
        self, source: str | Path | bytes | Iterable[Record | Mapping[str, Any]], user_id: str | None
    ) -> Upload:
        if isinstance(source, bytes):
            return read_upload(source, self._store, user_id=user_id)
        if isinstance(source, str | Path):
            path = Path(source).expanduser()
            try:
                body = path.read_bytes()
            except OSError as exc:
                raise IngestError(f"cannot read file: {exc.strerror or exc}", path=str(path)) from None
            return read_upload(body, self._store, user_id=user_id, source=str(path))
        return records_upload(source, self._store, user_id=user_id)

    def append(self, job_id: str, body: bytes, *, from_line: int, user_id: str | None = None) -> Job:
        """Add lines to an open job: ``body`` is JSONL whose first line is line ``from_line`` of the file.

        The chunk must start right after the job's ``last_line``; one sent again (a retry) is taken
        once.

        Raises:
            IngestError: a bad line, naming it; nothing of the chunk is kept.
            InvalidInputError: no such job of this tenant, the job is not open, or the chunk
                does not follow the lines the job has (the message says which line it expects).
        """
        upload = read_upload(body, self._store, first_line=from_line, user_id=user_id)
        try:
            row = self._queue.append(self._tenant, job_id, upload.chunks, from_line, upload.last_line)
        except (LookupError, ValueError) as exc:
            raise InvalidInputError(str(exc)) from None
        return Job.of(row)

    def start(self, job_id: str) -> Job:
        """Queue an open job (a job already started is returned as it is).

        Raises:
            InvalidInputError: this tenant has no job ``job_id``.
        """
        return self._found(job_id, self._queue.start)

    def get(self, job_id: str) -> Job:
        """The job: state, progress, counts, per-line errors, times.

        Raises:
            InvalidInputError: this tenant has no job ``job_id``.
        """
        return self._found(job_id, self._queue.get)

    def cancel(self, job_id: str) -> Job:
        """Stop a job that has not ended: its waiting lines are deleted; records stored stay.

        A running job stops after the batch in progress. A job that ended is returned as it is.

        Raises:
            InvalidInputError: this tenant has no job ``job_id``.
        """
        return self._found(job_id, self._queue.cancel)

    def run_pending(self) -> int:
        """Run this tenant's queued jobs here, to their ends; how many were run.

        For a store with no server running its jobs (the embedded store, tests). A job another
        process holds is left to it until its lease runs out.
        """
        return JobRunner(self._queue, lambda _: self._store, tenant=self._tenant).run_pending()

    def _found(self, job_id: str, step: Callable[[str, str], JobRow | None]) -> Job:
        """The job as ``step`` (a :class:`JobQueue` method) leaves it.

        The queue says a job is unknown by None (a read) or LookupError (a change); both are the
        caller's mistake here, one InvalidInputError (the server's 404).
        """
        try:
            row = step(self._tenant, job_id)
        except LookupError as exc:
            raise InvalidInputError(str(exc)) from None
        if row is None:
            raise InvalidInputError(f"this tenant has no job {job_id!r}")
        return Job.of(row)

    # last: below it, ``list`` in an annotation would name this method, not the builtin
    def list(self, limit: int = 50) -> Sequence[Job]:
        """This tenant's jobs, newest first."""
        return [Job.of(row) for row in self._queue.recent(self._tenant, limit)]
