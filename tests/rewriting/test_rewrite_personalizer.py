"""RewritePersonalizer: query rewriting from the user's knowledge records, behind the personalizer seam.

Control flow (cache, fallbacks, isolation, budgets) runs on a real store with the real encoder and the
scripted fake LLM; one test runs the real local model.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from personamem import PersonaMem
from personamem.errors import RewriteFallbackWarning
from personamem.llm import TransformersLLM
from personamem.llm.base import Generations
from personamem.personalize import QueryPersonalizer
from personamem.pipeline import Pipeline, PipelineConfig
from personamem.retrieval import Preparable
from personamem.rewriting import RewritePersonalizer
from personamem.testing import FakeLLM

QUERY = "where should we eat tonight?"
SAR_ANSWER = json.dumps({"selected": [1], "rewrite": "vegan restaurants open tonight"})


class Recorder:
    """Scripted answers that remember every rendered prompt."""

    def __init__(self, answer: str = SAR_ANSWER) -> None:
        self.answer = answer
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.answer


@pytest.fixture
def knowing(mem: PersonaMem) -> PersonaMem:
    """ana: two knowledge records and a note; bo: one knowledge record; cy: notes only."""
    mem.add("ana", "I'm vegan and avoid dairy.", kind="knowledge")
    mem.add("ana", "I live in Lyon.", kind="knowledge")
    mem.add("ana", "Booked a table at Chez Paul last week.", kind="note")
    mem.add("bo", "I love steak houses.", kind="knowledge")
    mem.add("cy", "I cycle to work every day.", kind="note")
    return mem


def _vector(mem: PersonaMem, text: str) -> np.ndarray:
    return mem.store.encoder.encode([text])[0]


def test_rewrites_with_the_users_knowledge_and_caches_it(knowing: PersonaMem) -> None:
    recorder = Recorder()
    llm = FakeLLM(recorder)
    personalizer = RewritePersonalizer(knowing.store, llm)
    assert isinstance(personalizer, QueryPersonalizer) and isinstance(personalizer, Preparable)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vector = personalizer.personalize("ana", QUERY)
    assert llm.calls == 1
    assert np.allclose(vector, _vector(knowing, "vegan restaurants open tonight"), atol=1e-6)
    # the prompt lists ana's knowledge records, numbered, and nothing else of anyone's
    (prompt,) = recorder.prompts
    assert "[1] I'm vegan and avoid dairy." in prompt and "[2] I live in Lyon." in prompt
    assert "Chez Paul" not in prompt and "steak" not in prompt
    assert f"Latest message: {QUERY}" in prompt and "Earlier messages from the user:\n(none)" in prompt

    # a cache hit, for this instance and a new one on the same store: the LLM is not asked again
    assert personalizer.rewrite("ana", QUERY) == "vegan restaurants open tonight"
    again = RewritePersonalizer(knowing.store, llm).personalize("ana", QUERY)
    assert llm.calls == 1 and np.allclose(again, vector)
    # another seed, strategy, temperature or query is another key
    RewritePersonalizer(knowing.store, llm, seed=1).rewrite("ana", QUERY)
    RewritePersonalizer(knowing.store, llm, "all").rewrite("ana", QUERY)
    RewritePersonalizer(knowing.store, llm, temperature=0.5).rewrite("ana", QUERY)
    personalizer.rewrite("ana", "and for lunch?")
    assert llm.calls == 5


def test_a_changed_knowledge_base_asks_again(knowing: PersonaMem) -> None:
    llm = FakeLLM(Recorder())
    personalizer = RewritePersonalizer(knowing.store, llm)
    personalizer.rewrite("ana", QUERY)
    knowing.add("bo", "I drive an electric car.", kind="knowledge")  # someone else's: still cached
    personalizer.rewrite("ana", QUERY)
    assert llm.calls == 1
    knowing.add("ana", "I have two kids.", kind="knowledge")
    personalizer.rewrite("ana", QUERY)
    assert llm.calls == 2


def test_users_without_knowledge_never_reach_the_llm(knowing: PersonaMem) -> None:
    llm = FakeLLM(Recorder())
    personalizer = RewritePersonalizer(knowing.store, llm)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for user in ("cy", "nobody"):
            assert np.allclose(personalizer.personalize(user, QUERY), _vector(knowing, QUERY), atol=1e-6)
        personalizer.prepare([("cy", QUERY), ("nobody", "x")])
    assert llm.calls == 0


def test_another_users_knowledge_never_appears_in_the_prompt(knowing: PersonaMem) -> None:
    recorder = Recorder()
    personalizer = RewritePersonalizer(knowing.store, FakeLLM(recorder))
    personalizer.prepare([("bo", QUERY), ("ana", QUERY)])
    bo_prompt, ana_prompt = sorted(recorder.prompts, key=lambda p: "steak" not in p)
    assert "steak" in bo_prompt and "vegan" not in bo_prompt and "Lyon" not in bo_prompt
    assert "steak" not in ana_prompt and "vegan" in ana_prompt


def test_a_failing_llm_gives_the_raw_query_and_is_not_cached(knowing: PersonaMem) -> None:
    llm = FakeLLM(Recorder(), fail_times=1)
    personalizer = RewritePersonalizer(knowing.store, llm)
    with pytest.warns(RewriteFallbackWarning, match="LLM failed"):
        vector = personalizer.personalize("ana", QUERY)
    assert np.allclose(vector, _vector(knowing, QUERY), atol=1e-6)
    # the failure was not kept: the next call asks again and gets the rewrite
    assert personalizer.rewrite("ana", QUERY) == "vegan restaurants open tonight"
    assert llm.calls == 2


@pytest.mark.parametrize("answer", ["I'd love to help!", "", '{"selected": [1], "rewrite": "   "}'])
def test_an_unusable_answer_gives_the_raw_query_and_warns_on_every_hit(
    knowing: PersonaMem, answer: str
) -> None:
    llm = FakeLLM(Recorder(answer))
    personalizer = RewritePersonalizer(knowing.store, llm)
    with pytest.warns(RewriteFallbackWarning, match="no usable .*rewrite"):
        vector = personalizer.personalize("ana", QUERY)
    assert np.allclose(vector, _vector(knowing, QUERY), atol=1e-6)
    with pytest.warns(RewriteFallbackWarning, match="cached answer .* raw query"):
        assert personalizer.rewrite("ana", QUERY) == QUERY
    assert llm.calls == 1  # the same inputs give the same answer: it is not asked twice


def test_prepare_batches_then_personalize_reads_the_cache(knowing: PersonaMem) -> None:
    llm = FakeLLM(Recorder())
    personalizer = RewritePersonalizer(knowing.store, llm)
    requests = [("ana", QUERY), ("bo", QUERY), ("ana", "and for lunch?"), ("ana", QUERY), ("cy", QUERY)]
    personalizer.prepare(requests)
    assert llm.calls == 1  # one batched call; the repeated request asked once; cy needs no call
    assert personalizer.rewrites(requests) == [*["vegan restaurants open tonight"] * 4, QUERY]
    personalizer.personalize("bo", QUERY)
    assert llm.calls == 1


def test_str_selects_then_rewrites_with_only_the_selected_statements(knowing: PersonaMem) -> None:
    prompts: list[str] = []

    def route(prompt: str) -> str:
        prompts.append(prompt)
        if '"selected" key lists' in prompt:
            return '{"selected": [2]}'
        return '{"rewrite": "restaurants in Lyon tonight"}'

    llm = FakeLLM(route)
    assert (
        RewritePersonalizer(knowing.store, llm, "str").rewrite("ana", QUERY) == "restaurants in Lyon tonight"
    )
    select, rewrite = prompts
    assert "vegan" in select and "Lyon" in select
    assert "[2] I live in Lyon." in rewrite and "vegan" not in rewrite
    assert llm.calls == 2


def test_the_all_strategy_lists_every_statement_in_one_call(knowing: PersonaMem) -> None:
    recorder = Recorder('{"rewrite": "vegan food in Lyon tonight"}')
    llm = FakeLLM(recorder)
    assert (
        RewritePersonalizer(knowing.store, llm, "all").rewrite("ana", QUERY) == "vegan food in Lyon tonight"
    )
    assert llm.calls == 1 and "vegan" in recorder.prompts[0] and "Lyon" in recorder.prompts[0]


def test_statements_beyond_the_context_window_keep_the_most_similar(mem: PersonaMem) -> None:
    fillers = [f"Fact number {i}: I collected {i} old stamps from distant countries." for i in range(60)]
    texts = [*fillers[:30], "I'm allergic to peanuts.", *fillers[30:]]
    mem.add_many([{"text": text, "kind": "knowledge"} for text in texts], user_id="dee")

    class SmallWindow(FakeLLM):
        context_window = 600

    recorder = Recorder()
    personalizer = RewritePersonalizer(mem.store, SmallWindow(recorder), max_tokens=64)
    personalizer.rewrite("dee", "is this snack safe for my peanut allergy?")
    (prompt,) = recorder.prompts
    assert "allergic to peanuts" in prompt
    shown = prompt.count("Fact number")
    assert 0 < shown < len(fillers)
    assert len(prompt.split()) <= 600 - 64  # the fake counts words as tokens

    class TinyWindow(FakeLLM):
        context_window = 100

    tiny = TinyWindow(Recorder())
    with pytest.warns(RewriteFallbackWarning, match="none of the user's 61 statements fits"):
        assert RewritePersonalizer(mem.store, tiny, max_tokens=64).rewrite("dee", "peanuts?") == "peanuts?"
    assert tiny.calls == 0


def test_the_constructor_refuses_what_it_cannot_run(knowing: PersonaMem) -> None:
    for bad in ({"strategy": "none"}, {"strategy": "best"}, {"temperature": -0.1}, {"max_tokens": 0}):
        with pytest.raises(ValueError):
            RewritePersonalizer(knowing.store, FakeLLM(), **bad)  # type: ignore[arg-type]


def test_runs_behind_the_pipeline(knowing: PersonaMem) -> None:
    personalizer = RewritePersonalizer(knowing.store, FakeLLM(Recorder()))
    pipeline = Pipeline(knowing.store, PipelineConfig(first_stage="dense"), personalizer=personalizer)
    hits = pipeline.search("ana", QUERY, k=2)
    assert len(hits) == 2 and {h.record.user_id for h in hits} == {"ana"}


def test_the_runtime_personalizer_does_not_import_the_harness() -> None:
    code = (
        "import sys, personamem.rewriting.personalizer, personamem.rewriting; "
        "print(sorted(m for m in sys.modules if m.startswith(('personamem.eval', 'personamem.trainers'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class Counting:
    """A real LLM that counts its generate calls."""

    def __init__(self, llm: TransformersLLM) -> None:
        self.llm = llm
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.llm, name)

    def generate(self, prompts: Sequence[Any], **kwargs: Any) -> Generations:
        self.calls += 1
        return self.llm.generate(prompts, **kwargs)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.filterwarnings("ignore::personamem.errors.RewriteFallbackWarning")  # a 135M model garbles JSON
def test_with_the_real_llm(knowing: PersonaMem, llm: TransformersLLM) -> None:
    counting = Counting(llm)
    personalizer = RewritePersonalizer(knowing.store, counting, max_tokens=48)  # type: ignore[arg-type]
    vector = personalizer.personalize("ana", QUERY)
    again = personalizer.personalize("ana", QUERY)
    assert vector.shape == (knowing.store.encoder.dim,) and np.isfinite(vector).all()
    assert np.linalg.norm(vector) > 0.5  # a unit vector from the encoder: normalizable
    assert counting.calls == 1 and np.allclose(vector, again)
    assert personalizer.rewrite("ana", QUERY).strip()
