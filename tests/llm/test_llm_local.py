"""The transformers backend with the real default model (SmolLM2-135M-Instruct)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from personamem.llm import FrozenLLM, Scores, TransformersLLM, fit_to_budget
from personamem.llm.base import Prompt
from personamem.llm.tokens import encode_pair

VEGETARIAN = [{"role": "user", "content": "I'm vegetarian. What should I cook tonight? Answer in one line."}]
REQUESTS = [
    ("The capital of France is", " Paris"),
    ("The capital of France is", " Berlin, which is in Germany"),
    ("Q: What is 2 + 2?\nA:", " 4"),
    (VEGETARIAN, "A lentil and spinach curry."),
    (VEGETARIAN, "A juicy beef steak."),
    ("Once upon a time there was a very long prompt " * 6, " and it ended."),
    ("x", " y"),
]


def _token_by_token(llm: TransformersLLM, prompt, target: str) -> list[float]:
    """Reference: each target token scored from its own unbatched, unpadded prefix."""
    context, continuation = encode_pair(llm.tokenizer, llm.render(prompt), target, llm.context_window)
    values = []
    for i, token in enumerate(continuation):
        with torch.inference_mode():
            logits = llm.model(input_ids=torch.tensor([context + continuation[:i]])).logits[0, -1]
        values.append(torch.log_softmax(logits.double(), dim=-1)[token].item())  # exact normaliser
    return values


def test_is_a_frozen_llm(llm: TransformersLLM) -> None:
    assert isinstance(llm, FrozenLLM)
    assert llm.context_window == 8192
    assert llm.count_tokens("hello world") == 2


def test_batched_scores_equal_token_by_token(llm: TransformersLLM) -> None:
    scores = llm.loglikelihood(REQUESTS)
    assert isinstance(scores, Scores) and len(scores) == len(REQUESTS)
    for (prompt, target), total, per_token in zip(REQUESTS, scores, scores.token_logprobs, strict=True):
        reference = _token_by_token(llm, prompt, target)
        assert per_token == pytest.approx(reference, abs=1e-4)
        assert total == pytest.approx(sum(reference), abs=1e-4)
    assert scores.usage.prompt_tokens > 0 and scores.usage.completion_tokens == 0


def test_scores_do_not_depend_on_batch_company(llm: TransformersLLM) -> None:
    alone = llm.loglikelihood([REQUESTS[2]])[0]
    assert llm.loglikelihood(REQUESTS)[2] == pytest.approx(alone, abs=1e-4)


def test_log_likelihood_separates_good_from_bad_targets(llm: TransformersLLM) -> None:
    scores = llm.loglikelihood(REQUESTS)
    assert scores[0] > scores[1]  # Paris vs Berlin
    assert scores[3] > scores[4]  # the vegetarian's curry vs steak


def test_overlong_and_empty_targets_are_refused(llm: TransformersLLM) -> None:
    with pytest.raises(ValueError, match="window"):
        llm.loglikelihood([("word " * 9000, " end")])
    with pytest.raises(ValueError, match="no tokens"):
        llm.loglikelihood([("prompt", "")])


def test_greedy_generation_is_deterministic(llm: TransformersLLM) -> None:
    prompts = ["The three primary colours are", VEGETARIAN]
    first = llm.generate(prompts, max_tokens=12)
    assert first.texts == llm.generate(prompts, max_tokens=12).texts
    assert [len(g) for g in first] == [1, 1] and all(g[0].strip() for g in first)
    assert first.usage.completion_tokens > 0 and first.usage.prompt_tokens > 0


def test_generation_in_several_batches_keeps_each_prompts_answer(llm: TransformersLLM) -> None:
    prompts = ["The three primary colours are", VEGETARIAN, "Q: What is 2 + 2?\nA:"]
    alone = [llm.generate([p], max_tokens=8)[0] for p in prompts]
    chunked = TransformersLLM(llm.model, llm.tokenizer, name=llm.name, generate_rows=2)
    assert chunked.generate(prompts, max_tokens=8).texts == alone  # left padding changes no answer


def test_seeded_sampling_is_reproducible_and_n_gives_n(llm: TransformersLLM) -> None:
    kwargs = {"n": 3, "max_tokens": 10, "temperature": 0.9, "seed": 7}
    first = llm.generate(["Once upon a time"], **kwargs)
    assert len(first[0]) == 3
    assert first.texts == llm.generate(["Once upon a time"], **kwargs).texts
    assert first.texts != llm.generate(["Once upon a time"], **{**kwargs, "seed": 8}).texts


def test_stop_strings_cut_the_text(llm: TransformersLLM) -> None:
    text = llm.generate(["List: 1. apples\n2."], max_tokens=20)[0][0]
    cut = llm.generate(["List: 1. apples\n2."], max_tokens=20, stop=["\n"])[0][0]
    assert "\n" not in cut and text.startswith(cut)


@settings(max_examples=40, deadline=None)
@given(
    items=st.lists(st.text(min_size=0, max_size=60), max_size=12),
    budget=st.integers(min_value=0, max_value=80),
    separator=st.sampled_from(["\n", " | ", ""]),
)
def test_fit_to_budget_never_overflows_and_keeps_order(
    llm: TransformersLLM, items: list[str], budget: int, separator: str
) -> None:
    fitted = fit_to_budget(items, budget, llm.count_tokens, separator=separator)
    assert fitted.kept + fitted.dropped == items  # a prefix is kept, the rest dropped, order intact
    assert fitted.text == separator.join(fitted.kept)
    assert fitted.tokens == llm.count_tokens(fitted.text) <= budget
    if fitted.dropped:  # maximal: adding the next item would overflow
        assert llm.count_tokens(separator.join([*fitted.kept, fitted.dropped[0]])) > budget


def test_the_profile_flips_which_answer_is_likelier(llm: TransformersLLM) -> None:
    targets = ["A lentil and spinach curry.", "A juicy beef steak."]

    def scores(profile: str) -> list[float]:
        ask = [{"role": "user", "content": f"{profile} What should I cook tonight?"}]
        return list(llm.loglikelihood([(ask, t) for t in targets]))

    curry, steak = scores("I'm vegetarian.")
    assert curry > steak
    curry, steak = scores("I love barbecue and smoking meat.")
    assert steak > curry


ITEMS = [
    "A waterproof hiking jacket with taped seams.",
    "A cast-iron pan for searing steaks.",
    "A plant-based cookbook of quick weeknight dinners.",
    "A bargain bin of discounted board games.",
    "A first-class rail pass for the Alps.",
    "A reusable bamboo lunch box.",
    "A leather-bound diary.",
]


def _choice_reference(llm: TransformersLLM, prompt, labels: str) -> list[float]:
    """Reference: the labels' log-probabilities from one unbatched, uncached forward of the prompt."""
    context, _ = encode_pair(llm.tokenizer, llm.render(prompt), labels[0], llm.context_window)
    with torch.inference_mode():
        logits = llm.model(input_ids=torch.tensor([context]), use_cache=False).logits[0, -1].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    return [logprobs[llm.tokenizer.encode(label)[0]].item() for label in labels]


