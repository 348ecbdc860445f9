"""The CLI, driven through ``main(argv)`` as a user would type it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from personamem.cli import main
from tests.conftest import DATA


@pytest.fixture
def store(tmp_path: Path, encoder: object) -> list[str]:  # encoder: load the model once per session
    return ["--store", str(tmp_path / "store")]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_ingest_search_users_forget(
    tmp_path: Path, store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    notes = _jsonl(tmp_path / "notes.jsonl", [{"text": "I'm allergic to cats."}, {"text": "I love jazz."}])
    assert main([*store, "ingest", str(notes), "--user", "ana"]) == 0
    assert "stored 2 record(s) for 1 user(s)" in capsys.readouterr().out

    assert main([*store, "search", "--user", "ana", "pets at home", "-k", "1", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 1 and rows[0]["text"] == "I'm allergic to cats." and rows[0]["rank"] == 1

    assert main([*store, "search", "--user", "ana", "jazz", "--method", "bm25"]) == 0
    assert "jazz" in capsys.readouterr().out

    assert main([*store, "users"]) == 0
    assert "ana" in capsys.readouterr().out

    assert main([*store, "forget", "--user", "ana", "--yes"]) == 0
    assert "forgot ana" in capsys.readouterr().out
    assert main([*store, "users"]) == 0
    assert "ana" not in capsys.readouterr().out


def test_bad_file_exits_1_naming_the_line(
    tmp_path: Path, store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"text": \n', encoding="utf-8")
    assert main([*store, "ingest", str(bad), "--user", "ana"]) == 1
    assert "bad.jsonl:2" in capsys.readouterr().err


def test_usage_errors_exit_2(store: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*store, "search", "--user", "ana", "x", "--method", "magic"]) == 2
    assert main([*store, "ingest", "x.jsonl", "--format", "csv"]) == 2
    assert main([*store, "search", "x"]) == 2  # --user is required
    assert "--user" in capsys.readouterr().err


def test_forget_asks_before_erasing(store: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no answer: abort
    assert main([*store, "forget", "--user", "ana"]) == 1


def test_demo_shows_different_memories(capsys: pytest.CaptureFixture[str], encoder: object) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    # every user's top record answers the question for that user (labels in personamem.demo)
    assert "9 of 9 top records are ones labelled relevant to the question for that user." in out
    assert "vegan" in out.lower() or "lentils" in out


@pytest.mark.skipif(not (DATA / "trec_ikat").is_dir(), reason=f"TREC iKAT data not found under {DATA}")
def test_ingest_benchmark_format(store: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    topics = DATA / "trec_ikat" / "2023_train_topics.json"
    assert main([*store, "ingest", str(topics), "--format", "ikat", "--user-prefix", "ikat23-"]) == 0
    assert "stored 101 record(s) for 11 user(s)" in capsys.readouterr().out
    assert main([*store, "search", "--user", "ikat23-1-1", "where do I live", "-k", "1"]) == 0
    assert "Netherlands" in capsys.readouterr().out
