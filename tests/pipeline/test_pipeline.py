"""The pipeline: its config, the context call's budget and report, the LLM deadline, usage metering."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from personamem import PersonaMem, SentenceEncoder
from personamem.errors import ConfigError, MethodError, PBRFallbackWarning
from personamem.llm.base import Generations, Prompt, Usage
from personamem.methods import method_config
from personamem.pipeline import Pipeline, PipelineConfig, load_pipeline
from personamem.store.read import NOW, Read
from personamem.testing import FakeLLM

TEXTS = [
    "I repaired my bike.",
    "I'm allergic to peanuts.",
    "I sing in a choir.",
    "Peanuts make me ill.",
    "I'm vegan and cook lentils most nights.",
    "My favourite dish is a spicy tofu curry.",
    "I take the 8:15 train to work.",
]


@pytest.fixture
def alice(mem: PersonaMem) -> PersonaMem:
    mem.add_many([{"id": str(i), "text": t} for i, t in enumerate(TEXTS)], user_id="alice")
    mem.add("bob", "I'm allergic to shellfish.")
    return mem


def test_defaults_run_offline_and_validate_stage_names() -> None:
    config = PipelineConfig()
    assert (config.personalizer, config.first_stage, config.selector, config.llm) == (
        "none",
        "hybrid",
        "none",
        None,
    )
    assert not config.needs_llm and not config.stochastic
    for bad, message in (
        ({"selector": "best"}, "unknown selector 'best'; choose from: none, relevance"),
        ({"personalizer": "magic"}, "unknown personalizer 'magic'; choose from: none, pbr"),
        ({"personalizer": "pbr", "first_stage": "bm25"}, "use the dense or hybrid first stage"),
        ({"selector": "relevance", "candidates": 2, "profile_k": 5}, "must be at least profile_k"),
    ):
        with pytest.raises(ValueError, match=message):
            PipelineConfig(**bad)
    assert PipelineConfig(selector="purple:runs/x").selector == "purple:runs/x"


def test_toml_config_loads_and_names_bad_keys(tmp_path: Path) -> None:
    good = tmp_path / "personamem.toml"
    good.write_text('[pipeline]\nselector = "relevance"\nprofile_k = 3\n', encoding="utf-8")
    assert load_pipeline(good) == PipelineConfig(selector="relevance", profile_k=3)
    assert load_pipeline(good, profile_k=2).profile_k == 2
    for text, message in (
        ("[pipeline]\nprofil_k = 3\n", "profil_k: Extra inputs are not permitted"),
        ('[pipeline]\nprofile_k = "many"\n', "profile_k: Input should be a valid integer"),
        ("[pipline]\n", r"unknown section\(s\) \['pipline'\]"),
        ("[pipeline\n", "not valid TOML"),
    ):
        bad = tmp_path / "bad.toml"
        bad.write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError, match=f"^{bad}: .*{message}"):
            load_pipeline(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_pipeline(tmp_path / "missing.toml")


def test_a_selector_puts_its_profile_first_then_the_other_candidates(alice: PersonaMem) -> None:
    config = PipelineConfig(first_stage="dense", selector="relevance", candidates=4, profile_k=2)
    pipeline = Pipeline(alice.store, config)
    pool = alice.search("alice", "what food allergies do I have?", k=4, method="dense")
    hits = pipeline.search("alice", "what food allergies do I have?", 10)
    assert {h.record.id for h in hits[:2]} == {"1", "3"}  # the two peanut records, by cosine
    assert [h.record.id for h in hits[2:]] == [h.record.id for h in pool if h.record.id not in {"1", "3"}]
    assert [h.rank for h in hits] == [1, 2, 3, 4] and len(pipeline.search("alice", "x", 1)) == 1


def test_context_renders_the_profile_and_reports_its_cost(alice: PersonaMem) -> None:
    context = alice.context("alice", "what should I cook tonight?")
    assert context.text.splitlines() == [f"- {h.record.text}" for h in context.hits]
    assert len(context.hits) == 5 and {h.record.user_id for h in context.hits} == {"alice"}
    assert [h.record.id for h in context.hits] == [
        h.record.id for h in alice.search("alice", "what should I cook tonight?", k=5, method="default")
    ]
    assert context.first_stage == {
        "first_stage": "hybrid",
        "query_encoder": "adapter:mixed",
        "dense_weight": 0.8,
        "rrf_k": 2,
        "ranker": "mixed",
        "chosen_by": "default",
    }
    pieces = alice.store.encoder.count_tokens(["what should I cook tonight?"])[0]
    assert context.usage == Usage(encoder_tokens=pieces) and context.warnings == []  # no LLM ran
    assert (
        set(context.timings_ms) == {"first_stage", "fit"} and context.tokens <= context.budget_tokens == 512
    )
    assert context.to_json()["records"][0]["id"] == context.hits[0].record.id
    assert alice.context("nobody", "anything").text == ""


def test_context_never_exceeds_its_budget_and_drops_from_the_end(alice: PersonaMem) -> None:
    count = alice.store.encoder.count_tokens

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(budget=st.integers(min_value=0, max_value=120), k=st.integers(min_value=1, max_value=7))
    def check(budget: int, k: int) -> None:
        config = PipelineConfig(first_stage="dense", query_encoder="base", profile_k=k)
        context = alice.context("alice", "peanut allergy and dinner", budget_tokens=budget, method=config)
        assert context.tokens <= budget and (not context.text or count([context.text])[0] <= budget)
        full = alice.search("alice", "peanut allergy and dinner", k=k, method="dense")
        assert [h.record.id for h in context.hits + context.dropped] == [h.record.id for h in full]
        if context.dropped:  # one more record would not have fitted
            longer = "\n".join(f"- {h.record.text}" for h in [*context.hits, context.dropped[0]])
            assert count([longer])[0] > budget

    check()


class _SlowLLM(FakeLLM):
    """Control flow only: a backend that answers after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.started, self.finished = threading.Event(), threading.Event()

    def generate(self, prompts: Sequence[Prompt], **kwargs: object) -> Generations:  # type: ignore[override]
        self.started.set()
        time.sleep(self.delay)
        self.finished.set()
        return super().generate(prompts, **kwargs)  # type: ignore[arg-type]


