"""Where a learned ranker's trees may serve: histories shaped like those on which they were shown to help.

Trees fitted on benchmarks learn those benchmarks' corrections (issue 44's leave-one-benchmark-out:
trained without LoCoMo, validation kept no tree; trained with it, they gain on LoCoMo alone), and on
long user–assistant histories that nobody trained on they lost to plain retrieval. So a ranker folder
names the *regions* of history shape where its trees gained on validation users, and a user whose
history lies outside every region is served the score fusion (``ranker.score_fusion``) instead.

A history's shape is a few label-free statistics of the user's records (:data:`PROFILE`): how long
its records are, how many overrun the encoder's window, who wrote them, how many name people or
dates. A region is one benchmark's users' range of each statistic, widened by :data:`TOLERANCE`
pooled standard deviations (every benchmark's users pooled): a box, so ``personamem analyze
ranker`` can say which statistic put a user outside. No region, no trees: a folder that the trainer
found no gain for serves exactly the default. The same boxes say where the score fusion reads the
query adapter's cosine rather than the base one (``adapter_gate`` in ``ranker.json``): an adapter
helps where it was trained, and not reliably on histories it never saw.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "PROFILE",
    "TOLERANCE",
    "WINDOW_WORDS",
    "GateDecision",
    "RankerGate",
    "Region",
    "as_profile",
    "calibrate",
    "history_profile",
]

PROFILE: tuple[str, ...] = (
    "words_log_mean",
    "share_over_window",
    "share_user",
    "share_assistant",
    "share_named",
    "share_dated",
)
"""The statistics of a history's shape, in the order regions store them."""
WINDOW_WORDS = 190
"""Words past which a record overruns the encoder's 256-word-piece window (~1.35 pieces a word)."""
TOLERANCE = 0.5
"""How far past a benchmark's own users' range a statistic may lie and still be in its region, in
pooled standard deviations of that statistic."""


def history_profile(
    words: np.ndarray, roles: Sequence[str] | np.ndarray, named: Iterable[object], dated: Iterable[object]
) -> dict[str, float]:
    """The shape of one user's history: each record's word count, role, and whether it names or dates.

    Roles are ``user``, ``assistant``, or anything else (none, ``system``, ``tool``); ``named`` and
    ``dated`` are truthy for each record that names or dates (its cues, or a flag).
    """
    n = len(words)
    if not n:
        return dict.fromkeys(PROFILE, 0.0)
    kinds = np.asarray(roles, dtype=object)  # counted in numpy: a 20,000-record history is asked often
    return {
        "words_log_mean": float(np.log1p(np.asarray(words, np.float64)).mean()),
        "share_over_window": float((np.asarray(words) > WINDOW_WORDS).mean()),
        "share_user": int(np.count_nonzero(kinds == "user")) / n,
        "share_assistant": int(np.count_nonzero(kinds == "assistant")) / n,
        "share_named": int(np.count_nonzero(np.fromiter(map(bool, named), bool, n))) / n,
        "share_dated": int(np.count_nonzero(np.fromiter(map(bool, dated), bool, n))) / n,
    }


def as_profile(row: Sequence[float] | np.ndarray) -> dict[str, float]:
    """A stored profile row (:data:`PROFILE` columns) as the mapping the gate decides on."""
    return dict(zip(PROFILE, map(float, row), strict=True))


@dataclass(frozen=True)
class Region:
    """One benchmark's box of history shapes: per statistic, ``low`` to ``high`` (tolerance included)."""

    benchmark: str
    low: tuple[float, ...]
    high: tuple[float, ...]

    def outside(self, profile: Mapping[str, float]) -> list[str]:
        """The statistics of ``profile`` outside this box, each with its value and the box's range."""
        return [
            f"{name} {profile[name]:.2f} not in {self.benchmark}'s {low:.2f}–{high:.2f}"
            for name, low, high in zip(PROFILE, self.low, self.high, strict=True)
            if not low <= profile[name] <= high
        ]


@dataclass(frozen=True)
class GateDecision:
    """Whether a history gets what the gate guards (trees, the adapter's cosine), and why, in words."""

    serves: bool
    reason: str


