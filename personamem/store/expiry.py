"""The background sweep that erases expired records while a store is open.

Expired records are hidden from reads the moment they expire (``store/timeline.py``); the sweep
is what erases them, through the same path as ``Store.delete``, so their bytes go as a deleted
record's do. Every process with the store open sweeps; two sweeping at once find the same ids and
the second deletes nothing.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable

from personamem.errors import InvalidInputError
from personamem.settings import settings

__all__ = ["SWEEP_S", "ExpirySweeper", "check_ttl"]

# seconds between sweeps (PERSONAMEM_SWEEP_S overrides; 0 turns the background sweep off, e.g. when a
# scheduled `personamem purge` does it); a sweep with nothing expired is one indexed SQL query
SWEEP_S = 60.0


def check_ttl(seconds: object) -> float | None:
    """``seconds`` as a default time-to-live (None: none), checked the same in the SDK and the clients.

    Raises:
        InvalidInputError: anything but None or a positive number (a bool is not one).
    """
    number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
    if seconds is not None and (not number or not seconds > 0):  # type: ignore[operator]
        raise InvalidInputError(f"a time-to-live must be a positive number of seconds, got {seconds!r}")
    return None if seconds is None else float(seconds)  # type: ignore[arg-type]


class ExpirySweeper:
    """A daemon thread that calls ``purge`` at open and then every ``interval`` seconds until closed.

    An interval of 0 starts no thread: expired records stay hidden until something purges them.
    """

    def __init__(self, purge: Callable[[], int], interval: float | None = None) -> None:
        self._purge = purge
        if interval is None:
            interval = settings().sweep_s
        self.interval = SWEEP_S if interval is None else interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.interval > 0:
            self._thread = threading.Thread(target=self._run, name="personamem-expiry", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._purge()
            except Exception as error:  # the next sweep tries again; reads hide expired records anyway
                warnings.warn(f"expiry sweep failed ({error}); retrying in {self.interval:g} s", stacklevel=1)
            self._stop.wait(self.interval)

    def close(self) -> None:
        """Stop sweeping; waits for a sweep in progress to finish."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
