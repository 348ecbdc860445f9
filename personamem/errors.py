"""The one exception hierarchy of personamem.

Every error the library raises on purpose derives from :class:`PersonaMemError`, so callers can catch
the family with one ``except`` and still tell bad input from a broken backend.
"""

from __future__ import annotations


class PersonaMemError(Exception):
    """Base class of every error personamem raises on purpose."""


class InvalidRecordError(PersonaMemError, ValueError):
    """A record is malformed: empty text, missing user id, unknown kind, bad timestamp..."""


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


class MissingExtraError(PersonaMemError, ImportError):
    """An optional dependency is not installed; the message gives the ``pip install`` command."""

    def __init__(self, modules: list[str], extra: str) -> None:
        super().__init__(f'{", ".join(modules)} not installed: pip install "personamem[{extra}]"')
        self.extra = extra


class TruncationWarning(UserWarning):
    """A text was longer than the encoder's window; its dense vector covers only the start."""
