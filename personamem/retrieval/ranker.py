"""The learned ranker: the default first stage's candidates reordered by a LightGBM lambdarank model.

The package default (hybrid: dense with the shipped query adapter, weighted 0.8, fused with BM25 at
RRF k = 2) puts LoCoMo's evidence below plain BM25 at the top of the list. The ranker starts from
that default's own fused score (``alpha · fused``) and adds a gradient-boosted correction learned
from signals the store already has: base and adapted cosine and their gaps to the question's best,
BM25 and its margin, the three ranks, the record's length, position, kind and role, names, numbers
and dates shared with the query, and features of the history and the question that tell when
lexical matching helps (the user's record lengths, the share of query terms the user's records
hold, the question's form). With no trees it is exactly that RRF order; monotone constraints keep the
default's signals pushing up. Candidates are the union of the top 50 of adapted dense, base dense
and BM25; below them the default's order follows, so recall deep in the list is the default's.

A model is a folder: ``ranker.onnx`` (the trees, exported from LightGBM and run by onnxruntime, which
the encoder already loads: ``import lightgbm`` costs 1.3 s, as it imports scikit-learn, and a CLI
search would pay it every time), ``trees.txt`` (LightGBM's own text, for inspection) and
``ranker.json`` (the feature list, ``alpha``, the trees used, the sha256 of ``ranker.onnx``, the
recipe and the user split). ``mixed`` ships with the package (``personamem/data/rankers/mixed``);
``personamem train ranker`` rebuilds it. A folder that ``personamem improve`` fits to one store names
a ``base`` ranker in its ``ranker.json`` and adds its trees to the base's score: a residual learned
where the data is, which with no trees is the base exactly.

Trees fitted on benchmarks serve only histories shaped like those on which they gained
(:mod:`personamem.retrieval.ranker_gate`). Any other user, and every user of a ranker that kept no
trees, gets the score fusion (:func:`score_fusion`): the candidates' cosine standardized over the
user's records, plus BM25's at :data:`SCORE_FUSION` unless the question asks for a suggestion,
plus :data:`NEIGHBOUR` times how far the best neighbouring turn in the record's session stands
above it (people's turns, not an assistant's).
The cosine is the query adapter's only for a history inside the ranker's adapter gate, the base one
elsewhere. Left out of every part's training, no benchmark falls below the best plain method with
it by more than one question's worth (0.006 of 160), where the RRF fusion the trees start from
lost LoCoMo by 0.064 (docs/RESULTS.md). The shipped ``mixed``'s trees gained over the score fusion
on no benchmark's validation users, so its gate admits no one and the package default is the score
fusion; the trees stay the root ``improve``'s residuals start from. A residual's own trees were
fitted on the store they serve, so only the root's are gated. Whatever scores the candidates, those
written in the window the question names ("in June", "last week") are raised
(:func:`inside_window`, :mod:`personamem.retrieval.when`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from personamem.errors import CheckpointError
from personamem.records import Record
from personamem.retrieval.base import Hit, ranked
from personamem.retrieval.bm25 import BM25Retriever, tokenize
from personamem.retrieval.cues import NAME, NOT_NAMES, WORD, dates, names, numbers
from personamem.retrieval.hybrid import ADAPTER_FUSION, PLAIN_RRF, Fusion
from personamem.retrieval.ranker_gate import GateDecision, RankerGate, as_profile
from personamem.retrieval.user_signals import ASSISTANT, UserSignals
from personamem.retrieval.when import WINDOW_BOOST, named_window
from personamem.store import Store
from personamem.store.read import NOW, Read
from personamem.telemetry import staged

if TYPE_CHECKING:
    import onnxruntime

    from personamem.retrieval.query_adapter import QueryAdapter

__all__ = [
    "FEATURES",
    "SHIPPED_RANKERS",
    "LearnedRanker",
    "RankerModel",
    "UserSignals",
    "adapted_score_fusion",
    "candidate_features",
    "inside_window",
    "score_fusion",
    "summed_score_fusion",
    "visible_rows",
]

SHIPPED_RANKERS = Path(__file__).resolve().parent.parent / "data" / "rankers"
"""Rankers that ship with the package, one folder each."""
MODEL_FILE, INFO_FILE, TREES_FILE = "ranker.onnx", "ranker.json", "trees.txt"
MODEL_INPUT = "features"
"""The ONNX graph's input: ``(candidates, len(FEATURES))`` float32."""

