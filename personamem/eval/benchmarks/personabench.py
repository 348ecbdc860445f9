"""PersonaBench (Tan et al. 2025) as a benchmark: each user's sessions and the questions about them.

Questions come from ``eval_info/eval_info_all.json`` (text, answer, type, difficulty, per user) and
their gold from ``eval_info/qa_gt_context_all_noise_<noise>.json``: for each answer value, the ids of
the sessions that support it. Both protocols need that grouping: the ranx one scores against all gold
ids, PersonaBench's own scores the best choice of one id per value (:mod:`personamem.eval.metrics`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from personamem.eval.benchmark import Benchmark, Question, Skip
from personamem.ingest._json import JsonFile
from personamem.ingest.personabench import Render, find_communities, load_personabench
from personamem.records import JsonScalar

__all__ = ["load_personabench_benchmark"]

NO_GOLD = "gold segment ids name no session of the user at this noise level"


def load_personabench_benchmark(
    data_dir: str | Path, *, noise: float = 0.0, render: Render = "text"
) -> Benchmark:
    """Load the corpora and questions of every user with a private corpus, at one noise level.

    Args:
        data_dir: the folder holding ``eval_data_v1`` (or any root :func:`load_personabench` accepts).
        noise: distractor level; the gold file of the same level is used, since segment ids differ
            between levels.
        render: how sessions become text (see :func:`~personamem.ingest.personabench.load_personabench`).

    Raises:
        IngestError: a file is missing or malformed, or a question has no gold entry.
    """
    records = load_personabench(data_dir, noise=noise, render=render)
    owned: dict[str, set[str]] = {}
    for record in records:
        owned.setdefault(record.user_id, set()).add(record.id)
    questions: list[Question] = []
    skipped: list[Skip] = []
    notes: list[str] = []
    for community in find_communities(Path(data_dir)):
        gold_file = JsonFile(community / "eval_info" / f"qa_gt_context_all_noise_{float(noise)}.json")
        gold = _gold_by_question(gold_file)
        info = JsonFile(community / "eval_info" / "eval_info_all.json")
        for user, qa, where in _questions(info):
            if user not in owned:
                continue  # upstream evaluates only people with a private corpus
            q_id = info.text(qa, "q_id", where)
            if q_id not in gold:
                raise gold_file.error(f"no gold entry for question {q_id!r} of {user!r}")
            groups, dropped = _gold_groups(gold_file, gold[q_id], owned[user])
            if dropped:
                notes.append(f"question {q_id}: dropped gold ids naming no session of {user!r}: {dropped}")
            if not groups:
                skipped.append(Skip(q_id, NO_GOLD))
                continue
            questions.append(_question(info, qa, where, user, q_id, groups, community.name))
    return Benchmark(
        name=f"personabench@noise{float(noise)}" + ("" if render == "text" else f"@{render}"),
        records=records,
        questions=questions,
        skipped=skipped,
        notes=notes,
    )


def _questions(info: JsonFile) -> list[tuple[str, dict[str, Any], str]]:
    found = []
    for i, person in enumerate(info.expect(info.load(), list, "top level")):
        person = info.expect(person, dict, f"entry {i}")
        user = info.text(person, "Name", f"entry {i}")
        qa_list = info.field(info.field(person, "Eval_Info", dict, f"entry {i} ({user!r})"), "qa", list, user)
        for j, qa in enumerate(qa_list):
            where = f"{user!r}, qa[{j}]"
            found.append((user, info.expect(qa, dict, where), where))
    return found


def _gold_by_question(src: JsonFile) -> dict[str, dict[str, Any]]:
    """q_id -> its ``segment_id`` mapping (answer value -> supporting session ids)."""
    gold: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(src.expect(src.load(), list, "top level")):
        entry = src.expect(entry, dict, f"entry {i}")
        q_id = src.text(entry, "q_id", f"entry {i}")
        gold[q_id] = src.field(entry, "segment_id", dict, f"question {q_id}")
    return gold


def _gold_groups(
    src: JsonFile, segment_ids: dict[str, Any], owned: set[str]
) -> tuple[tuple[tuple[str, ...], ...], list[str]]:
    """One group of interchangeable session ids per answer value; ids the user lacks are dropped."""
    groups: list[tuple[str, ...]] = []
    dropped: list[str] = []
    for value, ids in segment_ids.items():
        ids = src.expect(ids, list, f"gold for answer value {value!r}")
        kept = tuple(dict.fromkeys(i for i in ids if i in owned))
        dropped.extend(i for i in ids if i not in owned)
        if kept:
            groups.append(kept)
    return tuple(groups), dropped


def _question(
    info: JsonFile,
    qa: dict[str, Any],
    where: str,
    user: str,
    q_id: str,
    groups: tuple[tuple[str, ...], ...],
    community: str,
) -> Question:
    outdated = qa.get("outdated_value")
    attributes: dict[str, JsonScalar] = {
        "difficulty": info.text(qa, "difficulty", where),
        "community": community,
        "outdated_value": None if outdated is None else _answer_text(outdated),
    }
    return Question(
        id=q_id,
        user_id=user,
        text=info.text(qa, "question", where),
        relevant={record_id: 1 for group in groups for record_id in group},
        answer=_answer_text(info.field(qa, "answer", object, where)),
        category=info.text(qa, "type", where),
        gold_groups=groups,
        attributes=attributes,
    )


def _answer_text(answer: object) -> str:
    """Answers are strings, numbers or lists of values upstream; lists read as "a, b"."""
    if isinstance(answer, list):
        return ", ".join(str(value) for value in answer)
    return str(answer)
