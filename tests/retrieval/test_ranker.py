"""The learned ranker in the default first stage: real store, real encoder, the shipped model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from personamem import PersonaMem, PipelineConfig, Record
from personamem.errors import CheckpointError, ConfigError
from personamem.pipeline.config import pipeline_config
from personamem.retrieval.bm25 import tokenize
from personamem.retrieval.cues import proper_names
from personamem.retrieval.ranker import (
    FEATURES,
    GATED_START,
    INFO_FILE,
    MODEL_FILE,
    NEIGHBOUR,
    SCORE_FUSION,
    SHIPPED_RANKERS,
    RankerModel,
    _top,
    _top_positive,
    _two_best,
    adapted_score_fusion,
    score_fusion,
    summed_score_fusion,
)
from personamem.trainers.ranker.export import save_ranker

TEXTS = [
    "Caroline went to the LGBTQ support group on 7 May 2023.",
    "Melanie painted a sunrise over the lake last year.",
    "I'm vegan and cook lentils most nights.",
    "My favourite dish is a spicy tofu curry.",
    "I take the 8:15 train to work.",
    "Caroline is researching adoption agencies.",
    "Melanie ran a charity race for mental health.",
    "I am allergic to peanuts.",
    "We went camping in the mountains in June.",
    "My sister Ana lives in Porto.",
]
QUERIES = [
    "When did Caroline go to the support group?",
    "what should I cook tonight?",
    "Where does Ana live?",
]


@pytest.fixture
def mem(mem: PersonaMem) -> PersonaMem:
    mem.add_many([{"id": f"r{i}", "text": t} for i, t in enumerate(TEXTS)], user_id="u")
    mem.add("other", "Caroline's support group meets on Tuesdays.")
    return mem


def _ids(mem: PersonaMem, query: str, config: PipelineConfig | str | None = None, k: int = 10) -> list[str]:
    return [hit.record.id for hit in mem.search("u", query, k=k, method=config)]


def test_the_default_runs_the_shipped_ranker_and_says_so(mem: PersonaMem) -> None:
    pipeline = mem.pipeline()
    assert pipeline.ranker_name == "mixed" and pipeline.first_stage["ranker"] == "mixed"
    assert mem.context("u", QUERIES[0]).first_stage["ranker"] == "mixed"
    for method in ("hybrid", "adapter-rrf:mixed", "dense"):  # names keep their meaning: no ranker
        assert mem.pipeline(method).ranker is None
    assert mem.pipeline(PipelineConfig(dense_weight=0.6)).ranker is None  # not the default's fusion


def test_a_ranker_without_trees_serves_the_score_fusion(mem: PersonaMem, tmp_path: Path) -> None:
    """Base cosine, plus 0.4 BM25 unless the question asks for a suggestion, each standardized over
    the user's records; computed here from the store's vectors, the encoder and BM25's scores."""
    save_ranker(tmp_path / "flat", None, alpha=10.0, iterations=0, info={})
    ranker = mem.pipeline(PipelineConfig(ranker=str(tmp_path / "flat"))).ranker
    assert ranker is not None
    records, vectors = mem.store.vectors("u")
    order = [r.id for r in ranker._bm25.index("u").records]
    vectors = vectors[[[r.id for r in records].index(rid) for rid in order]]

    def standard(x: np.ndarray) -> np.ndarray:
        return (x - x.mean()) / x.std()

    # the last three: dense's and BM25's best records differ; the first of them asks for a suggestion
    joins = {QUERIES[0]: True, QUERIES[1]: False, QUERIES[2]: True}
    joins |= {"What's a good way to get to work? (charity)": False, "How do I get to work? (charity)": True}
    joins |= {"What is Caroline planning? (lentils)": True}
    for query, lexical_too in joins.items():
        cosine = vectors @ mem.store.encoder.encode([query])[0]
        lexical = ranker._bm25.index("u").scores(tokenize([query])[0])
        fused = standard(cosine) + SCORE_FUSION * lexical_too * standard(lexical)
        expected = [order[i] for i in np.argsort(-fused, kind="stable")]
        assert _ids(mem, query, PipelineConfig(ranker=str(tmp_path / "flat"))) == expected


