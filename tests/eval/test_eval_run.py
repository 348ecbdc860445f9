"""The harness end to end: PersonaBench questions, a real store and encoder, the CLI and its report."""

from __future__ import annotations

import json
import shlex
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.progress import Progress

from personamem.cli import main
from personamem.cli.options import command_line
from personamem.datasets.benchmark import Benchmark
from personamem.datasets.personabench import NO_GOLD, load_personabench_benchmark
from personamem.datasets.vectors import corpus_vectors, default_vector_cache, save_entry
from personamem.encoder import SentenceEncoder
from personamem.errors import IngestError, MethodError, TruncationWarning
from personamem.eval import BenchmarkName, EvalConfig, build_store, evaluate_method, run_eval
from personamem.eval.answer_judge import AnswerJudge
from personamem.eval.evaluate import _store_name
from personamem.eval.metrics import ranx_scores
from personamem.eval.stats import summarize
from personamem.llm import CTranslate2LLM
from personamem.methods import method_named
from personamem.records import Record
from personamem.testing import FakeLLM
from tests.conftest import DATA, need_data

PERSONABENCH = DATA / "personabench"


@pytest.fixture(scope="module")
def vector_cache() -> Path:
    """The CLI's own embedding cache, so the real corpus is embedded once per machine, not per test."""
    return default_vector_cache()


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")


def _tiny_personabench(root: Path, gold: dict[str, dict[str, list[str]]]) -> Path:
    """One user, three sessions, three questions, in PersonaBench's upstream layout."""
    community = root / "eval_data_v1" / "synthetic_data" / "community_0"
    noise = community / "private_data" / "noise_0.0"
    chat = [{"role": "Ana", "content": "I moved to Lisbon last spring and I teach chemistry."}]
    _write(
        noise / "conversation_data_all.json",
        [
            {
                "Name": "Ana",
                "Data": [
                    {
                        "Target_name": "Bo",
                        "Conversations": [
                            {
                                "session": "s1",
                                "time": "2024/Oct/14/04:10 PM",
                                "target_name": "Bo",
                                "conversation": chat,
                                "segment_id": "seg-1",
                            }
                        ],
                    }
                ],
            }
        ],
    )
    dialog = [{"role": "user", "content": "Suggest a vegetarian curry, I avoid meat."}]
    _write(
        noise / "user_ai_interaction_data_all.json",
        [
            {
                "Name": "Ana",
                "Data": [
                    {
                        "session": "s2",
                        "time": "2024/Oct/15/09:00 AM",
                        "user_ai_interaction": dialog,
                        "segment_id": "seg-2",
                    }
                ],
            }
        ],
    )
    item = {"title": "Trail shoes", "description": "Running shoes", "brand": "Acme", "categories": ["Sports"]}
    _write(
        noise / "purchase_history_data_all.json",
        [
            {
                "Name": "Ana",
                "Data": [
                    {
                        "session": "s3",
                        "time": "2024/Oct/16/10:00 AM",
                        "purchase_history": [item],
                        "segment_id": "seg-3",
                    }
                ],
            }
        ],
    )
    questions = [
        ("q1", "Where do I live?", "Lisbon", "Basic information"),
        ("q2", "What food do I prefer?", "vegetarian", "Preference"),
        ("q3", "What do I run in?", "Trail shoes", "Basic information"),
    ]
    _write(
        community / "eval_info" / "eval_info_all.json",
        [
            {
                "Name": "Ana",
                "Eval_Info": {
                    "qa": [
                        {
                            "q_id": i,
                            "question": q,
                            "answer": a,
                            "type": t,
                            "difficulty": "easy",
                            "outdated_value": None,
                        }
                        for i, q, a, t in questions
                    ]
                },
            }
        ],
    )
    _write(
        community / "eval_info" / "qa_gt_context_all_noise_0.0.json",
        [
            {"q_id": i, "question": q, "answer": a, "segment_id": gold[i]}
            for i, q, a, _ in questions
            if i in gold
        ],
    )
    return root


GOLD = {
    "q1": {"Lisbon": ["seg-1"]},
    "q2": {"vegetarian": ["seg-2", "seg-x"]},
    "q3": {"Trail shoes": ["seg-9"]},
}


