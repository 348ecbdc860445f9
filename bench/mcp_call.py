"""What MCP adds to a ``recall``: the tool over stdio and over HTTP against the calls it wraps.

A store of ``--users`` users with ``--records`` realistic records each. One ``personamem mcp`` child
(stdio) and one ``personamem serve`` worker (HTTP, ``/mcp`` and the REST routes, one tenant's key) run
over it; in one process, for each iteration a (user, query) pair, round robin, timed one call at a time
in an order that rotates every iteration:

1. ``mem.search(user, query, k=5, method="dense")`` in this process: the SDK call ``recall`` makes;
2. the ``recall`` tool over stdio (the mcp SDK's client, one session);
3. the ``recall`` tool over streamable HTTP (the mcp SDK's client, one session, the tenant's key);
4. ``Client.search`` against the same server (REST): the HTTP call without MCP.

The gate is what MCP itself adds, on each transport: the worse of p50(stdio recall) / p50(SDK search)
and p50(HTTP recall) / p50(REST search). p50(HTTP recall) / p50(SDK search), which also holds the
HTTP server's own cost (``bench/server_load.py`` gates that at 1.5), is reported beside them. The
clients, the server and the stdio child share this machine's cores. The last stdout line is
``mcp_call: R (target <= 1.3)``; the exit status is 1 when R exceeds it.

    python bench/mcp_call.py [--users 20] [--records 200] [--iters 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _common import QUERIES, fill_users, log
from harness import arguments, gate, median_ratio

TARGET = 1.3
TENANT = "bench"


async def run(args: argparse.Namespace, folder: Path) -> dict[str, list[float]]:
    import httpx2
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    from personamem import PersonaMem
    from personamem.client import Client as RestClient
    from personamem.encoder import default_encoder
    from personamem.testing.servers import personamem_server

    rng = random.Random(args.seed)
    with PersonaMem.open(folder / "store", encoder=default_encoder()) as mem:
        tenant = mem.tenant(TENANT)
        users = fill_users(tenant, args.users, args.records, rng)
        key, _ = mem.store.keys.create(TENANT, label="bench")
        stdio = StdioServerParameters(
            command=sys.executable,
            args=["-m", "personamem", "--store", str(folder / "store"), "mcp", "--tenant", TENANT],
            env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        )
        log("[setup] starting `personamem mcp` (stdio) and `personamem serve` (HTTP)")
        with (
            open(os.devnull, "w") as quiet,
            personamem_server(folder / "server", "--store", str(folder / "store")) as url,
            RestClient(url, key) as rest,
        ):
            async with (
                Client(stdio_client(stdio, errlog=quiet)) as over_stdio,  # its stderr: loading bars
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
                Client(streamable_http_client(f"{url}/mcp", http_client=http)) as over_http,
            ):

                async def recall(client: Any, user: str, query: str) -> None:
                    result = await client.call_tool("recall", {"user_id": user, "query": query, "k": 5})
                    assert not result.is_error and result.structured_content["hits"], result

                async def sdk(user: str, query: str) -> None:
                    tenant.search(user, query, k=5, method="dense")

                async def rest_search(user: str, query: str) -> None:
                    rest.search(user, query, k=5, method="dense")

                variants: dict[str, Callable[[str, str], Awaitable[None]]] = {
                    "SDK search (in process)": sdk,
                    "MCP recall over stdio": lambda u, q: recall(over_stdio, u, q),
                    "MCP recall over HTTP": lambda u, q: recall(over_http, u, q),
                    "REST search (Client)": rest_search,
                }
                log("[setup] warm-up: every user and query once through each variant")
                for user in users:
                    for query in QUERIES:
                        for call in variants.values():
                            await call(user, query)
                times: dict[str, list[float]] = {name: [] for name in variants}
                order = list(variants)
                for i in range(args.iters):
                    user, query = users[i % len(users)], QUERIES[(i * 7) % len(QUERIES)]
                    shift = i % len(order)  # each variant takes each position equally often
                    for name in order[shift:] + order[:shift]:
                        start = time.perf_counter()
                        await variants[name](user, query)
                        times[name].append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--records", type=int, default=200, help="records per user")
    parser.add_argument("--iters", type=int, default=200, help="timed calls per variant")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="personamem-bench-") as tmp:
        times = asyncio.run(run(args, Path(tmp)))
    sdk, stdio = times["SDK search (in process)"], times["MCP recall over stdio"]
    http, rest = times["MCP recall over HTTP"], times["REST search (Client)"]
    for name, values in times.items():
        ms = sorted(v * 1000 for v in values)
        print(f"{name:<26} p50 {statistics.median(ms):6.2f} ms  p95 {ms[int(0.95 * (len(ms) - 1))]:6.2f} ms")
    over_stdio, over_http, http_vs_sdk = (
        median_ratio(stdio, sdk),
        median_ratio(http, rest),
        median_ratio(http, sdk),
    )
    print(f"stdio recall / SDK search: {over_stdio:.2f}")
    print(f"HTTP recall / REST search: {over_http:.2f}")
    print(f"HTTP recall / SDK search: {http_vs_sdk:.2f} (reported, not gated)")
    return gate("mcp_call", max(over_stdio, over_http), TARGET, digits=2)


if __name__ == "__main__":
    sys.exit(main())
