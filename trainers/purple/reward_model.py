"""A learned stand-in for PURPLE's LLM reward, cheap enough to ask thousands of times in a run.

The LLM reward (:class:`.reward.LLMReward`) costs about 0.75 s a profile on two CPU cores, so 20
steps of 4 × 8 profiles were all a sitting could afford. Here the LLM scores a fixed sample of
profiles once (around the first stage's order, where the policy starts), and a small model learns to
reproduce those scores. The reward is the log-likelihood of the true answer, and it moves most when
the profile holds a record that states the answer, so R̂ reads each record against the answer as
well as the query (training knows the answer; the selector it trains never sees it):

    R̂(x, y, P) = Σ_k w_k · u(f(p_k)) + h(max_k f_answer(p_k)) + β · mean cos(p_i, p_j)

with f a record's cosine to the answer and to the query (the encoder's sentence vectors), the share
of the answer's words it holds, its first-stage rank and the query's cosine to the answer; u and h
small MLPs, w a weight per profile slot and β a price on redundancy. A first version on the query and
record vectors alone (1,154 inputs) fitted its 80 training questions and agreed with the LLM on
held-out questions no better than chance (Spearman −0.02, gold AUC 0.46). R̂ is fitted to rewards
centred within each question, because PURPLE's advantages are normalized within a question and only
that order matters. How far it can stand in is measured on held-out questions (:func:`agreement`):
rank correlation and pairwise agreement with the LLM, and how well each ranks the profiles holding a
gold record.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
from torch import nn

from personamem.encoder import Encoder
from personamem.errors import CheckpointError
from personamem.records import Record
from personamem.trainers.purple.data import ProfileExample
from personamem.trainers.purple.reward import Key

__all__ = [
    "Agreement",
    "DistilledReward",
    "RewardModel",
    "agreement",
    "fit_reward_model",
    "load_reward_model",
    "sample_profiles",
    "save_reward_model",
]


FEATURES = 5
"""Per record: cos(record, answer), the answer's words it holds, cos(record, query), log(1 + rank),
cos(query, answer)."""

_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in ENGLISH_STOP_WORDS}


class RewardModel(nn.Module):
    """R̂ from features of each record against the query and the true answer; see the module docstring."""

    def __init__(self, hidden: int = 32, slots: int = 5) -> None:
        super().__init__()
        self.hidden = hidden
        self.utility = nn.Sequential(nn.Linear(FEATURES, hidden), nn.GELU(), nn.Linear(hidden, 1))
        self.held = nn.Sequential(nn.Linear(2, hidden), nn.GELU(), nn.Linear(hidden, 1))
        self.slots = nn.Parameter(torch.ones(slots))
        self.redundancy = nn.Parameter(torch.zeros(()))

    def forward(self, features: torch.Tensor, records: torch.Tensor) -> torch.Tensor:
        """``(B,)`` scores of profiles: ``features`` ``(B, K, FEATURES)``, ``records`` ``(B, K, dim)``.

        Σ_k w_k·u(record k), plus a term on the best answer match in the profile (holding the answer
        once is what counts), plus β times the records' mean pairwise cosine (redundancy).
        """
        k = records.shape[1]
        score = (self.utility(features).squeeze(-1) * self.slots[:k]).sum(-1)
        score = score + self.held(features[..., :2].max(dim=1).values).squeeze(-1)
        if k < 2:
            return score
        similarity = records @ records.transpose(1, 2)
        off_diagonal = similarity.sum((1, 2)) - similarity.diagonal(dim1=1, dim2=2).sum(-1)
        return score + self.redundancy * off_diagonal / (k * (k - 1))


class _Vectors:
    """Sentence vectors of queries, answers and records, encoded once per text."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder
        self._known: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> torch.Tensor:
        new = [t for t in dict.fromkeys(texts) if t not in self._known]
        for start in range(0, len(new), 256):
            chunk = new[start : start + 256]
            self._known.update(zip(chunk, self.encoder.encode(chunk), strict=True))
        return torch.from_numpy(np.stack([self._known[t] for t in texts])).float()


