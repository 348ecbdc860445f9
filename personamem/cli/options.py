"""Command-line options built from pydantic models, so that each setting is declared once.

A command's settings live in a pydantic v2 model: the field's type, default and constraints are
the setting's, and a docstring right under the field (with ``use_attribute_docstrings=True``) is
both its API documentation and its ``--help`` text. :func:`config_options` turns such a model into
typer options, so the command never restates them::

    from typing import Annotated, Literal

    import typer
    from pydantic import BaseModel, ConfigDict, Field

    from personamem.cli.options import config_options

    class SearchConfig(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

        k: int = Field(default=10, ge=1)
        \"\"\"Records to return.\"\"\"
        method: Literal["dense", "bm25"] = "dense"
        \"\"\"The first-stage retriever.\"\"\"

    @app.command("search")
    @config_options()
    def search(query: Annotated[str, typer.Argument()], config: SearchConfig) -> None:
        \"\"\"Search the memory.\"\"\"
        ...  # config is a validated SearchConfig

``search --help`` then lists ``--k`` ("Records to return. [default: 10]") and ``--method``
(a choice of dense or bm25); ``search q --k 0`` exits with code 2 and one line,
``Invalid value: --k: Input should be greater than or equal to 1``, before the body runs.

The rules:

* Every parameter annotated with a pydantic model class becomes that model's options, in its
  place; the other parameters (arguments, options and a ``typer.Context``) are left to typer.
* A field ``batch_size`` becomes ``--batch-size`` (a field with an alias is named after the
  alias: ``methods`` aliased ``method`` is ``--method``); a ``bool`` becomes ``--x/--no-x``. A nested
  model's fields are options of their own: ``--layers`` for ``config.model.layers`` (or
  ``--model-layers`` with ``flatten=False``). Two fields with one option name, or a field whose
  option a parameter of the command already has, are refused when the command is decorated.
* Supported field types: ``str``, ``int``, ``float``, ``bool``, :class:`~pathlib.Path`, an
  :class:`~enum.Enum` (e.g. a ``StrEnum``) or ``Literal[...]`` (a choice), ``X | None`` of these,
  and ``list[X]`` / ``tuple[X, ...]`` (an option given once per item). Other fields must be
  excluded (``exclude=("name", "nested.name")``) and so keep their model default.
* Only the options given on the command line reach the model: the others keep the model's
  default, which ``--help`` shows. Constraints (``ge``, validators...) stay in the model, and
  validation errors become one :class:`typer.BadParameter` naming the options as typed.
* A field without a default is a required option.
* "Given" is what click records as the value's source: the command line, the environment or the
  context's ``default_map`` (so a ``--config FILE`` callback that fills ``ctx.default_map`` would
  count as given too); values from the option defaults are not passed on.

Apply :func:`config_options` below ``@app.command()``. The options appear in ``--help`` in the
order of the function's parameters; declare them keyword-only (after a bare ``*``) to put a model
parameter, which has no default, after options that have one, as ``personamem train purple``
does. A ``typer.Context`` parameter is added to the signature typer sees if the function has none.
"""

from __future__ import annotations

import enum
import functools
import inspect
import re
import tomllib
import types
import typing
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import typer
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from rich.markup import escape
from typer.models import OptionInfo, ParameterInfo

__all__ = ["command_line", "config_options", "runtime_option"]

R = TypeVar("R")

_SCALARS = (str, int, float, Path)
_CONTEXT_PARAM = "config_options_context"  # added when the command has no typer.Context of its own
_FILE_PARAM = "config_options_file"  # --config FILE, where config_file=True


@dataclass(frozen=True)
class _Leaf:
    """One option: where its value goes in the model's input."""

    param: str  # the parameter typer passes the value as
    option: str  # "--batch-size"
    keys: tuple[str, ...]  # the path of input keys inside the model, e.g. ("model", "layers")
    dotted: str  # "model.layers": the field path, for messages and ``exclude``


