"""Preference memories in the product: the pipeline's slot and PersonaMem's memory, refresh and rerank.

A real temp store and the session's real SmolLM2 (transformers). The LLM is watched by a thin wrapper
that counts generations and, for control-flow tests only, fails or holds a call back; memories that a
test needs as "the previous one" are written into the store's slot directly, so only the tests about
building memories pay for generation (20-word memories: 32 tokens each).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from personamem import PersonaMem, PipelineConfig, SentenceEncoder
from personamem.errors import CheckpointError, ConfigError, LLMError, MemoryFallbackWarning, MethodError
from personamem.llm import TransformersLLM
from personamem.llm.base import Generations, Prompt, Scores
from personamem.pipeline import Pipeline
from personamem.pipeline.config import pipeline_config
from personamem.preference import PreferenceMemories, PreferenceMemory, SetwiseReranker, Statement
from personamem.preference.service import NAMESPACE

WORDS = 20
CONFIG = PipelineConfig(preference_memory="atomic", memory_words=WORDS, first_stage="dense")
ANA = [
    ("I'm vegan and avoid dairy.", "food"),
    ("Spicy curries are my favourite.", "food"),
    ("I cycle to work every day.", "travel"),
]
QUERY = "what should I cook tonight?"


class WatchedLLM:
    """The real LLM with its generations counted; ``fail`` or ``gate`` steer control flow only."""

    def __init__(self, llm: TransformersLLM) -> None:
        self.llm = llm
        self.generations = 0
        self.fail = False
        self.gate: threading.Event | None = None

    @property
    def name(self) -> str:
        return self.llm.name

    @property
    def context_window(self) -> int:
        return self.llm.context_window

    def count_tokens(self, text: str) -> int:
        return self.llm.count_tokens(text)

    def loglikelihood(self, requests: Sequence[tuple[Prompt, str]]) -> Scores:
        return self.llm.loglikelihood(requests)

    def generate(self, prompts: Sequence[Prompt], **options: Any) -> Generations:
        self.generations += 1
        if self.fail:
            raise LLMError("the backend is down")
        if self.gate is not None:
            assert self.gate.wait(120), "the test never opened the gate"
        return self.llm.generate(prompts, **options)


@pytest.fixture
def watched(llm: TransformersLLM, one_torch_thread: None) -> WatchedLLM:
    return WatchedLLM(llm)


def _open(path: Path, encoder: SentenceEncoder, llm: WatchedLLM, **changes: Any) -> PersonaMem:
    return PersonaMem.open(path, encoder=encoder, pipeline=CONFIG.model_copy(update=changes), llm=llm)


@pytest.fixture
def mem(tmp_path: Path, encoder: SentenceEncoder, watched: WatchedLLM) -> Iterator[PersonaMem]:
    with _open(tmp_path / "store", encoder, watched) as memory:
        memory.add_many(
            [{"id": f"r{i}", "text": t, "category": c} for i, (t, c) in enumerate(ANA)], user_id="ana"
        )
        memory.add_many([{"id": "r0", "text": "I love steak houses.", "category": "food"}], user_id="bo")
        yield memory


def _memories(mem: PersonaMem) -> PreferenceMemories:
    found = mem.pipeline().memories
    assert found is not None
    return found


def _seed(mem: PersonaMem, user_id: str, *statements: str, revision: str | None = None) -> PreferenceMemory:
    """Write a memory into the user's slot, as a previous build would have (default: current)."""
    memories = _memories(mem)
    memory = PreferenceMemory(
        user_id,
        within={"food": [Statement(s, ("r0",)) for s in statements]},
        revision=revision or mem.store.revision(user_id),
        extractor=memories.name,
    )
    assert mem.store.set_latest(user_id, NAMESPACE, memories.name, memory.to_json())
    return memory


def test_add_is_llm_free_and_the_memory_follows_the_history(mem: PersonaMem, watched: WatchedLLM) -> None:
    mem.add("ana", "I bake bread on Sundays.", category="food")  # the chat path: written behind
    mem.store.flush()
    assert watched.generations == 0
    assert mem.memory("nobody") == PreferenceMemory("nobody", extractor=_memories(mem).name)
    assert watched.generations == 0  # an unknown user has nothing to extract

    first = mem.memory("ana")
    assert watched.generations == 1 and not first.stale and not first.empty
    assert first.revision == mem.store.revision("ana")
    assert set(first.evidence_ids) <= {r.id for r in mem.records("ana")}
    assert mem.memory("ana") == first and watched.generations == 1  # current: read, not rebuilt

    context = mem.context("ana", QUERY)
    assert watched.generations == 1
    assert context.text.startswith(f"Preferences:\n{first.text()}\n\nRecords:\n- ")
    assert context.memory == first.text() and context.tokens <= context.budget_tokens
    assert context.hits and not context.warnings and "memory" in context.timings_ms

    mem.add("ana", "I've started eating fish again.", category="food")
    mem.store.flush()
    second = mem.memory("ana")
    assert watched.generations == 2 and second.revision == mem.store.revision("ana") != first.revision

    assert mem.forget("ana")
    assert _memories(mem).cached("ana") is None  # erased with the user
    assert mem.memory("ana").empty and watched.generations == 2


