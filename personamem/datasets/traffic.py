"""Data from an application's own traffic: logged interactions with feedback, over its store.

A deployment logs its calls (``log_interactions = true``) and reports what happened next with
``PersonaMem.feedback``. Each trainer reads what it needs from that log:

* PURPLE: (history, query, the accepted answer): interactions with an answer; the candidates are the
  first stage's top records from the user's history in the store, as at serving time.
* PG-Ret: (query, accepted records): interactions whose feedback names the records the answer used,
  over the store's own record vectors (the ones a trained tower is searched against).
* MemRerank: (query, the chosen item against the shown ones): interactions with one used record and at
  least four shown records that were not used, the 1-positive/4-negative choice the reward asks for.

The records always come from a store (``--from-store``); the interactions from its log or from a
JSONL export (``--from-log``, e.g. gathered from several deployments). Users are split into
training and validation users; there are no test users here, because an application's held-out
check is its next traffic (or a benchmark's held-out users, as in the README's replay).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, model_validator

from personamem.errors import InsufficientDataError
from personamem.interactions import Interaction, read_interactions
from personamem.records import Record

if TYPE_CHECKING:
    from personamem.store import Store

__all__ = [
    "Traffic",
    "TrafficSource",
    "accepted",
    "open_traffic",
    "split_traffic",
]


class TrafficSource(BaseModel):
    """Where a trainer's data comes from: a benchmark, or an application's store and interaction log.

    Mixed into each trainer's data config, so every ``personamem train`` command takes the same
    ``--from-store`` / ``--from-log`` / ``--min-rating`` options. A config that also has ``benchmark``
    and ``data`` fields is checked to name exactly one source.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    from_store: Path | None = None
    """Train on an application's traffic: the store folder (as 'personamem --store') whose records and
    logged interactions with feedback make the examples."""
    from_log: Path | None = None
    """Take the interactions from this JSONL export ('personamem log export') instead of the store's own
    log; the records still come from --from-store."""
    min_rating: float | None = None
    """Use only feedback rated at least this (default: all feedback, rated or not)."""

    @model_validator(mode="after")
    def _one_source(self) -> TrafficSource:
        if self.from_log is not None and self.from_store is None:
            raise ValueError(
                "--from-log needs --from-store: the log names records by id, their texts and vectors "
                "are in the store"
            )
        benchmark = getattr(self, "benchmark", None)  # a name, or several (empty: none)
        folder = "--data-root" if "data_root" in type(self).model_fields else "--data"
        if benchmark and self.from_store is not None:
            raise ValueError(f"give one data source: --benchmark with {folder}, or --from-store")
        if not benchmark and self.from_store is None and "benchmark" in type(self).model_fields:
            raise ValueError(f"no data source: give --benchmark with {folder}, or --from-store")
        if benchmark and getattr(self, folder.removeprefix("--").replace("-", "_"), None) is None:
            raise ValueError(f"--benchmark needs {folder}, the folder of the benchmark data")
        return self

    @property
    def from_traffic(self) -> bool:
        """Whether this run trains on traffic rather than a benchmark."""
        return self.from_store is not None


@dataclass
class Traffic:
    """An opened store and the interactions to learn from; close it when done.

    Attributes:
        store: the application's store (its records and vectors), opened read-mostly.
        interactions: the logged calls, oldest first.
        source: where they came from, recorded in the checkpoint.
    """

    store: Store
    interactions: list[Interaction]
    source: dict[str, Any] = field(default_factory=dict)
    _records: dict[str, dict[str, Record]] = field(default_factory=dict, repr=False)

    def records(self, user_id: str) -> dict[str, Record]:
        """The user's records by id, in insertion order (read once per user and kept)."""
        if user_id not in self._records:
            self._records[user_id] = {r.id: r for r in self.store.records(user_id)}
        return self._records[user_id]

    def close(self) -> None:
        """Close the store."""
        self.store.close()


def open_traffic(source: TrafficSource) -> Traffic:
    """The store named by ``source.from_store`` and its log (or ``source.from_log``'s interactions).

    Raises:
        ValueError: no --from-store, or a store folder that does not exist.
        IngestError: a bad line in the --from-log file (its number is in the message).
    """
    if source.from_store is None:
        raise ValueError("no traffic source: give --from-store (and optionally --from-log)")
    if not source.from_store.is_dir():
        raise ValueError(f"--from-store {source.from_store}: no such store folder")
    interactions = read_interactions(source.from_log) if source.from_log else None
    from personamem.store import Store  # here: reading a benchmark needs no SQL

    store = Store.open(source.from_store)
    if interactions is None:
        interactions = store.interactions.export(None)
    described: dict[str, Any] = {"store": str(source.from_store.resolve())}
    if source.from_log is not None:
        described["log"] = str(source.from_log.resolve())
    described["interactions"] = len(interactions)
    if source.min_rating is not None:
        described["min_rating"] = source.min_rating
    return Traffic(store, interactions, described)


def accepted(interaction: Interaction, min_rating: float | None) -> bool:
    """Whether the interaction has feedback that passes the rating bar (unrated feedback passes)."""
    feedback = interaction.feedback
    if feedback is None:
        return False
    return min_rating is None or feedback.rating is None or feedback.rating >= min_rating


def split_traffic(
    what: str,
    examples_by_user: dict[str, int],
    *,
    validation: int,
    seed: int,
    need_train: int,
    hint: str,
) -> tuple[list[str], list[str]]:
    """(training users, validation users), the validation users drawn by ``seed``.

    Raises:
        InsufficientDataError: fewer than ``validation + 1`` users with examples, or fewer than
            ``need_train`` examples (a batch) on the training side; the message gives the counts
            found and needed, and ``hint`` says what to log.
    """
    users = sorted(u for u, n in examples_by_user.items() if n)
    random.Random(seed).shuffle(users)
    train, held = sorted(users[validation:]), sorted(users[:validation])
    found = sum(examples_by_user[u] for u in train)
    if len(users) < validation + 1 or found < need_train:
        total = sum(examples_by_user.values())
        raise InsufficientDataError(
            f"too little traffic to train {what}: {total} usable interaction(s) from {len(users)} "
            f"user(s), {found} of them on the training side; need at least {validation + 1} users "
            f"({validation} held out for validation) and {need_train} training interactions. {hint}"
        )
    return train, held
