"""What the benchmarks share of their data: realistic record texts, the query list, logging to stderr.

Each script is run as ``python bench/NAME.py``, so ``bench/`` is on ``sys.path`` and they import
this module by name (``harness`` holds their parser, timing loop and verdict line); they never
import each other.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from personamem import Record
from personamem.datasets import BenchmarkName, DataSource
from personamem.encoder import Encoder

__all__ = ["QUERIES", "Pool", "fill_users", "ingest_through", "load_pool", "log", "realistic_text", "rss_mib"]

_OPENERS = [
    "I",
    "My wife and I",
    "My brother",
    "Our team",
    "My roommate",
    "My daughter",
    "Yesterday I",
    "Last summer we",
]
_ACTIONS = [
    "went hiking in the Alps",
    "adopted a rescue dog named Pepper",
    "started learning Portuguese on an app",
    "switched to a plant-based diet",
    "booked a cheap flight to Tokyo",
    "signed up for a pottery class",
    "bought a used road bike",
    "finished reading a long fantasy novel",
    "moved into a flat near the river",
    "ran a half marathon in the rain",
    "got a new job at a fintech startup",
    "planted tomatoes and basil on the balcony",
    "tried a Korean barbecue place downtown",
    "fixed the leaking kitchen sink",
    "renewed the car insurance",
    "watched the whole season in one weekend",
]
_DETAILS = [
    "It cost around {n} euros.",
    "It took {n} hours in total.",
    "I would definitely do it again.",
    "Honestly it was a bit disappointing.",
    "I am allergic to shellfish, so I had to be careful.",
    "My knee started hurting after {n} kilometers.",
    "We invited {n} friends over afterwards.",
    "The weather was terrible but we had fun.",
    "I paid with my travel credit card.",
    "Next time I want to bring my parents.",
    "The staff were really friendly.",
    "I need to remember to cancel the trial.",
]


def realistic_text(rng: random.Random) -> str:
    """1-3 short sentences about a user's life."""
    sentences = [f"{rng.choice(_OPENERS)} {rng.choice(_ACTIONS)}."]
    for _ in range(rng.randint(0, 2)):
        sentences.append(rng.choice(_DETAILS).format(n=rng.randint(2, 300)))
    return " ".join(sentences)


def fill_users(mem: Any, users: int, records: int, rng: random.Random) -> list[str]:
    """Add ``records`` realistic records for each of ``users`` users (``user-000``...); their ids."""
    names = [f"user-{u:03d}" for u in range(users)]
    log(f"[setup] ingesting {users} x {records} records")
    for user in names:
        mem.add_many([realistic_text(rng) for _ in range(records)], user_id=user)
    return names


def ingest_through(url: str, key: str, records: list[dict[str, str]], batch: int, errors: list[str]) -> None:
    """Add ``records`` through the server at ``url`` in ``add_many`` requests of ``batch``.

    For a thread of a scale-out bench: a failure is appended to ``errors`` (the bench fails on it).
    """
    from personamem.client import Client

    try:
        with Client(url, key, timeout=300) as client:
            for start in range(0, len(records), batch):
                client.add_many(records[start : start + batch])
    except Exception as error:
        errors.append(f"ingest via {url}: {error!r}")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


QUERIES = [
    "what should I cook for dinner tonight?",
    "where did I travel last spring?",
    "do I have any food allergies?",
    "which bicycle did I buy?",
    "when is my next dentist appointment?",
    "what music instrument am I learning?",
    "recommend a hotel for my trip to Kyoto",
    "what did my sister recommend?",
    "how much did the laptop cost?",
    "what gift should I buy for my partner's birthday?",
    "any vegetarian restaurants I liked downtown?",
    "what sports do I practice on weekends?",
    "which podcast did I review recently?",
    "did I cancel the car insurance?",
    "what camping gear do I own?",
    "plans for the marathon training",
    "things I bought second-hand",
    "what did we do in Lisbon?",
    "which coffee grinder did I order online?",
    "what did I repair at home last week?",
]


def rss_mib(port: int) -> float:
    """Resident memory of the process serving on ``port`` (Linux /proc), MiB."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"serve" in cmdline and str(port).encode() in cmdline:
                status = Path(f"/proc/{pid}/status").read_text()
                return int(next(ln for ln in status.splitlines() if ln.startswith("VmRSS")).split()[1]) / 1024
        except (OSError, StopIteration):
            continue
    return float("nan")


@dataclass(frozen=True)
class Pool:
    """Real turns and their vectors (the records' material), and real questions."""

    texts: list[str]
    vectors: np.ndarray
    queries: list[str]

    def records(
        self, user: str, start: int, stop: int, rng: np.random.Generator
    ) -> tuple[list[Record], np.ndarray]:
        """Records ``start``..``stop`` of ``user``: turn ``i % n`` varied, ``category`` c0..c9."""
        rows = np.arange(start, stop) % len(self.texts)
        records = [
            Record(user_id=user, id=f"r{i}", text=f"{self.texts[row]} (note {i})", category=f"c{i % 10}")
            for i, row in zip(range(start, stop), rows, strict=True)
        ]
        noisy = self.vectors[rows]  # a copy, varied in place (float32: the bench's own memory stays small)
        noisy += rng.normal(scale=0.03, size=noisy.shape).astype(np.float32)
        noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
        return records, noisy


def load_pool(data: Path, cache: Path, encoder: Encoder) -> Pool:
    """LoCoMo's turns and questions; the turns' vectors from ``cache`` when it has them."""
    benchmark = DataSource(benchmark=BenchmarkName("locomo"), data=data).questions()
    texts = sorted({r.text for r in benchmark.records})
    queries = [q.text for q in benchmark.questions]
    digest = hashlib.sha256(json.dumps([encoder.name, texts]).encode()).hexdigest()[:16]
    kept = cache / f"pool-{digest}.npy"
    if kept.exists():
        vectors = np.load(kept)
    else:
        log(f"[pool] encoding {len(texts)} LoCoMo turns once (kept in {kept})")
        vectors = encoder.encode(texts)
        cache.mkdir(parents=True, exist_ok=True)
        np.save(kept, vectors)
    return Pool(texts, vectors, queries)
