"""``personamem memory``, driven through ``main(argv)``, with the real SmolLM2.

The transformers runtime: with these two histories in one batch, the int8 model's answer for one of
them has no bulleted line (an empty memory), which would leave nothing to show.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from personamem.cli import main

MEMORY = [
    *("--preference-memory", "atomic", "--memory-words", "20"),
    *("--llm", "smollm2-135m", "--llm-runtime", "transformers"),
]


@pytest.fixture
def store(tmp_path: Path, encoder: object) -> list[str]:  # encoder: load the model once per session
    rows = [
        {"user_id": "ana", "id": "a1", "text": "I'm vegan and avoid dairy.", "category": "food"},
        {"user_id": "ana", "id": "a2", "text": "Spicy curries are my favourite.", "category": "food"},
        {"user_id": "bo", "id": "b1", "text": "I love steak houses.", "category": "food"},
    ]
    history = tmp_path / "history.jsonl"
    history.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    options = ["--store", str(tmp_path / "store")]
    assert main([*options, "ingest", str(history)]) == 0
    return options


def test_refresh_resumes_and_memory_shows_the_audit_form(
    store: list[str], capsys: pytest.CaptureFixture[str], one_torch_thread: None
) -> None:
    capsys.readouterr()
    assert main([*store, "memory", "refresh", "--all", *MEMORY]) == 0
    assert "built 2 memory(s); skipped 0" in capsys.readouterr().out
    assert main([*store, "memory", "refresh", "--user", "ana", "--user", "bo", *MEMORY]) == 0
    assert "built 0 memory(s); skipped 2 already current" in capsys.readouterr().out

    assert main([*store, "memory", "--user", "ana", "--json", *MEMORY]) == 0
    memory = json.loads(capsys.readouterr().out)
    assert memory["user_id"] == "ana" and memory["revision"] and not memory["stale"]
    assert memory["extractor"].startswith("atomic:") and set(memory["text"].splitlines()) >= {"WITHIN food:"}
    assert {e for s in memory["within"]["food"] for e in s["evidence"]} <= {"a1", "a2"}

    assert main([*store, "memory", "--user", "ana", *MEMORY]) == 0
    shown = capsys.readouterr().out
    assert f"revision {memory['revision']}, current" in shown and "WITHIN food:" in shown

    assert main([*store, "context", "dinner ideas", "--user", "ana", *MEMORY]) == 0
    assert capsys.readouterr().out.startswith(f"Preferences:\n{memory['text']}\n\nRecords:\n- ")


def test_memory_usage_errors_exit_2(store: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main([*store, "memory", "--user", "ana"]) == 2  # no memory configured
    assert "no preference memory configured" in capsys.readouterr().err
    assert main([*store, "memory", "--user", "ana", "--preference-memory", "magic"]) == 2
    assert "choose from: none, prompted, atomic" in capsys.readouterr().err
    assert main([*store, "memory", "refresh", *MEMORY]) == 2  # neither --user nor --all
    assert main([*store, "memory", "refresh", "--all", "--user", "ana", *MEMORY]) == 2
    assert main([*store, "memory", "--user", "ana", "refresh", "--all"]) == 2  # options after the command
    assert "options go after the command" in capsys.readouterr().err
