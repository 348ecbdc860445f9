"""Typer options built from pydantic models (personamem.cli.options), on toy models and `train purple`."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
import typer
from pydantic import BaseModel, ConfigDict, Field, field_validator
from typer.main import get_command

from personamem.cli import app, main
from personamem.cli.options import config_options
from personamem.trainers.purple import PurpleDataConfig, PurpleTrainConfig

STRICT = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class Color(StrEnum):
    RED = "red"
    BLUE = "blue"


class Inner(BaseModel):
    model_config = STRICT

    layers: int = Field(default=2, ge=0)
    """Record Transformer layers [see the paper] of the :class:`~a.b.Inner` ``scorer``."""
    on: bool = True
    """Whether it runs."""


class Toy(BaseModel):
    model_config = STRICT

    name: str
    """Who runs it."""
    steps: int = Field(default=20, ge=1)
    """Optimizer steps."""
    lr: float = 1e-4
    path: Path = Path("runs/toy")
    mode: Literal["fast", "slow"] = "fast"
    color: Color = Color.RED
    limit: int | None = None
    tags: tuple[str, ...] = ("a",)
    sizes: list[int] = []
    inner: Inner = Inner(layers=5)

    @field_validator("name")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value


class Other(BaseModel):
    model_config = STRICT

    seed: int = 0
    """Seeds the run."""


seen: dict[str, Any] = {}


def toy_app(**options: Any) -> typer.Typer:
    """A one-command app whose command records what it was called with."""
    app = typer.Typer(pretty_exceptions_enable=False)

    @app.command()
    @config_options(**options)
    def run(
        ctx: typer.Context,
        *,
        out: Annotated[Path, typer.Option(help="Where to write.")] = Path("out"),
        toy: Toy,
        other: Other,
    ) -> None:
        seen.update(ctx=ctx, out=out, toy=toy, other=other)

    @app.command()
    def noop() -> None:  # a second command, so the first is addressed by name
        pass

    return app


def invoke(app: typer.Typer, *argv: str) -> dict[str, Any]:
    seen.clear()
    app(args=["run", *argv], prog_name="toy", standalone_mode=False)
    return seen


def test_options_not_given_keep_the_model_defaults() -> None:
    called = invoke(toy_app(), "--name", "ana")
    assert called["toy"] == Toy(name="ana") and called["other"] == Other()
    assert called["out"] == Path("out") and called["ctx"].info_name == "run"
    assert called["toy"].model_fields_set == {"name"}  # nothing else was passed to the model


def test_every_supported_type() -> None:
    argv = ["--name", "ana", "--steps", "3", "--lr", "0.5", "--path", "x/y", "--mode", "slow"]
    argv += ["--color", "blue", "--limit", "7", "--tags", "p", "--tags", "q", "--sizes", "1", "--sizes", "2"]
    called = invoke(toy_app(), *argv, "--layers", "1", "--no-on", "--seed", "4", "--out", "o")
    assert called["toy"] == Toy(
        name="ana",
        steps=3,
        lr=0.5,
        path=Path("x/y"),
        mode="slow",
        color=Color.BLUE,
        limit=7,
        tags=("p", "q"),
        sizes=[1, 2],
        inner=Inner(layers=1, on=False),
    )
    assert called["other"] == Other(seed=4) and called["out"] == Path("o")


def test_a_nested_model_keeps_its_default_instance_for_the_options_not_given() -> None:
    assert invoke(toy_app(), "--name", "ana", "--no-on")["toy"].inner == Inner(layers=5, on=False)


def test_nested_options_named_by_path_without_flatten() -> None:
    app = toy_app(flatten=False)
    assert invoke(app, "--name", "ana", "--inner-layers", "3")["toy"].inner == Inner(layers=3)
    with pytest.raises(typer.TyperException, match="No such option: --layers"):
        invoke(app, "--name", "ana", "--layers", "3")


def test_help_is_the_field_docstring_with_the_default() -> None:
    command = get_command(toy_app())
    ctx = typer.Context(command)
    run = command.get_command(ctx, "run")  # type: ignore[attr-defined]
    params = {p.opts[0]: p for p in run.params}
    assert params["--steps"].help == "Optimizer steps."
    assert params["--layers"].help == (
        r"Record Transformer layers \[see the paper] of the Inner scorer."  # reST dropped, Rich escaped
    )
    assert params["--steps"].default == 20 and params["--layers"].default == 5
    assert params["--on"].secondary_opts == ["--no-on"] and params["--name"].required


def test_invalid_values_are_one_usage_error_naming_the_options() -> None:
    with pytest.raises(typer.BadParameter) as error:
        invoke(toy_app(), "--name", " ", "--steps", "0", "--layers", "-1")
    message = error.value.format_message()
    assert error.value.exit_code == 2 and "\n" not in message and not seen
    assert message == (
        "Invalid value: --name: must not be blank; --steps: Input should be greater than or equal to 1; "
        "--layers: Input should be greater than or equal to 0"
    )
    with pytest.raises(typer.TyperException) as missing:
        invoke(toy_app())
    assert missing.value.format_message() == "Missing option '--name'."
    assert missing.value.exit_code == 2
    with pytest.raises(typer.TyperException) as choice:
        invoke(toy_app(), "--name", "ana", "--mode", "medium")
    assert "--mode" in choice.value.format_message() and "'fast', 'slow'" in choice.value.format_message()


class Twin(BaseModel):
    seed: int = 1


class Outed(BaseModel):
    out: Path = Path("x")


class Mapped(BaseModel):
    weights: dict[str, float] = {}
    seed: int = 0


def test_clashing_option_names_are_refused_at_decoration() -> None:
    def twins(a: Other, b: Twin) -> None:
        pass

    with pytest.raises(ValueError, match=r"--seed of Twin.seed is also Other.seed"):
        config_options()(twins)

    def own(out: Annotated[Path, typer.Option("--out")], config: Outed) -> None:
        pass

    with pytest.raises(ValueError, match=r"--out of Outed.out is also parameter 'out'"):
        config_options()(own)


def test_unsupported_fields_must_be_excluded() -> None:
    def command(config: Mapped) -> Mapped:
        return config

    with pytest.raises(TypeError, match=r"Mapped.weights: .* has no command-line form"):
        config_options()(command)
    wrapped = config_options(exclude=["weights"])(command)
    assert "weights" not in str(wrapped.__signature__)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="exclude names no field"):
        config_options(exclude=["weights", "sed"])(command)
    with pytest.raises(TypeError, match="no parameter is annotated with a pydantic model"):
        config_options()(lambda x: x)


def _purple() -> Any:
    command = get_command(app)
    ctx = typer.Context(command)
    train = command.get_command(ctx, "train")  # type: ignore[attr-defined]
    return train.get_command(ctx, "purple")


def _options(model: type[BaseModel]) -> set[str]:
    """One option per field, a nested model's fields flattened."""
    names: set[str] = set()
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            names |= _options(field.annotation)
        else:
            names.add("--" + name.replace("_", "-"))
    return names