@dataclass(frozen=True)
class _Config:
    """One model parameter of the command and the options that build it."""

    param: str
    model: type[BaseModel]
    leaves: tuple[_Leaf, ...]
    prefill: Mapping[tuple[str, ...], Mapping[str, Any]]  # nested defaults that are instances


_ModelParam = tuple[int, str, type[BaseModel]]
"""A model parameter of the command: (its position among the command's own parameters, name, model)."""


def config_options(
    *, exclude: Collection[str] = (), flatten: bool = True, config_file: bool = False
) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Turn each pydantic-model parameter of a typer command into one option per model field.

    The decorated function declares its own typer parameters as usual plus one parameter per
    config model, annotated with the model class (``config: TrainConfig``). The wrapper typer
    sees has the function's own parameters and, in each model parameter's place, that model's
    options; when the command runs, the options given build each model with
    :meth:`~pydantic.BaseModel.model_validate` and the function is called with the models.

    Args:
        exclude: field paths not to offer as options (``"name"`` or, in a nested model,
            ``"model.name"``); they keep the model's default. Needed for fields of other types.
        flatten: name a nested model's options after their field alone (``--layers``); if false,
            after the path to it (``--model-layers``).
        config_file: add ``--config FILE``, a TOML file whose top-level keys are the options'
            names with underscores (``batch_size = 4`` for ``--batch-size``); an option given on
            the command line wins over the file, the file over the defaults, and an unknown key in
            the file is an error that names it.

    Returns:
        The decorator.

    Raises:
        TypeError: at decoration, a field of a type with no command-line form, or a function
            with no model parameter or with positional-only or variadic parameters.
        ValueError: at decoration, two options of one name, an excluded field that is required,
            or an ``exclude`` entry that names no field.
    """

    def decorate(func: Callable[..., R]) -> Callable[..., R]:
        own, configs, context_param = _split(func)
        taken = _taken(own)
        built, options = _configs(func.__name__, configs, taken, exclude, flatten)
        params = _merged(own, options)
        if config_file:
            if "--config" in taken:
                raise ValueError(f"{func.__name__}: --config is taken by {taken['--config']}")
            params.insert(0, _file_parameter())
        added_context = context_param is None
        if context_param is None:
            context_param = _CONTEXT_PARAM
            params.insert(
                0, inspect.Parameter(_CONTEXT_PARAM, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
            )

        @functools.wraps(func)
        def wrapper(**kwargs: Any) -> R:
            context = kwargs.pop(context_param) if added_context else kwargs.get(context_param)
            from_file = _read_file(kwargs.pop(_FILE_PARAM, None), built) if config_file else {}
            models = _models(built, kwargs, context, from_file)
            return func(**kwargs, **models)

        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # what typer reads
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return decorate


def runtime_option() -> Any:
    """The ``--llm-runtime`` option, with one help text for every command."""
    return typer.Option(
        help="The local LLM engine: ctranslate2 (int8, fast on a CPU) or transformers (float32, the "
        "reference)."
    )


def command_line(config: BaseModel) -> list[str]:
    """The options that rebuild ``config`` through :func:`config_options`: its fields that were set.

    The inverse of the decorator (with nested options flattened), for reports that print the
    command that produced them; fields left at their defaults are not repeated, nor is a None.
    """
    args: list[str] = []
    for name, field in type(config).model_fields.items():
        value = getattr(config, name)
        if isinstance(value, BaseModel):
            args += command_line(value)
            continue
        if name not in config.model_fields_set or value is None:
            continue
        option = "--" + _stem(name, field).replace("_", "-")
        if isinstance(value, bool):
            args.append(option if value else f"--no-{option[2:]}")
            continue
        for item in value if isinstance(value, (list, tuple)) else [value]:
            args += [option, str(item.value if isinstance(item, enum.Enum) else item)]
    return args


def _split(
    func: Callable[..., Any],
) -> tuple[list[inspect.Parameter], list[_ModelParam], str | None]:
    """The command's own parameters (made keyword-only), its model parameters, its ``typer.Context``'s name.

    A model's options go where the model parameter stood among the own ones.
    """
    signature = inspect.signature(func, eval_str=True)
    hints = typing.get_type_hints(func, include_extras=True)
    own: list[inspect.Parameter] = []
    configs: list[_ModelParam] = []
    context_param: str | None = None
    for param in signature.parameters.values():
        if param.kind in (param.POSITIONAL_ONLY, param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{func.__name__}: parameter {param.name!r} must be a plain parameter")
        annotation = hints.get(param.name, param.annotation)
        if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
            configs.append((len(own), param.name, annotation))
            continue
        if inspect.isclass(annotation) and issubclass(annotation, typer.Context):
            context_param = param.name
        own.append(param.replace(kind=param.KEYWORD_ONLY, annotation=annotation))
    if not configs:
        raise TypeError(f"{func.__name__}: no parameter is annotated with a pydantic model")
    return own, configs, context_param


def _taken(own: Sequence[inspect.Parameter]) -> dict[str, str]:
    """What already holds each parameter and option name: the command's own parameters, for now."""
    taken = {p.name: f"parameter {p.name!r}" for p in own}
    for p in own:
        for option in _own_options(p):
            taken[option] = f"parameter {p.name!r}"
    return taken


