"""The data layer's table and data source, and the trainers' table, as every entry point reads them."""

from __future__ import annotations

import ast
import json
from collections import Counter
from pathlib import Path

import pytest
import typer
from typer.main import get_command

import personamem
from personamem.cli import main
from personamem.cli.app import app
from personamem.datasets import (
    DATASETS,
    BenchmarkName,
    BenchmarkOptions,
    ChoiceName,
    DataSource,
    RecordFormat,
    RecordOptions,
    UserSplit,
    held_out_questions,
    read_questions,
    read_records,
    write_split,
)
from personamem.errors import InsufficientDataError
from personamem.eval import EvalConfig
from personamem.trainers.table import TRAINERS
from tests.conftest import DATA, need_data


def test_every_choice_of_the_command_line_is_a_row() -> None:
    rows = {spec.name: spec for spec in DATASETS}
    assert [b.value for b in BenchmarkName] == [n for n, s in rows.items() if s.questions]
    assert [f.value for f in RecordFormat] == [n for n, s in rows.items() if s.records]
    assert [c.value for c in ChoiceName] == [
        "personabench",
        "prefeval-explicit",
        "prefeval-choice",
        "prefeval-persona",
        "amazon",
    ]
    for spec in DATASETS:  # a row's options are its readers' keywords, and their defaults build
        spec.options()
        if spec.name in BenchmarkOptions.model_fields or spec.name in RecordOptions.model_fields:
            assert spec.options.model_fields
    assert set(BenchmarkOptions.model_fields) == {"personabench", "ikat", "prefeval"}
    assert set(RecordOptions.model_fields) == {"jsonl", "personabench", "ikat"}


def test_options_given_flat_land_in_their_dataset() -> None:
    config = EvalConfig(benchmark=BenchmarkName("personabench"), data=Path("x"), noise=0.5, render="json")
    assert config.options.personabench.noise == 0.5 and config.options.personabench.render == "json"  # type: ignore[attr-defined]
    source = DataSource.model_validate({"benchmark": "prefeval", "data": "x", "inter_turns": 3})
    assert source.options.prefeval.inter_turns == 3  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="no data source"):
        DataSource()


def test_ingest_reads_through_the_table(tmp_path: Path) -> None:
    store = ["--store", str(tmp_path / "store")]
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"text": "I like tea."}\n', encoding="utf-8")
    assert [r.user_id for r in read_records("jsonl", notes, RecordOptions(jsonl={"user": "ana"}))] == ["ana"]
    assert main([*store, "ingest", str(notes), "--user", "ana"]) == 0
    assert main([*store, "ingest", str(notes), "--format", "locomo", "--user", "ana"]) == 2  # jsonl's option


def test_ikat_folder_reads_the_users_the_benchmark_asks_about() -> None:
    folder = need_data(DATA / "trec_ikat")
    records = read_records("ikat", folder)
    questions = read_questions("ikat", folder).questions
    assert {q.user_id for q in questions} <= {r.user_id for r in records}
    assert all(r.user_id.startswith("ikat2023-") for r in records)


def test_the_source_splits_whole_users_and_writes_what_eval_reads(tmp_path: Path) -> None:
    source = DataSource(benchmark=BenchmarkName("locomo"), data=Path("x"), test_users=1, split_seed=2)
    split = source.split({"a": 3, "b": 1, "c": 2, "d": 0}, what="X", need_train=1, hint="")
    assert sorted([*split.train, *split.validation, *split.test]) == ["a", "b", "c"]  # d has no example
    assert split == UserSplit.by_count(["a", "b", "c"], validation=1, test=1, seed=2)
    payload = source.split_json(split, {"benchmark": "locomo", "data": "x"}, k=5)
    assert list(payload)[:3] == ["source", "split_seed", "k"] and payload["benchmark"] == "locomo"
    write_split(tmp_path, payload)
    assert json.loads((tmp_path / "split.json").read_text())["test_users"] == split.test
    traffic = DataSource(from_store=tmp_path)
    with pytest.raises(InsufficientDataError, match="too little traffic to train X"):
        traffic.split(Counter({"a": 1}), what="X", need_train=1, hint="")
    assert traffic.split({"a": 2, "b": 2}, what="X", need_train=1, hint="").test == []


def test_held_out_questions_keep_the_test_users(tmp_path: Path) -> None:
    bench = read_questions("locomo", need_data(DATA / "locomo"))
    users = bench.users()
    write_split(tmp_path, UserSplit(users[2:], [], users[:2]).to_json())
    kept = held_out_questions(bench, tmp_path / "split.json")
    assert kept.questions and {q.user_id for q in kept.questions} <= set(users[:2])


def test_the_core_data_layer_imports_neither_the_harness_nor_the_trainers() -> None:
    root = Path(personamem.__file__).parent / "datasets"
    imported = {
        name
        for path in root.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        for name in (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else []
        )
    }
    assert not {
        n for n in imported if n.startswith(("personamem.eval", "personamem.trainers", "personamem.cli"))
    }


def test_trainers_use_the_harness_for_metrics_only() -> None:
    """Data comes from personamem.datasets; the answer log-likelihood, the judge and ranx's metrics score."""
    root = Path(personamem.__file__).parent.parent / "trainers"
    used = {
        node.module
        for path in root.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("personamem.eval")
    }
    assert used <= {"personamem.eval.answers", "personamem.eval.judge", "personamem.eval.metrics"}


def test_every_trainer_row_is_a_command_with_its_config_as_options() -> None:
    command = get_command(app)
    ctx = typer.Context(command)
    train = command.get_command(ctx, "train")  # type: ignore[attr-defined]
    assert sorted(train.list_commands(ctx)) == sorted(spec.name for spec in TRAINERS)
    for spec in TRAINERS:
        options = {o for p in train.get_command(ctx, spec.name).params for o in p.opts}
        assert {"--out", "--resume", "--config"} <= options
        assert spec.config.model_fields["out_dir"].description  # each trainer documents its --out