def test_train_purple_offers_every_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fields = _options(PurpleTrainConfig) | _options(PurpleDataConfig)
    assert {"--grad-clip", "--clip-nats", "--dim", "--heads", "--dropout", "--max-query-tokens"} <= fields
    options = {o for p in _purple().params for o in p.opts}
    assert fields <= options
    documented = ["--steps", "--batch-size", "--samples", "--lr", "--layers", "--advantage"]
    documented += [
        "--validate-every",
        "--validation-users",
        "--test-users",
        "--max-train",
        "--max-validation",
    ]
    documented += ["--cross-attention", "--record-transformer", "--noise", "--llm", "--seed", "--split-seed"]
    documented += ["--device", "--resume", "--out", "--first-stage", "--candidates", "--k", "--benchmark"]
    assert set(documented) | {"--data"} <= options
    monkeypatch.setenv("COLUMNS", "250")  # no option name cut short
    assert main(["train", "purple", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert all(option in help_text for option in fields)
    assert "Maximum gradient norm. [default: 1.0]" in help_text


def test_train_purple_refuses_a_bad_setting_before_loading_anything(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["train", "purple", "--benchmark", "locomo", "--data", "x", "--batch-size", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "Error: Invalid value: --batch-size: Input should be greater than or equal to 1"
    assert main(["train", "purple", "--benchmark", "locomo", "--data", "x", "--first-stage", "magic"]) == 2
    assert "--first-stage" in capsys.readouterr().err
