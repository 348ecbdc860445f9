"""The stage table is what configs, methods, help and builders read: one row adds a stage everywhere."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.errors import ConfigError, MethodError
from personamem.llm import TransformersLLM
from personamem.methods import METHODS
from personamem.pipeline import stage_table
from personamem.pipeline.config import PipelineConfig, pipeline_config
from personamem.pipeline.stage_table import STAGES, Stage, choices, find_stage
from personamem.pipeline.stages import build_extractor, build_personalizer, build_selector
from personamem.retrieval.base import ranked
from personamem.retrieval.first_stage import Candidates, FirstStage, RankedStage
from personamem.store import Store
from personamem.store.read import NOW, Read

_FIELD = {
    "personalizer": "personalizer",
    "first_stage": "first_stage",
    "ranker": "ranker",
    "query_encoder": "query_encoder",
    "selector": "selector",
    "memory": "preference_memory",
}


def _named(row: Stage) -> str:
    return row.name if row.prefix is None else f"{row.prefix}some-folder"


def _config(row: Stage) -> PipelineConfig:
    values = {_FIELD[row.kind]: _named(row)}
    if row.kind == "personalizer" or row.kind == "query_encoder":
        values["first_stage"] = "dense"
    return pipeline_config(values)


@pytest.mark.parametrize("row", STAGES, ids=lambda r: f"{r.kind}:{r.name}")
def test_every_row_validates_and_its_flags_are_what_the_config_reports(row: Stage) -> None:
    config = _config(row)
    assert find_stage(row.kind, _named(row)) is row
    if row.needs_llm:
        assert config.needs_llm
    if row.stochastic:
        assert config.stochastic
    if not (row.needs_llm or row.stochastic) and row.name != "auto":
        assert not config.needs_llm and not config.stochastic


@pytest.mark.parametrize("kind", sorted({row.kind for row in STAGES} - {"ranker"}))
def test_an_unknown_name_is_refused_with_the_tables_choices(kind: stage_table.StageKind) -> None:
    with pytest.raises(ConfigError, match=f"unknown {_FIELD[kind]} 'nope'; choose from: {choices(kind)}"):
        pipeline_config({_FIELD[kind]: "nope"})
    prefixed = next((row.prefix for row in STAGES if row.kind == kind and row.prefix), None)
    if prefixed:  # a prefix alone names no folder
        with pytest.raises(ConfigError, match="unknown"):
            pipeline_config({_FIELD[kind]: prefixed})


def test_the_help_and_the_methods_read_the_table() -> None:
    for row in STAGES:
        assert row.name in PipelineConfig.model_fields[_FIELD[row.kind]].description
    summaries = {spec.name: spec.summary for spec in METHODS}
    for row in STAGES:
        if row.kind == "first_stage" or (row.kind == "personalizer" and row.name != "none"):
            assert summaries[row.name] == row.summary


def test_each_row_builds_its_component_and_an_llm_row_needs_an_llm(
    tmp_path: Path, encoder: SentenceEncoder, llm: TransformersLLM
) -> None:
    store = Store.open(tmp_path / "store", encoder=encoder)
    try:
        for row in STAGES:
            if row.prefix is not None or row.kind in ("first_stage", "ranker", "query_encoder"):
                continue  # checkpoints: their own tests; first stages: below; towers: the pipeline's
            if row.kind == "personalizer":
                build = lambda given, name=row.name: build_personalizer(name, store, given, 0)  # noqa: E731
            elif row.kind == "selector":
                build = lambda given, name=row.name: build_selector(name, store, given, 0)  # noqa: E731
            else:
                build = lambda given, name=row.name: build_extractor(  # noqa: E731
                    PipelineConfig(preference_memory=name), given
                )
            if row.needs_llm:
                with pytest.raises(MethodError, match=f"{row.name!r} needs a frozen LLM"):
                    build(None)
            built = build(llm)
            assert (built is None) == (row.name == "none"), row.name
    finally:
        store.close()


class _Echo:
    """A personalizer of the test's own: the query's vector, unchanged."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def personalize(self, user_id: str, query: str, read: Read = NOW) -> np.ndarray:
        return self.store.encoder.encode([query])[0]


