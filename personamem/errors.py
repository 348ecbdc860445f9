"""The one exception and warning family of personamem, and how degraded answers are reported.

Every error the library raises on purpose derives from :class:`PersonaMemError`, so callers can catch
the family with one ``except`` and still tell bad input from a broken backend. Every warning derives
from :class:`PersonaMemWarning`; those that say an LLM stage fell back to the stage without it derive
from :class:`FallbackWarning` and go through :func:`warn_fallback`, so the context call can also list
them in its result (Python's warning filters are process-global, a result is per call).
"""

from __future__ import annotations

import contextlib
import warnings
from contextvars import ContextVar

from personamem.tally import tallying

__all__ = [
    "AuthenticationError",
    "CheckpointError",
    "ConfigError",
    "ConflictFallbackWarning",
    "DiskFullError",
    "FallbackWarning",
    "IngestError",
    "InsufficientDataError",
    "InvalidInputError",
    "InvalidRecordError",
    "LLMError",
    "ListwiseFallbackWarning",
    "MemoryFallbackWarning",
    "MethodError",
    "MissingExtraError",
    "PBRFallbackWarning",
    "PartialWriteError",
    "PermissionDeniedError",
    "PersonaMemDeprecationWarning",
    "PersonaMemError",
    "PersonaMemWarning",
    "PipelineFallbackWarning",
    "RateLimitedError",
    "RemoteError",
    "RewriteFallbackWarning",
    "ServiceUnavailableError",
    "StoreError",
    "StoreUnavailableError",
    "TruncationWarning",
    "UnreadableIndexError",
    "UserBeingForgottenError",
    "WebhookSignatureError",
    "collect_fallbacks",
    "warn_fallback",
]


class PersonaMemError(Exception):
    """Base class of every error personamem raises on purpose."""


class InvalidInputError(PersonaMemError, ValueError):
    """An argument is malformed: a user id that is not a non-empty string, a bad ``k``..."""


class InvalidRecordError(InvalidInputError):
    """A record is malformed: empty text, missing user id, unknown kind, bad timestamp, a lone surrogate."""


