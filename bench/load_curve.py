"""A flood of clients on ``personamem serve --workers 2``: the load curve from 1 to 64, a soak, a drain.

A tenant's embedded store of ``--users`` x ``--per-user`` realistic records is built once. Then
``personamem serve --workers 2`` (a real process) takes, from clients that each hold their own
connection (``AsyncClient``, one event loop in this process):

1. steps of 1, 4, 16 and 64 concurrent clients (``--clients``), ``--step-seconds`` each, every client
   looping over a mix of calls: add 30 %, search 30 %, context 25 %, feedback 15 % (on a call it made
   earlier, naming the first record it was served); per operation the count, p50 and p99;
2. the soak: the largest step kept for ``--soak-minutes``, the workers' resident memory sampled as it
   runs (bounded: the last sample against the first);
3. the drain: SIGTERM to the supervisor while those clients run, as an orchestrator stopping a pod;
   the server must exit 0 and every add it acknowledged must be in the store afterwards.

Errors are counted per kind: a 429 (a key's rate; ``--rate`` gives the key one) is expected under
load, anything else is a failure, as is a lost acknowledged add. The verdict is the number of
non-429 errors from the largest step, the soak and the drain (target 0). Everything is loopback on
one machine, so the clients and the two workers share its cores: the latencies include the queueing
that sharing causes. ``--out`` keeps the figures as JSON.

    python bench/load_curve.py [--clients 1,4,16,64] [--step-seconds 30] [--soak-minutes 5] [--store DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil
from _common import QUERIES, fill_users, log, realistic_text
from harness import arguments, gate

from personamem import PersonaMem
from personamem.client import AsyncClient
from personamem.errors import RateLimitedError, RemoteError
from personamem.testing.servers import Served, personamem_serve

TENANT = "bench"
MIX = {"add": 0.30, "search": 0.30, "context": 0.25, "feedback": 0.15}


@dataclass
class Tally:
    """What one phase's clients saw: latencies per operation, 429s, other errors, acknowledged adds."""

    seconds: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    limited: int = 0
    errors: list[str] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)

    def calls(self) -> int:
        return sum(map(len, self.seconds.values()))


async def one_client(
    url: str, key: str, users: list[str], seed: int, stop: asyncio.Event, tally: Tally, draining: bool = False
) -> None:
    """Loop over the mix until ``stop``; ``draining``: a call the closed server never answered ends it."""
    rng = random.Random(seed)
    served: list[tuple[str, str]] = []  # (interaction id, first record id) of this client's reads
    async with AsyncClient(url, key, timeout=120, retry_seconds=0) as client:
        while not stop.is_set():
            operation = rng.choices(list(MIX), weights=list(MIX.values()))[0]
            if operation == "feedback" and not served:
                operation = "search"
            user, start = rng.choice(users), time.perf_counter()
            try:
                if operation == "add":
                    record = await client.add(user, realistic_text(rng))
                    tally.acknowledged.append(f"{user}/{record.id}")
                elif operation == "feedback":
                    interaction, first = served.pop(rng.randrange(len(served)))
                    await client.feedback(interaction, used_record_ids=[first])
                else:
                    query = rng.choice(QUERIES)
                    if operation == "search":
                        answer = await client.search(user, query, k=5)
                        ids, interaction = [h.record.id for h in answer], answer.interaction_id
                    else:
                        context = await client.context(user, query)
                        ids, interaction = [h.record.id for h in context.hits], context.interaction_id
                    if interaction and ids:
                        served = [*served[-20:], (interaction, ids[0])]
            except RateLimitedError:
                tally.limited += 1
                continue
            except RemoteError as exc:
                if draining and exc.status is None:
                    return  # the server has gone: this call was never acknowledged
                tally.errors.append(f"{operation}: {exc}")
                continue
            tally.seconds[operation].append(time.perf_counter() - start)


async def phase(url: str, key: str, users: list[str], clients: int, seconds: float, tally: Tally) -> None:
    stop = asyncio.Event()
    seeds = range(1000 * clients, 1000 * clients + clients)
    tasks = [asyncio.create_task(one_client(url, key, users, seed, stop, tally)) for seed in seeds]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)


def workers_rss_mib(served: Served) -> list[float]:
    """Resident memory of each worker process under the supervisor (uvicorn spawns them), MiB."""
    supervisor = psutil.Process(served.process.pid)
    return sorted(
        child.memory_info().rss / 2**20
        for child in supervisor.children()
        if "resource_tracker" not in " ".join(child.cmdline())
    )


async def soak(
    url: str, key: str, users: list[str], clients: int, minutes: float, served: Served, tally: Tally
) -> list[list[float]]:
    """The largest step for ``minutes``, sampling the workers' memory every 15 s."""
    samples = [workers_rss_mib(served)]
    running = asyncio.create_task(phase(url, key, users, clients, minutes * 60, tally))
    while not running.done():
        await asyncio.sleep(15)
        samples.append(workers_rss_mib(served))
        log(f"  soak: {tally.calls()} calls, {len(tally.errors)} errors, workers {samples[-1]} MiB")
    await running
    return samples


async def drain(users: list[str], key: str, clients: int, served: Served, tally: Tally) -> int:
    """SIGTERM while ``clients`` run; the supervisor's exit code."""
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(one_client(served.url, key, users, 99_000 + i, stop, tally, draining=True))
        for i in range(clients)
    ]
    await asyncio.sleep(10)
    served.process.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(served.process.wait, 120)
    stop.set()
    await asyncio.gather(*tasks)
    return code


