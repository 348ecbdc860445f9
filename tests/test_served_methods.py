"""A request never names a path on the server: methods that take a file or folder are refused unread.

Real processes throughout: one ``personamem serve`` per module (an alias and an exact method
allowed by its operator) and ``personamem mcp`` over stdio. Every row of the method table that
takes an argument is asked for with an existing file, an existing folder (dressed as every kind of
checkpoint) and a missing path, through REST search and context (``method`` and the deprecated
``pipeline`` field), the inspector's compare and MCP's ``recall`` over HTTP and stdio. Linux
inotify watches the file and the folder meanwhile: nothing may open or read them, and the three
answers must be the same but for the path the request itself gave.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from inotify_simple import INotify, flags
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from personamem import PersonaMem, SentenceEncoder
from personamem.cli import main
from personamem.errors import CheckpointError, MethodError
from personamem.methods import METHODS, SERVED_BY_DEFAULT, ServedMethods
from personamem.retrieval.query_adapter import shipped_adapters
from personamem.store import KeyRing
from personamem.store.sql import SqlCatalog
from personamem.testing.servers import mcp_client, personamem_server

PREFIXES = [spec.prefix for spec in METHODS if spec.prefix]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
USER, QUERY = "ana", "what do I keep on the roof?"
TEXTS = ["I keep bees on my roof.", "I cycle to work.", "My sister lives in Porto."]
_WATCHED = flags.OPEN | flags.ACCESS


@dataclass(frozen=True)
class Probe:
    """Paths a request may name: an existing file, an existing folder, a missing path.

    Attributes:
        root: the folder holding them (watched).
        targets: each kind of path by name.
        fast: a pipeline file the operator allows under the alias ``fast`` (BM25).
        exact: a pipeline file the operator allows as ``pipeline:<exact>`` (dense).
    """

    root: Path
    targets: dict[str, Path]
    fast: Path
    exact: Path


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Probe:
    root = tmp_path_factory.mktemp("probe")
    secret = root / "secret.toml"
    secret.write_text('[pipeline]\nfirst_stage = "bm25"\n')  # valid: read, it would serve
    folder = root / "ckpt"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "pgret.json", "adapter.json", "adapter.npy"):
        (folder / name).write_text("{}")
    operator = tmp_path_factory.mktemp("operator")
    fast, exact = operator / "fast.toml", operator / "exact.toml"
    fast.write_text('[pipeline]\nfirst_stage = "bm25"\n')
    exact.write_text('[pipeline]\nfirst_stage = "dense"\nquery_encoder = "base"\n')
    targets = {"file": secret, "folder": folder, "missing": root / "missing"}
    return Probe(root, targets, fast, exact)


@contextlib.contextmanager
def _watching(probe: Probe) -> Iterator[list[str]]:
    """Collect, after the block, what opened or read anything under the probe's paths."""
    found: list[str] = []
    with INotify() as watcher:
        for folder in (probe.root, probe.targets["folder"]):
            watcher.add_watch(folder, _WATCHED)
        yield found
        found += [f"{event.name or '.'}: {flags.from_mask(event.mask)}" for event in watcher.read(timeout=0)]


@contextlib.contextmanager
def _untouched(probe: Probe) -> Iterator[None]:
    with _watching(probe) as found:
        yield
    assert found == [], found


def _same_but_the_path(answers: dict[str, Any], probe: Probe) -> None:
    """The answers for the file, the folder and the missing path are equal once each path is masked."""
    masked = {
        kind: repr(answer).replace(str(probe.targets[kind]), "<path>") for kind, answer in answers.items()
    }
    assert masked["file"] == masked["folder"] == masked["missing"], masked


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, probe: Probe) -> Iterator[tuple[str, str]]:
    """The server's URL and a tenant's key; the tenant's ana has three records."""
    folder = tmp_path_factory.mktemp("store")
    allow = ["--allow-method", f"fast=pipeline:{probe.fast}", "--allow-method", f"pipeline:{probe.exact}"]
    catalog = SqlCatalog(f"sqlite:///{folder / 'personamem.sqlite'}")
    key = KeyRing(catalog).create("acme")[0]
    catalog.close()
    with personamem_server(folder, serve_options=allow) as url:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            for text in TEXTS:
                assert http.post("/v1/records", json={"user_id": USER, "text": text}).status_code == 201
        yield url, key


