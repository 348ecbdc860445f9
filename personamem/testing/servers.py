"""Real servers on 127.0.0.1 for tests and benchmarks: ``chroma run`` and ``personamem serve``.

Each is a context manager that starts the process on a free port, waits until it answers, yields
its URL and stops it; the process's output goes to a log file in the given folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Served", "chroma_server", "free_port", "mcp_client", "personamem_serve", "personamem_server"]


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _serving(
    command: Sequence[str], ready_url: str, log_file: Path, env: dict[str, str] | None
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` until the block ends, once ``ready_url`` answers; its output goes to ``log_file``.

    Yields the process, which the block may signal or wait for itself (then nothing is left to stop).
    """
    with log_file.open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    with urllib.request.urlopen(ready_url, timeout=2):
                        break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(
                            f"{command[0]} did not start: {log_file.read_text(errors='replace')[-3000:]}"
                        ) from None
                    time.sleep(0.2)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def chroma_server(folder: Path) -> Iterator[str]:
    """A Chroma server (the ``chroma`` executable chromadb ships) keeping its data in ``folder``."""
    exe = shutil.which("chroma", path=str(Path(sys.executable).parent)) or shutil.which("chroma")
    if exe is None:
        raise RuntimeError("the `chroma` executable (shipped with chromadb) was not found")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [exe, "run", "--path", str(folder / "db"), "--host", "127.0.0.1", "--port", str(port)]
    folder.mkdir(parents=True, exist_ok=True)
    with _serving(command, f"{url}/api/v2/heartbeat", folder / "chroma.log", None):
        yield url


@dataclass(frozen=True)
class Served:
    """A running ``personamem serve``: its URL, its process (the uvicorn supervisor) and its log."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path


@contextlib.contextmanager
def personamem_serve(
    folder: Path, *options: str, workers: int = 1, serve_options: Sequence[str] = ()
) -> Iterator[Served]:
    """``personamem [options] serve [serve_options]`` on a free port; ``options`` are the store options.

    ``folder`` holds the log (and is the ``--store`` unless ``options`` name another);
    ``serve_options`` are the command's own (``--allow-method fast=pipeline:fast.toml``). For a test
    that signals the server; :func:`personamem_server` is the same, yielding only the URL.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable, "-m", "personamem", "--store", str(folder), *options,
        "serve", "--port", str(port), "--workers", str(workers), "--log-level", "warning", *serve_options,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    folder.mkdir(parents=True, exist_ok=True)
    with _serving(command, f"{url}/v1/health", folder / "server.log", env) as process:
        yield Served(url, process, folder / "server.log")


@contextlib.contextmanager
def personamem_server(
    folder: Path, *options: str, workers: int = 1, serve_options: Sequence[str] = ()
) -> Iterator[str]:
    """:func:`personamem_serve`, yielding only the URL."""
    with personamem_serve(folder, *options, workers=workers, serve_options=serve_options) as served:
        yield served.url


@contextlib.asynccontextmanager
async def mcp_client(url: str, key: str) -> AsyncIterator[Any]:
    """An MCP client session with a ``personamem serve`` at ``url`` (its ``/mcp``), using API key ``key``.

    Needs the ``mcp`` extra; returns the mcp SDK's ``Client``.
    """
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        yield client
