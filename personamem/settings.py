"""Every ``PERSONAMEM_*`` environment variable, declared once (pydantic-settings).

The CLI's global options take the same names (``--store`` or ``PERSONAMEM_STORE``), and ``personamem
serve`` hands them to its worker processes in the environment; each module reads what it needs from
:func:`settings` when it needs it, so a variable set later (a test, a worker) is seen. A bad value is
a :class:`~personamem.errors.ConfigError` naming the variable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from personamem.errors import ConfigError

__all__ = ["PREFIX", "Settings", "settings"]

PREFIX = "PERSONAMEM_"


class Settings(BaseSettings):
    """The environment's settings; an unset or empty variable is None (the code's own default)."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX, extra="ignore", frozen=True, use_attribute_docstrings=True
    )

    store: Path | None = None
    """Folder of the local store (the CLI's ``--store``; default ``~/.local/share/personamem``)."""
    sql_url: str | None = None
    """A SQLAlchemy URL for the records (``--sql-url``); PostgreSQL without a Chroma URL keeps vectors too."""
    chroma_url: str | None = None
    """A Chroma server for the vectors (``--chroma-url``)."""
    config: Path | None = None
    """The TOML file whose ``[pipeline]`` table the memory serves (``--config``)."""
    max_body_bytes: int | None = Field(default=None, ge=1)
    """Largest request body a server accepts (``serve --max-body-mb``)."""
    allow_methods: list[str] | None = None
    """A JSON list of ``serve --allow-method`` entries (methods that name a file or folder)."""
    reports: Path | None = None
    """Folder of evaluation reports the inspector lists (``serve --reports``)."""
    cache: Path | None = None
    """Where converted models and vector caches are kept (default ``$XDG_CACHE_HOME/personamem``)."""
    cache_mb: int | None = Field(default=None, ge=1)
    """MiB a store keeps per user in memory: vector copies, BM25 and ranker data, the embedded Chroma's
    loaded collections (default: a sixteenth of the machine's memory, 256 to 4,096; the deployment
    guide's Sizing says how it is split)."""
    llm_threads: int | None = Field(default=None, ge=1)
    """CPU threads of the ctranslate2 runtime (default: half the cores)."""
    sweep_s: float | None = Field(default=None, ge=0)
    """Seconds between expiry sweeps (0: no sweep thread; default 60)."""
    interaction_days: float | None = Field(default=None, gt=0)
    """Days a logged call and its feedback are kept before the sweep erases them (default 30)."""
    improve_every: int | None = Field(default=None, ge=0)
    """Reports on logged calls that make ``serve`` run improve in the background (0: never; default 50)."""
    improve_s: float | None = Field(default=None, gt=0)
    """Seconds between ``serve``'s counts of new reports (default 300)."""
    webhook_attempts: int | None = Field(default=None, ge=1)
    """Attempts at delivering a webhook event before it is a dead letter (default 16: about an hour)."""
    webhook_backoff_s: float | None = Field(default=None, gt=0)
    """Seconds before a failed webhook delivery's first retry, doubling up to 600 (default 1)."""
    webhook_timeout_s: float | None = Field(default=None, gt=0)
    """Seconds a webhook receiver has to answer one delivery (default 5)."""
    job_batch: int | None = Field(default=None, ge=1)
    """Lines of a bulk import stored per transaction, each a step of its resume point (default 500)."""
    job_lease_s: float | None = Field(default=None, gt=0)
    """Seconds a server process holds an import job between batches; a killed one's job waits this long
    before another takes it over (default 60)."""
    api_key: str | None = None
    """The API key ``personamem import --server`` sends (its ``--key``)."""
    otel: bool | None = None
    """OpenTelemetry spans (default on; they cost nothing until the application sets a tracer provider).
    ``0`` takes them off the call path altogether."""
    otel_content: bool | None = None
    """Put query text on the OpenTelemetry spans (``gen_ai.memory.query.text``; default: never)."""
    chromium: str | None = None
    """The Chromium the browser tests drive (a path or a command name)."""

    def environ(self) -> dict[str, str]:
        """These settings as the environment variables that give them back (unset ones empty).

        What ``personamem serve`` hands its worker processes, which read them with :func:`settings`.
        """
        return {f"{PREFIX}{name.upper()}": _variable(v) for name, v in self.model_dump(mode="json").items()}

    @field_validator("*", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        """``serve`` passes unset options to its workers as empty variables."""
        return None if value == "" else value


def _variable(value: Any) -> str:
    """One setting's JSON-mode value as its variable's text: a list as JSON, unset as empty."""
    if value is None:
        return ""
    return json.dumps(value) if isinstance(value, list) else str(value)


def settings() -> Settings:
    """The settings as the environment has them now.

    Raises:
        ConfigError: a variable whose value does not parse, named with what is wrong.
    """
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{PREFIX}{'.'.join(map(str, e['loc'])).upper()}: {e['msg']} (got {e.get('input')!r})"
            for e in exc.errors()
        )
        raise ConfigError(f"environment: {problems}") from None
