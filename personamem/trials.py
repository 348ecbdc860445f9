"""A store's trials on live traffic: which calls are interleaved, how feedback credits them, what they decide.

``improve`` puts a candidate that validated better on trial instead of live (``go_live="trial"``);
the memory then serves :data:`~personamem.interleaving.SHARE` of the calls that name no method
interleaved with it (``personamem/interleaving.py``), and each report on such a call credits the team
whose records the answer used (the records named, or those the answer is attributed to). When the
sign test is clear either way the trial is decided where the feedback arrives: a winning challenger
goes live and the pipeline it replaced is tried against it in turn (put back if it wins); a losing
one is dropped. Every decision is kept with the data, for ``personamem improve --status`` and the
inspector.
"""

from __future__ import annotations

import json
import random
import warnings
from typing import Any

from personamem.attribution import Attribution
from personamem.errors import ConfigError, PersonaMemWarning
from personamem.interleaving import SHARE, Role, Trial, Verdict, credit
from personamem.pipeline.config import PipelineConfig, pipeline_config
from personamem.store import Store

__all__ = ["Trials", "trial_config"]


def trial_config(trial: Trial) -> PipelineConfig:
    """The candidate's pipeline, logging nothing of its own (the live pipeline logs the call).

    Raises:
        ConfigError: a table that does not validate (written by another version, say).
    """
    config = pipeline_config(trial.table, source=f"trial {trial.id}'s candidate")
    return config.model_copy(update={"log_interactions": False})


class Trials:
    """The trials of one store view (a tenant's view: its tenant's): start, draw, credit, decide, report."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._parsed: tuple[str | None, Trial | None] = (None, None)
        self._attribution: Attribution | None = None

    def running(self) -> Trial | None:
        """The trial over this view's users (None: none)."""
        stored = self.store.live.trial(self.store.tenant)
        if stored != self._parsed[0]:
            self._parsed = (stored, None if stored is None else Trial.from_json(stored))
        return self._parsed[1]

    def draw(self) -> tuple[Trial, PipelineConfig] | None:
        """The running trial and its candidate's config on the trial's share of calls (else None).

        Only while the live pipeline is the one it challenges; a candidate that no longer validates
        warns and is not served.
        """
        trial = self.running()
        if trial is None or trial.live != self.store.live_pipeline or random.random() >= trial.share:
            return None
        try:
            return trial, trial_config(trial)
        except ConfigError as exc:
            warnings.warn(f"trial {trial.id} not served: {exc}", PersonaMemWarning, stacklevel=3)
            return None

    def start(self, table: dict[str, Any], *, role: Role = "challenger", share: float = SHARE) -> Trial:
        """Put ``table`` on trial against this view's live pipeline (replacing a trial running)."""
        trial = Trial(table, self.store.live_pipeline, self.store.tenant, role, share)
        self.store.live.start_trial(self.store.tenant, trial.to_json())
        return trial

    def credit(self, interaction_id: str) -> dict[str, Any] | None:
        """Count a reported call for its trial, and decide the trial if the count is clear.

        Returns the decision taken (as :meth:`status` lists them), else None. A call not served
        interleaved, another view's, or already counted is left alone.
        """
        row = self.store.catalog.interleaved(interaction_id)
        if row is None or row.interleaving is None or self.store.tenancy.user(row.user_id) is None:
            return None
        drafted = row.interleaving
        used = row.used or self._attributed(row.user_id, row.query, row.answer, [r for r, _ in row.results])
        self.store.catalog.set_outcome(interaction_id, credit(drafted["teams"], used))
        trial = self.running()
        return None if trial is None or trial.id != drafted["trial"] else self.decide(trial)

    def decide(self, trial: Trial) -> dict[str, Any] | None:
        """Act on the trial's count where the sign test is clear (see the module); the decision, else None."""
        verdict = Verdict.of(self.store.catalog.outcomes(trial.id))
        winner = verdict.decision
        if winner is None:
            return None
        live = self.store.live
        action = {
            ("challenger", "candidate"): "went live",
            ("challenger", "live"): "dropped",
            ("incumbent", "candidate"): "rolled back",
            ("incumbent", "live"): "kept",
        }[(trial.role, winner)]
        decided = {**_summary(trial, verdict), "winner": winner, "action": action}
        live.end_trial(trial.tenant, decided)
        if action == "went live":
            live.serve(trial.tenant, trial.table)
            replaced = json.loads(trial.live) if trial.live is not None else {}
            incumbent = Trial(replaced, live.table(trial.tenant), trial.tenant, "incumbent", trial.share)
            live.start_trial(trial.tenant, incumbent.to_json())
        elif action == "rolled back":
            live.rollback(trial.tenant)
        return decided

    def status(self) -> dict[str, Any]:
        """The running trial with its count, and the decided ones (newest last)."""
        trial = self.running()
        running = None
        if trial is not None:
            running = _summary(trial, Verdict.of(self.store.catalog.outcomes(trial.id)))
        return {"running": running, "decided": self.store.live.decided(self.store.tenant)}

    def _attributed(self, user_id: str, query: str, answer: str | None, served: list[str]) -> list[str]:
        """The served records an answer drew on (none without an answer)."""
        if not answer:
            return []
        if self._attribution is None:
            self._attribution = Attribution.load()
        user = self.store.tenancy.user(user_id)
        assert user is not None
        held = {r.id: r for r in self.store.records(user)}
        return self._attribution.used_of(self.store, user, query, answer, served, held)


def _summary(trial: Trial, verdict: Verdict) -> dict[str, Any]:
    return {
        "trial": trial.id,
        "role": trial.role,
        "started": trial.started,
        "share": trial.share,
        "candidate": trial.table,
        "wins": verdict.wins,
        "losses": verdict.losses,
        "ties": verdict.ties,
        "p_better": round(verdict.p_better, 6),
        "p_worse": round(verdict.p_worse, 6),
    }
