"""Facts that change and records that expire: erased to the byte by the sweep, kept per tenant."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.cli import main
from personamem.client import AsyncClient
from personamem.datasets.benchmark import evenly_spaced
from personamem.errors import ConfigError, ConflictFallbackWarning, InvalidInputError
from personamem.eval.conflicts import load_conflict_pairs
from personamem.llm.base import FrozenLLM, Scores
from personamem.pipeline import PipelineConfig
from personamem.pipeline.config import FIRST_STAGES
from personamem.store import KeyRing
from personamem.store.sql import SqlCatalog
from personamem.testing.llm import FakeLLM
from personamem.testing.servers import personamem_server
from tests.bytescan import files_containing, store_files, vectors_in
from tests.conftest import DATA


def test_the_background_sweep_erases_expired_records_to_the_byte(
    tmp_path: Path, encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONAMEM_SWEEP_S", "0.2")
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        acme = mem.tenant("acme")
        mem.add_many(
            [{"text": f"note {i} about my week", "id": f"keep-{i}"} for i in range(300)], user_id="ana"
        )
        soon = datetime.now(UTC) + timedelta(seconds=3)
        acme.add("ana", "ZQXEXPIRES my door code is 5521", id="ZQXEXPIREDID", expires_at=soon)
        mem.add("ana", "ZQXROOTGOES my spare key is under the mat", id="ZQXROOTID", expires_at=soon)
        acme.add("ana", "acme keeps this one", id="stays")
        records, vectors = acme.store.vectors("ana")
        gone = vectors[[i for i, r in enumerate(records) if r.id == "ZQXEXPIREDID"]]
        vector_id = acme.store.names.vector_id(acme.store.tenancy.key("ana"), "ZQXEXPIREDID").encode()
        assert acme.search("ana", "door code", k=1)[0].record.id == "ZQXEXPIREDID"
        assert files_containing(store_files(tmp_path), b"ZQXEXPIRES")

        needles = (b"ZQXEXPIRES", b"ZQXEXPIREDID", b"ZQXROOTGOES", b"ZQXROOTID", vector_id)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the sweep of every tenant runs in the store's own thread
            after = store_files(tmp_path)
            if not any(files_containing(after, needle) for needle in needles):
                break
            time.sleep(0.2)
        for needle in needles:
            assert files_containing(after, needle) == [], needle
        assert vectors_in(after, gone) == set()
        assert [r.id for r in acme.records("ana")] == ["stays"] and mem.count("ana") == 300
        assert mem.search("ana", "note 7 about my week", k=1)[0].record.id == "keep-7"
        assert mem.store.check().ok


def test_supersede_ttl_purge_and_duplicates_stay_within_a_tenant(mem: PersonaMem) -> None:
    acme, beta = mem.tenant("acme"), mem.tenant("beta")
    for view, name in ((acme, "Alice"), (beta, "Berta"), (mem, "Rootie")):
        view.add("u", f"My name is {name}.", id="name", kind="knowledge")
    acme.supersede("u", "name", "My name is Alicia.", id="name2", valid_from=datetime(2030, 1, 1))
    assert beta.get("u", "name").valid_until is None  # type: ignore[union-attr]
    with pytest.raises(InvalidInputError, match="no record"):
        beta.supersede("u", "name2", "My name is Eve.")  # acme's record id means nothing to beta
    for method in FIRST_STAGES:
        later = acme.search("u", "my name", k=5, method=method, as_of="2031-01-01")
        assert [h.record.text for h in later] == ["My name is Alicia."], method
        assert [h.record.text for h in beta.search("u", "my name", k=5, method=method)] == [
            "My name is Berta."
        ]

    mem.set_ttl(3600)
    acme.set_ttl(60)
    beta_record, acme_record = beta.add("u", "beta inherits"), acme.add("u", "acme's own")
    assert beta_record.expires_at is not None and acme_record.expires_at is not None
    assert acme_record.expires_at < beta_record.expires_at  # 60 s against the store's hour
    acme.set_ttl(None)
    assert acme.ttl() is None and beta.ttl() == timedelta(hours=1)
    assert acme.add("u", "acme keeps forever").expires_at is None
    mem.set_ttl(None)

    past = datetime.now(UTC) - timedelta(seconds=1)
    acme.add("u", "acme expired", expires_at=past)
    beta.add("u", "beta expired", expires_at=past)
    assert acme.purge() == 1 and beta.store.catalog.count() == mem.store.catalog.count()
    assert [r.text for r in beta.records("u")].count("beta expired") == 0  # hidden, not yet erased
    with pytest.raises(InvalidInputError, match="cannot purge other tenants"):
        beta.purge(all_tenants=True)
    assert mem.purge(all_tenants=True) == 1

    copied = beta.add("u", "My name is Alice.", duplicates="skip")  # acme's text: not beta's duplicate
    assert copied.duplicate_of is None and beta.get("u", copied.id) is not None
    assert mem.store.check().ok


def test_supersede_needs_a_later_start(mem: PersonaMem) -> None:
    mem.add("u", "I work at Acme.", id="job", valid_from=datetime(2024, 5, 1))
    with pytest.raises(InvalidInputError, match="must start later"):
        mem.supersede("u", "job", "I work at Initech.", valid_from=datetime(2024, 1, 1))
    with pytest.raises(InvalidInputError, match="itself"):
        mem.supersede("u", "job", "I work at Acme.", id="job")
    with pytest.raises(Exception, match="valid_until"):
        mem.add("u", "backwards", valid_from=datetime(2025, 1, 1), valid_until=datetime(2024, 1, 1))
    assert mem.count("u") == 1 and mem.get("u", "job").valid_until is None  # type: ignore[union-attr]


def test_cli_supersede_ttl_and_purge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "store")
    data = tmp_path / "a.jsonl"
    data.write_text('{"user_id": "u", "text": "My name is Alice.", "id": "n1"}\n')
    assert main(["--store", store, "ingest", str(data)]) == 0
    assert main(["--store", store, "supersede", "My name is Bob.", "--user", "u", "--old", "n1"]) == 0
    assert main(["--store", store, "search", "name", "--user", "u", "--json"]) == 0
    now = capsys.readouterr().out
    assert "My name is Bob." in now and "Alice" not in now
    assert main(["--store", store, "search", "name", "--user", "u", "--json", "--include-superseded"]) == 0
    assert "Alice" in capsys.readouterr().out
    assert main(["--store", store, "ttl", "12h"]) == 0
    assert "12:00:00" in capsys.readouterr().out
    assert main(["--store", store, "ttl", "soon"]) != 0
    assert main(["--store", store, "purge"]) == 0
    assert "erased 0 expired record(s)" in capsys.readouterr().out


@pytest.mark.server
@pytest.mark.enable_socket
def test_async_client_supersedes_and_reads_as_of(tmp_path: Path) -> None:
    catalog = SqlCatalog(f"sqlite:///{tmp_path / 'personamem.sqlite'}")
    key, _ = KeyRing(catalog).create("acme", scope="admin")  # set_ttl and purge need admin
    catalog.close()

    async def scenario(url: str) -> None:
        async with AsyncClient(url, key) as client:
            await client.add("ana", "I live in Lisbon.", id="home", valid_from="2020-01-01T00:00:00Z")
            moved = await client.supersede(
                "ana", "home", "I live in Porto.", valid_from="2025-01-01T00:00:00Z"
            )
            assert moved.supersedes == "home"
            now, then = await asyncio.gather(
                client.search("ana", "where do I live", k=3),
                client.search("ana", "where do I live", k=3, as_of=datetime(2022, 1, 1)),
            )
            assert [h.record.text for h in now] == ["I live in Porto."]
            assert [h.record.text for h in then] == ["I live in Lisbon."]
            context = await client.context("ana", "where do I live", include_superseded=True)
            assert "Lisbon" in context.text and "Porto" in context.text
            await client.set_ttl(timedelta(days=2))
            assert await client.ttl() == timedelta(days=2)
            duplicate = await client.add(
                "ana", "I live in Porto!", duplicates="skip", duplicate_threshold=0.9
            )
            assert duplicate.duplicate_of == moved.id and await client.count("ana") == 2
            assert await client.purge() == 0

    with personamem_server(tmp_path) as url:
        asyncio.run(scenario(url))


class _SaysReplacedWhenNow(FakeLLM):
    """Control flow only: "Yes" (replaced) exactly when the newer statement says "now"."""

    def loglikelihood(self, requests):  # type: ignore[no-untyped-def]
        scores = super().loglikelihood(requests)
        verdicts = []
        for prompt, answer in requests:
            newer = prompt[-1]["content"].split("Now the person says:")[1]
            replaced = " now" in newer
            verdicts.append(0.0 if (answer == "Yes") == replaced else -5.0)
        return Scores(verdicts, [[v] for v in verdicts], scores.usage)


def test_conflict_detection_supersedes_only_when_switched_on(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    config = PipelineConfig(conflicts=True)
    with PersonaMem.open(
        tmp_path / "on", encoder=encoder, pipeline=config, llm=_SaysReplacedWhenNow()
    ) as mem:
        home = mem.add("u", "I live in Lisbon.", kind="knowledge")
        also = mem.add("u", "I live in Lisbon and like it.", kind="knowledge")  # no "now": both current
        assert also.supersedes is None
        moved = mem.add("u", "I live in Porto now.", kind="knowledge")
        assert moved.supersedes in (home.id, also.id) and moved.valid_from is not None
        note = mem.add("u", "I now live near the river.")  # a note, not knowledge: never checked
        assert note.supersedes is None
    with PersonaMem.open(tmp_path / "off", encoder=encoder, llm=_SaysReplacedWhenNow()) as mem:
        mem.add("u", "I live in Lisbon.", kind="knowledge")
        assert mem.add("u", "I live in Porto now.", kind="knowledge").supersedes is None


def test_a_failing_conflict_llm_adds_plainly_with_a_warning(tmp_path: Path, encoder: SentenceEncoder) -> None:
    config = PipelineConfig(conflicts=True)
    with PersonaMem.open(tmp_path, encoder=encoder, pipeline=config, llm=FakeLLM(fail_times=1)) as mem:
        mem.add("u", "I live in Lisbon.", kind="knowledge")
        with pytest.warns(ConflictFallbackWarning, match="conflict detection failed"):
            record = mem.add("u", "I live in Porto now.", kind="knowledge")
        assert record.supersedes is None and mem.count("u") == 2
    with (
        PersonaMem.open(tmp_path / "no-llm", encoder=encoder, pipeline=config) as mem,
        pytest.raises(ConfigError, match="needs an LLM"),
    ):
        mem.add("u", "I live in Porto now.", kind="knowledge")


def test_conflict_detection_runs_on_the_real_llm(
    tmp_path: Path, encoder: SentenceEncoder, llm: FrozenLLM
) -> None:
    config = PipelineConfig(conflicts=True)
    with PersonaMem.open(tmp_path, encoder=encoder, pipeline=config, llm=llm) as mem:
        first = mem.add("u", "My name is Alice.", kind="knowledge")
        second = mem.add("u", "My name is Bob now.", kind="knowledge")
        current = {h.record.id for h in mem.search("u", "what is my name", k=5)}
        # whichever the small LLM decides, the history keeps both and exactly the current ones show
        assert mem.count("u") == 2 and second.id in current
        assert (first.id in current) == (second.supersedes is None)


@pytest.mark.slow
def test_eval_conflicts_scores_the_labelled_pairs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prefeval = DATA / "prefeval"
    if not prefeval.is_dir():
        pytest.skip(f"PrefEval not found at {prefeval}")
    pairs = load_conflict_pairs(prefeval)
    assert len(pairs) == 96 and sum(p.replaces for p in pairs) == 32
    assert all(p.earlier and p.newer and p.earlier != p.newer for p in pairs)
    report = tmp_path / "conflicts.json"
    argv = ["eval-conflicts", "--data", str(prefeval), "--llm", "smollm2-135m", "--out", str(report)]
    assert main([*argv, "--max-pairs", "24"]) == 0  # the wiring is under test: a quarter of the pairs
    subset = evenly_spaced(pairs, 24)
    assert f"24 pairs ({sum(p.replaces for p in subset)} replace)" in capsys.readouterr().out
    body = json.loads(report.read_text())
    assert [p["newer"] for p in body["pairs"]] == [p.newer for p in subset]
    assert {s["name"][:3] for s in body["scores"]} == {"LLM", "cos"}
    with pytest.raises(InvalidInputError, match="not found"):
        load_conflict_pairs(tmp_path)


def test_sweep_interval_zero_leaves_purging_to_the_operator(
    tmp_path: Path, encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONAMEM_SWEEP_S", "0")
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add("u", "expired already", expires_at=datetime.now(UTC) - timedelta(seconds=1))
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:  # a sweeping open would erase it now
        time.sleep(0.3)
        assert mem.store.catalog.count("u") == 1 and mem.records("u") == []
    assert main(["--store", str(tmp_path), "purge"]) == 0
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        assert mem.store.catalog.count("u") == 0
