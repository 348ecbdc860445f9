"""The LangGraph store: LangGraph's own InMemoryStore as the reference, over a real store and encoder.

LangGraph publishes no conformance suite for stores (``langgraph-checkpoint-conformance`` covers
checkpointers only), so the reference is InMemoryStore: the same operations on both give the same
items, namespaces and filter results. Where personamem departs from it on purpose (ranking by the
user's retrieval, a kept ``created_at``, users kept apart) the test says so.
"""

from __future__ import annotations

import runpy
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore, GetOp, Item, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from personamem import PersonaMem, SentenceEncoder
from personamem.adapters.langgraph import PersonaMemStore
from personamem.errors import InvalidInputError, MethodError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langgraph_agent.py"

PUTS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (
        ("alice", "memories"),
        "diet",
        {"text": "I'm vegetarian and allergic to peanuts.", "topic": "food", "n": 1},
    ),
    (("alice", "memories"), "music", {"text": "I play the cello on Thursdays.", "topic": "music", "n": 3}),
    (
        ("alice", "memories", "trips"),
        "lisbon",
        {"text": "My sister lives in Lisbon.", "topic": "travel", "n": 4},
    ),
    (("alice", "profile"), "name", {"content": "Alice Liddell", "tags": ["name", "id"], "n": 0}),
    (("alice", "profile"), "prefs", {"theme": "dark", "n": 7}),  # no text field: embedded as JSON
    (("bob", "memories"), "diet", {"text": "I love smoked brisket.", "topic": "food", "n": 5}),
]


def _fill(store: BaseStore) -> None:
    for namespace, key, value in PUTS:
        store.put(namespace, key, value)


def _items(items: list[Any]) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    """What both stores must agree on, order aside: namespace, key and value."""
    return sorted((item.namespace, item.key, item.value) for item in items)


@pytest.fixture
def store(mem: PersonaMem) -> PersonaMemStore:
    filled = PersonaMemStore(mem)
    _fill(filled)
    return filled


@pytest.fixture
def reference() -> InMemoryStore:
    filled = InMemoryStore()
    _fill(filled)
    return filled


@pytest.mark.parametrize(
    ("prefix", "query_filter"),
    [
        (("alice",), None),
        (("alice", "memories"), None),
        (("alice", "memories", "trips"), None),
        (("alice",), {"topic": "food"}),
        (("alice",), {"n": {"$gte": 3}}),
        (("alice",), {"n": {"$gt": 3, "$lte": 7}}),
        (("alice",), {"topic": {"$ne": "music"}}),
        (("alice",), {"tags": ["name", "id"]}),
        (("bob",), {"topic": "food"}),
    ],
)
def test_search_without_query_matches_inmemorystore(
    store: PersonaMemStore, reference: InMemoryStore, prefix: tuple[str, ...], query_filter: Any
) -> None:
    ours = store.search(prefix, filter=query_filter, limit=100)
    assert ours, "the case selects nothing: it would pass for any store"
    assert _items(ours) == _items(reference.search(prefix, filter=query_filter, limit=100))
    assert all(item.score is None for item in ours)
    updated = [item.updated_at for item in ours]
    assert updated == sorted(updated, reverse=True), "newest first, as PostgresStore orders"


def test_get_put_delete_round_trip_matches_inmemorystore(
    store: PersonaMemStore, reference: InMemoryStore, mem: PersonaMem
) -> None:
    for namespace, key, _ in PUTS:
        ours, theirs = store.get(namespace, key), reference.get(namespace, key)
        assert ours is not None and theirs is not None
        assert (ours.namespace, ours.key, ours.value) == (theirs.namespace, theirs.key, theirs.value)
    assert store.get(("alice", "memories"), "missing") is None
    assert store.get(("carol", "memories"), "diet") is None

    first = store.get(("alice", "memories"), "diet")
    assert first is not None
    for s in (store, reference):
        s.put(("alice", "memories"), "diet", {"text": "I eat fish now.", "topic": "food"})
        s.delete(("alice", "memories"), "music")
    again = store.get(("alice", "memories"), "diet")
    assert again is not None and again.value == {"text": "I eat fish now.", "topic": "food"}
    assert again.created_at == first.created_at and again.updated_at > first.updated_at
    assert store.get(("alice", "memories"), "music") is None
    assert _items(store.search(("alice",), limit=100)) == _items(reference.search(("alice",), limit=100))
    # one record per item, replaced in place; the delete left none behind
    assert mem.count("alice") == 4 and "cello" not in " ".join(r.text for r in mem.records("alice"))


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"prefix": ("alice",)},
        {"suffix": ("memories",)},
        {"prefix": ("*", "memories")},
        {"max_depth": 2},
        {"prefix": ("alice",), "max_depth": 1},
        {"limit": 2, "offset": 1},
    ],
)
def test_list_namespaces_matches_inmemorystore(
    store: PersonaMemStore, reference: InMemoryStore, kwargs: dict[str, Any]
) -> None:
    ours = store.list_namespaces(**kwargs)
    assert ours and ours == reference.list_namespaces(**kwargs)