def _configs(
    command: str,
    configs: Sequence[_ModelParam],
    taken: dict[str, str],
    exclude: Collection[str],
    flatten: bool,
) -> tuple[list[_Config], dict[int, list[inspect.Parameter]]]:
    """Each model parameter's options, refusing a name already ``taken`` (which they are added to).

    Returns the models' :class:`_Config` and their option parameters by the position they go to.
    """
    unused = set(exclude)
    built: list[_Config] = []
    options: dict[int, list[inspect.Parameter]] = {}
    for position, name, model in configs:
        leaves: list[_Leaf] = []
        prefill: dict[tuple[str, ...], Mapping[str, Any]] = {}
        for leaf, parameter in _leaves(model, name, exclude, unused, flatten, prefill):
            for label in (leaf.option, leaf.param):
                if label in taken:
                    raise ValueError(
                        f"{command}: {label} of {model.__name__}.{leaf.dotted} is also "
                        f"{taken[label]}; exclude one of them or rename a field"
                    )
                taken[label] = f"{model.__name__}.{leaf.dotted}"
            leaves.append(leaf)
            options.setdefault(position, []).append(parameter)
        built.append(_Config(name, model, tuple(leaves), prefill))
    if unused:
        raise ValueError(f"{command}: exclude names no field: {sorted(unused)}")
    return built, options


def _merged(
    own: Sequence[inspect.Parameter], options: Mapping[int, list[inspect.Parameter]]
) -> list[inspect.Parameter]:
    """The signature typer sees: the own parameters with each model's options in the model's place."""
    params: list[inspect.Parameter] = []
    for position in range(len(own) + 1):
        params.extend(options.get(position, []))
        if position < len(own):
            params.append(own[position])
    return params


def _file_parameter() -> inspect.Parameter:
    """``--config FILE``, for ``config_file=True``."""
    return inspect.Parameter(
        _FILE_PARAM,
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[
            Path | None,
            typer.Option(
                "--config",
                help="A TOML file of these options, named with underscores (batch_size = 4); "
                "options given here win.",
                exists=True,
                dir_okay=False,
            ),
        ],
    )


def _models(
    built: Sequence[_Config], kwargs: dict[str, Any], context: Any, from_file: Mapping[str, Any]
) -> dict[str, BaseModel]:
    """Each model, validated from its options given (popped from ``kwargs``), else from the file.

    Raises:
        typer.BadParameter: every model's validation errors, each naming its option.
    """
    models: dict[str, BaseModel] = {}
    problems: list[str] = []
    for config in built:
        given: dict[str, Any] = {}
        for leaf in config.leaves:
            value = kwargs.pop(leaf.param, None)
            if _was_given(context, leaf.param, kwargs_had=value is not None):
                _put(given, leaf.keys, value)
            elif leaf.param in from_file:
                _put(given, leaf.keys, from_file[leaf.param])
        try:
            models[config.param] = config.model.model_validate(_fill(given, config.prefill))
        except ValidationError as exc:
            problems.extend(_problems(exc, config.leaves))
    if problems:
        raise typer.BadParameter("; ".join(problems))
    return models


