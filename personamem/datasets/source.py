"""Where a run's data comes from, a benchmark or logged traffic, and which users it holds out.

:class:`DataSource` is the one place that decides between the two: the harness reads a benchmark's
questions through it, and every trainer reads its examples through :meth:`DataSource.read` (a function
per source turns what was read into the trainer's own examples), splits users with
:meth:`DataSource.split` and writes ``split.json`` with :func:`write_split`, whose ``test_users``
``personamem eval --held-out`` reads back (:func:`held_out_questions`). Splits are by user, so a
held-out user is never trained on.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from personamem.datasets.benchmark import Benchmark
from personamem.datasets.table import BenchmarkName, BenchmarkOptions, dataset, nest_options, read_questions
from personamem.datasets.traffic import Traffic, TrafficSource, open_traffic, split_traffic

__all__ = ["DataSource", "HeldOutBenchmarks", "UserSplit", "held_out_questions", "write_split"]

T = TypeVar("T")


@dataclass(frozen=True)
class UserSplit:
    """Which users train, which choose the checkpoint, which are only ever tested on."""

    train: list[str]
    validation: list[str]
    test: list[str]

    def to_json(self) -> dict[str, list[str]]:
        """``split.json``'s user lists (``test_users`` is what ``personamem eval --held-out`` reads)."""
        return {"train_users": self.train, "validation_users": self.validation, "test_users": self.test}

    @classmethod
    def by_count(cls, users: Sequence[str], *, validation: int, test: int, seed: int) -> UserSplit:
        """``validation`` and ``test`` whole users drawn by ``seed``, the rest training.

        Raises:
            ValueError: fewer than ``validation + test + 1`` users.
        """
        users = sorted(set(users))
        if len(users) < validation + test + 1:
            raise ValueError(
                f"{len(users)} users cannot give {validation} validation, {test} test and a training user"
            )
        random.Random(seed).shuffle(users)
        return cls(
            train=sorted(users[validation + test :]),
            validation=sorted(users[:validation]),
            test=sorted(users[validation : validation + test]),
        )

    @classmethod
    def by_share(
        cls, users: Sequence[str], *, test_share: float, validation_share: float, seed: int
    ) -> UserSplit:
        """Shares of the users drawn by ``seed``: at least one tested and one training.

        Validation may be empty for tiny benchmarks (four PersonaBench users give two for training,
        two for testing).

        Raises:
            ValueError: fewer than two users.
        """
        users = sorted(set(users))
        if len(users) < 2:
            raise ValueError(f"{len(users)} user(s) cannot give a training and a test user")
        random.Random(seed).shuffle(users)
        test = max(1, round(test_share * len(users)))
        validation = min(int(validation_share * len(users)), len(users) - test - 1)
        return cls(
            train=sorted(users[test + validation :]),
            validation=sorted(users[test : test + validation]),
            test=sorted(users[:test]),
        )


