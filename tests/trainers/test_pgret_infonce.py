"""PG-Ret's supervised baseline: InfoNCE pairs with hard negatives, a short real training run of the
query tower through sentence-transformers' trainer, and the frozen document route."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from rich.progress import Progress
from sentence_transformers import SentenceTransformer

from personamem import SentenceEncoder
from personamem.retrieval.query_tower import CONFIG_FILE, QueryTower
from personamem.trainers.pgret.config import PGRetTrainConfig
from personamem.trainers.pgret.data import LoggedQuery, PGRetData, UserCorpus
from personamem.trainers.pgret.infonce import infonce_pairs, infonce_trainer, train_infonce

CORPORA = {
    "ana": [
        "I'm vegan and cook lentils most nights.",
        "My favourite dish is a spicy tofu curry.",
        "I take the 8:15 train to work.",
        "My sister lives in Porto.",
        "I play the cello on Sundays.",
        "I am allergic to peanuts.",
    ],
    "bo": [
        "I drive a red pickup truck.",
        "My dog is called Biscuit.",
        "I work night shifts as a nurse.",
        "I love smoked brisket.",
        "I grew up in Oslo.",
        "I run marathons in spring.",
    ],
}
QUERIES = [  # (id, user, text, gold): 7 (query, gold) pairs
    ("a1", "ana", "What do I like to eat?", ("ana0", "ana1")),
    ("a2", "ana", "Which instrument do I play?", ("ana4",)),
    ("a3", "ana", "What am I allergic to?", ("ana5",)),
    ("b1", "bo", "What is my pet's name?", ("bo1",)),
    ("b2", "bo", "What do I do for a living?", ("bo2",)),
    ("b3", "bo", "Where am I from?", ("bo4",)),
]
BASE_DEPTH = 3
SCALE = 20.0  # MultipleNegativesRankingLoss's default: cosines are compared at temperature 1/20


@pytest.fixture(scope="module")
def data(encoder: SentenceEncoder) -> PGRetData:
    """Two users' records embedded by the real encoder, base top lists ranked by cosine."""
    corpora = {
        user: UserCorpus(tuple(f"{user}{i}" for i in range(len(texts))), tuple(texts), encoder.encode(texts))
        for user, texts in CORPORA.items()
    }
    queries = []
    for qid, user, text, gold in QUERIES:
        corpus = corpora[user]
        order = np.argsort(-(corpus.vectors @ encoder.encode([text])[0]))
        top = tuple(corpus.ids[i] for i in order[:BASE_DEPTH])
        queries.append(LoggedQuery(qid, user, text, gold, top, ()))
    return PGRetData(tuple(queries), corpora)


def _config(**update: object) -> PGRetTrainConfig:
    # 7 pairs in batches of 4: two optimizer steps per epoch
    return PGRetTrainConfig(variant="infonce", batch_size=4, epochs=1, hard_negatives=2, lr=1e-4).model_copy(
        update=update
    )


def test_pairs_take_the_base_top_non_gold_records_as_hard_negatives(data: PGRetData) -> None:
    pairs = infonce_pairs(data, hard_negatives=2)
    assert pairs.column_names == ["query", "positive", "negative_1", "negative_2"]
    assert len(pairs) == sum(len(q.gold) for q in data.queries)
    text_id = {t: i for c in data.corpora.values() for i, t in zip(c.ids, c.texts, strict=True)}
    by_text = {q.text: q for q in data.queries}
    for row in pairs:
        query = by_text[row["query"]]
        negatives = [text_id[row["negative_1"]], text_id[row["negative_2"]]]
        assert text_id[row["positive"]] in query.gold
        assert not set(negatives) & set(query.gold)
        from_top = [r for r in query.base_top if r not in query.gold][:2]
        assert negatives[: len(from_top)] == from_top  # "a1" has two gold in its top 3: one is padding
    # a short base top is padded from the end of the user's other non-gold records; unknown gold ids
    # are skipped, and a query with no known gold gives no pair
    short = LoggedQuery("s", "ana", "Where does my sister live?", ("ana3", "gone"), ("ana3", "ana0"), ())
    lost = LoggedQuery("l", "ana", "Anything?", ("gone",), (), ())
    padded = infonce_pairs(PGRetData((short, lost), data.corpora), hard_negatives=3)
    assert len(padded) == 1
    assert [text_id[padded[0][f"negative_{i}"]] for i in (1, 2, 3)] == ["ana0", "ana5", "ana4"]
    with pytest.raises(ValueError, match="no InfoNCE pairs"):
        infonce_pairs(PGRetData((lost,), data.corpora), hard_negatives=2)


