"""The demo: three users with clearly different lives, the same questions, different memories."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from personamem.datasets.jsonl import read_jsonl
from personamem.memory import PersonaMem
from personamem.retrieval import Hit

__all__ = ["DEMO_QUERIES", "demo_records_path", "relevant_top_hits", "run_demo"]

# query -> user -> ids of the demo records that bear on the question (labelled by hand from
# demo.jsonl), so the demo can check its answers rather than only show them
DEMO_QUERIES: dict[str, dict[str, frozenset[str]]] = {
    "What should I cook for dinner tonight?": {
        "lena": frozenset({"lena-1", "lena-5"}),  # pescatarian, nut allergy; grilled sea bass
        "maya": frozenset({"maya-1", "maya-7"}),  # vegan; lentils and tofu
        "omar": frozenset({"omar-1", "omar-5"}),  # backyard smoker; smoked brisket
    },
    "Plan a relaxing holiday for me.": {
        "lena": frozenset({"lena-4", "lena-6"}),  # quiet Portuguese beach towns; two young kids
        "maya": frozenset({"maya-4", "maya-8"}),  # budget hostels by train; mountains over resorts
        "omar": frozenset({"omar-3", "omar-8"}),  # five-star spa hotels; seasick, no cruises
    },
    "What gift would suit my hobby?": {
        "lena": frozenset({"lena-2", "lena-3", "lena-7", "lena-8"}),  # cello; gardening
        "maya": frozenset({"maya-2", "maya-3", "maya-5"}),  # trail running; learning Japanese
        "omar": frozenset({"omar-1", "omar-2", "omar-4", "omar-5", "omar-7"}),  # smoking; stars; chess
    },
}


def demo_records_path() -> Path:
    """The demo dataset shipped inside the package (written for personamem, no third-party data)."""
    return Path(str(resources.files("personamem") / "data" / "demo.jsonl"))


def run_demo(mem: PersonaMem, *, k: int = 2, method: str | None = None) -> dict[str, dict[str, list[Hit]]]:
    """Ingest the demo users into ``mem`` and search each demo query for each of them.

    Returns:
        query -> user -> hits.
    """
    records = read_jsonl(demo_records_path())
    mem.add_many(records)
    users = sorted({r.user_id for r in records})
    return {
        query: {user: mem.search(user, query, k=k, method=method) for user in users} for query in DEMO_QUERIES
    }


def relevant_top_hits(results: dict[str, dict[str, list[Hit]]]) -> tuple[int, int]:
    """How many (query, user) top records are labelled relevant in :data:`DEMO_QUERIES`, of how many."""
    pairs = [(query, user, hits) for query, by_user in results.items() for user, hits in by_user.items()]
    good = sum(bool(hits) and hits[0].record.id in DEMO_QUERIES[query][user] for query, user, hits in pairs)
    return good, len(pairs)
