"""Personal-knowledge query rewriting: parsing and fallbacks (scripted LLM), shots, metrics, one real run."""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence

import numpy as np
import pytest
from pydantic import ValidationError

import personamem.rewriting
from personamem import SentenceEncoder
from personamem.datasets.benchmark import Question
from personamem.datasets.ikat import load_ikat_benchmark
from personamem.errors import RewriteFallbackWarning
from personamem.eval.rewriting import as_turn, load_ikat_turns, make_demonstrations, score_rewrites
from personamem.llm import FrozenLLM
from personamem.llm.parsing import tally_outputs
from personamem.rewriting import (
    Demonstration,
    Rewrite,
    RewriteConfig,
    Turn,
    parse_answer,
    pick_shots,
    rewrite_turns,
    selection_prf,
)
from personamem.testing import FakeLLM
from tests.conftest import DATA, need_data

IKAT = DATA / "trec_ikat"

PTKB = {
    "u1": {"1": "I'm vegetarian.", "2": "I live in Paris.", "3": "I have a dog."},
    "u2": {"1": "I'm allergic to peanuts.", "2": "I drive an electric car."},
}
QUESTIONS = [  # the gold, as the harness loads it
    Question(
        id="a_1",
        user_id="u1",
        text="Where can I eat tonight?",
        relevant={"1": 1, "2": 1},
        attributes={"resolved_utterance": "Where can I eat vegetarian food in Paris tonight?"},
    ),
    Question(
        id="b_2",
        user_id="u2",
        text="How far can it go?",
        relevant={},
        context=("Which car should I buy?",),
        attributes={"resolved_utterance": "How far can an electric car go on one charge?"},
    ),
]
TURNS = [as_turn(q) for q in QUESTIONS]  # what the rewriter sees
SAR = RewriteConfig(strategy="sar")


def _answer(text: str) -> FakeLLM:
    return FakeLLM(lambda _: text)


# --- parsing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "selected", "rewrite"),
    [
        (
            '{"selected": [1, 2], "rewrite": "vegetarian food in Paris"}',
            ("1", "2"),
            "vegetarian food in Paris",
        ),
        ('Here you go:\n```json\n{"selected": ["2"], "rewrite": "q"}\n```\nHope it helps.', ("2",), "q"),
        ("{'selected': [3], 'rewrite': 'single quotes'}", ("3",), "single quotes"),
        ('{"selected": [1, 3,], "rewrite": "trailing commas",}', ("1", "3"), "trailing commas"),
        ('{"selected": [7, "2", 2, "x", true], "rewrite": "q"}', ("2",), "q"),  # unknown, repeated, bool
        ('{"selected": [2.0, {"id": 3}, "[1]"], "rewrite": "q"}', ("2", "3", "1"), "q"),
        ('{"Selected IDs": "3, 1", "Rewritten Query": " q "}', ("3", "1"), "q"),
        ('{"selected": null, "rewrite": "none selected"}', (), "none selected"),
        ('{"selected": [], "rewrite": "q"}', (), "q"),
        ('{"other": 1} then {"selected": [1], "rewrite": "second object"}', ("1",), "second object"),
        ('{"selected": [2], "rewrite": "cut off by the token li', ("2",), None),
        ('{ "rewrite": "after a stray brace" }', None, "after a stray brace"),
        ("", None, None),
        ("I'd be happy to help you find a restaurant!", None, None),
        ('{"selected": {"a": 1}, "rewrite": "   "}', None, None),
        ('{"facts": [{"id": 1, "text": "I\'m vegetarian."}]}', None, None),  # an echo of the facts
        ("[1, 2]", None, None),
    ],
)
def test_parse_answer(text: str, selected: tuple[str, ...] | None, rewrite: str | None) -> None:
    parsed = parse_answer(text, PTKB["u1"])
    assert (parsed.selected, parsed.rewrite) == (selected, rewrite)


