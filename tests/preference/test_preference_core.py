"""The preference memory's format, the extractor's prompt, the setwise reranker and its heap sort."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from personamem.llm.base import Generations, Prompt, Scores
from personamem.llm.hf import TransformersLLM
from personamem.preference import (
    PreferenceMemory,
    PromptedExtractor,
    SetwiseReranker,
    heap_top_k,
    memory_quality,
    parse_memory,
)
from personamem.preference.setwise import Outcomes, setwise_prompt, shuffled
from personamem.records import Record

IDS = ["r-a", "r-b", "r-c"]


def test_an_answer_in_the_format_parses_clean_with_evidence_mapped_to_record_ids() -> None:
    answer = (
        "WITHIN skincare:\n- likes unscented creams [1, 3]\n- avoids oily serums [2]\n"
        "CROSS:\n- buys in bulk [3]"
    )
    parsed = parse_memory(answer, IDS)
    assert parsed.rejected is None and not parsed.repaired
    assert [(s.text, s.evidence) for s in parsed.within["skincare"]] == [
        ("likes unscented creams", ("r-a", "r-c")),
        ("avoids oily serums", ("r-b",)),
    ]
    assert [(s.text, s.evidence) for s in parsed.cross] == [("buys in bulk", ("r-c",))]


def test_labels_naming_no_shown_line_are_dropped_so_evidence_is_only_the_users_records() -> None:
    parsed = parse_memory("WITHIN:\n- likes tea [2, 7, 0]", IDS, default_category="drinks")
    assert parsed.within["drinks"][0].evidence == ("r-b",)
    assert parsed.notes == ["2 evidence label(s) named no history line and were dropped"]


def test_bullets_without_headers_are_repaired_into_the_within_section_and_said_so() -> None:
    parsed = parse_memory(
        "Sure! Here it is:\n- likes tea\n* likes tea\n1. hates coffee", IDS, default_category="x"
    )
    assert [s.text for s in parsed.within["x"]] == ["likes tea", "hates coffee"]  # the repeat is dropped
    assert parsed.notes == ["no section header: bulleted lines read as the within-category section"]
    atomic = parse_memory("- likes tea", IDS, expect_headers=False)
    assert atomic.notes == [] and [s.text for s in atomic.within[""]] == ["likes tea"]


@pytest.mark.parametrize(
    ("answer", "reason"), [("", "empty answer"), ("I like it.", "no bulleted statements found")]
)
def test_an_answer_without_statements_is_rejected_with_the_reason(answer: str, reason: str) -> None:
    parsed = parse_memory(answer, IDS)
    assert parsed.rejected == reason and not parsed.within and not parsed.cross


def test_the_word_budget_drops_whole_statements_from_the_end() -> None:
    parsed = parse_memory("WITHIN a:\n- one two three\n- four five\nCROSS:\n- six", IDS, max_words=4)
    assert [s.text for s in parsed.within["a"]] == ["one two three"]
    assert [s.text for s in parsed.cross] == ["six"]
    assert parsed.notes == ["1 statement(s) past the 4-word budget were dropped"]


def test_the_llm_sees_the_memory_without_evidence_and_the_audit_form_keeps_it() -> None:
    parsed = parse_memory(
        "WITHIN shoes:\n- wide fit [1]\nWITHIN books:\n- sci-fi [2]\nCROSS:\n- gifts [3]", IDS
    )
    memory = PreferenceMemory("u", within=parsed.within, cross=parsed.cross, revision="r1", extractor="x")
    assert memory.text() == "WITHIN shoes:\n- wide fit\nWITHIN books:\n- sci-fi\nCROSS:\n- gifts"
    assert memory.text("Books", cross=False) == "WITHIN books:\n- sci-fi"
    assert memory.text("") == memory.text()  # an item of no known category sees every section
    assert "(evidence: r-a)" in memory.audit_text()
    assert memory.evidence_ids == ["r-a", "r-b", "r-c"] and memory.words == 4
    assert PreferenceMemory.from_json(memory.to_json()) == memory


class _Counting:
    """The real LLM, counting generations (to show that an empty history costs no call)."""

    def __init__(self, llm: TransformersLLM) -> None:
        self.llm, self.generations = llm, 0
        self.name, self.context_window, self.count_tokens = llm.name, llm.context_window, llm.count_tokens

    def loglikelihood(self, requests: Sequence[tuple[Prompt, str]]) -> Scores:
        return self.llm.loglikelihood(requests)

    def generate(self, prompts: Sequence[Prompt], **kwargs: object) -> Generations:
        self.generations += 1
        return self.llm.generate(prompts, **kwargs)  # type: ignore[arg-type]


def test_the_extractor_shows_the_newest_records_that_fit_and_an_empty_history_costs_no_call(
    llm: TransformersLLM,
) -> None:
    counting = _Counting(llm)
    extractor = PromptedExtractor(counting, history_tokens=60, max_tokens=24)  # type: ignore[arg-type]
    records = [
        Record(user_id="u", id=f"r{i}", text=f"review number {i} " * 5, category="Beauty") for i in range(9)
    ]
    prompt = extractor.prompt(records)
    assert prompt.shown_ids and prompt.shown_ids == [r.id for r in records[-len(prompt.shown_ids) :]]
    assert len(prompt.shown_ids) < len(records)
    assert "WITHIN beauty:" in prompt.messages[1]["content"]
    empty = extractor.extract("u", "rev", [])
    assert empty.empty and counting.generations == 0
    memory = extractor.extract("u", "rev", records)
    assert counting.generations == 1 and memory.revision == "rev"
    assert set(memory.evidence_ids) <= set(prompt.shown_ids)


def test_one_token_targets_after_a_shared_prompt_score_as_they_would_one_by_one(llm: TransformersLLM) -> None:
    prompt = setwise_prompt("a gift", "- likes tea", ["green tea", "a hammer", "socks"])
    together = llm.loglikelihood([(prompt, "A"), (prompt, "B"), (prompt, "C"), (prompt, "The answer")])
    alone = [llm.loglikelihood([(prompt, t)])[0] for t in ("A", "B", "C", "The answer")]
    assert together.logprobs == pytest.approx(alone, abs=1e-4)


def test_five_rotations_cancel_a_pure_position_bias(llm: TransformersLLM) -> None:
    same = ["a plain white t-shirt"] * 5
    biased = SetwiseReranker(llm).choice_probabilities("", "", same)
    assert max(biased) > 0.3  # the small model favours a letter
    fair = SetwiseReranker(llm, shifts=5).choice_probabilities("", "", same)
    assert fair == pytest.approx([0.2] * 5, abs=1e-9)
    assert math.isclose(sum(fair), 1.0)


def test_rank_returns_every_candidate_once_and_counts_its_choices(llm: TransformersLLM) -> None:
    reranker = SetwiseReranker(llm)
    items = [f"item {i}" for i in range(7)]
    order = reranker.rank("something", "", items)
    assert sorted(order) == list(range(7)) and reranker.calls >= 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(), min_size=0, max_size=40, unique=True), st.integers(1, 40))
def test_the_heap_of_five_way_choices_equals_a_full_sort_for_a_consistent_comparator(
    values: list[int], k: int
) -> None:
    calls = 0

    def best_of(group: list[int]) -> int:
        nonlocal calls
        assert 2 <= len(group) <= 5
        calls += 1
        return max(group, key=lambda i: values[i])

    n = len(values)
    top = heap_top_k(n, k, best_of)
    assert top == sorted(range(n), key=lambda i: -values[i])[:k]
    depth = math.ceil(math.log(n, 4)) if n > 1 else 0
    assert calls <= max(n - 1, 0) + min(k, n) * depth  # the bound the module states


class _Judge:
    """A scripted judge for the ranking's control flow: each letter's log-likelihood is the hidden value
    of the item it labels (items are "item <index>"), so the judge is consistent, or noisy with ``noise``.
    """

    name, context_window = "judge", 4096

    def __init__(self, values: Sequence[float], noise: float = 0.0, seed: int = 0) -> None:  # log-odds
        self.values, self.noise, self.rng = values, noise, random.Random(seed)
        self.items_shown = 0

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def loglikelihood(self, requests: Sequence[tuple[Prompt, str]]) -> Scores:
        shown = re.findall(r"^([A-E])\. item (\d+)$", str(requests[0][0][-1]["content"]), re.M)
        self.items_shown += len(shown)
        value = {letter: self.values[int(i)] + self.rng.gauss(0, self.noise) for letter, i in shown}
        scores = [value[target] for _, target in requests]
        return Scores(scores, [[s] for s in scores])

    def generate(self, prompts: Sequence[Prompt], **options: object) -> Generations:
        raise AssertionError("likelihood mode never generates")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-40, 40), min_size=1, max_size=30, unique=True), st.integers(1, 30))
def test_ranking_with_the_orders_choices_showed_equals_a_full_sort_and_shows_fewer_items(
    values: list[int], k: int
) -> None:
    judge = _Judge(values)
    items = [f"item {i}" for i in range(len(values))]
    top = SetwiseReranker(judge).rank("q", "", items, k=k)  # type: ignore[arg-type]
    assert top == sorted(range(len(values)), key=lambda i: -values[i])[:k]
    plain = _Judge(values)  # the same heap asking about every item of every group
    reranker = SetwiseReranker(plain)  # type: ignore[arg-type]
    heap_top_k(len(items), k, lambda g: g[reranker.best_of("q", "", [items[i] for i in g])])
    assert judge.items_shown <= plain.items_shown


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 30), st.integers(0, 1000))
def test_a_noisy_judge_still_gets_a_full_ranking_and_the_known_orders_stay_acyclic(n: int, seed: int) -> None:
    judge = _Judge([float(i) for i in range(n)], noise=10.0, seed=seed)
    seen: list[Outcomes] = []
    original = Outcomes.record

    def record(self: Outcomes, group: Sequence[int], probabilities: Sequence[float]) -> int:
        seen.append(self)
        return original(self, group, probabilities)

    Outcomes.record = record  # type: ignore[method-assign]
    try:
        order = SetwiseReranker(judge).rank("q", "", [f"item {i}" for i in range(n)])  # type: ignore[arg-type]
    finally:
        Outcomes.record = original  # type: ignore[method-assign]
    assert sorted(order) == list(range(n))
    outcomes = seen[-1]  # the ranking's one record of what its choices showed
    assert all(item not in _reachable(outcomes, item) for item in range(n))  # nothing beats itself


def _reachable(outcomes: Outcomes, start: int) -> set[int]:
    found: set[int] = set()
    stack = [start]
    while stack:
        for loser in outcomes.beats.get(stack.pop(), ()):
            if loser not in found:
                found.add(loser)
                stack.append(loser)
    return found


def test_contenders_drop_what_an_earlier_choice_settled() -> None:
    outcomes = Outcomes()
    assert outcomes.record([3, 1, 4], [0.2, 0.5, 0.3]) == 1  # 1 > 4 > 3
    assert outcomes.contenders([3, 4, 7]) == [4, 7]  # 3 lost to 4; 7 is unknown
    assert outcomes.contenders([3, 4]) == [4]  # settled: no choice needed
    assert outcomes.record([0, 2], [0.5, 0.5]) == 0  # a tie decides the choice but says nothing more
    assert outcomes.contenders([0, 2]) == [0, 2]


def test_shuffled_is_a_seeded_permutation_with_the_map_back() -> None:
    items = list("abcde")
    shown, order = shuffled(items, 3)
    assert [items[i] for i in order] == shown and sorted(order) == list(range(5))
    assert shuffled(items, 3) == (shown, order)


def test_calibration_divides_by_the_blank_items_prior_scored_once_per_request_and_memory(
    llm: TransformersLLM,
) -> None:
    items = ["green tea", "a hammer", "wool socks"]
    plain = SetwiseReranker(llm).choice_probabilities("a gift", "- likes tea", items)
    calibrated = SetwiseReranker(llm, calibrate=True)
    first = calibrated.choice_probabilities("a gift", "- likes tea", items)
    prior = calibrated._priors[("a gift", "- likes tea", 3)]
    expected = [p / q for p, q in zip(plain, prior, strict=True)]
    assert first == pytest.approx([e / sum(expected) for e in expected], abs=1e-9)
    calibrated.choice_probabilities("a gift", "- likes tea", list(reversed(items)))
    assert len(calibrated._priors) == 1


def test_an_answer_past_the_word_budget_fails_concise() -> None:
    parsed = parse_memory("WITHIN a:\n- one two three\n- four five", IDS, max_words=4)
    assert parsed.over_budget == 1
    assert memory_quality(parsed, []).checks["concise"] == 0
    assert (
        memory_quality(parse_memory("WITHIN a:\n- one two three", IDS, max_words=4), []).checks["concise"]
        == 1
    )
