"""MemRerank's evaluation: the same setwise reranker, fed each kind of memory, on held-out choices.

Every method answers the same 1-in-n choices (:mod:`personamem.datasets.choice`) through one
:class:`~personamem.preference.SetwiseReranker`; only what the reranker is told about the user
changes:

* ``none``: nothing.
* ``raw``: the user's newest records, as lines, fit to ``raw_tokens`` of the reranker's tokenizer
  (the pipeline's default context budget).
* ``dense-top5``: the five records closest to the request by cosine (needs a request).
* ``prompted`` / ``atomic``: the untrained extractor's sectioned memory / one fact per line.
* ``memrerank:<folder>``: a trained extractor checkpoint.
* ``raw-matched:<method>``: the raw history cut, per user, to as many tokens as ``<method>``'s memory
  (the memory exists to save tokens, so it should beat raw history of its own length).

A memory is built once per user and method (greedy decoding, so seeds do not change it) and kept in
``memories.jsonl`` beside the report, and each instance's choices in ``choices.jsonl``, so a rerun
resumes. Seeds change the order the candidates are
shown in, which the small models are sensitive to (they favour the first letter): mean ± std over
seeds, paired t-tests over instances against ``none``.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from personamem.datasets import ChoiceInstance
from personamem.encoder import Encoder
from personamem.eval.runner import MethodRun
from personamem.eval.stats import compare, summarize
from personamem.llm.base import FrozenLLM
from personamem.llm.budget import fit_to_budget
from personamem.preference.extractor import PromptedExtractor
from personamem.preference.setwise import SetwiseReranker, shuffled

__all__ = [
    "MEMORY_METHODS",
    "MemoryEvalReport",
    "MemoryText",
    "build_memories",
    "check_method",
    "evaluate_choices",
    "memory_key",
]

MEMORY_METHODS = ("none", "raw", "dense-top5", "prompted", "atomic")
"""Methods by name; ``memrerank:<folder>`` names a trained extractor and ``raw-matched:<method>`` the
raw history cut to that method's memory length, per user, besides these."""
RAW_MATCHED = "raw-matched:"
METRICS = ("accuracy", "mrr", "p_positive")


@dataclass(frozen=True)
class MemoryText:
    """What one method tells the reranker about one user, and what it cost."""

    text: str
    words: int
    seconds: float
    audit: str = ""
    notes: tuple[str, ...] = ()


def build_memories(
    method: str,
    instances: Sequence[ChoiceInstance],
    *,
    llm: FrozenLLM,
    encoder: Encoder,
    extractor_llm: FrozenLLM | None = None,
    raw_tokens: int = 512,
    cache: Path | None = None,
    progress: Callable[[int], None] | None = None,
    batch_size: int = 8,
) -> dict[str, MemoryText]:
    """Instance id -> the method's memory for that instance's user (read from ``cache`` when there).

    ``llm`` is the reranker's (its tokenizer counts the raw history); ``extractor_llm`` writes the
    prompted and atomic memories (default: ``llm``).
    """
    key = memory_key(method, extractor_llm or llm)
    done = _read_cache(cache, key)
    todo = [i for i in instances if i.id not in done]
    if method == "none":
        done.update({i.id: MemoryText("", 0, 0.0) for i in todo})
    elif method == "raw":
        for instance in todo:
            text = _raw_history(instance, raw_tokens, llm)
            done[instance.id] = MemoryText(text, len(text.split()), 0.0)
    elif method.startswith(RAW_MATCHED):
        # derived from the other method's (cached) memories, so never cached itself
        other = build_memories(
            method.removeprefix(RAW_MATCHED),
            instances,
            llm=llm,
            encoder=encoder,
            extractor_llm=extractor_llm,
            raw_tokens=raw_tokens,
            cache=cache,
            batch_size=batch_size,
        )
        matched = {}
        for instance in instances:
            tokens = llm.count_tokens(other[instance.id].text)
            text = _raw_history(instance, tokens, llm) if tokens else ""
            matched[instance.id] = MemoryText(text, len(text.split()), 0.0)
        if progress is not None:
            progress(len(instances))
        return matched
    elif method == "dense-top5":
        for instance in todo:
            if not instance.query:
                raise ValueError("dense-top5 needs a request; this benchmark's instances have none")
            vectors = encoder.encode([instance.query, *(r.text for r in instance.history)])
            best = np.argsort(-(vectors[1:] @ vectors[0]))[:5]
            text = "\n".join(f"- {instance.history[int(j)].text}" for j in best)
            done[instance.id] = MemoryText(text, len(text.split()), 0.0)
    else:
        extractor = _extractor(method, extractor_llm or llm)
        # one extraction per history: PersonaBench asks each of its 4 users about 10 questions
        histories: dict[tuple[str, tuple[str, ...]], list[ChoiceInstance]] = {}
        for instance in todo:
            histories.setdefault((instance.user_id, tuple(r.id for r in instance.history)), []).append(
                instance
            )
        groups = list(histories.values())
        for start in range(0, len(groups), batch_size):
            batch = groups[start : start + batch_size]
            memories = extractor.extract_many([(g[0].user_id, None, g[0].history) for g in batch])
            for group, memory in zip(batch, memories, strict=True):
                for instance in group:
                    text = memory.text(instance.category)
                    done[instance.id] = MemoryText(
                        text, len(text.split()), memory.seconds, memory.audit_text(), tuple(memory.notes)
                    )
                    _append_cache(cache, key, instance.id, done[instance.id])
            if progress is not None:
                progress(sum(len(group) for group in batch))
        return done
    for instance in todo:
        _append_cache(cache, key, instance.id, done[instance.id])
    if progress is not None:
        progress(len(todo))
    return done