@dataclass(frozen=True)
class RankerGate:
    """The regions where a ranker's trees serve; ``None`` in a folder means everywhere (an older folder)."""

    regions: tuple[Region, ...]

    @classmethod
    def fit(
        cls, profiles: Mapping[str, np.ndarray], admitted: Sequence[str], *, tolerance: float = TOLERANCE
    ) -> RankerGate:
        """Boxes around the ``admitted`` benchmarks' users, from every benchmark's user profiles.

        Args:
            profiles: benchmark -> ``(users, len(PROFILE))``, one row per user (all of its users:
                a profile reads no label).
            admitted: the benchmarks whose validation users the trees gained on.
            tolerance: how far past a benchmark's range a box reaches, in pooled standard deviations.
        """
        pooled = np.concatenate([p for p in profiles.values() if len(p)]) if profiles else np.zeros((0, 1))
        spread = pooled.std(axis=0) * tolerance if len(pooled) else np.zeros(len(PROFILE))
        regions = []
        for name in admitted:
            rows = profiles.get(name)
            if rows is None or not len(rows):
                continue
            low, high = rows.min(axis=0) - spread, rows.max(axis=0) + spread
            regions.append(Region(name, tuple(map(float, low)), tuple(map(float, high))))
        return cls(tuple(regions))

    def decide(self, profile: Mapping[str, float], what: str = "the trees") -> GateDecision:
        """Served if ``profile`` lies in some region; otherwise the reason each region refused it.

        ``what``: what the gate guards, as its reasons name it.
        """
        if not self.regions:
            return GateDecision(False, f"no region: {what} gained on no benchmark's validation users")
        refusals = []
        for region in self.regions:
            outside = region.outside(profile)
            if not outside:
                return GateDecision(True, f"history shaped like {region.benchmark}'s, where {what} gained")
            refusals.append("; ".join(outside))
        return GateDecision(False, "outside every region: " + " | ".join(refusals))

    def to_json(self) -> dict[str, object]:
        """The ``gate`` entry of ``ranker.json``."""
        return {
            "profile": list(PROFILE),
            "regions": [{"benchmark": r.benchmark, "low": r.low, "high": r.high} for r in self.regions],
        }

    def admits(self, rows: np.ndarray) -> float:
        """The share of ``rows`` (user profiles, :data:`PROFILE` columns) the trees would serve."""
        if not len(rows):
            return 0.0
        return float(np.mean([self.decide(as_profile(row)).serves for row in rows]))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RankerGate:
        """A gate written by :meth:`to_json`.

        Raises:
            ValueError: statistics other than this version's :data:`PROFILE`.
        """
        if tuple(data.get("profile", ())) != PROFILE:
            raise ValueError("its gate reads other history statistics than this version computes")
        regions = data.get("regions", [])
        return cls(tuple(Region(r["benchmark"], tuple(r["low"]), tuple(r["high"])) for r in regions))


def calibrate(
    profiles: Mapping[str, np.ndarray], admitted: Sequence[str], *, tolerance: float = TOLERANCE
) -> dict[str, dict[str, float]]:
    """How a gate of ``admitted`` regions treats users it was not built on, per admitted benchmark.

    ``own users left out``: the share of the benchmark's users that a box built without each of them
    admits (an unseen history of the same kind); every other benchmark: the share of its users that
    the box admits (a history of another kind). A tolerance is well placed when the first is high
    and the others are zero.
    """
    report: dict[str, dict[str, float]] = {}
    for name in admitted:
        rows = profiles.get(name)
        if rows is None or not len(rows):
            continue
        others = {n: p for n, p in profiles.items() if n != name}
        left_out = [
            RankerGate.fit({**others, name: np.delete(rows, i, axis=0)}, [name], tolerance=tolerance).admits(
                rows[i : i + 1]
            )
            for i in range(len(rows))
            if len(rows) > 1
        ]
        box = RankerGate.fit(profiles, [name], tolerance=tolerance)
        report[name] = {
            "own users left out": float(np.mean(left_out)) if left_out else float("nan"),
            **{n: box.admits(p) for n, p in others.items()},
        }
    return report
