"""PersonaBench (Tan et al. 2025, arXiv 2502.20616): users' private sessions and the questions about them.

Records: one session (a user-user conversation session, a user-AI dialog session or a purchase session)
becomes one record, because that is the chunk PersonaBench retrieves and its gold labels name: the
session's ``segment_id`` is kept as the record id so ``qa_gt_context_all_noise_*.json`` resolves
unchanged. Segment ids are only meaningful within one noise level: the same session has different ids at
different levels, so a corpus and its gold file must come from the same ``noise``.

Questions come from ``eval_info/eval_info_all.json`` (text, answer, type, difficulty, per user) and
their gold from ``eval_info/qa_gt_context_all_noise_<noise>.json``: for each answer value, the ids of
the sessions that support it. Both protocols need that grouping: the ranx one scores against all gold
ids, PersonaBench's own scores the best choice of one id per value (:mod:`personamem.eval.metrics`).

Choices: the ``Preference`` questions as 1-in-5 choices; the candidates are the user's gold answer and
the answers other users give to the four most similar preference questions (by cosine of the question
texts, so "which sports..." meets other users' sports).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from personamem.datasets.benchmark import Benchmark, Question, Skip
from personamem.datasets.choice import ChoiceInstance, ChoiceNeeds
from personamem.errors import IngestError
from personamem.jsonfile import JsonFile
from personamem.records import JsonScalar, Record, RecordKind

if TYPE_CHECKING:
    from personamem.encoder import Encoder

__all__ = [
    "NO_GOLD",
    "PersonaBenchOptions",
    "Render",
    "find_communities",
    "load_personabench",
    "load_personabench_benchmark",
    "load_personabench_choices",
    "personabench_choices",
]

Render = Literal["text", "json"]
"""How a session becomes record text: readable lines, or upstream's compact JSON."""

NO_GOLD = "gold segment ids name no session of the user at this noise level"


class PersonaBenchOptions(BaseModel):
    """How PersonaBench is read."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    noise: float = 0.0
    """PersonaBench: distractor level (0.0, 0.3, 0.5, 0.7)."""
    render: Render = "text"
    """PersonaBench: session text, readable or upstream's compact JSON."""


_TIME_FORMAT = "%Y/%b/%d/%I:%M %p"  # "2024/Oct/14/04:10 PM"
# file stem -> (record kind, the session's key holding its messages or items)
_SOURCES = {
    "conversation_data_all": (RecordKind.CONVERSATION, "conversation"),
    "user_ai_interaction_data_all": (RecordKind.DIALOG, "user_ai_interaction"),
    "purchase_history_data_all": (RecordKind.PURCHASE, "purchase_history"),
}


def load_personabench(data_dir: str | Path, *, noise: float = 0.0, render: Render = "text") -> list[Record]:
    """Load every user's sessions at one noise level, one record per session.

    Reads ``community_*/private_data/noise_<noise>/*_data_all.json``; the user id is the person's
    ``Name`` exactly as the benchmark spells it, so eval files match by name.

    Args:
        data_dir: the folder holding ``eval_data_v1``, or ``eval_data_v1/synthetic_data``, or a single
            ``community_X`` folder; accepting all three spares callers from knowing the layout.
        noise: the distractor level (0.0, 0.3, 0.5 or 0.7 upstream); 0.0 is the clean corpus.
        render: ``"text"`` gives a readable header (kind, date, the other person) and ``role: content``
            lines, which embed better; ``"json"`` gives the session as compact JSON without
            ``segment_id`` and ``session``, byte for byte what the PersonaBench baselines embed, for
            comparisons with the paper.

    Returns:
        The records, community by community, then conversations, dialogs and purchases in file order.

    Raises:
        IngestError: no community folder is found, the noise level folder is missing, or a file is
            missing or malformed.
        ValueError: ``render`` is not ``"text"`` or ``"json"``.
    """
    if render not in ("text", "json"):
        raise ValueError(f"render must be 'text' or 'json', got {render!r}")
    level = float(noise)
    records: list[Record] = []
    for community in find_communities(Path(data_dir)):
        private = community / "private_data"
        noise_dir = private / f"noise_{level}"
        if not noise_dir.is_dir():
            available = ", ".join(sorted(p.name.removeprefix("noise_") for p in private.glob("noise_*")))
            raise IngestError(
                f"no folder noise_{level} for noise level {level} (available: {available or 'none'})",
                path=str(private),
            )
        for stem, (kind, body_key) in _SOURCES.items():
            src = JsonFile(noise_dir / f"{stem}.json")
            for user, session, where in _sessions(src, kind):
                records.append(
                    _session_record(src, user, session, where, kind, body_key, level, community.name, render)
                )
    return records


def find_communities(root: Path) -> list[Path]:
    """The ``community_*`` folders under any of the accepted roots (see :func:`load_personabench`)."""
    if not root.is_dir():
        raise IngestError("PersonaBench folder not found (or not a folder)", path=str(root))
    if (root / "private_data").is_dir():
        return [root]
    for base in (root, root / "synthetic_data", root / "eval_data_v1" / "synthetic_data"):
        found = sorted(p for p in base.glob("community_*") if (p / "private_data").is_dir())
        if found:
            return found
    raise IngestError(
        "no PersonaBench data: expected community_*/private_data/ here, under synthetic_data/ or under "
        "eval_data_v1/synthetic_data/, or a community folder itself",
        path=str(root),
    )


