"""Query adapters: the shipped default, its checks, the trainer, label-free questions and improve."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rich.progress import Progress

from personamem import PersonaMem, Record, SentenceEncoder
from personamem.cli import main
from personamem.datasets import UserSplit, read_questions
from personamem.datasets.vectors import corpus_vectors, default_vector_cache
from personamem.errors import CheckpointError, ConfigError, InsufficientDataError, PersonaMemWarning
from personamem.llm import FrozenLLM
from personamem.methods import method_config
from personamem.pipeline.config import PipelineConfig, pipeline_config
from personamem.retrieval.base import Hit
from personamem.retrieval.hybrid import reciprocal_rank_fusion
from personamem.retrieval.query_adapter import SHIPPED_ADAPTERS, WEIGHTS_FILE, QueryAdapter
from personamem.trainers.adapter.config import AdapterDataConfig, AdapterTrainConfig, ImproveConfig
from personamem.trainers.adapter.data import QuerySet
from personamem.trainers.adapter.improve import improve, rollback
from personamem.trainers.adapter.run import train_adapter
from personamem.trainers.adapter.synthetic import parse_question, synthetic_queries
from personamem.trainers.adapter.trainer import fit_adapter, recall_at
from tests.bytescan import files_containing, store_files
from tests.conftest import DATA, need_data


def test_the_shipped_adapter_is_checked_and_maps_queries(encoder: SentenceEncoder) -> None:
    adapter = QueryAdapter.load("mixed", encoder)
    info = json.loads((SHIPPED_ADAPTERS / "mixed" / "adapter.json").read_text())
    assert info["record_encoder"] == encoder.name and len(info["sha256"]) == 64
    assert set(info["split"]) == {"locomo", "personabench", "ikat", "prefeval"}
    base, mapped = encoder.encode(["where did I go hiking?"]), adapter.encode(["where did I go hiking?"])
    assert np.allclose(np.linalg.norm(mapped, axis=1), 1.0, atol=1e-5)
    assert 0.5 < float(base[0] @ mapped[0]) < 0.9999  # moved, not replaced


def test_damaged_or_foreign_adapters_are_refused(tmp_path: Path, encoder: SentenceEncoder) -> None:
    folder = shutil.copytree(SHIPPED_ADAPTERS / "mixed", tmp_path / "copy")
    weights = bytearray((folder / WEIGHTS_FILE).read_bytes())
    weights[-1] ^= 0xFF
    (folder / WEIGHTS_FILE).write_bytes(bytes(weights))
    with pytest.raises(CheckpointError, match="checksum"):
        QueryAdapter.load(folder, encoder)
    other = shutil.copytree(SHIPPED_ADAPTERS / "mixed", tmp_path / "other")
    info = json.loads((other / "adapter.json").read_text())
    (other / "adapter.json").write_text(json.dumps({**info, "record_encoder": "another-model"}))
    with pytest.raises(CheckpointError, match="another-model"):
        QueryAdapter.load(other, encoder)
    with pytest.raises(CheckpointError, match="shipped adapters: mixed"):
        QueryAdapter.load(tmp_path / "nothing", encoder)


def test_auto_is_the_shipped_adapter_where_it_applies(mem: PersonaMem) -> None:
    mem.add("ana", "I keep bees on the roof of my flat.")
    assert mem.pipeline().first_stage == {
        "first_stage": "hybrid",
        "query_encoder": "adapter:mixed",
        "dense_weight": 0.8,
        "rrf_k": 2,
        "ranker": "mixed",
        "chosen_by": "default",
    }
    bm25 = mem.pipeline(pipeline_config({"first_stage": "bm25"}))
    assert bm25.query_encoder_name == "base"
    personalized = mem.pipeline(pipeline_config({"personalizer": "pbr-no-prf", "first_stage": "dense"}))
    assert personalized.query_encoder_name == "base"
    # method names keep their meaning: hybrid is plain RRF over the store's own encoder
    assert mem.pipeline("hybrid").first_stage["query_encoder"] == "base"
    assert (mem.pipeline("hybrid").dense_weight, mem.pipeline("hybrid").rrf_k) == (0.5, 60)
    assert method_config("adapter-rrf:mixed").fusion("adapter:mixed") == (0.8, 2)
    assert pipeline_config({"rrf_k": 10, "dense_weight": 0.6}).fusion("adapter:mixed") == (0.6, 10)
    with pytest.raises(ConfigError, match="dense_weight"):
        pipeline_config({"dense_weight": 1.5})


def test_weighted_fusion_follows_its_weights() -> None:
    records = [Record(user_id="u", id=str(i), text=f"r{i}") for i in range(4)]
    dense = [Hit(records[i], 1.0, rank) for rank, i in enumerate([0, 1, 2, 3], 1)]
    lexical = [Hit(records[i], 1.0, rank) for rank, i in enumerate([3, 2, 1, 0], 1)]
    assert [r.id for r, _ in reciprocal_rank_fusion([dense, lexical], weights=[1.0, 0.0])] == [
        "0",
        "1",
        "2",
        "3",
    ]
    assert [r.id for r, _ in reciprocal_rank_fusion([dense, lexical], weights=[0.0, 1.0])] == [
        "3",
        "2",
        "1",
        "0",
    ]
    with pytest.raises(ValueError, match="weight"):
        reciprocal_rank_fusion([dense, lexical], weights=[1.0])


def _rotated_queries(seed: int, users: int, rotation: np.ndarray) -> QuerySet:
    """Each user's records are random unit vectors; a query is its gold record turned by ``rotation``."""
    rng = np.random.default_rng(seed)
    corpora, names, queries, gold = {}, [], [], []
    for u in range(users):
        corpus = rng.normal(size=(30, 16)).astype("float32")
        corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
        corpora[f"u{u}"] = corpus
        for row in rng.choice(30, size=10, replace=False):
            names.append(f"u{u}")
            queries.append(corpus[row] @ rotation + rng.normal(scale=0.05, size=16))
            gold.append(np.asarray([row]))
    return QuerySet("toy", names, np.asarray(queries, "float32"), gold, corpora)


