"""The global store options every command opens its memory from (``--store``, ``--sql-url``, ...)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:  # imported when a command opens the store: the root group's --help needs neither
    from personamem.memory import PersonaMem
    from personamem.pipeline import PipelineConfig


def default_store() -> Path:
    """``$XDG_DATA_HOME/personamem`` (``~/.local/share/personamem``)."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "personamem"


DEFAULT_CONFIG = Path("personamem.toml")
"""Read from the working directory when ``--config`` is not given, if it exists."""


@dataclass(frozen=True)
class StoreOptions:
    """Where the memory lives and which pipeline it runs, from the global options."""

    path: Path
    sql_url: str | None
    chroma_url: str | None
    config: Path | None

    @property
    def pipeline_file(self) -> Path:
        """The pipeline file serving reads and ``improve`` writes: --config, else ./personamem.toml."""
        return self.config or DEFAULT_CONFIG

    @property
    def config_file(self) -> Path | None:
        """The pipeline file to read: --config, else ./personamem.toml if it exists, else none."""
        return self.config or (DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None)

    def pipeline(self, **overrides: object) -> PipelineConfig:
        """The ``[pipeline]`` of ``--config`` or ./personamem.toml, with the options given here."""
        from personamem.pipeline import load_pipeline
        from personamem.pipeline.config import pipeline_config

        given = {key: value for key, value in overrides.items() if value is not None}
        path = self.config_file
        if path is None:
            return pipeline_config(given, source="options")
        return load_pipeline(path, **given)

    def open(self, **overrides: object) -> PersonaMem:
        """Open the configured store: a local folder unless a SQL URL is given."""
        return self._open(self.pipeline(**overrides))

    def open_default(self) -> PersonaMem:
        """Open the configured store with the package's default pipeline, whatever the files say."""
        from personamem.pipeline import PipelineConfig

        return self._open(PipelineConfig())

    def _open(self, pipeline: PipelineConfig) -> PersonaMem:
        from personamem.memory import open_memory

        if self.chroma_url and not self.sql_url:
            raise typer.BadParameter("--chroma-url needs --sql-url (the SQL side is the source of truth)")
        return open_memory(self.path, sql_url=self.sql_url, chroma_url=self.chroma_url, pipeline=pipeline)