def test_gold_naming_no_session_is_dropped_with_a_note_or_skipped(tmp_path: Path) -> None:
    bench = load_personabench_benchmark(_tiny_personabench(tmp_path, GOLD))
    assert [q.id for q in bench.questions] == ["q1", "q2"]
    assert bench.questions[1].relevant == {"seg-2": 1} and bench.questions[1].gold_groups == (("seg-2",),)
    assert bench.skip_reasons() == {NO_GOLD: 1}
    assert len(bench.notes) == 2 and "seg-x" in bench.notes[0] and "seg-9" in bench.notes[1]


def test_a_question_without_a_gold_entry_is_an_error_naming_the_file(tmp_path: Path) -> None:
    root = _tiny_personabench(tmp_path, {k: v for k, v in GOLD.items() if k != "q3"})
    with pytest.raises(
        IngestError, match=r"qa_gt_context_all_noise_0\.0\.json: no gold entry for question 'q3'"
    ):
        load_personabench_benchmark(root)


def test_a_wrong_layout_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="no PersonaBench data"):
        load_personabench_benchmark(tmp_path)
    with pytest.raises(IngestError, match=r"no folder noise_0\.3"):
        load_personabench_benchmark(_tiny_personabench(tmp_path, GOLD), noise=0.3)


@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_real_personabench_questions_resolve(noise: float) -> None:
    bench = load_personabench_benchmark(need_data(PERSONABENCH), noise=noise)
    assert len(bench.users()) == 4 and len(bench.questions) == 177 and not bench.skipped and not bench.notes
    owned = {(r.user_id, r.id) for r in bench.records}
    for q in bench.questions:
        assert q.gold_groups and q.relevant == {i: 1 for group in q.gold_groups for i in group}
        assert all((q.user_id, record_id) in owned for record_id in q.relevant)


def test_concurrent_writers_of_a_cache_entry_leave_it_whole(tmp_path: Path, encoder: SentenceEncoder) -> None:
    """Parallel evaluations share the user cache: each writes its own partial file, then renames it."""
    vectors = np.tile(encoder.encode(["the parcel went to dock 7"]), (20_000, 1))  # a LoCoMo-sized entry
    entry = tmp_path / "entry.npy"
    barrier = threading.Barrier(8)

    def write(_: int) -> None:
        barrier.wait()
        save_entry(entry, vectors)

    for _ in range(5):
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(write, range(8)))  # re-raises a writer's error
    assert [p.name for p in tmp_path.iterdir()] == ["entry.npy"] and np.array_equal(np.load(entry), vectors)


def test_evaluations_starting_together_embed_a_corpus_once(tmp_path: Path, encoder: SentenceEncoder) -> None:
    calls: list[int] = []

    class Counted:  # the real encoder, counting the corpora it is asked to embed
        name = encoder.name

        def encode(self, texts: list[str]) -> np.ndarray:
            calls.append(len(texts))
            return encoder.encode(texts)

    texts = [f"note {i}: the parcel went to dock {i * 7}" for i in range(200)]
    barrier = threading.Barrier(4)

    def evaluate(_: int) -> np.ndarray:
        barrier.wait()
        return corpus_vectors(Counted(), texts, tmp_path)  # type: ignore[arg-type]

    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(evaluate, range(4)))
    assert calls == [200]  # one embedded it; three waited for its entry and read it
    assert all(np.array_equal(vectors, found[0]) for vectors in found)
    assert np.allclose(found[0], encoder.encode(texts), atol=1e-6)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::personamem.errors.TruncationWarning")  # most sessions exceed 256 tokens