def _leaves(
    model: type[BaseModel],
    param: str,
    exclude: Collection[str],
    unused: set[str],
    flatten: bool,
    prefill: dict[tuple[str, ...], Mapping[str, Any]],
    default: BaseModel | None = None,
    keys: tuple[str, ...] = (),
    names: tuple[str, ...] = (),
) -> Iterator[tuple[_Leaf, inspect.Parameter]]:
    """The options of ``model``'s fields, nested models' included, with the parameter for each.

    ``default`` is the instance the enclosing model defaults this one to, if any: its values are
    the defaults shown, and the base that given options of this model are laid over.
    """
    if default is not None:
        prefill[keys] = {_key(n, f): getattr(default, n) for n, f in model.model_fields.items()}
    for name, field in model.model_fields.items():
        path, key = (*names, name), (*keys, _key(name, field))
        dotted = ".".join(path)
        required = default is None and field.is_required()
        if dotted in exclude:
            unused.discard(dotted)
            if required:
                raise ValueError(f"{model.__name__}.{name} is required, so it cannot be excluded")
            continue
        value = getattr(default, name) if default is not None else _field_default(field)
        annotation = field.annotation
        if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
            nested = value if isinstance(value, BaseModel) else None
            yield from _leaves(annotation, param, exclude, unused, flatten, prefill, nested, key, path)
            continue
        kind, is_bool, is_list = _option_type(annotation, f"{model.__name__}.{name}")
        label = (*path[:-1], _stem(name, field))
        option = "--" + "-".join(label[-1:] if flatten else label).replace("_", "-")
        info = typer.Option(
            f"{option}/--no-{option[2:]}" if is_bool else option,
            help=_help(field),
            show_default=value is not None and value is not _NO_DEFAULT,
        )
        if is_list and isinstance(value, (tuple, list, set, frozenset)):
            value = list(value)
        leaf = _Leaf("__".join((param, *path)), option, key, dotted)
        yield (
            leaf,
            inspect.Parameter(
                leaf.param,
                inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if required else None if value is _NO_DEFAULT else value,
                annotation=Annotated[kind | None, info],
            ),
        )


_NO_DEFAULT = object()  # a required field, or a default factory (not called just to show it)


def _stem(name: str, field: FieldInfo) -> str:
    """What a field's option is named after: its alias if it has one, else its name."""
    return field.alias if isinstance(field.alias, str) else name


def _field_default(field: FieldInfo) -> Any:
    if field.is_required() or field.default_factory is not None:
        return _NO_DEFAULT
    return field.default


def _key(name: str, field: FieldInfo) -> str:
    """The input key pydantic validates the field from."""
    if isinstance(field.validation_alias, str):
        return field.validation_alias
    return field.alias or name


def _option_type(annotation: Any, where: str) -> tuple[Any, bool, bool]:
    """(the type typer converts the option to, whether it is a flag, whether it repeats)."""
    annotation = _strip(annotation)
    if get_origin(annotation) in (Union, types.UnionType):
        options = [a for a in get_args(annotation) if a is not type(None)]
        if len(options) == 1:
            annotation = _strip(options[0])
    if annotation is bool:
        return bool, True, False
    if _scalar(annotation):
        return annotation, False, False
    origin, args = get_origin(annotation), get_args(annotation)
    repeated = (origin is list and len(args) == 1) or (origin is tuple and len(args) == 2 and args[1] is ...)
    if repeated and _scalar(item := _strip(args[0])):
        return list[item], False, True  # type: ignore[valid-type]  # a runtime type
    raise TypeError(f"{where}: {annotation!r} has no command-line form; exclude it from the options")


def _strip(annotation: Any) -> Any:
    return get_args(annotation)[0] if get_origin(annotation) is Annotated else annotation


