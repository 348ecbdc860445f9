"""Team-draft interleaving: a candidate ranking judged on live traffic against the live one.

Offline comparisons favour the live pipeline: an application can only report records that were
served, so the pipeline that served them wins by construction (issue 44). Search engines judge rankers
online by interleaving; this is team draft (Radlinski, Kurup and Joachims, CIKM 2008). On a share of
calls the live and the candidate ranking take turns, a coin deciding who picks first in each round,
each adding its best record not yet shown; the call is logged with which team placed each record.
The records the answer then used (named in feedback, or attributed to the answer) credit the team
that placed them: a call is a win, a loss or a tie for the candidate. A one-sided sign test over
wins and losses decides the trial: the candidate goes live, or is dropped. Once live, the ranking it
replaced is tried against it the same way, and put back if it wins.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, TypeVar

from personamem.retrieval.base import Hit
from personamem.store.read import Read

__all__ = [
    "ALPHA",
    "MIN_CALLS",
    "SHARE",
    "Draft",
    "Trial",
    "Verdict",
    "credit",
    "sign_test",
    "team_draft",
]

Team = Literal["live", "candidate"]
Role = Literal["challenger", "incumbent"]

SHARE = 0.1
"""Share of calls served interleaved while a trial runs (the rest get the live ranking alone)."""
ALPHA = 0.05
"""One-sided sign-test level at which a trial is decided either way."""
MIN_CALLS = 10
"""Fewest credited calls (wins and losses) before a trial may be decided."""

_T = TypeVar("_T")


def team_draft(
    live: Sequence[_T], candidate: Sequence[_T], n: int, rng: random.Random
) -> list[tuple[_T, Team]]:
    """The first ``n`` items of the two rankings by team draft, each with the team that placed it.

    In each round the team with fewer picks goes first (a coin decides a tie); a team adds its
    best item not yet placed, and when its ranking is spent the other team picks.
    """
    placed: list[tuple[_T, Team]] = []
    seen: set[_T] = set()
    lists: dict[Team, Sequence[_T]] = {"live": live, "candidate": candidate}
    cursor: dict[Team, int] = {"live": 0, "candidate": 0}
    picks: dict[Team, int] = {"live": 0, "candidate": 0}

    def next_of(team: Team) -> _T | None:
        ranking = lists[team]
        while cursor[team] < len(ranking) and ranking[cursor[team]] in seen:
            cursor[team] += 1
        return ranking[cursor[team]] if cursor[team] < len(ranking) else None

    while len(placed) < n:
        first: Team = (
            "live"
            if picks["live"] < picks["candidate"]
            else "candidate"
            if picks["candidate"] < picks["live"]
            else rng.choice(("live", "candidate"))
        )
        order: tuple[Team, Team] = (first, "candidate" if first == "live" else "live")
        team = next((t for t in order if next_of(t) is not None), None)
        if team is None:
            break
        item = next_of(team)
        assert item is not None
        placed.append((item, team))
        seen.add(item)
        picks[team] += 1
    return placed


def credit(teams: Mapping[str, str], used: Iterable[str]) -> Literal["win", "loss", "tie"] | None:
    """The call's outcome for the candidate: more of the used records from its team (win), fewer (loss).

    As many from each team is a tie; None where the answer used none of the records served.
    """
    counts = {"live": 0, "candidate": 0}
    for record_id in set(used):
        team = teams.get(record_id)
        if team in counts:
            counts[team] += 1
    if not any(counts.values()):
        return None
    if counts["candidate"] == counts["live"]:
        return "tie"
    return "win" if counts["candidate"] > counts["live"] else "loss"


def sign_test(wins: int, losses: int) -> float:
    """One-sided sign test: the chance of at least ``wins`` of ``wins + losses`` fair coin flips.

    Ties are left out: a call whose answer drew as much on each team says nothing about either.
    """
    n = wins + losses
    return sum(math.comb(n, i) for i in range(wins, n + 1)) / 2**n if n else 1.0


@dataclass(frozen=True)
class Verdict:
    """A trial's count so far and what it says."""

    wins: int = 0
    losses: int = 0
    ties: int = 0

    @property
    def p_better(self) -> float:
        """The sign test's p-value for "the candidate is better"."""
        return sign_test(self.wins, self.losses)

    @property
    def p_worse(self) -> float:
        """The sign test's p-value for "the candidate is worse"."""
        return sign_test(self.losses, self.wins)

    @property
    def decision(self) -> Literal["candidate", "live"] | None:
        """Who the traffic says wins, once :data:`MIN_CALLS` calls are credited and the test is clear."""
        if self.wins + self.losses < MIN_CALLS:
            return None
        if self.p_better < ALPHA:
            return "candidate"
        return "live" if self.p_worse < ALPHA else None

    @classmethod
    def of(cls, outcomes: Iterable[str]) -> Verdict:
        """The tally of logged outcomes (``win``, ``loss``, ``tie``)."""
        found = list(outcomes)
        return cls(found.count("win"), found.count("loss"), found.count("tie"))