def test_a_new_personalizer_is_one_row(
    tmp_path: Path, encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validation, the LLM check and the builder find a row added to the table, and nothing else."""
    row = Stage("personalizer", "echo", "the query's own vector", build=lambda i, _: _Echo(i.the_store))
    monkeypatch.setattr(stage_table, "STAGES", (*STAGES, row))
    config = pipeline_config({"personalizer": "echo", "first_stage": "dense"})
    assert not config.needs_llm and not config.stochastic
    with PersonaMem.open(tmp_path / "store", encoder=encoder, pipeline=config) as mem:
        mem.add_many([{"text": "I keep bees on the roof."}, {"text": "I race sailboats."}], user_id="u")
        assert isinstance(mem.pipeline().personalizer, _Echo)
        assert mem.search("u", "honey", k=1)[0].record.text == "I keep bees on the roof."


def test_a_ranker_names_a_folder_and_reorders_only_the_stage_its_row_is_over() -> None:
    assert find_stage("ranker", "runs/my-ranker") is find_stage("ranker", "mixed") is not None
    with pytest.raises(ConfigError, match="unknown ranker ''"):
        pipeline_config({"ranker": ""})
    with pytest.raises(ConfigError, match="reorders hybrid's candidates: use the hybrid first stage"):
        pipeline_config({"ranker": "mixed", "first_stage": "dense"})
    assert pipeline_config({"ranker": "none", "first_stage": "dense"}).ranker_row.over is None


def test_each_first_stage_row_builds_a_first_stage_and_the_ranker_one_over_hybrid(mem: PersonaMem) -> None:
    mem.add_many(["I keep bees on the roof.", "My bike is a red fixie."], user_id="u")
    for row in STAGES:
        if row.kind != "first_stage":
            continue
        for ranker in ("none", "auto"):
            pipeline = mem.pipeline(PipelineConfig(first_stage=row.name, ranker=ranker))
            assert isinstance(pipeline.first, FirstStage)
            assert isinstance(pipeline.first, RankedStage) == (row.name == "hybrid" and ranker == "auto")
            hits, vector = pipeline.first.candidates("u", "my red bike", 1)
            assert [h.record.text for h in hits] == ["My bike is a red fixie."], (row.name, ranker)
            assert (vector is None) == (not row.takes_vector or isinstance(pipeline.first, RankedStage))


@dataclass(frozen=True)
class _Newest:
    """A first stage of the test's own: the user's newest records, whatever the query."""

    store: Store

    def candidates(
        self, user_id: str, query: str, n: int, vector: np.ndarray | None = None, read: Read = NOW
    ) -> Candidates:
        hidden = self.store.hidden(user_id, read)
        newest = [r for r in self.store.records(user_id)[::-1] if r.id not in hidden]
        return Candidates(ranked([(r, 0.0) for r in newest[:n]]), None)


def test_a_new_first_stage_is_one_row(
    tmp_path: Path, encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validation, the help text and the pipeline find a first stage added to the table, and nothing else."""
    row = Stage("first_stage", "newest", "the newest records", build=lambda i, _: _Newest(i.the_store))
    monkeypatch.setattr(stage_table, "STAGES", (*STAGES, row))
    with pytest.raises(ConfigError, match="a query tower gives a vector"):
        pipeline_config({"first_stage": "newest", "query_encoder": "adapter:mixed"})
    newest = pipeline_config({"first_stage": "newest"})
    with PersonaMem.open(tmp_path / "store", encoder=encoder, pipeline=newest) as mem:
        bees = {"text": "I keep bees on the roof.", "metadata": {"topic": "bees"}}
        mem.add_many([bees, "I race sailboats.", "I sold my boat."], user_id="u")
        found = [h.record.text for h in mem.search("u", "bees", k=2)]
        assert found == ["I sold my boat.", "I race sailboats."]
        kept = mem.search("u", "bees", k=2, filters={"metadata.topic": "bees"})
        assert [h.record.text for h in kept] == ["I keep bees on the roof."]  # the read reaches the row