def _scalar(annotation: Any) -> bool:
    if inspect.isclass(annotation):
        return issubclass(annotation, _SCALARS) or issubclass(annotation, enum.Enum)
    return get_origin(annotation) is Literal and all(isinstance(a, str | int) for a in get_args(annotation))


_ROLE = re.compile(r":[a-z]+:`~?(?:[\w.]*\.)?([^`]+)`")  # :class:`~a.b.Name` -> Name


def _help(field: FieldInfo) -> str | None:
    """The field's description as one paragraph of plain help text (no reST, no Rich markup)."""
    if not field.description:
        return None
    text = _ROLE.sub(r"\1", field.description).replace("``", "")
    return escape(" ".join(text.split()))


def _own_options(param: inspect.Parameter) -> Iterator[str]:
    """The option names typer gives one of the command's own parameters (none for an argument)."""
    metadata = getattr(param.annotation, "__metadata__", ())
    infos = [m for m in (*metadata, param.default) if isinstance(m, ParameterInfo)]
    if not infos:  # a plain parameter: an option if it has a default, else an argument
        if param.default is not param.empty:
            yield "--" + param.name.replace("_", "-")
        return
    for info in infos:
        if not isinstance(info, OptionInfo):
            return
        decls = [d for d in (info.default, *(info.param_decls or ())) if isinstance(d, str)]
        if not any(d.startswith("-") for d in decls):
            decls.append("--" + param.name.replace("_", "-"))
        for decl in decls:
            yield from (d.strip() for d in decl.split("/") if d.strip().startswith("-"))


def _read_file(path: Path | None, built: Sequence[_Config]) -> dict[str, Any]:
    """The ``--config`` file's values by option parameter; BadParameter for a bad file or unknown key."""
    if path is None:
        return {}
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise typer.BadParameter(f"--config {path}: {exc}") from None
    by_key = {leaf.option[2:].replace("-", "_"): leaf.param for config in built for leaf in config.leaves}
    unknown = sorted(set(table) - set(by_key))
    if unknown:
        raise typer.BadParameter(
            f"--config {path}: unknown key(s) {', '.join(unknown)}; the keys are this command's options "
            "with underscores (see --help)"
        )
    return {by_key[key]: value for key, value in table.items()}


def _was_given(context: Any, param: str, *, kwargs_had: bool) -> bool:
    """Whether the user gave the option (on the command line, or through the environment)."""
    source_of = getattr(context, "get_parameter_source", None)  # typer passes its click Context
    if source_of is None:
        return kwargs_had  # called directly, not by typer
    source = source_of(param)
    return source is not None and source.name != "DEFAULT"


def _put(tree: dict[str, Any], keys: tuple[str, ...], value: Any) -> None:
    for key in keys[:-1]:
        tree = tree.setdefault(key, {})
    tree[keys[-1]] = value


def _fill(given: dict[str, Any], prefill: Mapping[tuple[str, ...], Mapping[str, Any]]) -> dict[str, Any]:
    """The model's input: given options laid over the defaults of nested models that have some."""

    def fill(node: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
        merged = {**prefill.get(keys, {}), **node}
        return {k: fill(v, (*keys, k)) if isinstance(v, dict) and k in node else v for k, v in merged.items()}

    return fill(given, ())


def _problems(exc: ValidationError, leaves: Collection[_Leaf]) -> Iterator[str]:
    """One ``--option: message`` per error, naming the option the input came from.

    An error of a whole nested model (its own validator's) names no option: its message alone.
    """
    options = {leaf.keys: leaf.option for leaf in leaves}
    nested = {leaf.keys[:end] for leaf in leaves for end in range(1, len(leaf.keys))}
    for error in exc.errors():
        loc = tuple(str(k) for k in error["loc"])
        message = str(error.get("ctx", {}).get("error", error["msg"]))
        for end in range(len(loc), 0, -1):
            if loc[:end] in options:
                yield f"{options[loc[:end]]}: {message}"
                break
        else:
            yield f"{'.'.join(loc)}: {message}" if loc and loc not in nested else message
