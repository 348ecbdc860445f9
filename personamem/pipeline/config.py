"""The pipeline's one config: which stage runs at each step, declared once, loadable from TOML.

Stages are named, not imported by string: the names below are the whole vocabulary, and
:mod:`personamem.methods` maps every method name (``dense``, ``pbr``, ``purple:<folder>``...) to
a preset of these fields, so the SDK, the CLI, the adapters and the harness read one table.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from personamem.errors import ConfigError
from personamem.llm.load import DEFAULT_RUNTIME, Runtime
from personamem.pipeline.stage_table import (
    STAGES,
    FirstStageName,
    Stage,
    StageKind,
    choices,
    find_stage,
    stage_names,
)
from personamem.retrieval.hybrid import ADAPTER_FUSION, PLAIN_RRF, Fusion

__all__ = [
    "ADAPTER_FUSION",
    "DEFAULT_ADAPTER",
    "DEFAULT_RANKER",
    "FIRST_STAGES",
    "LLM_MEMORIES",
    "LLM_PERSONALIZERS",
    "MEMORIES",
    "PERSONALIZERS",
    "PLAIN_RRF",
    "QUERY_ENCODERS",
    "SELECTORS",
    "FirstStageName",
    "PipelineConfig",
    "load_pipeline",
    "pipeline_config",
    "read_pipeline_table",
]

FIRST_STAGES: tuple[str, ...] = tuple(stage_names("first_stage"))

PERSONALIZERS: dict[str, str] = stage_names("personalizer")
"""Query personalizers by name: each maps (user, query) to a query vector in the encoder's space."""

LLM_PERSONALIZERS = frozenset(s.name for s in STAGES if s.kind == "personalizer" and s.needs_llm)

SELECTORS: dict[str, str] = stage_names("selector")
"""Profile selectors by name: each picks and orders the profile from the first stage's candidates."""

MEMORIES: dict[str, str] = stage_names("memory")
"""Preference memories by name: each is written once per history revision and put before the records."""

QUERY_ENCODERS: dict[str, str] = stage_names("query_encoder")
"""Query towers by name: each maps a query to a vector in the store encoder's space."""

DEFAULT_ADAPTER = "mixed"
"""The shipped query adapter ``auto`` resolves to (fitted on the training users of LoCoMo,
PersonaBench, TREC iKAT and PrefEval; see docs/RESULTS.md)."""
DEFAULT_RANKER = "mixed"
"""The shipped learned ranker ``ranker = "auto"`` resolves to (see docs/RESULTS.md)."""

LLM_MEMORIES = frozenset(s.name for s in STAGES if s.kind == "memory" and s.needs_llm)
"""The memories the pipeline's LLM writes (a checkpoint brings its own model)."""


