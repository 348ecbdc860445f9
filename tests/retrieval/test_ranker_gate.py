"""The ranker's gate: trees serve histories shaped like those they gained on; others get the default."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from personamem import PersonaMem, PipelineConfig, TruncationWarning
from personamem.cli import main
from personamem.errors import CheckpointError
from personamem.retrieval.ranker import INFO_FILE, SHIPPED_RANKERS, RankerModel
from personamem.retrieval.ranker_gate import PROFILE, RankerGate, Region, calibrate, history_profile
from personamem.trainers.ranker.export import save_ranker

# a two-person chat as LoCoMo's loader renders it: a date and the speaker's name on every turn
CHAT = [
    "[8 May, 2023] Caroline: I went to the LGBTQ support group yesterday and it was so powerful, "
    "everyone shared their stories and I felt accepted for the first time in a long while.",
    "[8 May, 2023] Melanie: That sounds amazing, Caroline! What did you talk about there? I'm swamped "
    "with the kids and work, but I'd love to hear all about it when you have time.",
    "[8 May, 2023] Caroline: The transgender stories were so inspiring. I felt happy and thankful for "
    "all the support, and I think I want to keep going every week from now on.",
    "[8 May, 2023] Melanie: I painted a lake sunrise last year, it is still my favourite painting. "
    "Painting is how I relax after a long day, it helps me express my feelings.",
    "[8 May, 2023] Caroline: I am researching adoption agencies these days. I want to give kids who "
    "need it a safe and loving home, it has been my dream for a long time.",
    "[25 May, 2023] Melanie: We went camping in the mountains with the kids last weekend. We roasted "
    "marshmallows, told stories around the fire and watched the stars all night long.",
    "[25 May, 2023] Caroline: Nice! I am going to a counseling workshop next month in June, to learn "
    "how to support people in the community who are going through what I went through.",
    "[25 May, 2023] Melanie: I ran a charity race for mental health on Saturday morning. It was hard "
    "work but so rewarding, and the whole family came to cheer for me at the finish.",
]
QUERIES = [
    "When did Caroline go to the LGBTQ support group?",
    "What did Melanie paint?",
    "Where did they camp?",
]
# long user–assistant messages: the shape the shipped trees never gained on
ASSISTANT = " ".join(["Here is a detailed plan for your week of training and meals, step by step."] * 20)


def test_a_history_profile_reads_lengths_roles_names_and_dates() -> None:
    shape = history_profile(
        np.array([10, 300, 20, 40]), ["user", "assistant", "", "user"], [True, False, True, False], [True] * 4
    )
    assert tuple(shape) == PROFILE
    assert shape["share_over_window"] == 0.25 and shape["share_user"] == 0.5
    assert shape["share_assistant"] == 0.25 and shape["share_named"] == 0.5 and shape["share_dated"] == 1.0
    assert shape["words_log_mean"] == pytest.approx(np.log1p([10, 300, 20, 40]).mean())
    assert history_profile(np.array([]), [], [], []) == dict.fromkeys(PROFILE, 0.0)


def test_a_gate_boxes_the_admitted_benchmarks_users_and_names_what_lies_outside() -> None:
    chat = np.array([[3.3, 0.0, 0.0, 0.0, 1.0, 1.0], [3.5, 0.0, 0.0, 0.0, 0.98, 0.95]])
    dialogs = np.array([[5.0, 0.4, 0.5, 0.5, 0.2, 0.0], [5.5, 0.5, 0.5, 0.5, 0.1, 0.1]])
    gate = RankerGate.fit({"chat": chat, "dialogs": dialogs}, ["chat"], tolerance=0.5)
    assert [r.benchmark for r in gate.regions] == ["chat"]
    spread = np.concatenate([chat, dialogs]).std(axis=0) * 0.5
    assert gate.regions[0].low == pytest.approx(tuple(chat.min(axis=0) - spread))
    inside = dict(zip(PROFILE, [3.4, 0.0, 0.0, 0.0, 0.99, 0.97], strict=True))
    assert gate.decide(inside).serves and "chat" in gate.decide(inside).reason
    outside = gate.decide(dict(zip(PROFILE, dialogs[0], strict=True)))
    assert not outside.serves and "words_log_mean 5.00 not in chat's" in outside.reason
    assert "share_assistant 0.50" in outside.reason
    assert RankerGate.from_json(json.loads(json.dumps(gate.to_json()))) == gate
    assert not RankerGate(()).decide(inside).serves  # no region: trees nowhere
    with pytest.raises(ValueError, match="other history statistics"):
        RankerGate.from_json({**gate.to_json(), "profile": ["words"]})


def test_calibration_counts_unseen_users_of_the_same_kind_and_of_others() -> None:
    rng = np.random.default_rng(0)
    chat = np.array([3.4, 0.0, 0.0, 0.0, 1.0, 1.0]) + rng.normal(0, 0.01, (6, len(PROFILE)))
    dialogs = np.array([5.2, 0.4, 0.5, 0.5, 0.2, 0.1]) + rng.normal(0, 0.01, (6, len(PROFILE)))
    report = calibrate({"chat": chat, "dialogs": dialogs}, ["chat"])
    assert report == {"chat": {"own users left out": 1.0, "dialogs": 0.0}}
    wide = calibrate({"chat": chat, "dialogs": dialogs}, ["chat"], tolerance=50.0)  # boxes past the others
    assert wide["chat"]["dialogs"] == 1.0


_SHIPPED_ADAPTER_GATE = {"adapter_gate": RankerModel.load("mixed").info["adapter_gate"]}
"""The shipped ranker's adapter gate, for a folder without its trees that serves as it does."""