def _rest_answers(http: httpx.Client, name: str) -> list[tuple[str, int, str, str]]:
    """(route, status, error type, message) of every REST route that takes a method name."""
    asks = [
        ("/v1/search", {"method": name}),
        ("/v1/context", {"method": name}),
        ("/v1/context", {"pipeline": name}),  # the deprecated name of method
        ("/v1/ui/compare", {"left": name}),
        ("/v1/ui/compare", {"right": name}),
    ]
    answers = []
    for route, choice in asks:
        answer = http.post(route, json={"user_id": USER, "query": QUERY, **choice})
        error = answer.json().get("error", {})
        answers.append((route, answer.status_code, error.get("type", ""), error.get("message", "")))
    return answers


@pytest.mark.server
@pytest.mark.enable_socket
@pytest.mark.parametrize("prefix", PREFIXES)
def test_rest_and_the_inspector_refuse_a_path_without_touching_it(
    served: tuple[str, str], probe: Probe, prefix: str
) -> None:
    url, key = served
    with (
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        _untouched(probe),
    ):
        answers = {kind: _rest_answers(http, f"{prefix}{path}") for kind, path in probe.targets.items()}
    for kind, rows in answers.items():
        for route, status, error, message in rows:
            assert (status, error) == (400, "MethodError"), (kind, route, message)
            assert f"method '{prefix}{probe.targets[kind]}' is not served here" in message
            assert "adapter:mixed" in message and "--allow-method" in message and "fast" in message
    _same_but_the_path(answers, probe)


@pytest.mark.server
@pytest.mark.enable_socket
def test_an_operators_alias_and_exact_method_serve_through_rest(
    served: tuple[str, str], probe: Probe
) -> None:
    url, key = served
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:

        def ids(method: str) -> list[str]:
            answer = http.post("/v1/search", json={"user_id": USER, "query": QUERY, "k": 3, "method": method})
            assert answer.status_code == 200, answer.text
            return [hit["id"] for hit in answer.json()["hits"]]

        assert ids("fast") == ids("bm25")  # fast.toml's pipeline: BM25
        assert ids(f"pipeline:{probe.exact}") == ids("dense") != []
        compared = http.post(
            "/v1/ui/compare", json={"user_id": USER, "query": QUERY, "left": "fast", "right": "bm25"}
        )
        assert compared.status_code == 200 and compared.json()["moved"] == []
        context = http.post("/v1/context", json={"user_id": USER, "query": QUERY, "method": "fast"})
        assert context.status_code == 200 and "bees" in context.json()["text"]
        wrong = http.post(
            "/v1/search", json={"user_id": USER, "query": QUERY, "method": f"pipeline:{probe.fast}"}
        )
        assert wrong.status_code == 400  # an alias serves its name, not its path


def _text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


async def _recall_refusals(client: Client, probe: Probe) -> None:
    """Every path-bearing method through ``recall``: a tool error, the same for each kind of path."""
    for prefix in PREFIXES:
        answers = {}
        for kind, path in probe.targets.items():
            result = await client.call_tool(
                "recall", {"user_id": USER, "query": QUERY, "method": f"{prefix}{path}"}
            )
            assert result.is_error, _text(result)
            assert f"method '{prefix}{path}' is not served here" in _text(result)
            answers[kind] = _text(result)
        _same_but_the_path(answers, probe)


@pytest.mark.server
@pytest.mark.enable_socket
async def test_mcp_over_http_refuses_a_path_without_touching_it(
    served: tuple[str, str], probe: Probe
) -> None:
    url, key = served
    async with mcp_client(url, key) as client:
        with _untouched(probe):
            await _recall_refusals(client, probe)
        fast = await client.call_tool("recall", {"user_id": USER, "query": QUERY, "method": "fast"})
        assert not fast.is_error, _text(fast)


@pytest.mark.slow
async def test_mcp_over_stdio_refuses_a_path_without_touching_it(tmp_path: Path, probe: Probe) -> None:
    args = ["-m", "personamem", "--store", str(tmp_path / "store"), "mcp"]
    args += ["--allow-method", f"fast=pipeline:{probe.fast}"]
    async with Client(StdioServerParameters(command=sys.executable, args=args, env=OFFLINE)) as client:
        assert not (await client.call_tool("remember", {"user_id": USER, "text": TEXTS[0]})).is_error
        with _untouched(probe):
            await _recall_refusals(client, probe)
        fast = await client.call_tool("recall", {"user_id": USER, "query": QUERY, "method": "fast"})
        assert not fast.is_error and fast.structured_content is not None, _text(fast)
        assert [hit["text"] for hit in fast.structured_content["hits"]] == [TEXTS[0]]