def test_an_llm_stage_past_the_deadline_falls_back_within_it(alice: PersonaMem) -> None:
    slow = _SlowLLM(delay=3.0)
    config = PipelineConfig(personalizer="pbr-no-anchor", first_stage="dense", llm_timeout_s=0.5)
    pipeline = Pipeline(alice.store, config, llm=slow)
    start = time.monotonic()
    with pytest.warns(PBRFallbackWarning, match="deadline"):
        context = pipeline.context("alice", "what should I cook tonight?")
    assert time.monotonic() - start < 2.0  # the 3 s answer was not waited for
    plain = Pipeline(alice.store, PipelineConfig(first_stage="dense", query_encoder="base")).context(
        "alice", "what should I cook tonight?"
    )
    assert [h.record.id for h in context.hits] == [h.record.id for h in plain.hits]
    assert len(context.warnings) == 1 and "deadline" in context.warnings[0]
    # the abandoned call ends on its own; on a loaded machine the deadline may pass before it is made
    assert slow.finished.wait(5.0) or not slow.started.is_set()


def test_a_failing_listwise_llm_keeps_the_first_stage_order_and_says_so(alice: PersonaMem) -> None:
    failing = FakeLLM(fail_times=10)
    config = PipelineConfig(first_stage="dense", selector="listwise", candidates=5, profile_k=3)
    with pytest.warns(UserWarning, match="keeping the first-stage order"):
        context = Pipeline(alice.store, config, llm=failing).context("alice", "peanuts?")
    first = alice.search("alice", "peanuts?", k=3, method="dense")
    assert [h.record.id for h in context.hits] == [h.record.id for h in first]
    assert context.warnings and "LLM failed" in context.warnings[0]