POOL = 50
"""Candidates: the union of the top ``POOL`` of adapted dense, base dense and BM25."""
DEPTH = 100
"""How deep the default's own lists are fused (as the harness ranks)."""
SCORE_FUSION = 0.4
"""BM25's weight in :func:`score_fusion` where it joins: the best worst fold of leave-one-benchmark-out
among the weights and fusions tried (under the names rule, stop 75), and the one chosen on three folds
for the fourth in each of the four."""
NEIGHBOUR = 0.5
"""How much of the distance up to its best same-session neighbour a turn is lifted in
:func:`score_fusion`: the best recall@5 on LoCoMo's training users among 0.2-1.5 (MRR within 0.002 of
the best; the other benchmarks hold no session of more than one record, so none could choose it)."""
SUMMED_NEIGHBOUR = 0.4
"""The share of its best neighbour's score a turn gained in :func:`summed_score_fusion`."""

FEATURES: tuple[str, ...] = (
    "cos_base", "cos_adapt", "gap_base", "gap_adapt", "z_adapt", "bm25", "bm25_rel", "bm25_z",
    "rank_adapt", "rank_base", "rank_bm25", "rr_adapt", "rr_base", "rr_bm25", "fused_default", "rank_default",
    "fused_plain", "rec_words_log", "rec_pos", "kind", "role",
    "shared_names", "shared_numbers", "shared_dates", "q_words", "q_cover_rec", "q_cover_rec_x_rrbm",
    "u_mean_words_log", "u_median_words_log", "u_share_long", "u_n_records_log", "bm25_top", "bm25_margin",
    "bm25_n_pos_share", "adapt_margin", "base_margin", "adapt_top", "q_cover_user",
    "wh", "is_aux", "first_person", "what_do_i", "recommend", "should_i", "q_has_name", "q_has_number",
    "q_has_date", "rr_bm25_x_len", "rr_bm25_x_name", "z_base", "q_named_in_history", "nb_base", "nb_adapt",
    "bm25_joins", "lift_base", "lift_adapt",
)  # fmt: skip
"""What the runtime computes per candidate, in column order. A model names the columns it was trained
on (``ranker.json``'s ``features``) and reads those; one naming a column this version lacks is refused."""
CATEGORICAL = ("kind", "role", "wh")

_WH = ("what", "when", "where", "who", "why", "how", "which")
_AUX = frozenset(re.findall(r"\w+", "do does did is are was were can could would will have has should"))
_WHAT_DO_I = re.compile(r"(what|which|where|who|how)('s| do| did| is| are| was| should)? (i|my)\b")
_RECOMMEND = re.compile(r"recommend|suggest|advice|ideas?\b|tips?\b")
_SHOULD_I = re.compile(r"\bshould i\b|\bcan you help\b")
_ASKS = re.compile(
    "|".join(
        (
            _RECOMMEND.pattern,
            _SHOULD_I.pattern,
            r"\bwhat are some\b|\bwhat['’]?s (a|an|the) (good|best|great)\b",
            r"\bwhat (is|are) (a |an |the )?(good|best|great)\b",
            r"\bbest (ways?|options?|places?)\b|\bwhere can i (find|get|buy)\b|\bhelp me\b",
            r"\bcan you (create|plan|make|put together|find)\b",
        )
    )
)
"""A request for a suggestion, in the ways people ask for one: BM25 does not join its score fusion."""


def _question_form(text: str) -> dict[str, float]:
    """What kind of question it is: lexical matching helps "when did X...", not "what should I cook?"."""
    lowered = text.strip().lower()
    words = WORD.findall(lowered)
    first = words[0] if words else ""
    wh = next((i + 1 for i, w in enumerate(_WH) if w in words[:3]), 0)
    stripped = text.strip()
    named = [w for w in NAME.findall(stripped[1:] if stripped else "") if w.lower() not in NOT_NAMES]
    return {
        "wh": float(wh),
        "is_aux": float(first in _AUX),
        "first_person": float(bool({"i", "my", "me", "i'm", "mine", "myself"} & set(words))),
        "what_do_i": float(bool(_WHAT_DO_I.match(lowered))),
        "recommend": float(bool(_RECOMMEND.search(lowered))),
        "should_i": float(bool(_SHOULD_I.search(lowered))),
        "q_has_name": float(bool(named)),
        "q_has_number": float(bool(numbers(text))),
        "q_has_date": float(bool(dates(text))),
    }


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """The rows of the ``k`` best scores, best first, ties in row order: a stable sort's first ``k``.

    Selects before it sorts, so a query costs O(n) in the user's records, not O(n log n): only the
    rows tied with or above the k-th score are sorted.
    """
    if len(scores) <= k:
        return np.argsort(-scores, kind="stable")
    kth = np.partition(scores, len(scores) - k)[len(scores) - k]
    rows = np.flatnonzero(scores >= kth)
    return rows[np.argsort(-scores[rows], kind="stable")][:k]


