"""Retrieval metrics and their aggregation, on hand-computed cases."""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import ttest_rel

from personamem.cli import main
from personamem.datasets.benchmark import Question
from personamem.eval.metrics import personabench_scores, ranx_scores
from personamem.eval.report import metric_label
from personamem.eval.runner import MethodRun
from personamem.eval.stats import compare, compare_reports, summarize


def _q(qid: str, relevant: dict[str, int], **kw: object) -> Question:
    return Question(id=qid, user_id="u", text=qid, relevant=relevant, **kw)  # type: ignore[arg-type]


def test_ranx_scores_follow_the_given_order() -> None:
    questions = [_q("a", {"x": 1}), _q("b", {"y": 1, "z": 1})]
    rankings = {"a": ["w", "x"], "b": ["z", "v", "y"]}
    scores = ranx_scores(questions, rankings, ["recall@1", "recall@3", "ndcg@3", "mrr"])
    assert scores["recall@1"] == {"a": 0.0, "b": 0.5}
    assert scores["recall@3"] == {"a": 1.0, "b": 1.0}
    assert scores["mrr"] == {"a": 0.5, "b": 1.0}
    ideal = 1 + 1 / math.log2(3)
    assert scores["ndcg@3"]["b"] == pytest.approx((1 + 1 / math.log2(4)) / ideal)


def test_metrics_new_to_a_process_wait_for_another_process_compiling_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from filelock import FileLock

    from personamem.eval import metrics

    monkeypatch.setenv("PERSONAMEM_CACHE", str(tmp_path))
    monkeypatch.setattr(metrics, "_EVALUATED", set())
    questions, rankings = [_q("a", {"x": 1})], {"a": ["w", "x"]}
    with ThreadPoolExecutor(1) as pool:
        with FileLock(str(tmp_path / "ranx-numba.lock")):  # another process, compiling ranx's kernels
            scoring = pool.submit(ranx_scores, questions, rankings, ["mrr"])
            time.sleep(0.5)
            assert not scoring.done()  # it waits instead of compiling them a second time
        assert scoring.result(timeout=60)["mrr"] == {"a": 0.5}
        with FileLock(str(tmp_path / "ranx-numba.lock")):  # mrr is loaded here now: no wait
            again = pool.submit(ranx_scores, questions, rankings, ["mrr"])
            assert again.result(timeout=60)["mrr"] == {"a": 0.5}
    monkeypatch.setattr(metrics, "_EVALUATED", set())
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("PERSONAMEM_CACHE", str(tmp_path / "a-file"))  # no user cache can be made there
    assert ranx_scores(questions, rankings, ["mrr"])["mrr"] == {"a": 0.5}  # scored, nothing shared


def test_ranx_scores_a_missing_ranking_as_zero_and_refuses_questions_without_gold() -> None:
    scores = ranx_scores([_q("a", {"x": 1}), _q("b", {"y": 1})], {"a": ["x"], "b": []}, ["recall@5"])
    assert scores["recall@5"] == {"a": 1.0, "b": 0.0}
    with pytest.raises(ValueError, match="no relevant record"):
        ranx_scores([_q("a", {})], {"a": ["x"]}, ["recall@5"])


def test_personabench_protocol_takes_the_best_gold_choice_per_answer_value() -> None:
    # two answer values; the first is supported by s1 or s2, the second by s3
    question = _q("a", {"s1": 1, "s2": 1, "s3": 1}, gold_groups=(("s1", "s2"), ("s3",)), category="Basic")
    scores = personabench_scores([question], {"a": ["s2", "x", "s1", "s3"]}, k=3)
    assert scores["pb_recall@3"]["a"] == 0.5  # {s2, s3}: s2 found; s3 is 4th
    assert scores["pb_ndcg@3"]["a"] == pytest.approx(1 / (1 + 1 / math.log2(3)))
    # ranx counts all three gold ids: 2 of 3 within the top 3
    assert ranx_scores([question], {"a": ["s2", "x", "s1", "s3"]}, ["recall@3"])["recall@3"]["a"] == 2 / 3


