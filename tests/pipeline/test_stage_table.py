"""The stage table is what configs, methods, help and builders read: one row adds a stage everywhere."""

from __future__ import annotations

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
from personamem.store import Store

_FIELD = {
    "personalizer": "personalizer",
    "first_stage": "first_stage",
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


@pytest.mark.parametrize("kind", sorted({row.kind for row in STAGES} - {"first_stage"}))
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
            if row.prefix is not None or row.kind in ("first_stage", "query_encoder"):
                continue  # checkpoints have their own tests; first stages and towers are the pipeline's
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

    def personalize(self, user_id: str, query: str) -> np.ndarray:
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
