"""The ``personamem`` command: one typer app (``app.py``) and one module per command group."""

from personamem.cli.app import app, main

__all__ = ["app", "main"]