def test_personabench_protocol_leaves_out_subjective_questions() -> None:
    subjective = _q("s", {"x": 1}, gold_groups=(("x",),), category="Subjective")
    basic = _q("b", {"x": 1}, gold_groups=(("x",),), category="Basic information")
    scores = personabench_scores([subjective, basic], {"s": ["x"], "b": ["x"]}, k=1)
    assert scores["pb_recall@1"] == {"b": 1.0}
    with pytest.raises(ValueError, match="gold_groups"):
        personabench_scores([_q("c", {"x": 1}, category="Social")], {}, k=1)


def _run(name: str, per_question: dict[str, list[float]]) -> MethodRun:
    seeds = len(next(iter(per_question.values())))
    return MethodRun(name, list(range(seeds)), seeds > 1, scores={"recall@5": per_question})


def test_summary_is_mean_and_sample_std_over_seed_means() -> None:
    run = _run("m", {"a": [1.0, 0.0, 1.0], "b": [0.0, 0.0, 1.0]})  # seed means 0.5, 0.0, 1.0
    summary = summarize(run, "recall@5")
    assert (summary.mean, summary.questions, summary.seeds) == (0.5, 2, 3)
    assert summary.std == pytest.approx(0.5)
    assert summarize(run, "recall@5", ["b"]).mean == pytest.approx(1 / 3)


def test_paired_t_test_matches_scipy_and_reports_identical_runs() -> None:
    ours = _run("ours", {"a": [0.9], "b": [0.5], "c": [0.7], "d": [0.2]})
    base = _run("base", {"a": [0.4], "b": [0.5], "c": [0.3], "d": [0.1]})
    result = compare(ours, base, "recall@5")
    expected = ttest_rel(np.array([0.9, 0.5, 0.7, 0.2]), np.array([0.4, 0.5, 0.3, 0.1]))
    assert result.t == pytest.approx(expected.statistic) and result.p == pytest.approx(expected.pvalue)
    assert result.difference == pytest.approx(0.25) and result.questions == 4
    assert math.isnan(compare(base, base, "recall@5").p)
    shifted = _run("shifted", {q: [v[0] + 0.1] for q, v in base.scores["recall@5"].items()})
    same_gap = compare(shifted, base, "recall@5")  # every question 0.1 apart: no variance, no t-test
    assert same_gap.difference == pytest.approx(0.1) and math.isnan(same_gap.p)


def test_metric_labels() -> None:
    assert [metric_label(m) for m in ("recall@5", "ndcg@10", "mrr", "pb_recall@3", "pb_ndcg@1")] == [
        "R@5",
        "N@10",
        "MRR",
        "PB-R@3",
        "PB-N@1",
    ]


def _report(method: str, values: dict[str, float | None]) -> dict[str, Any]:
    return {"methods": {method: {"per_question": {"recall@5": values}}}}


def test_compare_reports_pairs_common_questions() -> None:
    ours = _report("dense", {"a": 0.9, "b": 0.5, "c": 0.7, "d": 0.2, "only-ours": 1.0})
    theirs = _report("dense", {"a": 0.4, "b": 0.5, "c": 0.3, "d": 0.1, "e": None})
    result = compare_reports(ours, theirs, "dense", "recall@5")
    assert result.questions == 4 and result.difference == pytest.approx(0.25)
    assert (
        compare_reports(ours, _report("bm25", {"a": 0.9}), "dense", "recall@5", baseline="bm25").questions
        == 1
    )
    with pytest.raises(KeyError, match="method 'hybrid' not in report"):
        compare_reports(ours, theirs, "hybrid", "recall@5")
    with pytest.raises(KeyError, match="metric 'mrr' not in report"):
        compare_reports(ours, theirs, "dense", "mrr")


def test_compare_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_report("dense", {"a": 1.0, "b": 0.5, "c": 1.0})))
    b.write_text(json.dumps(_report("dense", {"a": 0.0, "b": 0.5, "c": 0.5})))
    assert main(["compare", str(a), str(b)]) == 0
    assert "R@5: dense" in capsys.readouterr().out
    assert main(["compare", str(a), str(tmp_path / "missing.json")]) == 2
    assert "missing.json: not a readable report.json" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--metric", "ndcg@3"]) == 2
