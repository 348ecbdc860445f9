"""Filters on search and context: the grammar, and that every method fills its top k from the matches.

The grammar is checked on records in memory; the retrieval properties on a real store (SQLite +
embedded Chroma, the real encoder) with hypothesis drawing filters from the whole grammar. The
same filter through every surface (CLI, REST, clients, MCP, the framework components) is in
``tests/test_default_everywhere.py``; the error's way through the server in the memory contract.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from personamem import PersonaMem, SentenceEncoder, remote
from personamem.errors import InvalidInputError
from personamem.records import Record
from personamem.retrieval.base import Hit, ranked
from personamem.retrieval.hybrid import reciprocal_rank_fusion
from personamem.store.filters import Filter, parse_filters
from personamem.store.read import Read

# -- the grammar, on records in memory ----------------------------------------------------------

PLUS_TWO = timezone(timedelta(hours=2))
RECORDS = [
    Record(
        user_id="u",
        id="a",
        text="a",
        kind="knowledge",
        category="health",
        timestamp=datetime(2025, 1, 1),
        metadata={"topic": "food", "n": 3, "flag": True, "source": "chat-1"},
    ),
    Record(
        user_id="u",
        id="b",
        text="b",
        kind="note",
        category="Hobby time",
        timestamp=datetime(2024, 6, 1, tzinfo=PLUS_TWO),
        metadata={"topic": "music", "n": 1.5, "flag": False},
    ),
    Record(
        user_id="u",
        id="c",
        text="c",
        kind="dialog",
        valid_from=datetime(2023, 1, 1),
        valid_until=datetime(2026, 1, 1),
        metadata={"topic": "food", "n": "3", "source": "chat-2"},
    ),
    Record(user_id="u", id="d", text="d", kind="knowledge", metadata={"n": 1, "flag": 1}),
]


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"kind": "knowledge"}, "ad"),
        ({"kind": {"ne": "knowledge"}}, "bc"),
        ({"kind": {"in": ["note", "dialog"]}}, "bc"),
        ({"kind": {"nin": ["note", "dialog"]}}, "ad"),
        ({"category": "health"}, "a"),
        ({"category": None}, "cd"),  # a missing field holds null
        ({"category": {"ne": None}}, "ab"),
        ({"category": {"contains": "Hobby"}}, "b"),
        ({"category": {"contains": "hobby"}}, ""),  # case-sensitive
        ({"category": {"gte": "Hobby"}}, "ab"),  # strings order as strings ("h" > "H")
        ({"metadata.topic": "food"}, "ac"),
        ({"metadata.topic": {"eq": "food"}}, "ac"),
        ({"metadata.topic": {"ne": "food"}}, "bd"),  # d has no topic: not equal to "food"
        ({"metadata.source": {"in": ["chat-1", "chat-2"]}}, "ac"),
        ({"metadata.source": {"in": ["chat-1", None]}}, "abd"),
        ({"metadata.source": {"nin": ["chat-1"]}}, "bcd"),
        ({"metadata.n": {"gt": 1}}, "ab"),  # c's "3" is a string: no ordering against a number
        ({"metadata.n": {"gte": 1}}, "abd"),
        ({"metadata.n": {"lt": 2}}, "bd"),
        ({"metadata.n": {"lte": "3"}}, "c"),
        ({"metadata.n": {"gte": 1, "lt": 2}}, "bd"),  # several operators: all hold
        ({"metadata.n": 3}, "a"),
        ({"metadata.flag": True}, "a"),  # d's 1 is not True
        ({"metadata.flag": 1}, "d"),
        ({"metadata.missing": None}, "abcd"),
        ({"metadata.missing": {"gt": 0}}, ""),  # orderings never match a missing field
        ({"timestamp": {"gte": "2025-01-01"}}, "a"),
        ({"timestamp": "2024-05-31T22:00:00Z"}, "b"),  # instants compare in UTC
        ({"timestamp": {"lt": "2030-01-01"}}, "ab"),
        ({"timestamp": {"ne": None}}, "ab"),
        ({"valid_until": {"gte": "2025-12-31"}}, "c"),
        ({"valid_from": {"lt": "2024-01-01"}}, "c"),
        ({"metadata.topic": "food", "kind": "knowledge"}, "a"),  # several keys: and
        ({"and": [{"metadata.topic": "food"}, {"kind": "dialog"}]}, "c"),
        ({"or": [{"kind": "knowledge"}, {"metadata.source": {"in": ["chat-1", "chat-2"]}}]}, "acd"),
        ({"not": {"metadata.topic": "food"}}, "bd"),
        ({"not": {"or": [{"kind": "note"}, {"category": "health"}]}}, "cd"),
    ],
)
def test_the_grammar(filters: dict[str, Any], expected: str) -> None:
    parsed = parse_filters(filters)
    assert parsed is not None
    assert "".join(r.id for r in RECORDS if parsed.matches(r)) == expected


def test_no_filter_and_equal_filters() -> None:
    assert parse_filters(None) is None and parse_filters({}) is None
    assert parse_filters({"kind": "note", "category": "x"}) == parse_filters(
        {"category": "x", "kind": "note"}
    )


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        (["kind"], "filters: expected a JSON object, got list"),
        ({"timestamp": {"gtx": "2025-01-01"}}, "filters: unknown operator 'gtx' at timestamp (eq, ne, in, "),
        (
            {"colour": "red"},
            "filters: field 'colour' is not filterable (kind, category, role, timestamp, valid_from, "
            "valid_until, metadata.<key>)",
        ),
        ({"metadata.": 1}, "filters: field 'metadata.' is not filterable"),
        ({"or": [{"kind": "note"}, {"colour": 1}]}, "filters: field 'colour' is not filterable at or[1] ("),
        ({"timestamp": {"gte": "soon"}}, "filters: 'soon' is not an ISO 8601 time at timestamp"),
        ({"valid_from": {"lt": 2025}}, "filters: times must be ISO 8601 strings, got 2025 at valid_from"),
        ({"kind": {"in": "note"}}, "filters: 'in' needs a list, got \"note\" at kind"),
        ({"metadata.source": {"nin": None}}, "filters: 'nin' needs a list, got null at metadata.source"),
        ({"category": {"contains": 3}}, "filters: 'contains' needs a string, got 3 at category"),
        ({"kind": {"gt": "note"}}, "filters: operator 'gt' does not apply to kind at kind (eq, ne, in, nin)"),
        ({"timestamp": {"contains": "2025"}}, "filters: operator 'contains' does not apply to timestamp"),
        ({"kind": "knowlege"}, "filters: unknown kind 'knowlege' at kind (conversation, dialog, "),
        ({"or": []}, "filters: 'or' needs a non-empty list of filters at or"),
        ({"and": {"kind": "note"}}, "filters: 'and' needs a non-empty list of filters at and"),
        ({"not": []}, "filters: expected a non-empty object, got [] at not"),
        (
            {"metadata.topic": {}},
            "filters: expected a value or a non-empty object of operators at metadata.topic",
        ),
        (
            {"metadata.n": {"gt": True}},
            "filters: 'gt' needs a time, a number or a string, got true at metadata.n",
        ),
        ({"metadata.n": {"lte": None}}, "filters: 'lte' needs a time, a number or a string, got null"),
        (
            {"metadata.topic": ["a"]},
            'filters: expected a string, number, boolean or null, got ["a"] at metadata.',
        ),
        ({"or": [{"kind": "note"}, {"metadata.x": {"in": [[1]]}}]}, "got [1] at or[1].metadata.x"),
        ({"not": {"kind": {"eq": "note", "bad": 1}}}, "filters: unknown operator 'bad' at not.kind"),
    ],
)
def test_a_bad_filter_names_the_part_that_is_wrong(filters: Any, message: str) -> None:
    with pytest.raises(InvalidInputError) as raised:
        parse_filters(filters)
    assert message in str(raised.value)


def test_a_bad_filter_fails_before_any_read(mem: PersonaMem) -> None:
    with pytest.raises(InvalidInputError, match="unknown operator 'gtx' at timestamp"):
        mem.search("nobody", "anything", filters={"timestamp": {"gtx": "2025-01-01"}})  # an unknown user too


def test_an_unknown_read_option_is_refused_by_name_on_every_surface(mem: PersonaMem) -> None:
    for call in (
        lambda: mem.search("nobody", "anything", as_off="2025-01-01"),  # type: ignore[call-arg]
        lambda: mem.context("nobody", "anything", filter={"kind": "note"}),  # type: ignore[call-arg]
        lambda: next(remote.search("u", "q", 1, None, {"as_off": None})),  # type: ignore[typeddict-unknown-key]
    ):
        with pytest.raises(
            TypeError, match=r"unexpected read option\(s\) '(as_off|filter)': the read options"
        ):
            call()


def test_a_read_passed_down_is_the_one_applied_on_another_thread(mem: PersonaMem) -> None:
    """Nothing of the read lives outside the call: a pipeline on a worker thread sees exactly its argument."""
    mem.add("ana", "I cooked a spicy lentil curry", metadata={"topic": "food"})
    mem.add("ana", "I booked a night train to Porto", metadata={"topic": "travel"})
    pipeline = mem.pipeline("dense")
    food = Read.of(filters={"metadata.topic": "food"})
    with ThreadPoolExecutor(1) as worker:
        hits = worker.submit(pipeline.search, "ana", "what did I do", 5, food).result()
    assert [hit.record.text for hit in hits] == ["I cooked a spicy lentil curry"]
    assert len(pipeline.search("ana", "what did I do", 5)) == 2  # no read given: now, unfiltered


# -- retrieval on a real store ------------------------------------------------------------------

OPENERS = ["I", "My sister", "Our team", "Yesterday I", "Last summer we", "My neighbour"]
ACTIONS = [
    "cooked a spicy lentil curry for dinner",
    "booked a night train to Porto",
    "practised the cello for an hour",
    "finished the quarterly sales report",
    "tried a new ramen place downtown",
    "flew to Tokyo for a robotics conference",
    "joined a jazz choir on Thursdays",
    "fixed a bug in the billing service",
    "baked sourdough bread with rye flour",
    "hiked along the coast near Lisbon",
]
TOPICS = ["food", "travel", "music", "work"]
QUERIES = [
    "what do I like to cook?",
    "any trips planned by train or plane?",
    "music practice",
    "work reports and bugs",
    "bread and curry recipes",
]
N = 36  # 34 current records of "u", 2 superseded; the hybrid's depth (50) covers them all


def _history(i: int) -> dict[str, Any]:
    """Record ``i`` of user "u": every field a filter names varies, some are missing."""
    start = datetime(2023, 1, 1) + timedelta(days=25 * i)
    metadata: dict[str, Any] = {"topic": TOPICS[i % 4], "n": i, "flag": i % 3 == 0}
    if i % 4:
        metadata["source"] = f"chat-{i % 3}"
    return {
        "id": f"r{i}",
        "text": f"{OPENERS[i % 6]} {ACTIONS[(i * 7) % 10]} ({TOPICS[i % 4]} {i}).",
        "kind": ["note", "knowledge", "conversation", "purchase"][i % 4],
        "category": [None, "health", "hobby", "food", "Hobby"][i % 5],
        "timestamp": None if i % 7 == 0 else datetime(2024, 1, 1) + timedelta(days=11 * i),
        "valid_from": start,  # every record has one: the interval filter below equals as_of
        # two ended facts (hidden now) and a few that end in the future
        "valid_until": datetime(2024, 3, 1) if i in (3, 4) else datetime(2030, 1, 1) if i % 9 == 0 else None,
        "metadata": metadata,
    }


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory, encoder: SentenceEncoder) -> Iterator[PersonaMem]:
    """User "u"'s records, and "other" holding the same texts and fields (the filter must not reach them)."""
    with PersonaMem.open(tmp_path_factory.mktemp("filters") / "store", encoder=encoder) as mem:
        rows = [_history(i) for i in range(N)]
        mem.add_many(rows, user_id="u")
        mem.add_many(
            [{**row, "metadata": {**row["metadata"], "owner": "other"}} for row in rows], user_id="other"
        )
        yield mem


