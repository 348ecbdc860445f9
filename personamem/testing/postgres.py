"""A throwaway PostgreSQL cluster on a Unix socket, for tests and benchmarks that need a real server.

The server binaries come from the system (``initdb`` and ``pg_ctl`` on PATH) or else from the
``pgserver`` wheel in the ``dev`` extra, which ships them inside its package folder; so CI machines
without PostgreSQL still run the Postgres tests. The cluster listens on no TCP port (a socket in a
fresh folder under the system temp dir: a socket path must stay under about 100 bytes, which
pytest's ``tmp_path`` can exceed) and runs with ``fsync`` off, since its data is thrown away.
PostgreSQL refuses to run as root, so as root the cluster runs as ``nobody`` through ``runuser``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PostgresCluster", "find_postgres", "postgres_cluster"]

_RUN_AS = "nobody"
_databases = itertools.count()


@dataclass(frozen=True)
class PostgresBinaries:
    """The folder holding ``initdb`` and ``pg_ctl``, and where it came from (for messages)."""

    folder: Path
    source: str

    def tool(self, name: str) -> str:
        """The path of one of the server's programs."""
        return str(self.folder / name)

    def has_extension(self, name: str) -> bool:
        """Whether this installation ships extension ``name`` (``vector`` is pgvector).

        Read from ``pg_config --sharedir`` beside the binaries (or beside what a symlinked
        ``initdb`` points to, as Debian's ``/usr/local/bin`` links do).
        """
        for folder in (self.folder, Path(self.tool("initdb")).resolve().parent):
            config = folder / "pg_config"
            if os.access(config, os.X_OK):
                found = subprocess.run([str(config), "--sharedir"], capture_output=True, text=True)
                share = Path(found.stdout.strip())
                return found.returncode == 0 and (share / "extension" / f"{name}.control").is_file()
        return False


def find_postgres(extension: str | None = None) -> PostgresBinaries | None:
    """The system's server binaries when both are on PATH, else the pgserver wheel's; None if neither.

    Both programs are taken from one folder, so a cluster is never made by one version and run by
    another. With ``extension``, only an installation that ships it counts (the wheel has pgvector).
    """
    found: list[PostgresBinaries] = []
    initdb = shutil.which("initdb")
    if initdb is not None and (Path(initdb).parent / "pg_ctl").is_file():
        found.append(PostgresBinaries(Path(initdb).parent, "PATH"))
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.submodule_search_locations:
        folder = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
        if all(os.access(folder / name, os.X_OK) for name in ("initdb", "pg_ctl", "postgres")):
            found.append(PostgresBinaries(folder, "the pgserver wheel"))
    return next((b for b in found if extension is None or b.has_extension(extension)), None)


@dataclass(frozen=True)
class PostgresCluster:
    """A running cluster: its socket folder, how to reach or add a database, and how to restart it."""

    socket_dir: str
    binaries: PostgresBinaries
    control: tuple[str, ...] = ()  # pg_ctl on the data folder, as the cluster's user
    options: str = ""  # the server options it starts with
    log: Path | None = None

    def url(self, database: str = "postgres") -> str:
        """A SQLAlchemy URL (psycopg 3) for ``database`` over the Unix socket."""
        return f"postgresql+psycopg://postgres@/{database}?host={self.socket_dir}"

    def create_database(self, name: str | None = None) -> str:
        """Create a fresh database (named ``t<n>`` unless given); return its SQLAlchemy URL."""
        import psycopg

        name = name or f"t{next(_databases)}"
        with psycopg.connect(
            f"host={self.socket_dir} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Stop the server as an operator's restart does: ``pg_ctl stop -m fast`` ends every session."""
        _run([*self.control, "-m", "fast", "-w", "stop"], "pg_ctl stop", self.log)

    def start(self) -> None:
        """Start the (stopped) server on its socket and data; return once it accepts connections."""
        start = [*self.control, "-o", self.options, "-l", str(self.log), "-w", "start"]
        _run(start, "pg_ctl start", self.log)


def _run(command: Sequence[str], what: str, log: Path | None = None) -> None:
    """Run a server program; on failure raise with its output (and the server log), not just its status."""
    try:
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)
    except subprocess.CalledProcessError as error:
        logged = log.read_text(errors="replace")[-3000:] if log is not None and log.is_file() else ""
        raise RuntimeError(
            f"{what} failed ({' '.join(command)}):\n{error.stdout}{error.stderr}{logged}"
        ) from error


def _check_runnable_as(user: str, binaries: PostgresBinaries) -> None:
    """Fail clearly when ``user`` cannot reach the binaries (a venv under a 0700 home, say).

    ``postgres --version`` loads the program and its shared libraries; initdb then reads the
    ``share`` files, and a failure there comes back with its output from :func:`_run`.
    """
    probe = subprocess.run(
        ["runuser", "-u", user, "--", binaries.tool("postgres"), "--version"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        raise RuntimeError(
            f"PostgreSQL refuses to run as root, and user {user!r} cannot run the server binaries from "
            f"{binaries.source} in {binaries.folder}: {probe.stderr.strip()}. Let others read and enter "
            "that folder and its parents (chmod o+rx), or run the tests as a non-root user."
        )


@contextlib.contextmanager
def postgres_cluster(binaries: PostgresBinaries | None = None) -> Iterator[PostgresCluster]:
    """Start a cluster that listens only on a Unix socket in a fresh folder; stop and delete it after.

    Raises:
        RuntimeError: no server binaries were found, or the cluster did not start (with its output).
    """
    binaries = binaries or find_postgres()
    if binaries is None:
        raise RuntimeError('no PostgreSQL server binaries: install them, or pip install "personamem[dev]"')
    as_user: list[str] = []
    if os.geteuid() == 0:
        _check_runnable_as(_RUN_AS, binaries)
        as_user = ["runuser", "-u", _RUN_AS, "--"]
    base = Path(tempfile.mkdtemp(prefix="personamem-pg-"))
    data, log = base / "data", base / "log"
    initdb = [*as_user, binaries.tool("initdb"), "-D", str(data)]
    pg_ctl = [*as_user, binaries.tool("pg_ctl"), "-D", str(data)]
    started = False
    try:
        if as_user:
            shutil.chown(base, _RUN_AS)
        _run([*initdb, "-A", "trust", "-U", "postgres", "--no-sync"], "initdb")
        options = f"-k {base} -c listen_addresses='' -c fsync=off"
        cluster = PostgresCluster(str(base), binaries, tuple(pg_ctl), options, log)
        started = True  # a failed start may still leave a server behind: stop it below either way
        cluster.start()
        yield cluster
    finally:
        if started:
            subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)