@dataclass(frozen=True)
class Trial:
    """A candidate pipeline on trial against the live one, kept with the data (``store/live_pipeline.py``).

    ``table`` is the candidate's ``[pipeline]`` table and ``live`` the live table it was started
    against (JSON; None: the package default): a call is interleaved only while that is still the
    live one, so a pipeline put live some other way ends the comparison. ``role``: a
    ``challenger`` (from ``improve``) goes live when it wins; an ``incumbent`` is the pipeline a winner
    replaced, put back when it wins (the rollback watch). ``tenant``: whose live pipeline it decides.
    """

    table: dict[str, Any]
    live: str | None
    tenant: str | None = None
    role: Role = "challenger"
    share: float = SHARE
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def to_json(self) -> str:
        """The text :meth:`from_json` reads back."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Trial:
        """The trial :meth:`to_json` wrote."""
        return cls(**json.loads(text))


class Ranking(Protocol):
    """What a trial's candidate offers: its top ``k`` and its profile for a call (``Pipeline`` does)."""

    def search(self, user_id: str, query: str, k: int, read: Read) -> list[Hit]: ...

    def profile(self, user_id: str, query: str, read: Read) -> list[Hit]: ...


class Draft:
    """One interleaved call: the candidate's list merged into the live one, and what to log about it."""

    def __init__(self, trial: Trial, candidate: Ranking, rng: random.Random | None = None) -> None:
        self.trial = trial
        self.candidate = candidate
        self._rng = rng or random.Random()
        self.teams: dict[str, Team] = {}

    def search(self, user_id: str, query: str, live: list[Hit], k: int, read: Read) -> list[Hit]:
        """The live search's hits interleaved with the candidate's top ``k``, read as the live one was."""
        return self._merge(live, self.candidate.search(user_id, query, k, read), k)

    def profile(self, user_id: str, query: str, live: list[Hit], read: Read) -> list[Hit]:
        """The live profile interleaved with the candidate's, as long as the longer of the two."""
        theirs = self.candidate.profile(user_id, query, read)
        return self._merge(live, theirs, max(len(live), len(theirs)))

    def _merge(self, live: list[Hit], candidate: list[Hit], n: int) -> list[Hit]:
        by_id = {hit.record.id: hit for hit in candidate} | {hit.record.id: hit for hit in live}
        order = team_draft([h.record.id for h in live], [h.record.id for h in candidate], n, self._rng)
        self.teams = dict(order)
        return [Hit(by_id[r].record, by_id[r].score, rank) for rank, (r, _) in enumerate(order, start=1)]

    @property
    def logged(self) -> dict[str, Any]:
        """What the call's log row keeps: the trial and the team of each record served."""
        return {"trial": self.trial.id, "teams": self.teams}
