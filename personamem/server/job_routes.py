"""The REST routes of a tenant's bulk imports (write keys), under ``/v1/jobs``.

Not :class:`~personamem.contract.MemoryApi` operations (as the webhooks' routes are not): each
handler calls its tenant's ``jobs`` (:class:`~personamem.jobs.Jobs`), so a tenant sees and cancels
its own jobs only, and another tenant's job id is a 404 like an unknown one. An upload's body is
JSON Lines (``application/x-ndjson``), one record per line; a bad line is a 400 whose error names
it (``"line"``), and nothing of that upload is kept. The server's body limit (``serve
--max-body-mb``, 16 MiB by default) bounds one request, not a job: a bigger file goes up in chunks
(``open=true``, then ``POST /v1/jobs/{job_id}/lines`` for each chunk, then ``.../start``), which
``personamem import FILE --server URL`` does.
(No ``from __future__ import annotations``: FastAPI reads the handlers' annotations.)
"""

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from personamem.errors import IngestError, InvalidInputError
from personamem.jobs import Job
from personamem.memory import PersonaMem
from personamem.server.answers import answer, or_404
from personamem.server.auth import Writer

__all__ = ["jobs_router"]


class JobsOut(BaseModel):
    """``GET /v1/jobs``: the tenant's jobs, newest first."""

    jobs: list[Job]


jobs_router = APIRouter(tags=["jobs"])
"""The tenant's bulk imports (write keys and above)."""

_USER = Query(description="Owner of the lines that name no user_id.")


def _created(job: Job) -> Response:
    """202 for a queued job (201 for an open one), with ``Location`` where its progress is read."""
    return answer(job, 202 if job.state != "open" else 201, {"Location": f"/v1/jobs/{job.job_id}"})


async def _with_body(request: Request, call: Callable[[bytes], Job]) -> Job | JSONResponse:
    """``call`` of the request's body in a worker thread; a bad line is a 400 naming it."""
    body = await request.body()
    try:
        job: Job = await run_in_threadpool(call, body)
    except IngestError as exc:
        problem = str(exc).removeprefix(f"{exc.path}:{exc.line}: ")
        message = f"line {exc.line}: {problem}" if exc.line else problem
        error = {"type": "IngestError", "message": message, "line": exc.line}
        return JSONResponse({"error": error}, 400)
    return job


@jobs_router.post("/v1/jobs/import", status_code=202, response_model=Job)
async def submit_import(
    request: Request,
    tenant: Writer,
    user_id: Annotated[str | None, _USER] = None,
    open_: Annotated[bool, Query(alias="open", description="Wait for more lines before starting.")] = False,
) -> Response:
    """Import the body's records (JSON Lines) in the background: 202 with the job, at once."""
    done = await _with_body(
        request, lambda body: tenant.jobs.submit_import(body, user_id=user_id, start=not open_)
    )
    return done if isinstance(done, JSONResponse) else _created(done)


@jobs_router.post("/v1/jobs/{job_id}/lines", response_model=Job)
async def append_lines(
    job_id: str,
    request: Request,
    tenant: Writer,
    from_line: Annotated[int, Query(ge=1, description="The file's line number of the body's first line.")],
    user_id: Annotated[str | None, _USER] = None,
) -> Response:
    """Add the next chunk of the file to an open job; 409 if it is not open or not the next chunk."""

    def append(body: bytes) -> Job:
        return _append(tenant, job_id, body, from_line, user_id)

    done = await _with_body(request, append)
    return done if isinstance(done, JSONResponse) else answer(done)


def _append(tenant: PersonaMem, job_id: str, body: bytes, from_line: int, user_id: str | None) -> Job:
    or_404(lambda: tenant.jobs.get(job_id))
    try:
        return tenant.jobs.append(job_id, body, from_line=from_line, user_id=user_id)
    except InvalidInputError as exc:
        raise HTTPException(409, str(exc)) from None


@jobs_router.post("/v1/jobs/{job_id}/start", status_code=202, response_model=Job)
def start_job(job_id: str, tenant: Writer) -> Response:
    """Queue an open job once all its lines are in (a job already started is answered as it is)."""
    return _created(or_404(lambda: tenant.jobs.start(job_id)))


@jobs_router.get("/v1/jobs/{job_id}", response_model=Job)
def get_job(job_id: str, tenant: Writer) -> Response:
    """The job: state, progress, counts, per-line errors and times; 404 if not the tenant's."""
    return answer(or_404(lambda: tenant.jobs.get(job_id)))


@jobs_router.get("/v1/jobs", response_model=JobsOut)
def list_jobs(tenant: Writer, limit: int = 50) -> Response:
    """The tenant's jobs, newest first."""
    if not 1 <= limit <= 1000:
        raise InvalidInputError(f"limit must be 1 to 1000, got {limit}")
    return answer(JobsOut(jobs=list(tenant.jobs.list(limit))))


@jobs_router.delete("/v1/jobs/{job_id}", response_model=Job)
def cancel_job(job_id: str, tenant: Writer) -> Response:
    """Cancel a job that has not ended (records stored stay; its waiting lines are deleted)."""
    return answer(or_404(lambda: tenant.jobs.cancel(job_id)))