def test_search_with_a_query_ranks_by_the_users_retrieval(store: PersonaMemStore) -> None:
    hits = store.search(("alice",), query="which musical instrument do I play?", limit=3)
    assert hits[0].key == "music" and hits[0].score is not None
    scores = [hit.score for hit in hits]
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    food = store.search(("alice",), query="what can't I eat?", filter={"topic": "food"})
    assert [hit.key for hit in food] == ["diet"]
    page = store.search(("alice",), query="what can't I eat?", limit=2, offset=1)
    assert [h.key for h in page] == [h.key for h in store.search(("alice",), query="what can't I eat?")][1:3]


def test_bm25_ranking_is_a_constructor_choice(mem: PersonaMem) -> None:
    store = PersonaMemStore(mem, method="bm25")
    _fill(store)
    assert store.search(("alice",), query="cello Thursdays", limit=1)[0].key == "music"
    with pytest.raises(MethodError):
        PersonaMemStore(mem, method="no-such-method")


def test_users_never_see_each_others_items(store: PersonaMemStore, mem: PersonaMem) -> None:
    """Equal namespaces beyond the user and equal keys: each user reads only their own item."""
    alice, bob = store.get(("alice", "memories"), "diet"), store.get(("bob", "memories"), "diet")
    assert alice is not None and bob is not None and alice.value != bob.value
    for hit in store.search(("bob",), query="vegetarian peanuts cello Lisbon", limit=100):
        assert hit.namespace[0] == "bob"
    assert [r.user_id for r in mem.records("bob")] == ["bob"]
    with pytest.raises(InvalidInputError, match="names no user"):
        store.search((), query="anything")
    with pytest.raises(InvalidInputError, match="names no user"):
        store.put(("  ",), "k", {"text": "x"})


def test_the_users_own_records_are_invisible_to_the_store_but_share_retrieval(
    store: PersonaMemStore, mem: PersonaMem
) -> None:
    mem.add("alice", "I have a golden retriever called Biscuit.", id="dog")
    assert store.get(("alice",), "dog") is None
    assert all(item.key != "dog" for item in store.search(("alice",), query="my dog's name", limit=100))
    hits = mem.search("alice", "what instrument do I play?", k=1)
    assert hits[0].record.metadata["langgraph_key"] == "music"  # the store's items are memory too


def test_items_survive_a_reopen_and_forget_erases_them(tmp_path: Path, encoder: SentenceEncoder) -> None:
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as mem:
        _fill(PersonaMemStore(mem))
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as mem:
        store = PersonaMemStore(mem)
        item = store.get(("alice", "profile"), "name")
        assert item is not None and item.value["content"] == "Alice Liddell"
        mem.forget("alice")
        assert store.search(("alice",), limit=100) == []
        assert store.list_namespaces() == [("bob", "memories")]


def test_tenants_keep_equal_namespaces_apart(mem: PersonaMem) -> None:
    acme, globex = PersonaMemStore(mem.tenant("acme")), PersonaMemStore(mem.tenant("globex"))
    acme.put(("alice", "memories"), "diet", {"text": "acme's alice is vegan"})
    globex.put(("alice", "memories"), "diet", {"text": "globex's alice eats everything"})
    got = acme.get(("alice", "memories"), "diet")
    assert got is not None and got.value == {"text": "acme's alice is vegan"}
    assert [h.value["text"] for h in globex.search(("alice",), query="vegan")] == [
        "globex's alice eats everything"
    ]
    assert mem.users() == []  # neither tenant's items are in the default scope


def test_a_batch_reads_before_it_writes_and_the_last_put_wins(mem: PersonaMem) -> None:
    store = PersonaMemStore(mem)
    ns = ("alice", "memories")
    results = store.batch(
        [
            PutOp(ns, "a", {"text": "first"}),
            GetOp(ns, "a"),
            PutOp(ns, "a", {"text": "second"}),
            PutOp(ns, "b", {"text": "other"}),
            SearchOp(("alice",)),
        ]
    )
    assert results == [None, None, None, None, []]
    got = store.get(ns, "a")
    assert got is not None and got.value == {"text": "second"} and mem.count("alice") == 2