DATES = st.dates(min_value=date(2022, 6, 1), max_value=date(2026, 6, 1)).map(date.isoformat)
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "kind": st.sampled_from(["note", "knowledge", "conversation", "purchase", "qa"]),
    "category": st.sampled_from(["health", "hobby", "Hobby", "food", None]),
    "timestamp": st.one_of(DATES, st.none()),
    "valid_from": DATES,
    "valid_until": st.one_of(DATES, st.none()),
    "metadata.topic": st.sampled_from([*TOPICS, None]),
    "metadata.source": st.sampled_from(["chat-0", "chat-1", "chat-2", None]),
    "metadata.n": st.integers(0, N),
    "metadata.flag": st.booleans(),
    "metadata.owner": st.sampled_from(["other", None]),
}
EQUALITY, ORDERINGS = ["eq", "ne", "in", "nin"], ["gt", "gte", "lt", "lte"]
TEXTUAL = ("category", "metadata.topic", "metadata.source", "metadata.owner")
OPERATORS = {
    field: EQUALITY
    + ([] if field in ("kind", "metadata.flag") else ORDERINGS)
    + (["contains"] if field in TEXTUAL else [])
    for field in VALUES
}


@st.composite
def conditions(draw: st.DrawFn) -> dict[str, Any]:
    """One field's condition, any operator that applies to it, with an operand of the right type."""
    field = draw(st.sampled_from(sorted(VALUES)))
    op = draw(st.sampled_from(OPERATORS[field]))
    values = VALUES[field]
    if op in ("in", "nin"):
        operand = draw(st.lists(values, min_size=1, max_size=3))
    elif op == "contains":
        operand = draw(st.sampled_from(["o", "ob", "chat-1", "ea", "x"]))
    elif op in ORDERINGS:
        operand = draw(values.filter(lambda v: v is not None))
    else:
        operand = draw(values)
    bare = op == "eq" and draw(st.booleans())
    return {field: operand if bare else {op: operand}}


