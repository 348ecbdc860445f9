"""The command table and what a command imports (speed itself is measured in bench/cli_search.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import typer

from personamem.cli.app import COMMANDS, app

_HEAVY = ("chromadb", "sqlalchemy", "torch", "transformers", "sentence_transformers", "bm25s", "scipy")


def _loaded(*calls: list[str]) -> list[str]:
    """The modules loaded in a fresh interpreter after ``main(argv)`` for each argv in turn."""
    code = (
        "import json, sys; from personamem.cli import main\n"
        f"for argv in {json.dumps(calls)}:\n"
        "    assert main(argv) == 0, argv\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_every_row_lists_its_commands_own_summary() -> None:
    root = typer.main.get_command(app)
    ctx = typer.Context(root)
    assert root.list_commands(ctx) == [row.name for row in COMMANDS]  # type: ignore[attr-defined]
    for row in COMMANDS:
        command = root.get_command(ctx, row.name)  # type: ignore[attr-defined]
        first_paragraph = " ".join((command.help or "").split("\n\n")[0].split())
        assert first_paragraph == row.summary, row.name


def test_root_help_imports_no_command_and_no_backend() -> None:
    loaded = _loaded(["--help"])
    assert [m for m in loaded if m.startswith("personamem.cli.")] == [
        "personamem.cli.app",
        "personamem.cli.store",
    ]
    assert [m for m in loaded if m.split(".")[0] in _HEAVY or m == "personamem.memory"] == []


def test_a_dense_search_imports_no_torch_and_no_bm25(tmp_path: Path) -> None:
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"user_id": "ana", "text": "I bought a used road bike."}\n', encoding="utf-8")
    store = ["--store", str(tmp_path / "store")]
    _loaded([*store, "ingest", str(notes)])
    loaded = _loaded([*store, "search", "which bike?", "--user", "ana", "--method", "dense"])
    assert [
        m for m in loaded if m.split(".")[0] in ("torch", "transformers", "sentence_transformers", "bm25s")
    ] == []
    default = _loaded([*store, "search", "which bike?", "--user", "ana"])  # hybrid and the learned ranker
    assert [m for m in default if m.split(".")[0] in ("torch", "transformers", "sentence_transformers")] == []
    assert "personamem.cli.train" not in loaded and "personamem.cli.evals" not in loaded


def test_only_the_one_shot_reads_load_the_encoder_aside_and_run_without_the_cycle_collector() -> None:
    code = (
        "import gc, json, threading\n"
        "from personamem.cli.app import COMMANDS\n"
        "rows = {row.name: row for row in COMMANDS}\n"
        "gc.disable(); rows['users'].load(); after_users = gc.isenabled()\n"
        "gc.disable(); rows['search'].load(); after_search = gc.isenabled()\n"
        "loading = [t for t in threading.enumerate() if t.name == 'personamem-encoder-load']\n"
        "[t.join() for t in loading]\n"
        "import personamem.encoder as e\n"
        "print(json.dumps([after_users, after_search, len(loading), e._default is not None]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == [True, False, 1, True]
    assert sorted(row.name for row in COMMANDS if row.one_shot_read) == ["context", "search"]
