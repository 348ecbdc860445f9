"""The interaction log: on by default, per user, erased by forget, scrubbed by delete, kept 30 days, JSONL."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from personamem import PersonaMem, PipelineConfig, SentenceEncoder
from personamem.cli import main
from personamem.errors import IngestError, InvalidInputError
from personamem.interactions import read_interactions, write_interactions
from tests.bytescan import files_containing, store_files

LOGGED = PipelineConfig(log_interactions=True)


@pytest.fixture
def logged(tmp_path: Path, encoder: SentenceEncoder) -> Iterator[PersonaMem]:
    with PersonaMem.open(tmp_path / "store", encoder=encoder, pipeline=LOGGED) as memory:
        memory.add("ana", "I'm vegan and cook lentils most nights.", id="vegan")
        memory.add("ana", "I cycle to work every day.", id="cycle")
        memory.add("ana", "Spicy curries are my favourite.", id="curry")
        memory.add("bo", "I love steak houses.", id="steak")
        yield memory


def test_logging_is_on_by_default_and_off_by_config(ana_memory: PersonaMem) -> None:
    logged = ana_memory.context("ana", "what should I cook?").interaction_id
    assert logged is not None and ana_memory.search("ana", "cook", method="hybrid").interaction_id
    assert ana_memory.inspection.interactions()[0].id == logged  # written by the time it is read

    quiet = PipelineConfig(log_interactions=False)
    assert ana_memory.context("ana", "what should I cook?", method=quiet).interaction_id is None
    assert ana_memory.search("ana", "cook", method=quiet).interaction_id is None
    assert len(ana_memory.inspection.interactions()) == 2


def test_calls_past_the_retention_window_are_erased_by_the_sweep(
    logged: PersonaMem, monkeypatch: pytest.MonkeyPatch
) -> None:
    logged.context("ana", "what should I cook?")
    logged.purge(all_tenants=True)
    assert len(logged.inspection.interactions("ana")) == 1  # 30 days by default
    monkeypatch.setenv("PERSONAMEM_INTERACTION_DAYS", str(0.5 / 86400))  # half a second
    time.sleep(0.6)
    recent = logged.context("ana", "and for lunch?").interaction_id
    logged.purge(all_tenants=True)
    assert [i.id for i in logged.inspection.interactions("ana")] == [recent]


def test_a_call_logged_as_its_user_is_forgotten_is_not_kept(logged: PersonaMem, tmp_path: Path) -> None:
    for _ in range(20):  # queued rows either land before the forget (and are erased) or find no user
        logged.search("ana", "ZQXRACEMARK cooking", method="bm25")
    assert logged.forget("ana")
    logged.search("ana", "ZQXRACEMARK again", method="bm25")  # no records: nothing to key it by
    assert logged.inspection.interactions("ana") == [] and logged.store.catalog.interactions() == []
    logged.close()
    assert files_containing(store_files(tmp_path / "store"), b"ZQXRACEMARK") == []


def test_calls_are_logged_per_user_with_their_feedback(logged: PersonaMem) -> None:
    context = logged.context("ana", "what should I cook tonight?")
    hits = logged.search("bo", "dinner out", k=1, method="bm25")
    assert context.interaction_id and hits.interaction_id
    assert logged.search("nobody", "anything").interaction_id is None  # no user row to erase it by

    logged.feedback(context.interaction_id, answer="A lentil curry.", used_record_ids=["vegan", "curry"])
    logged.feedback(context.interaction_id, rating=4)  # a later report keeps the earlier fields
    (ana,) = logged.inspection.interactions("ana")
    assert (ana.call, ana.method, ana.query) == ("context", "pipeline", "what should I cook tonight?")
    assert [r.record_id for r in ana.results] == [h.record.id for h in context.hits]
    assert ana.feedback is not None and ana.feedback.rating == 4.0
    assert (ana.accepted_answer, ana.used) == ("A lentil curry.", ["vegan", "curry"])
    (bo,) = logged.inspection.interactions("bo")
    assert (bo.call, bo.method, bo.feedback) == ("search", "bm25", None)


def test_feedback_refuses_what_it_cannot_attach(logged: PersonaMem) -> None:
    interaction = logged.context("ana", "what should I cook?").interaction_id
    assert interaction is not None
    with pytest.raises(InvalidInputError, match="no interaction 'nope'"):
        logged.feedback("nope", rating=1)
    with pytest.raises(InvalidInputError, match="at least one of"):
        logged.feedback(interaction)
    with pytest.raises(InvalidInputError, match="rating must be a number"):
        logged.feedback(interaction, rating="good")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="used_record_ids must be a list"):
        logged.feedback(interaction, used_record_ids="vegan")
    with pytest.raises(InvalidInputError, match="no interaction"):  # another tenant cannot reach it
        logged.tenant("acme").feedback(interaction, rating=1)
    assert logged.inspection.interactions("ana")[0].feedback is None


def test_delete_takes_records_out_of_the_log_and_forget_erases_it(logged: PersonaMem, tmp_path: Path) -> None:
    interaction = logged.context("ana", "ZQXQUERYMARK what should I cook?").interaction_id
    assert interaction is not None
    logged.feedback(interaction, answer="ZQXANSWERMARK lentils", used_record_ids=["vegan", "cycle"])
    logged.context("bo", "where do I eat tonight?")

    assert logged.delete("ana", ["vegan"]) == ["vegan"]
    (ana,) = logged.inspection.interactions("ana")
    assert "vegan" not in [r.record_id for r in ana.results] and ana.used == ["cycle"]

    assert logged.forget("ana")
    assert logged.inspection.interactions("ana") == [] and len(logged.inspection.interactions("bo")) == 1
    with pytest.raises(InvalidInputError, match="no interaction"):
        logged.feedback(interaction, rating=1)
    files = store_files(tmp_path / "store")
    assert files_containing(files, b"ZQXQUERYMARK") == [] and files_containing(files, b"ZQXANSWERMARK") == []


def test_jsonl_round_trip_into_another_store(
    logged: PersonaMem, tmp_path: Path, encoder: SentenceEncoder
) -> None:
    first = logged.context("ana", "what should I cook?").interaction_id
    assert first is not None
    logged.feedback(first, answer="Lentils.", rating=1, used_record_ids=["vegan"])
    logged.search("bo", "steak", method="dense")
    exported = logged.inspection.interactions()
    path = tmp_path / "log.jsonl"
    assert write_interactions(path, exported) == 2
    assert read_interactions(path) == exported

    with PersonaMem.open(tmp_path / "other", encoder=encoder) as other:
        with pytest.raises(InvalidInputError, match="has no records in this store"):
            other.store.interactions.import_(exported)
        other.add_many([r for user in ("ana", "bo") for r in logged.records(user)])
        assert other.store.interactions.import_(exported) == 2
        assert other.store.interactions.import_(exported) == 0  # ids already there are skipped
        assert other.inspection.interactions() == exported


def test_a_bad_line_names_itself_and_imports_nothing(logged: PersonaMem, tmp_path: Path) -> None:
    logged.context("ana", "what should I cook?")
    path = tmp_path / "log.jsonl"
    write_interactions(path, logged.inspection.interactions())
    good = path.read_text(encoding="utf-8")
    broken = json.loads(good)
    broken["id"] = "second"
    broken["results"][0]["score"] = "high"
    path.write_text(good + "\n" + json.dumps(broken) + "\n", encoding="utf-8")
    with pytest.raises(IngestError, match=r"log.jsonl:3: results.0.score: Input should be a valid number"):
        read_interactions(path)
    path.write_text(good + good, encoding="utf-8")
    with pytest.raises(IngestError, match=r"log.jsonl:2: interaction id .* repeats line 1"):
        read_interactions(path)


def test_cli_exports_and_imports_the_log(
    logged: PersonaMem, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    interaction = logged.context("ana", "what should I cook?").interaction_id
    assert interaction is not None
    logged.feedback(interaction, answer="Lentils.")
    logged.close()
    store, path = str(tmp_path / "store"), tmp_path / "log.jsonl"
    assert main(["--store", store, "feedback", interaction, "--rating", "2", "--used", "vegan"]) == 0
    assert main(["--store", store, "log", "export", "--out", str(path)]) == 0
    assert "wrote 1 interaction(s)" in capsys.readouterr().out
    (exported,) = read_interactions(path)
    assert exported.feedback is not None and (exported.accepted_answer, exported.feedback.rating) == (
        "Lentils.",
        2,
    )
    assert exported.used == ["vegan"]
    assert main(["--store", store, "log", "import", str(path)]) == 0
    assert "imported 0 new interaction(s) of 1" in capsys.readouterr().out
    path.write_text("{not json\n", encoding="utf-8")
    assert main(["--store", store, "log", "import", str(path)]) != 0
    assert "log.jsonl:1: invalid JSON" in capsys.readouterr().err


def test_adapters_hand_out_the_interaction_id(logged: PersonaMem) -> None:
    from personamem.adapters.langchain import PersonaMemRetriever as LangChainRetriever
    from personamem.adapters.llamaindex import PersonaMemRetriever as LlamaIndexRetriever

    docs = LangChainRetriever(memory=logged, user_id="ana", k=2).invoke("what should I cook?")
    nodes = LlamaIndexRetriever(logged, "ana", k=2).retrieve("what should I cook?")
    first, second = docs[0].metadata["interaction_id"], nodes[0].node.metadata["interaction_id"]
    assert {d.metadata["interaction_id"] for d in docs} == {first} and first != second
    assert "interaction_id" in nodes[0].node.excluded_llm_metadata_keys  # not shown to the LLM
    logged.feedback(first, used_record_ids=[docs[0].metadata["record_id"]])
    logged.feedback(second, answer="Lentils.")
    assert [i.method for i in logged.inspection.interactions("ana")] == [
        "pipeline",
        "pipeline",
    ]  # no method named
    assert [bool(i.feedback) for i in logged.inspection.interactions("ana")] == [True, True]
