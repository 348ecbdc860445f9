"""The inspector's pages in a real browser: from a click to the page's content, with 1,000 records.

A live ``personamem serve`` (a temporary store, one tenant, one user with ``--records`` records and a
logged context call) and Debian's Chromium driven by Playwright (``personamem.testing.browser``). Each
page is opened ``--rounds`` times by clicking its tab (Users, Memory, Calls, Playground, Reports) and
timed until its content is in the DOM; the JSON route behind the Memory page, fetched by httpx from
the same process, is printed beside it as the baseline the page adds to.

Gate (the issue's): every page's median <= 1,000 ms. The last stdout line is
``ui_pages_slowest_ms: X (target <= 1000)``; exit status 1 on a miss, 2 without Chromium.

    python bench/ui_pages.py [--records 1000] [--rounds 5]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import log
from harness import arguments, gate

TARGET_MS = 1000.0
PAGES = {  # tab -> what shows once the page has its data
    "Users": "#users-rows tr",
    "Memory": "#records-rows tr",
    "Calls": "#calls-list .call",
    "Reports": "#report-list li",
}


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import httpx

    from personamem.store import KeyRing
    from personamem.store.sql import SqlCatalog
    from personamem.testing.browser import CHROMIUM_MISSING, browser_page, chromium_path
    from personamem.testing.servers import personamem_server

    if chromium_path() is None:
        print(CHROMIUM_MISSING, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder) / "store"
        config = Path(folder) / "personamem.toml"
        config.write_text("[pipeline]\nlog_interactions = true\n")
        with personamem_server(store, "--config", str(config)) as url:
            catalog = SqlCatalog(f"sqlite:///{store / 'personamem.sqlite'}")
            key, _ = KeyRing(catalog).create("bench")
            catalog.close()
            http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300)
            log(f"[setup] {args.records} records for one user")
            notes = [
                {"text": f"note {i}: a day at the climbing gym, session {i}"} for i in range(args.records)
            ]
            http.post("/v1/records/batch", json={"user_id": "ana", "records": notes})
            http.post("/v1/context", json={"user_id": "ana", "query": "what do I do at the gym?"})
            spent: dict[str, list[float]] = {name: [] for name in [*PAGES, "Playground"]}
            json_ms = []
            with browser_page(url) as (page, requests):
                page.goto("/ui/")
                page.fill("#key", key)
                page.click("#login-form button")
                page.locator("#users-rows tr").first.wait_for()
                page.click("text=ana")
                page.locator("#records-rows tr").first.wait_for()
                for _ in range(args.rounds):
                    for tab, ready in PAGES.items():
                        page.evaluate(
                            "document.querySelectorAll('main tbody, #calls-list, #report-list')"
                            ".forEach((n) => n.replaceChildren())"
                        )
                        start = time.perf_counter()
                        page.click(f"#tabs >> text={tab}")
                        page.locator(ready).first.wait_for()
                        spent[tab].append((time.perf_counter() - start) * 1000)
                    page.click("#tabs >> text=Playground")
                    page.fill("#p-query", "climbing gym session 7")
                    page.evaluate("document.querySelector('#left').replaceChildren()")
                    start = time.perf_counter()
                    page.click("#compare-form button")
                    page.locator("#left tr >> nth=1").wait_for()
                    spent["Playground"].append((time.perf_counter() - start) * 1000)
                    start = time.perf_counter()
                    http.get("/v1/ui/records", params={"user_id": "ana", "limit": 100}).raise_for_status()
                    json_ms.append((time.perf_counter() - start) * 1000)
            http.close()
    if requests.blocked:
        print(f"requests left 127.0.0.1: {requests.blocked}", file=sys.stderr)
        return 1
    medians = {name: statistics.median(values) for name, values in spent.items()}
    for name, ms in medians.items():
        print(f"{name:10s} median {ms:7.1f} ms from click to content")
    print(f"the Memory page's JSON route alone (httpx): median {statistics.median(json_ms):.1f} ms")
    return gate("ui_pages_slowest_ms", max(medians.values()), TARGET_MS, digits=0)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
