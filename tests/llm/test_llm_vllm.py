"""The vLLM backend agrees with the transformers backend (needs vLLM and a GPU; skipped elsewhere)."""

from __future__ import annotations

import pytest

from personamem.llm import TransformersLLM

vllm = pytest.importorskip("vllm", reason='vLLM not installed (CUDA only): pip install "personamem[vllm]"')
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM needs a CUDA GPU")


def test_vllm_scores_match_transformers(llm: TransformersLLM) -> None:
    from personamem.llm.packaged import default_cache_dir, local_model_path
    from personamem.llm.vllm_backend import VLLMBackend

    engine = VLLMBackend(
        str(local_model_path("smollm2-135m", default_cache_dir())),
        dtype="float32",
        gpu_memory_utilization=0.3,
    )
    requests = [("The capital of France is", " Paris"), ([{"role": "user", "content": "Hi"}], "Hello!")]
    assert list(engine.loglikelihood(requests)) == pytest.approx(list(llm.loglikelihood(requests)), abs=1e-2)
    generated = engine.generate(["The capital of France is"], n=2, max_tokens=8, temperature=0.8, seed=1)
    assert len(generated[0]) == 2 and generated.usage.completion_tokens > 0