def test_parsed_answers_are_counted_clean_repaired_or_failed() -> None:
    with tally_outputs() as counts:
        parse_answer('{"selected": [1], "rewrite": "q"}', PTKB["u1"])
        parse_answer('```json\n{"selected": [1], "rewrite": "q"}\n```', PTKB["u1"])
        parse_answer('Sure: {"selected": [1], "rewrite": "q",}', PTKB["u1"])
        parse_answer('{"selected": [2], "rewrite": "cut off', PTKB["u1"])
        parse_answer("I'd be happy to help you find a restaurant!", PTKB["u1"])
    assert counts == {"rewrite answer clean": 2, "rewrite answer repaired": 2, "rewrite answer failed": 1}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n",
        "Sure, here is a rewrite: vegetarian restaurants in Paris",
        "```json\n```",
        '{"rewrite": ""}',
        '{"rewrite": 5, "selected": [1]}',
        "{'selected': [1], 'rewrite': ",
        "null",
        '{"query_text": "wrong key"}',
    ],
)
def test_garbled_sar_answers_fall_back_with_a_warning(text: str) -> None:
    with pytest.warns(RewriteFallbackWarning, match="a_1"):
        (out,) = rewrite_turns(_answer(text), TURNS[:1], PTKB, SAR, seed=0)
    assert out == Rewrite("a_1", TURNS[0].text, out.selected, None, fell_back=True)
    assert set(out.selected) <= {"1"}  # only a parsable selection survives the failed rewrite


def test_lenient_answers_are_used_without_warning() -> None:
    answer = "Answer:\n```json\n{'selected': [2, \"9\", 1,], 'rewrite': 'vegetarian dinner in Paris',}\n```"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = rewrite_turns(_answer(answer), TURNS, PTKB, SAR, seed=0)
    assert out[0] == Rewrite("a_1", "vegetarian dinner in Paris", ("2", "1"), None, fell_back=False)
    assert out[1].selected == ("2", "1")  # "9" names no statement of u2 either


# --- strategies and calls ------------------------------------------------------------------------


class Router:
    """Answers select prompts with a fixed selection and rewrite prompts with a fixed rewrite."""

    def __init__(self, selection: str = '{"selected": [2]}') -> None:
        self.selection = selection
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if '"selected" key lists' in prompt:
            return self.selection
        return '{"selected": [1], "rewrite": "rewritten"}'


@pytest.mark.parametrize(("strategy", "calls"), [("none", 1), ("all", 1), ("str", 2), ("sar", 1)])
def test_one_generate_call_per_step_for_the_whole_batch(strategy: str, calls: int) -> None:
    llm = FakeLLM(Router())
    out = rewrite_turns(llm, TURNS, PTKB, RewriteConfig(strategy=strategy), seed=0)
    assert llm.calls == calls
    assert [r.rewrite for r in out] == ["rewritten", "rewritten"]
    assert not any(r.fell_back for r in out)


def test_selections_per_strategy_and_what_the_rewrite_step_sees() -> None:
    for strategy, selected in [("none", ()), ("all", ("1", "2", "3")), ("str", ("2",)), ("sar", ("1",))]:
        router = Router()
        config = RewriteConfig(strategy=strategy)
        (out,) = rewrite_turns(FakeLLM(router), TURNS[:1], PTKB, config, seed=0)
        assert out.selected == selected, strategy
        rewrite_prompt = router.prompts[-1]
        listed = {key for key, text in PTKB["u1"].items() if text in rewrite_prompt}
        assert (
            listed == {"none": set(), "all": {"1", "2", "3"}, "str": {"2"}, "sar": {"1", "2", "3"}}[strategy]
        )
        assert ("Facts about the user" in rewrite_prompt) == (strategy != "none")


def test_str_with_an_empty_selection_rewrites_with_no_facts() -> None:
    router = Router(selection='{"selected": []}')
    (out,) = rewrite_turns(FakeLLM(router), TURNS[:1], PTKB, RewriteConfig(strategy="str"), seed=0)
    assert out == Rewrite("a_1", "rewritten", (), None, fell_back=False)
    assert "Facts about the user:\n(none)" in router.prompts[-1]


def test_str_garbled_selection_falls_back_but_still_rewrites() -> None:
    router = Router(selection="The facts are interesting.")
    with pytest.warns(RewriteFallbackWarning, match="no usable selection"):
        (out,) = rewrite_turns(FakeLLM(router), TURNS[:1], PTKB, RewriteConfig(strategy="str"), seed=0)
    assert out == Rewrite("a_1", "rewritten", (), None, fell_back=True)