def _sessions(src: JsonFile, kind: RecordKind) -> Iterator[tuple[str, dict[str, Any], str]]:
    """Yield (user name, session, position for errors); conversations are grouped by partner upstream."""
    for i, entry in enumerate(src.expect(src.load(), list, "top level")):
        entry = src.expect(entry, dict, f"entry {i}")
        user = src.text(entry, "Name", f"entry {i}")
        where = f"entry {i} ({user!r})"
        for j, item in enumerate(src.field(entry, "Data", list, where)):
            item_where = f"{where}, Data[{j}]"
            item = src.expect(item, dict, item_where)
            if kind is not RecordKind.CONVERSATION:
                yield user, item, item_where
                continue
            for k, session in enumerate(src.field(item, "Conversations", list, item_where)):
                session_where = f"{item_where}.Conversations[{k}]"
                yield user, src.expect(session, dict, session_where), session_where


def _session_record(
    src: JsonFile,
    user: str,
    session: dict[str, Any],
    where: str,
    kind: RecordKind,
    body_key: str,
    noise: float,
    community: str,
    render: Render,
) -> Record:
    segment_id = src.text(session, "segment_id", where)
    where = f"{where} (segment {segment_id})"
    timestamp = src.time(src.text(session, "time", where), _TIME_FORMAT, f"{where}, field 'time'")
    body = src.field(session, body_key, list, where)
    target = src.text(session, "target_name", where) if kind is RecordKind.CONVERSATION else None
    label = src.text(session, "session", where)  # numbered per partner upstream: "session---1" with each
    metadata: dict[str, JsonScalar] = {
        "session": label if target is None else f"{label} with {target}",  # the record's own conversation
        "source": src.path.stem,
        "noise": noise,
        "community": community,
    }
    if target is not None:
        metadata["target_name"] = target
    if render == "json":
        text = json.dumps(
            {key: value for key, value in session.items() if key not in ("segment_id", "session")},
            separators=(",", ":"),
        )
    else:
        text = _render_text(src, body, f"{where}, {body_key}", kind, timestamp, target)
    return Record(user_id=user, text=text, id=segment_id, kind=kind, timestamp=timestamp, metadata=metadata)


def _render_text(
    src: JsonFile, body: list[Any], where: str, kind: RecordKind, timestamp: datetime, target: str | None
) -> str:
    if kind is RecordKind.CONVERSATION:
        heading = f"Conversation with {target}"
    else:
        heading = "Chat with an AI assistant" if kind is RecordKind.DIALOG else "Purchase"
    lines = [f"{heading} on {timestamp:%A %d %B %Y, %I:%M %p}"]
    for n, item in enumerate(body):
        item_where = f"{where}[{n}]"
        lines.append(_render_item(src, src.expect(item, dict, item_where), item_where, kind))
    return "\n".join(lines)


def _render_item(src: JsonFile, item: dict[str, Any], where: str, kind: RecordKind) -> str:
    if kind is not RecordKind.PURCHASE:
        return f"{src.field(item, 'role', str, where)}: {src.field(item, 'content', str, where)}"
    categories = ", ".join(
        src.expect(category, str, f"{where}, categories[{m}]")
        for m, category in enumerate(src.field(item, "categories", list, where))
    )
    return (
        f"- {src.field(item, 'title', str, where)} (brand: {src.field(item, 'brand', str, where)}; "
        f"categories: {categories}): {src.field(item, 'description', str, where)}"
    )


def load_personabench_benchmark(
    data_dir: str | Path, *, noise: float = 0.0, render: Render = "text"
) -> Benchmark:
    """Load the corpora and questions of every user with a private corpus, at one noise level.

    Args:
        data_dir: the folder holding ``eval_data_v1`` (or any root :func:`load_personabench` accepts).
        noise: distractor level; the gold file of the same level is used, since segment ids differ
            between levels.
        render: how sessions become text (see :func:`~load_personabench`).

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


def load_personabench_choices(
    data_dir: str | Path, needs: ChoiceNeeds, *, noise: float = 0.0, render: Render = "text"
) -> list[ChoiceInstance]:
    """:func:`personabench_choices` of the benchmark at ``data_dir`` (every user: none is trained on)."""
    benchmark = load_personabench_benchmark(data_dir, noise=noise, render=render)
    return personabench_choices(benchmark, needs.encoder)


def personabench_choices(benchmark: Benchmark, encoder: Encoder) -> list[ChoiceInstance]:
    """PersonaBench's preference questions as 1-in-5 choices against other users' answers, grouped by user."""
    by_user: dict[str, list[Record]] = {}
    for record in benchmark.records:
        by_user.setdefault(record.user_id, []).append(record)
    questions = [q for q in benchmark.questions if q.category == "Preference" and q.answer]
    vectors = encoder.encode([q.text for q in questions])
    instances = []
    for i, question in enumerate(questions):
        others = [j for j in np.argsort(-(vectors @ vectors[i])) if questions[j].user_id != question.user_id]
        negatives = list(dict.fromkeys(str(questions[j].answer) for j in others))
        negatives = [a for a in negatives if a != question.answer][:4]
        if len(negatives) < 4:
            continue
        instances.append(
            ChoiceInstance(
                id=question.id,
                user_id=question.user_id,
                history=tuple(by_user[question.user_id]),
                query=question.text,
                candidates=(str(question.answer), *negatives),
                category="",
                group=question.user_id,
            )
        )
    return instances
