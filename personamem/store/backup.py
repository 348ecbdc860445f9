"""Backups of an embedded store while processes serve it, and restoring one.

A backup is a store folder (``PersonaMem.open`` opens it as it is) with a ``backup.json`` that says
when it was taken and what it holds. It is taken without stopping the processes that use the store:

1. Under the lock files every process takes to change the embedded Chroma folder (its writes) or to
   open a client on it (``store/vectors.py``), so no process changes those files meanwhile: Chroma's
   ``chroma.sqlite3`` is copied with SQLite's online backup, its HNSW segment files as they are,
   and then the store's ``personamem.sqlite`` with SQLite's online backup (one step: a snapshot of
   one moment; in WAL mode writers carry on). Records go on being acknowledged meanwhile (an
   acknowledged ``add`` is a committed row), only their vectors wait for the lock.
2. The adapters ``personamem improve`` keeps in the folder, after the SQL copy: a live pipeline the
   copy names was saved whole before it went live.

So the copy is what a crash of every process at the moment of the SQL snapshot would leave on
disk: Chroma as it was, since nothing changed it after its copy, and SQL at most *newer* (rows
committed as pending whose vectors had not reached Chroma, a delete or forget whose SQL step
committed), which the write protocol repairs on open. The other order could leave vectors of rows
the copy lacks, which nothing repairs. The backup is then opened once (that repair runs) and
checked (``Store.check``) before it gets its final name, so a backup that exists is a clean one.
Every record acknowledged before the backup began is in it.

The lock is the one every personamem process already takes for its vector writes, so nothing has to
be stopped or told. A store on PostgreSQL is backed up with the database's own tools
(``docs/DEPLOY.md``, "Backups").
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

from filelock import Timeout

from personamem.encoder import Encoder
from personamem.errors import InvalidInputError, StoreError
from personamem.store.store import SQL_FILE, VECTOR_DIR, Store
from personamem.store.vectors import CHROMA_DB, opening_lock, writing_lock

__all__ = ["BACKUP_INFO", "BackupSummary", "backup", "restore"]

BACKUP_INFO = "backup.json"
ADAPTERS_DIR = "adapters"  # where ``personamem improve`` saves a local store's adapters and rankers
_SCRATCH = ".work"  # improve's training checkpoints under it: not part of the store
_FORMAT = 1
PROGRESS_EVERY_S = 10.0  # at most this often, a line on how far a long copy is
LOCK_TIMEOUT_S = 600.0  # writers hold the lock for one upsert at a time; this long means one is stuck

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BackupSummary:
    """What a backup holds, or what a restore brought back."""

    folder: Path
    """The backup's folder, or the store restored."""
    taken_at: str
    """When the snapshot was taken (ISO 8601, UTC): every record acknowledged before is in it."""
    source: str
    """The folder of the store it was taken from."""
    users: int
    """Users with rows, every tenant's included."""
    records: int
    """Records, every tenant's included (superseded ones too)."""
    size_bytes: int


