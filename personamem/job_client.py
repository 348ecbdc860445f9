"""A server's bulk-import routes over HTTP: send a JSONL file as one job, in chunks, and follow it.

What ``personamem import FILE --server URL`` uses. Not a method of :class:`~personamem.client.Client`:
the clients offer exactly the SDK's operations (:class:`~personamem.contract.MemoryApi`), and a job is
a server's, not something ``PersonaMem`` in process does the same way (there, ``mem.jobs``).

A file goes up in chunks of whole lines, each well under the server's body limit: one chunk makes a
queued job at once; more make an open job, add each chunk after it (``from_line`` says where it
starts in the file, so a chunk sent again after a lost answer is taken once) and start it when the
last is in. A chunk the server refuses (a bad line) cancels the job, so none of the file is stored.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from personamem import remote
from personamem.errors import IngestError, RemoteError
from personamem.jobs import Job
from personamem.remote import Request, error_from

__all__ = ["CHUNK_BYTES", "JobClient", "chunks"]

CHUNK_BYTES = 4 * 1024 * 1024
"""Bytes of whole lines per request: a quarter of the default body limit (a longer line goes alone)."""
RETRY_S = 30.0
"""How long a request that is safe to repeat is repeated while the server restarts."""


def chunks(path: Path, size: int = CHUNK_BYTES) -> Iterator[tuple[int, bytes]]:
    """The file's whole lines in pieces of about ``size`` bytes, each with its first line's number."""
    with path.open("rb") as handle:
        first, piece = 1, bytearray()
        for number, line in enumerate(handle, start=1):
            if piece and len(piece) + len(line) > size:
                yield first, bytes(piece)
                first, piece = number, bytearray()
            piece += line if line.endswith(b"\n") else line + b"\n"
        if piece:
            yield first, bytes(piece)


class JobClient:
    """The bulk-import routes of the server at ``base_url``, with a key of ``write`` scope or above."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 120.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"}
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> JobClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def submit(
        self,
        path: Path,
        *,
        user_id: str | None = None,
        chunk_bytes: int = CHUNK_BYTES,
        sent: Callable[[int], None] | None = None,
    ) -> Job:
        """Send a records JSONL as one job and start it; returns the job, ``queued``.

        ``sent`` is called with the bytes of each chunk once the server has it.

        Raises:
            IngestError: a line the server refused, naming the file and the line; nothing of the
                file is stored.
            RemoteError: the server could not be reached or failed.
        """
        if not path.is_file():
            raise IngestError("file not found", path=str(path))
        pieces = chunks(path, chunk_bytes)
        first = next(pieces, (1, b""))
        following = next(pieces, None)
        params = {"user_id": user_id} if user_id is not None else {}
        open_ = {"open": "true"} if following is not None else {}
        answer = self._send("POST", "/v1/jobs/import", path, params={**params, **open_}, content=first[1])
        job = Job.model_validate(answer)
        if sent is not None:
            sent(len(first[1]))
        if following is None:
            return job
        try:
            for from_line, piece in (following, *pieces):
                query = {**params, "from_line": from_line}
                self._send(
                    "POST", f"/v1/jobs/{job.job_id}/lines", path, params=query, content=piece, again=True
                )
                if sent is not None:
                    sent(len(piece))
        except BaseException:
            self._cancel_quietly(job.job_id)  # its lines are deleted with it
            raise
        return Job.model_validate(self._send("POST", f"/v1/jobs/{job.job_id}/start", path, again=True))

    def job(self, job_id: str) -> Job:
        """The job as the server has it now."""
        return Job.model_validate(self._send("GET", f"/v1/jobs/{job_id}", again=True))

    def cancel(self, job_id: str) -> Job:
        """Cancel the job (records stored stay); the job as it now is."""
        return Job.model_validate(self._send("DELETE", f"/v1/jobs/{job_id}", again=True))

    def follow(
        self, job_id: str, seen: Callable[[Job], None], *, poll_s: float = 1.0, patience_s: float = 120.0
    ) -> Job:
        """Poll the job until it ends, calling ``seen`` with each state; the job as it ended.

        A server that restarts meanwhile (the job resumes there) is waited for up to
        ``patience_s`` seconds at a time.
        """
        unreachable_since: float | None = None
        while True:
            try:
                job = self.job(job_id)
            except RemoteError as exc:
                if exc.status not in (None, 502, 503, 504):
                    raise
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since > patience_s:
                    raise
                time.sleep(poll_s)
                continue
            unreachable_since = None
            seen(job)
            if job.ended:
                return job
            time.sleep(poll_s)

    def _cancel_quietly(self, job_id: str) -> None:
        with contextlib.suppress(RemoteError):  # else the server cancels it itself after an hour idle
            self.cancel(job_id)

    def _send(
        self,
        method: str,
        url: str,
        path: Path | None = None,
        *,
        again: bool = False,
        params: Mapping[str, Any] | None = None,
        content: bytes | None = None,
    ) -> Any:
        """One request's JSON answer; ``again``: repeated while the server restarts (safe to send twice).

        Any transport error is retried, a refused connection too: a restarting server refuses connections.

        Raises:
            IngestError: the server refused a line of ``path`` (400 naming it).
            RemoteError: the server could not be reached, or answered another error.
        """
        request = Request(method, url, params=params, content=content, repeatable=again)
        return _json(remote.send(self._http, request, RETRY_S, (httpx.TransportError,)), path)


def _json(response: httpx.Response, path: Path | None) -> Any:
    """The answer's JSON, or the exception its error stands for."""
    if response.is_success:
        return response.json()
    error: dict[str, Any] = {}
    with contextlib.suppress(ValueError):
        error = dict(response.json().get("error") or {})
    if error.get("type") == "IngestError" and error.get("line") and path is not None:
        problem = str(error.get("message", "")).removeprefix(f"line {error['line']}: ")
        raise IngestError(problem, path=str(path), line=int(error["line"]))
    raise error_from(response.status_code, response)