filters = st.recursive(
    conditions(),
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(lambda parts: {"and": parts}),
        st.lists(inner, min_size=1, max_size=3).map(lambda parts: {"or": parts}),
        inner.map(lambda part: {"not": part}),
        st.tuples(inner, inner).map(lambda pair: {**pair[0], **pair[1]}),  # several keys: and
    ),
    max_leaves=4,
)
PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _parsed(chosen: dict[str, Any]) -> Filter:
    parsed = parse_filters(chosen)
    assert parsed is not None
    return parsed


def _assert_restricted(got: list[Hit], unfiltered: list[Hit], admits: Filter, k: int) -> None:
    """``got`` is the unfiltered ranking kept to the records ``admits``, cut to ``k``.

    Up to the order of records with equal scores: BM25 gives two records equal scores when they
    share the query's terms equally and have as many terms, and which of them a top-k cut keeps is
    bm25s's choice.
    """
    restricted = [hit for hit in unfiltered if admits.matches(hit.record)]
    want = restricted[:k]
    assert len(got) == len(want), ([h.record.id for h in got], [h.record.id for h in want])
    assert len({hit.record.id for hit in got}) == len(got)
    for hit, expected in zip(got, want, strict=True):
        assert hit.record.user_id == "u"
        assert hit.score == pytest.approx(expected.score, abs=1e-5)
        assert hit.record.id in {h.record.id for h in restricted if abs(h.score - hit.score) <= 1e-5}