def test_a_ttl_expires_the_item(store: PersonaMemStore, mem: PersonaMem) -> None:
    before = datetime.now(UTC)
    store.put(("alice", "memories"), "brief", {"text": "my hotel room is 412"}, ttl=0.05)  # 3 s
    store.put(("alice", "memories"), "long", {"text": "I like quiet hotels"}, ttl=60.0)
    [brief] = [r for r in mem.records("alice") if r.text == "my hotel room is 412"]
    assert brief.expires_at is not None
    assert (
        timedelta(seconds=3)
        <= brief.expires_at - before
        <= timedelta(seconds=3) + (datetime.now(UTC) - before)
    )
    stored = mem.count("alice")
    time.sleep(max(0.0, (brief.expires_at - datetime.now(UTC)).total_seconds()) + 0.1)
    assert store.get(("alice", "memories"), "brief") is None
    found = [i.key for i in store.search(("alice",), query="hotel room")]
    assert "long" in found and "brief" not in found
    assert mem.purge() == 1 and mem.count("alice") == stored - 1


def test_unsupported_features_fail_clearly(store: PersonaMemStore) -> None:
    # a field an item lacks fails an ordering (InMemoryStore raises TypeError instead)
    assert store.search(("alice",), filter={"missing": {"$gt": 1}}) == []
    with pytest.raises(InvalidInputError, match=r"\$regex"):
        store.search(("alice",), filter={"topic": {"$regex": "f.*"}})


async def test_async_calls_match_the_sync_ones(mem: PersonaMem) -> None:
    store = PersonaMemStore(mem)
    await store.aput(("alice", "memories"), "diet", {"text": "I'm vegetarian."})
    item = await store.aget(("alice", "memories"), "diet")
    assert isinstance(item, Item) and item.value == {"text": "I'm vegetarian."}
    hits = await store.asearch(("alice",), query="food")
    assert [h.key for h in hits] == ["diet"]
    assert await store.alist_namespaces() == [("alice", "memories")]
    await store.adelete(("alice", "memories"), "diet")
    assert await store.aget(("alice", "memories"), "diet") is None


class Turn(TypedDict):
    user: str
    message: str
    recalled: list[str]


def test_a_compiled_graph_uses_it_as_long_term_memory(mem: PersonaMem) -> None:
    """One node remembers what the user says, a later run recalls it by meaning, per user."""

    def remember(state: Turn, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        if state["message"].startswith("remember:"):
            text = state["message"].removeprefix("remember:").strip()
            runtime.store.put((state["user"], "memories"), f"m{len(text)}", {"text": text})
        return {}

    def recall(state: Turn, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        hits = runtime.store.search((state["user"], "memories"), query=state["message"], limit=1)
        return {"recalled": [hit.value["text"] for hit in hits]}

    graph = StateGraph(Turn)
    graph.add_node("remember", remember)
    graph.add_node("recall", recall)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "recall")
    graph.add_edge("recall", END)
    app = graph.compile(store=PersonaMemStore(mem))

    for user, fact in [("ana", "I keep bees in my garden"), ("ben", "I restore old motorcycles")]:
        app.invoke({"user": user, "message": f"remember: {fact}", "recalled": []})
    out = app.invoke({"user": "ana", "message": "what hobby do I have outdoors?", "recalled": []})
    assert out["recalled"] == ["I keep bees in my garden"]
    out = app.invoke({"user": "ben", "message": "what do I do with engines?", "recalled": []})
    assert out["recalled"] == ["I restore old motorcycles"]


@pytest.mark.slow
def test_example_agent_answers_from_each_users_memory(capsys: pytest.CaptureFixture[str]) -> None:
    example = runpy.run_path(str(EXAMPLE))
    example["main"]()
    out = capsys.readouterr().out
    maya, tom = out.split("== tom")
    for section, own, other in [(maya, "maya", "tom"), (tom, "tom", "maya")]:
        recalled = section.split("recalled:")[1]
        assert section.split("answer:")[1].splitlines()[0].strip(), "the LLM gave no answer"
        assert any(fact in recalled for fact in example["FACTS"][own])
        assert not any(fact in recalled for fact in example["FACTS"][other])
