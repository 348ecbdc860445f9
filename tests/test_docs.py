"""The documentation builds, and what it shows runs against the code as it is.

- ``mkdocs build --strict`` (the site of ``docs/``, with the API reference generated from the
  docstrings by mkdocstrings) builds without a warning: no broken link or anchor, no page left out
  of the nav, no docstring mkdocstrings cannot read.
- Every ```` ```python ```` block of ``README.md`` and ``docs/*.md`` (found by ``find_examples`` of
  ``pytest-examples``) runs as a test, in a fresh temporary folder that is also ``$HOME``, so ``~/...``
  store paths and relative paths land there. The models load offline from installed packages; the
  converted-model cache stays the real one so an LLM is not converted again. A block is compiled
  under its page's name at its own line numbers, so a failure's traceback points into the page.
  (``EvalExample.run`` is not used: the traceback it fabricates for a failing example breaks
  Python 3.11's traceback formatting, and pytest reports an INTERNALERROR instead of the failure.)
- Every ``personamem ...`` line of the ```` ```bash ```` blocks names a command and options the CLI
  has; ``docs/layout.md`` names paths that exist; the README stays short, keeps the two lines
  ``.ci/run`` reads, and links only to files that exist.

Conventions the pages follow (``docs/development.md`` says the same for writers):

- A block is self-contained: it imports what it uses and opens its own memory.
- A block that talks to ``http://127.0.0.1:8080`` runs against a real ``personamem serve`` that
  this module starts on a free port (the address in the block is replaced by the real one), with a
  fresh tenant's key in ``$PERSONAMEM_API_KEY``; sockets are enabled for those blocks only.
- A block that cannot run here is preceded by ``<!-- no-test: why -->`` (an HTML comment, invisible
  on GitHub and in the site). Such blocks are listed and counted by
  ``test_no_test_blocks_are_few_and_say_why``, which caps their number.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from personamem.llm.packaged import default_cache_dir
from personamem.store import KeyRing
from personamem.store.sql import SqlCatalog
from personamem.testing.servers import personamem_server

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SERVER_URL = "http://127.0.0.1:8080"
NO_TEST = re.compile(r"<!--\s*no-test:\s*(?P<why>[^>]*?)\s*-->\s*$")
MAX_NO_TEST = 4  # a few blocks may need what a test machine lacks; more means examples are drifting
_tenants = itertools.count()

try:
    from pytest_examples import CodeExample, find_examples
except ImportError:  # the `docs` extra is not installed: the examples are reported as skipped
    EXAMPLES: list[CodeExample] = []
else:
    EXAMPLES = [e for e in find_examples(*PAGES) if e.prefix.split()[0] in {"python", "py"}]


def _no_test_reason(example: CodeExample) -> str | None:
    """The reason given in a ``<!-- no-test: ... -->`` comment right above the block, if any."""
    text = example.path.read_text(encoding="utf-8")
    before = text[: text.rfind("```", 0, example.start_index)].rstrip("\n")
    match = NO_TEST.search(before.rsplit("\n", 1)[-1])
    return match["why"] if match else None


def _params() -> list[object]:
    params = []
    for example in EXAMPLES:
        name = f"{example.path.relative_to(ROOT)}:{example.start_line}"
        marks = []
        if (why := _no_test_reason(example)) is not None:
            marks.append(pytest.mark.skip(reason=f"marked no-test: {why}"))
        if SERVER_URL in example.source:
            marks.append(pytest.mark.enable_socket)
        params.append(pytest.param(example, id=name, marks=marks))
    return params or [pytest.param(None, marks=pytest.mark.skip(reason="pytest-examples is not installed"))]


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        pytest.skip('mkdocs is not installed (pip install -e ".[docs]")')
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    site = tmp_path / "site"
    for page in ("index.html", "RESULTS/index.html", "DESIGN/index.html", "DEPLOY/index.html"):
        assert (site / page).is_file(), page
    # the API reference was generated from the docstrings, members and config fields included
    assert 'id="personamem.PersonaMem.context"' in (site / "reference/memory/index.html").read_text("utf-8")
    fields = (site / "reference/pipeline/index.html").read_text("utf-8")
    assert 'id="personamem.pipeline.PipelineConfig.budget_tokens"' in fields


def test_readme_stays_short_and_its_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200, "the README is read in five minutes: move detail into docs/"
    # .ci/run reads these two lines and runs them verbatim
    assert re.search(r"^[^#].*# install$", readme, flags=re.M), "no line ending in '# install'"
    assert re.search(r"^[^#].*# tests$", readme, flags=re.M), "no line ending in '# tests'"
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    assert targets, "the README links to the docs"
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


def _options(command: object) -> set[str]:
    """The option names (``--store``, ``-k``...) a typer/click command takes."""
    names: set[str] = set()
    for param in getattr(command, "params", []):
        if getattr(param, "param_type_name", "") == "option":
            names.update(param.opts, param.secondary_opts)
    return names


def test_documented_commands_and_options_exist() -> None:
    """Every ``personamem ...`` line of the pages' bash blocks names a real command and real options.

    The shell blocks are not run (they need benchmark data, servers, minutes); this checks them
    against the CLI's own command tree instead, so a renamed command or option fails here.
    """
    import typer

    from personamem.cli import app

    root = typer.main.get_command(app)
    checked, wrong = 0, []
    for page in PAGES:
        for block in re.findall(r"^```bash\n(.*?)^```", page.read_text(encoding="utf-8"), flags=re.M | re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                found = re.search(r"(?:^|&& |-m )personamem (.*)", line.split("  #")[0].strip())
                if found is None:
                    continue
                words, command, at = found[1].split(), root, f"{page.name}: personamem"
                while words and words[0].startswith("-"):  # the global options, each with its value
                    if words.pop(0).split("=")[0] not in _options(root):
                        wrong.append(f"{at} {found[1]}: unknown global option")
                    if words:
                        words.pop(0)
                while words and words[0] in getattr(command, "commands", {}):
                    command = command.commands[words[0]]  # type: ignore[attr-defined]
                    at += f" {words.pop(0)}"
                if hasattr(command, "commands"):
                    if words and words[0] != "...":
                        wrong.append(f"{at}: no command {words[0]!r}")
                    continue
                checked += 1
                known = _options(command) | {"--help"}
                wrong += [
                    f"{at}: no option {w}"
                    for w in (w.strip("[]").split("=")[0] for w in words)
                    if w.startswith("--") and w not in known
                ]
    assert checked > 50, "the pages lost their command-line examples"
    assert not wrong, "\n".join(wrong)


def test_layout_names_paths_that_exist() -> None:
    layout = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    roots = ("personamem/", "trainers/", "adapters/", "examples/", "bench/", "docs/")
    paths = [p for p in re.findall(r"`([^`\s]+)`", layout) if p.startswith(roots)]
    assert len(paths) > 20, "docs/layout.md lost its table"
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"docs/layout.md names paths that are gone: {missing}"


def test_no_test_comment_is_read(tmp_path: Path) -> None:
    if not EXAMPLES:
        pytest.skip('pytest-examples is not installed (pip install -e ".[docs]")')
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nprint(1)\n```\n\n<!-- no-test: needs a GPU -->\n```python\nprint(2)\n```\n",
        encoding="utf-8",
    )
    assert [_no_test_reason(e) for e in find_examples(page)] == [None, "needs a GPU"]


def test_no_test_blocks_are_few_and_say_why() -> None:
    if not EXAMPLES:
        pytest.skip('pytest-examples is not installed (pip install -e ".[docs]")')
    skipped = {f"{e.path.name}:{e.start_line}": _no_test_reason(e) for e in EXAMPLES}
    skipped = {where: why for where, why in skipped.items() if why is not None}
    assert all(skipped.values()), f"a no-test comment must say why: {skipped}"
    assert len(skipped) <= MAX_NO_TEST, f"{len(skipped)} blocks are marked no-test: {skipped}"
    assert len(EXAMPLES) - len(skipped) >= 10, "the pages lost their runnable examples"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, KeyRing]]:
    """A real ``personamem serve`` over a fresh folder store, and its key ring."""
    folder = tmp_path_factory.mktemp("docs-server")
    with personamem_server(folder) as url:
        catalog = SqlCatalog(f"sqlite:///{folder / 'personamem.sqlite'}")
        yield url, KeyRing(catalog)
        catalog.close()


@pytest.mark.parametrize("example", _params())
def test_example_runs(
    example: CodeExample,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    monkeypatch.setenv("PERSONAMEM_CACHE", str(default_cache_dir()))  # before $HOME moves
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    for name in ("PERSONAMEM_STORE", "PERSONAMEM_CONFIG", "PERSONAMEM_SQL_URL", "PERSONAMEM_CHROMA_URL"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    source = example.source
    if SERVER_URL in source:
        url, keys = request.getfixturevalue("server")
        monkeypatch.setenv("PERSONAMEM_API_KEY", keys.create(f"docs{next(_tenants)}")[0])
        source = source.replace(SERVER_URL, url)
    # blank lines first, so the traceback of a failing block names the page's own line numbers
    code = compile("\n" * example.start_line + source, str(example.path), "exec")
    exec(code, {"__name__": "__main__"})