def backup(
    store: str | Path, dest: str | Path, *, encoder: Encoder | None = None, progress: Progress | None = None
) -> BackupSummary:
    """Take a consistent snapshot of the embedded store in folder ``store`` into the new folder ``dest``.

    Other processes may read and write the store meanwhile (see the module docstring). ``encoder`` is
    the store's (default: the package's); it is loaded only for rows a bulk write had committed
    without their vectors at the snapshot. ``progress`` gets one line per step.

    Raises:
        InvalidInputError: ``store`` is not a store folder, or ``dest`` exists and is not an empty
            folder, or one lies inside the other.
        StoreError: a writer held the store's lock for 10 minutes, or the copy did not check clean.
    """
    source = _store_folder(store, "the store to back up")
    target = _new_folder(dest, "the backup's folder", source)
    say = progress or (lambda _line: None)
    with _staging(target) as staged:
        taken_at = _snapshot(source, staged, say)
        users, records = _checked(staged, source, encoder, say)
        summary = BackupSummary(target, taken_at, str(source), users, records, _size(staged))
        info = {
            "format": _FORMAT,
            "personamem": version("personamem"),
            "taken_at": summary.taken_at,
            "source": summary.source,
            "users": summary.users,
            "records": summary.records,
        }
        (staged / BACKUP_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        _move_into_place(staged, source, target)
    return summary


def restore(
    src: str | Path,
    folder: str | Path,
    *,
    force: bool = False,
    encoder: Encoder | None = None,
    progress: Progress | None = None,
) -> BackupSummary:
    """Bring the backup in ``src`` back as the store in ``folder``; return what it holds.

    The backup is copied as a backup is taken (so ``src`` may even be a store in use), opened and
    checked in a folder beside ``folder``, and only then put in its place. ``folder`` must not exist
    or be empty, or else hold a store and ``force`` be given: then the store's files are replaced
    (other files stay), so stop every process that uses it first.

    Raises:
        InvalidInputError: ``src`` is not a backup (nor a store folder), or is from a newer
            personamem; ``folder`` holds a store and ``force`` is not given, or holds files but no
            store; one lies in the other.
        StoreError: the backup does not check clean (nothing in ``folder`` changed).
    """
    source = _store_folder(src, "the backup to restore")
    target = _new_folder(folder, "the folder to restore into", source, force=force)
    info = _backup_info(source)
    say = progress or (lambda _line: None)
    with _staging(target) as staged:
        taken_at = _snapshot(source, staged, say)
        users, records = _checked(staged, source, encoder, say)
        summary = BackupSummary(
            target,
            str(info.get("taken_at", taken_at)),
            str(info.get("source", source)),
            users,
            records,
            _size(staged),
        )
        _move_into_place(staged, source, target)
    return summary


def _store_folder(path: str | Path, what: str) -> Path:
    """The resolved ``path``, which must hold a store's two databases."""
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        raise InvalidInputError(f"{what}, {folder}, is not a folder")
    for part in (SQL_FILE, f"{VECTOR_DIR}/{CHROMA_DB}"):
        if not (folder / part).is_file():
            raise InvalidInputError(f"{what}, {folder}, is not a personamem store folder (no {part})")
    return folder


def _new_folder(path: str | Path, what: str, source: Path, *, force: bool | None = None) -> Path:
    """The resolved ``path``: new, empty, or (``force``) a store to replace; apart from ``source``.

    ``force`` None: a folder that holds anything is refused, store or not. A folder that holds files
    but no store is never replaced: a mistyped ``--store`` must not cost someone their files.
    """
    folder = Path(path).expanduser().resolve()
    if folder.is_relative_to(source) or source.is_relative_to(folder):
        raise InvalidInputError(f"{what}, {folder}, and {source} must not lie one inside the other")
    if folder.exists() and not folder.is_dir():
        raise InvalidInputError(f"{what}, {folder}, is a file")
    if not folder.is_dir() or not any(folder.iterdir()):
        return folder
    if force is None or not _store_entries(folder):
        raise InvalidInputError(f"{what}, {folder}, is not empty; give a new or empty folder")
    if not force:
        raise InvalidInputError(
            f"{what}, {folder}, holds a store (--force replaces it: stop every process that uses it first)"
        )
    return folder


def _backup_info(folder: Path) -> dict[str, object]:
    """The backup's ``backup.json`` (empty for a plain store folder); refused from a newer format."""
    file = folder / BACKUP_INFO
    if not file.is_file():
        return {}
    try:
        info = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InvalidInputError(f"{file} cannot be read: {error}") from error
    if not isinstance(info, dict) or info.get("format") != _FORMAT:
        made = info.get("personamem", "another version") if isinstance(info, dict) else "another program"
        raise InvalidInputError(f"{file} is not a backup this personamem reads (made by {made})")
    return info


@contextlib.contextmanager
def _staging(target: Path) -> Iterator[Path]:
    """A fresh folder beside ``target`` to build in, removed unless it was moved into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    try:
        yield staged
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _snapshot(source: Path, staged: Path, say: Progress) -> str:
    """Copy the store's files into ``staged`` in the order that keeps them consistent; return when.

    See the module docstring for why Chroma goes first and nothing may write it until SQL is copied.
    """
    vectors = source / VECTOR_DIR
    say(f"waiting for the writers of {source} (its vector index's lock)")
    try:
        with (
            writing_lock(vectors).acquire(timeout=LOCK_TIMEOUT_S),
            opening_lock(vectors).acquire(timeout=LOCK_TIMEOUT_S),
        ):
            taken_at = datetime.now(UTC).isoformat(timespec="seconds")
            _copy_vectors(vectors, staged / VECTOR_DIR, say)
            _copy_sqlite(source / SQL_FILE, staged / SQL_FILE, "the records' database", say)
    except Timeout as error:
        raise StoreError(
            f"a writer held the lock of {vectors} for {LOCK_TIMEOUT_S:g} s; nothing was copied"
        ) from error
    adapters = source / ADAPTERS_DIR
    if adapters.is_dir():
        say(f"copying the adapters ({_megabytes(_size(adapters))})")
        shutil.copytree(adapters, staged / ADAPTERS_DIR, ignore=shutil.ignore_patterns(_SCRATCH))
    return taken_at


def _copy_vectors(folder: Path, dest: Path, say: Progress) -> None:
    """Chroma's folder: its database by SQLite's backup, the rest as it is (a journal not at all)."""
    dest.mkdir()
    _copy_sqlite(folder / CHROMA_DB, dest / CHROMA_DB, "the vector index's database", say)
    segments = [entry for entry in folder.iterdir() if entry.is_dir()]
    say(f"copying {len(segments)} vector segment folder(s) ({_megabytes(sum(map(_size, segments)))})")
    said = time.monotonic()
    for done, segment in enumerate(segments, 1):
        shutil.copytree(segment, dest / segment.name)
        if time.monotonic() - said > PROGRESS_EVERY_S:
            say(f"copied {done} of {len(segments)} vector segment folder(s)")
            said = time.monotonic()
    for entry in folder.iterdir():  # -journal, -wal, -shm: the backup API read through them
        if entry.is_file() and not entry.name.startswith(CHROMA_DB):
            shutil.copy2(entry, dest / entry.name)


def _copy_sqlite(source: Path, dest: Path, what: str, say: Progress) -> None:
    """SQLite's online backup in one step: the copy is one committed state, whatever writes meanwhile."""
    wal = source.with_name(f"{source.name}-wal")
    say(f"copying {what} ({_megabytes(sum(f.stat().st_size for f in (source, wal) if f.exists()))})")
    with (
        contextlib.closing(sqlite3.connect(source, timeout=60)) as src,
        contextlib.closing(sqlite3.connect(dest)) as dst,
    ):
        src.backup(dst)


def _checked(staged: Path, copied: Path, encoder: Encoder | None, say: Progress) -> tuple[int, int]:
    """Open the copy of ``copied`` (repair indexes what it caught pending) and check it clean.

    Returns the users and records it holds.

    Raises:
        StoreError: SQL and the vectors of the copy disagree after the repair.
    """
    say("checking the copy: every vector reads back")
    store = Store.open(staged, encoder=encoder)
    try:
        report = store.check()
        if not report.ok:
            found = ", ".join(
                f"{name.replace('_', ' ')}: {sum(map(len, v.values())) if isinstance(v, dict) else len(v)}"
                for name, v in vars(report).items()
                if v
            )
            raise StoreError(
                f"the copy of {copied} did not check clean ({found}); nothing was kept. "
                f"`personamem --store {copied} check --repair` fixes what it was copied from"
            )
        return len(list(store.catalog.all_users())), store.catalog.count()
    finally:
        store.close()


def _move_into_place(staged: Path, source: Path, target: Path) -> None:
    """Give ``staged`` the name ``target``, or its entries to the folder ``target`` (free or forced).

    A new folder gets ``source``'s permissions (a temporary folder is private to its owner). A folder
    that exists keeps itself (it may be a mount point) and what is not the store's; the store's
    entries are replaced, so a restore cut short there is finished by running it again.
    """
    if not target.exists():
        staged.chmod(source.stat().st_mode & 0o777)
        staged.replace(target)
        return
    for entry in _store_entries(target):
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for entry in staged.iterdir():
        shutil.move(entry, target / entry.name)


def _store_entries(folder: Path) -> list[Path]:
    """What of ``folder`` is a store's: its databases, vector folder, their locks, adapters, backup.json."""
    return [
        entry
        for entry in folder.iterdir()
        if entry.name.startswith((SQL_FILE, f"{VECTOR_DIR}."))
        or entry.name in (VECTOR_DIR, ADAPTERS_DIR, BACKUP_INFO)
    ]


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"
