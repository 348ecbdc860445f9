"""The store's live pipeline: kept with the data, per tenant, read by every process, rolled back whole."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.errors import PipelineFallbackWarning
from personamem.pipeline import PipelineConfig
from personamem.store import settings

TEXTS = ["I keep bees on my roof.", "I cycle to work.", "My sister lives in Porto."]


@pytest.fixture
def folder(tmp_path: Path, encoder: SentenceEncoder) -> Path:
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as mem:
        mem.add_many(TEXTS, user_id="ana")
    return tmp_path / "store"


def test_another_memory_over_the_store_serves_a_change_within_fresh_s(
    folder: Path, encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settings, "FRESH_S", 0.2)
    with (
        PersonaMem.open(folder, encoder=encoder) as writer,
        PersonaMem.open(folder, encoder=encoder) as reader,
    ):
        assert reader.config == PipelineConfig()
        writer.store.set_live_pipeline({"first_stage": "bm25", "budget_tokens": 64})
        reader.search("ana", "bees")  # read before the change: still fresh
        time.sleep(0.3)
        assert reader.config.first_stage == "bm25" and reader.config.budget_tokens == 64
        assert reader.context("ana", "bees").budget_tokens == 64


def test_a_tenant_follows_the_store_until_it_has_its_own(folder: Path, encoder: SentenceEncoder) -> None:
    with PersonaMem.open(folder, encoder=encoder) as mem:
        acme, zeta = mem.tenant("acme"), mem.tenant("zeta")
        mem.store.set_live_pipeline({"first_stage": "bm25"})
        assert acme.config.first_stage == zeta.config.first_stage == "bm25"
        acme.store.set_live_pipeline({"first_stage": "dense"})
        assert acme.config.first_stage == "dense" and zeta.config.first_stage == "bm25"
        assert mem.config.first_stage == "bm25"  # a tenant's change stays its own
        assert acme.store.rollback_live_pipeline()  # back to following the store's
        assert acme.config.first_stage == "bm25" and not acme.store.rollback_live_pipeline()
        assert mem.store.rollback_live_pipeline() and mem.config == PipelineConfig()


def test_a_broken_live_table_warns_and_serves_the_default(folder: Path, encoder: SentenceEncoder) -> None:
    with PersonaMem.open(folder, encoder=encoder) as mem:
        mem.store.set_live_pipeline({"first_stage": "telepathy"})
        with pytest.warns(PipelineFallbackWarning, match="first_stage"):
            assert mem.config == PipelineConfig()
        assert [h.record.text for h in mem.search("ana", "bees", k=1)] == ["I keep bees on my roof."]


def test_the_live_pipeline_survives_a_restart_and_a_new_process_reads_it(folder: Path) -> None:
    with PersonaMem.open(folder) as mem:
        mem.store.set_live_pipeline({"first_stage": "bm25", "chosen_by": "a test"})
    code = (
        "import sys; from personamem import PersonaMem; "
        "print(PersonaMem.open(sys.argv[1]).context('ana', 'bees').first_stage['chosen_by'])"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code, str(folder)], capture_output=True, text=True, check=True
    )
    assert shown.stdout.strip() == "a test"


def test_long_commands_print_progress_lines_without_a_terminal(tmp_path: Path) -> None:
    data = tmp_path / "records.jsonl"
    data.write_text("".join(f'{{"user_id": "u{i % 3}", "text": "record {i}"}}\n' for i in range(40)))
    done = subprocess.run(
        [sys.executable, "-m", "personamem", "--store", str(tmp_path / "store"), "ingest", str(data)],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [line for line in done.stderr.splitlines() if "40/40" in line]
    assert lines and "\x1b[" not in done.stderr  # a plain line, no live bar's escape codes
