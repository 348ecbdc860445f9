"""Property: no search, get or count for one user ever reveals another user's records."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from personamem import PersonaMem, SentenceEncoder
from personamem.pipeline.config import FIRST_STAGES

_namespace = itertools.count()

user_names = st.one_of(
    st.sampled_from(["alice", "bob", "Alice", "alice ", "a/b", "ünï", "1"]),
    # U+001F separates a tenant from its user ids, so it is refused in user ids (tests/store/test_tenants.py)
    st.text(min_size=1, max_size=12).filter(lambda s: s.strip() and "\x1f" not in s),
)
record_ids = st.one_of(st.none(), st.sampled_from(["1", "2", "D1:3", "x"]))
texts = st.text(alphabet=st.sampled_from(list("abcdefghij klmnop éü12")), min_size=1, max_size=40).filter(
    str.strip
)


@pytest.fixture(scope="module")
def shared_mem(tmp_path_factory: pytest.TempPathFactory, encoder: SentenceEncoder) -> Iterator[PersonaMem]:
    with PersonaMem.open(tmp_path_factory.mktemp("isolation"), encoder=encoder) as mem:
        yield mem


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(st.tuples(user_names, record_ids, texts), min_size=1, max_size=10),
    query=texts,
)
def test_no_user_sees_another_users_records(
    shared_mem: PersonaMem, rows: list[tuple[str, str | None, str]], query: str
) -> None:
    prefix = f"n{next(_namespace)}:"  # each example gets its own users inside the shared store
    expected: dict[str, dict[str, str]] = {}
    for user, record_id, text in rows:
        record = shared_mem.add(prefix + user, text, **({"id": record_id} if record_id else {}))
        expected.setdefault(prefix + user, {})[record.id] = text  # same id again replaces

    for user, owned in expected.items():
        assert shared_mem.count(user) == len(owned)
        for method in FIRST_STAGES:
            for hit in shared_mem.search(user, query, k=50, method=method):
                assert hit.record.user_id == user
                assert owned.get(hit.record.id) == hit.record.text
        for _other, theirs in expected.items():
            for record_id in theirs:
                got = shared_mem.get(user, record_id)
                assert got is None if record_id not in owned else got.text == owned[record_id]
    assert shared_mem.search(prefix + "nobody", query, k=5) == []
