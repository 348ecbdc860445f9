"""Behaviour every PersonaMem backend (SQL database × vector index) must show."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from personamem.contract import Context, MemoryApi, RecordHistory, RecordPage, SearchResult, record_json
from personamem.errors import InvalidInputError, InvalidRecordError, MethodError, PersonaMemDeprecationWarning
from personamem.memory import PersonaMem
from personamem.pipeline.config import FIRST_STAGES
from personamem.records import Record, RecordKind

__all__ = ["CONTEXT_KEYS", "HIT_KEYS", "RECORD_KEYS", "MemoryContract"]

RECORD_KEYS = frozenset({*Record.model_fields})
"""A record's JSON keys: every field, ``duplicate_of`` (never stored) included."""
HIT_KEYS = frozenset({"rank", "score", "id", "text", "record"})
"""A hit's JSON keys."""
CONTEXT_KEYS = frozenset(
    {"text", "records", "dropped", "tokens", "budget_tokens", "usage", "timings_ms", "warnings"}
    | {"memory", "interaction_id", "first_stage", "degraded"}
)
"""A context's JSON keys, wherever it comes from (SDK, REST, CLI)."""

_ALICE = [
    "I'm vegetarian and allergic to peanuts.",
    "I play the cello in a community orchestra.",
    "My daughter starts school in Berlin next autumn.",
]
_BOB = [
    "I smoke brisket every weekend.",
    "I collect vintage film cameras.",
    "My favourite city is Lisbon.",
]