def _gated_copy(folder: Path, regions: list[Region] | None) -> Path:
    """The shipped ranker's trees with another gate (None: no gate, as folders written before it)."""
    shutil.copytree(SHIPPED_RANKERS / "mixed", folder)
    info = json.loads((folder / INFO_FILE).read_text(encoding="utf-8"))
    info["gate"] = None if regions is None else RankerGate(tuple(regions)).to_json()
    (folder / INFO_FILE).write_text(json.dumps(info), encoding="utf-8")
    return folder


def _order(mem: PersonaMem, user: str, query: str, ranker: str) -> list[str]:
    return [h.record.id for h in mem.search(user, query, k=8, method=PipelineConfig(ranker=ranker))]


def test_the_trees_serve_only_a_user_inside_the_gate(mem: PersonaMem, tmp_path: Path) -> None:
    mem.add_many([{"id": f"c{i}", "text": t} for i, t in enumerate(CHAT)], user_id="chat")
    everywhere = str(_gated_copy(tmp_path / "everywhere", None))
    nowhere = str(_gated_copy(tmp_path / "nowhere", []))
    shape = mem.pipeline(PipelineConfig(ranker=everywhere)).ranker.profile("chat")  # type: ignore[union-attr]
    box = Region("here", tuple(v - 0.01 for v in shape.values()), tuple(v + 0.01 for v in shape.values()))
    inside = str(_gated_copy(tmp_path / "inside", [box]))
    save_ranker(tmp_path / "start", None, alpha=10.0, iterations=0, info=_SHIPPED_ADAPTER_GATE)  # no trees
    orders = {
        name: [_order(mem, "chat", q, str(ranker)) for q in QUERIES]
        for name, ranker in (
            ("trees", everywhere),
            ("start", tmp_path / "start"),
            ("gated out", nowhere),
            ("in", inside),
        )
    }
    assert orders["trees"] != orders["start"]  # the shipped trees move this history's order
    assert orders["in"] == orders["trees"] and orders["gated out"] == orders["start"]


