"""Background jobs in SQL: their input lines, their progress, and who runs them (leased claims).

A job (``jobs``) and its input (``job_chunks``, runs of up to :data:`CHUNK` consecutive uploaded
lines of one user) are rows of the store's own database, so any server process, on any machine,
can run any job, and a restart loses nothing. A runner claims one job with a lease
(:meth:`JobQueue.claim`): in one write transaction it picks the oldest job that is queued, or
running under a lease that ran out, and marks it as its own. On SQLite write transactions are
serialized, so no two runners pick one job; on PostgreSQL the pick is ``FOR UPDATE SKIP LOCKED``,
so runners racing for work take different jobs without waiting.

The runner commits the job's lines a step (a few batches of whole chunks) at a time. After a step's
records are stored it calls :meth:`JobQueue.advance`, which in one transaction deletes the step's
chunks, moves ``next_line`` past them, adds the counts and renews the lease, on condition that the
job is still running under this claim. A runner killed between storing and advancing leaves
``next_line`` where it was: the next runner stores those lines again, which changes nothing (a
record with the same id and content is skipped), so nothing is stored twice. Lines leave the
database as they commit, and all that are left go when the job ends (done, failed or cancelled):
only counts and errors remain.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError
from sqlalchemy import and_, delete, func, or_, update
from sqlmodel import Session, col, select

from personamem.records import Record
from personamem.store.catalog_users import ensure_user
from personamem.store.sql import SqlCatalog
from personamem.store.tables import JobChunkRow, JobRow, JobState

__all__ = ["CHUNK", "MAX_ERRORS", "Batch", "Chunk", "Claim", "JobQueue", "chunked"]

CHUNK = 500
"""Lines a ``job_chunks`` row holds at most (a run of one user's consecutive lines)."""
MAX_ERRORS = 100
"""Per-line errors a job keeps (the first ones); ``failed`` counts them all."""
_MAX_MESSAGE = 300  # characters of an error kept: enough to say what failed, never a whole record
_ENDS = (JobState.DONE.value, JobState.FAILED.value, JobState.CANCELLED.value)
_OPEN, _QUEUED, _RUNNING = JobState.OPEN.value, JobState.QUEUED.value, JobState.RUNNING.value


_RECORDS = TypeAdapter(list[Record])
"""A chunk's records, dumped and validated as one array (5 µs a record against 9 one at a time)."""


@dataclass(frozen=True)
class Chunk:
    """Uploaded lines ``line``..``last`` of the file, all records of one user (its store key).

    ``records`` is the records as a JSON array, one per line in order: written, read and parsed
    whole, as a chunk is what the queue moves.
    """

    line: int
    last: int
    user_key: str
    records: str

    @classmethod
    def of(cls, line: int, user_key: str, records: Sequence[Record]) -> Chunk:
        """Consecutive lines from ``line`` on, one record each, of the user ``user_key``."""
        return cls(line, line + len(records) - 1, user_key, _RECORDS.dump_json(list(records)).decode())

    @property
    def size(self) -> int:
        """How many lines (records) it holds."""
        return self.last - self.line + 1

    def read(self) -> tuple[dict[int, Record], dict[int, str]]:
        """Its records by line number, and the lines this version cannot read as a record (and why).

        Validated at upload, so a line fails here only where this version reads a record
        differently: then the chunk is read a line at a time, so one line is one error.
        """
        numbers = range(self.line, self.last + 1)
        try:
            return dict(zip(numbers, _RECORDS.validate_json(self.records), strict=True)), {}
        except ValidationError:
            records, errors = {}, {}
            for number, item in zip(numbers, json.loads(self.records), strict=True):
                try:
                    records[number] = Record.model_validate(item)
                except ValidationError as exc:
                    errors[number] = f"not a valid record: {exc.errors()[0]['msg']}"
            return records, errors


@dataclass(frozen=True)
class Claim:
    """A job a runner holds: what it needs to run it and to report back under its claim."""

    job_id: str
    tenant: str
    token: str
    next_line: int
    attempts: int


@dataclass
class Batch:
    """What storing a runner's step (whole chunks, in order) came to, for :meth:`JobQueue.advance`."""

    chunks: Sequence[Chunk]
    written: set[int] = field(default_factory=set)  # lines whose records the store took
    changed: int = 0  # of those, records new or changed (the rest were stored as they are)
    errors: dict[int, str] = field(default_factory=dict)  # line -> why it could not be stored
    forgotten: set[int] = field(default_factory=set)  # lines whose user was being forgotten

    @property
    def first(self) -> int:
        """The first line number stored."""
        return self.chunks[0].line

    @property
    def last(self) -> int:
        """The last line number stored."""
        return self.chunks[-1].last

    @property
    def size(self) -> int:
        """How many lines it holds."""
        return sum(chunk.size for chunk in self.chunks)


def chunked(lines: Sequence[tuple[int, str, Record]]) -> list[Chunk]:
    """Uploaded lines (number, user key, record), in order, as the queue's chunks.

    A chunk is a run of one user's consecutive lines, up to :data:`CHUNK` of them; a blank line
    (skipped, but counted in the numbers) ends a run.
    """
    chunks: list[Chunk] = []
    start = 0
    for end in range(1, len(lines) + 1):
        if (
            end == len(lines)
            or end - start == CHUNK
            or lines[end][1] != lines[start][1]
            or lines[end][0] != lines[end - 1][0] + 1
        ):
            chunks.append(Chunk.of(lines[start][0], lines[start][1], [r for _, _, r in lines[start:end]]))
            start = end
    return chunks


def worker_name() -> str:
    """This process as a claim names it (host and pid): for the operator reading a stuck job."""
    return f"{socket.gethostname()}:{os.getpid()}"


class JobQueue:
    """The ``jobs`` and ``job_chunks`` tables: every tenant's jobs, for runners and for one tenant's view."""

    def __init__(self, catalog: SqlCatalog) -> None:
        self._catalog = catalog

    # -- a tenant's jobs ------------------------------------------------------------------------

    def create(
        self, tenant: str, kind: str, chunks: Sequence[Chunk], last_line: int, *, start: bool
    ) -> JobRow:
        """A new job holding ``chunks``, queued (``start``) or open for more lines."""
        now = time.time()
        job = JobRow(
            job_id=f"job_{uuid.uuid4().hex[:20]}",
            tenant=tenant,
            kind=kind,
            state=_QUEUED if start else _OPEN,
            lines=sum(chunk.size for chunk in chunks),
            last_line=last_line,
            created_at=now,
            updated_at=now,
        )
        with self._catalog.session(write=True) as s:
            s.add(job)
            s.flush()
            _insert(s, job.job_id, chunks)
        return job

    def append(
        self, tenant: str, job_id: str, chunks: Sequence[Chunk], first_line: int, last_line: int
    ) -> JobRow:
        """Add the lines ``first_line``..``last_line`` of an open job's file; the job as it now is.

        A chunk sent twice (a retry whose first answer was lost) is taken once: a chunk that ends
        at or before the job's ``last_line`` changes nothing.

        Raises:
            LookupError: the tenant has no such job.
            ValueError: the job is not open, or the chunk does not start right after ``last_line``.
        """
        with self._catalog.session(write=True) as s:
            job = _locked(s, tenant, job_id)
            if job.state != _OPEN:
                raise ValueError(f"job {job_id} is {job.state}: lines can be added to an open job only")
            if last_line <= job.last_line:
                return job  # sent before: already here
            if first_line != job.last_line + 1:
                raise ValueError(
                    f"job {job_id} has lines up to {job.last_line}: the next chunk starts at line "
                    f"{job.last_line + 1}, not {first_line}"
                )
            _insert(s, job_id, chunks)
            job.lines += sum(chunk.size for chunk in chunks)
            job.last_line, job.updated_at = last_line, time.time()
            s.add(job)
            return job

    def start(self, tenant: str, job_id: str) -> JobRow:
        """Queue an open job for a runner (a job past ``open`` is left as it is); the job.

        Raises:
            LookupError: the tenant has no such job.
        """
        with self._catalog.session(write=True) as s:
            job = _locked(s, tenant, job_id)
            if job.state == _OPEN:
                job.state, job.updated_at = _QUEUED, time.time()
                s.add(job)
            return job

    def cancel(self, tenant: str, job_id: str, message: str = "cancelled") -> JobRow:
        """End a job that has not ended (its lines are deleted; records stored stay); the job.

        A runner in the middle of a batch finds the job cancelled when it reports the batch, and
        stops. A job that has ended is left as it is.

        Raises:
            LookupError: the tenant has no such job.
        """
        with self._catalog.session(write=True) as s:
            job = _locked(s, tenant, job_id)
            if job.state not in _ENDS:
                _end(s, job, JobState.CANCELLED, message)
            return job

    def get(self, tenant: str, job_id: str) -> JobRow | None:
        """The tenant's job ``job_id`` (None: no such job, or another tenant's)."""
        with self._catalog.session() as s:
            job = s.get(JobRow, job_id)
            return job if job is not None and job.tenant == tenant else None

    def recent(self, tenant: str, limit: int = 50) -> list[JobRow]:
        """The tenant's jobs, newest first."""
        with self._catalog.session() as s:
            query = select(JobRow).where(col(JobRow.tenant) == tenant)
            return list(s.exec(query.order_by(col(JobRow.created_at).desc()).limit(limit)))

    def waiting_lines(self, job_id: str | None = None) -> int:
        """Lines not yet committed (of one job, or of all): for tests and the operator's curiosity."""
        with self._catalog.session() as s:
            query = select(func.coalesce(func.sum(col(JobChunkRow.last) - col(JobChunkRow.line) + 1), 0))
            if job_id is not None:
                query = query.where(col(JobChunkRow.job_id) == job_id)
            return int(s.exec(query).one())

    # -- runners --------------------------------------------------------------------------------

    @staticmethod
    def _claimable(now: float, tenant: str | None) -> list[Any]:
        due = or_(
            col(JobRow.state) == _QUEUED,
            and_(col(JobRow.state) == _RUNNING, col(JobRow.claimed_until) <= now),
        )
        return [due] if tenant is None else [due, col(JobRow.tenant) == tenant]

    def claim(self, lease_s: float, tenant: str | None = None) -> Claim | None:
        """The oldest job to run (of ``tenant``, or any), leased for ``lease_s`` seconds; None: none.

        A read looks first, so an idle queue costs no write transaction. The claim counts an
        attempt; a committed batch sets the count back to zero.
        """
        now = time.time()
        with self._catalog.session() as s:
            if s.exec(select(JobRow.job_id).where(*self._claimable(now, tenant)).limit(1)).first() is None:
                return None
        token = f"{worker_name()}:{uuid.uuid4().hex[:8]}"
        with self._catalog.session(write=True) as s:
            pick = select(JobRow).where(*self._claimable(now, tenant)).order_by(col(JobRow.created_at))
            job = s.exec(pick.limit(1).with_for_update(skip_locked=True)).first()
            if job is None:
                return None
            job.state, job.claimed_by, job.claimed_until = _RUNNING, token, now + lease_s
            job.attempts += 1
            job.started_at = job.started_at or now
            job.updated_at = now
            s.add(job)
            return Claim(job.job_id, job.tenant, token, job.next_line, job.attempts)

    def batch(self, claim: Claim, after: int, limit: int) -> list[Chunk]:
        """The job's next chunks from line ``after`` on, in order (none: every line is committed).

        Those starting within ``limit`` lines of the first: whole chunks, so a step holds up to
        ``limit + CHUNK - 1`` lines, fewer where lines were blank or their users forgotten.
        """
        job = col(JobChunkRow.job_id) == claim.job_id
        with self._catalog.session() as s:
            after_line = col(JobChunkRow.line) >= after
            first = s.exec(select(func.min(JobChunkRow.line)).where(job, after_line)).one()
            if first is None:
                return []
            rows = s.exec(
                select(JobChunkRow.line, JobChunkRow.last, JobChunkRow.user_id, JobChunkRow.records)
                .where(job, col(JobChunkRow.line) >= first, col(JobChunkRow.line) < first + limit)
                .order_by(col(JobChunkRow.line))
            ).all()
        return [Chunk(*row) for row in rows]

    def advance(self, claim: Claim, done: Batch, lease_s: float) -> tuple[bool, list[Chunk]]:
        """Commit a stored step: its chunks go, ``next_line`` moves past it, counts add up, lease renewed.

        Returns whether the job is still this claim's to run, and the step's chunks that were gone
        before this commit: their users were forgotten while the step was being stored, so the
        caller forgets them again (the store may have written them afresh). Nothing changes when
        the job was cancelled or taken over meanwhile.
        """
        with self._catalog.session(write=True) as s:
            job = s.exec(select(JobRow).where(col(JobRow.job_id) == claim.job_id).with_for_update()).first()
            if job is None or job.state != _RUNNING or job.claimed_by != claim.token:
                return False, []
            in_step = (
                col(JobChunkRow.job_id) == claim.job_id,
                col(JobChunkRow.line) >= done.first,
                col(JobChunkRow.line) <= done.last,
            )  # a range, not an IN list: any step binds three values
            present = set(
                s.execute(delete(JobChunkRow).where(*in_step).returning(col(JobChunkRow.line))).scalars()
            )
            gone = [chunk for chunk in done.chunks if chunk.line not in present]
            _count(job, done, {n for chunk in gone for n in range(chunk.line, chunk.last + 1)})
            job.attempts, job.claimed_until, job.updated_at = 0, time.time() + lease_s, time.time()
            s.add(job)
            return True, gone

    def finish(self, claim: Claim) -> bool:
        """End a job whose lines are all committed: done; False if it was not this claim's any more.

        Lines uploaded but never read were erased by forgets of their users: they count as forgotten.
        """
        with self._catalog.session(write=True) as s:
            job = s.exec(select(JobRow).where(col(JobRow.job_id) == claim.job_id).with_for_update()).first()
            if job is None or job.state != _RUNNING or job.claimed_by != claim.token:
                return False
            job.forgotten += max(job.lines - job.processed, 0)
            job.processed, job.message = job.lines, None  # a batch that failed before is past
            _end(s, job, JobState.DONE, None)
            return True

    def release(self, claim: Claim, retry_at: float, error: str | None = None) -> None:
        """Give a job back unfinished, to be claimed again from ``retry_at``.

        ``error`` None: a runner that stops (its server shuts down) hands the job on at once, and
        its claim is not counted as an attempt. Otherwise a batch failed and is tried again later.
        """
        values: dict[str, Any] = {"claimed_by": None, "claimed_until": retry_at, "updated_at": time.time()}
        if error is None:
            values["attempts"] = col(JobRow.attempts) - 1
        else:
            values["message"] = error[:_MAX_MESSAGE]
        with self._catalog.session(write=True) as s:
            s.execute(update(JobRow).where(*self._held(claim)).values(**values))

    def fail(self, claim: Claim, message: str) -> None:
        """End a job that cannot go on (its lines are deleted; records stored stay)."""
        with self._catalog.session(write=True) as s:
            job = s.exec(select(JobRow).where(*self._held(claim)).with_for_update()).first()
            if job is not None:
                _end(s, job, JobState.FAILED, message)

    @staticmethod
    def _held(claim: Claim) -> tuple[Any, ...]:
        return (
            col(JobRow.job_id) == claim.job_id,
            col(JobRow.state) == _RUNNING,
            col(JobRow.claimed_by) == claim.token,
        )

    def expire_open(self, idle_s: float) -> int:
        """Cancel open jobs nobody added lines to or started for ``idle_s`` seconds; how many.

        An upload abandoned half way (its client died) would otherwise keep its lines for ever.
        """
        cutoff = time.time() - idle_s
        with self._catalog.session() as s:
            stale = list(
                s.exec(
                    select(JobRow.job_id).where(col(JobRow.state) == _OPEN, col(JobRow.updated_at) < cutoff)
                )
            )
        with self._catalog.session(write=True) as s:
            for job_id in stale:
                job = s.exec(select(JobRow).where(col(JobRow.job_id) == job_id).with_for_update()).first()
                if job is not None and job.state == _OPEN and job.updated_at < cutoff:
                    _end(
                        s,
                        job,
                        JobState.CANCELLED,
                        f"abandoned: not started within {idle_s:g} s of its last lines",
                    )
        return len(stale)


def _count(job: JobRow, done: Batch, gone: set[int]) -> None:
    """Add a committed batch's outcome to the job's counts; the ``gone`` lines count as forgotten.

    A gone line was erased by a forget while its batch was being stored: whatever the store did
    with it, the forget wins. Which of the written records were new is not known line by line, so
    gone written lines are taken off ``stored`` first (exact whenever nothing is gone, the rule).
    """
    written_gone = len(done.written & gone)
    stored = max(done.changed - written_gone, 0)
    errors = [(n, m) for n, m in sorted(done.errors.items()) if n not in gone]
    job.next_line = done.last + 1
    job.processed += done.size
    job.stored += stored
    job.skipped += len(done.written) - written_gone - stored
    job.failed += len(errors)
    job.forgotten += len((done.forgotten | gone) - done.written) + written_gone
    room = MAX_ERRORS - len(job.errors)
    if errors and room > 0:
        job.errors = [*job.errors, *({"line": n, "message": m[:_MAX_MESSAGE]} for n, m in errors[:room])]


def _insert(s: Session, job_id: str, chunks: Sequence[Chunk]) -> None:
    """The chunks as ``job_chunks`` rows, in one executemany, and a ``users`` row for each of their users.

    The rows go to the driver as they are, without SQLAlchemy's per-row parameter processing.

    The user's row is what ``forget`` looks for: a user whose only data so far is waiting lines is
    then still a user to forget, and the forget erases the chunks (``users`` lists users with
    records, so the row alone shows nobody).

    Raises:
        UserBeingForgottenError: a user of the chunks is being forgotten right now.
    """
    connection = s.connection()
    for key in sorted({chunk.user_key for chunk in chunks}):  # one order: PostgreSQL locks the rows
        ensure_user(connection, key)
    if chunks:
        mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"  # SQLite's driver, psycopg's
        connection.exec_driver_sql(
            f"INSERT INTO {JobChunkRow.__tablename__} (job_id, line, last, user_id, records) VALUES "
            f"({', '.join([mark] * 5)})",
            [(job_id, c.line, c.last, c.user_key, c.records) for c in chunks],
        )


def _locked(s: Session, tenant: str, job_id: str) -> JobRow:
    """The tenant's job, locked for this transaction on PostgreSQL.

    Raises:
        LookupError: no such job, or another tenant's.
    """
    job = s.exec(select(JobRow).where(col(JobRow.job_id) == job_id).with_for_update()).first()
    if job is None or job.tenant != tenant:
        raise LookupError(f"this tenant has no job {job_id!r}")
    return job


def _end(s: Session, job: JobRow, state: JobState, message: str | None) -> None:
    """Put ``job`` in an end state and delete what is left of its chunks, in the caller's transaction."""
    s.execute(delete(JobChunkRow).where(col(JobChunkRow.job_id) == job.job_id))
    now = time.time()
    job.state, job.finished_at, job.updated_at = state.value, now, now
    job.claimed_by, job.claimed_until = None, 0.0
    if message is not None:
        job.message = message[:_MAX_MESSAGE]
    s.add(job)
