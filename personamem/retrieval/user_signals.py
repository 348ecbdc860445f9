"""What the learned ranker reads of one user's history, built once and grown as records are appended.

Every search the ranker serves reads these: per record its vector, length, position, kind, role, day,
session neighbours and cues (names, numbers, dates), and of the whole history its vocabulary, proper
names, statistics and shape (the gate's ``profile``). Building them reads every record (about 0.3 s
at 5,000 records), so an agent that adds a turn and searches would pay that per turn; a write that
only appends records lets :meth:`UserSignals.extended` add the new rows to the last signals instead.
A history's signals are its signals grown from nothing by all its records, so the two are the same
by construction (``tests/retrieval/test_user_signals.py`` checks them equal too).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from personamem.retrieval.bm25 import UserIndex
from personamem.retrieval.cues import NameCounts, dates, names, numbers
from personamem.retrieval.ranker_gate import history_profile
from personamem.retrieval.when import NO_DAY, day_number
from personamem.store import Store

__all__ = ["ASSISTANT", "UserSignals"]

_KINDS = {"conversation": 0, "dialog": 1, "purchase": 2, "post": 3, "qa": 4, "knowledge": 5, "note": 6}
ASSISTANT = 2.0
"""The role code (``UserSignals.role``) of a turn an assistant wrote."""
_ROLES = {"user": 1.0, "assistant": ASSISTANT}  # any other role, or none: 0
_ROLE_NAMES = np.array(["", "user", "assistant"], dtype=object)  # by role code, for the profile
_HEADROOM = 1.25  # a history appended to once will be again: its vectors' buffer grows by a quarter


class _Rows:
    """The buffer a history's vectors live in, shared by its successive signals, each seeing its first rows.

    Copying every vector per appended turn cost 5-8 ms at 20,000 records. Rows past the ones a
    signals value sees are written only by the one extension that finds the buffer filled exactly to
    its rows; another (two threads growing the same signals) copies instead, so no value's rows move.
    """

    def __init__(self, rows: np.ndarray) -> None:
        self.buffer = rows
        self.filled = len(rows)
        self.lock = threading.Lock()

    def appended(self, seen: int, rows: np.ndarray) -> tuple[_Rows, np.ndarray]:
        """The buffer holding the first ``seen`` rows and then ``rows``, and a view of those rows."""
        total = seen + len(rows)
        with self.lock:
            if seen == self.filled and total <= len(self.buffer):
                self.buffer[seen:total] = rows
                self.filled = total
                return self, self.buffer[:total]
        buffer = np.empty((int(total * _HEADROOM) + 16, self.buffer.shape[1]), np.float32)
        buffer[:seen], buffer[seen:total] = self.buffer[:seen], rows
        grown = _Rows(buffer)
        grown.filled = total
        return grown, buffer[:total]


@dataclass(frozen=True)
class UserSignals:
    """What the ranker reads of one user's history (rows as the BM25 index's records)."""

    index: UserIndex
    vectors: np.ndarray
    vocabulary: frozenset[str]
    words: np.ndarray
    """Each record's count of words (float32)."""
    words_log: np.ndarray
    position: np.ndarray
    kind: np.ndarray
    role: np.ndarray
    days: np.ndarray
    """Each record's day number (:func:`~personamem.retrieval.when.day_number`), for a named window."""
    neighbours: np.ndarray
    """Each record's previous and next turn of the same session, as rows (-1: none), ``(n, 2)``."""
    last_of_session: dict[str, int]
    """Each session's last row so far: where a turn appended to it joins."""
    names: list[tuple[str, ...]]
    named: frozenset[str]
    """Every name the records hold (:func:`~personamem.retrieval.cues.names`), for a question's."""
    name_counts: NameCounts
    proper: frozenset[str]
    """The words the records capitalise mid-sentence more than not, for a lowercase question's."""
    numbers: list[tuple[str, ...]]
    dates: list[tuple[str, ...]]
    """Each record's cues (:mod:`~personamem.retrieval.cues`), distinct, as tuples of interned words."""
    stats: dict[str, float]
    profile: dict[str, float]
    """The history's shape, which the ranker's gate reads (``ranker_gate.history_profile``)."""
    rows: _Rows | None = field(default=None, repr=False, compare=False)
    """Where :attr:`vectors` live once the signals grew (None: :attr:`vectors` is an array of its own)."""

    def __len__(self) -> int:
        """The records these signals hold (the cache scales a grown value's size by it)."""
        return len(self.index.records)

    @classmethod
    def of(cls, store: Store, index: UserIndex, user_id: str) -> UserSignals:
        """The signals of ``user_id``'s ``index`` and its records' stored vectors (searches and training)."""
        return cls.build(index, store.record_vectors(user_id, [r.id for r in index.records]))

    @classmethod
    def build(cls, index: UserIndex, vectors: np.ndarray) -> UserSignals:
        """The signals of ``index``'s records, with ``vectors`` their stored vectors (rows aligned)."""
        return cls._empty(vectors.shape[1]).extended(index, vectors)

    @classmethod
    def _empty(cls, dim: int) -> UserSignals:
        nothing = np.zeros(0, np.float32)
        return cls(
            index=UserIndex.of(0, []),
            vectors=np.zeros((0, dim), np.float32),
            vocabulary=frozenset(),
            words=nothing,
            words_log=nothing,
            position=nothing,
            kind=nothing,
            role=nothing,
            days=np.zeros(0, np.int32),
            neighbours=np.zeros((0, 2), np.int64),
            last_of_session={},
            names=[],
            named=frozenset(),
            name_counts=NameCounts(),
            proper=frozenset(),
            numbers=[],
            dates=[],
            stats={},
            profile={},
        )

    def extended(self, index: UserIndex, vectors: np.ndarray) -> UserSignals:
        """These signals with ``index``'s records past theirs appended; ``vectors``: those records'.

        ``index`` must hold these signals' records first, as they are (an index grown from theirs).
        """
        start = len(self.index.records)
        added = index.records[start:]
        vectors = np.asarray(vectors, np.float32)
        rows = None  # built at once: the vectors as read, no room to grow until the history grows
        if start:
            rows, vectors = (self.rows or _Rows(self.vectors)).appended(start, vectors)
        words = np.concatenate((self.words, np.array([len(r.text.split()) for r in added], np.float32)))
        n = len(words)
        role = np.concatenate(
            (self.role, np.array([_ROLES.get(r.role or "", 0.0) for r in added], np.float32))
        )
        added_names = [names(r.text) for r in added]
        added_dates = [dates(r.text) for r in added]
        record_names = [*self.names, *_compact(added_names)]
        record_dates = [*self.dates, *_compact(added_dates)]
        neighbours, last_of_session = _session_neighbours(self, [r.session for r in added])
        name_counts = self.name_counts.added(r.text for r in added)
        return UserSignals(
            index=index,
            vectors=vectors,
            vocabulary=_with(self.vocabulary, index.tokens[start:]),
            words=words,
            words_log=np.log1p(words),
            position=np.arange(n, dtype=np.float32) / max(n - 1, 1),
            kind=np.concatenate(
                (self.kind, np.array([_KINDS.get(r.kind.value, 6) for r in added], np.float32))
            ),
            role=role,
            days=np.concatenate(
                (
                    self.days,
                    np.array([day_number(r.timestamp) if r.timestamp else NO_DAY for r in added], np.int32),
                )
            ),
            neighbours=neighbours,
            last_of_session=last_of_session,
            names=record_names,
            named=_with(self.named, added_names),
            name_counts=name_counts,
            proper=name_counts.proper(),
            numbers=[*self.numbers, *_compact(numbers(r.text) for r in added)],
            dates=record_dates,
            stats={
                "u_mean_words_log": float(np.log1p(words.mean())) if n else 0.0,
                "u_median_words_log": float(np.log1p(np.median(words))) if n else 0.0,
                "u_share_long": float((words > 50).mean()) if n else 0.0,
                "u_n_records_log": float(np.log1p(n)),
            },
            profile=history_profile(words, _ROLE_NAMES[role.astype(np.int64)], record_names, record_dates),
            rows=rows,
        )