def test_the_sdk_still_takes_paths_and_a_policy_reaches_every_tenant_view(
    tmp_path: Path, encoder: SentenceEncoder, probe: Probe
) -> None:
    secret = probe.targets["file"]
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as mem:
        mem.add_many([{"text": text} for text in TEXTS], user_id=USER)
        early = mem.tenant("early")
        with _watching(probe) as opened:
            hits = mem.search(USER, QUERY, k=3, method=f"pipeline:{secret}")
        assert hits and any(line.startswith(f"{secret.name}: ") for line in opened), opened  # it was read
        with pytest.raises(CheckpointError, match="not a PURPLE checkpoint"):
            mem.selector(f"purple:{probe.targets['missing']}")

        mem.served_methods = SERVED_BY_DEFAULT
        for view in (mem, early, mem.tenant("late")):
            assert view.served_methods is SERVED_BY_DEFAULT
            with _untouched(probe), pytest.raises(MethodError, match="is not served here"):
                view.search(USER, QUERY, method=f"pipeline:{secret}")
            with _untouched(probe), pytest.raises(MethodError, match="is not served here"):
                view.context(USER, QUERY, method=f"purple:{probe.targets['folder']}")
            with _untouched(probe), pytest.raises(MethodError, match=r"selector .* is not served here"):
                view.selector(f"purple:{probe.targets['folder']}")
            assert view.selector("relevance") is not None
            view.search(USER, QUERY, k=1, method="adapter:mixed")  # shipped: served


def test_the_default_serves_the_plain_rows_and_the_shipped_adapters_only() -> None:
    names = SERVED_BY_DEFAULT.names()
    shipped = shipped_adapters()
    assert "mixed" in shipped
    assert names == [
        *(spec.name for spec in METHODS if spec.prefix is None),
        *(f"adapter:{name}" for name in shipped),
        *(f"adapter-rrf:{name}" for name in shipped),
    ]
    assert all(SERVED_BY_DEFAULT.resolve(name) == name for name in names)
    for refused in ("adapter:../mixed", "adapter:/tmp/mixed", "adapter:mixed/", "pipeline:x.toml", "hybrid "):
        with pytest.raises(MethodError, match="--allow-method"):
            SERVED_BY_DEFAULT.resolve(refused)
    with pytest.raises(MethodError, match="unknown method 'magic'; this server serves: dense, bm25"):
        SERVED_BY_DEFAULT.resolve("magic")


def test_operator_entries_are_checked_when_the_server_starts(tmp_path: Path, probe: Probe) -> None:
    odd = tmp_path / "a=b.toml"
    odd.write_text("[pipeline]\n")
    served = ServedMethods.allowing([f"pipeline:{odd}", f"quick=pipeline:{probe.fast}", "plain=bm25"])
    assert served.allowed == {f"pipeline:{odd}"} and served.resolve("plain") == "bm25"
    assert served.names()[-3:] == [f"pipeline:{odd}", "plain", "quick"]
    bad = {
        "dense=bm25": "alias 'dense' would hide the method of that name",
        "my alias=bm25": "alias 'my alias': use 1-64 letters",
        "x=nope": "alias 'x': unknown method 'nope'",
        "nope:x": "unknown method",
        f"pipeline:{tmp_path / 'none.toml'}": "cannot read",
        f"pipeline:{probe.targets['folder']}": "cannot read",
        f"purple:{tmp_path / 'none'}": "is not a folder",
        f"pgret-rrf:{probe.targets['file']}": "is not a folder",
        f"adapter:{tmp_path}": "not a query adapter",
    }
    for entry, words in bad.items():
        with pytest.raises(MethodError, match="--allow-method") as refused:
            ServedMethods.allowing([entry])
        assert words in str(refused.value), entry
    with pytest.raises(MethodError, match="alias 'f' already runs 'dense'"):
        ServedMethods.allowing(["f=dense", "f=bm25"])


def test_serve_and_mcp_refuse_a_bad_entry_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ["--store", str(tmp_path / "store")]
    assert main([*store, "serve", "--allow-method", "dense=bm25"]) == 2
    assert "alias 'dense' would hide the method" in capsys.readouterr().err
    assert main([*store, "mcp", "--allow-method", f"pipeline:{tmp_path / 'none.toml'}"]) == 2
    assert "cannot read" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "store").exists()  # refused before the store opened
