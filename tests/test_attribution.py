"""Answer attribution: which served records an answer drew on, with the shipped model and the real encoder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from personamem import Record, SentenceEncoder
from personamem.attribution import SHIPPED_ATTRIBUTION, SIGNALS, Attribution, answer_signals, sentences
from personamem.cli import main
from personamem.errors import CheckpointError
from tests.conftest import DATA, need_data

SERVED = [
    Record(user_id="u", id="gym", text="Friend asked me how long I have been going to the gym."),
    Record(user_id="u", id="fact", text="I started climbing at the Boulderhaus gym in March 2019."),
    Record(user_id="u", id="food", text="Lunch today was a lentil soup with bread."),
]


def _served(encoder: SentenceEncoder) -> np.ndarray:
    return encoder.encode([r.text for r in SERVED])


def test_an_answer_is_attributed_to_the_record_it_quotes_and_to_nothing_else(
    encoder: SentenceEncoder,
) -> None:
    model = Attribution.load()
    query = "Since when do I go climbing?"
    answer = "You started climbing at Boulderhaus in March 2019."
    assert model.used(query, answer, SERVED, _served(encoder), encoder) == ["fact"]
    assert model.used(query, "I don't know.", SERVED, _served(encoder), encoder) == []
    assert model.used(query, "  ", SERVED, _served(encoder), encoder) == []
    signals = answer_signals(query, answer, SERVED, _served(encoder), encoder)
    assert signals.shape == (3, len(SIGNALS))
    row = dict(zip(SIGNALS, signals[1], strict=True))
    assert row["numbers"] == 1 and row["dates"] >= 1 and row["cosine_gap"] == 0  # the best sentence match
    assert sentences("One. Two!\nThree") == ["One.", "Two!", "Three"] and sentences("") == [""]


def test_a_model_for_other_signals_or_unreadable_refuses_to_load(tmp_path: Path) -> None:
    data = json.loads(SHIPPED_ATTRIBUTION.read_text(encoding="utf-8"))
    assert data["quality"]["test"]["precision"] >= 0.8 and data["quality"]["test"]["recall"] >= 0.5
    (tmp_path / "other.json").write_text(json.dumps({**data, "signals": ["cosine"]}))
    with pytest.raises(CheckpointError, match="other signals"):
        Attribution.load(tmp_path / "other.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(CheckpointError, match="unreadable"):
        Attribution.load(tmp_path / "broken.json")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::personamem.errors.TruncationWarning")  # most sessions exceed 256 tokens
def test_train_attribution_fits_on_reference_answers_and_reports_held_out_users(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    need_data(DATA / "personabench")
    out = tmp_path / "attribution"
    args = [
        "train",
        "attribution",
        "--benchmark",
        "personabench",
        "--data-root",
        str(DATA),
        "--out",
        str(out),
    ]
    assert main(args) == 0
    fitted = Attribution.load(out / "attribution.json")
    assert len(fitted.weights) == len(SIGNALS) and 0 < fitted.threshold <= 1
    quality = json.loads((out / "attribution.json").read_text())["quality"]
    assert {"train", "test", "out of fold", "test, personabench"} <= set(quality)
    assert quality["test"]["pairs"] > 0 and quality["test"]["gold"] > 0
    assert "test: precision" in " ".join(capsys.readouterr().out.split())
