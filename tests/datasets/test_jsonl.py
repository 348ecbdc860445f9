from pathlib import Path

import pytest

from personamem import IngestError, PersonaMem
from personamem.datasets.jsonl import read_jsonl


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_reads_records_and_skips_blank_lines(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.jsonl", ['{"text": "one"}', "", '{"text": "two", "kind": "post"}'])
    records = read_jsonl(path, user_id="u")
    assert [r.text for r in records] == ["one", "two"]
    assert {r.user_id for r in records} == {"u"}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"text": "broken"', "invalid JSON"),
        ('["a list"]', "expected a JSON object"),
        ('{"text": ""}', "text must be non-empty"),
        ('{"text": "x", "kind": "rant"}', "kind"),
    ],
)
def test_bad_line_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = _write(tmp_path / "bad.jsonl", ['{"text": "fine"}', '{"text": "fine too"}', line])
    with pytest.raises(IngestError, match=message) as info:
        read_jsonl(path, user_id="u")
    assert "bad.jsonl:3:" in str(info.value)
    assert info.value.line == 3


def test_missing_user_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "nouser.jsonl", ['{"text": "who am I"}'])
    with pytest.raises(IngestError, match=r"nouser.jsonl:1: .*user_id"):
        read_jsonl(path)


def test_non_utf8_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes('{"text": "ok"}\n{"text": "café"}\n'.encode("latin-1"))
    with pytest.raises(IngestError, match=r"latin1.jsonl:2: not valid UTF-8"):
        read_jsonl(path, user_id="u")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="file not found"):
        read_jsonl(tmp_path / "nope.jsonl")


def test_bad_file_stores_nothing_and_keeps_earlier_data(tmp_path: Path, mem: PersonaMem) -> None:
    mem.add_many(read_jsonl(_write(tmp_path / "good.jsonl", ['{"text": "kept"}']), user_id="u"))
    bad = _write(tmp_path / "bad.jsonl", ['{"text": "new one"}', "{oops"])
    with pytest.raises(IngestError):
        mem.add_many(read_jsonl(bad, user_id="u"))
    assert [r.text for r in mem.records("u")] == ["kept"]