def _session_neighbours(
    signals: UserSignals, sessions: Sequence[str | None]
) -> tuple[np.ndarray, dict[str, int]]:
    """The neighbours of ``signals``' rows and of the rows appended with ``sessions``, and each session's end.

    Per row, the rows of the turns before and after it in its session, in the history's order.
    """
    start = len(signals.neighbours)
    neighbours = np.concatenate((signals.neighbours, np.full((len(sessions), 2), -1, np.int64)))
    last = dict(signals.last_of_session) if sessions else signals.last_of_session
    for row, session in enumerate(sessions, start=start):
        if session is None:
            continue
        before = last.get(session)
        if before is not None:
            neighbours[row, 0], neighbours[before, 1] = before, row
        last[session] = row
    return neighbours, last


def _with(words: frozenset[str], added: Iterable[Iterable[str]]) -> frozenset[str]:
    """``words`` and the ``added`` ones; ``words`` itself where none is new (copying it took 0.3 ms)."""
    new = set().union(*added) - words
    return words | new if new else words


def _compact(cues: Iterable[set[str]]) -> list[tuple[str, ...]]:
    """Per-record cue sets as tuples of interned words, which a user's signals keep for every record.

    Most are empty (``()`` is shared) or hold a word or two, where a set takes 216 bytes and each
    word its own string.
    """
    return [tuple(map(sys.intern, words)) for words in cues]
