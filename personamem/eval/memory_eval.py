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

A memory is built once per user and method (greedy decoding, so seeds do not change it) and kept in
``memories.jsonl`` beside the report, so a rerun resumes. Seeds change the order the candidates are
shown in, which the small models are sensitive to (they favour the first letter): mean ± std over
seeds, paired t-tests over instances against ``none``.
"""

from __future__ import annotations

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

__all__ = ["MEMORY_METHODS", "MemoryEvalReport", "MemoryText", "build_memories", "evaluate_choices"]

MEMORY_METHODS = ("none", "raw", "dense-top5", "prompted", "atomic")
"""Methods by name; ``memrerank:<folder>`` names a trained extractor besides these."""
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
    writer = extractor_llm or llm
    key = f"{method}@{writer.name}" if method in ("prompted", "atomic") else method
    done = _read_cache(cache, key)
    todo = [i for i in instances if i.id not in done]
    if method == "none":
        done.update({i.id: MemoryText("", 0, 0.0) for i in todo})
    elif method == "raw":
        for instance in todo:
            lines = [f"- {r.text}" for r in reversed(instance.history)]
            text = fit_to_budget(lines, raw_tokens, llm.count_tokens, render=lambda t: t).text
            done[instance.id] = MemoryText(text, len(text.split()), 0.0)
    elif method == "dense-top5":
        for instance in todo:
            if not instance.query:
                raise ValueError("dense-top5 needs a request; this benchmark's instances have none")
            vectors = encoder.encode([instance.query, *(r.text for r in instance.history)])
            best = np.argsort(-(vectors[1:] @ vectors[0]))[:5]
            text = "\n".join(f"- {instance.history[int(j)].text}" for j in best)
            done[instance.id] = MemoryText(text, len(text.split()), 0.0)
    else:
        extractor = _extractor(method, writer)
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


def _extractor(method: str, llm: FrozenLLM) -> PromptedExtractor:
    if method in ("prompted", "atomic"):
        return PromptedExtractor(llm, style="sections" if method == "prompted" else "atomic")
    if method.startswith("memrerank:"):
        from personamem.preference.checkpoint import load_extractor

        return load_extractor(method.removeprefix("memrerank:"))
    raise ValueError(
        f"unknown memory method {method!r}; choose from {', '.join(MEMORY_METHODS)}, memrerank:<folder>"
    )


def evaluate_choices(
    method: str,
    instances: Sequence[ChoiceInstance],
    memories: dict[str, MemoryText],
    reranker: SetwiseReranker,
    *,
    seeds: Sequence[int],
    progress: Callable[[int], None] | None = None,
) -> MethodRun:
    """Accuracy, MRR and the positive's probability per instance and seed."""
    run = MethodRun(method=method, seeds=list(seeds), stochastic=True)
    scores: dict[str, dict[str, list[float]]] = {m: {} for m in METRICS}
    for instance in instances:
        for seed in seeds:
            shown, order = shuffled(list(instance.candidates), _seed(seed, instance.id))
            probabilities = reranker.choice_probabilities(instance.query, memories[instance.id].text, shown)
            positive = order.index(0)
            rank = 1 + sum(1 for p in probabilities if p > probabilities[positive])
            scores["accuracy"].setdefault(instance.id, []).append(float(rank == 1))
            scores["mrr"].setdefault(instance.id, []).append(1.0 / rank)
            scores["p_positive"].setdefault(instance.id, []).append(probabilities[positive])
        if progress is not None:
            progress(1)
    run.scores = scores
    return run


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
        baseline = next((r for r in self.runs if r.method == "none"), None)
        rows = []
        for run in self.runs:
            texts = list(self.memories[run.method].values())
            row: dict[str, Any] = {"method": run.method}
            for metric in METRICS:
                s = summarize(run, metric)
                row[metric] = {"mean": s.mean, "std": s.std, "instances": s.questions, "seeds": s.seeds}
            if baseline is not None and run is not baseline:
                for metric in ("accuracy", "mrr"):
                    c = compare(run, baseline, metric)
                    row[metric]["vs_none"] = {"difference": c.difference, "p": c.p}
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
            "| memory | accuracy | MRR | P(positive) | Δacc vs none (p) | words | extraction s/user "
            "| rejected |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in self.rows():
            vs = row["accuracy"].get("vs_none")
            delta = f"{vs['difference']:+.3f} ({vs['p']:.2g})" if vs else "—"
            lines.append(
                f"| {row['method']} | {_ms(row['accuracy'])} | {_ms(row['mrr'])} | {_ms(row['p_positive'])} "
                f"| {delta} | {row['words']:.0f} | {row['extraction_s_per_user']:.1f} | {row['rejected']} |"
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


def _ms(summary: dict[str, Any]) -> str:
    return f"{summary['mean']:.3f} ± {summary['std']:.3f}"


def _read_cache(cache: Path | None, method: str) -> dict[str, MemoryText]:
    found: dict[str, MemoryText] = {}
    if cache is None or not cache.is_file():
        return found
    for line in cache.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry["method"] == method:
            found[entry["id"]] = MemoryText(
                entry["text"], entry["words"], entry["seconds"], entry.get("audit", ""), tuple(entry["notes"])
            )
    return found


def _append_cache(cache: Path | None, method: str, instance_id: str, memory: MemoryText) -> None:
    if cache is None:
        return
    cache.parent.mkdir(parents=True, exist_ok=True)
    entry = {"method": method, "id": instance_id, **memory.__dict__, "notes": list(memory.notes)}
    with cache.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")