@PROPERTY
@given(chosen=filters, query=st.sampled_from(QUERIES), k=st.integers(1, 12))
@pytest.mark.parametrize("method", ["dense", "bm25"])
def test_a_filtered_search_is_the_unfiltered_ranking_kept_to_the_matches(
    history: PersonaMem, method: str, chosen: dict[str, Any], query: str, k: int
) -> None:
    unfiltered = history.search("u", query, k=N, method=method)
    got = history.search("u", query, k=k, method=method, filters=chosen)
    _assert_restricted(got, unfiltered, _parsed(chosen), k)


@PROPERTY
@given(chosen=filters, query=st.sampled_from(QUERIES), k=st.integers(1, 12))
def test_hybrid_fuses_the_filtered_rankings(
    history: PersonaMem, chosen: dict[str, Any], query: str, k: int
) -> None:
    """Hybrid is RRF over its first stages' top 50, each of them filtered (the property above).

    Not the unfiltered hybrid ranking kept to the matches: RRF scores ranks, and a filter moves the
    matches up their lists, so two of them can swap. With the lists taken from the filtered searches,
    BM25's ties are broken as hybrid's own BM25 call breaks them.
    """
    got = history.search("u", query, k=k, method="hybrid", filters=chosen)
    served = history.pipeline("hybrid").first_stage
    lists = [
        ranked([(h.record, h.score) for h in history.search("u", query, k=50, method=m, filters=chosen)])
        for m in ("dense", "bm25")
    ]
    weight = served["dense_weight"]
    fused = reciprocal_rank_fusion(lists, k_rrf=served["rrf_k"], weights=(weight, 1 - weight))
    assert [h.record.id for h in got] == [record.id for record, _ in fused[:k]]
    admits = _parsed(chosen)
    assert all(admits.matches(hit.record) and hit.record.user_id == "u" for hit in got)


