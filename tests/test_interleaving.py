"""Interleaving: team draft, credit from feedback, and trials that put a candidate live or roll it back."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.interleaving import MIN_CALLS, Verdict, credit, team_draft

FACTS = [
    "I'm vegan and cook lentils most nights.",
    "I cycle to work every day, rain or shine.",
    "Spicy Thai curries are my favourite dinner.",
    "My sister Maya lives in Lisbon.",
    "I started learning the cello in March.",
    "I keep a vegetable garden with tomatoes and beans.",
]
QUERIES = [
    "what should I cook tonight?",
    "how do I get to work?",
    "who lives in Lisbon?",
    "when did I start the cello?",
]


def test_team_draft_takes_turns_and_never_repeats() -> None:
    live, candidate = list("abcdef"), list("fedcba")
    for seed in range(20):
        drafted = team_draft(live, candidate, 6, random.Random(seed))
        items = [item for item, _ in drafted]
        assert sorted(items) == sorted(live)  # every item once
        teams = [team for _, team in drafted]
        for end in range(2, 7, 2):  # after each round the two teams picked equally often
            assert teams[:end].count("live") == teams[:end].count("candidate")
        for team, ranking in (("live", live), ("candidate", candidate)):
            picked = [item for item, t in drafted if t == team]
            assert picked == sorted(picked, key=ranking.index)  # each team in its own ranking's order
    same = team_draft(live, live, 4, random.Random(0))
    assert [item for item, _ in same] == live[:4]  # identical rankings interleave to themselves
    assert len(team_draft(["a"], ["b", "c", "d"], 10, random.Random(0))) == 4  # the other side fills


def test_credit_and_the_sign_test() -> None:
    teams = {"a": "live", "b": "candidate", "c": "candidate"}
    assert credit(teams, ["b"]) == "win" and credit(teams, ["a"]) == "loss"
    assert credit(teams, ["a", "b"]) == "tie" and credit(teams, ["z"]) is None
    assert Verdict(wins=MIN_CALLS - 1).decision is None  # too few to decide
    assert Verdict(wins=MIN_CALLS).decision == "candidate" and Verdict(losses=MIN_CALLS).decision == "live"
    assert Verdict(wins=6, losses=5).decision is None  # not clear either way
    assert Verdict.of(["win", "tie", "loss", "win"]) == Verdict(2, 1, 1)


@pytest.fixture
def memory(tmp_path: Path, encoder: SentenceEncoder) -> Iterator[PersonaMem]:
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as mem:
        for user in ("ana", "bo"):
            mem.add_many([{"id": f"{user}-{i}", "text": fact} for i, fact in enumerate(FACTS)], user_id=user)
        yield mem


def _teams(mem: PersonaMem, interaction_id: str) -> dict[str, str]:
    mem.store.logged.flush()
    (row,) = [r for r in mem.store.catalog.interactions() if r.interaction_id == interaction_id]
    assert row.interleaving is not None
    return dict(row.interleaving["teams"])


def _report(mem: PersonaMem, calls: int, side: str) -> None:
    """``calls`` interleaved searches, each reported as using a record that ``side`` placed."""
    for n in range(calls):
        hits = mem.search(("ana", "bo")[n % 2], QUERIES[n % len(QUERIES)], k=4)
        assert hits.interaction_id is not None
        teams = _teams(mem, hits.interaction_id)
        assert set(teams) == {h.record.id for h in hits}  # every record served has its team
        used = next(r for r in (h.record.id for h in hits) if teams[r] == side)
        mem.feedback(hits.interaction_id, used_record_ids=[used])


def test_a_candidate_that_wins_goes_live_and_the_one_it_replaced_is_tried_back(memory: PersonaMem) -> None:
    assert memory.store.live_pipeline is None  # the package default serves
    trial = memory.trials.start({"first_stage": "dense"}, share=1.0)
    _report(memory, MIN_CALLS - 1, "candidate")
    status = memory.trials.status()
    assert status["running"]["trial"] == trial.id and status["running"]["wins"] == MIN_CALLS - 1
    assert memory.store.live_pipeline is None  # not yet: too few calls
    _report(memory, 1, "candidate")
    assert memory.config.first_stage == "dense"  # live, for this process at once
    (decided,) = memory.trials.status()["decided"]
    assert (decided["action"], decided["wins"], decided["losses"]) == ("went live", MIN_CALLS, 0)
    watch = memory.trials.running()
    assert watch is not None and (watch.role, watch.table) == ("incumbent", {})  # the default, tried back
    # later traffic prefers the pipeline it replaced: rolled back
    _report(memory, MIN_CALLS, "candidate")
    assert memory.store.live_pipeline is None and memory.trials.running() is None
    assert [d["action"] for d in memory.trials.status()["decided"]] == ["went live", "rolled back"]


def test_a_candidate_that_loses_is_dropped_and_calls_outside_the_share_are_not_interleaved(
    memory: PersonaMem,
) -> None:
    memory.trials.start({"first_stage": "dense"}, share=1.0)
    _report(memory, MIN_CALLS, "live")
    assert memory.store.live_pipeline is None and memory.trials.running() is None
    assert memory.trials.status()["decided"][-1]["action"] == "dropped"

    memory.trials.start({"first_stage": "dense"}, share=1e-9)  # effectively never drawn
    hits = memory.search("ana", "what should I cook?")
    memory.store.logged.flush()
    (row,) = [r for r in memory.store.catalog.interactions() if r.interaction_id == hits.interaction_id]
    assert row.interleaving is None
    assert memory.search("ana", "cook", method="hybrid") is not None  # a named method is never interleaved


def test_an_answer_alone_credits_the_team_whose_record_it_drew_on(memory: PersonaMem) -> None:
    memory.trials.start({"first_stage": "dense"}, share=1.0)
    context = memory.context("ana", "who lives in Lisbon?")
    assert context.interaction_id is not None
    teams = _teams(memory, context.interaction_id)
    assert "ana-3" in teams  # the sister in Lisbon was served
    memory.feedback(context.interaction_id, answer="Your sister Maya lives in Lisbon.")
    memory.store.logged.flush()
    (row,) = [r for r in memory.store.catalog.interactions() if r.interaction_id == context.interaction_id]
    assert row.interleaving is not None
    expected = "win" if teams["ana-3"] == "candidate" else "loss"
    assert row.interleaving["outcome"] == expected

    assert memory.delete("ana", ["ana-3"]) == ["ana-3"]  # a deleted record leaves the teams too
    (row,) = [r for r in memory.store.catalog.interactions() if r.interaction_id == context.interaction_id]
    assert row.interleaving is not None and "ana-3" not in row.interleaving["teams"]
    assert row.interleaving["outcome"] == expected  # the count stays: it names no record