def test_llm_error_falls_back_with_a_warning() -> None:
    with pytest.warns(RewriteFallbackWarning, match="failed on a batch of 2 turns"):
        out = rewrite_turns(FakeLLM(Router(), fail_times=1), TURNS, PTKB, SAR, seed=0)
    assert out == [Rewrite(t.id, t.text, (), None, fell_back=True) for t in TURNS]


def test_llm_error_in_str_selection_keeps_the_rewrite_step() -> None:
    llm = FakeLLM(Router(), fail_times=1)
    with pytest.warns(RewriteFallbackWarning, match="failed"):
        out = rewrite_turns(llm, TURNS, PTKB, RewriteConfig(strategy="str"), seed=0)
    assert llm.calls == 2
    assert out == [Rewrite(t.id, "rewritten", (), None, fell_back=True) for t in TURNS]


def test_response_only_when_asked_for() -> None:
    answer = '{"selected": [1], "rewrite": "q", "response": "Try Le Potager."}'
    (plain,) = rewrite_turns(_answer(answer), TURNS[:1], PTKB, SAR, seed=0)
    assert plain.response is None
    router_prompts: list[str] = []

    def respond(prompt: str) -> str:
        router_prompts.append(prompt)
        return answer

    config = RewriteConfig(strategy="sar", with_response=True)
    (with_response,) = rewrite_turns(FakeLLM(respond), TURNS[:1], PTKB, config, seed=0)
    assert with_response.response == "Try Le Potager."
    assert '"response"' in router_prompts[0]


def test_sampling_settings_reach_the_backend() -> None:
    seen: list[dict[str, object]] = []

    class Spy(FakeLLM):
        def generate(self, prompts: Sequence[object], **kwargs: object):
            seen.append(kwargs)
            return super().generate(prompts, **kwargs)

    rewrite_turns(Spy(Router()), TURNS, PTKB, RewriteConfig(max_tokens=40), seed=7)
    assert seen == [{"max_tokens": 40, "temperature": 0.7, "seed": 7}]


def test_config_is_validated() -> None:
    assert RewriteConfig().temperature == 0.7  # sampling by default: seeds matter
    for bad in (
        {"shots": -1},
        {"strategy": "best"},
        {"max_tokens": 0},
        {"with_response": True, "strategy": "str"},
    ):
        with pytest.raises(ValidationError):
            RewriteConfig(**bad)


def test_unknown_user_is_an_error() -> None:
    with pytest.raises(ValueError, match="u2"):
        rewrite_turns(FakeLLM(Router()), TURNS, {"u1": PTKB["u1"]}, SAR, seed=0)


def test_no_turns_no_calls() -> None:
    llm = FakeLLM(Router())
    assert rewrite_turns(llm, [], PTKB, RewriteConfig(strategy="str"), seed=0) == []
    assert llm.calls == 0


# --- few-shot demonstrations ---------------------------------------------------------------------


def _demos(users: Sequence[str], per_user: int = 3) -> list[Demonstration]:
    return [
        Demonstration(
            user_id=user,
            turn_id=f"{user}_{i}",
            utterance=f"utterance {user} {i}",
            context=(),
            statements={"1": f"fact of {user}", "2": f"other fact of {user}"},
            selected=("2",) if i % 2 else (),
            rewrite=f"gold rewrite {user} {i}",
        )
        for user in users
        for i in range(per_user)
    ]


def test_shots_are_deterministic_per_seed_and_never_from_the_turns_topic() -> None:
    demos = _demos(["u1", "t1", "t2", "t3"])
    picks = {seed: pick_shots(demos, TURNS[0], 3, seed) for seed in range(20)}
    for seed, shots in picks.items():
        assert shots == pick_shots(demos, TURNS[0], 3, seed)
        assert len({demo.turn_id for demo in shots}) == 3
        assert all(demo.user_id != "u1" for demo in shots)
    assert len({tuple(d.turn_id for d in shots) for shots in picks.values()}) > 1  # the seed does choose
    assert pick_shots(demos, TURNS[0], 0, 1) == ()
    with pytest.raises(ValueError, match="only 3"):
        pick_shots(_demos(["u1", "t1"]), TURNS[0], 4, 0)


