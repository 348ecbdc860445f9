"""A real webhook receiver for tests: an HTTP server on 127.0.0.1 that verifies and records deliveries.

Each path has its secret (``/acme`` for tenant acme's webhook...). A delivery whose signature
verifies is recorded and answered 204; one that does not is counted in ``refused`` and answered
400. ``fail_next`` answers that many deliveries 500 before taking any; ``stall_s`` makes the next
delivery taken wait that long before answering (``stalled`` is set once it is recorded), so a test
can kill the sender while a receiver holds an event it took. It stops and starts again on the same
port, as a restarted receiver would.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from personamem.errors import WebhookSignatureError
from personamem.webhooks import verify


class Receiver:
    """Records the events it accepted, by path, in arrival order (redeliveries included)."""

    def __init__(self, secrets: dict[str, str], port: int = 0) -> None:
        self.secrets = secrets
        self.port = port
        self.accepted: list[tuple[str, dict[str, Any]]] = []  # (path, event)
        self.refused = 0
        self.failed = 0
        self.fail_next = 0
        self.stall_s = 0.0
        self.stalled = threading.Event()
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, stall = receiver.take(self.path, body, dict(self.headers))
                if stall:
                    time.sleep(stall)
                with contextlib.suppress(OSError):  # the sender may be gone (killed) by now
                    self.send_response(status)
                    self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def take(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, float]:
        """The status to answer a delivery with, and how long to stall first."""
        with self.lock:
            if self.fail_next > 0:
                self.fail_next -= 1
                self.failed += 1
                return 500, 0.0
            try:
                event = verify(self.secrets[path], body, headers)
            except (WebhookSignatureError, KeyError):
                self.refused += 1
                return 400, 0.0
            self.accepted.append((path, event))
            stall, self.stall_s = self.stall_s, 0.0
            if stall:
                self.stalled.set()
            return 204, stall

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def events(self, path: str) -> list[dict[str, Any]]:
        with self.lock:
            return [event for where, event in self.accepted if where == path]

    def duplicates(self) -> int:
        """Deliveries beyond the first of each event id (at least once allows them)."""
        with self.lock:
            counts = Counter(event["id"] for _, event in self.accepted)
        return sum(n - 1 for n in counts.values())

    def wait_for(self, check: Any, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return True
            time.sleep(0.05)
        return bool(check())
