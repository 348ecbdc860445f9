"""The everyday reads and erasure: ``search``, ``context``, ``users``, ``forget``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

import typer
from rich.table import Table

from personamem.cli.options import config_options, runtime_option
from personamem.console import err, out
from personamem.contract import SearchResult, hit_json
from personamem.errors import InvalidInputError
from personamem.llm.base import Usage
from personamem.llm.load import Runtime
from personamem.methods import method_help
from personamem.pipeline import PipelineConfig
from personamem.store.filters import parse_filters

_AS_OF = typer.Option(help="Answer from the facts current at this time (ISO 8601; UTC if naive).")
_ALL_VERSIONS = typer.Option("--include-superseded", help="Include superseded and not-yet-valid records.")
_FILTERS = typer.Option(
    help='Only records this JSON filter admits, e.g. \'{"metadata.topic": "food", "timestamp": {"gte": '
    '"2025-01-01"}}\' (fields kind, category, role, timestamp, valid_from, valid_until, metadata.<key>; '
    "operators eq, ne, in, nin, gt, gte, lt, lte, contains; and, or, not)."
)


def _filters(text: str | None) -> dict[str, Any] | None:
    """``--filters``' JSON, checked here so a mistake is a usage error naming the option."""
    if text is None:
        return None
    try:
        filters = json.loads(text)
        parse_filters(filters)
    except (ValueError, InvalidInputError) as exc:  # JSONDecodeError is a ValueError
        raise typer.BadParameter(str(exc), param_hint="--filters") from None
    return None if filters is None else dict(filters)


def _cost(timings_ms: Mapping[str, float], usage: Usage) -> str:
    """Time per stage and the tokens spent, as a read reports them on stderr (stdout stays the answer)."""
    cost = ", ".join(f"{stage} {ms:.0f} ms" for stage, ms in timings_ms.items())
    if usage.encoder_tokens:
        cost += f"; {usage.encoder_tokens} encoder tokens"
    if usage.total_tokens:
        cost += f"; {usage.total_tokens} LLM tokens"
    return cost


def search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="What to look for.")],
    user: Annotated[str, typer.Option(help="Whose memory to search.")],
    k: Annotated[int, typer.Option("-k", "--k", min=1, help="How many records.")] = 5,
    method: Annotated[
        str | None,
        typer.Option(
            help="Method (default: the pipeline this store serves: --config or ./personamem.toml, else what "
            f"'personamem improve' put live, else the package default): {method_help()}."
        ),
    ] = None,
    llm: Annotated[
        str | None, typer.Option(help="The frozen LLM for LLM methods (see 'eval --help').")
    ] = None,
    llm_runtime: Annotated[Runtime | None, runtime_option()] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON line per hit (the REST shape) instead of a table, and the call's usage "
            "and timings_ms as JSON on stderr.",
        ),
    ] = False,
    as_of: Annotated[str | None, _AS_OF] = None,
    include_superseded: Annotated[bool, _ALL_VERSIONS] = False,
    filters: Annotated[str | None, _FILTERS] = None,
) -> None:
    """Search one user's memory with any method (the facts current now, unless --as-of says when)."""
    chosen = _filters(filters)
    with ctx.obj.open(llm=llm, llm_runtime=llm_runtime) as mem:
        hits = mem.search(
            user, query, k, method, as_of=as_of, include_superseded=include_superseded, filters=chosen
        )
    if as_json:
        for hit in hits:  # one object per line, no wrapping
            typer.echo(json.dumps(hit_json(hit), ensure_ascii=False))
        cost = SearchResult.of(hits).model_dump(mode="json", include={"usage", "timings_ms"})
        typer.echo(json.dumps(cost), err=True)  # stderr, so stdout stays one hit a line
        return
    table = Table("rank", "score", "id", "kind", "text", title=f"{user}: {query}")
    for hit in hits:
        table.add_row(
            str(hit.rank), f"{hit.score:.3f}", hit.record.id, hit.record.kind.value, hit.record.text
        )
    out.print(table)
    err.print(f"{len(hits)} hit(s); {_cost(hits.timings_ms, hits.usage)}", highlight=False)


@config_options()
def context(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="The user's message.")],
    user: Annotated[str, typer.Option(help="Whose memory.")],
    method: Annotated[
        str | None,
        typer.Option(help="Run this method's stages over the configured pipeline (see 'search --help')."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the context as JSON (the REST API's shape).")
    ] = False,
    as_of: Annotated[str | None, _AS_OF] = None,
    include_superseded: Annotated[bool, _ALL_VERSIONS] = False,
    filters: Annotated[str | None, _FILTERS] = None,
    *,
    pipeline: PipelineConfig,
) -> None:
    """The context an LLM should see for a query: the pipeline's profile, within a token budget.

    The pipeline is --config's (or ./personamem.toml's); the pipeline options given here override it.
    """
    given = pipeline.model_dump(include=pipeline.model_fields_set)  # options given override the file
    chosen = _filters(filters)
    with ctx.obj.open(**given) as mem:
        result = mem.context(
            user, query, method=method, as_of=as_of, include_superseded=include_superseded, filters=chosen
        )
    if as_json:
        typer.echo(json.dumps(result.to_json(), ensure_ascii=False))
        return
    out.print(result.text or "(no records)", markup=False, highlight=False)
    err.print(
        f"{len(result.hits)} record(s), {result.tokens}/{result.budget_tokens} tokens; "
        + _cost(result.timings_ms, result.usage),
        highlight=False,
    )
    for note in result.warnings:
        err.print(f"[yellow]warning:[/yellow] {note}", highlight=False, soft_wrap=True)


def users(ctx: typer.Context) -> None:
    """List users and how many records each has."""
    with ctx.obj.open() as mem:
        table = Table("user", "records")
        for user_id in mem.users():
            table.add_row(user_id, str(mem.count(user_id)))
    out.print(table)


def forget(
    ctx: typer.Context,
    user: Annotated[str, typer.Option(help="The user to erase.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Erase a user: records, vectors and cached data, with no soft-deleted copy."""
    if not yes and not typer.confirm(f"Erase everything personamem holds about {user!r}?"):
        raise typer.Abort()
    with ctx.obj.open() as mem:
        found = mem.forget(user)
    out.print(f"forgot {user}" if found else f"no such user: {user}")
