"""A record's history: its events with time and actor, its text only while it exists, per tenant."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.cli import main
from personamem.client import Client
from personamem.store import KeyRing
from personamem.store.sql import SqlCatalog
from personamem.testing.servers import personamem_server
from tests.bytescan import files_containing, store_files


def _kinds(mem: PersonaMem, user: str, record_id: str) -> list[tuple[str, str | None]]:
    return [(e.event, e.text) for e in mem.history(user, record_id)]


def test_events_follow_add_update_supersede_and_delete(mem: PersonaMem) -> None:
    before = datetime.now(UTC)
    mem.add("ana", "I drive a red car.", id="car", kind="knowledge")
    mem.add("ana", "I drive a red car.", id="car", kind="knowledge")  # unchanged, pending or not: no event
    mem.update("ana", "car", text="I drive a blue car.")
    mem.supersede("ana", "car", "I sold the car; I cycle now.", id="bike", kind="knowledge")
    assert _kinds(mem, "ana", "car") == [
        ("added", "I drive a red car."),
        ("updated", "I drive a blue car."),
        ("superseded", "I drive a blue car."),  # still in the history, no longer current
    ]
    assert _kinds(mem, "ana", "bike") == [("added", "I sold the car; I cycle now.")]

    assert mem.delete("ana", ["car"]) == ["car"]
    events = mem.history("ana", "car")
    assert [(e.event, e.text) for e in events] == [
        ("added", None),
        ("updated", None),
        ("superseded", None),
        ("deleted", None),
    ]  # erasure wins: the events are left, the text of every version is gone
    assert {e.actor for e in events} == {"sdk"} and {e.record_id for e in events} == {"car"}
    assert all(before <= a.at <= b.at <= datetime.now(UTC) for a, b in itertools.pairwise(events))
    assert mem.history("ana", "never") == [] and mem.history("nobody", "car") == []
    assert mem.get("ana", "never") is None  # consistent with get: nothing, not an error

    mem.add("ana", "I drive a green car.", id="car")  # the id comes back: its history goes on
    assert _kinds(mem, "ana", "car")[-2:] == [("deleted", None), ("added", "I drive a green car.")]


def test_expiry_hides_the_text_at_once_and_purge_erases_it(mem: PersonaMem) -> None:
    mem.add("ana", "My door code is 5521.", id="code", expires_at=datetime.now(UTC) + timedelta(days=1))
    mem.update("ana", "code", expires_at=datetime.now(UTC) - timedelta(seconds=1))
    assert _kinds(mem, "ana", "code") == [("added", None), ("updated", None)]  # hidden, as get hides it
    assert mem.purge() == 1
    assert _kinds(mem, "ana", "code") == [("added", None), ("updated", None), ("expired", None)]


def test_tenants_never_see_each_others_history(mem: PersonaMem) -> None:
    acme, beta = mem.tenant("acme"), mem.tenant("beta")
    acme.add("alice", "acme: I play the cello.", id="r1")
    beta.add("alice", "beta: I smoke brisket.", id="r1")
    acme.update("alice", "r1", text="acme: I play the viola.")
    assert _kinds(acme, "alice", "r1") == [
        ("added", "acme: I play the cello."),
        ("updated", "acme: I play the viola."),
    ]
    assert _kinds(beta, "alice", "r1") == [("added", "beta: I smoke brisket.")]
    assert mem.history("alice", "r1") == []  # the store's own users are another scope
    assert acme.forget("alice")
    assert _kinds(acme, "alice", "r1")[-1] == ("forgotten", None)
    assert _kinds(beta, "alice", "r1") == [("added", "beta: I smoke brisket.")]


def test_delete_and_forget_leave_only_content_free_events_on_disk(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add_many([f"note {i} about my week" for i in range(20)], user_id="ana")
        mem.add("ana", "ZQXFIRSTTEXT my old address", id="ZQXGONEID", metadata={"src": "ZQXMETA"})
        mem.update("ana", "ZQXGONEID", text="ZQXSECONDTEXT my new address")
        mem.add("ZQXUSER", "ZQXUSERTEXT my diagnosis", id="ZQXUSERID")
        mem.update("ZQXUSER", "ZQXUSERID", text="ZQXUSERNEW my diagnosis, revised")
        files = store_files(tmp_path)  # the scans below must be able to see what they look for
        for needle in (b"ZQXFIRSTTEXT", b"ZQXSECONDTEXT", b"ZQXUSERTEXT", b"ZQXUSERNEW"):
            assert files_containing(files, needle), needle

        assert mem.delete("ana", "ZQXGONEID") == ["ZQXGONEID"]
        after = store_files(tmp_path)
        for needle in (b"ZQXFIRSTTEXT", b"ZQXSECONDTEXT", b"ZQXGONEID", b"ZQXMETA"):
            assert files_containing(after, needle) == [], needle
        assert _kinds(mem, "ana", "ZQXGONEID") == [("added", None), ("updated", None), ("deleted", None)]

        assert mem.forget("ZQXUSER")
        after = store_files(tmp_path)
        for needle in (b"ZQXUSER", b"ZQXUSERTEXT", b"ZQXUSERNEW", b"ZQXUSERID"):
            assert files_containing(after, needle) == [], needle
        assert _kinds(mem, "ZQXUSER", "ZQXUSERID") == [
            ("added", None),
            ("updated", None),
            ("forgotten", None),
        ]
        kept = mem.records("ana")[0]
        assert _kinds(mem, "ana", kept.id) == [("added", kept.text)] and mem.store.check().ok


def test_cli_prints_a_records_life(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path)
    with PersonaMem.open(tmp_path) as mem:
        mem.add("ana", "My name is Ana.", id="name", kind="knowledge")
        mem.update("ana", "name", text="My name is Anna.")
        mem.supersede("ana", "name", "Call me Annie.", id="nick", kind="knowledge")
        mem.delete("ana", "name")
    capsys.readouterr()
    assert main(["--store", store, "history", "name", "--user", "ana"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[2:4] for line in lines] == [
        ["added", "sdk"],
        ["updated", "sdk"],
        ["superseded", "sdk"],
        ["deleted", "sdk"],
    ]
    assert "(erased)" in lines[0] and "Ana" not in "".join(lines)
    assert main(["--store", store, "history", "nick", "--user", "ana", "--json"]) == 0
    [event] = json.loads(capsys.readouterr().out)["events"]
    assert (event["event"], event["actor"], event["text"]) == ("added", "sdk", "Call me Annie.")


@pytest.mark.server
@pytest.mark.enable_socket
def test_the_server_names_the_key_and_tenant_that_wrote(tmp_path: Path) -> None:
    catalog = SqlCatalog(f"sqlite:///{tmp_path / 'personamem.sqlite'}")
    acme, acme_key = KeyRing(catalog).create("acme")
    beta, _ = KeyRing(catalog).create("beta")
    catalog.close()
    with personamem_server(tmp_path) as url, Client(url, acme) as a, Client(url, beta) as b:
        a.add("alice", "I live in Lisbon.", id="home")
        a.update("alice", "home", text="I live in Porto.")
        events = a.history("alice", "home")
        assert [(e.event, e.text) for e in events] == [
            ("added", "I live in Lisbon."),
            ("updated", "I live in Porto."),
        ]
        assert {e.actor for e in events} == {f"key:{acme_key.key_id}@acme"}
        assert b.history("alice", "home") == []  # another tenant's key sees nothing of it
        a.delete("alice", "home")
        assert [(e.event, e.text) for e in a.history("alice", "home")][-1] == ("deleted", None)
