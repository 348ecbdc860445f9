"""PURPLE's Plackett–Luce policy and record scorer (no LLM: pure probability and shape checks)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from personamem import SentenceEncoder
from personamem.profile.purple import PurpleConfig
from personamem.profile.purple.model import RecordScorer, collate, encode_candidates
from personamem.profile.purple.policy import plackett_luce_log_prob, plackett_luce_sample
from personamem.profile.purple.states import RecordStateCache

WEIGHTS = torch.tensor([0.9, 0.1, 0.5, 0.3, 0.7])


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_probabilities_of_all_k_permutations_sum_to_one(k: int) -> None:
    orders = torch.tensor(list(itertools.permutations(range(5), k)))
    probs = plackett_luce_log_prob(WEIGHTS.expand(len(orders), -1), orders).exp()
    assert float(probs.sum()) == pytest.approx(1.0, abs=1e-5)


def test_log_prob_by_hand() -> None:
    # draw 0 (0.9 of 2.5), then 4 (0.7 of the remaining 1.6)
    expected = math.log(0.9 / 2.5) + math.log(0.7 / 1.6)
    assert float(plackett_luce_log_prob(WEIGHTS, torch.tensor([0, 4]))) == pytest.approx(expected, rel=1e-5)


def test_sampler_frequencies_match_the_probabilities() -> None:
    draws = plackett_luce_sample(WEIGHTS, 2, 40_000, torch.Generator().manual_seed(0))
    assert all(len(set(row.tolist())) == 2 for row in draws[:100])  # without replacement
    counts: dict[tuple[int, ...], int] = {}
    for row in draws.tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    for order in itertools.permutations(range(5), 2):
        p = float(plackett_luce_log_prob(WEIGHTS, torch.tensor(order)).exp())
        sd = math.sqrt(p * (1 - p) / len(draws))
        assert abs(counts.get(order, 0) / len(draws) - p) < 5 * sd + 1e-4, order


def test_zero_weight_candidates_are_never_drawn() -> None:
    weights = torch.tensor([0.5, 0.0, 0.2, 0.0])
    draws = plackett_luce_sample(weights, 2, 1000, torch.Generator().manual_seed(1))
    assert set(draws.flatten().tolist()) == {0, 2}
    with pytest.raises(ValueError, match=r"k must be in 1\.\.2"):
        plackett_luce_sample(weights, 3, 1)


def _batch(encoder: SentenceEncoder, config: PurpleConfig) -> dict[str, torch.Tensor]:
    texts = ["I'm vegan.", "My sister lives in Porto.", "I run every morning before work.", "I hate olives."]
    return collate(
        [
            encode_candidates(encoder, "what should I cook?", texts, config),
            encode_candidates(encoder, "where does my sister live?", texts[:3], config),
        ]
    )


def test_scorer_is_a_permutation_equivariant_propensity(encoder: SentenceEncoder) -> None:
    config = PurpleConfig(layers=1, rank_prior=0.0)  # the paper's scorer: the candidates are a set
    torch.manual_seed(0)
    scorer = RecordScorer(config).eval()
    batch = _batch(encoder, config)
    out = scorer(**batch)
    assert out.shape == (2, 4) and out[1, 3] == 0.0  # the second example has 3 candidates
    assert bool(((out[0] > 0) & (out[0] < 1)).all())
    perm = torch.tensor([2, 0, 3, 1])
    shuffled = {**batch, "records": batch["records"][:1, perm], "record_mask": batch["record_mask"][:1, perm]}
    shuffled |= {k: batch[k][:1] for k in ("query", "query_mask", "candidate_mask")}
    assert torch.allclose(scorer(**shuffled)[0], out[0, perm], atol=1e-5)  # no positional encoding


def test_a_new_scorer_with_the_rank_prior_keeps_the_first_stage_order(encoder: SentenceEncoder) -> None:
    torch.manual_seed(0)
    scorer = RecordScorer(PurpleConfig(layers=1)).eval()  # rank_prior = 1 by default
    out = scorer(**_batch(encoder, PurpleConfig(layers=1)))
    assert torch.equal(out[0].argsort(descending=True), torch.arange(4))
    assert torch.allclose(out[0], 1 / (1 + torch.arange(4.0)))  # exp(−log(1 + rank))
    assert torch.equal(out[1, :3].argsort(descending=True), torch.arange(3)) and out[1, 3] == 0.0
    trained = RecordScorer(PurpleConfig(layers=1))
    for parameter in trained.head.parameters():  # once the head has learned something, content counts
        torch.nn.init.normal_(parameter)
    assert not torch.allclose(trained.eval()(**_batch(encoder, PurpleConfig(layers=1)))[0], out[0])


def test_ablations_drop_their_modules(encoder: SentenceEncoder) -> None:
    full = RecordScorer(PurpleConfig(layers=1))
    bare = RecordScorer(PurpleConfig(layers=1, cross_attention=False, record_transformer=False))
    assert bare.cross is None and bare.records is None
    assert sum(p.numel() for p in bare.parameters()) < sum(p.numel() for p in full.parameters())
    config = PurpleConfig(cross_attention=False, record_transformer=False)
    assert bare(**_batch(encoder, config)).shape == (2, 4)


def test_cached_record_states_match_fresh_ones_and_skip_the_encoder(encoder: SentenceEncoder) -> None:
    config = PurpleConfig(max_record_tokens=6)
    texts = ["I'm vegan.", "My sister lives in Porto and works at the harbour office.", "I hate olives."]
    cache = RecordStateCache(encoder, config.max_record_tokens, capacity=3)
    fresh = encoder.encode_tokens(texts)  # the encoder's own states, before any cut or cache
    cut = config.max_record_tokens
    cached = encode_candidates(encoder, "what should I cook?", texts, config, cache)
    assert (cache.hits, cache.misses) == (0, 3)
    again = encode_candidates(encoder, "where does my sister live?", texts[::-1], config, cache)
    assert (cache.hits, cache.misses) == (3, 3)  # a new query reuses every record's states
    assert torch.equal(again.records, cached.records.flip(0)[:, : again.records.shape[1]])
    assert torch.equal(cached.record_mask, fresh.mask[:, :cut][:, : cached.record_mask.shape[1]])
    assert int(cached.record_mask[1].sum()) == 6 < int(fresh.mask[1].sum())  # cut to max_record_tokens
    real = fresh.mask[:, : cached.records.shape[1]]
    assert torch.allclose(
        cached.records[real].float(), fresh.states[:, : cached.records.shape[1]][real], atol=2e-2
    )


def test_record_state_cache_evicts_the_least_recently_used(encoder: SentenceEncoder) -> None:
    cache = RecordStateCache(encoder, 8, capacity=2)
    cache.states(["a", "b"])
    cache.states(["a"])  # "a" is now the most recent
    cache.states(["c"])
    assert len(cache) == 2
    cache.states(["a", "b"])
    assert (cache.hits, cache.misses) == (2, 4)  # "a" stayed, "b" was evicted and re-encoded
    with pytest.raises(ValueError, match="another encoder, token cut or input"):
        encode_candidates(encoder, "q", ["a"], PurpleConfig(), cache)
    with pytest.raises(ValueError, match="capacity"):
        RecordStateCache(encoder, 8, capacity=0)


def test_a_scorer_on_vectors_reads_the_sentence_vectors_and_starts_at_the_first_stage(
    encoder: SentenceEncoder,
) -> None:
    config = PurpleConfig(layers=1, inputs="vectors")
    batch = _batch(encoder, config)
    assert batch["records"].shape == (2, 4, 1, 384) and batch["query"].shape == (2, 1, 384)
    texts = ["I'm vegan.", "My sister lives in Porto.", "I run every morning before work.", "I hate olives."]
    assert torch.allclose(batch["records"][0, :, 0], torch.from_numpy(encoder.encode(texts)), atol=1e-3)
    torch.manual_seed(0)
    scorer = RecordScorer(config).eval()
    assert scorer.cross is None and scorer.pair is not None
    out = scorer(**batch)
    assert torch.allclose(out[0], 1 / (1 + torch.arange(4.0))) and out[1, 3] == 0.0
    given = encode_candidates(
        encoder, "what should I cook?", texts, config, query_vector=encoder.encode(["x"])[0]
    )
    assert torch.allclose(given.query[0].float(), torch.from_numpy(encoder.encode(["x"])[0]), atol=1e-3)
    with pytest.raises(ValueError, match="another encoder, token cut or input"):
        encode_candidates(encoder, "q", texts, config, RecordStateCache(encoder, config.max_record_tokens))
