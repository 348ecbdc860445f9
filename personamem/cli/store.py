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
    def config_file(self) -> Path | None:
        """The pipeline file to read: --config, else ./personamem.toml if it exists, else none."""
        return self.config or (DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None)

    def open(self, **overrides: object) -> PersonaMem:
        """Open the configured store: a local folder unless a SQL URL is given.

        The pipeline it serves is ``--config``'s (or ./personamem.toml's), else the store's live
        pipeline; the options given here go on top of either.
        """
        from personamem.pipeline import load_pipeline
        from personamem.pipeline.config import pipeline_config

        given = {key: value for key, value in overrides.items() if value is not None}
        path = self.config_file
        mem = self._open(load_pipeline(path, **given) if path is not None else None)
        if path is None and given:
            mem.config = pipeline_config({**mem.config.model_dump(), **given}, source="options")
        return mem

    def open_live(self) -> PersonaMem:
        """Open the configured store serving its live pipeline, whatever the pipeline files say."""
        return self._open(None)

    def _open(self, pipeline: PipelineConfig | None) -> PersonaMem:
        from personamem.memory import open_memory

        if self.chroma_url and not self.sql_url:
            raise typer.BadParameter("--chroma-url needs --sql-url (the SQL side is the source of truth)")
        return open_memory(self.path, sql_url=self.sql_url, chroma_url=self.chroma_url, pipeline=pipeline)