def _choices() -> list[tuple[Prompt, str]]:
    from personamem.preference.setwise import setwise_prompt

    memory, request = "- hikes every weekend\n- vegan", "a present for my friend"
    return [
        (setwise_prompt(request, memory, ITEMS[:5]), "ABCDE"),
        (setwise_prompt(request, memory, ITEMS[2:7]), "ABCDE"),
        (setwise_prompt(request, memory, ITEMS[2:7]), "ABCDE"),  # the same choice again
        (setwise_prompt(request, memory.replace("vegan", "vegetarian"), ITEMS[2:7]), "ABCDE"),
        (setwise_prompt("what should I cook?", memory, ITEMS[1:4]), "ABC"),
        ("Pick one. A. tea B. coffee\nAnswer with one letter:", "AB"),  # no chat template
    ]


@pytest.fixture(scope="module")
def choice_references(llm: TransformersLLM) -> list[list[float]]:
    """The reference scores of :func:`_choices`, computed once for every prefix-cache budget."""
    return [_choice_reference(llm, prompt, labels) for prompt, labels in _choices()]


@pytest.mark.parametrize("budget", [2048, 160, 100, 0])  # all, one, no prompt kept; off
def test_choices_run_only_the_tokens_after_a_cached_prefix_and_score_as_uncached(
    llm: TransformersLLM, choice_references: list[list[float]], budget: int
) -> None:
    fresh = TransformersLLM(llm.model, llm.tokenizer, name=llm.name, prefix_cache_tokens=budget)
    choices, references = _choices(), choice_references
    run: list[int] = []  # tokens each forward pass runs, seen by a hook on the real model
    hook = llm.model.register_forward_pre_hook(
        lambda _module, _args, kwargs: run.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    try:
        scores = [list(fresh.loglikelihood([(p, label) for label in labels])) for p, labels in choices]
    finally:
        hook.remove()
    for got, reference in zip(scores, references, strict=True):
        assert got == pytest.approx(reference, abs=1e-4)
    lengths = [len(encode_pair(llm.tokenizer, llm.render(p), "A", llm.context_window)[0]) for p, _ in choices]
    if budget < lengths[0]:  # no setwise prompt fits the budget
        assert run == lengths
        return
    assert scores[2] == scores[1]  # exactly: a repeat is answered from the kept logits
    assert run[0] == lengths[0] and run[-1] == lengths[-1]  # nothing cached yet; nothing in common
    assert run[1] < lengths[1] - 32  # the system prompt, memory and request were reused
    assert len(run) == len(choices) - 1  # the same prompt again ran nothing
    assert lengths[3] - 32 > run[2] > run[1]  # the memory changed at its last word: less is reused
    assert run[3] < lengths[4] - 32  # the request changed: the system prompt and memory are reused
