"""Every method name in the table ranks the same through the SDK, the CLI, both adapters and the harness.

One parametrized test over :data:`personamem.methods.METHODS`, on one tiny real store, with the real
local LLM on the pipeline's default runtime (CTranslate2) for the LLM methods and a PURPLE checkpoint
trained for two steps (conftest). The SDK runs
first, so LLM outputs are computed once and the other entry points read them from the store's
durable cache, as an application's later calls would.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.cli import main
from personamem.datasets.benchmark import Benchmark, Question
from personamem.errors import FallbackWarning
from personamem.eval.runner import evaluate_method
from personamem.llm import FrozenLLM
from personamem.llm.ct2 import CTranslate2LLM
from personamem.methods import METHODS, method_config, method_named
from personamem.store import Store

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

USER, QUERY, K = "ana", "what should I cook tonight?", 6
RECORDS = [
    ("I'm vegan and cook lentils most nights.", "conversation"),
    ("My favourite dish is a spicy tofu curry.", "conversation"),
    ("I take the 8:15 train to work.", "conversation"),
    ("My sister Ana lives in Porto.", "conversation"),
    ("I play the cello on Sundays.", "conversation"),
    ("Our flat has a small balcony.", "conversation"),
    ("I am allergic to peanuts.", "knowledge"),
    ("I live in Lisbon.", "knowledge"),
]


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory, encoder: SentenceEncoder) -> Path:
    path = tmp_path_factory.mktemp("everywhere") / "store"
    with PersonaMem.open(path, encoder=encoder) as mem:
        mem.add_many(
            [{"id": f"r{i}", "text": t, "kind": k} for i, (t, k) in enumerate(RECORDS)], user_id=USER
        )
        mem.add("bo", "I love steak houses and barbecue.", kind="knowledge")
    return path


@pytest.fixture(scope="module")
def arguments(
    tmp_path_factory: pytest.TempPathFactory, purple_checkpoint: Path, pgret_checkpoint: Path
) -> dict[str, str]:
    """The argument of each row that takes one: the session's toy checkpoints, a pipeline file."""
    pipeline = tmp_path_factory.mktemp("pipeline") / "mine.toml"
    pipeline.write_text(
        '[pipeline]\nfirst_stage = "dense"\nselector = "relevance"\ncandidates = 6\nprofile_k = 3\n'
    )
    return {
        "purple:": f"purple:{purple_checkpoint}",
        "pgret:": f"pgret:{pgret_checkpoint}",
        "pgret-rrf:": f"pgret-rrf:{pgret_checkpoint}",
        "adapter:": "adapter:mixed",
        "adapter-rrf:": "adapter-rrf:mixed",
        "pipeline:": f"pipeline:{pipeline}",
    }


def _name(spec_name: str, arguments: dict[str, str]) -> str:
    prefix = spec_name.split("<", 1)[0]
    return arguments[prefix] if "<" in spec_name else spec_name


@pytest.fixture
def quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)  # a 135M model often writes nothing usable
        yield


def _sdk(path: Path, name: str, llm: FrozenLLM, encoder: SentenceEncoder) -> list[str]:
    with PersonaMem.open(path, encoder=encoder, llm=llm) as mem:
        return [h.record.id for h in mem.search(USER, QUERY, k=K, method=name)]


def _cli(path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    capsys.readouterr()
    argv = ["--store", str(path), "search", "--user", USER, QUERY, "-k", str(K), "--method", name, "--json"]
    assert main([*argv, "--llm", "smollm2-135m", "--llm-runtime", "ctranslate2"]) == 0  # the SDK's LLM
    return [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()]


def _harness(path: Path, name: str, llm: FrozenLLM, encoder: SentenceEncoder) -> list[str]:
    store = Store.open(path, encoder=encoder)
    try:
        bench = Benchmark(
            "toy", store.records(USER), [Question(id="q", user_id=USER, text=QUERY, relevant={"r0": 1})]
        )
        run = evaluate_method(method_named(name, llm), bench, store, depth=K)
        return run.rankings[run.seeds[0]]["q"]
    finally:
        store.close()


def _langchain(path: Path, name: str, llm: FrozenLLM, encoder: SentenceEncoder) -> list[str]:
    from personamem.adapters.langchain import PersonaMemRetriever

    with PersonaMem.open(path, encoder=encoder, llm=llm) as mem:
        retriever = PersonaMemRetriever(memory=mem, user_id=USER, k=K, method=name)
        return [str(doc.id) for doc in retriever.invoke(QUERY)]


def _llamaindex(path: Path, name: str, llm: FrozenLLM, encoder: SentenceEncoder) -> list[str]:
    from personamem.adapters.llamaindex import PersonaMemRetriever

    with PersonaMem.open(path, encoder=encoder, llm=llm) as mem:
        return [n.node.node_id for n in PersonaMemRetriever(mem, USER, k=K, method=name).retrieve(QUERY)]


@pytest.mark.slow
@pytest.mark.parametrize("spec_name", [spec.name for spec in METHODS])
def test_a_method_ranks_the_same_everywhere(
    spec_name: str,
    store_path: Path,
    arguments: dict[str, str],
    ct2_llm: CTranslate2LLM,
    encoder: SentenceEncoder,
    capsys: pytest.CaptureFixture[str],
    quiet: None,
) -> None:
    name = _name(spec_name, arguments)
    sdk = _sdk(store_path, name, ct2_llm, encoder)
    assert sdk and set(sdk) <= {f"r{i}" for i in range(len(RECORDS))}  # ana's records only
    entry_points: dict[str, Callable[[], list[str]]] = {
        "cli": lambda: _cli(store_path, name, capsys),
        "harness": lambda: _harness(store_path, name, ct2_llm, encoder),
        "langchain": lambda: _langchain(store_path, name, ct2_llm, encoder),
        "llamaindex": lambda: _llamaindex(store_path, name, ct2_llm, encoder),
    }
    rankings = {where: rank() for where, rank in entry_points.items()}
    assert rankings == dict.fromkeys(entry_points, sdk)
    if method_config(name).selector != "none":  # the selector's profile leads, then the rest of the pool
        assert len(sdk) == min(K, len(RECORDS))


def test_the_method_help_is_generated_from_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["search", "--help"], ["eval", "--help"]):
        assert main(command) == 0
        compact = re.sub(r"[\s│]", "", capsys.readouterr().out)  # rich wraps the help inside a box
        assert all(f"{spec.name}:" in compact for spec in METHODS)


def test_an_unknown_method_is_a_usage_error_naming_the_choices(
    store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--store", str(store_path), "search", "--user", USER, "x", "--method", "dence"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "unknown method 'dence'; choose from: dense, bm25, hybrid" in err and "Traceback" not in err
    assert (
        main(["--store", str(store_path), "search", "--user", USER, "x", "--method", "purple:/no/such"]) == 2
    )
    assert "not a PURPLE checkpoint" in capsys.readouterr().err
    assert main(["--store", str(store_path), "search", "--user", USER, "x", "--method", "listwise"]) == 2
    assert "needs a frozen LLM" in " ".join(capsys.readouterr().err.split())


def test_records_of_another_user_never_appear(store_path: Path, encoder: SentenceEncoder) -> None:
    with PersonaMem.open(store_path, encoder=encoder) as mem:
        for spec in METHODS:
            if not spec.prefix and not method_config(spec.name).needs_llm:
                assert {
                    h.record.user_id for h in mem.search("bo", "steak and cooking", k=5, method=spec.name)
                } == {"bo"}
