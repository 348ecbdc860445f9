"""The real-browser harness (personamem.testing.browser) against a real HTTP server on 127.0.0.1.

The page renders text, runs a local script, and tries to reach the internet four ways (a script tag, an
image, fetch() and a WebSocket); the harness must show the text, let the local script run, block and
record every external attempt, and report a first paint.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from personamem.testing.browser import CHROMIUM_MISSING, browser_page, chromium_path, first_paint_ms

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>harness</title></head>
<body>
<h1>Memories of ana</h1>
<p id="local">local script did not run</p>
<p id="fetch">fetch pending</p>
<img src="https://cdn.example.org/logo.png" alt="">
<script src="/local.js"></script>
<script src="https://example.com/x.js"></script>
</body></html>
"""

LOCAL_JS = """
document.getElementById('local').textContent = 'local script ran';
fetch('https://api.example.net/track', {mode: 'no-cors'}).then(
    () => { document.getElementById('fetch').textContent = 'fetch reached the internet'; },
    () => { document.getElementById('fetch').textContent = 'fetch blocked'; });
try { new WebSocket('wss://ws.example.com/live'); } catch (e) {}
"""

EXTERNAL = {
    "https://example.com/x.js",
    "https://cdn.example.org/logo.png",
    "https://api.example.net/track",
    "wss://ws.example.com/live",
}


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def site(tmp_path: Path) -> Iterator[str]:
    """A static site served by http.server on 127.0.0.1 (port 0: the kernel picks a free one)."""
    root = tmp_path / "site"
    root.mkdir()
    (root / "index.html").write_text(PAGE, encoding="utf-8")
    (root / "local.js").write_text(LOCAL_JS, encoding="utf-8")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.enable_socket
@pytest.mark.skipif(chromium_path() is None, reason=CHROMIUM_MISSING)
def test_page_renders_locally_and_every_external_request_is_blocked(site: str, tmp_path: Path) -> None:
    with browser_page(site) as (page, requests):
        page.goto("/index.html")
        assert page.get_by_role("heading").inner_text() == "Memories of ana"
        assert page.get_by_role("heading").is_visible()
        page.wait_for_function("document.getElementById('fetch').textContent !== 'fetch pending'")
        assert page.locator("#local").inner_text() == "local script ran"
        assert page.locator("#fetch").inner_text() == "fetch blocked"
        deadline = time.monotonic() + 5  # the WebSocket is opened last, asynchronously
        while not set(requests.blocked) >= EXTERNAL and time.monotonic() < deadline:
            page.wait_for_timeout(50)

        paint = first_paint_ms(page)
        shot = tmp_path / "page.png"
        page.screenshot(path=shot, full_page=True)

    assert set(requests.blocked) == EXTERNAL
    assert {f"{site}/index.html", f"{site}/local.js"} <= set(requests)
    assert set(requests) >= EXTERNAL  # the log holds every attempt, blocked or not
    assert [u for u in requests if not u.startswith(site) and u not in EXTERNAL] == []
    assert 0 < paint < 15_000
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 1000


def test_a_base_url_outside_the_allowed_hosts_is_refused() -> None:
    with pytest.raises(ValueError, match="allowed hosts"), browser_page("https://example.com"):
        pass


def test_no_chromium_names_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERSONAMEM_CHROMIUM", "/nonexistent/chromium")
    assert chromium_path() is None
    with pytest.raises(RuntimeError, match="apt-get install -y chromium"), browser_page("http://127.0.0.1:1"):
        pass