def _top_positive(scores: np.ndarray, k: int) -> np.ndarray:
    """:func:`_top` among the rows scoring above zero: BM25's list, where most rows of a big user score 0.

    Selecting among the positive rows first keeps a question that matches few records from sorting
    all of them (a 50,000-record user's zeros tie at the k-th score).
    """
    positive = np.flatnonzero(scores > 0)
    return positive[_top(scores[positive], k)]


def _two_best(scores: np.ndarray, top: np.ndarray) -> np.ndarray:
    """The two highest scores, highest first (fewer for fewer rows): what the margins read.

    ``top`` is :func:`_top`'s or :func:`_top_positive`'s list for ``scores``; where it holds fewer
    than two rows and there are more, the scores are searched (a question with one matching record).
    """
    if len(top) >= 2 or len(top) == len(scores):
        return scores[top[:2]]
    if len(scores) <= 2:
        return np.sort(scores)[::-1]
    return np.sort(np.partition(scores, len(scores) - 2)[-2:])[::-1]


def _fuse(lists: list[list[int]], fusion: Fusion) -> list[tuple[int, float]]:
    """Weighted reciprocal rank fusion of (dense, lexical) row lists; ties keep first-seen order."""
    fused: dict[int, float] = {}
    for rows, weight in zip(lists, fusion.weights, strict=True):
        for rank, row in enumerate(rows, start=1):
            fused[row] = fused.get(row, 0.0) + weight / (fusion.k + rank)
    return sorted(fused.items(), key=lambda pair: pair[1], reverse=True)