class MemoryContract:
    """Contract tests; subclasses provide a ``mem`` fixture yielding an empty memory.

    ``mem`` may be anything with :class:`~personamem.contract.MemoryApi`'s operations
    (``personamem.client.Client`` runs them over HTTP); such a subclass overrides :meth:`consistent`
    to check the store behind it, and :meth:`served` to hand back the server's raw JSON, which the
    shape tests compare with the SDK's own (``to_json`` and the contract's models).
    """

    def consistent(self, mem: Any) -> bool:
        """Whether the store's SQL rows and vectors agree (``Store.check``)."""
        assert isinstance(mem, PersonaMem)
        return mem.store.check().ok

    def served(self, mem: Any, method: str, path: str, **options: Any) -> Any | None:
        """The server's JSON answer to this request on ``mem``'s tenant; None for a memory in process."""
        return None

    @pytest.fixture
    def two_users(self, mem: MemoryApi) -> MemoryApi:
        mem.add_many([{"text": t} for t in _ALICE], user_id="alice")
        mem.add_many([{"text": t} for t in _BOB], user_id="bob")
        return mem

    def test_add_and_get(self, mem: MemoryApi) -> None:
        record = mem.add("alice", "I'm vegetarian.", kind="knowledge", metadata={"source": "chat"})
        assert record.kind is RecordKind.KNOWLEDGE
        assert mem.get("alice", record.id) == record
        assert mem.get("bob", record.id) is None

    def test_fields_round_trip(self, mem: MemoryApi) -> None:
        naive = mem.add(
            "alice", "Bought running shoes.", kind="purchase", timestamp=datetime(2024, 10, 14, 16, 10)
        )
        aware = mem.add(
            "alice",
            "Asked about marathon plans.",
            kind="dialog",
            category="sport",
            timestamp=datetime(2024, 10, 15, 9, 0, tzinfo=timezone(timedelta(hours=2))),
            metadata={"session": 3, "score": 0.5, "flag": True, "note": None},
        )
        pair = mem.add("alice", input="Rate 'Heat' (1995)", output="5 stars", kind="qa")
        for record in (naive, aware, pair):
            assert mem.get("alice", record.id) == record

    def test_counts_and_users(self, two_users: MemoryApi) -> None:
        assert two_users.users() == ["alice", "bob"]
        assert two_users.count() == 6
        assert two_users.count("alice") == 3
        assert [r.text for r in two_users.records("alice")] == _ALICE  # insertion order

    def test_adding_again_is_idempotent(self, two_users: MemoryApi) -> None:
        two_users.add_many([{"text": t} for t in _ALICE], user_id="alice")
        assert two_users.count("alice") == 3
        assert self.consistent(two_users)

    def test_same_id_new_content_replaces(self, mem: MemoryApi) -> None:
        mem.add("alice", "I live in Paris.", id="home")
        mem.add("alice", "I moved to Oslo.", id="home")
        assert mem.count("alice") == 1
        hits = mem.search("alice", "Which city do I live in now?", k=1)
        assert hits[0].record.text == "I moved to Oslo."
        assert self.consistent(mem)

    @pytest.mark.parametrize("method", FIRST_STAGES)
    def test_search_finds_the_relevant_record(self, two_users: PersonaMem, method: str) -> None:
        hits = two_users.search("alice", "cello orchestra", k=2, method=method)
        assert hits[0].record.text == _ALICE[1]
        assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
        assert all(a.score >= b.score for a, b in itertools.pairwise(hits))

    @pytest.mark.parametrize("method", FIRST_STAGES)
    def test_search_never_crosses_users(self, two_users: PersonaMem, method: str) -> None:
        # words from alice's records, plus one ("city") that bob's also have
        hits = two_users.search("bob", "favourite city Berlin cello vegetarian", k=10, method=method)
        assert hits
        assert {h.record.user_id for h in hits} == {"bob"}

    def test_ids_may_collide_across_users(self, mem: MemoryApi) -> None:
        mem.add("alice", "Alice's first note", id="1")
        mem.add("bob", "Bob's first note", id="1")
        assert mem.get("alice", "1").text == "Alice's first note"  # type: ignore[union-attr]
        assert [h.record.text for h in mem.search("bob", "first note", k=5)] == ["Bob's first note"]

    def test_unknown_user_searches_empty(self, two_users: MemoryApi) -> None:
        for method in FIRST_STAGES:
            assert two_users.search("carol", "anything", k=3, method=method) == []

    def test_forget_removes_rows_vectors_and_cache(self, two_users: MemoryApi) -> None:
        assert two_users.search("alice", "cello", k=1, method="bm25")  # warms alice's BM25 cache
        assert two_users.forget("alice")
        assert two_users.users() == ["bob"]
        assert two_users.count("alice") == 0
        for method in FIRST_STAGES:
            assert two_users.search("alice", "cello", k=3, method=method) == []
        assert self.consistent(two_users)
        assert not two_users.forget("alice")

    def test_forgotten_user_can_return(self, two_users: MemoryApi) -> None:
        two_users.search("alice", "cello", k=1, method="bm25")
        two_users.forget("alice")
        two_users.add("alice", "I started learning the violin.")
        hits = two_users.search("alice", "cello violin", k=5, method="bm25")
        assert [h.record.text for h in hits] == ["I started learning the violin."]

    def test_delete_and_update_one_record(self, two_users: MemoryApi) -> None:
        cello = two_users.records("alice")[1]
        assert two_users.search("alice", "cello", k=1, method="bm25")  # warms alice's BM25 cache
        assert two_users.delete("alice", [cello.id]) == [cello.id]
        assert two_users.get("alice", cello.id) is None and two_users.count("alice") == 2
        for method in FIRST_STAGES:
            assert cello.id not in {
                h.record.id for h in two_users.search("alice", "cello", k=3, method=method)
            }
        lisbon = two_users.records("alice")[-1]
        two_users.update("alice", lisbon.id, text="My favourite city is Porto.")
        assert two_users.search("alice", "Porto", k=1, method="bm25")[0].record.id == lisbon.id
        assert two_users.count("bob") == 3 and self.consistent(two_users)

    def test_invalid_batch_stores_nothing(self, two_users: MemoryApi) -> None:
        with pytest.raises(InvalidRecordError, match="record 1"):
            two_users.add_many([{"text": "fine"}, {"text": "   "}], user_id="alice")
        assert two_users.count("alice") == 3

    def test_record_for_another_user_is_refused(self, mem: MemoryApi) -> None:
        with pytest.raises(InvalidRecordError, match="bob"):
            mem.add_many([Record(user_id="bob", text="x")], user_id="alice")
        assert mem.count() == 0

    def test_bad_search_arguments(self, two_users: MemoryApi) -> None:
        # the SDK lists the whole table; a server lists what it serves (the plain names first)
        with pytest.raises(
            MethodError,
            match=r"unknown method 'magic'; (choose from|this server serves): dense, bm25, hybrid",
        ):
            two_users.search("alice", "x", method="magic")
        with pytest.raises(ValueError, match="k must be"):
            two_users.search("alice", "x", k=0)

    # -- facts that change, expiry, near-duplicates ------------------------------------------------

    def test_supersede_keeps_history_and_shows_current_facts(self, mem: MemoryApi) -> None:
        alice = mem.add("u", "My name is Alice.", kind="knowledge", valid_from=datetime(2024, 1, 1))
        mem.add("u", "I live in Lisbon.", kind="knowledge")
        bob = mem.supersede(
            "u", alice.id, "My name is Bob.", kind="knowledge", valid_from=datetime(2025, 6, 1)
        )
        assert bob.supersedes == alice.id and bob.valid_from == datetime(2025, 6, 1, tzinfo=UTC)
        old = mem.get("u", alice.id)  # still in history, its validity ended where Bob's began
        assert old is not None and old.valid_until == bob.valid_from
        for method in FIRST_STAGES:
            now = {h.record.text for h in mem.search("u", "what is my name", k=5, method=method)}
            assert "My name is Bob." in now and "My name is Alice." not in now, method
            then = {h.record.text for h in mem.search("u", "my name", k=5, method=method, as_of="2024-03-01")}
            assert "My name is Alice." in then and "My name is Bob." not in then, method
            every = mem.search("u", "my name", k=5, method=method, include_superseded=True)
            assert {"My name is Alice.", "My name is Bob."} <= {h.record.text for h in every}, method
        assert "Alice" not in mem.context("u", "what is my name").text
        assert "Alice" in mem.context("u", "what is my name", as_of=datetime(2024, 3, 1)).text
        with pytest.raises(InvalidInputError, match="stopped being current"):
            mem.supersede("u", alice.id, "My name is Carol.")
        with pytest.raises(InvalidInputError, match="no record"):
            mem.supersede("u", "missing", "My name is Carol.")
        with pytest.raises(InvalidInputError, match="as_of"):
            mem.search("u", "name", as_of="yesterday")
        assert self.consistent(mem)

    def test_history_keeps_the_events_and_erasure_takes_the_text(self, mem: MemoryApi) -> None:
        mem.add("u", "I live in Lisbon.", id="home")
        mem.update("u", "home", text="I live in Porto.")
        mem.supersede("u", "home", "I moved to Oslo.", id="oslo")
        events = mem.history("u", "home")
        assert [(e.event, e.text) for e in events] == [
            ("added", "I live in Lisbon."),
            ("updated", "I live in Porto."),
            ("superseded", "I live in Porto."),
        ]
        assert len({e.actor for e in events}) == 1 and [e.at for e in events] == sorted(e.at for e in events)
        assert mem.history("v", "home") == [] and mem.history("u", "missing") == []
        params = {"user_id": "u", "record_id": "home"}
        served = self.served(mem, "GET", "/v1/history", params=params)
        assert served in (None, RecordHistory(events=events).model_dump(mode="json"))
        assert mem.delete("u", ["home"]) == ["home"]
        assert [(e.event, e.text) for e in mem.history("u", "home")] == [
            ("added", None),
            ("updated", None),
            ("superseded", None),
            ("deleted", None),
        ]
        assert mem.forget("u")
        assert [(e.event, e.text) for e in mem.history("u", "oslo")] == [("added", None), ("forgotten", None)]

    def test_filters_narrow_search_and_context(self, mem: MemoryApi) -> None:
        food = {"topic": "food"}
        mem.add_many(
            [
                {"text": "I'm vegetarian and allergic to peanuts.", "kind": "knowledge", "metadata": food},
                {
                    "text": "Lunch was a lentil soup.",
                    "kind": "dialog",
                    "metadata": food,
                    "timestamp": "2025-03-01",
                },
                {"text": "I play the cello.", "kind": "knowledge", "metadata": {"topic": "music"}},
                {
                    "text": "Dinner was a Thai soup.",
                    "kind": "dialog",
                    "metadata": food,
                    "timestamp": "2024-06-01",
                },
            ],
            user_id="alice",
        )
        mem.add("bob", "My lunch was a tomato soup.", metadata=food, timestamp=datetime(2025, 5, 1))
        recent = {"metadata.topic": "food", "timestamp": {"gte": "2025-01-01"}}
        for method in (*FIRST_STAGES, None):
            hits = mem.search("alice", "which soup did I have for lunch?", k=3, method=method, filters=recent)
            assert [h.record.text for h in hits] == ["Lunch was a lentil soup."], method  # never bob's
        either = {"or": [{"kind": "knowledge"}, {"metadata.topic": {"in": ["music"]}}]}
        hits = mem.search("alice", "what do I like?", k=5, filters=either)
        assert {h.record.text for h in hits} == {
            "I'm vegetarian and allergic to peanuts.",
            "I play the cello.",
        }
        text = mem.context("alice", "what should I cook?", filters={"kind": {"ne": "knowledge"}}).text
        assert "soup" in text and "vegetarian" not in text and "cello" not in text
        with pytest.raises(InvalidInputError, match="unknown operator 'gtx' at timestamp"):
            mem.search("alice", "soup", filters={"timestamp": {"gtx": "2025-01-01"}})
        with pytest.raises(InvalidInputError, match="field 'colour' is not filterable"):
            mem.context("alice", "soup", filters={"colour": "red"})

    def test_expired_records_are_hidden_then_purged(self, mem: MemoryApi) -> None:
        past = datetime.now(UTC) - timedelta(seconds=1)
        gone = mem.add("u", "My locker code is 4417.", expires_at=past)
        kept = mem.add("u", "My locker is on floor two.", expires_at=datetime.now(UTC) + timedelta(days=1))
        assert mem.get("u", gone.id) is None and [r.id for r in mem.records("u")] == [kept.id]
        for method in FIRST_STAGES:
            hits = mem.search("u", "locker code", k=5, method=method, include_superseded=True)
            assert gone.id not in {h.record.id for h in hits}, method
        assert mem.purge() == 1 and mem.count("u") == 1 and self.consistent(mem)

    def test_default_time_to_live(self, mem: MemoryApi) -> None:
        assert mem.ttl() is None
        mem.set_ttl(timedelta(hours=1))
        try:
            assert mem.ttl() == timedelta(hours=1)
            record = mem.add("u", "I'm in Rome this week.")
            assert record.expires_at is not None
            left = record.expires_at - datetime.now(UTC)
            assert timedelta(minutes=59) < left <= timedelta(hours=1)
            own = mem.add("u", "Call me back on Friday.", expires_at=datetime(2100, 1, 1))
            assert own.expires_at == datetime(2100, 1, 1, tzinfo=UTC)  # a record's own expiry wins
            with pytest.raises(InvalidInputError, match="positive"):
                mem.set_ttl(-5)
            with pytest.raises(InvalidInputError, match="positive"):
                mem.set_ttl(True)  # a bool is not a number of seconds
        finally:
            mem.set_ttl(None)
        assert mem.ttl() is None

    def test_near_duplicates_follow_the_policy(self, mem: MemoryApi) -> None:
        first = mem.add("u", "I play the cello in a community orchestra.", metadata={"source": "chat"})
        assert first.duplicate_of is None
        kept = mem.add("u", "I play cello in a community orchestra.")
        assert kept.duplicate_of == first.id and mem.count("u") == 2
        skipped = mem.add("u", "I play the cello in the community orchestra.", duplicates="skip")
        assert skipped.id == first.id and skipped.duplicate_of == first.id and mem.count("u") == 2
        merged = mem.add(
            "u",
            "I play the cello in a local community orchestra.",
            duplicates="merge-metadata",
            duplicate_threshold=0.9,
            metadata={"confirmed": True},
        )
        assert merged.id in (first.id, kept.id) and merged.metadata.get("confirmed") is True
        stored = mem.get("u", merged.id)
        assert stored is not None and stored.metadata == merged.metadata and mem.count("u") == 2
        assert mem.add("u", "I smoke brisket every weekend.", duplicates="skip").duplicate_of is None
        with pytest.raises(InvalidInputError, match="duplicates must be one of"):
            mem.add("u", "x", duplicates="drop")
        assert self.consistent(mem)

    # -- one JSON shape per result, in process and over HTTP ----------------------------------------

    def test_context_has_one_json_shape(self, two_users: MemoryApi) -> None:
        context = two_users.context("alice", "what instrument do I play?", budget_tokens=24)
        body = context.to_json()
        assert set(body) == CONTEXT_KEYS and body["records"] and body["dropped"]
        for hit in body["records"] + body["dropped"]:
            assert set(hit) == HIT_KEYS and set(hit["record"]) == RECORD_KEYS
            assert (hit["id"], hit["text"]) == (hit["record"]["id"], hit["record"]["text"])
        assert Context.model_validate(body) == context  # what a client reads back is the same object
        request = {"user_id": "alice", "query": "what instrument do I play?", "budget_tokens": 24}
        served = self.served(two_users, "POST", "/v1/context", json=request)
        if served is not None:
            assert _untimed(served) == _untimed(body)

    def test_search_and_records_have_one_json_shape(self, two_users: MemoryApi) -> None:
        hits = two_users.search("alice", "cello orchestra", k=2, method="bm25")
        body = SearchResult.of(hits).model_dump(mode="json")
        assert set(body) == {"hits", "interaction_id", "warnings", "degraded", "usage", "timings_ms"}
        assert all(set(hit) == HIT_KEYS for hit in body["hits"])
        assert SearchResult.model_validate(body).to_hits() == hits
        query = {"user_id": "alice", "query": "cello orchestra", "k": 2, "method": "bm25"}
        served = self.served(two_users, "POST", "/v1/search", json=query)
        if served is not None:  # the same shape; only the times and the ids of the two calls differ
            assert _untimed(served) == _untimed(body)

        records = two_users.records("alice")
        page = RecordPage(count=len(records), records=records[:2]).model_dump(mode="json")
        assert all(set(r) == RECORD_KEYS for r in page["records"])
        params = {"user_id": "alice", "offset": 0, "limit": 2}
        assert self.served(two_users, "GET", "/v1/records", params=params) in (None, page)
        one = records[0]
        assert set(record_json(one)) == RECORD_KEYS and Record.model_validate(record_json(one)) == one
        served = self.served(two_users, "GET", f"/v1/records/{one.id}", params={"user_id": "alice"})
        assert served in (None, record_json(one))

    def test_context_method_and_its_deprecated_name(self, two_users: MemoryApi) -> None:
        by_method = two_users.context("alice", "cello", method="bm25")
        with pytest.warns(PersonaMemDeprecationWarning, match="method="):
            by_old_name = two_users.context("alice", "cello", pipeline="bm25")  # type: ignore[call-arg]
        assert by_old_name.text == by_method.text and by_method.first_stage["first_stage"] == "bm25"
        with pytest.raises(InvalidInputError, match="method= only"):
            two_users.context("alice", "cello", method="bm25", pipeline="dense")  # type: ignore[call-arg]
        old_body = {"user_id": "alice", "query": "cello", "pipeline": "bm25"}
        served = self.served(two_users, "POST", "/v1/context", json=old_body)  # an old client's body
        assert served is None or served["text"] == by_method.text


def _untimed(body: dict[str, Any]) -> dict[str, Any]:
    """A call's JSON without what differs between two calls: its timings' values and its logged call's id."""
    logged = body["interaction_id"] is not None
    return {**body, "timings_ms": sorted(body["timings_ms"]), "interaction_id": logged}