class PipelineConfig(BaseModel):
    """query personalizer → first stage → profile selector → preference memory → fit to a token budget.

    The defaults run offline without an LLM: hybrid retrieval with the shipped query adapter, its top
    5 as the profile, fitted to 512 tokens. Fields are documented once, here; the CLI's options and
    ``personamem.toml`` use the same names.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    personalizer: str = Field(
        default="none",
        description="Rewrites the query into a personalized vector before retrieval: "
        f"{choices('personalizer')}.",
    )
    first_stage: FirstStageName = Field(
        default="hybrid",
        description=f"Retrieval over the user's records: {choices('first_stage')} (hybrid: their "
        "reciprocal rank fusion). ``pgret:<checkpoint folder>`` is short for dense with "
        '``query_encoder = "pgret:<folder>"``.',
    )
    query_encoder: str = Field(
        default="auto",
        description="Encodes the query for dense search and hybrid's dense side: "
        f"{choices('query_encoder')}. auto is the shipped adapter ``adapter:mixed`` where it applies (no "
        "personalizer, a dense or hybrid first stage, the encoder it was fitted to), else base. The "
        "stored record vectors are used as they are, so nothing is re-indexed.",
    )
    dense_weight: float | None = Field(default=None, ge=0, le=1)
    """Hybrid's weight of the dense ranking in reciprocal rank fusion; BM25's is 1 − it. None: 0.8
    when the query goes through an adapter, else 0.5 (plain RRF). ``personamem improve`` fits it
    per store."""
    rrf_k: int | None = Field(default=None, ge=1)
    """k in hybrid's weight / (k + rank): 60 flattens the ranks (plain RRF), a small k lets the head
    of each list count, so the dense weight decides the top. None: 2 with an adapter, else 60."""
    ranker: str = Field(
        default="auto",
        description="Reorders hybrid's candidates with a learned model (``personamem/retrieval/ranker.py``): "
        f"{choices('ranker')}. auto is the shipped ``mixed`` where the first stage is the default's "
        "(hybrid with ``adapter:mixed`` at its fusion, no personalizer), else none; a ranker's name or "
        "folder (``personamem train ranker``) needs hybrid with a query adapter. Its trees serve only "
        "users whose history is shaped like one they gained on (``personamem analyze ranker``); others "
        "get the score fusion.",
    )
    chosen_by: str | None = None
    """Why this first stage serves: ``personamem improve`` writes what it fitted on and how it
    validated; ``context`` reports it with the stage (None: the package's default)."""
    selector: str = Field(
        default="none",
        description=f"Picks and orders the profile from the candidates: {choices('selector')}.",
    )
    candidates: int = Field(default=20, ge=1)
    """First-stage records the selector chooses from."""
    profile_k: int = Field(default=5, ge=1)
    """Records in the profile (before fitting to the budget)."""
    duplicate_cosine: float = Field(default=0.9, ge=0, le=1)
    """``context`` leaves out of the profile a record within this cosine of a better-ranked one (1:
    only exact copies), so thirty near-identical chat turns take one place, not all five; ``search``
    ranks as the first stage does either way. 0.9 changed 8 of 540 LoCoMo profiles and no
    PersonaBench one, with no significant change in recall (docs/RESULTS.md)."""
    diversity: float = Field(default=0.0, ge=0, le=1)
    """How much ``context`` trades relevance for saying different things when no selector is set: the
    profile is picked from the first stage's top ``candidates`` by maximal marginal relevance with this
    weight on redundancy (``personamem/pipeline/diversity.py``); 0: the first stage's order. 0 lost no
    recall on the benchmarks and every weight above it lost some (docs/RESULTS.md)."""
    preference_memory: str = Field(
        default="none",
        description="A per-user preference memory put before the records, written once per history and "
        f"cached: {choices('memory')} (prompted and atomic are written by ``llm``; a memrerank "
        "checkpoint brings its own model).",
    )
    memory_words: int = Field(default=120, ge=1)
    """Word budget of a prompted or atomic memory (statements past it are dropped); it also bounds the
    tokens the LLM writes (1.6 per word). A memrerank checkpoint keeps the budget it was trained with."""
    memory_timeout_s: float | None = Field(default=30.0, ge=0)
    """How long context and memory wait for a memory being rebuilt after the history changed; past it
    the older memory is used, marked stale, and the rebuild finishes in the background (0: never wait;
    None: wait for it)."""
    budget_tokens: int = Field(default=512, ge=0)
    """Most tokens the rendered context may take, in the pipeline's LLM's tokens where it has an LLM
    (an LLM stage, or an LLM instance given), else in the encoder's word pieces."""
    conflicts: bool = False
    """At write, ask ``llm`` whether a new ``knowledge`` record replaces one of the user's nearest current
    ones, and supersede it if so (``personamem/conflicts.py``); off: records are only added."""
    llm: str | None = None
    """The frozen LLM for LLM stages: smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b or a local
    model folder (None: no LLM, so no LLM stage)."""
    llm_runtime: Runtime = DEFAULT_RUNTIME
    """The local engine for ``llm``: ctranslate2 (int8, fast on a CPU) or transformers (float32)."""
    llm_threads: int | None = Field(default=None, ge=1)
    """CPU threads of the ctranslate2 runtime (default: ``$PERSONAMEM_LLM_THREADS``, else half the
    cores: on a busy machine, more threads than free cores slow every thread down)."""
    llm_url: str | None = None
    """An OpenAI-compatible server (vLLM, llama.cpp, a hosted API; ``.../v1``) that serves the model
    named by ``llm``; its key comes from ``$OPENAI_API_KEY``. None: ``llm`` is loaded locally."""
    llm_timeout_s: float | None = Field(default=None, gt=0)
    """Deadline for a call's LLM work; past it, the LLM stage is skipped and the context says so."""
    seed: int = 0
    """Seeds LLM sampling and the random selector."""
    log_interactions: bool = True
    """Record each search and context call (user, query, returned records and scores, method, time) in
    the store, so the application can report feedback on it (an answer is enough) and ``improve``
    and the trainers learn from it. Kept 30 days (``PERSONAMEM_INTERACTION_DAYS``), erased with the
    user by ``forget``; written off the call's path. ``false``: the store keeps no queries."""

    @model_validator(mode="before")
    @classmethod
    def _first_stage_tower(cls, data: object) -> object:
        """``first_stage = "pgret:<folder>"`` is dense search with that query tower."""
        if isinstance(data, dict) and str(data.get("first_stage", "")).startswith("pgret:"):
            tower = data["first_stage"]
            if data.get("query_encoder", "base") not in ("base", "auto", tower):
                raise ValueError(
                    f"first_stage {tower!r} names a query tower and so does query_encoder "
                    f"{data['query_encoder']!r}: give one"
                )
            return {**data, "first_stage": "dense", "query_encoder": tower}
        return data

    @model_validator(mode="after")
    def _known_stages(self) -> PipelineConfig:
        for field, kind in _STAGE_FIELDS.items():
            if find_stage(kind, getattr(self, field)) is None:
                raise ValueError(f"unknown {field} {getattr(self, field)!r}; choose from: {choices(kind)}")
        over = self.ranker_row.over
        serves = (self.first_stage, self.personalizer) == (over, "none")
        if self.ranker != "auto" and over is not None and not serves:
            raise ValueError(
                f"ranker {self.ranker!r} reorders {over}'s candidates: use the {over} first stage "
                "without a personalizer"
            )
        explicit = self.query_encoder not in ("base", "auto")
        if explicit and not self.first_stage_row.takes_vector:
            raise ValueError("a query tower gives a vector: use the dense or hybrid first stage")
        if explicit and self.personalizer != "none":
            raise ValueError(
                "a query personalizer builds its own query vector with the store's encoder: "
                "use either a personalizer or a query tower"
            )
        if self.llm_url is not None and self.llm is None:
            raise ValueError("llm_url needs llm: the name of the model that server serves")
        if self.personalizer != "none" and not self.first_stage_row.takes_vector:
            raise ValueError("a query personalizer gives a vector: use the dense or hybrid first stage")
        if self.selector != "none" and self.candidates < self.profile_k:
            raise ValueError(f"candidates ({self.candidates}) must be at least profile_k ({self.profile_k})")
        return self

    @property
    def wants_adapter(self) -> bool:
        """Whether ``auto`` resolves to the shipped adapter (given an encoder it was fitted to)."""
        return self.query_encoder == "auto" and self.personalizer == "none" and self.first_stage != "bm25"

    def fusion(self, query_encoder: str) -> Fusion:
        """Hybrid's fusion for the resolved ``query_encoder`` (see both fields)."""
        weight, k = ADAPTER_FUSION if query_encoder.startswith("adapter:") else PLAIN_RRF
        return Fusion(
            weight if self.dense_weight is None else self.dense_weight,
            k if self.rrf_k is None else self.rrf_k,
        )

    @property
    def first_stage_row(self) -> Stage:
        """The stage table's row of the first stage."""
        return _row("first_stage", self.first_stage)

    @property
    def ranker_row(self) -> Stage:
        """The stage table's row of the ranker (``auto``'s for auto)."""
        return _row("ranker", self.ranker)

    def _rows(self) -> list[Stage]:
        """The table's rows of the stages this config names (validated: every one exists)."""
        return [row for f, kind in _STAGE_FIELDS.items() if (row := find_stage(kind, getattr(self, f)))]

    @property
    def needs_llm(self) -> bool:
        """Whether a stage calls the frozen LLM (a row's ``needs_llm``)."""
        return any(row.needs_llm for row in self._rows())

    @property
    def stochastic(self) -> bool:
        """Whether results depend on the seed (a row's ``stochastic``: LLM sampling, the random selector)."""
        return any(row.stochastic for row in self._rows())


_STAGE_FIELDS: dict[str, StageKind] = {
    "personalizer": "personalizer",
    "first_stage": "first_stage",
    "ranker": "ranker",
    "query_encoder": "query_encoder",
    "selector": "selector",
    "preference_memory": "memory",
}
"""The config's fields that name a stage of the table, and the kind each names."""


def _row(kind: StageKind, name: str) -> Stage:
    row = find_stage(kind, name)
    assert row is not None, f"{kind} {name!r} validated"  # the config's fields are checked against the rows
    return row


def read_pipeline_table(path: Path) -> dict[str, Any]:
    """The ``[pipeline]`` table of a TOML file, unvalidated.

    Raises:
        ConfigError: the file is unreadable or not TOML, or has a top-level key other than ``pipeline``.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    unknown = sorted(set(data) - {"pipeline"})
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {unknown}; expected [pipeline]")
    table = data.get("pipeline", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: 'pipeline' must be a table ([pipeline])")
    return table


def load_pipeline(path: str | Path, **overrides: Any) -> PipelineConfig:
    """The ``[pipeline]`` table of a TOML file (e.g. ``personamem.toml``), with keyword overrides.

    Raises:
        ConfigError: the file is unreadable or not TOML, has another top-level key, or a key of
            ``[pipeline]`` is unknown or has a bad value; the message names the file and the key.
    """
    return pipeline_config({**read_pipeline_table(Path(path)), **overrides}, source=str(path))


def pipeline_config(values: dict[str, Any], *, source: str = "pipeline") -> PipelineConfig:
    """A validated :class:`PipelineConfig`; a bad key or value raises :class:`ConfigError` naming it."""
    try:
        return PipelineConfig.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(
            (".".join(map(str, e["loc"])) + ": " if e["loc"] else "")
            + str(e.get("ctx", {}).get("error", e["msg"])).removeprefix("Value error, ")
            for e in exc.errors()
        )
        raise ConfigError(f"{source}: {problems}") from None
