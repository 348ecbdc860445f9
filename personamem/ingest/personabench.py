"""Import the private corpora of PersonaBench (Tan et al. 2025, arXiv 2502.20616).

One session (a user-user conversation session, a user-AI dialog session or a purchase session) becomes
one record, because that is the chunk PersonaBench retrieves and its gold labels name: the session's
``segment_id`` is kept as the record id so ``qa_gt_context_all_noise_*.json`` resolves unchanged.
Segment ids are only meaningful within one noise level: the same session has different ids at
different levels, so a corpus and its gold file must come from the same ``noise``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from personamem.errors import IngestError
from personamem.ingest._json import JsonFile
from personamem.records import JsonScalar, Record, RecordKind

__all__ = ["Render", "find_communities", "load_personabench"]

Render = Literal["text", "json"]
"""How a session becomes record text: readable lines, or upstream's compact JSON."""

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
    metadata: dict[str, JsonScalar] = {
        "session": src.text(session, "session", where),
        "source": src.path.stem,
        "noise": noise,
        "community": community,
    }
    target = src.text(session, "target_name", where) if kind is RecordKind.CONVERSATION else None
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