def test_training_writes_a_query_tower_that_ranks_the_gold_better(
    data: PGRetData, encoder: SentenceEncoder, tmp_path: Path
) -> None:
    with Progress(disable=True) as progress:
        best = train_infonce(
            data,
            _config(),
            tmp_path / "run",
            base_model_path=encoder.path,
            record_encoder=encoder,
            info={"data": "toy"},
            progress=progress,
        )
        (task,) = progress.tasks
    assert best == tmp_path / "run" / "best"
    assert task.completed == task.total == 2
    info = json.loads((best / CONFIG_FILE).read_text())
    assert (info["variant"], info["steps"], info["seed"], info["data"]) == ("infonce", 2, 0, "toy")
    assert info["config"]["hard_negatives"] == 2 and info["record_encoder"] == encoder.name
    plain = SentenceTransformer(str(best), device="cpu", local_files_only=True)
    assert [type(m).__name__ for m in plain] == ["Transformer", "Pooling", "Normalize"]

    tower = QueryTower.load(best, encoder)
    texts = [q.text for q in data.queries]
    before, after = encoder.encode(texts), tower.encode(texts)
    assert after.shape == before.shape and np.allclose(np.linalg.norm(after, axis=1), 1.0, atol=1e-5)
    assert np.abs(after - before).max() > 1e-3
    for query, old, new in zip(data.queries, before, after, strict=True):
        assert _best_gold_rank(data, query, new) <= _best_gold_rank(data, query, old), query.id
    assert _gold_log_probability(data, after) > _gold_log_probability(data, before)


def test_the_document_route_stays_the_record_encoder(
    data: PGRetData, encoder: SentenceEncoder, tmp_path: Path
) -> None:
    trainer, tower = infonce_trainer(data, _config(), tmp_path / "run", base_model_path=encoder.path)
    trainer.train()
    assert trainer.state.global_step == 2
    routes = trainer.model[0].sub_modules
    base = SentenceTransformer(str(encoder.path), device="cpu", local_files_only=True).state_dict()
    document, query = routes["document"].state_dict(), routes["query"].state_dict()
    assert document.keys() == query.keys() == base.keys()
    assert all(torch.equal(document[k], base[k]) for k in base)  # bit-identical after training
    assert sum(not torch.equal(query[k], base[k]) for k in base) > 90  # all but BERT's unused pooler
    assert all(a is b for a, b in zip(tower, routes["query"], strict=True))  # the saved tower is this route
    optimized = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert not any(id(p) in optimized for p in routes["document"].parameters())
    # still in training mode, the frozen route embeds records exactly as the store did (no dropout)
    assert trainer.model.training
    with torch.no_grad():
        features = trainer.model.preprocess(list(data.corpora["ana"].texts), task="document")
        vectors = trainer.model(features)["sentence_embedding"].numpy()
    np.testing.assert_allclose(vectors, data.corpora["ana"].vectors, atol=1e-6)


def test_no_gold_pairs_is_refused_before_loading_a_model(data: PGRetData, encoder: SentenceEncoder) -> None:
    unknown = LoggedQuery("u", "bo", "What do I drive?", ("nope",), ("bo0",), ())
    with pytest.raises(ValueError, match="gold record"):
        train_infonce(
            PGRetData((unknown,), data.corpora),
            _config(),
            Path("unused"),
            base_model_path=encoder.path,
            record_encoder=encoder,
            info={},
        )


def _best_gold_rank(data: PGRetData, query: LoggedQuery, vector: np.ndarray) -> int:
    corpus = data.corpora[query.user_id]
    order = [corpus.ids[i] for i in np.argsort(-(corpus.vectors @ vector))]
    return min(order.index(g) for g in query.gold)


def _gold_log_probability(data: PGRetData, vectors: np.ndarray) -> float:
    """Mean log-probability of each query's gold set under a softmax over its user's records."""
    total = 0.0
    for query, vector in zip(data.queries, vectors, strict=True):
        corpus = data.corpora[query.user_id]
        logits = torch.from_numpy(corpus.vectors @ vector) * SCALE
        gold = [corpus.index()[g] for g in query.gold]
        total += float(torch.logsumexp(logits[gold], 0) - torch.logsumexp(logits, 0))
    return total / len(data.queries)