def test_the_trainer_learns_a_map_that_holds_on_unseen_users(tmp_path: Path) -> None:
    rotation = np.linalg.qr(np.random.default_rng(7).normal(size=(16, 16)))[0].astype("float32")
    train, held = _rotated_queries(0, 8, rotation), _rotated_queries(1, 4, rotation)
    config = AdapterTrainConfig(steps=300, lr=0.02, validate_every=50, k=1)
    fit = fit_adapter([train], [held], config)
    assert recall_at(None, [held], 1) < 0.3  # the turned queries find little as they are
    assert recall_at(fit.weight, [held], 1) > 0.9
    assert fit.best_validation == max(score for _, score in fit.curve)


class _Interrupt(Progress):
    """Stops training after ``at`` steps, as a killed process would (the state saved so far stays)."""

    def __init__(self, at: int) -> None:
        super().__init__(disable=True)
        self.at = at

    def update(self, task, *, completed=None, **kwargs):  # type: ignore[no-untyped-def, override]
        if completed is not None and completed >= self.at:
            raise KeyboardInterrupt
        return super().update(task, completed=completed, **kwargs)


def test_an_interrupted_fit_resumes_to_the_same_weights(tmp_path: Path) -> None:
    rotation = np.linalg.qr(np.random.default_rng(3).normal(size=(16, 16)))[0].astype("float32")
    train, held = _rotated_queries(0, 6, rotation), _rotated_queries(1, 3, rotation)
    config = AdapterTrainConfig(steps=60, lr=0.01, validate_every=20, k=1)
    whole = fit_adapter([train], [held], config, out_dir=tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        fit_adapter([train], [held], config, out_dir=tmp_path / "cut", progress=_Interrupt(at=30))
    assert (tmp_path / "cut" / "last.pt").is_file()  # the state of step 20
    resumed = fit_adapter([train], [held], config, out_dir=tmp_path / "cut", resume=True)
    assert np.array_equal(resumed.weight, whole.weight) and resumed.curve == whole.curve
    assert not (tmp_path / "cut" / "last.pt").exists()


def test_users_not_questions_are_split() -> None:
    def split_users(users: list[str]) -> UserSplit:
        return UserSplit.by_share(users, test_share=0.4, validation_share=0.15, seed=0)

    split = split_users([f"u{i}" for i in range(20)])
    assert (len(split.train), len(split.validation), len(split.test)) == (9, 3, 8)
    assert not set(split.train) & set(split.test) and not set(split.validation) & set(split.test)
    assert split_users(["a", "b", "c", "d"]).train and len(split_users(["a", "b", "c", "d"]).test) == 2
    with pytest.raises(ValueError, match="1 user"):
        split_users(["a"])


@pytest.mark.parametrize(
    ("answer", "question"),
    [
        (" Where did Maria move to?\nText: ...", "Where did Maria move to?"),
        ('Question: "What does Tom train for?"', "What does Tom train for?"),
        ("I love it!", None),
        ("Why?", None),
        ("What is the answer to the question: What is the answer to the question: what?", None),
        ("Where did she go and where did she go and where did she go?", None),
        ("Question this text answers: what?", None),
    ],
)
def test_only_a_question_is_taken_from_the_llm(answer: str, question: str | None) -> None:
    assert parse_question(answer) == question


def _demo(mem: PersonaMem) -> None:
    demo = Path(__file__).parents[2] / "personamem" / "data" / "demo.jsonl"
    rows = [json.loads(line) for line in demo.read_text(encoding="utf-8").splitlines()]
    mem.add_many([Record(**row) for row in rows])


@pytest.mark.slow
def test_synthetic_questions_are_cached_erased_with_the_user_and_too_few_refuse(
    tmp_path: Path, encoder: SentenceEncoder, ct2_llm: FrozenLLM
) -> None:
    llm = ct2_llm  # the pipeline's runtime, which `improve` writes its questions with by default
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as mem:
        _demo(mem)
        users = mem.store.users()
        asked = synthetic_queries(mem.store, llm, users, per_user=3, max_total=12, consistency_k=None)
        assert 0 < len(asked) <= 12 and all(q.endswith("?") for q in asked.texts)
        for user, row, text in zip(asked.users, asked.gold, asked.texts, strict=True):
            assert asked.record_ids[user][row[0]] and text
        again = synthetic_queries(mem.store, llm, users, per_user=3, max_total=12, consistency_k=None)
        assert again.texts == asked.texts  # read back from the store's cache, not written anew
        with pytest.raises(InsufficientDataError, match=r"3 with records; need at least 4"):
            improve(mem, ImproveConfig(max_synthetic=12), llm=llm)
        mem.add_many(
            ["I adopted a grey cat called Miso last spring.", "Miso hates the vacuum."], user_id="dee"
        )
        with pytest.raises(InsufficientDataError, match=r"from 4 user\(s\); need at least 32 and 10"):
            improve(mem, ImproveConfig(max_synthetic=12), llm=llm)
        assert mem.store.live_pipeline is None
        user = asked.users[0]
        questions = [t for u, t in zip(asked.users, asked.texts, strict=True) if u == user]
        mem.forget(user)
    files = store_files(tmp_path / "store")
    assert all(files_containing(files, q.encode()) == [] for q in questions)
    data = AdapterDataConfig(from_store=tmp_path / "store", synthetic_per_user=3, max_synthetic=12)
    with pytest.raises(InsufficientDataError, match="too few training questions to fit an adapter"):
        train_adapter(data, AdapterTrainConfig(), tmp_path / "adapter", encoder=encoder, llm=llm)
    assert not (tmp_path / "adapter" / "adapter.json").exists()


@pytest.fixture(scope="module")
def personabench_mem(tmp_path_factory: pytest.TempPathFactory, encoder: SentenceEncoder) -> Path:
    """A store of PersonaBench's four users whose logged searches carry feedback naming the gold records."""
    bench = read_questions("personabench", need_data(DATA / "personabench"))
    root = tmp_path_factory.mktemp("pb")
    (root / "logging.toml").write_text("[pipeline]\nlog_interactions = true\n")
    # the CLI's vector cache: the real corpus is embedded once per machine, not once per test
    vectors = corpus_vectors(encoder, [r.text for r in bench.records], default_vector_cache())
    with PersonaMem.open(root / "store", encoder=encoder, pipeline=root / "logging.toml") as mem:
        mem.store.add_many(bench.records, vectors=vectors)
        for question in bench.questions:
            hits = mem.search(question.user_id, question.text, k=5)
            mem.feedback(hits.interaction_id, used_record_ids=list(question.relevant))
    return root


@pytest.mark.slow
def test_improve_goes_live_in_the_store_for_every_process_and_rolls_back(
    personabench_mem: Path, encoder: SentenceEncoder
) -> None:
    store = personabench_mem / "store"
    with PersonaMem.open(store, encoder=encoder) as mem:
        assert mem.config == PipelineConfig()  # nothing live yet: the package default
        mem.store.set_live_pipeline({"first_stage": "bm25", "budget_tokens": 300})  # a weak live pipeline
        assert mem.config.first_stage == "bm25"  # served at once in this process
        before = mem.search(mem.users()[0], "what do I like?")
        result = improve(mem, ImproveConfig(steps=100, weights=(0.8, 1.0), go_live="now"))
        assert result.signal == "feedback" and result.counts["users"] == 4
        assert result.counts["validation_users"] == 1 and result.counts["train_questions"] > 100
        assert result.after["ndcg@10"] > result.before["ndcg@10"] and result.live
        assert result.adapter is not None and result.adapter.parent == store.resolve() / "adapters"
        served = mem.context(mem.users()[0], "what do I like?").first_stage  # this process at once
        assert served["query_encoder"] == result.after["query_encoder"]
        assert served["chosen_by"].startswith("personamem improve") and mem.config.budget_tokens == 300
    # another process opening the store serves it, and a search with no method runs it
    code = (
        "import json, sys; from personamem import PersonaMem; m = PersonaMem.open(sys.argv[1]); "
        "print(json.dumps(m.context(m.users()[0], 'what do I like?').first_stage))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code, str(store)], capture_output=True, text=True, check=True
    )
    assert json.loads(shown.stdout)["query_encoder"] == result.after["query_encoder"]
    # a pipeline given at open still wins, and says so
    pinned = personabench_mem / "pinned.toml"
    pinned.write_text('[pipeline]\nfirst_stage = "dense"\n')
    warned = pytest.warns(PersonaMemWarning, match="not the store's live pipeline")
    with warned, PersonaMem.open(store, encoder=encoder, pipeline=pinned) as mem:
        assert mem.pipeline().query_encoder_name == "adapter:mixed" and mem.config.first_stage == "dense"
    assert main(["--store", str(store), "improve", "--rollback"]) == 0
    with PersonaMem.open(store, encoder=encoder) as mem:
        assert mem.config.first_stage == "bm25" and mem.config.budget_tokens == 300
        assert [h.record.id for h in mem.search(mem.users()[0], "what do I like?")] == [
            h.record.id for h in before
        ]
        with pytest.raises(ConfigError, match="nothing to roll back"):
            rollback(mem)


@pytest.mark.slow
def test_train_and_evaluate_an_adapter_from_the_command_line(
    tmp_path: Path, encoder: SentenceEncoder, capsys: pytest.CaptureFixture[str]
) -> None:
    need_data(DATA / "trec_ikat")
    runs = tmp_path / "runs"
    args = ["train", "adapter", "--benchmark", "ikat", "--data-root", str(DATA), "--steps", "50"]
    assert main([*args, "--out", str(runs / "gold-s0"), "--validate-every", "10"]) == 0
    assert "query_encoder = " in capsys.readouterr().out
    info = json.loads((runs / "gold-s0" / "adapter.json").read_text())
    assert [s["source"] for s in info["sources"]] == ["ikat"] and info["sources"][0]["queries"] >= 32
    assert info["recipe"]["train"]["steps"] == 50 and info["validation"]["metric"] == "recall@10"
    split = json.loads((runs / "gold-s0" / "split-ikat.json").read_text())
    assert len(split["test_users"]) == 7 and not set(split["test_users"]) & set(split["train_users"])
    assert main(["eval-adapter", "--runs", str(runs), "--data-root", str(DATA), "--no-fusion"]) == 0
    report = json.loads((runs / "report" / "report.json").read_text())
    assert {row["method"] for row in report["rows"]} == {"dense", "hybrid", "default", "gold"}
    assert report["questions"]["ikat"] == 40 and "eval-adapter --runs" in report["command"]
    assert main(["train", "adapter", "--data-root", str(DATA)]) == 2  # no source named
