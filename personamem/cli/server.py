"""``personamem serve`` and ``personamem keys``: run the REST server, and manage its API keys."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from personamem.console import err, out
from personamem.errors import MissingExtraError
from personamem.methods import ServedMethods
from personamem.settings import settings
from personamem.store.keys import KeyScope

__all__ = ["keys_app", "serve"]

# SQLite's WAL and our lock files need every process on one host: a store folder on these is unsafe
# for several workers (and for several machines, which no check here can see)
NETWORK_FILESYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "lustre", "fuse.sshfs", "afs"}
)


def network_filesystem(folder: Path, mounts: str | None = None) -> str | None:
    """The type of the network filesystem ``folder`` is on, or None (local, or not Linux).

    ``mounts`` is a ``/proc/self/mounts`` table (read when not given).
    """
    if mounts is None:
        try:
            mounts = Path("/proc/self/mounts").read_text()
        except OSError:
            return None
    target, best, kind = folder.resolve(), -1, ""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = Path(fields[1].replace("\\040", " "))
        if (target == point or point in target.parents) and len(point.parts) > best:
            best, kind = len(point.parts), fields[2]
    return kind if kind in NETWORK_FILESYSTEMS else None


keys_app = typer.Typer(
    help="API keys of the REST server: each key names one tenant, a scope and an optional rate.",
    no_args_is_help=True,
)


@keys_app.command("create")
def create_key(
    ctx: typer.Context,
    tenant: Annotated[str, typer.Option(help="The tenant the key opens (letters, digits, _ . -).")],
    label: Annotated[str, typer.Option(help="A note for listings, e.g. which service holds it.")] = "",
    scope: Annotated[
        KeyScope,
        typer.Option(
            help="What the key may do: read (search, context, records), write (read + add, update, "
            "delete, forget, import), admin (write + TTL, purge and the tenant's keys)."
        ),
    ] = KeyScope.WRITE,
    rate: Annotated[
        int | None,
        typer.Option(min=1, help="Most requests per minute, shared by all workers (bursts up to as many)."),
    ] = None,
) -> None:
    """Create a key; it is printed once and only its hash is kept."""
    with ctx.obj.open() as mem:
        key, listing = mem.store.keys.create(tenant, label=label, scope=scope, rate=rate)
    typer.echo(key)
    limit = f", {listing.rate} requests/minute" if listing.rate else ""
    err.print(
        f"key {listing.key_id} for tenant {listing.tenant} ({listing.scope.value}{limit}): store it now, "
        "it is not shown again"
    )


@keys_app.command("list")
def list_keys(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
) -> None:
    """List keys (ids, tenants, scopes, rates, when created and revoked; never the secrets)."""
    with ctx.obj.open() as mem:
        keys = mem.store.keys.list(tenant)
    table = Table("key id", "tenant", "scope", "rate/min", "label", "created", "revoked")
    for key in keys:
        rate = str(key.rate) if key.rate is not None else ""
        when = (key.created_at, key.revoked_at or "")
        table.add_row(key.key_id, key.tenant, key.scope.value, rate, key.label, *when)
    out.print(table)


@keys_app.command("revoke")
def revoke_key(ctx: typer.Context, key_id: Annotated[str, typer.Argument(help="The key's id.")]) -> None:
    """Revoke a key: every request with it gets 401 from then on, on every worker."""
    with ctx.obj.open() as mem:
        listing = mem.store.keys.revoke(key_id)
    out.print(f"revoked key {listing.key_id} of tenant {listing.tenant}")


def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Interface to listen on (0.0.0.0 for all).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes over the same store.")] = 1,
    max_body_mb: Annotated[float, typer.Option(min=0.001, help="Largest request body, MiB.")] = 16.0,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    drain_seconds: Annotated[
        int,
        typer.Option(
            min=0,
            help="On SIGTERM or Ctrl-C, how long to let requests in flight finish (new connections are "
            "refused at once) before closing what is left; then the store is closed cleanly.",
        ),
    ] = 30,
    reports: Annotated[
        Path | None, typer.Option(help="A folder of eval/train reports the inspector (/ui) lists.")
    ] = None,
    allow_method: Annotated[
        list[str] | None,
        typer.Option(
            help="Also serve this method (repeatable): a checkpoint or pipeline-file method as requests "
            "must write it (purple:/srv/ckpt/v3), or NAME=METHOD, which requests call NAME "
            "(fast=pipeline:/srv/fast.toml). Without it, requests may name the plain methods and the "
            "shipped adapters only, never a path."
        ),
    ] = None,
) -> None:
    """Serve the memory over HTTP (JSON routes under /v1, OpenAPI docs at /docs, the inspector at /ui).

    Needs API keys (`personamem keys create --tenant NAME`). The store options (--store, --sql-url,
    --chroma-url, --config) say what every worker opens. SIGTERM drains: requests in flight are
    answered (within --drain-seconds), then each worker closes its store. Several workers may share
    an embedded store on a local disk (each checks the others' writes on every search); on a
    network filesystem they are refused: use --sql-url and --chroma-url (PostgreSQL and a Chroma
    server).
    """
    try:
        import uvicorn
    except ImportError:
        raise MissingExtraError(["fastapi", "uvicorn"], "server") from None
    ServedMethods.allowing(allow_method or [])  # a bad entry is exit 2 here, not an error in every worker
    options = ctx.obj
    if workers > 1 and (kind := network_filesystem(Path(options.path))) is not None:
        from personamem.memory import vectors_in_database

        in_database = bool(options.sql_url) and vectors_in_database(options.path, options.sql_url)
        embedded = [
            part
            for part, remote in (("SQLite", options.sql_url), ("Chroma", options.chroma_url or in_database))
            if not remote
        ]
        if embedded:
            err.print(
                f"[red]error:[/red] --workers {workers} over a store folder on a network filesystem "
                f"({kind}, {options.path}): {' and '.join(embedded)} there need every process on one "
                "machine and a local disk. Move the store to a local disk, serve with --workers 1, or "
                "use --sql-url (PostgreSQL) and --chroma-url (a Chroma server)."
            )
            raise typer.Exit(2)
    with options.open() as mem:  # fail here, readably, rather than in every worker
        if not any(key.active for key in mem.inspection.keys.list()):
            err.print(
                "[yellow]warning:[/yellow] no API keys yet: every request will get 401; create one "
                "with `personamem keys create --tenant NAME`"
            )
    config = options.config_file
    given = settings()  # what this process was given, for the workers to inherit
    worker = given.model_copy(
        update={
            "store": options.path,
            "sql_url": options.sql_url,
            "chroma_url": options.chroma_url,
            "config": config.resolve() if config else None,
            "max_body_bytes": int(max_body_mb * 1024 * 1024),
            "allow_methods": allow_method or [],
            "reports": reports.resolve() if reports else given.reports,
        }
    )
    os.environ.update(worker.environ())  # the worker processes build their app from these
    uvicorn.run(
        "personamem.server.app:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        timeout_graceful_shutdown=drain_seconds,
    )
