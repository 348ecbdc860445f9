"""Tenants in the store: equal user and record ids never meet; API keys are kept hashed."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from personamem import PersonaMem
from personamem.cli import main
from personamem.errors import InvalidInputError
from personamem.pipeline.config import FIRST_STAGES


def _fill(mem: PersonaMem) -> tuple[PersonaMem, PersonaMem]:
    acme, beta = mem.tenant("acme"), mem.tenant("beta")
    acme.add("alice", "acme: I play the cello in an orchestra.", id="r1")
    beta.add("alice", "beta: I smoke brisket on weekends.", id="r1")
    mem.add("alice", "root: I collect film cameras.", id="r1")
    return acme, beta


def test_equal_user_and_record_ids_stay_apart(mem: PersonaMem) -> None:
    acme, beta = _fill(mem)
    assert acme.get("alice", "r1").text.startswith("acme:")  # type: ignore[union-attr]
    assert beta.get("alice", "r1").text.startswith("beta:")  # type: ignore[union-attr]
    assert mem.get("alice", "r1").text.startswith("root:")  # type: ignore[union-attr]
    for view, marker in ((acme, "acme:"), (beta, "beta:"), (mem, "root:")):
        assert view.users() == ["alice"] and view.count() == 1 and view.count("alice") == 1
        assert [r.text[:5] for r in view.records("alice")] == [marker]
        for method in FIRST_STAGES:
            hits = view.search("alice", "cello brisket cameras orchestra", k=5, method=method)
            assert [h.record.text[:5] for h in hits] == [marker]
            assert {h.record.user_id for h in hits} == {"alice"}  # the tenant's own id, not the key
    assert mem.store.check().ok


def test_forget_and_delete_touch_one_tenant(mem: PersonaMem) -> None:
    acme, beta = _fill(mem)
    assert acme.search("alice", "cello", k=1, method="bm25")  # warms a BM25 cache per view
    assert beta.search("alice", "brisket", k=1, method="bm25")
    assert acme.forget("alice")
    assert acme.users() == [] and acme.search("alice", "cello", k=3, method="bm25") == []
    assert beta.search("alice", "brisket", k=1, method="bm25")[0].record.id == "r1"
    assert beta.delete("alice", ["r1"]) == ["r1"]
    assert mem.get("alice", "r1") is not None and mem.count() == 1
    beta.add("alice", "beta: back again.", id="r1")
    assert beta.update("alice", "r1", text="beta: updated.").text == "beta: updated."
    assert mem.get("alice", "r1").text.startswith("root:")  # type: ignore[union-attr]
    assert mem.store.check().ok


def test_tenant_names_and_separator_are_checked(mem: PersonaMem) -> None:
    for bad in ("", "a b", "-lead", "x" * 65, "a\x1fb", "é"):
        with pytest.raises(InvalidInputError, match="tenant must be"):
            mem.tenant(bad)
    acme = mem.tenant("acme")
    with pytest.raises(InvalidInputError, match="U\\+001F"):
        acme.add("\x1fbeta\x1falice", "spelling another tenant's key")
    with pytest.raises(InvalidInputError, match="U\\+001F"):
        mem.search("\x1facme\x1falice", "anything")
    with pytest.raises(InvalidInputError, match="already tenant 'acme'"):
        acme.tenant("beta")
    assert mem.tenant("acme") is acme  # one view per name, with its pipelines and caches
    assert mem.count() == 0


def test_update_cannot_move_a_record_to_another_user(mem: PersonaMem) -> None:
    record = mem.tenant("acme").add("alice", "mine")
    with pytest.raises(InvalidInputError, match="id or user"):
        mem.tenant("acme").update("alice", record.id, user_id="bob")


def test_keys_are_kept_hashed_and_revocable(mem: PersonaMem, tmp_path: Path) -> None:
    keys = mem.store.keys
    key, listing = keys.create("acme", label="web backend")
    assert keys.tenant_of(key) == "acme" and listing.active
    for wrong in ("", "pm_", key[:-1], key + "x", "pm_" + listing.key_id + "_", key.replace("pm_", "pk_")):
        assert keys.tenant_of(wrong) is None
    secret = key.split("_", 2)[2]  # the key id has no "_"; the secret may
    database = (tmp_path / "store" / "personamem.sqlite").read_bytes()
    for file in (tmp_path / "store").glob("personamem.sqlite*"):
        assert secret.encode() not in file.read_bytes()
    assert hashlib.sha256(secret.encode()).hexdigest().encode() in database + b"".join(
        f.read_bytes() for f in (tmp_path / "store").glob("personamem.sqlite-wal")
    )
    assert keys.revoke(listing.key_id).revoked_at is not None
    assert keys.tenant_of(key) is None
    with pytest.raises(InvalidInputError, match="no API key"):
        keys.revoke("nope")


def test_keys_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ["--store", str(tmp_path / "s")]
    assert main([*store, "keys", "create", "--tenant", "acme", "--label", "bot"]) == 0
    key = capsys.readouterr().out.strip()
    assert key.startswith("pm_")
    key_id = key.split("_")[1]
    assert main([*store, "keys", "list"]) == 0
    listing = capsys.readouterr().out
    assert key_id in listing and "acme" in listing and key.split("_", 2)[2] not in listing
    assert main([*store, "keys", "revoke", key_id]) == 0
    assert main([*store, "keys", "revoke", "missing"]) == 1
    assert "no API key has id 'missing'" in capsys.readouterr().err
    assert main([*store, "keys", "create", "--tenant", "bad name"]) == 1
    assert "tenant must be" in capsys.readouterr().err


def test_a_tenant_view_is_not_held_up_by_a_build_in_progress(mem: PersonaMem) -> None:
    import threading

    mem.tenant("acme").add("alice", "acme: I play the cello.")
    mem.tenant("acme").search("alice", "cello", k=1)  # acme's pipeline is built
    building, release = threading.Event(), threading.Event()

    def slow_build() -> None:  # another tenant's first build: an LLM load holds the shared load lock
        with mem.serving.components._lock, mem.tenant("gamma").serving._lock:
            building.set()
            release.wait(10)

    thread = threading.Thread(target=slow_build)
    thread.start()
    try:
        assert building.wait(5)
        answered = []
        worker = threading.Thread(
            target=lambda: answered.append(mem.tenant("beta").search("alice", "cello", k=1))
        )
        worker.start()
        worker.join(5)  # a new view, and a pipeline without an LLM, wait for neither lock
        assert answered == [[]], "a tenant's request waited behind another tenant's build"
        assert [h.record.text for h in mem.tenant("acme").search("alice", "cello", k=1)] == [
            "acme: I play the cello."
        ]
    finally:
        release.set()
        thread.join()
