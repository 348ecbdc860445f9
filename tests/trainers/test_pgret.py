"""PG-Ret: the binary-action policy gradient, its reward, the judge's calibration, one real training
step of the query tower, and the trained tower as a first stage of the pipeline."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from accelerate import Accelerator

from personamem import PersonaMem, Record, SentenceEncoder
from personamem.datasets import Benchmark, Question, UserSplit
from personamem.errors import CheckpointError, ConfigError, MethodError
from personamem.eval.judge import RelevanceJudge, calibrate, judge_auc
from personamem.eval.metrics import novelty_at_k
from personamem.eval.tower_eval import evaluate_towers
from personamem.llm import TransformersLLM
from personamem.methods import method_config
from personamem.pipeline.config import pipeline_config
from personamem.retrieval.query_tower import CONFIG_FILE, QueryTower
from personamem.trainers.pgret.config import PGRetTrainConfig
from personamem.trainers.pgret.data import (
    LoggedQuery,
    PGRetData,
    UserCorpus,
    data_from_benchmark,
)
from personamem.trainers.pgret.policy import binary_policy_loss, query_logits
from personamem.trainers.pgret.reward import ItemReward, corrected_relevance
from personamem.trainers.pgret.trainer import QueryPolicy, _freeze_unused, _step, train_pgret

COOK = [
    "I'm vegan and cook lentils most nights.",
    "My favourite dish is a spicy tofu curry.",
    "I take the 8:15 train to work.",
    "My sister lives in Porto.",
    "I play the cello on Sundays.",
    "I bake sourdough bread every weekend.",
    "I am allergic to peanuts.",
    "Our flat has a small balcony with tomatoes.",
]
QUERIES = [
    ("q1", "What do I like to eat?", ("r0", "r1")),
    ("q2", "Which instrument do I play?", ("r4",)),
    ("q3", "What am I allergic to?", ("r6",)),
    ("q4", "How do I get to work?", ("r2",)),
]


def test_binary_policy_gradient_learns_a_known_relevant_set() -> None:
    """A toy bandit: a free query vector, eight fixed record vectors, three of them relevant."""
    generator = torch.Generator().manual_seed(0)
    records = torch.nn.functional.normalize(torch.randn(8, 16, generator=generator), dim=-1)
    relevant = torch.tensor([1.0, 1.0, 1.0, 0, 0, 0, 0, 0])
    query = torch.nn.Parameter(torch.randn(16, generator=generator))
    optimizer = torch.optim.Adam([query], lr=0.05)
    rewards = ItemReward()(relevant, torch.ones(8))
    one_query = torch.zeros(8, dtype=torch.long)
    for _ in range(300):
        logits = query_logits(records @ torch.nn.functional.normalize(query, dim=0), one_query, 0.1)
        with torch.no_grad():
            actions = torch.bernoulli(torch.sigmoid(logits), generator=generator)
        loss = binary_policy_loss(logits, actions, rewards)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        scores = records @ torch.nn.functional.normalize(query, dim=0)
        pi = torch.sigmoid(query_logits(scores, one_query, 0.1))
    assert set(scores.topk(3).indices.tolist()) == {0, 1, 2}
    assert pi[:3].min() > 0.5 > pi[3:].max()


def test_centred_logits_cannot_reject_a_whole_query() -> None:
    """Moving all of a query's cosines together leaves π unchanged: only the ranking can learn."""
    scores = torch.tensor([0.9, 0.5, 0.1, 0.4, 0.2])
    queries = torch.tensor([0, 0, 0, 1, 1])
    shifted = scores - torch.tensor([0.3, 0.3, 0.3, -0.2, -0.2])
    assert torch.allclose(query_logits(scores, queries, 0.1), query_logits(shifted, queries, 0.1), atol=1e-5)
    expected = torch.tensor([4.0, 0.0, -4.0, 1.0, -1.0])
    assert torch.allclose(query_logits(scores, queries, 0.1), expected, atol=1e-5)


