"""Real benchmark data through the whole write and read path (importer → store → search)."""

from __future__ import annotations

import json

import pytest

from personamem import PersonaMem, TruncationWarning
from personamem.datasets.ikat import load_ikat
from personamem.datasets.locomo import load_locomo
from personamem.datasets.personabench import load_personabench
from tests.conftest import DATA

needs = pytest.mark.skipif


@needs(not (DATA / "locomo").is_dir(), reason=f"LoCoMo data not found under {DATA}")
def test_locomo_conversation_round_trip_and_gold_evidence(mem: PersonaMem) -> None:
    records = [r for r in load_locomo(DATA / "locomo" / "locomo10_shared.json") if r.user_id == "conv-26"]
    mem.add_many(records)
    assert mem.count("conv-26") == len(records) == 419
    assert mem.get("conv-26", "D1:3") == next(r for r in records if r.id == "D1:3")  # timestamps included
    hits = mem.search("conv-26", "When did Caroline go to the LGBTQ support group?", k=5, method="hybrid")
    assert "D1:3" in [h.record.id for h in hits]


@needs(not (DATA / "personabench").is_dir(), reason=f"PersonaBench data not found under {DATA}")
def test_personabench_user_round_trip(mem: PersonaMem) -> None:
    records = [r for r in load_personabench(DATA / "personabench") if r.user_id == "Kelly Simon"]
    with pytest.warns(TruncationWarning):  # whole sessions exceed MiniLM's 256-token window
        mem.add_many(records)
    assert mem.count("Kelly Simon") == 85
    eval_info = DATA / "personabench/eval_data_v1/synthetic_data/community_1/eval_info"
    gold = json.loads((eval_info / "qa_gt_context_all_noise_0.0.json").read_text(encoding="utf-8"))
    question = next(q for q in gold if q["q_id"] == "001000000")  # "Which country do I currently live in?"
    gold_ids = {sid for ids in question["segment_id"].values() for sid in ids}
    assert all(mem.get("Kelly Simon", sid) is not None for sid in gold_ids)


@needs(not (DATA / "trec_ikat").is_dir(), reason=f"TREC iKAT data not found under {DATA}")
def test_ikat_statements_round_trip(mem: PersonaMem) -> None:
    records = load_ikat(DATA / "trec_ikat" / "2023_test_topics.json", user_prefix="ikat23-")
    mem.add_many(records)
    assert mem.count() == 180 and len(mem.users()) == 18
    hits = mem.search("ikat23-9-1", "what can I eat given my diet?", k=3)
    assert any("vegetarian" in h.record.text.lower() for h in hits)