@PROPERTY
@given(chosen=filters, query=st.sampled_from(QUERIES), k=st.integers(1, 12))
def test_the_default_keeps_only_matches_and_fills_k(
    history: PersonaMem, chosen: dict[str, Any], query: str, k: int
) -> None:
    """The default's learned ranker computes its signals over the records a read may see, so a filter
    changes its statistics (gaps to the best, z-scores) and the unfiltered ranking kept to the matches
    is not its answer; what holds: every hit matches, and the top k is full when k records match (the
    test below shows it hides exactly as the read time does).
    """
    admits = _parsed(chosen)
    matching = [h for h in history.search("u", query, k=N, method="dense") if admits.matches(h.record)]
    got = history.search("u", query, k=k, filters=chosen)
    assert len(got) == min(k, len(matching))
    assert all(admits.matches(hit.record) and hit.record.user_id == "u" for hit in got)


@PROPERTY
@given(moment=DATES, query=st.sampled_from(QUERIES), k=st.integers(1, 12))
@pytest.mark.parametrize("method", ["dense", "bm25", "hybrid", None])
def test_a_validity_filter_ranks_as_as_of_does(
    history: PersonaMem, method: str | None, moment: str, query: str, k: int
) -> None:
    """``valid_from <= t < valid_until`` written as a filter hides what ``as_of=t`` hides, so every
    method, the default's learned ranker included, gives the same ranking through either."""
    interval = {"valid_from": {"lte": moment}, "not": {"valid_until": {"lte": moment}}}
    by_filter = history.search("u", query, k=k, method=method, filters=interval, include_superseded=True)
    by_time = history.search("u", query, k=k, method=method, as_of=moment)
    assert [h.record.id for h in by_filter] == [h.record.id for h in by_time]


