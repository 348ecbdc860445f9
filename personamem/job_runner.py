"""The job runner: a background thread that runs queued imports a batch at a time, resumably.

Every ``personamem serve`` process runs one (started and stopped with the app, like the webhook
deliverer), over every tenant's jobs; ``mem.jobs.run_pending()`` runs one tenant's in the caller's
thread. A runner claims a job (``store/jobs.py``), then repeats: read the next :data:`STEP` batches
of lines from ``next_line`` (whole chunks), store each batch's records through the tenant's store
in one transaction (``add_many``), and advance the job past them, renewing the lease. So a runner
killed at any point leaves a job whose lease runs out and whose ``next_line`` is the first line
not committed; the next runner stores those batches again, which is a no-op for the records
already in: none is stored twice.

A batch that fails at the write (the database unreachable, a full disk) is tried again after a
backoff, by whichever runner claims the job then; after :data:`ATTEMPTS` claims without a
committed batch (failures, or runners killed in a loop) the job fails and its lines are deleted.
A line whose user is being forgotten is not stored; one whose user was forgotten while its batch
was being stored has that user forgotten again, so a forget always wins over an import.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from personamem.errors import InvalidInputError, PartialWriteError, PersonaMemError, UserBeingForgottenError
from personamem.records import Record
from personamem.settings import settings
from personamem.store import Store
from personamem.store.jobs import Batch, Chunk, Claim, JobQueue

__all__ = [
    "ATTEMPTS",
    "BATCH",
    "LEASE_S",
    "OPEN_IDLE_S",
    "POLL_S",
    "STEP",
    "JobRunner",
    "Tenanted",
    "from_settings",
]

log = logging.getLogger("personamem.jobs")

BATCH = 500
"""Lines stored per transaction: each is one ``add_many``."""
STEP = 4
"""Batches stored between two commits of the job's progress (resume point, counts, lease): the job's
row is written once a step, and a runner killed mid-step leaves about this many batches (whole
chunks: up to a chunk more) to store again. Advancing after every batch cost 3 % of a
100,000-line import's time (``bench/import_job.py``)."""
LEASE_S = 60.0
"""How long a claim holds a job without a committed batch; a killed runner's job waits this long."""
POLL_S = 1.0
"""How often an idle runner looks for queued jobs (written by any process)."""
ATTEMPTS = 8
"""Claims of a job without a committed batch before it fails (failed writes or crashed runners)."""
MAX_BACKOFF_S = 60.0
"""The longest wait before a failed batch is tried again (2 s after the first failure, doubling)."""
OPEN_IDLE_S = 3600.0
"""An open job (an upload in chunks) nobody added to or started for this long is cancelled."""

StoreOf = Callable[[str], Store]
"""A tenant's store by name ("" for the store's own users)."""