def test_item_reward_table() -> None:
    reward = ItemReward(novel=1.0, known=0.5, irrelevant=-1.0)
    values = reward(torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.tensor([1.0, 0.0, 1.0, 0.0]))
    assert values.tolist() == [1.0, 0.5, -1.0, -1.0]
    assert reward(0.5, 1.0) == 0.0  # a coin-flip relevance on a novel record: expected reward 0


def test_corrected_relevance_is_unbiased_for_a_noisy_judge() -> None:
    rng = np.random.default_rng(0)
    truth = rng.random(200_000) < 0.3
    tpr, fpr = 0.7, 0.2
    label = np.where(truth, rng.random(truth.size) < tpr, rng.random(truth.size) < fpr).astype(float)
    assert abs(corrected_relevance(label, tpr, fpr).mean() - 0.3) < 0.01
    assert label.mean() == pytest.approx(0.35, abs=0.01)  # the raw verdicts are biased (0.3·0.7 + 0.7·0.2)
    with pytest.raises(ValueError, match="true positive rate"):
        corrected_relevance(label, 0.2, 0.2)


def test_calibration_picks_the_separating_threshold() -> None:
    probabilities = [0.9, 0.8, 0.7, 0.6, 0.3, 0.2]
    labels = [True, True, False, True, False, False]
    calibration = calibrate(probabilities, labels)
    assert calibration.auc == pytest.approx(judge_auc(probabilities, labels)) == pytest.approx(8 / 9)
    assert (calibration.threshold, calibration.tpr, calibration.fpr) == (0.6, 1.0, pytest.approx(1 / 3))
    with pytest.raises(ValueError, match="both"):
        judge_auc([0.1, 0.2], [True, True])


def test_novelty_on_a_hand_made_case() -> None:
    base = ["a", "b", "c", "d"]
    assert novelty_at_k(["a", "x", "b", "y", "z"], base, 5) == pytest.approx(3 / 5)
    assert novelty_at_k(["a", "b"], base, 2) == 0.0
    assert novelty_at_k(["x"], base, 4) == pytest.approx(1 / 4)  # a short ranking is not more novel
    with pytest.raises(ValueError):
        novelty_at_k(["x"], base, 0)


def cook_logged(encoder: SentenceEncoder) -> PGRetData:
    """The cook's records and four logged queries, with base and BM25-like top lists."""
    ids = tuple(f"r{i}" for i in range(len(COOK)))
    vectors = encoder.encode(COOK)
    corpus = UserCorpus(ids, tuple(COOK), vectors)
    queries = []
    for qid, text, gold in QUERIES:
        order = np.argsort(-(vectors @ encoder.encode([text])[0]))
        top = tuple(ids[i] for i in order[:2])
        queries.append(LoggedQuery(qid, "cook", text, gold, top, tuple(ids[i] for i in order[::-1][:4])))
    return PGRetData(tuple(queries), {"cook": corpus})


@pytest.fixture(scope="module")
def cook_data(encoder: SentenceEncoder) -> PGRetData:
    return cook_logged(encoder)


@pytest.fixture(scope="module")
def judge(llm: TransformersLLM) -> RelevanceJudge:
    return RelevanceJudge(llm)


def test_a_training_step_moves_every_tower_parameter_and_no_record_vector(
    cook_data: PGRetData, judge: RelevanceJudge, encoder: SentenceEncoder
) -> None:
    from sentence_transformers import SentenceTransformer

    policy = QueryPolicy(SentenceTransformer(str(encoder.path), device="cpu"))
    _freeze_unused(policy)
    trainable = {n: p.detach().clone() for n, p in policy.named_parameters() if p.requires_grad}
    assert len(trainable) > 50
    assert not any("pooler" in n for n in trainable)  # BERT's pooler feeds no query vector
    records = {u: c.vectors.copy() for u, c in cook_data.corpora.items()}
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3, weight_decay=0.0)
    config = PGRetTrainConfig(variant="aggressive", batch_size=4, pairs_per_query=4, alpha=0.5, beta=0.25)
    vectors = {u: torch.from_numpy(c.vectors) for u, c in cook_data.corpora.items()}
    calibration = calibrate([0.9, 0.1], [True, False])
    _step(
        Accelerator(cpu=True),
        policy,
        optimizer,
        list(cook_data.queries),
        cook_data,
        vectors,
        judge,
        calibration,
        config,
        random.Random(0),
        torch.Generator().manual_seed(0),
    )
    for name, before in trainable.items():
        parameter = dict(policy.named_parameters())[name]
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
        assert not torch.equal(parameter.detach(), before), name
    for user, before in records.items():
        assert np.array_equal(cook_data.corpora[user].vectors, before)