def candidate_features(
    user: UserSignals, query: str, base: np.ndarray, adapted: np.ndarray, visible: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, float]]]:
    """The candidates' rows, their feature matrix (``FEATURES`` columns) and the default's fused ranking.

    ``base`` / ``adapted`` are the query's vectors before and after the adapter; ``visible`` the
    rows the read time in force may see (the others are never candidates, nor counted in a statistic).
    """
    rows = np.flatnonzero(visible)
    vectors = user.vectors if len(rows) == len(visible) else user.vectors[rows]  # no copy when all are
    cos_b, cos_a = vectors @ base, vectors @ adapted
    terms = tokenize([query])[0]
    bm = user.index.scores(terms)[rows]
    n = len(rows)
    dense_b, dense_a = _top(cos_b, DEPTH), _top(cos_a, DEPTH)
    bm_top = _top_positive(bm, DEPTH)
    bm_list = [int(i) for i in bm_top]
    default = _fuse([[int(i) for i in dense_a], bm_list], ADAPTER_FUSION)
    plain = _fuse([[int(i) for i in dense_b], bm_list], PLAIN_RRF)
    pool = np.array(
        list(dict.fromkeys([*map(int, dense_a[:POOL]), *map(int, dense_b[:POOL]), *bm_list[:POOL]])),
        dtype=np.int64,
    )
    cap = float(POOL + 1)
    rank_a, rank_b, rank_m = (np.full(n, cap, np.float32) for _ in range(3))
    rank_a[dense_a[:POOL]] = np.arange(1, min(POOL, n) + 1)
    rank_b[dense_b[:POOL]] = np.arange(1, min(POOL, n) + 1)
    if bm_list:
        rank_m[bm_list[:POOL]] = np.arange(1, len(bm_list[:POOL]) + 1)
    fused_d, rank_d, fused_p = (
        np.zeros(n, np.float32),
        np.full(n, DEPTH + 1, np.float32),
        np.zeros(n, np.float32),
    )
    for rank, (i, score) in enumerate(default, start=1):
        fused_d[i], rank_d[i] = score, rank
    for i, score in plain:
        fused_p[i] = score
    best_b, best_a, best_m = _two_best(cos_b, dense_b), _two_best(cos_a, dense_a), _two_best(bm, bm_top)
    bm_max = float(best_m[0]) if n else 0.0
    query_terms = set(terms)
    q_names, q_numbers, q_dates = names(query[1:]), numbers(query), dates(query)
    picked = rows[pool]  # the candidates' rows in the user's signals
    named = q_names & user.named if len(rows) == len(visible) else _visible_names(user, q_names, rows)
    if not named:  # a question typed in lowercase: its words against the history's proper names
        named = {word.lower() for word in WORD.findall(query)} & user.proper
    cover = np.array(
        [
            len(query_terms.intersection(user.index.tokens[i])) / len(query_terms) if query_terms else 0.0
            for i in picked
        ],
        np.float32,
    )
    rr_m = 1.0 / (rank_m[pool] + 1)
    z_b, z_a, bm_z = _standard(cos_b), _standard(cos_a), _standard(bm)
    form = _question_form(query)
    lexical = float(bool(named))
    joins = 0.0 if _ASKS.search(query.lower()) else 1.0  # a request for a suggestion: no BM25
    beside = _beside(user, rows, visible, picked)
    owns = (_own_score(z_b, bm_z, lexical), _own_score(z_a, bm_z, lexical))
    nb_base, nb_adapt = (_neighbour_best(beside, own) for own in owns)
    joined = owns if joins == lexical else (_own_score(z_b, bm_z, joins), _own_score(z_a, bm_z, joins))
    people = _people(user, picked, beside)
    lift_base, lift_adapt = (_lift(people, own, pool) for own in joined)
    shared: dict[str, float] = {
        **user.stats,
        "bm25_top": bm_max,
        "bm25_margin": float((best_m[0] - best_m[1]) / best_m[0]) if n > 1 and best_m[0] > 0 else 0.0,
        "bm25_n_pos_share": float((bm > 0).mean()) if n else 0.0,
        "adapt_margin": float(best_a[0] - best_a[1]) if n > 1 else 0.0,
        "base_margin": float(best_b[0] - best_b[1]) if n > 1 else 0.0,
        "adapt_top": float(best_a[0]) if n else 0.0,
        "q_cover_user": len(query_terms & user.vocabulary) / len(query_terms) if query_terms else 0.0,
        "q_words": float(len(query.split())),
        "q_named_in_history": lexical,
        "bm25_joins": joins,
        **form,
    }
    columns: dict[str, Any] = {
        "cos_base": cos_b[pool],
        "cos_adapt": cos_a[pool],
        "gap_base": cos_b[pool] - best_b[0],
        "gap_adapt": cos_a[pool] - best_a[0],
        "z_adapt": z_a[pool],
        "z_base": z_b[pool],
        "nb_base": nb_base,
        "nb_adapt": nb_adapt,
        "lift_base": lift_base,
        "lift_adapt": lift_adapt,
        "bm25": bm[pool],
        "bm25_rel": bm[pool] / bm_max if bm_max > 0 else np.zeros(len(pool)),
        "bm25_z": bm_z[pool],
        "rank_adapt": rank_a[pool],
        "rank_base": rank_b[pool],
        "rank_bm25": rank_m[pool],
        "rr_adapt": 1.0 / (rank_a[pool] + 1),
        "rr_base": 1.0 / (rank_b[pool] + 1),
        "rr_bm25": rr_m,
        "fused_default": fused_d[pool],
        "rank_default": rank_d[pool],
        "fused_plain": fused_p[pool],
        "rec_words_log": user.words_log[picked],
        "rec_pos": user.position[picked],
        "kind": user.kind[picked],
        "role": user.role[picked],
        "shared_names": np.array([len(q_names.intersection(user.names[i])) for i in picked], np.float32),
        "shared_numbers": np.array(
            [len(q_numbers.intersection(user.numbers[i])) for i in picked], np.float32
        ),
        "shared_dates": np.array([len(q_dates.intersection(user.dates[i])) for i in picked], np.float32),
        "q_cover_rec": cover,
        "q_cover_rec_x_rrbm": cover * rr_m,
        "rr_bm25_x_len": rr_m * shared["u_mean_words_log"],
        "rr_bm25_x_name": rr_m * shared["q_has_name"],
    }
    matrix = np.empty((len(pool), len(FEATURES)), np.float32)
    for j, name in enumerate(FEATURES):
        matrix[:, j] = columns[name] if name in columns else shared[name]
    return picked, matrix, [(int(rows[i]), score) for i, score in default]


def _own_score(cosine: np.ndarray, bm25_z: np.ndarray, named: float | np.ndarray) -> np.ndarray:
    """A record's own part of :func:`score_fusion`: its standardized cosine, plus BM25's where named."""
    return cosine + SCORE_FUSION * named * bm25_z


def _standard(scores: np.ndarray) -> np.ndarray:
    """Standard scores over the records a read may see: how far each stands out from the others."""
    return (scores - scores.mean()) / (scores.std() + 1e-6)


