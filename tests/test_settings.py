"""One settings object for every ``PERSONAMEM_*`` variable (``personamem/settings.py``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import personamem
from personamem.errors import ConfigError
from personamem.settings import PREFIX, Settings, settings

PACKAGE = Path(personamem.__file__).parent


def test_every_variable_the_library_names_is_a_setting() -> None:
    """The package's own variables, each a field of :class:`Settings` (``PERSONAMEM_DATA``, the test
    suite's data folder, is not read by the library)."""
    named = set()
    for path in PACKAGE.rglob("*.py"):
        named |= set(re.findall(rf"\b{PREFIX}([A-Z][A-Z0-9_]*)\b", path.read_text(encoding="utf-8")))
    assert named, "the scan found no variable at all"
    assert sorted(n.lower() for n in named if n.lower() not in Settings.model_fields) == []


def test_only_the_settings_module_reads_them_from_the_environment() -> None:
    readers = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            key = None
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.environ.get", "os.getenv"):
                key = node.args[0] if node.args else None
            elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
                key = node.slice
            if isinstance(key, ast.Constant) and str(key.value).startswith(PREFIX):
                readers.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert readers == []


def test_a_bad_value_names_its_variable_and_an_empty_one_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERSONAMEM_SWEEP_S", "soon")
    with pytest.raises(ConfigError, match=r"PERSONAMEM_SWEEP_S: .*'soon'"):
        settings()
    monkeypatch.setenv("PERSONAMEM_SWEEP_S", "0.5")
    monkeypatch.setenv("PERSONAMEM_SQL_URL", "")  # how `serve` hands an unset option to its workers
    monkeypatch.setenv("PERSONAMEM_ALLOW_METHODS", '["fast=pipeline:fast.toml"]')
    found = settings()
    assert (found.sweep_s, found.sql_url, found.allow_methods) == (0.5, None, ["fast=pipeline:fast.toml"])


def test_the_deployment_guide_lists_every_setting() -> None:
    guide = (Path(__file__).resolve().parents[1] / "docs" / "DEPLOY.md").read_text(encoding="utf-8")
    assert [n for n in Settings.model_fields if f"| `{PREFIX}{n.upper()}` |" not in guide] == []


def test_settings_handed_to_workers_come_back_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve`` passes its settings to its workers as variables; the workers read the same settings."""
    given = Settings(store=Path("/srv/store"), allow_methods=["fast=pipeline:fast.toml"], sweep_s=0.5)
    for name, value in given.environ().items():
        monkeypatch.setenv(name, value)
    assert settings() == given
    assert given.environ()["PERSONAMEM_SQL_URL"] == ""  # unset travels as empty