def test_trained_tower_is_a_first_stage_everywhere(
    cook_data: PGRetData, judge: RelevanceJudge, encoder: SentenceEncoder, tmp_path: Path
) -> None:
    calibration = calibrate([0.9, 0.1], [True, False])
    config = PGRetTrainConfig(
        variant="conservative", steps=2, batch_size=2, pairs_per_query=3, validate_every=1, k=2
    )
    result = train_pgret(
        cook_data,
        cook_data,
        judge,
        calibration,
        config,
        tmp_path / "run",
        base_model_path=encoder.path,
        record_encoder=encoder,
        info={"data": "toy"},
    )
    info = json.loads((result.best / CONFIG_FILE).read_text())
    assert info["record_encoder"] == encoder.name and info["variant"] == "conservative"
    assert (tmp_path / "run" / "last" / "trainer_state.pt").is_file()
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as mem:
        mem.add_many([{"id": f"r{i}", "text": t} for i, t in enumerate(COOK)], user_id="cook")
        mem.add("bob", "I love steak houses and barbecue.")
        dense = [
            h.record.id for h in mem.search("cook", "what do I eat?", k=8, method=f"pgret:{result.best}")
        ]
        hybrid = mem.search("cook", "what do I eat?", k=3, method=f"pgret-rrf:{result.best}")
        assert sorted(dense) == sorted(f"r{i}" for i in range(len(COOK)))  # the user's records only
        assert len(hybrid) == 3 and all(h.record.user_id == "cook" for h in hybrid)
    # resume continues the step count
    resumed = train_pgret(
        cook_data,
        cook_data,
        judge,
        calibration,
        config.model_copy(update={"steps": 3}),
        tmp_path / "run",
        base_model_path=encoder.path,
        record_encoder=encoder,
        resume=True,
    )
    assert [row["step"] for row in resumed.history if "loss" in row] == [1, 2, 3]