def memory_key(method: str, writer: FrozenLLM) -> str:
    """What names a method's memories in the caches: the extractor's model too, where one writes them."""
    extracted = method.removeprefix(RAW_MATCHED) in ("prompted", "atomic")
    return f"{method}@{writer.name}" if extracted else method


def _raw_history(instance: ChoiceInstance, tokens: int, llm: FrozenLLM) -> str:
    """The user's newest records as lines, fit to ``tokens`` of ``llm``'s tokenizer.

    Whole lines, newest first; when not even the newest fits (a PersonaBench session against a
    40-token memory), its first words that do, so a budget is never answered with nothing.
    """
    lines = [f"- {r.text}" for r in reversed(instance.history)]
    fitted = fit_to_budget(lines, tokens, llm.count_tokens, render=lambda t: t)
    if fitted.kept or not lines:
        return fitted.text
    words = lines[0].split()
    low, high = 0, len(words)  # the longest word prefix within the budget, by bisection
    while low < high:
        middle = (low + high + 1) // 2
        if llm.count_tokens(" ".join(words[:middle])) <= tokens:
            low = middle
        else:
            high = middle - 1
    return " ".join(words[:low])


def _extractor(method: str, llm: FrozenLLM) -> PromptedExtractor:
    if method in ("prompted", "atomic"):
        return PromptedExtractor(llm, style="sections" if method == "prompted" else "atomic")
    if method.startswith("memrerank:"):
        from personamem.preference.checkpoint import load_extractor

        return load_extractor(method.removeprefix("memrerank:"))
    raise ValueError(_unknown(method))


def check_method(method: str) -> None:
    """Refuse a method name before any model is loaded (the check :func:`build_memories` would reach late).

    Raises:
        ValueError: naming the method and the choices.
    """
    inner = method.removeprefix(RAW_MATCHED)
    if inner not in MEMORY_METHODS and not inner.startswith("memrerank:"):
        raise ValueError(_unknown(inner))


def _unknown(method: str) -> str:
    return (
        f"unknown memory method {method!r}; choose from {', '.join(MEMORY_METHODS)}, memrerank:<folder>, "
        "raw-matched:<method>"
    )


def evaluate_choices(
    method: str,
    instances: Sequence[ChoiceInstance],
    memories: dict[str, MemoryText],
    reranker: SetwiseReranker,
    *,
    seeds: Sequence[int],
    progress: Callable[[int], None] | None = None,
    cache: Path | None = None,
    memory_key: str | None = None,
) -> MethodRun:
    """Accuracy, MRR and the positive's probability per instance and seed.

    Each (instance, seed)'s scores are appended to ``cache`` under a key naming the memory
    (``memory_key``, default ``method``) and the reranker's settings, with a digest of the memory's
    text, so a rerun resumes and a memory that changed is scored again.
    """
    settings = f"shifts={reranker.shifts}|calibrate={reranker.calibrate}|item_chars={reranker.item_chars}"
    key = f"{memory_key or method}|{reranker.llm.name}|{settings}"
    done = _read_choices(cache, key)
    run = MethodRun(method=method, seeds=list(seeds), stochastic=True)
    scores: dict[str, dict[str, list[float]]] = {m: {} for m in METRICS}
    for instance in instances:
        memory = memories[instance.id].text
        digest = hashlib.sha256(memory.encode()).hexdigest()[:16]
        for seed in seeds:
            if (found := done.get((instance.id, seed, digest))) is None:
                found = _score_choice(instance, memory, reranker, seed)
                _append_choice(cache, key, (instance.id, seed, digest), found)
            for metric in METRICS:
                scores[metric].setdefault(instance.id, []).append(found[metric])
        if progress is not None:
            progress(1)
    run.scores = scores
    return run


def _score_choice(
    instance: ChoiceInstance, memory: str, reranker: SetwiseReranker, seed: int
) -> dict[str, float]:
    """One seed's candidate order through the reranker: the positive's rank-1 hit, reciprocal rank, P."""
    shown, order = shuffled(list(instance.candidates), _seed(seed, instance.id))
    probabilities = reranker.choice_probabilities(instance.query, memory, shown)
    positive = order.index(0)
    rank = 1 + sum(1 for p in probabilities if p > probabilities[positive])
    return {"accuracy": float(rank == 1), "mrr": 1.0 / rank, "p_positive": probabilities[positive]}


