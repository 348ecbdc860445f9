"""Filters on a read: which of a user's records a search or context call may return.

The grammar, a JSON object (``filters=`` on every surface):

- a field maps to a bare value (equals) or to an object of operators, all of which must hold:
  ``{"metadata.topic": "food", "timestamp": {"gte": "2025-01-01"}}``;
- fields: ``kind``, ``category``, ``role`` (who wrote a chat record: ``Record.role``),
  ``timestamp``, ``valid_from``, ``valid_until`` and ``metadata.<key>``;
- operators: ``eq``, ``ne``, ``in``, ``nin`` (a list), ``gt``, ``gte``, ``lt``, ``lte`` (a time,
  number or string) and ``contains`` (a substring, case-sensitive);
- ``and`` / ``or`` take a list of filters, ``not`` one filter; several keys of one object are an ``and``.

Times are ISO 8601 strings (naive means UTC) and compare as instants. A record without the field
(no category, no timestamp, a metadata key it lacks) holds null there: ``eq``/``in`` match it only
through null, ``ne``/``nin`` match it unless they name null, and orderings and ``contains`` never
do. ``True`` is not ``1``: a boolean equals only a boolean.

The parsed filter is part of the call's :class:`~personamem.store.read.Read`, which every stage
passes down to the store; the places that make candidates apply it (``Store.nearest``,
``Store.hidden``, through ``store/visibility.py``). Which of a user's records a filter admits is
worked out once per revision (:class:`FilterIndex`).
"""

from __future__ import annotations

import json
import operator
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from personamem.errors import InvalidInputError
from personamem.records import Record, RecordKind, as_utc

__all__ = [
    "FIELDS",
    "OPERATORS",
    "Filter",
    "FilterIndex",
    "FilterVerdict",
    "parse_filters",
]