def test_shots_are_shown_as_chat_exchanges_with_gold_answers() -> None:
    demos = _demos(["u1", "t1"])
    router = Router()
    config = RewriteConfig(strategy="str", shots=2)
    rewrite_turns(FakeLLM(router), TURNS[:1], PTKB, config, seed=3, examples=demos)
    shots = pick_shots(demos, TURNS[0], 2, 3)
    select, rewrite = router.prompts
    assert "utterance u1" not in select + rewrite  # the turn's own topic
    for demo in shots:
        assert f"utterance {demo.user_id}" in select
        assert f"assistant: {json.dumps({'selected': [int(k) for k in demo.selected]})}" in select
        assert f"assistant: {json.dumps({'rewrite': demo.rewrite})}" in rewrite
    # STR's rewrite demonstrations list only their gold statements ("2"), never the others ("1")
    assert "[1] fact of t1" in select and "[1] fact of t1" not in rewrite
    assert ("[2] other fact of t1" in rewrite) == any(demo.selected for demo in shots)


def test_make_demonstrations_keeps_gold_and_skips_turns_without_a_rewrite() -> None:
    turns = [*QUESTIONS, Question(id="c_1", user_id="u1", text="hi", relevant={})]
    demos = make_demonstrations(turns, PTKB)
    assert [d.turn_id for d in demos] == ["a_1", "b_2"]
    assert demos[0].selected == ("1", "2") and demos[0].rewrite.startswith("Where can I eat vegetarian")
    assert demos[1].selected == () and demos[1].context == ("Which car should I buy?",)


# --- metrics -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selected", "gold", "expected"),
    [
        ((), (), (1.0, 1.0, 1.0)),
        ((), ("1",), (0.0, 0.0, 0.0)),
        (("1",), (), (0.0, 0.0, 0.0)),
        (("1", "2"), ("2", "3"), (0.5, 0.5, 0.5)),
        (("1",), ("1", "2"), (1.0, 0.5, 2 / 3)),
        (("1", "2", "3"), ("3",), (1 / 3, 1.0, 0.5)),
        (("1",), ("2",), (0.0, 0.0, 0.0)),
    ],
)
def test_selection_prf(selected: tuple[str, ...], gold: tuple[str, ...], expected: tuple[float, ...]) -> None:
    assert selection_prf(selected, gold) == pytest.approx(expected)


class TableEncoder:
    """Looks texts up in a table of unit vectors, so cosines can be computed by hand."""

    name, dim = "table", 2

    def __init__(self, table: dict[str, tuple[float, float]]) -> None:
        self.table = table

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([self.table[t] for t in texts], dtype=np.float32)


def test_score_rewrites_by_hand() -> None:
    rewrites = [
        Rewrite("a_1", "vegetarian food Paris", ("1",)),
        Rewrite("b_2", "How far can it go?", ()),
    ]
    encoder = TableEncoder(
        {
            "vegetarian food Paris": (1.0, 0.0),
            QUESTIONS[0].attributes["resolved_utterance"]: (0.6, 0.8),
            "How far can it go?": (0.0, 1.0),
            QUESTIONS[1].attributes["resolved_utterance"]: (0.0, -1.0),
        }
    )
    scores = score_rewrites(rewrites, QUESTIONS, encoder)
    assert list(scores) == list(personamem.rewriting.METRICS)
    assert scores["selection_precision"] == {"a_1": 1.0, "b_2": 1.0}
    assert scores["selection_recall"] == {"a_1": 0.5, "b_2": 1.0}
    assert scores["selection_f1"] == pytest.approx({"a_1": 2 / 3, "b_2": 1.0})
    # a_1: 3 of the reference's 9 words, in order (P 3/3, R 3/9): F = 2 * 1 * 1/3 / (4/3) = 0.5
    # b_2: "how far can" then "go" (4 in order), P 4/5, R 4/10: F = 2 * 0.8 * 0.4 / 1.2 = 8/15
    assert scores["rouge_l"] == pytest.approx({"a_1": 0.5, "b_2": 8 / 15})
    assert scores["cosine"] == pytest.approx({"a_1": 0.6, "b_2": -1.0})


