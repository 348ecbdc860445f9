"""``improve`` on its own: a thread that runs ``personamem improve`` once enough new feedback came in.

``serve`` starts one in every worker (``PERSONAMEM_IMPROVE_EVERY``: reports that start a run, default
50, 0 for never); a long-lived SDK process opts in with ``AutoImprove(mem).start()``. Every
``interval`` seconds it counts the reports on the store's own users' calls since the last run (the
time is kept with the data); past ``every``, it takes the store's improve lease
(:class:`~personamem.store.lease.Lease`: one run per store at a time, whichever worker or machine
notices first) and runs ``personamem improve`` as a child process at the lowest CPU priority on one
thread, its lines in this process's log (``personamem.improve``). What the run decides (a candidate
on trial, by default) is kept with the data, so every process serves it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from personamem.errors import ConfigError
from personamem.memory import PersonaMem
from personamem.settings import settings
from personamem.store.lease import Lease

__all__ = ["EVERY", "INTERVAL_S", "LAST_KEY", "AutoImprove"]

EVERY = 50
"""Reports since the last run that start the next (improve learns from feedback from 50 on)."""
INTERVAL_S = 300.0
"""Seconds between counts."""
LAST_KEY = "improve.last"  # store_info: when the last automatic run started (ISO 8601, UTC)
LEASE_KEY = "improve.lease"
LEASE_S = 3600.0  # a run's lease, renewed while it runs: a holder that died frees the store within it
_ONE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PERSONAMEM_LLM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
log = logging.getLogger("personamem.improve")


class AutoImprove:
    """Runs ``personamem improve`` on ``mem``'s store when ``every`` new reports have come in.

    ``store_args`` are the CLI's store options for the child (default: ``--store`` with the memory's
    folder; a memory on a database must give them, e.g. ``["--sql-url", url]``); ``options`` are
    improve's own (e.g. ``["--steps", "200"]``).

    Raises:
        ConfigError: a memory without a folder and no ``store_args``, or a tenant's view (improve
            runs on the store's own users).
    """

    def __init__(
        self,
        mem: PersonaMem,
        *,
        every: int = EVERY,
        interval: float = INTERVAL_S,
        store_args: Sequence[str] | None = None,
        options: Sequence[str] = (),
    ) -> None:
        if mem.inspection.tenant_name is not None:
            raise ConfigError("automatic improve runs on the store's own users, not a tenant's view")
        folder = mem.store.folder
        if store_args is None and folder is None:
            raise ConfigError("a memory on a database needs store_args, e.g. ['--sql-url', URL]")
        self.mem = mem
        self.every, self.interval = every, interval
        self.command = [
            sys.executable,
            "-m",
            "personamem",
            *(store_args if store_args is not None else ["--store", str(folder)]),
            "improve",
            *options,
        ]
        self._lease = Lease(mem.store.catalog, LEASE_KEY, LEASE_S)
        self._holder = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs = 0  # finished runs started by this object

    def start(self) -> AutoImprove:
        """Count every ``interval`` seconds in a daemon thread, from now until :meth:`close`."""
        if self.every > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="personamem-improve", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop counting; a run in progress finishes first (its child keeps the store consistent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def due(self) -> int:
        """Reports on the store's own users' calls since the last run (what :meth:`tick` compares)."""
        store = self.mem.store
        reported = store.catalog.reported_since(store.catalog.info(LAST_KEY))
        return sum(store.tenancy.user(key) is not None for key in reported)

    def tick(self) -> bool:
        """Run improve now if enough reports came in and no other process is running it; True if it ran."""
        if self.due() < self.every or not self._lease.acquire(self._holder):
            return False
        try:
            self.mem.store.catalog.set_info(LAST_KEY, datetime.now(UTC).isoformat())
            self._improve()
        finally:
            self._lease.release(self._holder)
        self.runs += 1
        return True

    def _improve(self) -> None:
        """The child process, niced and on one thread, its output in the log as it comes."""
        log.info("improve: %s", " ".join(self.command))
        env = {**os.environ, **_ONE_THREAD}
        with subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            preexec_fn=lambda: os.nice(19),  # no threads run in the forked child
        ) as child:
            assert child.stdout is not None
            for line in child.stdout:
                log.info("improve: %s", line.rstrip())
                self._lease.acquire(self._holder)  # renewed while it runs
        if child.returncode:
            log.warning("improve exited with %d; the next count tries again", child.returncode)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception as error:  # a failing count or run must not end the thread
                log.warning("automatic improve failed: %s", error)


def from_settings(mem: PersonaMem) -> AutoImprove | None:
    """What ``serve`` starts in each worker (None: ``PERSONAMEM_IMPROVE_EVERY`` is 0).

    An :class:`AutoImprove` counting every ``PERSONAMEM_IMPROVE_S`` seconds.
    """
    given = settings()
    every = EVERY if given.improve_every is None else given.improve_every
    if every == 0 or mem.inspection.tenant_name is not None:
        return None
    store_args = None
    if mem.store.folder is None:  # a database: the options serve was given
        given_urls = (("--sql-url", given.sql_url), ("--chroma-url", given.chroma_url))
        store_args = [part for option, url in given_urls if url for part in (option, url)]
    interval = INTERVAL_S if given.improve_s is None else given.improve_s
    return AutoImprove(mem, every=every, interval=interval, store_args=store_args)
