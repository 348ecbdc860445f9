"""TREC iKAT 2023/2024: each topic's PTKB statements, and PTKB statement selection for each turn.

Records: each topic is one simulated user whose PTKB (personal text knowledge base) lists short
statements about them ("I'm vegetarian."). One statement becomes one
:attr:`~personamem.records.RecordKind.KNOWLEDGE` record whose id is its PTKB key (``"1"``, ``"2"``, ...),
because each turn's ``ptkb_provenance`` names the relevant statements by those keys: kept unchanged,
they are the gold labels for statement selection.

Questions: each turn of a topic's conversation is a question whose gold is its ``ptkb_provenance``.
Most turns need no statement (empty provenance) and are skipped, counted with their reason. The
passage qrels cannot be scored without ClueWeb22, so they only mark which turns the organizers judged.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from personamem.datasets.benchmark import Benchmark, Question, Skip
from personamem.errors import IngestError
from personamem.jsonfile import JsonFile
from personamem.records import JsonScalar, Record, RecordKind

__all__ = ["IkatOptions", "load_ikat", "load_ikat_benchmark", "load_ikat_qrels"]


class IkatOptions(BaseModel):
    """How iKAT is read."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    split: str = "2023_test"
    """iKAT: topics file <split>_topics.json of the data folder."""
    user_prefix: str | None = None
    """iKAT: prefix of user ids, since topic numbers repeat across years [default: ikat<year>- for a
    folder's split, none for a single topics file]."""


NO_PROVENANCE = "no PTKB statement is relevant (empty ptkb_provenance)"
NO_VALID_PROVENANCE = "no ptkb_provenance key names a statement of the topic's PTKB"

_QRELS_FORMAT = "'<query id> <iteration> <document id> <grade>'"


def load_ikat_benchmark(
    data_dir: str | Path,
    *,
    split: str = "2023_test",
    user_prefix: str | None = None,
    include_unlabelled: bool = False,
) -> Benchmark:
    """Load one split's PTKB statements and turns.

    Args:
        data_dir: the folder holding the ``<split>_topics.json`` files (and ``<year>-qrels.all-turns.txt``
            where the year has public qrels).
        split: which topics file, e.g. ``"2023_train"``, ``"2023_test"``, ``"2024_test"``.
        user_prefix: prepended to topic numbers to form user ids (None: ``"ikat<year>-"``).
        include_unlabelled: keep turns whose provenance names no statement, with empty ``relevant``,
            instead of skipping them. Query rewriting needs every turn (selecting nothing is the right
            answer there); retrieval metrics cannot score such turns.

    Returns:
        A benchmark named ``"ikat-<split>"``. Users are ``"ikat<year>-<topic number>"`` by default,
        since topic numbers repeat across years. Questions have id ``"<number>_<turn_id>"`` (the
        qrels' query id), the earlier utterances as context, and ``resolved_utterance``, ``title``,
        ``topic``, ``turn_id`` (and ``judged`` where the year has qrels) in ``attributes``.

    Raises:
        IngestError: ``data_dir`` is not a folder, the split has no topics file, or a file is malformed.
    """
    path = _topics_file(Path(data_dir), split)
    year = split.partition("_")[0]
    prefix = _prefix(split) if user_prefix is None else user_prefix
    records = load_ikat(path, user_prefix=prefix)
    statements: dict[str, set[str]] = {}
    for record in records:
        statements.setdefault(record.user_id, set()).add(record.id)
    qrels = path.parent / f"{year}-qrels.all-turns.txt"
    judged = set(load_ikat_qrels(qrels)) if qrels.is_file() else None
    src = JsonFile(path)
    questions: list[Question] = []
    skipped: list[Skip] = []
    notes: list[str] = []
    for turn in _turns(src):
        provenance = _provenance(src, turn)
        relevant = {key: 1 for key in provenance if key in statements.get(prefix + turn.topic, set())}
        dropped = [key for key in provenance if key not in relevant]
        if dropped:
            notes.append(
                f"question {turn.id}: dropped ptkb_provenance keys naming no PTKB statement: {dropped}"
            )
        if not relevant and not include_unlabelled:
            skipped.append(Skip(turn.id, NO_VALID_PROVENANCE if provenance else NO_PROVENANCE))
            continue
        questions.append(_question(src, turn, prefix, relevant, judged))
    return Benchmark(name=f"ikat-{split}", records=records, questions=questions, skipped=skipped, notes=notes)


def load_ikat(path: str | Path, *, split: str = "2023_test", user_prefix: str | None = None) -> list[Record]:
    """Load every topic's PTKB statements from an iKAT topics file, one record per statement.

    Args:
        path: a ``*_topics.json`` file (a list of topics with ``number``, ``title`` and ``ptkb``), or
            the folder holding ``<split>_topics.json``.
        split: which topics file of a folder, e.g. ``"2023_train"``, ``"2023_test"``, ``"2024_test"``.
        user_prefix: prepended to the topic number to form the user id. Topic numbers repeat across
            years (2024 numbers topics 0, 1, ...), so a prefix such as ``"ikat24-"`` keeps users
            from different files apart in one store. None: ``"ikat<year>-"`` for a folder's split
            (the users :func:`load_ikat_benchmark` asks about), none for a file.

    Returns:
        The records, topic by topic in file order; user id is ``user_prefix + str(number)`` and
        metadata holds the topic ``title``.

    Raises:
        IngestError: the file is missing, not JSON, not a list of topics, or a topic lacks a field
            or has a blank statement or key.
    """
    path = Path(path)
    if path.is_dir():
        path = _topics_file(path, split)
        user_prefix = _prefix(split) if user_prefix is None else user_prefix
    src = JsonFile(path)
    user_prefix = user_prefix or ""
    records: list[Record] = []
    for i, topic in enumerate(src.expect(src.load(), list, "top level")):
        topic = src.expect(topic, dict, f"topic {i}")
        number = src.field(topic, "number", object, f"topic {i}")
        if isinstance(number, bool) or not isinstance(number, str | int) or not str(number).strip():
            raise src.error(f"topic {i}: field 'number' must be a non-blank string or an integer")
        where = f"topic {number!r}"
        title = src.field(topic, "title", str, where)
        ptkb = src.field(topic, "ptkb", dict, where)
        for key in ptkb:
            if not key.strip():
                raise src.error(f"{where}, field 'ptkb': blank statement key")
            records.append(
                Record(
                    user_id=f"{user_prefix}{number}",
                    text=src.text(ptkb, key, f"{where}, field 'ptkb'"),
                    id=key,
                    kind=RecordKind.KNOWLEDGE,
                    metadata={"title": title},
                )
            )
    return records