class JobRunner:
    """Runs jobs until closed: :meth:`start` for a thread, :meth:`run_pending` for the caller's thread."""

    def __init__(
        self,
        queue: JobQueue,
        store_of: StoreOf,
        *,
        batch: int = BATCH,
        lease_s: float = LEASE_S,
        poll_s: float = POLL_S,
        tenant: str | None = None,
    ) -> None:
        self._queue = queue
        self._store_of = store_of
        self.batch = batch
        self.lease_s = lease_s
        self.poll_s = poll_s
        self._tenant = tenant  # None: every tenant's jobs
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._expired_at = 0.0

    def start(self) -> None:
        """Run jobs from a daemon thread until :meth:`close`."""
        self._thread = threading.Thread(target=self._run, name="personamem-jobs", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                now = time.time()
                if now - self._expired_at > OPEN_IDLE_S / 60:  # about once a minute
                    self._expired_at = now
                    self._queue.expire_open(OPEN_IDLE_S)
                ran = self.run_one()
            except Exception as error:  # the store may be unreachable for a while: jobs wait in it
                log.warning("job runner failed (%s); retrying in %g s", error, self.poll_s)
                ran = False
            if not ran:
                self._stop.wait(self.poll_s)

    def run_pending(self) -> int:
        """Run the jobs that can be claimed now, one after another; how many were claimed."""
        claimed = 0
        while not self._stop.is_set() and self.run_one():
            claimed += 1
        return claimed

    def run_one(self) -> bool:
        """Claim a job and run it until it ends, a batch fails or this runner stops; False: none to claim."""
        claim = self._queue.claim(self.lease_s, self._tenant)
        if claim is None:
            return False
        if claim.attempts > ATTEMPTS:
            self._queue.fail(claim, f"gave up at line {claim.next_line} after {ATTEMPTS} attempts")
            return True
        log.info("job %s: running from line %d (attempt %d)", claim.job_id, claim.next_line, claim.attempts)
        self._run_job(claim)
        return True

    def _run_job(self, claim: Claim) -> None:
        store = self._store_of(claim.tenant)
        after = claim.next_line
        while True:
            if self._stop.is_set():  # shutting down: hand the job on at once
                self._queue.release(claim, time.time())
                return
            chunks = self._queue.batch(claim, after, self.batch * STEP)
            if not chunks:
                if self._queue.finish(claim):
                    log.info("job %s: done", claim.job_id)
                return
            try:
                done = self._store(store, chunks)
            except Exception as error:
                self._retry_later(claim, error)
                return
            mine, gone = self._queue.advance(claim, done, self.lease_s)
            users = {store.tenancy.user(chunk.user_key) for chunk in gone}  # keys of the job's tenant
            for user_id in sorted(u for u in users if u is not None):
                store.forget(user_id)  # forgotten while its batch was stored: the forget wins
            if not mine:
                log.info("job %s: cancelled or taken over; stopping", claim.job_id)
                return
            after = done.last + 1

    def _retry_later(self, claim: Claim, error: Exception) -> None:
        """A batch failed at the write: release the job for a retry after a backoff, or fail it."""
        reason = f"{type(error).__name__}: {error}"
        if claim.attempts >= ATTEMPTS:
            log.warning("job %s: failed at line %d: %s", claim.job_id, claim.next_line, reason)
            self._queue.fail(claim, f"gave up after {ATTEMPTS} attempts: {reason}")
            return
        wait = min(MAX_BACKOFF_S, 2.0 * 2 ** (claim.attempts - 1))
        log.warning("job %s: a batch failed (%s); trying again in %g s", claim.job_id, reason, wait)
        self._queue.release(claim, time.time() + wait, reason)

    def _store(self, store: Store, chunks: list[Chunk]) -> Batch:
        """Store a step's chunks, a batch of lines a transaction; per-line errors for what cannot be stored.

        Raises:
            Exception: a batch's write failed as a whole (the step is tried again later; the
                batches before it are then stored again, as no-ops).
        """
        done = Batch(chunks)
        records: dict[int, Record] = {}
        for chunk in chunks:
            read, errors = chunk.read()
            records |= read
            done.errors |= errors
        numbers = list(records)
        for start in range(0, len(numbers), self.batch):
            self._store_batch(store, {n: records[n] for n in numbers[start : start + self.batch]}, done)
        return done

    def _store_batch(self, store: Store, records: dict[int, Record], done: Batch) -> None:
        """Store a batch's records (by line number) in one transaction, adding what came of it to ``done``."""
        while records:
            try:
                done.changed += store.add_many(list(records.values()), batch_size=len(records))
            except (PartialWriteError, UserBeingForgottenError) as exc:  # one batch: none of it written
                forgetting = exc if isinstance(exc, UserBeingForgottenError) else exc.__cause__
                if not isinstance(forgetting, UserBeingForgottenError):
                    raise
                user_id = store.tenancy.user(forgetting.user_id)
                for number in [n for n, r in records.items() if r.user_id == user_id]:
                    done.forgotten.add(number)
                    del records[number]
                continue
            except InvalidInputError:
                self._one_by_one(store, records, done)
                return
            done.written |= set(records)
            return

    @staticmethod
    def _one_by_one(store: Store, records: dict[int, Record], done: Batch) -> None:
        """Store a batch the store refused as a whole line by line, so one bad record is one error."""
        for number, record in records.items():
            try:
                done.changed += store.add_many([record], batch_size=1)
            except InvalidInputError as exc:
                done.errors[number] = str(exc)
            except PersonaMemError:
                raise
            else:
                done.written.add(number)

    def close(self) -> None:
        """Stop running; waits for the batch in progress, then hands its job on."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


class Tenanted(Protocol):
    """A memory and its tenants' views (``PersonaMem`` is one), each over its own view of one store."""

    @property
    def store(self) -> Store:
        """The memory's store."""
        ...

    def tenant(self, name: str) -> Tenanted:
        """The memory as tenant ``name`` sees it."""
        ...


def from_settings(mem: Tenanted) -> JobRunner:
    """The runner a server process runs over every tenant of ``mem``'s store, as the settings say.

    ``PERSONAMEM_JOB_BATCH`` and ``PERSONAMEM_JOB_LEASE_S``.
    """
    env = settings()

    def store_of(tenant: str) -> Store:
        return mem.tenant(tenant).store if tenant else mem.store

    return JobRunner(
        JobQueue(mem.store.catalog),
        store_of,
        batch=env.job_batch or BATCH,
        lease_s=env.job_lease_s or LEASE_S,
    )
