"""context() picks a profile that says different things (issue 44): real store, real encoder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from personamem import PersonaMem
from personamem.errors import ConfigError
from personamem.pipeline import PipelineConfig
from personamem.pipeline.config import load_pipeline
from personamem.pipeline.diversity import distinct, mmr

FACTS = (
    "I've been vegan for six years.",
    "I'm allergic to peanuts.",
    "I live in Lisbon with my partner.",
    "I work as a nurse on night shifts.",
    "I'm training for a half marathon in May.",
)
QUERY = "What food can I eat for dinner, given my diet?"


@pytest.fixture
def flooded(mem: PersonaMem) -> PersonaMem:
    """Five facts under 30 near-identical chat turns, which the first stage ranks above every fact."""
    for fact in FACTS:
        mem.add("u", fact, kind="knowledge")
    for n in range(1, 31):
        mem.add("u", f"Chat turn {n}: talked about weekend plans and cooking lentils.")
    return mem


def test_the_default_profile_lets_the_facts_past_a_flood_of_repeats(flooded: PersonaMem) -> None:
    before = flooded.pipeline(PipelineConfig(duplicate_cosine=1.0)).context("u", QUERY)
    assert all(hit.record.text.startswith("Chat turn") for hit in before.hits)  # the example
    context = flooded.context("u", QUERY)
    assert "I've been vegan for six years." in context.text and "I'm allergic to peanuts." in context.text
    assert sum(hit.record.text.startswith("Chat turn") for hit in context.hits) <= 2
    top = flooded.pipeline().search("u", QUERY, 40)  # the ranking is the first stage's, unchanged
    ranked = [hit.record.id for hit in top if hit.record.id in {h.record.id for h in context.hits}]
    assert [hit.record.id for hit in context.hits] == ranked  # the first stage's order, repeats skipped
    assert all(hit.record.text.startswith("Chat turn") for hit in top[:20])  # the flood ranks first


def test_without_repeats_the_profile_is_search_s_top_profile_k(mem: PersonaMem) -> None:
    for fact in FACTS:
        mem.add("u", fact, kind="knowledge")
    mem.add("u", "Lentil soup is my go-to dinner.")
    context = mem.context("u", QUERY)
    assert [hit.record.id for hit in context.hits] == [
        hit.record.id for hit in mem.pipeline().search("u", QUERY, 5)
    ]


def test_diversity_brings_a_fact_from_under_the_flood(flooded: PersonaMem) -> None:
    context = flooded.pipeline(PipelineConfig(diversity=0.5)).context("u", QUERY)
    assert "I'm allergic to peanuts." in context.text
    assert sum(hit.record.text.startswith("Chat turn") for hit in context.hits) <= 2


def test_search_ranks_as_the_first_stage_whatever_the_diversity(flooded: PersonaMem) -> None:
    ranked = [
        [hit.record.id for hit in flooded.pipeline(PipelineConfig(diversity=d)).search("u", QUERY, 10)]
        for d in (0.0, 0.5, 1.0)
    ]
    assert ranked[0] == ranked[1] == ranked[2]


@pytest.mark.parametrize("diversity", [0.0, 0.5, 1.0])
def test_near_duplicates_never_both_reach_the_profile(mem: PersonaMem, diversity: float) -> None:
    texts = ("I am vegetarian.", "I'm vegetarian.", "I'm a vegetarian.", "I cycle to work.", "I have a cat.")
    for text in texts:
        mem.add("u", text, duplicates="keep")
    context = mem.pipeline(PipelineConfig(diversity=diversity)).context("u", "vegetarian")
    shown = [hit.record.text for hit in context.hits]
    assert sum("vegetarian" in text for text in shown) == 1
    assert {"I cycle to work.", "I have a cat."} <= set(shown)


@pytest.mark.parametrize("field", ["diversity", "duplicate_cosine"])
@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "high"])
def test_a_bad_knob_is_a_config_error_naming_it(tmp_path: Path, field: str, bad: object) -> None:
    path = tmp_path / "personamem.toml"
    value = f'"{bad}"' if isinstance(bad, str) else str(bad)
    path.write_text(f"[pipeline]\n{field} = {value}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=field):
        load_pipeline(path)


def test_mmr_keeps_relevance_order_at_0_and_skips_a_paraphrase_above_it() -> None:
    a, b = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    vectors = np.stack([a, a * 0.99 + b * 0.141, b])  # row 1 nearly repeats row 0
    assert mmr(vectors, 2, 0.0) == [0, 1]
    assert mmr(vectors, 2, 0.5) == [0, 2]
    assert distinct(vectors, 0.95) == [0, 2] and distinct(vectors, 1.0) == [0, 1, 2]
