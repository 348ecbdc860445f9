"""Import LoCoMo (Maharana et al., ACL 2024, arXiv 2402.17753) conversations.

One dialog turn becomes one record with the upstream ``dia_id`` (``"D1:3"``) as its id, since the QA
``evidence`` lists name turns. Each conversation (``sample_id``) is one user. The turn text is rendered
with its session's date and speaker: a turn alone ("I went yesterday") cannot answer a temporal question,
and both people's turns share one user, so the speaker must be in the text.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

from personamem.errors import IngestError
from personamem.ingest._json import JsonFile
from personamem.records import Record, RecordKind

__all__ = ["load_locomo", "locate_locomo_file"]

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