def load_ikat_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """Read TREC qrels (``<query id> <iteration> <document id> <grade>`` per line).

    Returns:
        query id -> document id -> grade, in file order; blank lines are ignored.

    Raises:
        IngestError: the file cannot be read, or a line is malformed or contradicts an earlier one
            (naming the file and line).
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise IngestError("file not found", path=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise IngestError(f"cannot read qrels: {exc}", path=str(path)) from None
    qrels: dict[str, dict[str, int]] = {}
    for line_no, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 4:
            raise IngestError(
                f"expected {_QRELS_FORMAT}, got {len(fields)} fields", path=str(path), line=line_no
            )
        qid, _, doc, grade_text = fields
        try:
            grade = int(grade_text)
        except ValueError:
            raise IngestError(
                f"grade {grade_text!r} is not an integer", path=str(path), line=line_no
            ) from None
        if qrels.setdefault(qid, {}).setdefault(doc, grade) != grade:
            raise IngestError(
                f"{qid} {doc} graded {grade} here but {qrels[qid][doc]} earlier", path=str(path), line=line_no
            )
    return qrels


def _prefix(split: str) -> str:
    """The default user prefix of a split's topics: ``"ikat2023-"`` for ``"2023_test"``."""
    return f"ikat{split.partition('_')[0]}-"


def _topics_file(root: Path, split: str) -> Path:
    """``<root>/<split>_topics.json``, or an error that lists the splits the folder does have."""
    if not root.is_dir():
        raise IngestError(
            "not a folder; pass the folder holding the iKAT *_topics.json files", path=str(root)
        )
    path = root / f"{split}_topics.json"
    if not path.is_file():
        available = sorted(p.name.removesuffix("_topics.json") for p in root.glob("*_topics.json"))
        raise IngestError(
            f"no split {split!r} ({path.name}) here; available splits: {available}", path=str(root)
        )
    return path


class _Turn(NamedTuple):
    id: str  # "<topic number>_<turn_id>", the qrels' query id
    topic: str
    title: str
    data: dict[str, Any]
    where: str  # for error messages
    context: tuple[str, ...]  # earlier utterances of the topic, oldest first


def _turns(src: JsonFile) -> Iterator[_Turn]:
    """Every turn of every topic, in file order, checking that the question ids are unique.

    Topic numbers and titles were already checked by :func:`load_ikat`, which reads the same file.
    """
    seen: set[str] = set()
    for i, topic in enumerate(src.expect(src.load(), list, "top level")):
        topic = src.expect(topic, dict, f"topic {i}")
        number = str(topic["number"])
        context: list[str] = []
        for j, data in enumerate(src.field(topic, "turns", list, f"topic {number!r}")):
            where = f"topic {number!r}, turns[{j}]"
            data = src.expect(data, dict, where)
            q_id = f"{number}_{src.field(data, 'turn_id', int, where)}"
            if q_id in seen:
                raise src.error(f"{where}: question id {q_id!r} (topic number and turn_id) repeats")
            seen.add(q_id)
            yield _Turn(q_id, number, topic["title"], data, where, tuple(context))
            context.append(src.text(data, "utterance", where))


def _question(
    src: JsonFile, turn: _Turn, prefix: str, relevant: dict[str, int], judged: set[str] | None
) -> Question:
    data, where = turn.data, turn.where
    attributes: dict[str, JsonScalar] = {"topic": turn.topic, "title": turn.title, "turn_id": data["turn_id"]}
    if "resolved_utterance" in data:
        attributes["resolved_utterance"] = src.field(data, "resolved_utterance", str, where)
    if judged is not None:
        attributes["judged"] = turn.id in judged
    return Question(
        id=turn.id,
        user_id=prefix + turn.topic,
        text=src.text(data, "utterance", where),
        relevant=relevant,
        answer=src.field(data, "response", str, where) if "response" in data else None,
        context=turn.context,
        attributes=attributes,
    )


def _provenance(src: JsonFile, turn: _Turn) -> list[str]:
    """The turn's PTKB keys as strings: the files give integers, the PTKB keys are strings."""
    keys = []
    for k, key in enumerate(src.field(turn.data, "ptkb_provenance", list, turn.where)):
        if isinstance(key, bool) or not isinstance(key, str | int):
            raise src.error(
                f"{turn.where}, ptkb_provenance[{k}]: expected a PTKB key (a string or an integer)"
            )
        keys.append(str(key))
    return list(dict.fromkeys(keys))
