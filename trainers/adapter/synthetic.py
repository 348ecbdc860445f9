"""Label-free training queries: the packaged LLM writes a question that a sampled record answers.

A deployment rarely has gold evidence, but it has records. For a sample of each user's records the
frozen LLM is asked for the question the record answers; that (question, record) pair is a label by
construction, and the user's other records are its negatives. Questions are cached in the store's
``derived`` table (keyed by model, prompt version and record text), so a run that stops resumes
where it was, a second run pays nothing, and ``forget`` erases them with the user.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Sequence

import numpy as np
from rich.progress import Progress

from personamem.llm.base import FrozenLLM
from personamem.store import Store
from personamem.trainers.adapter.data import QuerySet

__all__ = ["NAMESPACE", "parse_question", "synthetic_queries"]

NAMESPACE = "synthetic-query"
_PROMPT_VERSION = "synq-4"
_CHUNK = 16  # records per batched generation, and per durable cache write
_MIN_WORDS = 4  # shorter records ("ok", "haha") answer no question
_MAX_WORDS = 80  # of a record, in the prompt: a long assistant reply's opening is enough to ask about


_SHOTS = (
    (
        "[3 May 2021] Maria: We finally moved to Lisbon in March, the flat is tiny but sunny.",
        "Where did Maria move to in March?",
    ),
    (
        "Tom: My knee started hurting after 15 km, so I'm skipping the half marathon.",
        "Why is Tom skipping the half marathon?",
    ),
    (
        "User: I only buy fragrance-free moisturizer because scented ones make my skin itch.",
        "Which moisturizer does the user buy?",
    ),
)


def _prompt(text: str) -> str:
    """A completion prompt with three worked pairs: a 135M model follows a pattern, not an instruction."""
    shots = "".join(f"Text: {t}\nQuestion this text answers: {q}\n\n" for t, q in _SHOTS)
    return f"{shots}Text: {' '.join(text.split()[:_MAX_WORDS])}\nQuestion this text answers:"


_PREFIX = re.compile(r"^\s*(?:question\s*:|q\s*:|\d+[.)])\s*", re.IGNORECASE)
_SCAFFOLD = re.compile(r"question this text answers|answer to the question|\btext\s*:", re.IGNORECASE)


def parse_question(answer: str) -> str | None:
    """The first line of ``answer`` that reads as a question (≥ 3 words), without labels or quotes.

    A small model stuck in a loop ("What is the answer to the question: What is the answer to the
    question: ...") or echoing the prompt's scaffolding writes no question: such lines are refused.
    """
    for line in answer.splitlines():
        line = _PREFIX.sub("", line).strip().strip("\"'*` ").strip()
        if len(line.split()) >= 3 and "?" in line:
            question = line[: line.index("?") + 1]
            return None if _SCAFFOLD.search(question) or _repeats(question) else question
    return None


def _repeats(question: str) -> bool:
    """Whether a run of three words comes back in ``question`` (a generation loop)."""
    words = re.findall(r"\w+", question.lower())
    runs = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
    return len(runs) != len(set(runs))


def synthetic_queries(
    store: Store,
    llm: FrozenLLM,
    users: Sequence[str],
    *,
    per_user: int,
    max_total: int,
    consistency_k: int | None = 20,
    seed: int = 0,
    progress: Progress | None = None,
) -> QuerySet:
    """A question per sampled record of ``users`` (``per_user`` each at most, ``max_total`` in all).

    The budget is spread evenly: each user gets ``max_total // len(users)`` records (at least one,
    at most ``per_user``); past the budget, users are drawn at random. Records are drawn by ``seed``
    among those of at least four words (a long one is shown by its first 80). A question is kept only
    if it reads as one (not a loop, not the prompt echoed), is not one its user already got, and, with
    ``consistency_k``, if the base encoder ranks its record within the user's top ``consistency_k``
    for it: a small LLM often writes a question that fits any record ("What is Joanna doing?"), and
    such a pair teaches noise.
    """
    picker = random.Random(seed)
    share = max(1, min(per_user, max_total // max(1, len(users))))
    order = sorted(users)
    random.Random(f"users-{seed}").shuffle(order)  # past the budget, users left out are drawn at random
    order = order[: max(1, max_total // share)]
    chosen: list[tuple[str, int, str]] = []  # (user, corpus row, text)
    corpora: dict[str, np.ndarray] = {}
    record_ids: dict[str, list[str]] = {}
    for user in sorted(order):
        records, vectors = store.vectors(user)
        rows = [i for i, r in enumerate(records) if len(r.text.split()) >= _MIN_WORDS]
        if not rows:
            continue
        corpora[user] = np.asarray(vectors, dtype=np.float32)
        record_ids[user] = [r.id for r in records]
        for row in sorted(picker.sample(rows, min(share, len(rows)))):
            chosen.append((user, row, records[row].text))
    chosen = chosen[:max_total]
    task = progress.add_task("synthetic questions", total=len(chosen)) if progress else None
    answers: list[str | None] = []
    for at in range(0, len(chosen), _CHUNK):
        part = chosen[at : at + _CHUNK]
        keys = [(user, _key(llm.name, text)) for user, _, text in part]

        def write(missing: list[int], part: list[tuple[str, int, str]] = part) -> list[str]:
            texts = llm.generate(
                [_prompt(part[i][2]) for i in missing], max_tokens=40, temperature=0.0, stop=("\n",)
            )
            return [group[0] for group in texts]

        answers += [parse_question(a) for a in store.derived_many(NAMESPACE, keys, write)]
        if progress is not None and task is not None:
            progress.advance(task, len(part))
    seen: set[tuple[str, str]] = set()  # one user's same question twice teaches nothing new
    kept = []
    for pick, question in zip(chosen, answers, strict=True):
        if question and (pick[0], question.lower()) not in seen:
            seen.add((pick[0], question.lower()))
            kept.append((pick, question))
    texts = [q for _, q in kept]
    queries = store.encoder.encode(texts) if texts else np.zeros((0, store.encoder.dim), "float32")
    if consistency_k is not None and kept:
        ranks = [
            int((corpora[user] @ vector > corpora[user][row] @ vector).sum())
            for ((user, row, _), _), vector in zip(kept, queries, strict=True)
        ]
        consistent = [i for i, rank in enumerate(ranks) if rank < consistency_k]
        kept, texts, queries = (
            [kept[i] for i in consistent],
            [texts[i] for i in consistent],
            queries[consistent],
        )
    asked = {user for (user, _, _), _ in kept}
    return QuerySet(
        "synthetic",
        [user for (user, _, _), _ in kept],
        np.asarray(queries, dtype=np.float32),
        [np.asarray([row], dtype=np.int64) for (_, row, _), _ in kept],
        {u: c for u, c in corpora.items() if u in asked},
        texts,
        record_ids,
        asked=len(chosen),
    )


def _key(model: str, text: str) -> str:
    payload = [_PROMPT_VERSION, model, hashlib.sha256(text.encode()).hexdigest()]
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()