def test_a_request_for_a_suggestion_gets_plain_dense_order(mem: PersonaMem) -> None:
    """A suggestion is answered by what the user likes, not by its words: the default is dense itself."""
    asks = ("what should I cook tonight?", "What's a good way to get to work?", "Any tips on food to avoid?")
    for query in asks:
        assert _ids(mem, query, k=5) == _ids(mem, query, "dense", k=5)
    # a question about the user's own past brings BM25 in: "Porto" is one record's alone
    assert _ids(mem, "Who lives in Porto?", k=1) == ["r9"]


def test_every_record_of_the_user_and_no_other_comes_back(mem: PersonaMem) -> None:
    for query in QUERIES:
        found = _ids(mem, query, k=50)
        assert sorted(found) == sorted(f"r{i}" for i in range(len(TEXTS)))  # the candidates, then the rest
    assert _ids(mem, QUERIES[0], k=3) == _ids(mem, QUERIES[0], k=10)[:3]


def test_a_superseded_record_is_never_ranked_unless_asked(mem: PersonaMem) -> None:
    mem.supersede("u", "r9", "My sister Ana moved to Lisbon.", id="r10")
    assert "r9" not in _ids(mem, QUERIES[2]) and "r10" in _ids(mem, QUERIES[2])
    every = [hit.record.id for hit in mem.search("u", QUERIES[2], k=20, include_superseded=True)]
    assert {"r9", "r10"} <= set(every)


def test_a_tenant_ranks_its_own_users_only(mem: PersonaMem) -> None:
    acme = mem.tenant("acme")
    acme.add_many([{"id": "a0", "text": "Caroline went to the support group."}], user_id="u")
    assert [hit.record.id for hit in acme.search("u", QUERIES[0])] == ["a0"]
    assert "a0" not in _ids(mem, QUERIES[0])