def test_usage_counts_the_llm_tokens_of_this_call_only(alice: PersonaMem) -> None:
    llm = FakeLLM(lambda prompt: "[2] > [1]")
    config = PipelineConfig(first_stage="dense", selector="listwise", candidates=3, profile_k=2)
    pipeline = Pipeline(alice.store, config, llm=llm)
    first = pipeline.context("alice", "peanuts?")
    second = pipeline.context("alice", "peanuts?")
    assert first.usage.total_tokens > 0  # the second call reads the kept answer: it spends nothing,
    assert second.usage.total_tokens == 0  # and nothing of the first call is carried over to it
    assert set(first.timings_ms) == {"first_stage", "select", "fit"}


def test_methods_are_presets_over_the_configured_llm_seed_and_budget() -> None:
    base = PipelineConfig(llm="smollm2", seed=3, budget_tokens=100, selector="relevance", profile_k=2)
    pbr = method_config("pbr", base)
    assert (pbr.personalizer, pbr.first_stage, pbr.selector, pbr.profile_k) == ("pbr", "dense", "none", 5)
    assert (pbr.llm, pbr.seed, pbr.budget_tokens) == ("smollm2", 3, 100)
    with pytest.raises(MethodError, match="unknown method 'purple:'"):
        method_config("purple:", base)


def test_a_pipeline_file_is_a_method(alice: PersonaMem, tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        '[pipeline]\nfirst_stage = "dense"\nselector = "relevance"\ncandidates = 4\nprofile_k = 2\n'
    )
    by_file = alice.search("alice", "food allergies?", k=4, method=f"pipeline:{path}")
    by_config = Pipeline(alice.store, load_pipeline(path)).search("alice", "food allergies?", 4)
    assert [h.record.id for h in by_file] == [h.record.id for h in by_config]


def test_llm_methods_without_an_llm_fail_listing_the_choices(alice: PersonaMem) -> None:
    with pytest.raises(MethodError, match=r"method 'listwise' needs a frozen LLM.*without one: dense, bm25"):
        alice.search("alice", "x", method="listwise")
    with pytest.raises(MethodError, match="unknown method 'dence'; choose from: dense, bm25, hybrid"):
        alice.context("alice", "x", method="dence")


def test_own_personalizer_and_selector_plug_in(alice: PersonaMem, encoder: SentenceEncoder) -> None:
    class Reversed:
        def select(self, user_id: str, query: str, candidates: Sequence[object], k: int) -> list[object]:
            from personamem.retrieval.base import ranked

            return ranked([(r, 0.0) for r in list(candidates)[::-1][:k]])  # type: ignore[misc]

    class Toward:
        def personalize(self, user_id: str, query: str, read: Read = NOW) -> object:
            return encoder.encode(["choir singing"])[0]

    config = PipelineConfig(first_stage="dense", selector="relevance", candidates=3, profile_k=1)
    hits = Pipeline(alice.store, config, personalizer=Toward(), selector=Reversed()).search(
        "alice", "bike", 3
    )  # type: ignore[arg-type]
    near_choir = alice.search("alice", "choir singing", k=3, method="dense")
    assert hits[0].record.id == near_choir[-1].record.id


def test_an_own_personalizer_over_bm25_is_refused(alice: PersonaMem, encoder: SentenceEncoder) -> None:
    class Fixed:
        def personalize(self, user_id: str, query: str, read: Read = NOW) -> object:
            return encoder.encode([query])[0]

    with pytest.raises(ValueError, match="use the dense or hybrid first stage"):
        Pipeline(alice.store, PipelineConfig(first_stage="bm25"), personalizer=Fixed())  # type: ignore[arg-type]
