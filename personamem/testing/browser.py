"""A real headless Chromium for tests of the web pages the server serves (the ``/ui`` inspector).

Why this module and not ``pytest-playwright``: Playwright downloads its own browser builds from a CDN
(``playwright install``), which a CI box that reaches only PyPI and Debian's mirrors cannot do. So the
browser is the system's Chromium (Debian's ``chromium`` package, which ``.ci/run`` installs when it runs
as root), driven by Playwright through ``executable_path``. Where there is none, tests skip::

    pytestmark = pytest.mark.skipif(chromium_path() is None, reason=CHROMIUM_MISSING)

Why the request log: the inspector must work offline and must not phone home (no CDN fonts, scripts or
analytics), so :func:`browser_page` records every URL the page asks for and aborts any whose host is not
local; a test asserts ``requests.blocked == []``.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from personamem.settings import settings

if TYPE_CHECKING:  # Playwright is a dev dependency: importing this module must not need it
    from playwright.sync_api import Page, Route

__all__ = ["CHROMIUM_MISSING", "RequestLog", "browser_page", "chromium_path", "first_paint_ms"]

CHROMIUM_MISSING = (
    "no Chromium found: install Debian's package (`apt-get install -y chromium`), or set "
    "PERSONAMEM_CHROMIUM to a Chromium or Chrome executable (`playwright install` is not used)"
)

# Root in a container: Chromium's sandbox needs user namespaces that containers (and root) usually lack,
# and Docker's default /dev/shm is 64 MB, too small for the renderer's shared memory (it crashes).
_LAUNCH_ARGS = ("--no-sandbox", "--disable-dev-shm-usage")

# Schemes that never reach the network, so there is no host to check.
_LOCAL_SCHEMES = frozenset({"data", "blob", "about"})


def chromium_path() -> str | None:
    """The system Chromium to drive, or None where there is none (tests then skip).

    ``PERSONAMEM_CHROMIUM`` (a path or a command name) wins and is the only one tried when set, so a
    wrong value skips rather than silently testing another browser; else the first of ``chromium``,
    ``chromium-browser`` and ``google-chrome`` on ``PATH``.
    """
    chosen = settings().chromium
    if chosen:
        return shutil.which(chosen)
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found is not None:
            return found
    return None


class RequestLog(list[str]):
    """Every URL the page requested, in order (blocked ones included); ``blocked`` lists those aborted.

    A plain list of URLs so tests can search it; the URLs that would have left the allowed hosts are in
    ``blocked`` too, because the page *trying* to reach the internet is the bug a test wants to see.
    """

    def __init__(self) -> None:
        super().__init__()
        self.blocked: list[str] = []


def _allowed(url: str, hosts: Sequence[str]) -> bool:
    """Whether ``url`` stays on ``hosts`` (or never touches the network: data:, blob:, about:)."""
    parts = urlsplit(url)
    return parts.scheme in _LOCAL_SCHEMES or parts.hostname in hosts


@contextlib.contextmanager
def browser_page(
    base_url: str, *, allowed_hosts: Sequence[str] = ("127.0.0.1", "localhost")
) -> Iterator[tuple[Page, RequestLog]]:
    """A page in a fresh headless Chromium, and the log of every request it makes.

    Relative URLs resolve against ``base_url`` (``page.goto("/ui")``); the page has not navigated yet,
    so the log starts empty. Requests to any host outside ``allowed_hosts`` are aborted and recorded in
    ``log.blocked``, WebSockets included; service workers are off so that none escapes the routing.
    Playwright's timeouts are 15 s instead of 30 s, so that a missing element fails the test promptly.

    Raises:
        RuntimeError: there is no Chromium (see :data:`CHROMIUM_MISSING`) or Playwright is not installed.
        ValueError: ``base_url``'s own host is not allowed (every request would be blocked).
    """
    if not _allowed(base_url, allowed_hosts):
        raise ValueError(f"{base_url} is not on the allowed hosts {tuple(allowed_hosts)}")
    executable = chromium_path()
    if executable is None:
        raise RuntimeError(CHROMIUM_MISSING)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        raise RuntimeError(
            "Playwright is not installed: pip install -e '.[dev]' (or pip install playwright)"
        ) from exc

    log = RequestLog()

    def guard(route: Route) -> None:
        url = route.request.url
        if _allowed(url, allowed_hosts):
            route.continue_()
        else:
            log.blocked.append(url)
            route.abort("blockedbyclient")

    def is_external_socket(url: str) -> bool:
        if _allowed(url, allowed_hosts):
            return False
        log.append(url)  # a routed WebSocket fires neither "request" nor "websocket"
        log.blocked.append(url)
        return True

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=list(_LAUNCH_ARGS)
        )
        try:
            context = browser.new_context(base_url=base_url, service_workers="block")
            context.set_default_timeout(15_000)
            context.route("**/*", guard)
            context.route_web_socket(is_external_socket, lambda socket: socket.close())
            page = context.new_page()
            page.on("request", lambda request: log.append(request.url))
            page.on("websocket", lambda socket: log.append(socket.url))  # the allowed ones
            yield page, log
        finally:
            browser.close()


_PAINT_JS = """
(timeoutMs) => new Promise((resolve) => {
    const pick = () => {
        const entry = performance.getEntriesByName('first-contentful-paint')[0]
            || performance.getEntriesByName('first-paint')[0];
        return entry ? entry.startTime : null;
    };
    if (pick() !== null) return resolve(pick());
    const observer = new PerformanceObserver(() => {
        if (pick() !== null) { observer.disconnect(); resolve(pick()); }
    });
    observer.observe({type: 'paint', buffered: true});
    setTimeout(() => { observer.disconnect(); resolve(pick()); }, timeoutMs);
})
"""


def first_paint_ms(page: Page, *, timeout_ms: float = 5_000) -> float:
    """Milliseconds from navigation start to the page's first contentful paint (else its first paint).

    Read from the browser's Paint Timing API rather than timed from Python, so it excludes Playwright's
    own round trips; waits up to ``timeout_ms`` for the entry, since a page may not have painted yet.

    Raises:
        RuntimeError: the page did not paint within ``timeout_ms``.
    """
    value = page.evaluate(_PAINT_JS, timeout_ms)
    if value is None:
        raise RuntimeError(f"{page.url} did not paint within {timeout_ms:.0f} ms")
    return float(value)