def test_a_tampered_or_foreign_model_does_not_load(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    for name in (INFO_FILE, MODEL_FILE):
        folder.mkdir(exist_ok=True)
        (folder / name).write_bytes((SHIPPED_RANKERS / "mixed" / name).read_bytes())
    (folder / MODEL_FILE).write_bytes((folder / MODEL_FILE).read_bytes() + b"\n")
    with pytest.raises(CheckpointError, match="does not match the sha256"):
        RankerModel.load(folder)
    info = json.loads((SHIPPED_RANKERS / "mixed" / INFO_FILE).read_text())
    (folder / MODEL_FILE).write_bytes((SHIPPED_RANKERS / "mixed" / MODEL_FILE).read_bytes())
    (folder / INFO_FILE).write_text(json.dumps({**info, "features": ["cos_base", "hunch"]}))
    with pytest.raises(CheckpointError, match="does not compute: hunch"):
        RankerModel.load(folder)
    (folder / INFO_FILE).write_text(json.dumps({**info, "features": ["cos_base"]}))
    with pytest.raises(CheckpointError, match=r"its trees read \d+ features, its ranker\.json names 1"):
        RankerModel.load(folder).score(np.zeros((3, len(FEATURES)), np.float32))
    with pytest.raises(CheckpointError, match="not a ranker folder"):
        RankerModel.load(tmp_path / "missing")


def test_a_ranker_needs_hybrid_with_an_adapter(mem: PersonaMem) -> None:
    with pytest.raises(ConfigError, match="use the hybrid first stage"):
        pipeline_config({"first_stage": "bm25", "ranker": "mixed"})
    with pytest.raises(Exception, match="reads a query adapter's vectors"):
        mem.pipeline(PipelineConfig(ranker="mixed", query_encoder="base"))


def test_the_top_rows_are_a_stable_sorts_first_k_without_sorting_them_all() -> None:
    rng = np.random.default_rng(0)
    for trial in range(600):
        n = int(rng.integers(0, 300))
        scores = [
            rng.normal(size=n),
            rng.integers(0, 4, size=n),  # many ties, at the k-th score too
            np.where(rng.random(n) < 0.7, 0.0, rng.random(n)),  # BM25: mostly zero
        ][trial % 3].astype(np.float32)
        positive = np.argsort(-scores, kind="stable")[: int((scores > 0).sum())]
        for k in (1, 7, 100):
            assert np.array_equal(_top(scores, k), np.argsort(-scores, kind="stable")[:k])
            assert np.array_equal(_top_positive(scores, k), positive[:k])
        for top in (_top(scores, 100), _top_positive(scores, 100)):
            assert np.array_equal(_two_best(scores, top), np.sort(scores)[::-1][:2])


def test_a_residual_fitted_before_the_score_fusion_keeps_the_start_it_was_fitted_on(tmp_path: Path) -> None:
    """``improve`` fitted its trees on the root as it served then: the RRF start wherever the gate said no."""
    shipped = RankerModel.load("mixed")
    rows = np.random.default_rng(0).normal(size=(6, len(FEATURES))).astype(np.float32)
    starts = {
        "old": {},
        "adapted": {"gated_start": "score fusion"},
        "summed": {"gated_start": "named score fusion"},
        "new": {"gated_start": GATED_START},
    }
    for name, named in starts.items():
        base = {"ranker": "mixed", "sha256": shipped.info["sha256"], **named}
        save_ranker(tmp_path / name, None, alpha=shipped.alpha, iterations=0, info={"base": base})
    old, adapted, summed, new = (RankerModel.load(tmp_path / name) for name in starts)
    fused = shipped.alpha * rows[:, FEATURES.index("fused_default")]
    np.testing.assert_allclose(old.score(rows, trees=False), fused, rtol=1e-6)
    np.testing.assert_allclose(adapted.score(rows, trees=False), adapted_score_fusion(rows), rtol=1e-6)
    np.testing.assert_allclose(summed.score(rows, trees=False), summed_score_fusion(rows), rtol=1e-6)
    assert not np.allclose(summed_score_fusion(rows), score_fusion(rows))
    np.testing.assert_allclose(new.score(rows, trees=False), score_fusion(rows), rtol=1e-6)
    np.testing.assert_allclose(shipped.score(rows, trees=False), score_fusion(rows), rtol=1e-6)


def test_a_model_reads_the_columns_it_was_trained_on_when_this_version_computes_more(tmp_path: Path) -> None:
    """A folder names the features its trees were fitted on, in its order; the ranker gives it those."""
    import lightgbm

    own = [name for name in reversed(FEATURES) if name not in ("z_base", "q_named_in_history")]
    rng = np.random.default_rng(1)
    train = rng.normal(size=(200, len(own)))
    booster = lightgbm.train(
        {"objective": "regression", "verbose": -1, "min_data_in_leaf": 5},
        lightgbm.Dataset(train, train[:, 0] - train[:, 3], feature_name=own),
        num_boost_round=5,
    )
    save_ranker(tmp_path / "older", booster, alpha=10.0, iterations=5, info={})
    model = RankerModel.load(tmp_path / "older")
    assert model.info["features"] == own and model.session is not None
    rows = rng.normal(size=(5, len(FEATURES))).astype(np.float32)
    mine = rows[:, [FEATURES.index(name) for name in own]]
    expected = model.alpha * rows[:, FEATURES.index("fused_default")] + booster.predict(mine)
    np.testing.assert_allclose(model.score(rows, trees=True), expected, rtol=1e-4, atol=1e-5)


SESSION = [
    ("a", "Melanie", "Did you ever make it to the pottery class at the community centre?"),
    ("a", "Caroline", "Yes! Last Saturday, and I made a small blue bowl there."),
    ("b", "Caroline", "I bought a new kitchen bowl and some plates at the market."),
    ("b", "Melanie", "The kids loved the science museum on Sunday."),
    ("c", "Caroline", "Work was busy, I finished the report late."),
    ("c", "Melanie", "We are planning a camping trip in June."),
    ("d", "Caroline", "I made a cake for my friend's birthday party."),
    ("f", "Caroline", "The painting class was fun and I made new friends there."),
    ("e", "Caroline", "I made soup from the garden vegetables."),
]


def test_a_records_session_is_its_metadatas_session_else_langchains_session_id() -> None:
    def session(metadata: dict[str, Any]) -> str | None:
        return Record(user_id="u", text="t", metadata=metadata).session

    assert session({"session": 3}) == "3" and session({"session_id": "chat-1"}) == "chat-1"
    assert session({"session": "a", "session_id": "b"}) == "a" and session({}) is None
    assert session({"session": None, "session_id": "b"}) is None  # LlamaIndex: no session, said so


def test_a_turn_borrows_from_its_neighbours_in_the_same_session(mem: PersonaMem) -> None:
    """The answer's words are on the turn before it: the session's order lifts the answer."""
    for user, sessions in (("s", True), ("n", False)):
        mem.add_many(
            [
                {
                    "id": f"t{i}",
                    "text": f"{who}: {text}",
                    "metadata": {"speaker": who, "session": s} if sessions else {"speaker": who},
                }
                for i, (s, who, text) in enumerate(SESSION)
            ],
            user_id=user,
        )
    query = "What did Caroline make at the pottery class?"
    ranks = {user: [hit.record.id for hit in mem.search(user, query, k=9)].index("t1") for user in ("s", "n")}
    assert ranks["s"] < ranks["n"]  # without sessions nothing borrows
    # a neighbour the read cannot see lends nothing: Caroline's turns alone rank as without sessions
    alone = {
        u: [h.record.id for h in mem.search(u, query, k=3, filters={"metadata.speaker": "Caroline"})]
        for u in ("s", "n")
    }
    assert alone["s"] == alone["n"]


CHATS = [  # (session, role, text): a lone statement, a user-assistant chat, two people talking, another chat
    ("p", "user", "I avoid hotels with a loud nightlife; quiet rooms matter most to me."),
    ("c", "user", "What are the most famous hotels on the strip, and which have the best shows?"),
    ("c", "assistant", "The strip's famous hotels host the best shows, casinos and night clubs."),
    ("d", None, "Melanie: Did you ever make it to the pottery class at the community centre?"),
    ("d", None, "Caroline: Yes! Last Saturday, and I made a small blue bowl there."),
    ("e", "user", "Plans for the weekend?"),
    ("e", "assistant", "Book a hotel room near the beach for the weekend trip."),
]


def test_a_turn_is_lifted_toward_a_better_neighbour_between_people_and_a_suggestion_reads_no_bm25(
    mem: PersonaMem,
) -> None:
    """The score fusion over a sessioned history, computed here from the store's vectors and BM25."""
    mem.add_many(
        [
            {"id": f"t{i}", "text": text, "metadata": {"session": s} | ({"role": role} if role else {})}
            for i, (s, role, text) in enumerate(CHATS)
        ],
        user_id="chat",
    )
    ranker = mem.pipeline().ranker
    assert ranker is not None
    records, vectors = mem.store.vectors("chat")
    order = [r.id for r in ranker._bm25.index("chat").records]
    vectors = vectors[[[r.id for r in records].index(rid) for rid in order]]
    session, role = zip(*[CHATS[int(rid[1:])][:2] for rid in order], strict=True)

    def standard(x: np.ndarray) -> np.ndarray:
        return (x - x.mean()) / x.std()

    def by_hand(query: str, bm25_joins: bool, people_only: bool = True) -> tuple[list[str], np.ndarray]:
        cosine = vectors @ mem.store.encoder.encode([query])[0]
        lexical = ranker._bm25.index("chat").scores(tokenize([query])[0])
        own = standard(cosine) + SCORE_FUSION * bm25_joins * standard(lexical)
        lift = np.zeros(len(own))
        for i in range(len(own)):
            beside = [j for j in (i - 1, i + 1) if 0 <= j < len(own) and session[j] == session[i]]
            if people_only:
                beside = [j for j in beside if role[j] != "assistant"] if role[i] != "assistant" else []
            if beside:
                lift[i] = max(0.0, max(own[j] for j in beside) - own[i])
        fused = own + NEIGHBOUR * lift
        return [order[i] for i in np.argsort(-fused, kind="stable")], lift

    def served(query: str) -> list[str]:
        return [hit.record.id for hit in mem.search("chat", query, k=len(CHATS))]

    # asks for a suggestion: dense's order, save that a person's turn may be lifted toward a better one
    hotel = "Can you suggest a hotel for my trip?"
    assert served(hotel) == by_hand(hotel, False)[0]
    assert by_hand(hotel, False, people_only=False)[0] != served(hotel)  # "Plans for the weekend?" is not
    # asks about the past: BM25 joins, and Caroline's answer is lifted toward the question
    pottery = "What did Caroline make at the pottery class?"
    expected, lift = by_hand(pottery, True)
    assert served(pottery) == expected and lift[order.index("t4")] > 0 and lift[order.index("t1")] == 0
    asked = "Which hotels did I ask about?"  # names nothing, and BM25 still joins
    assert served(asked) == by_hand(asked, True)[0] != by_hand(asked, False)[0]
    # asks for a suggestion, in any of the usual ways, naming something or not: no BM25
    for like in (
        "Can you suggest a class for me like the one Caroline took?",
        "What are some quiet hotels for me?",
    ):
        assert served(like) == by_hand(like, False)[0] != by_hand(like, True)[0]


def test_proper_names_are_what_a_history_capitalises_mid_sentence_more_than_not() -> None:
    texts = [
        "[8 May, 2023] Caroline: I went to Lisbon with Melanie. Then we ate.",
        "Melanie: That sounds great, Caroline! I hope You liked it.",
        "Then the game ended, and the Game was over.",  # "game" is lowercase as often
    ]
    # not "then" (opens sentences), "you" (a function word), "game" (lowercase as often); "may": a month
    assert proper_names(texts) == {"caroline", "melanie", "lisbon", "may"}


def test_a_question_typed_in_lowercase_names_what_its_capitalised_form_does(
    mem: PersonaMem, tmp_path: Path
) -> None:
    """A residual fitted on the names rule keeps it, and a lowercase question's words name what the
    history capitalises: BM25 joins both forms alike."""
    shipped = RankerModel.load("mixed")
    base = {"ranker": "mixed", "sha256": shipped.info["sha256"], "gated_start": "named score fusion"}
    save_ranker(tmp_path / "named", None, alpha=shipped.alpha, iterations=0, info={"base": base})
    texts = [
        "We had dinner with Priya at the new ramen place.",
        "Then I called Priya about the tickets.",
        "The concert was loud but fun.",
        "I love going to concerts with friends.",
        "My favourite band played an encore.",
        "Tickets for the show sold out fast.",
    ]
    mem.add_many([{"id": f"p{i}", "text": text} for i, text in enumerate(texts)], user_id="l")

    def ids(query: str, method: PipelineConfig | str) -> list[str]:
        return [hit.record.id for hit in mem.search("l", query, k=6, method=method)]

    named = PipelineConfig(ranker=str(tmp_path / "named"))
    query = "What did I talk about with Priya?"
    assert ids(query, named) != ids(query, "dense")  # "Priya" is named: BM25 moved it
    assert ids(query.lower(), named) == ids(query, named)