def _tensors(
    vectors: _Vectors, requests: Sequence[tuple[ProfileExample, Sequence[Record]]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Features ``(B, K, FEATURES)`` and record vectors ``(B, K, dim)`` of equal-length profiles."""
    k = len(requests[0][1])
    query = vectors([example.query for example, _ in requests])[:, None]
    answer = vectors([example.answer for example, _ in requests])[:, None]
    records = vectors([r.text for _, profile in requests for r in profile]).view(len(requests), k, -1)
    rows = []
    for example, profile in requests:
        rank = {r.id: i for i, r in enumerate(example.candidates)}
        wanted = _words(example.answer)
        rows.append(
            [
                [len(wanted & _words(r.text)) / len(wanted) if wanted else 0.0, math.log1p(rank[r.id])]
                for r in profile
            ]
        )
    lexical = torch.tensor(rows)
    features = torch.stack(
        [
            (records * answer).sum(-1),
            lexical[..., 0],
            (records * query).sum(-1),
            lexical[..., 1],
            (query * answer).sum(-1).expand(-1, k),
        ],
        dim=-1,
    )
    return features, records


class DistilledReward:
    """A :data:`~.trainer.RewardFn` answered by a fitted :class:`RewardModel` (no LLM)."""

    def __init__(self, model: RewardModel, encoder: Encoder) -> None:
        self.model = model.eval()
        self.vectors = _Vectors(encoder)

    def __call__(self, requests: Sequence[tuple[ProfileExample, Sequence[Record]]]) -> list[float]:
        """R̂ for each (example, profile in order), profiles of one length scored as one batch."""
        scores = [0.0] * len(requests)
        by_length: dict[int, list[int]] = {}
        for i, (_, profile) in enumerate(requests):
            by_length.setdefault(len(profile), []).append(i)
        with torch.inference_mode():
            for indices in by_length.values():
                out = self.model(*_tensors(self.vectors, [requests[i] for i in indices]))
                for i, value in zip(indices, out.tolist(), strict=True):
                    scores[i] = float(value)
        return scores


def sample_profiles(
    examples: Sequence[ProfileExample], k: int, per_example: int, seed: int
) -> list[tuple[ProfileExample, list[Record]]]:
    """``per_example`` distinct profiles of each example, drawn where PURPLE starts.

    The first stage's top ``k``, then Plackett–Luce draws under weights 1 / (2 + rank): a little
    flatter than the untrained scorer's 1 / (1 + rank), so R̂ learns the region training begins in
    and some way around it.
    """
    rng = random.Random(seed)
    out = []
    for example in examples:
        n = len(example.candidates)
        size = min(k, n)
        weights = [1.0 / (2.0 + rank) for rank in range(n)]
        seen = {tuple(range(size)): None}  # a dict keeps the draws in order, the top k first
        tries = 0
        while len(seen) < per_example and tries < 20 * per_example:
            tries += 1
            left, drawn = list(range(n)), []
            for _ in range(size):
                pick = rng.choices(left, weights=[weights[i] for i in left])[0]
                left.remove(pick)
                drawn.append(pick)
            seen[tuple(drawn)] = None
        out += [(example, [example.candidates[i] for i in order]) for order in seen]
    return out


def _grouped(
    examples: Sequence[ProfileExample], scores: dict[Key, float]
) -> list[tuple[ProfileExample, list[list[Record]], list[float]]]:
    """Per example: its scored profiles and their rewards (examples with fewer than two left out)."""
    by_id = {e.id: e for e in examples}
    groups: dict[str, tuple[list[list[Record]], list[float]]] = {}
    for (example_id, ids), reward in scores.items():
        example = by_id.get(example_id)
        if example is None:
            continue
        records = {r.id: r for r in example.candidates}
        if all(i in records for i in ids):
            profiles, rewards = groups.setdefault(example_id, ([], []))
            profiles.append([records[i] for i in ids])
            rewards.append(reward)
    return [(by_id[i], p, r) for i, (p, r) in groups.items() if len(p) >= 2]


def fit_reward_model(
    examples: Sequence[ProfileExample],
    scores: dict[Key, float],
    encoder: Encoder,
    *,
    epochs: int = 300,
    lr: float = 3e-3,
    weight_decay: float = 1e-4,
    seed: int = 0,
    on_epoch: Callable[[int, float], None] | None = None,
) -> RewardModel:
    """Fit R̂ to the LLM's rewards, centred within each example (Huber loss, full batch, Adam).

    Raises:
        ValueError: fewer than two examples with two or more scored profiles.
    """
    groups = _grouped(examples, scores)
    if len(groups) < 2:
        raise ValueError(
            f"need scored profiles of at least 2 examples to fit a reward model, got {len(groups)}"
        )
    torch.manual_seed(seed)
    vectors = _Vectors(encoder)
    slots = max(len(p) for _, profiles, _ in groups for p in profiles)
    model = RewardModel(slots=slots)
    batches = []
    for example, profiles, rewards in groups:
        target = torch.tensor(rewards) - float(np.mean(rewards))
        batches.append((_tensors(vectors, [(example, p) for p in profiles]), target))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    loss_fn = nn.HuberLoss(delta=2.0)
    for epoch in range(epochs):
        model.train()
        total = torch.zeros(())
        for tensors, target in batches:
            predicted = model(*tensors)
            total = total + loss_fn(predicted - predicted.mean(), target)
        loss = total / len(batches)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if on_epoch is not None:
            on_epoch(epoch, float(loss))
    return model.eval()


@dataclass(frozen=True)
class Agreement:
    """How well R̂ stands in for the LLM on some questions' scored profiles.

    Attributes:
        questions: questions with two or more scored profiles.
        spearman: mean rank correlation of R̂ with the LLM's reward within a question.
        pairwise: the chance R̂ orders two profiles of a question as the LLM does (ties: half).
        gold_auc_model: the chance R̂ scores a profile holding a gold record above one without (same
            question); None without such pairs.
        gold_auc_llm: the same for the LLM's reward.
    """

    questions: int
    spearman: float
    pairwise: float
    gold_auc_model: float | None
    gold_auc_llm: float | None


def _concordance(
    predicted: Sequence[float], truth: Sequence[float], pairs: list[tuple[int, int]]
) -> list[float]:
    """Per pair (i, j): 1 when ``predicted`` orders it as ``truth`` does, ½ on a predicted tie, else 0."""
    return [
        0.5
        if predicted[i] == predicted[j]
        else float((predicted[i] - predicted[j]) * (truth[i] - truth[j]) > 0)
        for i, j in pairs
    ]


def _above(scores: Sequence[float], pairs: list[tuple[int, int]]) -> list[float]:
    """Per pair (i, j): 1 when ``scores`` puts i above j, ½ on a tie, else 0 (an AUC's terms)."""
    return [0.5 if scores[i] == scores[j] else float(scores[i] > scores[j]) for i, j in pairs]


def agreement(
    reward: DistilledReward, examples: Sequence[ProfileExample], scores: dict[Key, float]
) -> Agreement:
    """R̂ against the LLM's cached rewards on ``examples`` (held-out questions).

    Raises:
        ValueError: no example with two or more scored profiles.
    """
    from scipy.stats import spearmanr

    groups = _grouped(examples, scores)
    if not groups:
        raise ValueError("no held-out question has two or more scored profiles")
    rhos: list[float] = []
    agree: list[float] = []
    gold_model: list[float] = []
    gold_llm: list[float] = []
    for example, profiles, rewards in groups:
        predicted = reward([(example, p) for p in profiles])
        if len(set(rewards)) > 1 and len(set(predicted)) > 1:
            rhos.append(float(spearmanr(predicted, rewards).statistic))
        differ = [(i, j) for i in range(len(rewards)) for j in range(i) if rewards[i] != rewards[j]]
        agree += _concordance(predicted, rewards, differ)
        holds = [bool(example.gold & {r.id for r in p}) for p in profiles]
        mixed = [(i, j) for i in range(len(holds)) for j in range(len(holds)) if holds[i] and not holds[j]]
        gold_model += _above(predicted, mixed)
        gold_llm += _above(rewards, mixed)
    return Agreement(
        questions=len(groups),
        spearman=float(np.mean(rhos)) if rhos else float("nan"),
        pairwise=float(np.mean(agree)) if agree else float("nan"),
        gold_auc_model=float(np.mean(gold_model)) if gold_model else None,
        gold_auc_llm=float(np.mean(gold_llm)) if gold_llm else None,
    )


def save_reward_model(model: RewardModel, folder: Path) -> None:
    """The fitted R̂ as safetensors beside its shape (so a resumed run need not refit)."""
    import json

    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors")
    )
    shape = {"hidden": model.hidden, "slots": int(model.slots.numel())}
    (folder / "config.json").write_text(json.dumps(shape) + "\n", encoding="utf-8")


def load_reward_model(folder: Path) -> RewardModel:
    """A R̂ written by :func:`save_reward_model`.

    Raises:
        CheckpointError: the folder holds no reward model, or one of another shape (an older version):
            delete it and the run refits one from its ``rewards.jsonl`` without asking the LLM again.
    """
    import json

    from safetensors.torch import load_file

    try:
        model = RewardModel(**json.loads((folder / "config.json").read_text(encoding="utf-8")))
        model.load_state_dict(load_file(str(folder / "model.safetensors")))
    except (OSError, ValueError, TypeError, RuntimeError) as error:
        raise CheckpointError(
            f"{folder}: not a reward model this version reads ({error}); delete the folder to refit it "
            "from rewards.jsonl"
        ) from None
    return model.eval()
