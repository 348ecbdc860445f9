import ast
import graphlib
import inspect
from pathlib import Path

import personamem
import personamem.errors


def test_public_api_is_pinned() -> None:
    assert personamem.__all__ == [
        "AuthenticationError",
        "BM25Retriever",
        "CheckpointError",
        "ConfigError",
        "ConsistencyReport",
        "Context",
        "DenseRetriever",
        "Encoder",
        "FallbackWarning",
        "Hit",
        "HybridRetriever",
        "IngestError",
        "InvalidRecordError",
        "LLMError",
        "MethodError",
        "MissingExtraError",
        "PartialWriteError",
        "PersonaMem",
        "PersonaMemError",
        "PersonaMemWarning",
        "Pipeline",
        "PipelineConfig",
        "PreferenceMemory",
        "ProfileSelector",
        "QueryPersonalizer",
        "Record",
        "RecordKind",
        "RelevanceSelector",
        "RemoteError",
        "Retriever",
        "SentenceEncoder",
        "Store",
        "StoreError",
        "TokenStates",
        "TruncationWarning",
        "default_encoder",
        "load_pipeline",
    ]
    for name in personamem.__all__:
        assert getattr(personamem, name) is not None


def test_errors_and_warnings_form_one_family() -> None:
    classes = [
        value
        for name in personamem.errors.__all__
        if inspect.isclass(value := getattr(personamem.errors, name))
    ]
    errors = [c for c in classes if issubclass(c, BaseException) and not issubclass(c, Warning)]
    warns = [c for c in classes if issubclass(c, Warning)]
    assert len(errors) + len(warns) == len(classes)
    assert all(issubclass(c, personamem.PersonaMemError) for c in errors)
    assert all(issubclass(c, personamem.PersonaMemWarning) for c in warns)
    assert {c.__name__ for c in errors} >= {"LLMError", "CheckpointError", "MethodError", "ConfigError"}
    assert issubclass(personamem.MissingExtraError, ImportError)  # still caught as an import failure


def test_no_module_defines_its_own_exception_or_warning() -> None:
    """Every exception and warning class lives in errors.py, so the family stays in one place."""
    roots = [Path(personamem.__file__).parent, Path(personamem.__file__).parent.parent / "adapters"]
    roots.append(Path(personamem.__file__).parent.parent / "trainers")
    strays = []
    for root in roots:
        for path in root.rglob("*.py"):
            if path.name == "errors.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    bases = {ast.unparse(b) for b in node.bases}
                    if any(b.endswith(("Error", "Exception", "Warning")) for b in bases):
                        strays.append(f"{path.name}:{node.name}")
    assert strays == []


def test_eval_api_is_pinned() -> None:
    import personamem.eval

    assert personamem.eval.__all__ == [
        "DEFAULT_METRICS",
        "Benchmark",
        "BenchmarkName",
        "EvalConfig",
        "Method",
        "MethodRun",
        "Question",
        "Report",
        "Skip",
        "build_store",
        "evaluate_method",
        "load_benchmark",
        "run_eval",
    ]


def test_runtime_never_imports_the_harness_or_the_trainers() -> None:
    """The core is imported by eval/ and trainers/, never the reverse (checked on the source)."""
    package = Path(personamem.__file__).parent
    offenders = []
    for path in package.rglob("*.py"):
        relative = path.relative_to(package)
        if relative.parts[0] in ("eval", "testing", "cli"):
            continue  # the harness itself, the contract tests and the command line may use both
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            offenders += [
                f"{relative}: {n}" for n in names if n.startswith(("personamem.eval", "personamem.trainers"))
            ]
    # PersonaMem.improve is the SDK's door to the improve trainer (imported when called; DESIGN.md says why)
    door = {
        "improving.py: personamem.trainers.adapter.config",
        "improving.py: personamem.trainers.adapter.improve",
    }
    assert sorted(set(offenders) - door) == []


