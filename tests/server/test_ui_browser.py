"""The inspector in a real browser (Debian's Chromium via Playwright) against a live ``personamem serve``.

Each page is loaded, clicked through and asserted on by what it shows; a screenshot of each lands in
the test's temp folder; no request may leave 127.0.0.1. The time from a click to the page's content
with 1,000 records is printed (gated in ``bench/ui_pages.py``, not here).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from personamem.store import KeyRing
from personamem.store.sql import SqlCatalog
from personamem.testing.browser import CHROMIUM_MISSING, browser_page, chromium_path, first_paint_ms
from personamem.testing.servers import personamem_server

pytestmark = [
    pytest.mark.server,
    pytest.mark.enable_socket,
    pytest.mark.slow,
    pytest.mark.skipif(chromium_path() is None, reason=CHROMIUM_MISSING),
]
RECORDS = 1000


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    folder = tmp_path_factory.mktemp("store")
    reports = tmp_path_factory.mktemp("reports")
    (reports / "run").mkdir()
    (reports / "run" / "report.md").write_text("| method | recall@5 |\n|---|---|\n| dense | 0.750 |\n")
    config = folder.parent / f"{folder.name}.toml"
    config.write_text("[pipeline]\nlog_interactions = true\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PERSONAMEM_REPORTS", str(reports))
        with personamem_server(folder, "--config", str(config)) as url:
            catalog = SqlCatalog(f"sqlite:///{folder / 'personamem.sqlite'}")
            key, _ = KeyRing(catalog).create("acme")
            other, _ = KeyRing(catalog).create("other")
            catalog.close()
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
                notes = [
                    {"text": f"note {i}: a day at the climbing gym, session {i}"} for i in range(RECORDS - 2)
                ]
                facts = [
                    {"text": "I keep bees on my roof.", "kind": "knowledge"},
                    {"text": "ZQXDELETEME my old locker code is 4417", "id": "gone"},
                ]
                http.post("/v1/records/batch", json={"user_id": "ana", "records": [*facts, *notes]})
                http.post("/v1/records", json={"user_id": "bob", "text": "I collect film cameras."})
                http.post("/v1/context", json={"user_id": "ana", "query": "what are my hobbies?"})
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {other}"}, timeout=60) as http:
                http.post("/v1/records", json={"user_id": "zed", "text": "another tenant's secret"})
            yield url, key


def _timed(action: object, page: object, ready: str) -> float:
    start = time.perf_counter()
    action()  # type: ignore[operator]
    page.locator(ready).first.wait_for()  # type: ignore[attr-defined]
    return (time.perf_counter() - start) * 1000


def test_an_operator_clicks_through_every_page(
    served: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, key = served
    timings: dict[str, float] = {}
    with browser_page(url) as (page, requests):
        page.goto("/ui/")
        assert page.get_by_role("heading", name="API key").is_visible()
        page.fill("#key", key)
        timings["users"] = _timed(lambda: page.click("#login-form button"), page, "#users-rows tr")
        timings["first paint (login page)"] = first_paint_ms(page)
        assert page.locator("#users-count").inner_text() == "2 user(s)"
        assert "zed" not in page.locator("#users").inner_text()  # another tenant's user
        page.screenshot(path=tmp_path / "users.png", full_page=True)

        timings["memory"] = _timed(lambda: page.click("text=ana"), page, "#records-rows tr")
        assert page.locator("#records-count").inner_text() == f"{RECORDS} record(s)"
        assert page.locator("#records-rows tr").count() == 100  # a page of 100
        page.click("#next")
        page.wait_for_function("document.querySelector('#page-at').textContent.startsWith('101')")
        page.select_option("#f-validity", "current")
        page.fill("#f-category", "")
        page.click("#record-filter button[type=submit]")
        page.wait_for_function("document.querySelector('#page-at').textContent.startsWith('1–')")
        page.screenshot(path=tmp_path / "memory.png", full_page=True)

        page.once("dialog", lambda dialog: dialog.dismiss())  # a cancelled delete deletes nothing
        page.locator('tr[data-id="gone"] button.danger').click()
        page.wait_for_timeout(300)
        assert page.locator('tr[data-id="gone"]').count() == 1
        page.once("dialog", lambda dialog: dialog.accept())
        page.locator('tr[data-id="gone"] button.danger').click()
        page.wait_for_function(
            f"document.querySelector('#records-count').textContent === '{RECORDS - 1} record(s)'"
        )
        assert page.locator('tr[data-id="gone"]').count() == 0

        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            http.post("/v1/context", json={"user_id": "ana", "query": "do I keep any animals?"})
        timings["calls"] = _timed(lambda: page.click("#tabs >> text=Calls"), page, "#calls-list .call")
        newest, older = (page.locator("#calls-list .call").nth(i).inner_text() for i in (0, 1))
        assert newest.startswith("context ·") and "do I keep any animals?" in newest
        assert "I keep bees on my roof." in newest and "first_stage" in newest  # the text shown, timings
        assert "what are my hobbies?" in older and "ZQXDELETEME" not in older
        assert "dropped when a record" in older  # the delete dropped the text that may quote it
        page.screenshot(path=tmp_path / "calls.png", full_page=True)

        page.click("#tabs >> text=Playground")
        page.fill("#p-query", "bees on the roof")
        page.fill("#p-left", "bm25")
        page.fill("#p-right", "dense")
        timings["playground"] = _timed(lambda: page.click("#compare-form button"), page, "#left tr >> nth=1")
        assert page.locator("#left tr").nth(1).inner_text().endswith("I keep bees on my roof.")
        assert "moved" in page.locator("#moved").inner_text()
        page.screenshot(path=tmp_path / "playground.png", full_page=True)

        timings["reports"] = _timed(lambda: page.click("#tabs >> text=Reports"), page, "#report-list a")
        assert '"first_stage": "hybrid"' in page.locator("#pipeline").inner_text()
        page.click("#report-list a >> text=run/report.md")
        page.locator("#report-view pre").wait_for()
        assert "dense | 0.750" in page.locator("#report-view").inner_text()
        page.screenshot(path=tmp_path / "reports.png", full_page=True)

        page.click("#tabs >> text=Memory")
        page.once("dialog", lambda dialog: dialog.accept("not-ana"))  # a mistyped id forgets nothing
        page.click("#forget")
        page.wait_for_function("document.querySelector('#error').textContent.includes('not forgotten')")

    assert requests and requests.blocked == []
    assert all(u.startswith(url) for u in requests), [u for u in requests if not u.startswith(url)]
    assert {p.name for p in tmp_path.glob("*.png")} == {
        f"{n}.png" for n in ("users", "memory", "calls", "playground", "reports")
    }
    with capsys.disabled():
        print(
            "\ninspector, ms from click to content (1,000 records):",
            {k: round(v) for k, v in timings.items()},
        )


def test_a_refused_key_shows_the_login_again(served: tuple[str, str]) -> None:
    with browser_page(served[0]) as (page, requests):
        page.goto("/ui/")
        page.fill("#key", "pm_wrong")
        page.click("#login-form button")
        page.wait_for_function("document.querySelector('#login-error').textContent.includes('refused')")
        assert page.locator("#login").is_visible() and not page.locator("#users").is_visible()
    assert requests.blocked == []