def test_an_empty_history_gives_an_empty_memory_without_the_llm(mem: PersonaMem, watched: WatchedLLM) -> None:
    _seed(mem, "bo", "loves steak")
    assert mem.delete("bo", ["r0"]) == ["r0"]  # erases the slot too: a memory may quote the record
    assert _memories(mem).cached("bo") is None
    memory = mem.memory("bo")
    assert memory.empty and not memory.stale and memory.revision == mem.store.revision("bo")
    context = mem.context("bo", QUERY)
    assert context.text == "" and context.memory == ""
    assert watched.generations == 0


def test_the_context_fits_the_memory_first_and_cuts_it_last(mem: PersonaMem, watched: WatchedLLM) -> None:
    memory = _seed(mem, "ana", "eats vegan food only", "likes very spicy curries", "never eats dairy")
    full = mem.context("ana", QUERY)
    assert full.text.startswith("Preferences:\nWITHIN food:\n- eats vegan food only\n")
    assert full.memory == memory.text() and len(full.hits) == 3

    count = mem.pipeline().llm.count_tokens  # type: ignore[union-attr]  # the pipeline has the LLM
    head = f"Preferences:\n{memory.text()}"
    only_memory = mem.context("ana", QUERY, budget_tokens=count(head) + 2)
    assert only_memory.text == head and only_memory.hits == [] and len(only_memory.dropped) == 3
    assert only_memory.tokens <= only_memory.budget_tokens and not only_memory.warnings

    cut = mem.context("ana", QUERY, budget_tokens=count("Preferences:\nWITHIN food:\n- eats vegan food only"))
    assert cut.text == "Preferences:\nWITHIN food:\n- eats vegan food only"
    assert cut.memory == "WITHIN food:\n- eats vegan food only" and cut.tokens <= cut.budget_tokens
    assert cut.warnings == [f"preference memory cut to 2 of 4 line(s) to fit {cut.budget_tokens} tokens"]
    assert mem.context("ana", QUERY, budget_tokens=0).text == ""
    first_stage = mem.config.model_copy(update={"preference_memory": "none"})  # the same, no memory
    assert mem.search("ana", QUERY, k=3) == mem.pipeline(first_stage).search(
        "ana", QUERY, 3
    )  # search never shows the memory
    assert watched.generations == 0


def test_a_failing_llm_keeps_the_previous_memory_marked_stale(mem: PersonaMem, watched: WatchedLLM) -> None:
    previous = _seed(mem, "ana", "eats vegan food only", revision="an older history")
    watched.fail = True
    with pytest.warns(MemoryFallbackWarning, match="the LLM failed"):
        context = mem.context("ana", QUERY)
    assert [w for w in context.warnings if "the LLM failed" in w and "marked stale" in w]
    assert context.text.startswith(f"Preferences:\n{previous.text()}\n\nRecords:")
    with pytest.warns(MemoryFallbackWarning):
        memory = mem.memory("ana")
    assert memory.stale and memory.within == previous.within
    assert _memories(mem).cached("ana") == previous  # left in place for the next try


def test_a_slow_rebuild_gives_the_stale_memory_then_stores_the_new_one(
    tmp_path: Path, encoder: SentenceEncoder, watched: WatchedLLM
) -> None:
    with _open(tmp_path / "store", encoder, watched, memory_timeout_s=0.2) as mem:
        mem.add_many([{"text": t, "category": c} for t, c in ANA], user_id="ana")
        previous = _seed(mem, "ana", "eats vegan food only", revision="an older history")
        watched.gate = threading.Event()
        start = time.monotonic()
        with pytest.warns(MemoryFallbackWarning, match=r"not rebuilt within 0.2 s"):
            memory = mem.memory("ana")
        assert time.monotonic() - start < 5 and memory.stale and memory.within == previous.within

        watched.gate.set()  # the backend answers late; the rebuild goes on in the background
        deadline = time.monotonic() + 120
        while (cached := _memories(mem).cached("ana")) == previous and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cached is not None and cached.revision == mem.store.revision("ana")
        assert mem.memory("ana") == cached and not cached.stale and watched.generations == 1


