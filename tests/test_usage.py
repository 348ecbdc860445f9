"""Every search and context result says what it cost: encoder and LLM tokens, and time per stage.

In process, through a real ``personamem serve`` (raw REST, ``Client``, ``AsyncClient``, MCP) and the
CLI; an LLM stage's tokens are counted once, and a repeat served from its cache costs none.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from personamem import PersonaMem, PipelineConfig, SentenceEncoder
from personamem.cli import main
from personamem.client import AsyncClient, Client
from personamem.contract import Hits
from personamem.errors import PBRFallbackWarning
from personamem.llm import FrozenLLM
from personamem.llm.base import Usage
from personamem.testing.servers import mcp_client, personamem_server

USER, QUERY, TENANT = "ana", "what should I cook tonight after my long ride?", "acme"
TEXTS = [
    "I'm vegan and avoid dairy.",
    "I cycle to work every day.",
    "Spicy curries are my favourite.",
    "I live in Lisbon.",
]


def _no_llm(encoder: SentenceEncoder) -> dict[str, int]:
    """A call's usage JSON when only the encoder ran, for QUERY."""
    return {"prompt_tokens": 0, "completion_tokens": 0, "encoder_tokens": encoder.count_tokens([QUERY])[0]}


def _check_timings(timings: dict[str, float], stages: set[str]) -> None:
    assert set(timings) == stages and all(ms >= 0 for ms in timings.values()), timings


def test_search_counts_the_query_word_pieces_and_times_the_stages_it_ran(
    ana_memory: PersonaMem, encoder: SentenceEncoder
) -> None:
    pieces = encoder.count_tokens([QUERY])[0]
    assert pieces > len(QUERY.split())  # word pieces and [CLS]/[SEP], not a word estimate
    hits = ana_memory.search(USER, QUERY, k=2)
    assert isinstance(hits, Hits) and isinstance(hits, list) and len(hits) == 2
    assert hits.usage == Usage(encoder_tokens=pieces)
    _check_timings(hits.timings_ms, {"first_stage"})

    selected = ana_memory.search(USER, QUERY, k=2, method="earliest5")
    assert selected.usage == Usage(encoder_tokens=pieces)
    _check_timings(selected.timings_ms, {"first_stage", "select"})
    assert ana_memory.search(USER, QUERY, k=2, method="bm25").usage == Usage()  # no encoder ran

    context = ana_memory.context(USER, QUERY)
    assert context.usage == Usage(encoder_tokens=pieces)
    _check_timings(context.timings_ms, {"first_stage", "fit"})
    assert context.to_json()["usage"] == _no_llm(encoder)


def test_concurrent_calls_are_counted_apart(ana_memory: PersonaMem, encoder: SentenceEncoder) -> None:
    queries = [QUERY, "dairy?"] * 8
    with ThreadPoolExecutor(4) as pool:
        spent = list(pool.map(lambda q: ana_memory.search(USER, q).usage.encoder_tokens, queries))
    assert spent == encoder.count_tokens(queries)  # each its own query's, never a neighbour's


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, encoder: SentenceEncoder) -> Iterator[tuple[str, str]]:
    """A server over a store where tenant acme holds ana's records, and acme's read key."""
    folder = tmp_path_factory.mktemp("usage") / "store"
    with PersonaMem.open(folder, encoder=encoder) as mem:
        mem.tenant(TENANT).add_many(TEXTS, user_id=USER)
        mem.add_many(TEXTS, user_id=USER)  # store-wide too, for the CLI
        key = mem.store.keys.create(TENANT, scope="read")[0]
    with personamem_server(folder) as url:
        yield url, key


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.enable_socket
async def test_every_surface_returns_the_calls_usage_and_timings(
    served: tuple[str, str], encoder: SentenceEncoder
) -> None:
    url, key = served
    want = _no_llm(encoder)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        search = http.post("/v1/search", json={"user_id": USER, "query": QUERY, "k": 2}).json()
        context = http.post("/v1/context", json={"user_id": USER, "query": QUERY}).json()
    assert search["usage"] == want and context["usage"] == want
    _check_timings(search["timings_ms"], {"first_stage"})
    _check_timings(context["timings_ms"], {"first_stage", "fit"})

    with Client(url, key) as client:
        hits = client.search(USER, QUERY, k=2)
        assert hits.usage == Usage(**want) and len(hits) == 2
        _check_timings(hits.timings_ms, {"first_stage"})
        assert client.context(USER, QUERY).usage == Usage(**want)
    async with AsyncClient(url, key) as aclient:
        hits = await aclient.search(USER, QUERY, k=2, method="earliest5")
        assert hits.usage == Usage(**want)
        _check_timings(hits.timings_ms, {"first_stage", "select"})

    async with mcp_client(url, key) as mcp:
        recalled = await mcp.call_tool("recall", {"user_id": USER, "query": QUERY, "k": 2})
        told = await mcp.call_tool("context", {"user_id": USER, "query": QUERY})
    assert not recalled.is_error and not told.is_error
    found: dict[str, Any] = recalled.structured_content or {}
    assert found["usage"] == want and len(found["hits"]) == 2
    _check_timings(found["timings_ms"], {"first_stage"})
    answer: dict[str, Any] = told.structured_content or {}
    assert answer["usage"] == want and answer["result"] == context["text"]
    assert told.content[0].text == context["text"]  # what the agent reads: the text, then
    assert answer["interaction_id"] in told.content[1].text  # the id to report its answer on
    _check_timings(answer["timings_ms"], {"first_stage", "fit"})


def test_the_cli_reports_the_usage_beside_its_answer(
    ana_memory: PersonaMem, encoder: SentenceEncoder, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ["--store", str(ana_memory.store.folder)]
    capsys.readouterr()
    assert main([*store, "search", "--user", USER, QUERY, "-k", "2", "--json"]) == 0
    printed = capsys.readouterr()
    assert [json.loads(line)["rank"] for line in printed.out.splitlines()] == [1, 2]  # stdout: the hits
    cost = json.loads(printed.err)
    assert cost["usage"] == _no_llm(encoder)
    _check_timings(cost["timings_ms"], {"first_stage"})

    assert main([*store, "context", "--user", USER, QUERY, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["usage"] == _no_llm(encoder)
    assert main([*store, "search", "--user", USER, QUERY]) == 0
    assert f"{_no_llm(encoder)['encoder_tokens']} encoder tokens" in capsys.readouterr().err


@pytest.mark.slow
def test_an_llm_stage_costs_tokens_once_and_its_cached_repeat_none(
    tmp_path: Path, encoder: SentenceEncoder, ct2_llm: FrozenLLM
) -> None:
    config = PipelineConfig(personalizer="hyde", first_stage="dense", query_encoder="base")
    with PersonaMem.open(tmp_path / "store", encoder=encoder, llm=ct2_llm) as mem, warnings.catch_warnings():
        warnings.simplefilter("ignore", PBRFallbackWarning)  # a 135M model may write no usable passage
        mem.add_many(TEXTS, user_id=USER)
        first = mem.context(USER, QUERY, method=config)
        again = mem.context(USER, QUERY, method=config)
    assert first.usage.prompt_tokens > 0 and first.usage.completion_tokens > 0
    assert again.usage.total_tokens == 0  # HyDE's passages came from the cache
    # the query (and the passages, where there are any) were encoded both times
    assert first.usage.encoder_tokens == again.usage.encoder_tokens >= encoder.count_tokens([QUERY])[0]
    _check_timings(first.timings_ms, {"personalize", "first_stage", "fit"})
