"""``personamem train ranker``: runtime features over a real store, a folder the runtime loads, resume."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from personamem import SentenceEncoder
from personamem.cli import main
from personamem.datasets import BenchmarkName, UserSplit, read_questions
from personamem.errors import InsufficientDataError
from personamem.retrieval.query_adapter import SHIPPED_ADAPTERS
from personamem.retrieval.ranker import FEATURES, INFO_FILE, MODEL_FILE, TREES_FILE, RankerModel
from personamem.trainers.ranker import data as ranker_data
from personamem.trainers.ranker.config import RankerDataConfig, RankerTrainConfig
from personamem.trainers.ranker.trainer import ADMIT_GAIN, train_ranker
from tests.conftest import DATA, need_data


@pytest.mark.slow
def test_a_ranker_trained_on_ikat_loads_keeps_its_split_and_resumes(
    tmp_path: Path, encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_data(DATA / "trec_ikat")
    data = RankerDataConfig(
        benchmark=(BenchmarkName("ikat"),), data_root=DATA, features_dir=tmp_path / "features"
    )
    train = RankerTrainConfig(rounds=20)
    first = train_ranker(data, train, tmp_path / "ranker", encoder=encoder)
    assert first.cached == {"ikat": False}
    model = RankerModel.load(tmp_path / "ranker")
    info = json.loads((tmp_path / "ranker" / INFO_FILE).read_text(encoding="utf-8"))
    text = (tmp_path / "ranker" / MODEL_FILE).read_bytes()
    assert info["sha256"] == hashlib.sha256(text).hexdigest() == first.sha256
    assert tuple(info["features"]) == FEATURES and model.iterations == first.fit.iterations
    assert model.iterations % 10 == 0 and (model.session is None) == (model.iterations == 0)
    assert info["recipe"]["params"]["objective"] == "lambdarank"
    assert len(info["recipe"]["validation"]["curve"]["10"]) == 3  # 0, 10 and 20 trees
    # the adapter's cosine serves iKAT's shape exactly when it raised iKAT's validation nDCG@10 enough
    base, adapted = info["recipe"]["adapter_gate"]["per_benchmark"]["ikat"]
    admitted = [region.benchmark for region in model.adapter_gate.regions]  # type: ignore[union-attr]
    assert admitted == (["ikat"] if adapted - base >= ADMIT_GAIN else []) == first.adapting
    # the held-out users are the shipped adapter's (same split seed), named as eval --held-out reads them
    split = json.loads((tmp_path / "ranker" / "split-ikat.json").read_text(encoding="utf-8"))
    shipped = json.loads((SHIPPED_ADAPTERS / "mixed" / "split-ikat.json").read_text(encoding="utf-8"))
    assert split == shipped
    users = read_questions("ikat", DATA / "trec_ikat").users()
    expected = UserSplit.by_share(users, test_share=0.4, validation_share=0.15, seed=0)
    assert split["test_users"] == expected.test
    sources = info["sources"]["ikat"]
    assert sources["train_questions"] + sources["validation_questions"] + sources["test_questions"] == 80
    written = sorted(p.name for p in (tmp_path / "ranker").iterdir())
    assert written == sorted([INFO_FILE, MODEL_FILE, TREES_FILE, "split-ikat.json"])

    # a rerun reads the cached features: nothing is computed again, and the same model comes out
    def recompute(*args: object, **kwargs: object) -> None:
        raise AssertionError("features were computed again")

    monkeypatch.setattr(ranker_data, "store_features", recompute)
    again = train_ranker(data, train, tmp_path / "again", encoder=encoder)
    assert again.cached == {"ikat": True} and again.sha256 == first.sha256

    # too few training users' questions, or none to validate on: refused with the counts
    with pytest.raises(InsufficientDataError, match=r"too few training questions .*ikat: \d+\)"):
        few = data.model_copy(update={"test_share": 0.85, "validation_share": 0.1})
        train_ranker(few, train, tmp_path / "few", encoder=encoder)
    with pytest.raises(InsufficientDataError, match="no validation question"):
        none = data.model_copy(update={"test_share": 0.1, "validation_share": 0.01})
        train_ranker(none, train, tmp_path / "none", encoder=encoder)


def test_an_unknown_benchmark_or_no_data_root_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "ranker", "--benchmark", "msmarco", "--data-root", str(tmp_path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--benchmark" in err and "msmarco" in err
    with pytest.raises(ValueError, match="give --data-root"):
        RankerDataConfig().folder(BenchmarkName("locomo"))
