"""LoCoMo (Maharana et al., ACL 2024, arXiv 2402.17753): conversations' turns and the QA asked of them.

Records: one dialog turn becomes one record with the upstream ``dia_id`` (``"D1:3"``) as its id, since
the QA ``evidence`` lists name turns. Each conversation (``sample_id``) is one user. The turn text is
rendered with its session's date and speaker: a turn alone ("I went yesterday") cannot answer a temporal
question, and both people's turns share one user, so the speaker must be in the text.

Questions: gold is the QA ``evidence`` list of dialog ids, which must name turns of the same
conversation. Upstream evidence is malformed in a few places (``"D8:6; D9:17"`` joined in one string,
``"D:11:26"``, a bare ``"D"``, ids past the end of a session, empty lists), so ids are repaired where the
intent is unambiguous and dropped otherwise, each change written to :attr:`Benchmark.notes`; a question
left with no gold is skipped rather than scored against wrong gold.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from personamem.datasets.benchmark import Benchmark, Question, Skip
from personamem.errors import IngestError
from personamem.jsonfile import JsonFile
from personamem.records import JsonScalar, Record, RecordKind

__all__ = ["CATEGORIES", "LocomoOptions", "load_locomo", "load_locomo_benchmark", "locate_locomo_file"]


class LocomoOptions(BaseModel):
    """LoCoMo has no reading options: one file holds every conversation."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


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
_TIME_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
_SESSION_KEY = re.compile(r"session_(\d+)")


def load_locomo(path: str | Path) -> list[Record]:
    """Load every turn of every conversation in a LoCoMo file, one record per turn.

    Args:
        path: the ``locomo10.json``-format file, or a folder holding exactly one ``locomo10*.json``
            (so the dataset folder can be passed as is).

    Returns:
        The records, conversation by conversation, in session and turn order. Text looks like
        ``[1:56 pm on 8 May, 2023] Caroline: ... [shares an image: <caption>]``; metadata holds
        ``session`` (int), ``speaker`` and ``date`` (the raw session date string).

    Raises:
        IngestError: the file is missing, not JSON, not a list of conversations, or lacks a field.
    """
    src = JsonFile(locate_locomo_file(Path(path)))
    records: list[Record] = []
    for i, sample in enumerate(src.expect(src.load(), list, "top level")):
        sample = src.expect(sample, dict, f"item {i}")
        user = src.text(sample, "sample_id", f"item {i}")
        where = f"conversation {user!r}"
        conversation = src.field(sample, "conversation", dict, where)
        numbers = sorted(int(m.group(1)) for key in conversation if (m := _SESSION_KEY.fullmatch(key)))
        if not numbers:
            raise src.error(f"{where}: no 'session_<N>' turn lists in field 'conversation'")
        for number in numbers:
            date_key = f"session_{number}_date_time"
            date = src.text(conversation, date_key, where)
            timestamp = src.time(date, _TIME_FORMAT, f"{where}, field {date_key!r}")
            for j, turn in enumerate(src.field(conversation, f"session_{number}", list, where)):
                turn_where = f"{where}, session_{number}[{j}]"
                turn = src.expect(turn, dict, turn_where)
                records.append(_turn_record(src, user, turn, turn_where, number, date, timestamp))
    return records


def locate_locomo_file(path: Path) -> Path:
    """``path`` itself, or the one ``locomo10*.json`` in the folder ``path`` (an error if none or several)."""
    if not path.is_dir():
        return path
    found = sorted(path.glob("locomo10*.json"))
    if len(found) != 1:
        problem = (
            "no locomo10*.json file" if not found else f"several LoCoMo files ({[p.name for p in found]})"
        )
        raise IngestError(f"{problem} in this folder; pass the JSON file itself", path=str(path))
    return found[0]


def _turn_record(
    src: JsonFile, user: str, turn: dict[str, Any], where: str, session: int, date: str, timestamp: datetime
) -> Record:
    dia_id = src.text(turn, "dia_id", where)
    speaker = src.text(turn, "speaker", where)
    parts = [src.field(turn, "text", str, where).strip()]
    caption = turn.get("blip_caption")
    if caption:
        parts.append(f"[shares an image: {src.expect(caption, str, f'{where}, field blip_caption')}]")
    return Record(
        user_id=user,
        text=f"[{date}] {speaker}: " + " ".join(part for part in parts if part),
        id=dia_id,
        kind=RecordKind.CONVERSATION,
        timestamp=timestamp,
        metadata={"session": session, "speaker": speaker, "date": date},
    )


def load_locomo_benchmark(path: str | Path) -> Benchmark:
    """Load every conversation's turns and QA from a LoCoMo file.

    Args:
        path: the ``locomo10.json``-format file, or the folder holding it (as for
            :func:`load_locomo`).

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