def test_a_tower_for_another_record_encoder_is_refused(encoder: SentenceEncoder, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    folder = tmp_path / "tower"
    SentenceTransformer(str(encoder.path), device="cpu").save(str(folder))
    (folder / CONFIG_FILE).write_text(
        json.dumps({"format": "personamem-pgret-1", "record_encoder": "e5-small", "dim": 384})
    )
    with pytest.raises(CheckpointError, match="e5-small"):
        QueryTower.load(folder, encoder)
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as mem:
        mem.add("cook", "I cook lentils.")
        with pytest.raises(CheckpointError, match="retrain"):
            mem.search("cook", "food", method=f"pgret:{folder}")
    with pytest.raises(CheckpointError, match="not a PG-Ret"):
        QueryTower.load(tmp_path, encoder)


def test_pipeline_config_names_the_tower() -> None:
    config = pipeline_config({"first_stage": "pgret:/runs/best"})
    assert (config.first_stage, config.query_encoder) == ("dense", "pgret:/runs/best")
    assert method_config("pgret-rrf:/runs/best").first_stage == "hybrid"
    assert method_config("pgret:/runs/best").query_encoder == "pgret:/runs/best"
    assert method_config("dense", config).query_encoder == "base"  # a method sets the tower too
    with pytest.raises(ConfigError, match="personalizer"):
        pipeline_config({"first_stage": "pgret:/x", "personalizer": "pbr-no-prf"})
    with pytest.raises(ConfigError, match="dense or hybrid"):
        pipeline_config({"first_stage": "bm25", "query_encoder": "pgret:/x"})
    with pytest.raises(ConfigError, match="query_encoder"):
        pipeline_config({"query_encoder": "e5"})
    with pytest.raises(MethodError):
        method_config("pgret:")


def _cook_benchmark() -> Benchmark:
    records = [Record(id=f"r{i}", user_id="cook", text=t) for i, t in enumerate(COOK)]
    records += [Record(id="b0", user_id="bob", text="I love steak houses and barbecue.")]
    questions = [Question(qid, "cook", text, {g: 1 for g in gold}) for qid, text, gold in QUERIES]
    return Benchmark(name="cook", records=records, questions=questions)


def test_logged_data_come_from_a_benchmark_through_a_store(encoder: SentenceEncoder) -> None:
    data = data_from_benchmark(_cook_benchmark(), encoder, novelty_depth=3, exploration_depth=4)
    assert data.users == ["cook"] and set(data.corpora) == {"cook"}  # bob asked nothing
    q1 = data.queries[0]
    assert q1.gold == ("r0", "r1") and len(q1.base_top) == 3
    vector = encoder.encode([q1.text])[0]
    expected = np.argsort(-(data.corpora["cook"].vectors @ vector))[:3]
    assert list(q1.base_top) == [f"r{i}" for i in expected]  # the store's dense top-L is exact cosine
    assert all(r.startswith("r") for r in q1.bm25_top)
    assert UserSplit.by_count(["a", "b", "c", "d"], validation=1, test=2, seed=0).train != []
    with pytest.raises(ValueError, match="cannot give"):
        UserSplit.by_count(["a", "b"], validation=1, test=1, seed=0)


def test_tower_report_against_dense(
    pgret_checkpoint: Path, judge: RelevanceJudge, encoder: SentenceEncoder
) -> None:
    report = evaluate_towers(
        _cook_benchmark(), {"conservative": [pgret_checkpoint]}, judge, encoder, k=2, depth=3
    )
    rows = {row["method"]: row for row in report.rows()}
    assert set(rows) == {"dense", "conservative"}
    assert rows["dense"]["novelty@2"]["mean"] == 0.0  # dense against its own top 3
    assert 0.0 <= rows["conservative"]["judged_precision@2"]["mean"] <= 1.0
    assert rows["conservative"]["recall@5"]["questions"] == len(QUERIES)
    assert 0.0 <= report.calibration.auc <= 1.0
    assert json.loads(json.dumps(report.to_json()))["k"] == 2


def test_judge_verdicts_persist_and_query_likelihood_ranks_the_gold_first(
    llm: TransformersLLM, tmp_path: Path
) -> None:
    cache = tmp_path / "judge.jsonl"
    question = "What am I allergic to?"
    pairs = [(question, COOK[6]), (question, COOK[2]), (question, COOK[4])]
    first = RelevanceJudge(llm, cache_file=cache)
    margins = first.margins(pairs)
    assert margins[0] == max(margins)  # the allergy note raises the question's likelihood most
    with cache.open("a") as f:
        f.write('{"key": "cut sh')  # a crash mid-write
    again = RelevanceJudge(llm, cache_file=cache)
    assert again.margins(pairs) == margins and (again.scored, again.hits) == (0, 3)
    yes_no = RelevanceJudge(llm, mode="yes-no", cache_file=cache)  # another mode: another key
    assert len(yes_no.margins(pairs[:1])) == 1 and yes_no.scored == 1


def test_eval_pgret_needs_trained_runs(tmp_path: Path) -> None:
    from personamem.cli import main

    code = main(["eval-pgret", "--runs", str(tmp_path), "--benchmark", "locomo", "--data", str(tmp_path)])
    assert code == 2
    bad_mode = ["analyze", "judge", "--benchmark", "locomo", "--data", str(tmp_path), "--mode", "vibes"]
    assert main(bad_mode) == 2


def test_the_supervised_variant_has_no_policy_gradient(cook_data: PGRetData, judge: RelevanceJudge) -> None:
    with pytest.raises(ValueError, match="train_infonce"):
        train_pgret(
            cook_data, cook_data, judge, calibrate([1.0, -1.0], [True, False]), PGRetTrainConfig(),
            Path("unused"), base_model_path=Path("unused"), record_encoder=judge,  # type: ignore[arg-type]
        )  # fmt: skip