def test_the_score_fusion_reads_the_adapters_cosine_only_inside_its_gate(
    mem: PersonaMem, tmp_path: Path
) -> None:
    """Where the adapter gained (a box around this chat's shape), its cosine; elsewhere the base one."""
    mem.add_many([{"id": f"c{i}", "text": t} for i, t in enumerate(CHAT)], user_id="chat")
    save_ranker(tmp_path / "base", None, alpha=10.0, iterations=0, info={})
    shape = mem.pipeline(PipelineConfig(ranker=str(tmp_path / "base"))).ranker.profile("chat")  # type: ignore[union-attr]
    box = Region("here", tuple(v - 0.01 for v in shape.values()), tuple(v + 0.01 for v in shape.values()))
    far = Region("there", tuple(v + 5 for v in shape.values()), tuple(v + 6 for v in shape.values()))
    for name, region in (("adapted", box), ("elsewhere", far)):
        info = {"adapter_gate": RankerGate((region,)).to_json()}
        save_ranker(tmp_path / name, None, alpha=10.0, iterations=0, info=info)
    questions = [*QUERIES, "Who went to a workshop?", "What relaxes her?", "How was the race?"]
    orders = {
        name: [_order(mem, "chat", q, str(tmp_path / name)) for q in questions]
        for name in ("base", "adapted", "elsewhere")
    }
    assert orders["elsewhere"] == orders["base"] and orders["adapted"] != orders["base"]
    decision = RankerModel.load(tmp_path / "adapted").decide_adapter(shape)
    assert decision.serves and "where the adapter's cosine gained" in decision.reason


def test_the_shipped_trees_serve_no_one_since_the_score_fusion_beat_them(
    mem: PersonaMem, tmp_path: Path
) -> None:
    """On every benchmark's validation users the shipped trees gained nothing over the score fusion
    (LoCoMo: nDCG@10 0.489 against 0.518), so a dated two-person chat gets the score fusion too."""
    mem.add_many([{"id": f"c{i}", "text": t} for i, t in enumerate(CHAT)], user_id="chat")
    ranker = mem.pipeline().ranker
    assert ranker is not None and ranker.model.gate is not None and ranker.model.session is not None
    decision = ranker.decide("chat")
    assert not decision.serves and "no region" in decision.reason
    flat = tmp_path / "start"
    save_ranker(flat, None, alpha=10.0, iterations=0, info=_SHIPPED_ADAPTER_GATE)
    for query in QUERIES:
        assert _order(mem, "chat", query, "auto") == _order(mem, "chat", query, str(flat))


def test_a_gate_that_cannot_be_read_refuses_to_load(tmp_path: Path) -> None:
    folder = _gated_copy(tmp_path / "broken", None)
    info = json.loads((folder / INFO_FILE).read_text(encoding="utf-8"))
    (folder / INFO_FILE).write_text(json.dumps({**info, "gate": {"profile": ["x"], "regions": []}}))
    with pytest.raises(CheckpointError, match="gate is unreadable"):
        RankerModel.load(folder)
    (folder / INFO_FILE).write_text(json.dumps({**info, "adapter_gate": {"profile": ["x"], "regions": []}}))
    with pytest.raises(CheckpointError, match=r"ranker\.json's adapter_gate is unreadable"):
        RankerModel.load(folder)


def test_analyze_ranker_says_who_gets_the_trees_and_why(
    mem: PersonaMem, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mem.add_many([{"id": f"c{i}", "text": t} for i, t in enumerate(CHAT)], user_id="chat")
    with pytest.warns(TruncationWarning):
        mem.add("long", ASSISTANT, metadata={"role": "assistant"})
    store = tmp_path / "store"  # the mem fixture's folder
    mem.close()
    assert main(["--store", str(store), "analyze", "ranker", "--json"]) == 0
    users = {row["user_id"]: row for row in json.loads(capsys.readouterr().out)["users"]}
    assert not users["chat"]["trees"] and not users["long"]["trees"]  # the shipped gate admits no one
    assert users["long"]["share_over_window"] == 1.0 and users["long"]["share_assistant"] == 1.0
    assert main(["--store", str(store), "analyze", "ranker", "--user", "long"]) == 0
    shown = capsys.readouterr().out
    assert "long: the score fusion (no region: " in shown and "share_over_window 1.00" in shown
    assert "reads the base cosine (" in shown and users["long"]["adapter"] is False