def test_store_rankings_match_brute_force_cosine(
    tmp_path: Path, encoder: SentenceEncoder, vector_cache: Path
) -> None:
    """The read path the harness measures ranks exactly as exhaustive cosine over the same vectors."""
    bench = load_personabench_benchmark(need_data(PERSONABENCH))
    store = build_store(bench, tmp_path / "store", encoder, cache_dir=vector_cache)
    try:
        run = evaluate_method(method_named("dense", None), bench, store, depth=10)
    finally:
        store.close()
    vectors = corpus_vectors(encoder, [r.text for r in bench.records], vector_cache)
    queries = encoder.encode([q.text for q in bench.questions])
    brute = {}
    for question, query in zip(bench.questions, queries, strict=True):
        rows = [i for i, r in enumerate(bench.records) if r.user_id == question.user_id]
        order = np.argsort(-(vectors[rows] @ query), kind="stable")[:10]
        brute[question.id] = [bench.records[rows[i]].id for i in order]
    same_top5 = sum(set(run.rankings[0][q.id][:5]) == set(brute[q.id][:5]) for q in bench.questions)
    assert same_top5 >= len(bench.questions) - 2  # float ties may swap at most a couple
    ours = np.mean([s[0] for s in run.scores["recall@5"].values()])
    theirs = np.mean(list(ranx_scores(bench.questions, brute, ["recall@5"])["recall@5"].values()))
    assert ours == pytest.approx(theirs, abs=0.01)
    assert 0.2 < ours < 0.6  # MiniLM on PersonaBench: the PBR paper reports 0.38 on six users


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::personamem.errors.TruncationWarning")  # most sessions exceed 256 tokens
def test_eval_command_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    argv = ["eval", "--benchmark", "personabench", "--data", str(need_data(PERSONABENCH))]
    argv += ["--method", "dense", "--method", "bm25", "--baseline", "dense", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "bm25 vs dense, R@5" in printed and "PB-R@5" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["benchmark"]["questions"] == 177 and report["baseline"] == "dense"
    dense = report["methods"]["dense"]["overall"]
    assert dense["recall@5"]["questions"] == 177 and dense["pb_recall@5"]["questions"] == 154  # no Subjective
    assert {c["metric"] for c in report["comparisons"]} >= {"recall@5", "pb_ndcg@5"}
    assert report["command"].startswith("personamem eval --benchmark personabench")
    markdown = (out / "report.md").read_text()
    assert "## PersonaBench protocol" in markdown and "## Paired t-test against dense" in markdown
    assert (out / "metrics.png").stat().st_size > 0 and (out / "categories.png").stat().st_size > 0


def test_eval_command_rejects_bad_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["eval", "--benchmark", "personabench", "--data", str(tmp_path)]
    assert main([*base, "--method", "magic"]) == 2
    assert "unknown method(s) ['magic']" in capsys.readouterr().err
    assert main([*base, "--baseline", "bm25"]) == 2
    assert "baseline 'bm25' must be one of the methods run" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "o")]) == 1
    assert "no PersonaBench data" in capsys.readouterr().err
    assert main(["eval", "--benchmark", "nope", "--data", str(tmp_path)]) == 2


def test_personalized_methods_run_through_the_harness(tmp_path: Path, encoder: SentenceEncoder) -> None:
    root = _tiny_personabench(tmp_path / "data", GOLD)
    config = EvalConfig(
        benchmark=BenchmarkName.PERSONABENCH, data=root, methods=("dense", "pbr-no-prf"), baseline="dense"
    )
    report = run_eval(config, encoder=encoder, cache_dir=None)
    assert [run.method for run in report.runs] == ["dense", "pbr-no-prf"]
    assert not report.runs[1].stochastic and len(report.runs[1].seeds) == 1
    assert set(report.runs[1].scores["recall@1"]) == {"q1", "q2"}
    with pytest.raises(
        MethodError, match=r"needs a frozen LLM.*methods without one: dense, bm25, hybrid, pbr-no-prf"
    ):
        method_named("pbr", None)
    with pytest.raises(MethodError, match="unknown method 'magic'; choose from: dense, bm25, hybrid, pbr"):
        method_named("magic", None)
    assert method_named("hyde", FakeLLM()).stochastic


def test_llm_outputs_are_reused_by_a_later_run(tmp_path: Path, encoder: SentenceEncoder) -> None:
    root = _tiny_personabench(tmp_path / "data", GOLD)
    config = EvalConfig(benchmark=BenchmarkName.PERSONABENCH, data=root, methods=("hyde",))
    llm = FakeLLM(lambda prompt: "Ana lives in Lisbon and teaches chemistry.")
    stores = tmp_path / "stores"
    report = run_eval(config, encoder=encoder, llm=llm, store_dir=stores)
    first = llm.calls
    assert first > 0 and len(list(stores.iterdir())) == 1
    questions = len(report.benchmark.questions)
    assert first < questions  # the questions' LLM calls were batched ahead of ranking
    assert len(report.runs[0].prepare_s) == 1 and "batched LLM ms" in report.to_markdown()
    run_eval(config, encoder=encoder, llm=llm, store_dir=stores)
    assert llm.calls == first  # the expansions came from the kept store
    other = EvalConfig(benchmark=BenchmarkName.PERSONABENCH, data=root, methods=("hyde",), render="json")
    run_eval(other, encoder=encoder, llm=llm, store_dir=stores)
    assert len(list(stores.iterdir())) == 2  # another corpus rendering, another store