class IngestError(PersonaMemError, ValueError):
    """An input file could not be read; the message names the file and, where known, the line.

    Raised before anything from the batch is written, so earlier data stays as it was.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = f"{path}:{line}: " if path and line else (f"{path}: " if path else "")
        super().__init__(f"{where}{message}")
        self.path = path
        self.line = line


class StoreError(PersonaMemError):
    """The SQL database or the vector index failed or disagreed in a way repair could not fix."""


class UnreadableIndexError(StoreError):
    """The vector index cannot read a user's vectors back (found after a crash of several writers).

    The store heals it by rebuilding that user's collection from SQL (``Store.rebuild``); it
    reaches a caller only when the rebuild fails too.
    """


class DiskFullError(StoreError):
    """The filesystem under the store has no space left: a write failed (HTTP 507), nothing is lost.

    Raised within seconds, never after a wait: records acknowledged before stay stored, reads keep
    working, and writes work again once space is freed (the message names the folder, its
    filesystem and the bytes free). Rows written but not yet in the vector index stay pending and
    searchable; the background indexer retries them by itself. ``path`` is the store's file or
    folder that failed, ``free`` the bytes free there when it did (None: unknown, e.g. PostgreSQL's).
    """

    def __init__(self, message: str, *, path: str | None = None, free: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.free = free


class UserBeingForgottenError(StoreError):
    """A write met a user whose ``forget`` has not finished (in another process, or interrupted).

    A write waits for another process's forget; this is raised when that wait runs out, which means
    the forget was interrupted: opening the store finishes it.
    """

    def __init__(self, message: str, *, user_id: str) -> None:
        super().__init__(message)
        self.user_id = user_id


class StoreUnavailableError(StoreError):
    """The SQL database cannot be reached right now: refused, restarting, or it dropped the connection.

    It heals by itself: the next call opens a fresh connection once the database is back. A call
    that failed this way wrote nothing, unless the connection broke during its commit; repeating an
    idempotent call (reads, ``add`` with its id) is safe either way. ``serve`` answers 503 with
    ``Retry-After``, and the clients repeat the calls that are safe to repeat.
    """


class PartialWriteError(StoreError):
    """A batch write stopped part way through: the first ``stored`` records (in input order) are durable.

    Writes are idempotent by (user, id), so adding the same records again, or re-running the same
    ``personamem ingest``, skips those and finishes the job.
    """

    def __init__(self, message: str, *, stored: int, total: int) -> None:
        super().__init__(message)
        self.stored = stored
        self.total = total


class WebhookSignatureError(PersonaMemError, ValueError):
    """A webhook delivery that does not verify: no or a wrong signature, or a timestamp too old or new.

    Raised by :func:`personamem.webhooks.verify`; the receiver answers it with a 4xx and drops the body.
    """


class LLMError(PersonaMemError):
    """A frozen-LLM backend failed to answer (after its retries, or within the pipeline's deadline)."""


class CheckpointError(PersonaMemError):
    """A checkpoint folder is missing, incomplete or made for another encoder."""


class MethodError(PersonaMemError, ValueError):
    """A method or pipeline stage name is unknown, or it needs an LLM and none is configured.

    The message lists the names that would work.
    """


class ConfigError(PersonaMemError, ValueError):
    """A pipeline or training config (TOML file, keywords, CLI options) has an unknown key or bad value."""


class InsufficientDataError(PersonaMemError, ValueError):
    """Too little data (logged traffic, users) to train on; the message gives the counts found and needed."""


class MissingExtraError(PersonaMemError, ImportError):
    """An optional dependency is not installed; the message gives the ``pip install`` command."""

    def __init__(self, modules: list[str], extra: str) -> None:
        super().__init__(f'{", ".join(modules)} not installed: pip install "personamem[{extra}]"')
        self.extra = extra


class RemoteError(PersonaMemError):
    """A personamem server could not be reached, or failed (5xx); ``status`` is the HTTP status, if any."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class AuthenticationError(RemoteError):
    """The server refused the API key: missing, malformed, unknown or revoked (HTTP 401)."""


class PermissionDeniedError(RemoteError):
    """The API key is valid but its scope does not allow the call (HTTP 403).

    ``needed`` is the scope the call takes and ``scope`` the key's (``read``, ``write``, ``admin``).
    """

    def __init__(
        self, message: str, *, needed: str | None = None, scope: str | None = None, status: int | None = 403
    ) -> None:
        super().__init__(message, status=status)
        self.needed = needed
        self.scope = scope


class RateLimitedError(RemoteError):
    """The API key is over its rate limit (HTTP 429); ``retry_after`` is how many seconds to wait."""

    def __init__(self, message: str, *, retry_after: float, status: int | None = 429) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


class ServiceUnavailableError(RemoteError):
    """The server's store is unavailable for now (HTTP 503 with ``Retry-After``: its database restarting).

    The clients repeat idempotent calls for a while before raising it; a call they do not repeat
    (``delete``, ``update``, ``forget``...) raises it at once. ``retry_after`` is the server's advice
    in seconds.
    """

    def __init__(self, message: str, *, retry_after: float, status: int | None = 503) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


class PersonaMemWarning(UserWarning):
    """Base class of every warning personamem emits."""


class PersonaMemDeprecationWarning(PersonaMemWarning, DeprecationWarning):
    """A call used a name that still works but is going away; the message names its replacement.

    A :class:`DeprecationWarning` too, so Python shows it where the caller's own code (``__main__``, a
    test run) makes the call and hides it from the users of an application built on personamem.
    """


class TruncationWarning(PersonaMemWarning):
    """A text was longer than the encoder's window; its dense vector covers only the start."""


class FallbackWarning(PersonaMemWarning):
    """An LLM stage gave nothing usable (failed, timed out, unparseable), so the stage without it ran."""


class PBRFallbackWarning(FallbackWarning):
    """P-PRF (or an expansion baseline) produced nothing usable for a query; search ran without it."""


class ListwiseFallbackWarning(FallbackWarning):
    """The listwise reranker's LLM gave no usable ranking, so the candidates kept their first-stage order."""


class RewriteFallbackWarning(FallbackWarning):
    """A rewriting answer was unusable, so a turn kept its raw utterance and/or an empty selection."""


class MemoryFallbackWarning(FallbackWarning):
    """A preference memory was not rebuilt in time or at all, so an older one (stale) or none was used."""


class ConflictFallbackWarning(FallbackWarning):
    """Conflict detection's LLM failed, so a knowledge record was added without superseding anything."""


class PipelineFallbackWarning(FallbackWarning):
    """A pipeline stage failed as a whole and the pipeline ran on without it."""


_collected: ContextVar[list[str] | None] = ContextVar("personamem_fallbacks", default=None)


def warn_fallback(message: str, category: type[FallbackWarning], *, stacklevel: int = 2) -> None:
    """Warn that a stage degraded, and note it for the enclosing :func:`collect_fallbacks`, if any."""
    notes = _collected.get()
    if notes is not None:
        notes.append(message)
    warnings.warn(message, category, stacklevel=stacklevel + 1)


def collect_fallbacks() -> contextlib.AbstractContextManager[list[str]]:
    """Collect the messages of :func:`warn_fallback` calls made in this thread or task meanwhile."""
    return tallying(_collected)