class DataSource(TrafficSource):
    """A benchmark's questions, or an application's traffic, and how its users are held out.

    Each field is an option of every command that reads one (``--benchmark``, ``--data``, the
    benchmarks' own options such as ``--noise``, ``--from-store``, ``--validation-users``...).
    """

    benchmark: BenchmarkName | None = None
    """The benchmark to read (or train on an application's traffic: --from-store)."""
    data: Path | None = None
    """The benchmark folder in its upstream layout."""
    options: BenchmarkOptions = BenchmarkOptions()
    """Each benchmark's reading options."""
    validation_users: int = Field(default=1, ge=1)
    """Users held out for validation (checkpoint choice)."""
    test_users: int = Field(default=2, ge=1)
    """Users held out for testing (never trained on; split.json names them). Traffic has none: its
    held-out check is the next traffic."""
    split_seed: int = 0
    """Seeds which users are held out; keep it fixed to compare training seeds."""

    @model_validator(mode="before")
    @classmethod
    def _flat_options(cls, data: object) -> object:
        return nest_options(data) if isinstance(data, Mapping) else data

    def questions(self) -> Benchmark:
        """The benchmark's records and questions.

        Raises:
            ValueError: a traffic source (it has no questions to read here).
        """
        if self.benchmark is None or self.data is None:
            raise ValueError("no benchmark to read: give --benchmark and --data")
        return read_questions(self.benchmark, self.data, self.options)

    def read(
        self, from_benchmark: Callable[[Benchmark], T], from_traffic: Callable[[Traffic], T]
    ) -> tuple[T, dict[str, Any]]:
        """What ``from_benchmark`` or ``from_traffic`` makes of the source, and where it came from.

        The traffic's store is open only while ``from_traffic`` runs. The description is what
        checkpoints record as their data source (``{"benchmark": ..., "data": ...}`` or
        ``{"traffic": ...}``).
        """
        if not self.from_traffic:
            benchmark = self.questions()
            return from_benchmark(benchmark), {"benchmark": benchmark.name, "data": str(self.data)}
        traffic = open_traffic(self)
        try:
            return from_traffic(traffic), {"traffic": traffic.source}
        finally:
            traffic.close()

    def split(
        self, examples_by_user: Mapping[str, int], *, what: str, need_train: int, hint: str
    ) -> UserSplit:
        """The users with examples, split by ``split_seed``.

        A benchmark holds out ``validation_users`` and ``test_users``; traffic holds out
        ``validation_users`` only and needs ``need_train`` training examples, else the error says how
        much traffic ``what`` needs and ``hint`` what to log.

        Raises:
            ValueError: too few users for the split.
            InsufficientDataError: too little traffic.
        """
        if not self.from_traffic:
            users = [user for user, count in examples_by_user.items() if count]
            return UserSplit.by_count(
                users, validation=self.validation_users, test=self.test_users, seed=self.split_seed
            )
        train, held = split_traffic(
            what,
            dict(examples_by_user),
            validation=self.validation_users,
            seed=self.split_seed,
            need_train=need_train,
            hint=hint,
        )
        return UserSplit(train, held, [])

    def split_json(self, split: UserSplit, origin: dict[str, Any], **details: Any) -> dict[str, Any]:
        """``split.json``: where the data came from, the seed, ``details`` and the users."""
        payload: dict[str, Any] = {
            "source": origin,
            "split_seed": self.split_seed,
            **details,
            **split.to_json(),
        }
        if "benchmark" in origin:
            payload["benchmark"] = origin["benchmark"]
        return payload


class HeldOutBenchmarks(BaseModel):
    """Benchmarks read from one folder, each one's users held out by shares: the trainers' split.

    At seed 0 and the default shares it is the shipped adapter's and ranker's, so their test users
    are never trained on by any trainer that keeps these settings.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    data_root: Path | None = None
    """The folder holding the benchmarks in the shared data's layout (locomo/, personabench/,
    trec_ikat/, prefeval/: each one's folder in the dataset table)."""
    test_share: float = Field(default=0.4, gt=0, lt=1)
    """Share of each benchmark's users held out for testing (never trained on)."""
    validation_share: float = Field(default=0.15, gt=0, lt=1)
    """Share of each benchmark's users that choose the model (its size, threshold or checkpoint)."""
    split_seed: int = 0
    """Seeds which users are held out; keep it fixed to compare training seeds."""

    def folder(self, benchmark: BenchmarkName) -> Path:
        """Where ``benchmark``'s data lies.

        Raises:
            ValueError: no --data-root.
        """
        if self.data_root is None:
            raise ValueError("give --data-root: the folder holding the benchmarks (locomo/, trec_ikat/...)")
        return self.data_root / str(dataset(benchmark).folder)

    def split(self, benchmark: BenchmarkName) -> tuple[Benchmark, UserSplit]:
        """``benchmark``'s records and questions, and its users split by these shares.

        Raises:
            ValueError: no --data-root.
        """
        loaded = DataSource(benchmark=benchmark, data=self.folder(benchmark)).questions()
        split = UserSplit.by_share(
            loaded.users(),
            test_share=self.test_share,
            validation_share=self.validation_share,
            seed=self.split_seed,
        )
        return loaded, split


def write_split(out_dir: Path, payload: Mapping[str, Any]) -> None:
    """Write ``out_dir/split.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "split.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def held_out_questions(benchmark: Benchmark, split_file: Path) -> Benchmark:
    """Only the questions of the split's test users (the corpus stays whole: users are separate)."""
    try:
        users = set(json.loads(split_file.read_text(encoding="utf-8"))["test_users"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{split_file}: not a split.json with test_users ({exc})") from None
    return dataclasses.replace(benchmark, questions=[q for q in benchmark.questions if q.user_id in users])
