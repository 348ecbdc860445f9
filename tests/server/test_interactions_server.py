"""The interaction log over HTTP: ids on search and context, feedback by route, per tenant."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from personamem import PersonaMem
from personamem.client import Client
from personamem.errors import InvalidInputError
from personamem.store import KeyRing
from personamem.store.sql import SqlCatalog
from personamem.testing.servers import personamem_server

pytestmark = [pytest.mark.server, pytest.mark.enable_socket]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, KeyRing, Path]]:
    folder = tmp_path_factory.mktemp("store")
    config = folder.parent / "logged.toml"
    config.write_text("[pipeline]\nlog_interactions = true\n", encoding="utf-8")
    with personamem_server(folder, "--config", str(config)) as url:
        catalog = SqlCatalog(f"sqlite:///{folder / 'personamem.sqlite'}")
        yield url, KeyRing(catalog), folder
        catalog.close()


def test_feedback_over_http_lands_in_the_tenants_log(served: tuple[str, KeyRing, Path]) -> None:
    url, keys, folder = served
    with Client(url, keys.create("shop")[0]) as shop, Client(url, keys.create("clinic")[0]) as clinic:
        shop.add_many([{"user_id": "ana", "id": "a1", "text": "I'm vegan and avoid dairy."}])
        context = shop.context("ana", "what should I cook?")
        hits = shop.search("ana", "dinner", k=1, method="bm25")
        assert context.interaction_id and hits.interaction_id
        shop.feedback(context.interaction_id, answer="Lentils.", rating=5, used_record_ids=["a1"])
        with pytest.raises(InvalidInputError, match="no interaction"):  # another tenant's id is none
            clinic.feedback(context.interaction_id, rating=1)
        # one declaration (FeedbackReport): the client refuses before sending what the route refuses
        with pytest.raises(InvalidInputError, match="rating must be a number"):
            shop.feedback(context.interaction_id, rating="good")  # type: ignore[arg-type]
        key = keys.create("raw")[0]
        body = {"interaction_id": context.interaction_id, "rating": "good"}
        answer = httpx.post(f"{url}/v1/feedback", json=body, headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 422 and "rating must be a number" in answer.json()["error"]["message"]
    with PersonaMem.open(folder) as mem:
        (logged, searched) = mem.tenant("shop").inspection.interactions("ana")
    assert logged.feedback is not None and (logged.feedback.rating, logged.used) == (5.0, ["a1"])
    assert (searched.call, searched.method, searched.feedback) == ("search", "bm25", None)
