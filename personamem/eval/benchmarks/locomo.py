"""LoCoMo (Maharana et al., ACL 2024) as a benchmark: each conversation's turns and the QA asked of it.

Gold is the QA ``evidence`` list of dialog ids (``"D1:3"``), which must name turns of the same
conversation. Upstream evidence is malformed in a few places (``"D8:6; D9:17"`` joined in one string,
``"D:11:26"``, a bare ``"D"``, ids past the end of a session, empty lists), so ids are repaired where the
intent is unambiguous and dropped otherwise, each change written to :attr:`Benchmark.notes`; a question
left with no gold is skipped rather than scored against wrong gold.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from personamem.eval.benchmark import Benchmark, Question, Skip
from personamem.ingest._json import JsonFile
from personamem.ingest.locomo import load_locomo, locate_locomo_file
from personamem.records import JsonScalar

__all__ = ["CATEGORIES", "load_locomo_benchmark"]

CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
"""Upstream category number -> name (the mapping of upstream ``task_eval/evaluation.py``)."""

NO_EVIDENCE = "no evidence ids"
NO_VALID_EVIDENCE = "no evidence id names a turn of the conversation"

_SEPARATORS = re.compile(r"[;,\s]+")
_DIA_ID = re.compile(r"D(\d+):(\d+)")
_STRAY_COLON = re.compile(r"D:(\d+):(\d+)")  # "D:11:26", seen upstream for "D11:26"


def load_locomo_benchmark(path: str | Path) -> Benchmark:
    """Load every conversation's turns and QA from a LoCoMo file.

    Args:
        path: the ``locomo10.json``-format file, or the folder holding it (as for
            :func:`~personamem.ingest.locomo.load_locomo`).

    Returns:
        A benchmark named ``"locomo"``: one record per turn, one question per QA item with id
        ``"<sample_id>/<index in qa>"``. Adversarial questions (category 5) have ``answer`` None unless
        upstream gives one, and keep the trap answer in ``attributes["adversarial_answer"]``.

    Raises:
        IngestError: the file is missing or malformed, or a QA item has an unknown category or lacks a
            field.
    """
    records = load_locomo(path)
    turns: dict[str, set[str]] = {}
    for record in records:
        turns.setdefault(record.user_id, set()).add(record.id)
    src = JsonFile(locate_locomo_file(Path(path)))
    questions: list[Question] = []
    skipped: list[Skip] = []
    notes: list[str] = []
    for user, index, qa in _qa_items(src):
        q_id = f"{user}/{index}"
        where = f"question {q_id}"
        evidence = src.field(qa, "evidence", list, where)
        raw = [src.expect(item, str, f"{where}, evidence[{k}]") for k, item in enumerate(evidence)]
        number = _category(src, qa, where)  # checked on skipped questions too: a bad file fails whole
        relevant, changes = _gold(raw, turns.get(user, set()), user)
        notes.extend(f"{where}: {change}" for change in changes)
        if not relevant:
            skipped.append(Skip(q_id, NO_VALID_EVIDENCE if raw else NO_EVIDENCE))
            continue
        questions.append(_question(src, qa, where, q_id, user, number, relevant))
    return Benchmark(name="locomo", records=records, questions=questions, skipped=skipped, notes=notes)


def _qa_items(src: JsonFile) -> list[tuple[str, int, dict[str, Any]]]:
    """(sample_id, index, QA item) for every QA item, in file order."""
    found = []
    seen: set[str] = set()
    for i, sample in enumerate(src.expect(src.load(), list, "top level")):
        sample = src.expect(sample, dict, f"item {i}")
        user = src.text(sample, "sample_id", f"item {i}")
        if user in seen:
            raise src.error(f"item {i}: sample_id {user!r} repeats an earlier conversation's")
        seen.add(user)
        for j, qa in enumerate(src.field(sample, "qa", list, f"conversation {user!r}")):
            found.append((user, j, src.expect(qa, dict, f"question {user}/{j}")))
    return found


def _gold(raw: list[str], turns: set[str], user: str) -> tuple[dict[str, int], list[str]]:
    """Gold turn ids from upstream evidence strings, and a readable line per repair or drop."""
    relevant: dict[str, int] = {}
    changes: list[str] = []
    for entry in raw:
        pieces = [piece for piece in _SEPARATORS.split(entry) if piece] or [entry]
        if len(pieces) > 1:
            changes.append(f"split evidence {entry!r} into {pieces}")
        for piece in pieces:
            given = piece if len(pieces) > 1 else entry  # name a lone id as upstream wrote it
            dia_id = _repair(piece)
            if dia_id is None:
                changes.append(f"dropped evidence {given!r} (not a dialog id)")
            elif dia_id not in turns:
                changes.append(f"dropped evidence {given!r} (names no turn of {user})")
            else:
                if dia_id != given:
                    changes.append(f"read evidence {given!r} as {dia_id!r}")
                relevant[dia_id] = 1
    return relevant, changes


def _repair(piece: str) -> str | None:
    """The dialog id a piece of evidence unambiguously means, or None if it means none."""
    if _DIA_ID.fullmatch(piece):
        return piece
    if match := _STRAY_COLON.fullmatch(piece):
        return f"D{match.group(1)}:{match.group(2)}"
    return None


def _category(src: JsonFile, qa: dict[str, Any], where: str) -> int:
    number = src.field(qa, "category", int, where)
    if number not in CATEGORIES:
        raise src.error(f"{where}: unknown category {number} (expected one of {sorted(CATEGORIES)})")
    return number


def _question(
    src: JsonFile, qa: dict[str, Any], where: str, q_id: str, user: str, number: int, relevant: dict[str, int]
) -> Question:
    attributes: dict[str, JsonScalar] = {"category_id": number}
    if "adversarial_answer" in qa:
        attributes["adversarial_answer"] = _answer_text(src, qa, "adversarial_answer", where)
    has_answer = "answer" in qa or number != 5  # adversarial ones lack it upstream, all but two
    return Question(
        id=q_id,
        user_id=user,
        text=src.text(qa, "question", where),
        relevant=relevant,
        answer=_answer_text(src, qa, "answer", where) if has_answer else None,
        category=CATEGORIES[number],
        attributes=attributes,
    )


def _answer_text(src: JsonFile, qa: dict[str, Any], key: str, where: str) -> str:
    """Answers are strings upstream, but a few are bare numbers (years, counts)."""
    value = src.field(qa, key, object, where)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise src.error(f"{where}, field {key!r}: expected a string or a number")
    return str(value)
