"""``analyze profile``: context()'s profile knobs against the first stage's top k (real store, encoder)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from personamem import Record, SentenceEncoder
from personamem.cli import main
from personamem.datasets import Benchmark, Question
from personamem.datasets.vectors import build_store
from personamem.eval.profile_eval import (
    BASELINE,
    LoglikCache,
    ProfileReport,
    ProfileSetting,
    measure_profiles,
    profile_settings,
)
from personamem.store import Store
from personamem.testing import FakeLLM
from tests.conftest import DATA, need_data

FACTS = {
    "vegan": "I've been vegan for six years.",
    "peanut": "I'm allergic to peanuts.",
    "lisbon": "I live in Lisbon with my partner.",
    "nurse": "I work as a nurse on night shifts.",
    "marathon": "I'm training for a half marathon in May.",
}
QUERY = "What food can I eat for dinner, given my diet?"


def _benchmark() -> Benchmark:
    """User ``u``'s facts under 30 near-identical chat turns (the flood of
    tests/pipeline/test_context_diversity.py); user ``v`` with five distinct records, so no knob can
    change ``v``'s profile."""
    records = [Record(id=key, user_id="u", text=text) for key, text in FACTS.items()]
    records += [
        Record(
            id=f"t{n}", user_id="u", text=f"Chat turn {n}: talked about weekend plans and cooking lentils."
        )
        for n in range(1, 31)
    ]
    hobbies = ("I paint watercolours.", "I keep bees.", "I play the cello.", "I climb.", "I bake bread.")
    records += [Record(id=f"h{i}", user_id="v", text=text) for i, text in enumerate(hobbies)]
    questions = [
        Question("q-u", "u", QUERY, {"vegan": 1, "peanut": 1}, answer="Something vegan without peanuts"),
        Question("q-v", "v", "What are my hobbies?", {"h0": 1, "h9": 0}, answer="Painting and bees"),
        Question("q-none", "v", "Anything?", {}),  # no gold records: not measured
    ]
    return Benchmark("flood", records, questions)


@pytest.fixture
def store(tmp_path: Path, encoder: SentenceEncoder) -> Iterator[Store]:
    built = build_store(_benchmark(), tmp_path / "store", encoder)
    yield built
    built.close()


def test_settings_are_every_pair_once() -> None:
    assert profile_settings([1.0, 0.9, 0.9], [0.0, 0.5]) == [
        ProfileSetting(1.0, 0.0),
        ProfileSetting(1.0, 0.5),
        ProfileSetting(0.9, 0.0),
        ProfileSetting(0.9, 0.5),
    ]


def test_changed_profiles_and_recall_against_the_first_stage_top_k(store: Store) -> None:
    found = measure_profiles(_benchmark(), store, [ProfileSetting(1.0, 0.0), ProfileSetting(0.9, 0.0)])
    assert found.questions == 2 and found.answered == 2  # q-none has no gold records
    base, exact, distinct = found.rows
    assert base.setting == BASELINE and base.duplicate_cosine is None
    assert all(rid.startswith("t") for rid in found.profiles[BASELINE]["q-u"])  # five chat turns
    assert base.recall == pytest.approx((0.0 + 1.0) / 2)  # u: five chat turns; v: h0, its one graded gold
    assert (exact.changed, exact.recall, exact.recall_difference) == (0, base.recall, 0.0)
    shown = found.profiles["duplicate_cosine 0.9, diversity 0"]
    assert {"vegan", "peanut"} <= set(shown["q-u"]) and shown["q-v"] == found.profiles[BASELINE]["q-v"]
    assert distinct.changed == 1
    assert distinct.recall == pytest.approx((1.0 + 1.0) / 2)
    assert distinct.recall_difference == pytest.approx(0.5)
    assert distinct.ms > 0 and distinct.loglik_difference is None


def test_answer_loglik_scores_only_changed_profiles_and_caches_them(store: Store, tmp_path: Path) -> None:
    llm = FakeLLM()
    cache = LoglikCache(tmp_path / "ll.jsonl", llm.name)
    settings = [ProfileSetting(1.0, 0.0), ProfileSetting(0.9, 0.0)]
    found = measure_profiles(_benchmark(), store, settings, llm=llm, cache=cache)
    lines = (tmp_path / "ll.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2  # q-u under the baseline's profile and under 0.9's; nothing else changed
    scores = {tuple(item["profile"]): item["loglik"] for item in map(json.loads, lines)}
    row = found.rows[2]
    delta = scores[tuple(found.profiles[row.setting]["q-u"])] - scores[tuple(found.profiles[BASELINE]["q-u"])]
    assert row.scored == 1 and row.loglik_changed == pytest.approx(delta)
    assert row.loglik_difference == pytest.approx(delta / 2)  # q-v's unchanged profile counts as 0
    assert found.rows[1].loglik_difference == 0 and found.rows[1].scored == 0
    calls = llm.calls
    again = measure_profiles(
        _benchmark(), store, settings, llm=llm, cache=LoglikCache(tmp_path / "ll.jsonl", llm.name)
    )
    assert llm.calls == calls and again.rows[2].loglik_difference == row.loglik_difference
    report = ProfileReport([found], llm=llm.name)
    assert "| duplicate_cosine 0.9, diversity 0 | 1.0000 | +0.5000 (p 0.5) | 1/2 |" in report.markdown()


@pytest.mark.slow
def test_cli_measures_personabench_held_out_users(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = need_data(DATA / "personabench").parent
    out = tmp_path / "profile.json"
    args = ["analyze", "profile", "--data-root", str(root), "--benchmark", "personabench"]
    assert main([*args, "--duplicate-cosine", "0.8", "--no-answer-ll", "--out", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    (bench,) = report["benchmarks"].values()
    assert report["llm"] is None and bench["questions"] > 0
    assert [row["setting"] for row in bench["rows"]] == [BASELINE, "duplicate_cosine 0.8, diversity 0"]
    assert bench["rows"][1]["changed"] == sum(
        bench["profiles"][BASELINE][q] != ids
        for q, ids in bench["profiles"][bench["rows"][1]["setting"]].items()
    )
    assert "--duplicate-cosine 0.8" in report["command"] and "duplicate_cosine 0.8" in capsys.readouterr().out
    assert not out.with_suffix(".ll.jsonl").exists()
