"""Importers against the real benchmark files (skipped when the data is absent) and malformed inputs."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from personamem.datasets.ikat import load_ikat
from personamem.datasets.locomo import load_locomo
from personamem.datasets.personabench import load_personabench
from personamem.errors import IngestError
from personamem.records import Record, RecordKind
from tests.conftest import DATA, need_data, records_by_user

PB = DATA / "personabench"
PB_SYNTH = PB / "eval_data_v1" / "synthetic_data"
LOCOMO = DATA / "locomo" / "locomo10_shared.json"
IKAT = DATA / "trec_ikat"


# --- PersonaBench ---------------------------------------------------------------------------------

PB_COUNTS = {
    0.0: {"Jennifer Moran": 110, "David Hess": 90, "Kelly Simon": 85, "Mr. Nicholas Richmond MD": 94},
    0.5: {"Jennifer Moran": 220, "David Hess": 180, "Kelly Simon": 170, "Mr. Nicholas Richmond MD": 188},
}


@pytest.mark.parametrize("noise", sorted(PB_COUNTS))
def test_personabench_sessions_per_user(noise: float) -> None:
    records = load_personabench(need_data(PB), noise=noise)
    index = records_by_user(records)
    assert {user: len(ids) for user, ids in index.items()} == PB_COUNTS[noise]
    assert len(records) == sum(PB_COUNTS[noise].values())


def test_each_personabench_record_is_a_conversation_of_its_own() -> None:
    """Upstream numbers sessions per partner; a record is one whole session, so none are neighbours."""
    records = load_personabench(need_data(PB))
    assert len({(r.user_id, r.session) for r in records}) == len(records)


def test_personabench_accepts_each_documented_folder() -> None:
    everything = load_personabench(need_data(PB))
    assert load_personabench(PB_SYNTH) == everything
    community = load_personabench(PB_SYNTH / "community_1")
    assert Counter(r.user_id for r in community) == {"Kelly Simon": 85, "Mr. Nicholas Richmond MD": 94}


def test_personabench_record_fields() -> None:
    index = records_by_user(load_personabench(need_data(PB)))
    conv = index["Kelly Simon"]["001000000000"]
    assert conv.kind is RecordKind.CONVERSATION
    assert conv.timestamp == datetime(2024, 10, 14, 16, 10)
    assert conv.metadata == {
        "session": "conversation---session---1 with Mr. Nicholas Richmond MD",
        "source": "conversation_data_all",
        "noise": 0.0,
        "community": "community_1",
        "target_name": "Mr. Nicholas Richmond MD",
    }
    assert conv.text.startswith(
        "Conversation with Mr. Nicholas Richmond MD on Monday 14 October 2024, 04:10 PM\n"
    )
    assert "\nKelly Simon: Hey Dr. Richmond, how has your day been?\n" in conv.text
    kinds = Counter(r.kind for r in index["Jennifer Moran"].values())
    assert kinds == {RecordKind.CONVERSATION: 84, RecordKind.DIALOG: 23, RecordKind.PURCHASE: 3}
    purchase = index["Jennifer Moran"]["000000000025"]
    assert purchase.metadata["source"] == "purchase_history_data_all"
    assert (
        "- FluentU Language Learning App Subscription (brand: FluentU; categories: Software," in purchase.text
    )
    assert index["David Hess"]["000001000007"].text.startswith("Chat with an AI assistant on ")


def test_personabench_json_render_is_upstream_chunk() -> None:
    text_records = load_personabench(need_data(PB))
    json_records = load_personabench(PB, render="json")
    assert [r.id for r in json_records] == [r.id for r in text_records]
    raw = json.loads(
        (PB_SYNTH / "community_0/private_data/noise_0.0/conversation_data_all.json").read_text("utf-8")
    )
    session = raw[0]["Data"][0]["Conversations"][0]
    assert json_records[0].id == session["segment_id"]
    # what upstream convert_json_to_plain_text(exclude=["segment_id", "session"]) produces
    del session["segment_id"], session["session"]
    assert json_records[0].text == json.dumps(session, separators=(",", ":"))


PB_GOLD_IDS = {"0.0": 473, "0.3": 473, "0.5": 473, "0.7": 508}  # gold segment ids listed, both communities


@pytest.mark.parametrize("noise", sorted(PB_GOLD_IDS))
def test_personabench_gold_segments_resolve(noise: str) -> None:
    index = records_by_user(load_personabench(need_data(PB), noise=float(noise)))
    checked = 0
    for community in sorted(PB_SYNTH.glob("community_*")):
        eval_info = json.loads((community / "eval_info" / "eval_info_all.json").read_text("utf-8"))
        owner = {qa["q_id"]: person["Name"] for person in eval_info for qa in person["Eval_Info"]["qa"]}
        gold = json.loads(
            (community / "eval_info" / f"qa_gt_context_all_noise_{noise}.json").read_text("utf-8")
        )
        for qa in gold:
            user = owner[qa["q_id"]]
            for ids in qa["segment_id"].values():
                missing = [sid for sid in ids if sid not in index[user]]
                assert not missing, f"q {qa['q_id']} of {user}: {missing} not in the corpus"
                checked += len(ids)
    assert checked == PB_GOLD_IDS[noise]


def test_personabench_missing_noise_level() -> None:
    with pytest.raises(IngestError, match=r"noise_0\.4.*available: 0\.0, 0\.3, 0\.5, 0\.7"):
        load_personabench(need_data(PB), noise=0.4)


def test_personabench_folder_without_communities(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="community_"):
        load_personabench(tmp_path)
    with pytest.raises(IngestError, match="not found"):
        load_personabench(tmp_path / "nowhere")
    (tmp_path / "community_0" / "private_data" / "noise_0.0").mkdir(parents=True)
    with pytest.raises(IngestError, match=r"private_data: no folder noise_0\.3 .*\(available: 0\.0\)"):
        load_personabench(tmp_path, noise=0.3)


def test_personabench_missing_file_and_field(tmp_path: Path) -> None:
    noise_dir = tmp_path / "community_0" / "private_data" / "noise_0.0"
    noise_dir.mkdir(parents=True)
    with pytest.raises(IngestError, match=r"conversation_data_all\.json: file not found"):
        load_personabench(tmp_path)
    session = {"session": "s1", "time": "2024/Oct/14/04:10 PM", "target_name": "B", "conversation": []}
    data = [{"Name": "A", "Data": [{"Target_name": "B", "Conversations": [session]}]}]
    (noise_dir / "conversation_data_all.json").write_text(json.dumps(data), "utf-8")
    with pytest.raises(IngestError, match=r"Conversations\[0\]: missing required field 'segment_id'"):
        load_personabench(tmp_path)
    session["segment_id"] = "001"
    session["time"] = "14 Oct 2024"
    (noise_dir / "conversation_data_all.json").write_text(json.dumps(data), "utf-8")
    with pytest.raises(IngestError, match=r"segment 001.*cannot parse time '14 Oct 2024'"):
        load_personabench(tmp_path)


def test_personabench_rejects_unknown_render() -> None:
    with pytest.raises(ValueError, match="render"):
        load_personabench(".", render="xml")  # type: ignore[arg-type]


# --- LoCoMo ---------------------------------------------------------------------------------------

LOCOMO_TURNS = {
    "conv-26": 419, "conv-30": 369, "conv-41": 663, "conv-42": 629,
    "conv-43": 680, "conv-44": 675, "conv-47": 689,
}  # fmt: skip
# Upstream evidence lists that cannot resolve as written: not of the form D<session>:<turn> ...
LOCOMO_MALFORMED = {("conv-26", "D8:6; D9:17"), ("conv-42", "D"), ("conv-43", "D:11:26")}
# ... and well-formed ids past the end of their session (conv-42 session 10 has 16 turns, conv-47
# session 4 has 25).
LOCOMO_DANGLING = {("conv-42", "D10:19"), ("conv-47", "D4:36")}


def test_locomo_turns_per_conversation() -> None:
    index = records_by_user(load_locomo(need_data(LOCOMO)))
    assert {user: len(ids) for user, ids in index.items()} == LOCOMO_TURNS
    assert load_locomo(LOCOMO.parent) == load_locomo(LOCOMO)


def test_locomo_text_has_date_speaker_and_caption() -> None:
    index = records_by_user(load_locomo(need_data(LOCOMO)))
    turn = index["conv-26"]["D1:3"]
    assert turn.text == (
        "[1:56 pm on 8 May, 2023] Caroline: I went to a LGBTQ support group yesterday and it was so powerful."
    )
    assert turn.timestamp == datetime(2023, 5, 8, 13, 56)
    assert turn.metadata == {"session": 1, "speaker": "Caroline", "date": "1:56 pm on 8 May, 2023"}
    assert turn.kind is RecordKind.CONVERSATION
    assert index["conv-26"]["D1:5"].text.endswith(
        "[shares an image: a photo of a dog walking past a wall with a painting of a woman]"
    )
    for turns in index.values():
        for record in turns.values():
            assert record.text.startswith(f"[{record.metadata['date']}] {record.metadata['speaker']}: ")


def test_locomo_evidence_resolves() -> None:
    index = records_by_user(load_locomo(need_data(LOCOMO)))
    malformed, dangling, resolved = set(), set(), 0
    for sample in json.loads(LOCOMO.read_text("utf-8")):
        user = sample["sample_id"]
        for qa in sample["qa"]:
            for evidence in qa["evidence"]:
                if not re.fullmatch(r"D\d+:\d+", evidence):
                    malformed.add((user, evidence))
                elif evidence in index[user]:
                    resolved += 1
                else:
                    dangling.add((user, evidence))
    assert malformed == LOCOMO_MALFORMED
    assert dangling == LOCOMO_DANGLING
    assert resolved == 1829


def test_locomo_folder_without_file(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"no locomo10\*\.json"):
        load_locomo(tmp_path)


def test_locomo_missing_session_date(tmp_path: Path) -> None:
    path = tmp_path / "locomo10.json"
    turn = {"speaker": "A", "dia_id": "D1:1", "text": "hi"}
    path.write_text(json.dumps([{"sample_id": "c", "conversation": {"session_1": [turn]}}]), "utf-8")
    with pytest.raises(IngestError, match="missing required field 'session_1_date_time'"):
        load_locomo(path)


# --- TREC iKAT ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "users", "statements"),
    [("2023_train_topics", 11, 101), ("2023_test_topics", 18, 180), ("2024_test_topics", 17, 288)],
)
def test_ikat_statements_and_provenance(name: str, users: int, statements: int) -> None:
    path = need_data(IKAT / f"{name}.json")
    records = load_ikat(path, user_prefix="ikat-")
    index = records_by_user(records)
    assert (len(index), len(records)) == (users, statements)
    assert all(r.kind is RecordKind.KNOWLEDGE for r in records)
    provenance = 0
    for topic in json.loads(path.read_text("utf-8")):
        user = f"ikat-{topic['number']}"
        assert set(index[user]) == set(topic["ptkb"])
        for turn in topic["turns"]:
            for key in turn["ptkb_provenance"]:
                assert index[user][str(key)].text == topic["ptkb"][str(key)]
                provenance += 1
    assert provenance > 0


def test_ikat_ids_and_metadata() -> None:
    index = records_by_user(load_ikat(need_data(IKAT / "2024_test_topics.json")))
    statement = index["0"]["1"]
    assert statement.text == "I practice yoga daily."
    assert statement.metadata == {"title": "Traveling to Egypt"}
    assert "9-1" in records_by_user(load_ikat(IKAT / "2023_test_topics.json"))


def test_ikat_missing_field(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    path.write_text(json.dumps([{"number": "1-1", "title": "t"}]), "utf-8")
    with pytest.raises(IngestError, match=r"topics\.json: topic '1-1': missing required field 'ptkb'"):
        load_ikat(path)
    path.write_text(json.dumps([{"number": True, "title": "t", "ptkb": {}}]), "utf-8")
    with pytest.raises(IngestError, match="'number' must be"):
        load_ikat(path)
    path.write_text(json.dumps([{"number": 3, "title": "t", "ptkb": {"1": " "}}]), "utf-8")
    with pytest.raises(IngestError, match=r"topic 3, field 'ptkb': field '1' is blank"):
        load_ikat(path)


# --- errors common to all three -------------------------------------------------------------------

LOADERS = [load_locomo, load_ikat]


@pytest.mark.parametrize("load", LOADERS)
def test_invalid_json_names_file_and_line(tmp_path: Path, load: Callable[[Path], list[Record]]) -> None:
    path = tmp_path / "locomo10_broken.json"
    path.write_text('[\n  {"a": 1,,\n  }\n]\n', "utf-8")
    with pytest.raises(IngestError) as info:
        load(path)
    assert info.value.line == 2
    assert info.value.path == str(path)
    assert "locomo10_broken.json:2: invalid JSON" in str(info.value)


@pytest.mark.parametrize("load", LOADERS)
def test_wrong_top_level_shape(tmp_path: Path, load: Callable[[Path], list[Record]]) -> None:
    path = tmp_path / "data.json"
    path.write_text('{"not": "a list"}', "utf-8")
    with pytest.raises(IngestError, match=r"data\.json: top level: expected an array, got an object"):
        load(path)


@pytest.mark.parametrize("load", LOADERS)
def test_missing_file(tmp_path: Path, load: Callable[[Path], list[Record]]) -> None:
    with pytest.raises(IngestError, match=r"absent\.json: file not found"):
        load(tmp_path / "absent.json")


@pytest.mark.parametrize("load", LOADERS)
def test_not_utf8(tmp_path: Path, load: Callable[[Path], list[Record]]) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes('[{"title": "caf\u00e9"}]'.encode("latin-1"))
    with pytest.raises(IngestError, match=r"latin1\.json: not valid UTF-8"):
        load(path)


def test_personabench_invalid_json(tmp_path: Path) -> None:
    noise_dir = tmp_path / "private_data" / "noise_0.0"
    noise_dir.mkdir(parents=True)
    (noise_dir / "conversation_data_all.json").write_text("[\n\n{oops}]", "utf-8")
    with pytest.raises(IngestError, match=r"conversation_data_all\.json:3: invalid JSON") as info:
        load_personabench(tmp_path)
    assert info.value.line == 3


def test_personabench_wrong_shape(tmp_path: Path) -> None:
    noise_dir = tmp_path / "private_data" / "noise_0.0"
    noise_dir.mkdir(parents=True)
    path = noise_dir / "conversation_data_all.json"
    path.write_text('{"Name": "A", "Data": []}', "utf-8")
    with pytest.raises(IngestError, match=r"conversation_data_all\.json: top level: expected an array"):
        load_personabench(tmp_path)
    path.write_text('[{"Name": "A", "Data": {}}]', "utf-8")
    with pytest.raises(IngestError, match=r"entry 0 \('A'\), field 'Data': expected an array, got an object"):
        load_personabench(tmp_path)