def test_tenants_have_their_own_memories(mem: PersonaMem, watched: WatchedLLM) -> None:
    shop, clinic = mem.tenant("shop"), mem.tenant("clinic")
    shop.add_many([{"id": f"r{i}", "text": t, "category": c} for i, (t, c) in enumerate(ANA)], user_id="ana")
    clinic.add_many([{"id": "r0", "text": "I need a wheelchair ramp."}], user_id="ana")
    steps: list[int] = []
    assert shop.refresh_memories(progress=steps.append) == 1 and steps == [1]
    assert watched.generations == 1
    assert shop.refresh_memories(["ana", "nobody"], progress=steps.append) == 0 and steps == [1, 2]
    built = shop.memory("ana")
    assert watched.generations == 1 and built.revision == shop.store.revision("ana")
    assert set(built.evidence_ids) <= {r.id for r in shop.records("ana")}

    assert _memories(clinic).cached("ana") is None and _memories(mem).cached("ana") is None
    assert _memories(shop).extractor is _memories(clinic).extractor  # one extractor per process
    other = _seed(clinic, "ana", "needs step-free access")
    bare = _seed(mem, "ana", "eats vegan food only")
    assert clinic.context("ana", QUERY).memory == other.text() and shop.memory("ana") == built
    assert clinic.forget("ana")
    assert _memories(clinic).cached("ana") is None
    assert _memories(shop).cached("ana") == built and _memories(mem).cached("ana") == bare


def test_rerank_orders_candidates_with_the_users_memory(mem: PersonaMem, watched: WatchedLLM) -> None:
    memory = _seed(mem, "ana", "eats vegan food only", "never eats dairy")
    candidates = ["a beef steak with butter", "a lentil curry with coconut milk", "a cheese pizza"]
    order = mem.rerank("ana", "a dinner recipe", candidates)
    assert sorted(order) == [0, 1, 2]
    assert order == SetwiseReranker(watched.llm).rank("a dinner recipe", memory.text(), candidates)
    assert mem.rerank("ana", "a dinner recipe", candidates, k=1) == order[:1]
    assert mem.rerank("ana", "a dinner recipe", []) == []
    assert watched.generations == 0  # scored by likelihood; the memory was current
    with pytest.raises(ValueError, match="k must be at least 1"):
        mem.rerank("ana", "x", candidates, k=0)


def test_without_a_memory_configured_the_methods_say_how_to_set_one(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as plain:
        plain.add("ana", "I'm vegan.")
        for call in (
            lambda: plain.memory("ana"),
            lambda: plain.refresh_memories(),
            lambda: plain.rerank("ana", "dinner", ["a", "b"]),
        ):
            with pytest.raises(MethodError, match=r"no preference memory configured: set .*memrerank:<"):
                call()
        assert plain.context("ana", "dinner").memory is None and plain.pipeline().memories is None


def test_the_memory_is_configured_by_name(
    tmp_path: Path, encoder: SentenceEncoder, watched: WatchedLLM
) -> None:
    choices = "choose from: none, prompted, atomic, memrerank:<folder>"
    with pytest.raises(ConfigError, match=f"unknown preference_memory 'magic'; {choices}"):
        pipeline_config({"preference_memory": "magic"})
    with pytest.raises(ConfigError, match="unknown preference_memory 'memrerank:'"):
        pipeline_config({"preference_memory": "memrerank:"})
    assert PipelineConfig(preference_memory="prompted").needs_llm
    assert not PipelineConfig(preference_memory="memrerank:ckpt").needs_llm

    with PersonaMem.open(tmp_path / "store", encoder=encoder) as no_llm:
        with pytest.raises(MethodError, match="needs a frozen LLM"):
            no_llm.pipeline(CONFIG)
        with pytest.raises(MethodError, match="needs a frozen LLM"):
            Pipeline(no_llm.store, CONFIG)
        with pytest.raises(CheckpointError, match="not a MemRerank extractor checkpoint"):
            no_llm.pipeline(PipelineConfig(preference_memory=f"memrerank:{tmp_path / 'missing'}"))
    with _open(tmp_path / "other", encoder, watched, preference_memory="prompted") as mem:
        memories = _memories(mem)
        assert memories.extractor.style == "sections" and memories.extractor.max_tokens == 32
        assert memories.extractor.llm is watched  # the backend itself: a rebuild is not metered
        assert mem.pipeline("bm25").memories is memories  # a method over the config keeps its memory
        assert memories.timeout_s == 30.0