def test_the_surfaces_reach_the_store_only_through_the_facade() -> None:
    """The REST server, the inspector and MCP call ``PersonaMem``'s methods, never its ``.store``."""
    package = Path(personamem.__file__).parent
    surfaces = [*(package / "server").glob("*.py"), package / "mcp_server.py"]
    reached = []
    for path in surfaces:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # names bound to ``settings()``: their ``store`` is PERSONAMEM_STORE, a folder, not the store
        folders = {
            target.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and ast.unparse(node.value) == "settings()"
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        reached += [
            f"{path.relative_to(package)}:{node.lineno}: {ast.unparse(node)}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr == "store"
            and ast.unparse(node.value) not in folders
        ]
    assert reached == []


def test_nothing_imports_the_command_line() -> None:
    """The CLI is the top of the import graph: no runtime, harness, trainer or adapter module imports it."""
    root = Path(personamem.__file__).parent
    offenders = []
    for path in [
        *root.rglob("*.py"),
        *(root.parent / "trainers").rglob("*.py"),
        *(root.parent / "adapters").rglob("*.py"),
    ]:
        if path.is_relative_to(root / "cli") or path == root / "__main__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [module or ""]
            offenders += [
                f"{path.name}: {n}" for n in names if n == "personamem.cli" or n.startswith("personamem.cli.")
            ]
    assert offenders == []


def _modules() -> dict[str, Path]:
    """Every module of the installed package, by dotted name (trainers/ and adapters/ included)."""
    package = Path(personamem.__file__).parent
    roots = [(package, "personamem"), (package.parent / "trainers", "personamem.trainers")]
    roots.append((package.parent / "adapters", "personamem.adapters"))
    found = {}
    for folder, prefix in roots:
        for path in folder.rglob("*.py"):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
            found[".".join([prefix, *parts])] = path
    return found


def test_no_import_loops() -> None:
    """No module reaches itself through imports: module-level, in functions and under TYPE_CHECKING alike.

    A package's ``__init__`` re-exporting its own modules is not counted (the interpreter runs it
    first whichever of them is imported; it is how ``personamem.store`` names ``Store``).
    """
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported: set[str] = set()
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join([*parts, *([module] if module else [])])
                imported |= {f"{module}.{a.name}" for a in node.names} | {module}
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
        graph[name] = {m for m in imported if m in modules and m != name}
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming the loop


def test_no_class_is_over_400_lines_and_no_function_over_120() -> None:
    """Small units anywhere in the library (personamem/, trainers/, adapters/), as issue 62 asks."""
    too_long = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            limit = 400 if isinstance(node, ast.ClassDef) else 120
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    too_long.append(f"{name}.{node.name}: {lines} lines (at most {limit})")
    assert too_long == []


def test_no_class_name_is_defined_twice() -> None:
    """One meaning per name; the framework adapters alone share theirs (switching frameworks: one import)."""
    defined: dict[str, set[str]] = {}
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, set()).add(name)
    twice = {cls: sorted(where) for cls, where in defined.items() if len(where) > 1}
    adapters = {
        cls for cls, where in twice.items() if all(m.startswith("personamem.adapters.") for m in where)
    }
    assert {cls: twice[cls] for cls in sorted(set(twice) - adapters)} == {}


def test_no_context_variable_carries_a_read_option() -> None:
    """The read is an argument (``store/read.py``): the context variables left are per-call tallies and the
    audit actor, none of which changes what a read sees."""
    names = set()
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "ContextVar":
                names.add(ast.literal_eval(node.args[0]))
    assert names == {
        "personamem_actor",  # who wrote a record's event (store/history.py)
        "personamem_encoder_tokens",
        "personamem_fallbacks",
        "personamem_llm_deadline",
        "personamem_llm_usage",
        "personamem_outputs",
    }


def test_every_package_folder_is_in_the_wheel() -> None:
    """A folder missing from pyproject's package list works when installed editable, not from a wheel."""
    import tomllib

    root = Path(personamem.__file__).parent.parent
    setuptools = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    folders = {"personamem": root / "personamem"}
    folders.update({name: root / folder for name, folder in setuptools["package-dir"].items()})
    found = {
        ".".join([name, *folder.relative_to(top).parts])
        for name, top in folders.items()
        for folder in [top, *top.rglob("*")]
        if folder.is_dir() and (folder / "__init__.py").is_file()
    }
    assert sorted(found - set(setuptools["packages"])) == []
