"""OpenAICompatibleLLM against a real HTTP server on 127.0.0.1 that serves the local model.

The server runs the same TransformersLLM as the reference, so the HTTP backend must reproduce the local
backend's scores and greedy generations; other server modes inject the failures remote servers have.
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator

import pytest

from personamem import PersonaMem
from personamem.llm.base import FrozenLLM, LLMError, Prompt
from personamem.llm.hf import TransformersLLM
from personamem.llm.openai_backend import OpenAICompatibleLLM
from personamem.testing import FrozenLLMContract
from tests.llm.openai_server import OpenAIServer

pytestmark = pytest.mark.enable_socket

CHAT: Prompt = [{"role": "user", "content": "Is the sky blue? Answer yes or no."}]
PAIRS: list[tuple[Prompt, str]] = [
    ("The capital of France is", " Paris"),
    ("I like to drink", " coffee in the morning."),
    (CHAT, "Yes"),
    ([{"role": "system", "content": "Be brief."}, *CHAT], "No, it is green."),
]
PROMPTS: list[Prompt] = ["Once upon a time", CHAT]


@pytest.fixture(scope="module")
def local() -> TransformersLLM:
    return TransformersLLM.default()


@pytest.fixture(scope="module")
def greedy(local: TransformersLLM) -> list[list[str]]:
    """Local greedy answers to PROMPTS, one prompt at a time as the HTTP backend sends them."""
    return [local.generate([p], max_tokens=12)[0] for p in PROMPTS]


@pytest.fixture(scope="module")
def server(local: TransformersLLM) -> Iterator[OpenAIServer]:
    with OpenAIServer(local) as s:
        yield s


@pytest.fixture(scope="module")
def remote(server: OpenAIServer, local: TransformersLLM) -> Iterator[OpenAICompatibleLLM]:
    with OpenAICompatibleLLM(server.url, local.name, tokenizer=local.tokenizer, timeout=30) as llm:
        yield llm


def _client(url: str, *, timeout: float = 5.0, max_retries: int = 2) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM(url, "m", timeout=timeout, max_retries=max_retries, backoff=0.05)


def test_is_a_frozen_llm(remote: OpenAICompatibleLLM, local: TransformersLLM) -> None:
    assert isinstance(remote, FrozenLLM)
    assert remote.name == local.name
    assert remote.count_tokens("Hello world, how are you?") == local.count_tokens("Hello world, how are you?")


def test_scores_match_the_local_model(remote: OpenAICompatibleLLM, local: TransformersLLM) -> None:
    got, want = remote.loglikelihood(PAIRS), local.loglikelihood(PAIRS)
    assert got.token_counts == want.token_counts
    assert list(got) == pytest.approx(list(want), abs=1e-3)
    for g, w in zip(got.token_logprobs, want.token_logprobs, strict=True):
        assert g == pytest.approx(w, abs=1e-3)
    assert got.usage == want.usage
    assert got.usage.prompt_tokens > 0


def test_a_token_straddling_the_boundary_counts_as_the_target(
    remote: OpenAICompatibleLLM, local: TransformersLLM
) -> None:
    # " Paris" is one token: prompt "... is P" + target "aris" share it, and it is all scored
    got = remote.loglikelihood([("The capital of France is P", "aris")])
    want = local.loglikelihood([("The capital of France is", " Paris")])
    assert got.token_counts == want.token_counts == [1]
    assert got[0] == pytest.approx(want[0], abs=1e-3)


def test_scores_fall_back_to_one_generated_token(local: TransformersLLM) -> None:
    with (
        OpenAIServer(local, "no_zero_max_tokens") as server,
        _client(server.url, timeout=30) as remote,
    ):
        first = remote.loglikelihood(PAIRS[:1])
        second = remote.loglikelihood(PAIRS[1:2])
        assert [b["max_tokens"] for b in server.bodies] == [0, 1, 1]  # the refusal is remembered
    want = local.loglikelihood(PAIRS[:2])
    assert [*first, *second] == pytest.approx(list(want), abs=1e-3)
    assert [*first.token_counts, *second.token_counts] == want.token_counts


def test_greedy_generation_matches_the_local_model(
    remote: OpenAICompatibleLLM, greedy: list[list[str]]
) -> None:
    got = remote.generate(PROMPTS, max_tokens=12)
    assert got.texts == greedy
    assert got.usage.prompt_tokens > 0 and got.usage.completion_tokens > 0


def test_n_samples_per_prompt(remote: OpenAICompatibleLLM) -> None:
    got = remote.generate(["Once upon a time", CHAT], n=3, max_tokens=6, temperature=0.9, seed=1)
    assert [len(texts) for texts in got] == [3, 3]
    assert all(isinstance(t, str) for texts in got for t in texts)


def test_stop_is_applied_when_the_server_ignores_it(
    remote: OpenAICompatibleLLM, server: OpenAIServer, greedy: list[list[str]]
) -> None:
    full = greedy[0][0]
    stop = full.strip().split()[1]  # a word in the middle of the greedy answer
    got = remote.generate(PROMPTS[:1], max_tokens=12, stop=[stop])[0][0]
    assert server.bodies[-1]["stop"] == [stop]
    assert got == full[: full.index(stop)]


@pytest.mark.parametrize("status", [500, 503, 429])
def test_transient_errors_are_retried_then_fail(local: TransformersLLM, status: int) -> None:
    with OpenAIServer(local, "fail", status=status) as server, _client(server.url, max_retries=2) as remote:
        with pytest.raises(LLMError, match=rf"{server.url} failed 3 attempt"):
            remote.generate(["hi"], max_tokens=2)
        assert server.requests == 3


def test_a_flaky_server_recovers(local: TransformersLLM) -> None:
    with OpenAIServer(local, "flaky", failures=2) as server, _client(server.url, max_retries=3) as remote:
        assert len(remote.generate(["hi"], max_tokens=2)[0]) == 1
        assert server.requests == 3


def test_a_stalling_server_times_out(local: TransformersLLM) -> None:
    timeout, retries = 0.5, 1
    with (
        OpenAIServer(local, "stall") as server,
        _client(server.url, timeout=timeout, max_retries=retries) as remote,
    ):
        start = time.monotonic()
        with pytest.raises(LLMError, match="2 attempt"):
            remote.generate(["hi"], max_tokens=2)
        elapsed = time.monotonic() - start
        assert server.requests == retries + 1
    assert timeout * (retries + 1) <= elapsed < timeout * (retries + 1) + 1.0


def test_the_call_deadline_bounds_all_attempts(local: TransformersLLM, mem: PersonaMem) -> None:
    """A stalled server holds a caller for ``deadline_s``, whatever the timeout and retries add up to."""
    from personamem.errors import PBRFallbackWarning
    from personamem.pipeline import Pipeline, PipelineConfig

    mem.add("ana", "I'm vegan and avoid dairy.")
    with (
        OpenAIServer(local, "stall") as server,
        OpenAICompatibleLLM(
            server.url, "m", timeout=10, deadline_s=1.5, max_retries=3, tokenizer=local.tokenizer
        ) as remote,
    ):
        start = time.monotonic()
        with pytest.raises(LLMError, match=r"1\.5 s deadline"):
            remote.loglikelihood([("The capital of France is", " Paris")])
        assert 1.5 <= time.monotonic() - start < 3.0
        pbr = Pipeline(
            mem.store, PipelineConfig(personalizer="pbr-no-anchor", first_stage="dense"), llm=remote
        )
        start = time.monotonic()
        with pytest.warns(PBRFallbackWarning, match="the LLM failed"):
            context = pbr.context("ana", "what should I eat tonight?")
        assert time.monotonic() - start < 4.0
    assert [h.record.text for h in context.hits] == ["I'm vegan and avoid dairy."]


def test_a_bad_request_fails_at_once(local: TransformersLLM) -> None:
    with OpenAIServer(local, "bad_request") as server, _client(server.url) as remote:
        with pytest.raises(LLMError, match="400"):
            remote.loglikelihood([("a", " b")])
        assert server.requests == 1


def test_a_server_without_prompt_logprobs_cannot_score(local: TransformersLLM) -> None:
    with OpenAIServer(local, "no_logprobs") as server, _client(server.url) as remote:
        with pytest.raises(LLMError, match="log-probabilities"):
            remote.loglikelihood([("a", " b")])
        assert server.requests == 1


def test_connection_errors_are_retried() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with (
        _client(f"http://127.0.0.1:{port}/v1", max_retries=1) as remote,
        pytest.raises(LLMError, match="2 attempt"),
    ):
        remote.generate(["hi"])


def test_chats_and_counting_need_a_tokenizer(server: OpenAIServer) -> None:
    before = server.requests
    with _client(server.url) as remote:
        with pytest.raises(LLMError, match="tokenizer"):
            remote.count_tokens("hi")
        with pytest.raises(LLMError, match="tokenizer"):
            remote.loglikelihood([(CHAT, "Yes")])
        with pytest.raises(ValueError, match="no tokens"):
            remote.loglikelihood([("a", "")])
        assert len(remote.loglikelihood([])) == 0 and len(remote.generate([])) == 0
    assert server.requests == before  # nothing was sent


def test_missing_openai_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(ImportError, match=r"personamem\[openai\]"):
        OpenAICompatibleLLM("http://127.0.0.1:1/v1", "m")


class TestRemoteContract(FrozenLLMContract):
    """The shared frozen-LLM contract, over HTTP."""

    @pytest.fixture
    def llm(self, remote: OpenAICompatibleLLM) -> OpenAICompatibleLLM:
        return remote


@pytest.mark.parametrize("mode", ["not_json", "wrong_shape", "html"])
def test_a_200_answer_that_is_not_the_apis_is_retried_then_an_llm_error(
    local: TransformersLLM, mode: str
) -> None:
    with OpenAIServer(local, mode) as server, _client(server.url, max_retries=1) as remote:  # type: ignore[arg-type]
        for call in (
            lambda: remote.generate(["hi"], max_tokens=2),
            lambda: remote.generate([CHAT], max_tokens=2),
            lambda: remote.loglikelihood([("The capital of France is", " Paris")]),
        ):
            before = server.requests
            with pytest.raises(LLMError, match=rf"{server.url} failed 2 attempt"):
                call()
            assert server.requests - before == 2


@pytest.mark.parametrize("mode", ["not_json", "wrong_shape", "html"])
def test_pbr_over_a_garbage_server_degrades_to_the_plain_query(
    local: TransformersLLM, mem: PersonaMem, mode: str
) -> None:
    from personamem.errors import PBRFallbackWarning
    from personamem.pipeline import Pipeline, PipelineConfig

    for text in (
        "I'm vegan and avoid dairy.",
        "I cycle to work every day.",
        "Spicy curries are my favourite.",
    ):
        mem.add("ana", text)
    with (
        OpenAIServer(local, mode) as server,  # type: ignore[arg-type]
        OpenAICompatibleLLM(server.url, "m", max_retries=0, tokenizer=local.tokenizer) as remote,
    ):
        pbr = Pipeline(
            mem.store, PipelineConfig(personalizer="pbr-no-anchor", first_stage="dense"), llm=remote
        )
        with pytest.warns(PBRFallbackWarning, match="the LLM failed"):
            context = pbr.context("ana", "what should I eat tonight?")
    dense = mem.search("ana", "what should I eat tonight?", k=5, method="dense")
    assert [h.record.id for h in context.hits] == [h.record.id for h in dense]
    assert context.warnings and "the LLM failed" in context.warnings[0]