FIELDS = ("kind", "category", "role", "timestamp", "valid_from", "valid_until", "metadata.<key>")
"""What a filter can name."""
OPERATORS = ("eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "contains")
"""What a field's object of operators can hold."""

_TIMES = ("timestamp", "valid_from", "valid_until")
_EQUALITY = ("eq", "ne", "in", "nin")
_ORDERINGS: dict[str, Callable[[Any, Any], bool]] = {
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}
_MAX_VERDICTS = 64  # filters remembered per user and revision; an application uses a handful

Test = Callable[[Record], bool]
Value = str | int | float | bool | None


@dataclass(frozen=True)
class Filter:
    """A parsed filter: a test of one record, and its canonical JSON (equal filters, equal keys)."""

    key: str
    test: Test = field(compare=False, repr=False)

    def matches(self, record: Record) -> bool:
        """Whether the filter admits ``record``."""
        return self.test(record)


def parse_filters(filters: Mapping[str, Any] | None) -> Filter | None:
    """The filter ``filters`` spells (None or ``{}``: none), checked whole before any read.

    Raises:
        InvalidInputError: naming the part that is wrong (``filters: unknown operator 'gtx' at
            timestamp``), a field that is not filterable, a time that is not ISO 8601, ``in``/``nin``
            without a list, ``contains`` without a string.
    """
    if filters is None:
        return None
    if not isinstance(filters, Mapping):
        raise _error(f"expected a JSON object, got {type(filters).__name__}", "")
    if not filters:
        return None
    test = _node(filters, "")
    return Filter(json.dumps(filters, sort_keys=True, ensure_ascii=False), test)


@dataclass(frozen=True)
class FilterVerdict:
    """One filter over one user's records: the record ids it rejects, the vector ids it keeps (in order)."""

    rejected: frozenset[str]
    kept_vectors: tuple[str, ...]
    kept_vector_set: frozenset[str]


class FilterIndex:
    """A user's records (as stored) and vector ids at one revision, with each filter's verdict kept.

    Kept per revision by the store, so a filter costs one pass over the user's records the first
    time it is asked and a dictionary lookup afterwards.
    """

    def __init__(self, records: Sequence[Record], vector_ids: Sequence[str]) -> None:
        self.records = list(zip(records, vector_ids, strict=True))
        self._verdicts: dict[str, FilterVerdict] = {}
        self._lock = threading.Lock()

    def verdict(self, read: Filter) -> FilterVerdict:
        """Which of the user's records ``read`` rejects and which vectors it keeps."""
        found = self._verdicts.get(read.key)
        if found is not None:
            return found
        rejected, kept, test = [], [], read.test
        for record, vid in self.records:
            if test(record):
                kept.append(vid)
            else:
                rejected.append(record.id)
        found = FilterVerdict(frozenset(rejected), tuple(kept), frozenset(kept))
        with self._lock:
            if len(self._verdicts) >= _MAX_VERDICTS:
                self._verdicts.clear()
            self._verdicts[read.key] = found
        return found


# -- the grammar ----------------------------------------------------------------------------------


def _error(problem: str, at: str, choices: Sequence[str] = ()) -> InvalidInputError:
    where = f" at {at}" if at else ""
    return InvalidInputError(f"filters: {problem}{where}" + (f" ({', '.join(choices)})" if choices else ""))


def _node(node: Any, at: str) -> Test:
    """The test of one filter object: every key must hold."""
    if not isinstance(node, Mapping) or not node:
        raise _error(f"expected a non-empty object, got {json.dumps(node, default=repr)}", at)
    return _every([_entry(str(name), value, at) for name, value in node.items()])


def _every(tests: list[Callable[[Any], bool]]) -> Callable[[Any], bool]:
    """All of ``tests`` (closures, not ``all()`` over a generator: a filter runs once per record)."""
    if len(tests) == 1:
        return tests[0]

    def every(item: Any) -> bool:
        for test in tests:  # noqa: SIM110 (a third faster than all() over a generator)
            if not test(item):
                return False
        return True

    return every


def _any(tests: list[Callable[[Any], bool]]) -> Callable[[Any], bool]:
    """Any of ``tests``, written out as :func:`_every` is."""

    def either(item: Any) -> bool:
        for test in tests:  # noqa: SIM110
            if test(item):
                return True
        return False

    return either


def _entry(name: str, value: Any, parent: str) -> Test:
    at = f"{parent}.{name}" if parent else name
    if name in ("and", "or"):
        if not isinstance(value, list) or not value:
            raise _error(f"'{name}' needs a non-empty list of filters", at)
        tests = [_node(item, f"{at}[{i}]") for i, item in enumerate(value)]
        return _every(tests) if name == "and" else _any(tests)
    if name == "not":
        inner = _node(value, at)
        return lambda record: not inner(record)
    get = _getter(name, parent)
    conditions = value if isinstance(value, Mapping) else {"eq": value}
    if not conditions:
        raise _error("expected a value or a non-empty object of operators", at)
    holds = _every([_condition(name, str(op), operand, at) for op, operand in conditions.items()])
    return lambda record: holds(get(record))


def _getter(name: str, parent: str) -> Callable[[Record], Any]:
    """How to read the field ``name`` (a key of the filter object at ``parent``) off a record."""
    if name == "kind":
        return lambda record: record.kind.value
    if name == "category":
        return lambda record: record.category
    if name == "role":
        return lambda record: record.role
    if name in _TIMES:
        return lambda record: _seconds(getattr(record, name))
    if name.startswith("metadata.") and len(name) > len("metadata."):
        key = name.removeprefix("metadata.")
        return lambda record: record.metadata.get(key)
    raise _error(f"field {name!r} is not filterable", parent, FIELDS)


def _seconds(moment: datetime | None) -> float | None:
    return None if moment is None else as_utc(moment).timestamp()


def _condition(name: str, op: str, operand: Any, at: str) -> Callable[[Any], bool]:
    """The test of one operator on the field's value (None where the record lacks it)."""
    if op not in OPERATORS:
        raise _error(f"unknown operator {op!r}", at, OPERATORS)
    allowed = _EQUALITY if name == "kind" else OPERATORS[:-1] if name in _TIMES else OPERATORS
    if op not in allowed:
        raise _error(f"operator {op!r} does not apply to {name}", at, allowed)
    if op in ("in", "nin"):
        if not isinstance(operand, list):
            raise _error(f"'{op}' needs a list, got {json.dumps(operand, default=repr)}", at)
        inside = _any([_equals(_value(name, item, at)) for item in operand])
        return inside if op == "in" else (lambda found: not inside(found))
    if op == "contains":
        if not isinstance(operand, str):
            raise _error(f"'contains' needs a string, got {json.dumps(operand, default=repr)}", at)
        return lambda found: found.__class__ is str and operand in found
    want = _value(name, operand, at)
    if op in ("eq", "ne"):
        equal = _equals(want)
        return equal if op == "eq" else (lambda found: not equal(found))
    if want is None or isinstance(want, bool):
        raise _error(f"'{op}' needs a time, a number or a string, got {json.dumps(operand)}", at)
    order = _ORDERINGS[op]
    kinds = (str,) if isinstance(want, str) else (int, float)  # a bool is neither: type(True) is bool
    return lambda found: found.__class__ in kinds and order(found, want)


def _equals(want: Value) -> Callable[[Any], bool]:
    """JSON equality: a boolean equals only a boolean (Python's ``True == 1`` does not hold here)."""
    if want is None or isinstance(want, bool):
        return lambda found: found is want
    if isinstance(want, str):
        return lambda found: found == want
    return lambda found: found == want and found.__class__ is not bool


def _value(name: str, operand: Any, at: str) -> Value:
    """An operand as the field holds it: epoch seconds for a time, a known kind, a JSON scalar."""
    if operand is None:
        return None
    if name in _TIMES:
        if not isinstance(operand, str):
            raise _error(f"times must be ISO 8601 strings, got {json.dumps(operand, default=repr)}", at)
        try:
            return as_utc(datetime.fromisoformat(operand)).timestamp()
        except ValueError:
            raise _error(f"{operand!r} is not an ISO 8601 time", at) from None
    if name == "kind":
        kinds = [kind.value for kind in RecordKind]
        if operand not in kinds:
            raise _error(f"unknown kind {operand!r}", at, kinds)
        return str(operand)
    if not isinstance(operand, str | int | float | bool):
        got = json.dumps(operand, default=repr)
        raise _error(f"expected a string, number, boolean or null, got {got}", at)
    return operand