def percentiles(values: list[float]) -> dict[str, float]:
    p50, p99 = np.percentile(values, [50, 99]) * 1000
    return {"n": len(values), "p50_ms": float(p50), "p99_ms": float(p99)}


def report(name: str, clients: int, seconds: float, tally: Tally, rss: list[float]) -> dict[str, object]:
    operations = {op: percentiles(v) for op, v in sorted(tally.seconds.items()) if v}
    row = {
        "phase": name, "clients": clients, "calls_per_s": tally.calls() / seconds,
        "limited_429": tally.limited, "errors": len(tally.errors), "workers_rss_mib": rss,
        "operations": operations,
    }  # fmt: skip
    cells = "  ".join(f"{op} {o['p50_ms']:.0f}/{o['p99_ms']:.0f}" for op, o in operations.items())
    log(f"{name}: {clients} clients, {row['calls_per_s']:.1f} calls/s, p50/p99 ms: {cells}, "
        f"{tally.limited} x 429, {len(tally.errors)} errors {tally.errors[:3]}")  # fmt: skip
    return row


async def run(
    args: argparse.Namespace, folder: Path, key: str, users: list[str]
) -> tuple[list[dict[str, object]], Tally, int, int]:
    """The steps, the soak and the drain on one server; (rows, the failures that count, exit code, lost)."""
    steps: list[int] = args.clients
    rows: list[dict[str, object]] = []
    failed, soaked, drained = Tally(), Tally(), Tally()  # failed: the largest step's
    with personamem_serve(folder / "server", "--store", str(folder / "store"), workers=2) as served:
        for clients in steps:
            tally = failed if clients == steps[-1] else Tally()
            await phase(served.url, key, users, clients, args.step_seconds, tally)
            rows.append(report("step", clients, args.step_seconds, tally, workers_rss_mib(served)))
        samples = await soak(served.url, key, users, steps[-1], args.soak_minutes, served, soaked)
        rows.append(report("soak", steps[-1], args.soak_minutes * 60, soaked, samples[-1]))
        rows[-1]["rss_samples_mib"] = samples
        code = await drain(users, key, steps[-1], served, drained)
        acked = len(drained.acknowledged)
        log(f"drain: exit code {code}, {acked} adds acknowledged, errors {drained.errors[:3]}")
    acknowledged = failed.acknowledged + soaked.acknowledged + drained.acknowledged
    with PersonaMem.open(folder / "store") as mem:
        tenant = mem.tenant(TENANT)
        lost = sum(1 for entry in acknowledged if tenant.get(*entry.split("/", 1)) is None)
        clean = mem.store.check().ok
    failed.errors += soaked.errors + drained.errors
    if not clean:
        failed.errors.append("check() found problems after the drain")
    return rows, failed, code, lost


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--clients", type=lambda s: [int(c) for c in s.split(",")], default=[1, 4, 16, 64])
    parser.add_argument("--step-seconds", type=float, default=30.0)
    parser.add_argument("--soak-minutes", type=float, default=5.0)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--per-user", type=int, default=50)
    parser.add_argument("--rate", type=int, default=None, help="the key's requests per minute (429s above)")
    parser.add_argument("--store", type=Path, default=None, help="keep the store (and the server log) here")
    parser.add_argument("--out", type=Path, default=None, help="write the figures here as JSON")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    folder = args.store or Path(tempfile.mkdtemp(prefix="personamem-flood-"))
    with PersonaMem.open(folder / "store") as mem:
        tenant = mem.tenant(TENANT)
        users = tenant.users() or fill_users(tenant, args.users, args.per_user, random.Random(args.seed))
        key, _ = mem.store.keys.create(TENANT, label="flood", rate=args.rate)
    rows, failed, code, lost = asyncio.run(run(args, folder, key, users))
    top = args.clients[-1]
    print(
        "| phase | clients | calls/s | "
        + " | ".join(f"{op} p50 / p99 ms" for op in MIX)
        + " | 429s | errors | workers' RSS MiB |"
    )
    print("|---|---|---|" + "---|" * len(MIX) + "---|---|---|")
    for row in rows:
        ops = row["operations"]
        cells = [f"{ops[op]['p50_ms']:.0f} / {ops[op]['p99_ms']:.0f}" if op in ops else "" for op in MIX]  # type: ignore[index,operator]
        rss = " + ".join(f"{v:.0f}" for v in row["workers_rss_mib"])  # type: ignore[attr-defined]
        print(f"| {row['phase']} | {row['clients']} | {row['calls_per_s']:.1f} | " + " | ".join(cells)
              + f" | {row['limited_429']} | {row['errors']} | {rss} |")  # fmt: skip
    samples = rows[-1]["rss_samples_mib"]
    print(
        f"soak: workers' memory {sum(samples[0]):.0f} MiB at its start, {sum(samples[-1]):.0f} MiB at its end"
    )  # type: ignore[index]
    print(f"drain: supervisor exit code {code}, {lost} of the acknowledged adds missing afterwards")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"rows": rows, "exit_code": code, "lost": lost, "errors": failed.errors}, indent=1)
        )
    bad = len(failed.errors) + lost + (code != 0)
    return gate(f"flood_non_429_errors_{top}_clients", bad, 0, digits=0)


if __name__ == "__main__":
    sys.exit(main())
