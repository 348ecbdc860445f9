from datetime import datetime

import pytest

from personamem import InvalidRecordError, Record, RecordKind
from personamem.records import parse_record


def test_content_id_is_stable_and_content_sensitive() -> None:
    a = Record(user_id="u", text="I like tea")
    assert a.id == Record(user_id="other", text="I like tea").id  # ids are per user; content decides
    assert a.id != Record(user_id="u", text="I like coffee").id
    assert a.id != Record(user_id="u", text="I like tea", kind=RecordKind.POST).id


def test_timestamp_separates_repeated_events() -> None:
    first = Record(user_id="u", text="Bought milk", timestamp=datetime(2024, 1, 1))
    again = Record(user_id="u", text="Bought milk", timestamp=datetime(2024, 2, 1))
    assert first.id != again.id


def test_caller_id_is_kept() -> None:
    assert Record(user_id="u", text="x", id="D1:3").id == "D1:3"


def test_pair_record_renders_text() -> None:
    record = Record(user_id="u", input="Rate this film", output="4 stars", kind=RecordKind.QA)
    assert record.text == "Rate this film\n4 stars"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"user_id": "u", "text": "  "}, "text must be non-empty"),
        ({"user_id": "", "text": "x"}, "user_id"),
        ({"text": "x"}, "user_id"),
        ({"user_id": "u", "text": "x", "kind": "diary"}, "kind"),
        ({"user_id": "u", "text": "x", "timestamp": "yesterday"}, "timestamp"),
        ({"user_id": "u", "text": "x", "colour": "red"}, "colour"),
        ({"user_id": "u", "text": "x", "metadata": {"tags": ["a"]}}, "metadata"),
    ],
)
def test_bad_records_name_the_problem(data: dict, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        parse_record(data)


def test_default_user_never_overrides_a_named_user() -> None:
    assert parse_record({"text": "x"}, default_user="u").user_id == "u"
    with pytest.raises(InvalidRecordError, match="'v'"):
        parse_record({"text": "x", "user_id": "v"}, default_user="u")
