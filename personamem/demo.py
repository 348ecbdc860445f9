"""The demo: three users with clearly different lives, the same questions, different memories."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from personamem.ingest.jsonl import read_jsonl
from personamem.memory import PersonaMem, SearchMethod
from personamem.retrieval import Hit

__all__ = ["DEMO_QUERIES", "demo_records_path", "run_demo"]

DEMO_QUERIES = (
    "What should I cook for dinner tonight?",
    "Plan a relaxing holiday for me.",
    "What gift would suit my hobby?",
)


def demo_records_path() -> Path:
    """The demo dataset shipped inside the package (written for personamem, no third-party data)."""
    return Path(str(resources.files("personamem") / "data" / "demo.jsonl"))


def run_demo(
    mem: PersonaMem, *, k: int = 2, method: SearchMethod = SearchMethod.DENSE
) -> dict[str, dict[str, list[Hit]]]:
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
