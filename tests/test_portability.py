"""A user's export: the same records and logged calls in another store, through the SDK, the CLI and
HTTP; a bad file names its line and stores nothing; tenants export and import only their own users."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from personamem import PersonaMem, PipelineConfig, SentenceEncoder
from personamem.cli import main
from personamem.client import Client
from personamem.errors import IngestError, InvalidInputError
from personamem.store import KeyRing
from personamem.store.sql import SqlCatalog
from personamem.testing.servers import personamem_server
from tests.bytescan import files_containing, store_files


@pytest.fixture
def source(tmp_path: Path, encoder: SentenceEncoder) -> Iterator[PersonaMem]:
    with PersonaMem.open(
        tmp_path / "source", encoder=encoder, pipeline=PipelineConfig(log_interactions=True)
    ) as mem:
        mem.add(
            "ana", "I'm vegan and cook lentils most nights.", id="vegan", kind="knowledge", category="food"
        )
        mem.add(
            "ana", "", id="q1", input="Best tent for rain?", output="A tunnel tent.", metadata={"src": "qa"}
        )
        mem.add(
            "ana",
            "Bought trail shoes.",
            id="shoes",
            kind="purchase",
            timestamp=datetime(2026, 5, 1, tzinfo=UTC),
        )
        mem.add("bo", "I love steak houses.", id="steak")
        logged = mem.context("ana", "what should I cook?").interaction_id
        assert logged is not None
        mem.feedback(logged, answer="Lentil curry.", rating=5, used_record_ids=["vegan"])
        yield mem


def test_an_export_imports_into_another_store_unchanged_and_twice_is_a_no_op(
    source: PersonaMem, tmp_path: Path, encoder: SentenceEncoder
) -> None:
    path = tmp_path / "ana.jsonl"
    assert source.export("ana", path, interactions=True) == 4  # 3 records, 1 interaction
    assert "bo" not in path.read_text(encoding="utf-8") and "steak" not in path.read_text(encoding="utf-8")
    with PersonaMem.open(tmp_path / "target", encoder=encoder) as target:
        added = target.import_user(path)
        assert (added.records, added.interactions) == (3, 1)
        assert target.records("ana") == source.records("ana")
        assert target.inspection.interactions("ana") == source.inspection.interactions("ana")
        assert target.search("ana", "what do I cook?", k=1)[0].record.id == "vegan"
        again = target.import_user(path)
        assert (again.records, again.interactions) == (0, 0)
        copy = target.import_user(path, user_id="ana-copy")
        assert [r.id for r in target.records("ana-copy")] == [
            "vegan",
            "q1",
            "shoes",
        ] and copy.interactions == 1
        assert target.forget("ana") and target.forget("ana-copy")  # an import is erased like any write
        assert files_containing(store_files(tmp_path / "target"), b"lentils most nights") == []


def test_a_bad_export_names_its_line_and_stores_nothing(
    source: PersonaMem, tmp_path: Path, encoder: SentenceEncoder
) -> None:
    path = tmp_path / "ana.jsonl"
    source.export("ana", path)
    lines = path.read_text(encoding="utf-8").splitlines()
    with PersonaMem.open(tmp_path / "target", encoder=encoder) as target:
        path.write_text(
            "\n".join([lines[0], lines[1], '{"record": {"id": "x", "kind": "diary"}}']), encoding="utf-8"
        )
        with pytest.raises(IngestError, match=r"ana.jsonl:3: .*kind"):
            target.import_user(path)
        path.write_text("\n".join([lines[0], '{"note": 1}']), encoding="utf-8")
        with pytest.raises(IngestError, match=r"ana.jsonl:2: .*found keys: note"):
            target.import_user(path)
        path.write_text("\n".join(lines[1:]), encoding="utf-8")
        with pytest.raises(IngestError, match="not a personamem export"):
            target.import_user(path)
        with pytest.raises(InvalidInputError):
            target.import_user(tmp_path / "ana.jsonl", user_id="")
        assert target.count() == 0


def test_the_cli_exports_and_imports(
    source: PersonaMem, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source.close()
    path = tmp_path / "ana.jsonl"
    assert (
        main(
            [
                "--store",
                str(tmp_path / "source"),
                "export",
                "--user",
                "ana",
                "--out",
                str(path),
                "--interactions",
            ]
        )
        == 0
    )
    assert "wrote 4 line(s)" in capsys.readouterr().out
    assert main(["--store", str(tmp_path / "target"), "import", str(path)]) == 0
    assert "imported 3 new record(s), 1 new interaction(s)" in capsys.readouterr().out
    path.write_text("{not json\n", encoding="utf-8")
    assert main(["--store", str(tmp_path / "target"), "import", str(path)]) != 0
    assert "ana.jsonl:1: invalid JSON" in capsys.readouterr().err


@pytest.mark.server
@pytest.mark.enable_socket
def test_over_http_a_tenant_exports_and_imports_only_its_own_users(tmp_path: Path) -> None:
    catalog = SqlCatalog(f"sqlite:///{tmp_path / 'personamem.sqlite'}")
    acme, _ = KeyRing(catalog).create("acme")
    other, _ = KeyRing(catalog).create("other")
    catalog.close()
    with personamem_server(tmp_path) as url, Client(url, acme) as a, Client(url, other) as b:
        a.add("ana", "My passport expires in March.", id="passport")
        a.add("ana", "I prefer aisle seats.", id="aisle")
        b.add("ana", "A different tenant's ana likes window seats.", id="window")
        path = tmp_path / "ana.jsonl"
        assert a.export("ana", path) == 2
        assert "window" not in path.read_text(encoding="utf-8")
        assert b.export("nobody", tmp_path / "none.jsonl") == 0
        added = b.import_user(path, user_id="ana-from-acme")
        assert added.records == 2 and [r.id for r in b.records("ana-from-acme")] == ["passport", "aisle"]
        assert a.users() == ["ana"] and sorted(b.users()) == ["ana", "ana-from-acme"]
        lines = path.read_text(encoding="utf-8").splitlines()
        path.write_text(lines[0] + "\n" + json.dumps({"record": {"id": "x"}}) + "\n", encoding="utf-8")
        with pytest.raises(IngestError, match=r"the request body:2: .*text"):
            b.import_user(path)
        assert sorted(b.users()) == ["ana", "ana-from-acme"]