def test_only_the_users_asked_are_stored(encoder: SentenceEncoder, vector_cache: Path) -> None:
    config = EvalConfig(
        benchmark=BenchmarkName.PREFEVAL,
        data=need_data(DATA / "prefeval"),
        options={"prefeval": {"inter_turns": 1, "replies": True}},
        max_questions=3,
    )
    with warnings.catch_warnings():  # a reply past the encoder's window warns where it is embedded
        warnings.simplefilter("ignore", TruncationWarning)
        report = run_eval(config, encoder=encoder, cache_dir=vector_cache)
    asked = {q.user_id for q in report.benchmark.questions}
    assert len(asked) == 3 and {r.user_id for r in report.benchmark.records} == asked
    assert len(report.benchmark.records) == 3 * 3  # the preference, a turn and its reply
    assert set(report.runs[0].scores["recall@1"]) == {q.id for q in report.benchmark.questions}


def test_a_record_whose_metadata_changed_gets_a_store_of_its_own(encoder: SentenceEncoder) -> None:
    """A loader that relabels a record's session (same id and text) must not reuse the kept store."""

    def corpus(session: str) -> Benchmark:
        record = Record(user_id="u", id="r", text="I moved to Lisbon.", metadata={"session": session})
        return Benchmark(name="tiny", records=[record], questions=[])

    assert _store_name(corpus("s1"), encoder) == _store_name(corpus("s1"), encoder)
    assert _store_name(corpus("s1"), encoder) != _store_name(corpus("s2"), encoder)


def test_a_pipeline_file_is_scored_as_one_method(tmp_path: Path, encoder: SentenceEncoder) -> None:
    root = _tiny_personabench(tmp_path / "data", GOLD)
    pipeline = tmp_path / "mine.toml"
    pipeline.write_text(
        '[pipeline]\nfirst_stage = "dense"\nselector = "relevance"\ncandidates = 4\nprofile_k = 2\n'
    )
    config = EvalConfig(benchmark=BenchmarkName.PERSONABENCH, data=root, pipeline=(pipeline,))
    assert config.run_methods == (f"pipeline:{pipeline}",)  # given alone, no other method runs
    report = run_eval(config, encoder=encoder, cache_dir=None)
    assert [run.method for run in report.runs] == [f"pipeline:{pipeline}"]
    command = shlex.join(command_line(config))  # what `personamem eval` writes into the report
    assert f"--pipeline {pipeline}" in command and "--method" not in command
    with pytest.raises(ValueError, match="unknown method"):
        EvalConfig(benchmark=BenchmarkName.PERSONABENCH, data=root, methods=("dense", "dence"))


def test_answers_are_judged_beside_recall_with_both_baselines_and_rerun_alike(
    tmp_path: Path, encoder: SentenceEncoder, ct2_llm: CTranslate2LLM
) -> None:
    root = _tiny_personabench(tmp_path / "data", GOLD)
    config = EvalConfig(
        benchmark=BenchmarkName.PERSONABENCH, data=root, methods=("dense",), answers=True, baseline="dense"
    )
    judge, stores = AnswerJudge(ct2_llm), tmp_path / "stores"
    report = run_eval(config, encoder=encoder, llm=ct2_llm, judge=judge, store_dir=stores)
    assert [run.method for run in report.runs] == ["dense", "no-memory", "full-history"]
    for run in report.runs:
        assert set(run.scores["answer_judged"]) == {"q1", "q2"}, run.method
    assert "recall@5" not in report.runs[1].scores  # a baseline ranks nothing
    tokens = {run.method: summarize(run, "answer_prompt_tokens").mean for run in report.runs}
    assert tokens["no-memory"] < tokens["dense"] <= tokens["full-history"]
    compared = {(c.method, c.metric) for c in report.comparisons()}
    assert ("no-memory", "answer_judged") in compared and ("no-memory", "recall@5") not in compared
    markdown = report.to_markdown()
    assert "| full-history | 1 | 2 |" in markdown and "judged" in markdown
    progress = Progress(disable=True)
    again = run_eval(config, encoder=encoder, llm=ct2_llm, judge=judge, store_dir=stores, progress=progress)
    bars = {t.description: (t.completed, t.total) for t in progress.tasks if "answers" in t.description}
    assert bars == {  # two answered questions x (scored, answered, judged)
        label: (6, 6) for label in ("dense answers (seed 0)", "no-memory answers", "full-history answers")
    }
    for method in ("dense", "no-memory", "full-history"):  # the kept answers and verdicts, read back
        assert (
            again.to_json()["methods"][method]["per_question"]
            == report.to_json()["methods"][method]["per_question"]
        )