def _read_choices(cache: Path | None, key: str) -> dict[tuple[str, int, str], dict[str, float]]:
    return {
        (e["id"], e["seed"], e.get("memory", "")): e["scores"] for e in _entries(cache) if e["key"] == key
    }


def _append_choice(cache: Path | None, key: str, at: tuple[str, int, str], scores: dict[str, float]) -> None:
    instance_id, seed, memory = at
    _append(cache, {"key": key, "id": instance_id, "seed": seed, "memory": memory, "scores": scores})


def _seed(seed: int, instance_id: str) -> int:
    return random.Random(f"{seed}/{instance_id}").randrange(2**31)


@dataclass
class MemoryEvalReport:
    """Per method: accuracy, MRR and P(positive) as mean ± std over seeds, words and extraction time."""

    benchmark: str
    runs: list[MethodRun]
    memories: dict[str, dict[str, MemoryText]]
    command: str
    notes: list[str] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per method (the JSON report's ``methods``)."""
        by_method = {r.method: r for r in self.runs}
        baseline = by_method.get("none")
        rows = []
        for run in self.runs:
            texts = list(self.memories[run.method].values())
            row: dict[str, Any] = {"method": run.method}
            for metric in METRICS:
                s = summarize(run, metric)
                row[metric] = {"mean": s.mean, "std": s.std, "instances": s.questions, "seeds": s.seeds}
            against = {"vs_none": baseline, "vs_raw_matched": by_method.get(RAW_MATCHED + run.method)}
            for name, other in against.items():
                for metric in ("accuracy", "mrr"):
                    if other is not None and other is not run:
                        c = compare(run, other, metric)
                        row[metric][name] = {"difference": c.difference, "p": c.p}
            row["words"] = float(np.mean([t.words for t in texts])) if texts else 0.0
            row["extraction_s_per_user"] = float(np.mean([t.seconds for t in texts])) if texts else 0.0
            row["rejected"] = sum(1 for t in texts if any(n.startswith("rejected") for n in t.notes))
            rows.append(row)
        return rows

    def to_markdown(self) -> str:
        """The table for docs/RESULTS.md and the closing note."""
        lines = [
            f"### {self.benchmark}",
            "",
            "| memory | accuracy | MRR | P(positive) | Δacc vs none (p) | Δacc vs raw, same tokens (p) "
            "| words | extraction s/user | rejected |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in self.rows():
            accuracy = row["accuracy"]
            lines.append(
                f"| {row['method']} | {_ms(accuracy)} | {_ms(row['mrr'])} | {_ms(row['p_positive'])} "
                f"| {_delta(accuracy.get('vs_none'))} | {_delta(accuracy.get('vs_raw_matched'))} "
                f"| {row['words']:.0f} | {row['extraction_s_per_user']:.1f} | {row['rejected']} |"
            )
        n = self.runs[0].scores["accuracy"] if self.runs else {}
        lines += ["", f"{len(n)} held-out instances × {len(self.runs[0].seeds) if self.runs else 0} seeds."]
        lines += [f"- {note}" for note in self.notes]
        lines += ["", f"`{self.command}`"]
        return "\n".join(lines)

    def write(self, folder: Path) -> Path:
        """``report.json`` and ``report.md`` in ``folder``; returns the JSON path."""
        folder.mkdir(parents=True, exist_ok=True)
        body = {
            "benchmark": self.benchmark,
            "command": self.command,
            "notes": self.notes,
            "methods": self.rows(),
            "scores": {r.method: r.scores for r in self.runs},
        }
        (folder / "report.json").write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
        (folder / "report.md").write_text(self.to_markdown() + "\n", encoding="utf-8")
        return folder / "report.json"


def _delta(comparison: dict[str, float] | None) -> str:
    return f"{comparison['difference']:+.3f} ({comparison['p']:.2g})" if comparison else "—"


def _ms(summary: dict[str, Any]) -> str:
    return f"{summary['mean']:.3f} ± {summary['std']:.3f}"


def _read_cache(cache: Path | None, method: str) -> dict[str, MemoryText]:
    return {
        e["id"]: MemoryText(e["text"], e["words"], e["seconds"], e.get("audit", ""), tuple(e["notes"]))
        for e in _entries(cache)
        if e["method"] == method
    }


def _append_cache(cache: Path | None, method: str, instance_id: str, memory: MemoryText) -> None:
    _append(cache, {"method": method, "id": instance_id, **memory.__dict__, "notes": list(memory.notes)})


def _entries(cache: Path | None) -> list[dict[str, Any]]:
    """Every entry of a JSON Lines cache (none when there is no cache or no file yet)."""
    if cache is None or not cache.is_file():
        return []
    return [json.loads(line) for line in cache.read_text(encoding="utf-8").splitlines()]


def _append(cache: Path | None, entry: dict[str, Any]) -> None:
    """One entry appended to a JSON Lines cache, as soon as it is known, so a rerun resumes after it."""
    if cache is None:
        return
    cache.parent.mkdir(parents=True, exist_ok=True)
    with cache.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")