def _neighbour_best(beside: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Each candidate's best session neighbour's score in ``own`` (one per visible row); 0 without one.

    ``beside``: the candidates' neighbours as places among the visible rows (:func:`_beside`). A
    question's words often fall on the turn before or after the one that answers it ("Did you go to
    Rome?" / "Yes, last spring."), which only its session's order says.
    """
    has = beside >= 0
    best = np.where(has, own[np.maximum(beside, 0)], -np.inf).max(axis=1)
    return np.where(has.any(axis=1), best, 0.0)


def _people(user: UserSignals, picked: np.ndarray, beside: np.ndarray) -> np.ndarray:
    """``beside`` between people's turns only: an assistant's turn neither lends nor is lifted.

    A reply restates the topic of the user's turn beside it at length, and lifting through it raised
    every turn of a chat on the question's topic over the lone message that answered.
    """
    lends = user.role[np.maximum(user.neighbours[picked], 0)] != ASSISTANT
    lends &= (user.role[picked] != ASSISTANT)[:, None]
    return np.where(lends, beside, -1)


def _lift(beside: np.ndarray, own: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """How far each candidate's best session neighbour stands above it in ``own``; 0 where none does.

    ``pool``: the candidates' places among the visible rows, as ``own`` is indexed.
    """
    found = (beside >= 0).any(axis=1)
    return np.where(found, np.maximum(_neighbour_best(beside, own) - own[pool], 0.0), 0.0)


def _beside(user: UserSignals, rows: np.ndarray, visible: np.ndarray, picked: np.ndarray) -> np.ndarray:
    """The candidates' session neighbours as places among the visible rows (-1: none, or hidden)."""
    at = np.full(len(visible), -1, np.int64)
    at[rows] = np.arange(len(rows))
    beside = user.neighbours[picked]
    return np.where(beside >= 0, at[np.maximum(beside, 0)], -1)  # a hidden neighbour is none


def _visible_names(user: UserSignals, wanted: set[str], rows: np.ndarray) -> set[str]:
    """The ``wanted`` names that the records at ``rows`` (those a read may see) hold."""
    return {name for i in rows for name in user.names[i] if name in wanted} if wanted else set()


def inside_window(user: UserSignals, rows: np.ndarray, query: str, read: Read) -> np.ndarray:
    """1 for the candidates (``rows``) written inside the window the question names, else 0.

    The default adds :data:`~personamem.retrieval.when.WINDOW_BOOST` times it to the model's score.
    """
    as_of = datetime.fromtimestamp(read.as_of, UTC) if read.as_of is not None else datetime.now(UTC)
    window = named_window(query, as_of, user.days)
    if window is None:
        return np.zeros(len(rows), np.float32)
    days = user.days[rows]
    return ((days >= window[0]) & (days < window[1])).astype(np.float32)


def visible_rows(store: Store, user_id: str, records: Sequence[Record], read: Read) -> np.ndarray:
    """Which of the user's ``records`` ``read`` may see (its time and filter), as a boolean mask."""
    hidden = store.hidden(user_id, read)
    if not hidden:  # the usual read: every record, and no loop over them
        return np.ones(len(records), dtype=bool)
    return np.array([r.id not in hidden for r in records], dtype=bool)


def score_fusion(features: np.ndarray, adapted: bool | np.ndarray = False) -> np.ndarray:
    """The order served where no trees do: a score per candidate row (``FEATURES`` columns).

    The base cosine as a standard score over the records the read may see (``z_base``; the query
    adapter's, ``z_adapt``, for the rows ``adapted`` marks: histories where the ranker's adapter gate
    found the adapter helping), plus :data:`SCORE_FUSION` times BM25's (``bm25_z``) unless the
    question asks for a suggestion (``bm25_joins``: "recommend", "what are some...", "what's a good...",
    "where can I find...", "should I..."), plus :data:`NEIGHBOUR` times how far the best of the same
    sum over the record's neighbouring turns in its session stands above its own (``lift_base`` /
    ``lift_adapt``: 0 where none stands above, and between people's turns only).

    A question about the user's own past has its words in the records that answer it, and BM25's
    exact words help where a small encoder is weakest (names, rare terms: "When did Melanie paint a
    sunrise?"). A request for a suggestion ("What's a good hotel in Bali for me?") is answered by what
    the user likes, which rarely repeats its words, and BM25 brings the chats that do: with BM25 in
    every question, leave-one-benchmark-out lost to dense on the preference and recommendation folds
    (docs/RESULTS.md). A turn is lifted toward a better neighbour, never raised for having
    one, and an assistant's turn neither lends nor is lifted: adding the neighbour's score, through
    assistants' replies too, raised every turn of a chat on the question's topic over a lone message
    that answered, and on a long user–assistant history (PrefEval with its distractor chats whole)
    the default fell below plain dense (recall@5 0.544 against 0.763; docs/RESULTS.md).
    Unadapted, nothing in it is learned on a benchmark but the weights. Row by row, so it scores many
    questions' candidates at once (training, leave-one-out) as one search's.
    """
    return _served(features, adapted, "bm25_joins") + NEIGHBOUR * _read(features, adapted, "lift")


def summed_score_fusion(features: np.ndarray, adapted: bool | np.ndarray = False) -> np.ndarray:
    """The score fusion as served from its names rule until the lift: 0.4 of the best neighbour's score added.

    What a residual that ``improve`` fitted on top of it keeps as its start (``gated_start``
    ``"named score fusion"``).
    """
    return _served(features, adapted, "q_named_in_history") + SUMMED_NEIGHBOUR * _read(
        features, adapted, "nb"
    )


def _served(features: np.ndarray, adapted: bool | np.ndarray, named: str) -> np.ndarray:
    """A fusion's own part of each row: its cosine (``z_``), plus BM25's where the column ``named`` is 1."""
    column = FEATURES.index
    return _own_score(
        _read(features, adapted, "z"), features[:, column("bm25_z")], features[:, column(named)]
    )


def _read(features: np.ndarray, adapted: bool | np.ndarray, stem: str) -> np.ndarray:
    """The column ``<stem>_adapt`` for the rows ``adapted`` marks, ``<stem>_base`` for the others."""
    column = FEATURES.index
    return np.where(adapted, features[:, column(f"{stem}_adapt")], features[:, column(f"{stem}_base")])


def adapted_score_fusion(features: np.ndarray) -> np.ndarray:
    """The score fusion before the names decided BM25's part: the adapted cosine plus BM25, always.

    What a residual that ``improve`` fitted on top of it keeps as its start (``gated_start``
    ``"score fusion"``); the default served it until leave-one-out over every user of each left-out
    benchmark found it losing to dense on iKAT and PrefEval (docs/RESULTS.md).
    """
    return features[:, FEATURES.index("z_adapt")] + SCORE_FUSION * features[:, FEATURES.index("bm25_z")]


GATED_START = "lifted score fusion"
"""What a root ranker serves without its trees (:func:`score_fusion`). A residual keeps the start its
trees were fitted on top of: ``"named score fusion"`` (:func:`summed_score_fusion`), ``"score
fusion"`` (:func:`adapted_score_fusion`), or ``"fused default"`` (``alpha · fused_default``) from
before them."""
_FUSION_STARTS: dict[str, Callable[[np.ndarray, bool | np.ndarray], np.ndarray]] = {
    GATED_START: score_fusion,
    "named score fusion": summed_score_fusion,
    "score fusion": lambda features, _adapted: adapted_score_fusion(features),  # it always read the adapter
}


@dataclass(frozen=True)
class RankerModel:
    """A trained ranker: ``score = start + trees(features)`` over the candidates.

    ``start`` is ``alpha · fused_default``, or the ``base`` ranker's score for a residual fitted to a store.
    ``gate`` says which histories the root's trees serve (None: all, as folders written before it);
    where they do not, or the root kept none, the root serves ``gated_start`` (:data:`GATED_START`).
    ``adapter_gate`` says which histories' score fusion reads the query adapter's cosine (None: none).
    """

    graph: bytes  # the trees' ONNX graph; empty: no trees were kept (the start's order)
    alpha: float
    iterations: int
    folder: Path
    info: dict[str, Any]
    base: RankerModel | None = None
    gate: RankerGate | None = None
    gated_start: str = GATED_START
    adapter_gate: RankerGate | None = None

    @classmethod
    def load(cls, spec: str | Path) -> RankerModel:
        """A shipped ranker by name (``mixed``) or a folder from ``personamem train ranker``.

        Raises:
            CheckpointError: no such ranker, a model file whose checksum differs from its
                ``ranker.json``, or a feature list other than this version's.
        """
        return _load(str(spec))

    @functools.cached_property
    def session(self) -> onnxruntime.InferenceSession | None:
        """The trees' onnxruntime session, made on first use (None without trees).

        Where the gate serves no history its trees, as the shipped ``mixed``'s serves none, no
        search makes it: 0.05 s of a one-shot CLI search.
        """
        if not self.graph:
            return None
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1  # ~100 rows: threads cost more
        session = onnxruntime.InferenceSession(self.graph, options, providers=["CPUExecutionProvider"])
        width = session.get_inputs()[0].shape[1]
        named = len(self.info.get("features", FEATURES))
        if width != named:
            raise CheckpointError(
                f"ranker {self.folder}: its trees read {width} features, its {INFO_FILE} names {named}"
            )
        return session

    @functools.cached_property
    def columns(self) -> np.ndarray | None:
        """Where the model's own feature columns lie in ``FEATURES`` (None: all of them, in order)."""
        named = tuple(self.info.get("features", FEATURES))
        return None if named == FEATURES else np.array([FEATURES.index(name) for name in named])

    @property
    def root(self) -> RankerModel:
        """The ranker a chain of residuals starts from (itself when it has no base)."""
        return self.base.root if self.base is not None else self

    def decide(self, profile: dict[str, float]) -> GateDecision:
        """Whether the root's trees serve a history of this shape (its ``UserSignals.profile``)."""
        root = self.root
        if not root.graph:
            return GateDecision(False, "no trees: the ranker is the score fusion")
        if root.gate is None:
            return GateDecision(True, "this ranker names no gate: its trees serve every history")
        return root.gate.decide(profile)

    def serves(self, profiles: np.ndarray) -> np.ndarray:
        """Per stored profile row (``ranker_gate.PROFILE`` columns), whether the root's trees serve it."""
        return np.array([self.decide(as_profile(row)).serves for row in profiles], dtype=bool)

    def decide_adapter(self, profile: dict[str, float]) -> GateDecision:
        """Whether the score fusion reads the query adapter's cosine for a history of this shape."""
        gate = self.root.adapter_gate
        if gate is None:
            return GateDecision(False, "this ranker names no adapter gate: the base cosine")
        return gate.decide(profile, "the adapter's cosine")

    def adapts(self, profiles: np.ndarray) -> np.ndarray:
        """Per stored profile row, whether the score fusion reads the adapter's cosine for it."""
        return np.array([self.decide_adapter(as_profile(row)).serves for row in profiles], dtype=bool)

    def start(
        self, features: np.ndarray, *, trees: bool = True, adapted: bool | np.ndarray = False
    ) -> np.ndarray:
        """The score before this model's own trees.

        The base's; else ``alpha · fused_default`` under the root's trees, and the root's
        ``gated_start`` without them (``adapted``: the rows its adapter gate gives the adapter).
        """
        if self.base is not None:
            return self.base.score(features, trees=trees, adapted=adapted)
        fusion = _FUSION_STARTS.get(self.gated_start)
        if (trees and self.graph) or fusion is None:
            return self.alpha * features[:, FEATURES.index("fused_default")]
        return fusion(features, adapted)

    def score(
        self, features: np.ndarray, *, trees: bool = True, adapted: bool | np.ndarray = False
    ) -> np.ndarray:
        """Each candidate's score (higher first); ``trees=False``: without the root's trees (gated out).

        ``adapted``: the rows whose score fusion reads the adapter's cosine (:meth:`decide_adapter`).
        """
        start = self.start(features, trees=trees, adapted=adapted)
        session = self.session if self.base is not None or trees else None
        if session is None:
            return start
        inputs = features if self.columns is None else np.ascontiguousarray(features[:, self.columns])
        return start + session.run(None, {MODEL_INPUT: inputs})[0].ravel()


@functools.cache
def _load(spec: str) -> RankerModel:
    folder = SHIPPED_RANKERS / spec if (SHIPPED_RANKERS / spec / INFO_FILE).is_file() else Path(spec)
    try:
        info = json.loads((folder / INFO_FILE).read_text(encoding="utf-8"))
        graph = (folder / MODEL_FILE).read_bytes() if info["iterations"] else b""
    except (OSError, ValueError, KeyError) as exc:
        raise CheckpointError(f"ranker {spec!r}: not a ranker folder ({folder}: {exc})") from None
    if graph and hashlib.sha256(graph).hexdigest() != info.get("sha256"):
        raise CheckpointError(f"ranker {spec!r}: {MODEL_FILE} does not match the sha256 in {INFO_FILE}")
    unknown = sorted(set(info.get("features") or ["(none named)"]) - set(FEATURES))
    if unknown:
        raise CheckpointError(
            f"ranker {spec!r}: trained on features this version does not compute: {', '.join(unknown)}"
        )
    base = None
    if "base" in info:  # a residual: its trees were fitted on top of exactly this base's scores
        base = _load(str(info["base"]["ranker"]))
        if base.info.get("sha256") != info["base"].get("sha256"):
            raise CheckpointError(
                f"ranker {spec!r}: its base ranker {info['base']['ranker']!r} is not the one it was "
                "fitted on (sha256 differs); run personamem improve again"
            )
        # fitted before the score fusion: on top of the trees' start wherever the trees were out
        base = dataclasses.replace(base, gated_start=info["base"].get("gated_start", "fused default"))
    gate, adapter_gate = (_gate(spec, info, key) for key in ("gate", "adapter_gate"))
    alpha, iterations = float(info["alpha"]), int(info["iterations"])
    return RankerModel(graph, alpha, iterations, folder, info, base, gate, adapter_gate=adapter_gate)


def _gate(spec: str, info: dict[str, Any], key: str) -> RankerGate | None:
    """The gate ``info[key]`` describes (None: the folder names none)."""
    if info.get(key) is None:
        return None
    try:
        return RankerGate.from_json(info[key])
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"ranker {spec!r}: {INFO_FILE}'s {key} is unreadable ({exc})") from None