def test_a_filter_never_reaches_another_users_records(history: PersonaMem) -> None:
    for method in ("dense", "bm25", "hybrid", None):
        assert history.search("u", "cello", k=5, method=method, filters={"metadata.owner": "other"}) == []
        hits = history.search("other", "cello", k=5, method=method, filters={"metadata.owner": "other"})
        assert hits and {h.record.user_id for h in hits} == {"other"}


def test_context_is_built_from_the_matches(history: PersonaMem) -> None:
    context = history.context("u", "what do I like to cook?", filters={"metadata.topic": "music"})
    assert context.hits and all(hit.record.metadata["topic"] == "music" for hit in context.hits)
    assert "(music" in context.text and "(food" not in context.text  # each text names its topic


@pytest.mark.parametrize(
    "chosen",
    [{"metadata.topic": "music", "metadata.n": {"lt": 10}}, {"not": {"metadata.topic": "work"}}],
    ids=["2-kept-read-exactly", "22-kept-asked-of-hnsw"],
)
def test_a_user_too_large_to_copy_still_fills_k(mem: PersonaMem, chosen: dict[str, Any]) -> None:
    """Without a copy of the user's vectors (past ``max_user_vectors``), a filter keeping few records
    reads their vectors and scores them exactly; one keeping more asks HNSW to cover every vector left out."""
    mem.store.views.max_user_vectors = 12  # before the user's first search: no copy is ever made
    mem.add_many([{**_history(i), "valid_until": None} for i in range(30)], user_id="u")
    unfiltered = mem.search("u", "music practice", k=30, method="dense")
    for k in (1, 3, 10):
        got = mem.search("u", "music practice", k=k, method="dense", filters=chosen)
        _assert_restricted(got, unfiltered, _parsed(chosen), k)


def test_the_framework_components_refuse_a_bad_filter_when_made(mem: PersonaMem) -> None:
    pytest.importorskip("langchain_core")
    pytest.importorskip("llama_index.core")
    pytest.importorskip("langgraph")
    from personamem.adapters.langchain import PersonaMemRetriever as LangChainRetriever
    from personamem.adapters.langgraph import PersonaMemStore
    from personamem.adapters.llamaindex import PersonaMemRetriever as LlamaIndexRetriever

    bad = {"colour": "red"}
    with pytest.raises(ValueError, match="field 'colour' is not filterable"):  # pydantic's, around ours
        LangChainRetriever(memory=mem, user_id="u", filters=bad)
    with pytest.raises(InvalidInputError, match="field 'colour' is not filterable"):
        LlamaIndexRetriever(mem, "u", filters=bad)
    with pytest.raises(InvalidInputError, match="field 'colour' is not filterable"):
        PersonaMemStore(mem, filters=bad)


def test_role_filters_who_wrote_a_turn_in_one_word_whatever_the_sdk_called_it() -> None:
    turns = [
        Record(user_id="u", id="h", text="h", metadata={"role": "human"}),  # LangChain's word
        Record(user_id="u", id="a", text="a", metadata={"role": "AI"}),
        Record(user_id="u", id="m", text="m", metadata={"role": "model"}),  # other SDKs' words
        Record(user_id="u", id="c", text="c", metadata={"role": "critic"}),  # the application's own
        Record(user_id="u", id="n", text="n"),
    ]
    assert [r.role for r in turns] == ["user", "assistant", "assistant", "critic", None]
    assert turns[0].metadata == {"role": "user"}  # stored in the canonical word
    for filters, expected in (
        ({"role": "user"}, "h"),
        ({"role": {"in": ["assistant", "critic"]}}, "amc"),
        ({"role": None}, "n"),
        ({"metadata.role": "assistant"}, "am"),
    ):
        parsed = parse_filters(filters)
        assert parsed is not None
        assert "".join(r.id for r in turns if parsed.matches(r)) == expected, filters
