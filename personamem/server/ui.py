"""The inspector's JSON routes (``/v1/ui/...``) and its page (``/ui``): what the memory did, per tenant.

The page is static (``server/static``: HTML, one script, one stylesheet; no build step, nothing
fetched from elsewhere) and holds no data: it asks for an API key once, keeps it in the tab's
session storage, and calls these routes with it, so every datum it shows passes the same key check
and tenant scope as the REST API. User ids travel in query strings and bodies, never in a path, as
in the REST routes; the page keeps the selected user in memory, not in its URL.

Every data route is a read: its memory parameter is ``Reader`` (:mod:`personamem.server.auth`), so
any key of the tenant may use the inspector. (No ``from __future__ import annotations``: FastAPI
reads the routes' annotations.)
"""

import mimetypes
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from personamem.contract import PreferenceAnswer, hit_json, record_json
from personamem.errors import InvalidInputError
from personamem.pipeline.config import PipelineConfig
from personamem.records import check_user_id
from personamem.request_models import MAX_K, MAX_QUERY
from personamem.server.auth import Reader
from personamem.settings import settings
from personamem.store.timeline import is_current

__all__ = ["install_ui"]

STATIC = Path(__file__).parent / "static"
_REPORT_SUFFIXES = {".json", ".md", ".png", ".txt", ".csv"}
_VALIDITY = ("current", "superseded", "all")


class CompareIn(BaseModel):
    """``POST /v1/ui/compare``: one query, two methods the server serves, side by side."""

    model_config = ConfigDict(extra="forbid")
    user_id: str
    query: str = Field(min_length=1, max_length=MAX_QUERY)
    left: str = "hybrid"
    right: str = "dense"
    k: int = Field(default=10, ge=1, le=MAX_K)


class UserEntry(BaseModel):
    """A user in the inspector's list: their record count and the time of their latest logged call."""

    user_id: str
    records: int
    last_call: str | None


class UserPage(BaseModel):
    """``GET /v1/ui/users``: how many users match, and a page of them."""

    count: int
    users: list[UserEntry]


class InspectorRecords(BaseModel):
    """``GET /v1/ui/records``: how many records match, their kinds, and a page of them."""

    count: int
    kinds: list[str]
    records: list[dict[str, Any]]


class NoMemories(BaseModel):
    """``GET /v1/ui/memory`` when the pipeline keeps no preference memory."""

    configured: Literal[False] = False


class StoredMemory(PreferenceAnswer):
    """``GET /v1/ui/memory``: the user's preference memory as last built (never building one)."""

    configured: Literal[True] = True


class Calls(BaseModel):
    """``GET /v1/ui/calls``: whether calls are logged, and the user's latest ones."""

    logging: bool
    calls: list[dict[str, Any]]


class Moved(BaseModel):
    """A record whose rank differs between the two methods (None: not in that method's top k)."""

    id: str
    left: int | None
    right: int | None


class RankingComparison(BaseModel):
    """``POST /v1/ui/compare``: each method's hits and the records that moved."""

    left: list[dict[str, Any]]
    right: list[dict[str, Any]]
    moved: list[Moved]


class Checkpoint(BaseModel):
    """A folder the pipeline loads a model from, and when it was last written (None: missing)."""

    stage: str
    name: str
    written: float | None


class PipelineView(BaseModel):
    """``GET /v1/ui/pipeline``: the live pipeline's settings, first stage, checkpoints and trials.

    ``trials``: the candidate on trial against it and the trials decided (``personamem/trials.py``).
    """

    config: dict[str, Any]
    first_stage: dict[str, Any]
    checkpoints: list[Checkpoint]
    trials: dict[str, Any]


class ReportFile(BaseModel):
    """A file under the reports folder: its path there, size and modification time."""

    path: str
    bytes: int
    modified: float


class Reports(BaseModel):
    """``GET /v1/ui/reports``: the reports folder (None: not configured) and its files."""

    folder: str | None
    reports: list[ReportFile]


router = APIRouter(prefix="/v1/ui", tags=["inspector"])


@router.get("/users")
def users(tenant: Reader, q: str = "", offset: int = 0, limit: int = 100) -> UserPage:
    """The tenant's users, their record counts and last logged call; ``q`` filters by substring."""
    _page(offset, limit)
    counts, last = tenant.inspection.record_counts(), tenant.inspection.last_calls()
    names = sorted(u for u in tenant.users() if q.lower() in u.lower())
    rows = [UserEntry(user_id=u, records=counts.get(u, 0), last_call=last.get(u)) for u in names]
    return UserPage(count=len(rows), users=rows[offset : offset + limit])