class LearnedRanker:
    """The default first stage reordered by a :class:`RankerModel`; a :class:`Retriever` over one store."""

    def __init__(self, store: Store, adapter: QueryAdapter, bm25: BM25Retriever, model: RankerModel) -> None:
        self.store = store
        self.adapter = adapter
        self.model = model
        self._bm25 = bm25
        # bounded by bytes, with the BM25 indexes; grown with them after appends
        self._signals = store.user_cache(self._build, extend=self._extend)

    def _build(self, user_id: str) -> UserSignals:
        return UserSignals.of(self.store, self._bm25.index(user_id), user_id)

    def _extend(self, user_id: str, signals: UserSignals) -> UserSignals | None:
        """``signals`` with the records appended since; None where the index no longer starts with theirs."""
        index, held = self._bm25.index(user_id), signals.index.records
        if index is signals.index:
            return signals
        # an index grown from this one holds the very same record objects first; one built again (an
        # expiry, an eviction, an edit meanwhile) holds new ones, and these signals are built again too
        if held and (len(index.records) < len(held) or index.records[len(held) - 1] is not held[-1]):
            return None
        added = [r.id for r in index.records[len(held) :]]
        return signals.extended(index, self.store.record_vectors(user_id, added))

    def fits(self, user_id: str) -> bool:
        """Whether the user's signals stay cached between searches.

        False once they were built larger than the store's whole cache for derived values: every
        search would build them again (14 s a search at 200,000 records; ``bench/scale.py``).
        """
        return not self._signals.oversized(user_id)

    def hybrid_because(self, user_id: str) -> str | None:
        """Why hybrid serves ``user_id`` instead of this ranker (None: the ranker serves it)."""
        if self.fits(user_id):
            return None
        return "hybrid serves it: its ranker signals outgrow the store's cache for them"

    def decide(self, user_id: str, profile: dict[str, float] | None = None) -> GateDecision:
        """Whether the trees serve ``user_id``'s history, and why (``personamem analyze ranker`` shows it).

        ``profile``: the user's (:meth:`profile`), where the caller read it already; a user whose
        signals are not kept would build them twice. Such a user is served by hybrid
        (:meth:`hybrid_because`), and its profile is not read for this.
        """
        hybrid = self.hybrid_because(user_id)
        if hybrid is not None:
            return GateDecision(False, hybrid)
        return self.model.decide(self.profile(user_id) if profile is None else profile)

    def signals(self, user_id: str) -> UserSignals:
        """What the ranker reads of ``user_id``'s history, as of the user's revision."""
        return self._signals.get(user_id)

    def profile(self, user_id: str) -> dict[str, float]:
        """The shape of ``user_id``'s history that the gate reads."""
        return self.signals(user_id).profile

    @staged("ranker")
    def search(self, user_id: str, query: str, k: int, read: Read = NOW) -> list[Hit]:
        """The top ``k`` of what ``read`` sees: the candidates in the model's order, then the default's."""
        user = self.signals(user_id)
        records = user.index.records
        if not records or k <= 0:
            return []
        visible = visible_rows(self.store, user_id, records, read)
        if not visible.any():
            return []
        base = self.store.encoder.encode([query])
        adapted = self.adapter.transform(base)[0]
        rows, features, default = candidate_features(user, query, base[0], adapted, visible)
        scores = self.model.score(
            features,
            trees=self.model.decide(user.profile).serves,
            adapted=self.model.decide_adapter(user.profile).serves,
        )
        scores = scores + WINDOW_BOOST * inside_window(user, rows, query, read)
        order = np.argsort(-scores, kind="stable")
        top = [(records[rows[i]], float(scores[i])) for i in order[:k]]
        if len(top) < k:  # below the candidates, the default's order (scores below every candidate's)
            floor = float(scores.min()) if len(scores) else 0.0
            taken = set(rows.tolist())
            rest = [(records[i], floor - 1.0 - r) for r, (i, _) in enumerate(default) if i not in taken]
            top += rest[: k - len(top)]
        return ranked(top)