def test_score_rewrites_edge_cases(encoder: SentenceEncoder) -> None:
    no_reference = Question(id="c_1", user_id="u1", text="hi", relevant={"3": 1})
    rewrites = [
        Rewrite("a_1", str(QUESTIONS[0].attributes["resolved_utterance"]), ("2", "1")),
        Rewrite("c_1", "hi", ()),
    ]
    scores = score_rewrites(rewrites, [*QUESTIONS, no_reference], encoder)
    assert scores["selection_f1"] == {"a_1": 1.0, "c_1": 0.0}
    assert scores["rouge_l"] == {"a_1": 1.0}  # c_1 has no reference rewrite: selection scores only
    assert scores["cosine"] == {"a_1": pytest.approx(1.0, abs=1e-5)}
    with pytest.raises(ValueError, match="zz"):
        score_rewrites([Rewrite("zz", "x", ())], QUESTIONS, encoder)


# --- real data -----------------------------------------------------------------------------------


def test_ikat_turns_include_those_without_gold() -> None:
    turns, statements = load_ikat_turns(need_data(IKAT), split="2023_test")
    bench = load_ikat_benchmark(IKAT, split="2023_test")
    assert len(turns) == 231 == len(bench.questions) + len(bench.skipped)
    labelled = {q.id: q for q in bench.questions}
    assert [t.id for t in turns if t.relevant] == list(labelled)
    for turn in turns:
        if turn.id in labelled:
            expected = labelled[turn.id]
            assert (turn.text, turn.context, turn.relevant) == (
                expected.text,
                expected.context,
                expected.relevant,
            )
        assert isinstance(turn.attributes["resolved_utterance"], str)
        assert set(turn.relevant) <= set(statements[turn.user_id])
    assert set(statements) == set(bench.users())
    assert [t.id for t in turns if not str(t.attributes["resolved_utterance"]).strip()] == ["12-1_12"]


def test_ikat_train_demonstrations() -> None:
    train, statements = load_ikat_turns(need_data(IKAT), split="2023_train")
    demos = make_demonstrations(train, statements)
    assert len(demos) == len(train) == 95
    assert sum(bool(d.selected) for d in demos) == 42
    test_turns, _ = load_ikat_turns(IKAT, split="2023_test")
    assert not {d.user_id for d in demos} & {t.user_id for t in test_turns}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::personamem.errors.RewriteFallbackWarning")  # SmolLM2 often garbles JSON
def test_real_sar_zero_shot_on_three_ikat_turns(ct2_llm: FrozenLLM, encoder: SentenceEncoder) -> None:
    turns, statements = load_ikat_turns(need_data(IKAT), split="2023_test")
    sample = [t for t in turns if t.relevant][:3]
    config = RewriteConfig(strategy="sar", max_tokens=64)
    out = rewrite_turns(ct2_llm, [as_turn(t) for t in sample], statements, config, seed=0)
    assert [r.turn_id for r in out] == [t.id for t in sample]
    for rewrite, turn in zip(out, sample, strict=True):
        assert rewrite.rewrite.strip()
        assert set(rewrite.selected) <= set(statements[turn.user_id])
    scores = score_rewrites(out, sample, encoder)
    for metric, values in scores.items():
        assert len(values) == 3
        low = -1.0 if metric == "cosine" else 0.0
        assert all(low - 1e-6 <= v <= 1.0 + 1e-6 for v in values.values()), metric


def test_public_api_is_pinned() -> None:
    assert personamem.rewriting.__all__ == [
        "METRICS",
        "Demonstration",
        "ParsedAnswer",
        "Rewrite",
        "RewriteConfig",
        "RewritePersonalizer",
        "Strategy",
        "Turn",
        "parse_answer",
        "pick_shots",
        "rewrite_turns",
        "rewrite_with_statements",
        "selection_prf",
        "statements_by_user",
    ]
    for name in personamem.rewriting.__all__:
        assert getattr(personamem.rewriting, name) is not None


def test_the_rewriter_sees_a_question_as_a_turn() -> None:
    assert TURNS[1] == Turn("b_2", "u2", "How far can it go?", ("Which car should I buy?",))