@router.get("/records")
def records(
    user_id: str,
    tenant: Reader,
    kind: str = "",
    category: str = "",
    validity: str = "all",
    offset: int = 0,
    limit: int = 100,
) -> InspectorRecords:
    """A page of the user's records by kind, category and validity (current, superseded, all)."""
    _page(offset, limit)
    if validity not in _VALIDITY:
        raise InvalidInputError(f"validity must be one of {', '.join(_VALIDITY)}, got {validity!r}")
    found = [
        r
        for r in tenant.records(check_user_id(user_id))
        if (not kind or r.kind.value == kind)
        and (not category or r.category == category)
        and (validity == "all" or is_current(r) == (validity == "current"))
    ]
    return InspectorRecords(
        count=len(found),
        kinds=sorted({r.kind.value for r in found}),
        records=[record_json(r) for r in found[offset : offset + limit]],
    )


@router.get("/memory")
def memory(user_id: str, tenant: Reader) -> StoredMemory | NoMemories:
    """The user's stored preference memory, read without the LLM (``stale``: records changed since)."""
    if tenant.pipeline().memories is None:
        return NoMemories()
    return StoredMemory.of(tenant.inspection.stored_memory(user_id))


@router.get("/calls")
def calls(user_id: str, tenant: Reader, limit: int = 50) -> Calls:
    """The user's latest logged search and context calls, newest first, with what the LLM was shown."""
    _page(0, limit)
    return Calls(logging=tenant.config.log_interactions, calls=tenant.inspection.calls(user_id, limit=limit))


@router.post("/compare")
def compare(body: CompareIn, tenant: Reader) -> RankingComparison:
    """Both methods' top k for one query, and each record's rank under each (``moved``: rank changes)."""
    user = check_user_id(body.user_id)
    left = tenant.search(user, body.query, k=body.k, method=body.left)
    right = tenant.search(user, body.query, k=body.k, method=body.right)
    rank_left = {h.record.id: h.rank for h in left}
    rank_right = {h.record.id: h.rank for h in right}
    moved = [
        Moved(id=rid, left=rank_left.get(rid), right=rank_right.get(rid))
        for rid in dict.fromkeys([*rank_left, *rank_right])
        if rank_left.get(rid) != rank_right.get(rid)
    ]
    return RankingComparison(
        left=[hit_json(h) for h in left], right=[hit_json(h) for h in right], moved=moved
    )


@router.get("/pipeline")
def pipeline(tenant: Reader) -> PipelineView:
    """The live pipeline: its settings, its first stage and why, and the checkpoints it loads."""
    config = tenant.config
    return PipelineView(
        config=config.model_dump(mode="json"),
        first_stage=tenant.pipeline().first_stage,
        checkpoints=_checkpoints(config),
        trials=tenant.trials.status(),
    )


@router.get("/reports")
def reports(tenant: Reader) -> Reports:
    """The report files (json, md, png...) under the server's reports folder, newest first."""
    root = _reports_root()
    if root is None:
        return Reports(folder=None, reports=[])
    rows = [
        ReportFile(path=str(p.relative_to(root)), bytes=stat.st_size, modified=stat.st_mtime)
        for p in root.rglob("*")
        if p.suffix in _REPORT_SUFFIXES and p.is_file() and (stat := p.stat())
    ]
    rows.sort(key=lambda row: row.modified, reverse=True)
    return Reports(folder=str(root), reports=rows[:500])


@router.get("/report")
def report(path: str, tenant: Reader) -> Response:
    """One report file's content (a path from ``/v1/ui/reports``; nothing outside the folder)."""
    root = _reports_root()
    target = (root / path).resolve() if root is not None else None
    if root is None or target is None or not target.is_relative_to(root) or not target.is_file():
        raise InvalidInputError(f"no report {path!r} in the reports folder")
    if target.suffix not in _REPORT_SUFFIXES:
        raise InvalidInputError(f"{path!r} is not a report file ({', '.join(sorted(_REPORT_SUFFIXES))})")
    media = mimetypes.guess_type(target.name)[0] or "text/plain"
    return Response(target.read_bytes(), media_type=media)


def install_ui(app: FastAPI) -> None:
    """Add the inspector's routes and page to ``app`` (behind the REST API's key check, read scope)."""
    app.include_router(router)
    app.mount("/ui", StaticFiles(directory=STATIC, html=True), name="ui")


def _page(offset: int, limit: int) -> None:
    if offset < 0 or not 1 <= limit <= 10_000:
        raise InvalidInputError(f"need offset >= 0 and 1 <= limit <= 10000, got {offset}, {limit}")


def _checkpoints(config: PipelineConfig) -> list[Checkpoint]:
    """The folders the pipeline loads models from, with when each was last written."""
    found = []
    for stage, value in (
        ("query_encoder", config.query_encoder),
        ("selector", config.selector),
        ("preference_memory", config.preference_memory),
        ("first_stage", config.first_stage),
    ):
        _, _, folder = value.partition(":")
        if folder and Path(folder).exists():
            path = Path(folder)
            found.append(Checkpoint(stage=stage, name=value, written=path.stat().st_mtime))
        elif folder:
            found.append(Checkpoint(stage=stage, name=value, written=None))
    return found


def _reports_root() -> Path | None:
    folder = settings().reports
    return folder.resolve() if folder is not None and folder.is_dir() else None
