"""The frozen LLM as a relevance judge: a probability that a record helps answer a question.

PG-Ret's reward and the harness's judged precision both read this number, so the judge is scored
against a benchmark's gold labels (:func:`calibrate`) before anyone trusts a reward built on it.
Two ways to ask, both one forward pass per pair:

* ``yes-no``: the log-likelihoods of "Yes" and "No" after a relevance question. On LoCoMo this is
  at chance with SmolLM2-135M (AUC 0.49 against gold) and barely above with Qwen2.5-0.5B (0.58):
  small chat models answer from a prior, not from the note.
* ``query-likelihood`` (the default): how much the note raises the log-likelihood of the question,
  log P(question | note) − log P(question | no note), as in zero-shot question-generation
  rerankers. SmolLM2-135M reaches AUC 0.71 on the same pairs, at 4 pairs per second on 2 cores.

Either way the judge returns a margin in nats; only its order matters, since the relevant/irrelevant
threshold comes from the gold (a sigmoid would saturate: a note holding the answer raises the
question's log-likelihood by tens of nats). Verdicts are cached by (model, mode, prompt version,
question, record text): training asks about the same pairs again and again as the policy's top-k
settles.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from personamem.llm.base import FrozenLLM, Message, Prompt

__all__ = [
    "PROMPT_VERSION",
    "JudgeCalibration",
    "JudgeMode",
    "RelevanceJudge",
    "calibrate",
    "judge_auc",
    "labelled_pairs",
    "question_prompt",
    "relevance_prompt",
]

JudgeMode = Literal["query-likelihood", "yes-no"]

PROMPT_VERSION = "relevance-v1"
"""Part of every cache key: a reworded prompt never reuses verdicts of the old one."""

_SYSTEM = "You judge whether a remembered note about a person helps answer a question about them."
_RECORD_CHARS = 600


def relevance_prompt(question: str, record: str) -> list[Message]:
    """The yes/no prompt; the answer's first token is scored, nothing is generated."""
    text = " ".join(record.split())
    if len(text) > _RECORD_CHARS:
        text = text[: _RECORD_CHARS - 3].rstrip() + "..."
    user = (
        f"Question: {question.strip()}\n\nNote: {text}\n\n"
        "Does the note contain information that helps answer the question? Answer Yes or No."
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


def question_prompt(record: str | None) -> str:
    """The query-likelihood context: the note (None: no note), then the question is scored."""
    text = " ".join((record or "(nothing)").split())
    if len(text) > _RECORD_CHARS:
        text = text[: _RECORD_CHARS - 3].rstrip() + "..."
    return f"Note about a person: {text}\nA question this note answers:"


class RelevanceJudge:
    """Relevance margins (nats) from the frozen LLM's log-likelihoods; higher is more relevant.

    Args:
        llm: the frozen LLM (a local backend: a server that only generates cannot score).
        mode: query-likelihood (how much the note raises the question's log-likelihood) or yes-no.
        cache_file: a JSON-lines file of verdicts kept across runs (None: this process only).
        batch_size: pairs per ``loglikelihood`` call (the backend batches within it).

    Attributes:
        scored: pairs the LLM scored; hits: pairs answered from the cache.
    """

    def __init__(
        self,
        llm: FrozenLLM,
        *,
        mode: JudgeMode = "query-likelihood",
        cache_file: Path | None = None,
        batch_size: int = 64,
    ) -> None:
        self.llm = llm
        self.mode = mode
        self.batch_size = batch_size
        self.cache_file = cache_file
        self.scored = 0
        self.hits = 0
        self._cache: dict[str, float] = {}
        self._unconditioned: dict[str, float] = {}  # log P(question | no note), per question
        if cache_file is not None and cache_file.is_file():
            for line in cache_file.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                    self._cache[row["key"]] = float(row["margin"])
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a crash: that verdict is simply asked again

    def margins(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """The relevance margin of each (question, record text) pair."""
        keys = [self._key(q, r) for q, r in pairs]
        missing = list(dict.fromkeys(k for k in keys if k not in self._cache))
        self.hits += len(keys) - len(missing)
        pair_of = dict(zip(keys, pairs, strict=True))
        for start in range(0, len(missing), self.batch_size):  # each batch is kept as soon as scored
            chunk = missing[start : start + self.batch_size]
            fresh = dict(zip(chunk, self._margins([pair_of[key] for key in chunk]), strict=True))
            self.scored += len(fresh)
            self._cache.update(fresh)
            self._append(fresh)
        return [self._cache[k] for k in keys]

    def _margins(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Log P(Yes) − log P(No), or log P(question | note) − log P(question | no note)."""
        if self.mode == "yes-no":
            requests: list[tuple[Prompt, str]] = [
                (relevance_prompt(q, r), answer) for q, r in pairs for answer in ("Yes", "No")
            ]
            scores = self.llm.loglikelihood(requests)
            return [scores[2 * i] - scores[2 * i + 1] for i in range(len(pairs))]
        new = list(dict.fromkeys(q for q, _ in pairs if q not in self._unconditioned))
        asked: list[tuple[Prompt, str]] = [(question_prompt(r), " " + q.strip()) for q, r in pairs]
        asked += [(question_prompt(None), " " + q.strip()) for q in new]
        scores = self.llm.loglikelihood(asked)
        self._unconditioned.update(zip(new, scores[len(pairs) :], strict=True))
        return [scores[i] - self._unconditioned[q] for i, (q, _) in enumerate(pairs)]

    def _key(self, question: str, record: str) -> str:
        key = [self.llm.name, self.mode, PROMPT_VERSION, question, record]
        digest = hashlib.sha256(json.dumps(key).encode())
        return digest.hexdigest()[:32]

    def _append(self, fresh: dict[str, float]) -> None:
        if self.cache_file is None:
            return
        self.cache_file.parent.mkdir(parents=True, exist_ok=True)
        with self.cache_file.open("a", encoding="utf-8") as f:
            f.writelines(json.dumps({"key": k, "margin": m}) + "\n" for k, m in fresh.items())


def judge_auc(margins: Sequence[float], labels: Sequence[bool]) -> float:
    """ROC AUC of the judge's margins against gold labels (0.5: chance, 1: perfect).

    Raises:
        ValueError: the labels are all one class (AUC is undefined).
    """
    from scipy.stats import mannwhitneyu

    positive = [m for m, y in zip(margins, labels, strict=True) if y]
    negative = [m for m, y in zip(margins, labels, strict=True) if not y]
    if not positive or not negative:
        raise ValueError("judge AUC needs both relevant and irrelevant pairs")
    # the Mann-Whitney U of the positives, over all pairs, is the AUC (ties count a half)
    return float(mannwhitneyu(positive, negative).statistic) / (len(positive) * len(negative))


@dataclass(frozen=True)
class JudgeCalibration:
    """How the judge agrees with gold, and the yes/no threshold taken from it.

    Attributes:
        auc: ROC AUC against the gold labels.
        threshold: the margin at or above which a pair counts as relevant (maximizes TPR − FPR).
        tpr: share of gold pairs judged relevant at the threshold.
        fpr: share of non-gold pairs judged relevant at the threshold.
        pairs: labelled pairs measured.
    """

    auc: float
    threshold: float
    tpr: float
    fpr: float
    pairs: int

    def to_json(self) -> dict[str, float]:
        """For checkpoints and reports."""
        return asdict(self)


def calibrate(margins: Sequence[float], labels: Sequence[bool]) -> JudgeCalibration:
    """The judge's AUC and the threshold maximizing Youden's J (TPR − FPR) on labelled pairs.

    A small model's margins are not centred at zero (SmolLM2 leans towards "No" whatever the
    note), so the threshold comes from the gold rather than being fixed.
    """
    auc = judge_auc(margins, labels)
    positives = sum(labels)
    negatives = len(labels) - positives
    best = (-math.inf, 0.5, 0.0, 0.0)
    for threshold in sorted(set(margins)):
        tpr = sum(m >= threshold for m, y in zip(margins, labels, strict=True) if y) / positives
        fpr = sum(m >= threshold for m, y in zip(margins, labels, strict=True) if not y) / negatives
        if tpr - fpr > best[0]:
            best = (tpr - fpr, threshold, tpr, fpr)
    return JudgeCalibration(auc, best[1], best[2], best[3], len(labels))


def labelled_pairs(
    questions: Sequence[tuple[str, Sequence[str], Sequence[str]]],
    *,
    per_kind: int = 2,
    rng: random.Random | None = None,
) -> tuple[list[tuple[str, str]], list[bool]]:
    """Gold-labelled (question, record text) pairs to calibrate the judge on.

    Each item is (question, gold texts, non-gold texts ranked best first by a retriever). Per
    question: up to ``per_kind`` gold records, the ``per_kind`` best-ranked non-gold records (hard
    negatives, the kind a retriever confuses) and one further non-gold record at random (drawn by
    ``rng``, default seed 0).
    """
    rng = rng or random.Random(0)
    pairs, labels = [], []
    for question, gold, others in questions:
        hard, rest = list(others[:per_kind]), list(others[per_kind:])
        easy = rng.sample(rest, min(1, len(rest)))
        for text, label in [*((g, True) for g in gold[:per_kind]), *((t, False) for t in [*hard, *easy])]:
            pairs.append((question, text))
            labels.append(label)
    return pairs, labels
