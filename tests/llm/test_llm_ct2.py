"""The CTranslate2 runtime with the real default model, against the transformers reference."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError
from scipy.stats import spearmanr

from personamem.cli import main
from personamem.console import out
from personamem.errors import ConfigError
from personamem.llm import FrozenLLM, LLMError, TransformersLLM
from personamem.llm.ct2 import CTranslate2LLM, default_threads
from personamem.llm.load import load_llm
from personamem.llm.packaged import ct2_model_path, packaged_model, read_ct2_manifest
from personamem.pipeline import PipelineConfig
from personamem.testing import FrozenLLMContract

VEGETARIAN = [{"role": "user", "content": "I'm vegetarian. What should I cook tonight? Answer in one line."}]
BARBECUE = [{"role": "user", "content": "I love barbecue and smoking meat. What should I cook tonight?"}]
REQUESTS = [
    ("The capital of France is", " Paris"),
    ("The capital of France is", " Berlin, which is in Germany"),
    ("Q: What is 2 + 2?\nA:", " 4"),
    (VEGETARIAN, "A lentil and spinach curry."),
    (VEGETARIAN, "A juicy beef steak."),
    (BARBECUE, "A lentil and spinach curry."),
    (BARBECUE, "A juicy beef steak."),
    ("Once upon a time there was a very long prompt " * 6, " and it ended."),
    ("My sister lives in Lisbon and I visit her every summer.\nWhere do I go in July?", " To Lisbon."),
    ("My sister lives in Lisbon and I visit her every summer.\nWhere do I go in July?", " To the moon."),
]

# int8 weights and activations move these targets' log-likelihoods by 0.33 nats per token on average
# (at most 0.89, on a 4-token target): the stated tolerance of the fast runtime against the reference
MEAN_PER_TOKEN_NATS = 0.5
MAX_PER_TOKEN_NATS = 1.5


class TestCTranslate2LLM(FrozenLLMContract):
    @pytest.fixture
    def llm(self, ct2_llm: CTranslate2LLM) -> CTranslate2LLM:
        return ct2_llm


def test_scores_agree_with_the_transformers_reference(ct2_llm: CTranslate2LLM, llm: TransformersLLM) -> None:
    fast, reference = ct2_llm.loglikelihood(REQUESTS), llm.loglikelihood(REQUESTS)
    assert fast.token_counts == reference.token_counts  # the same tokens are scored
    per_token = [abs(a - b) / n for a, b, n in zip(fast, reference, fast.token_counts, strict=True)]
    assert sum(per_token) / len(per_token) <= MEAN_PER_TOKEN_NATS
    assert max(per_token) <= MAX_PER_TOKEN_NATS
    assert spearmanr(list(fast), list(reference))[0] >= 0.9
    # a separation of several nats survives; the vegetarian's curry over steak (1.7 nats in the
    # reference) does not under int8, which is why scores that are measurements use transformers
    for good, bad in ((0, 1), (6, 5), (8, 9)):
        assert reference[good] - reference[bad] > 3 and fast[good] > fast[bad]
    assert fast.usage == reference.usage


def test_its_name_says_runtime_and_quantization(ct2_llm: CTranslate2LLM, llm: TransformersLLM) -> None:
    assert isinstance(ct2_llm, FrozenLLM)
    assert ct2_llm.name == "SmolLM2-135M-Instruct-ct2-int8" != llm.name  # caches never mix the two
    assert ct2_llm.context_window == llm.context_window
    assert ct2_llm.render(VEGETARIAN) == llm.render(VEGETARIAN)  # the model's own chat template


def test_seeded_sampling_repeats_and_differs_across_seeds(ct2_llm: CTranslate2LLM) -> None:
    prompts = ["Once upon a time", VEGETARIAN]
    first = ct2_llm.generate(prompts, n=3, max_tokens=12, temperature=1.0, seed=7)
    assert first.texts == ct2_llm.generate(prompts, n=3, max_tokens=12, temperature=1.0, seed=7).texts
    assert first.texts != ct2_llm.generate(prompts, n=3, max_tokens=12, temperature=1.0, seed=8).texts


def test_completion_tokens_count_the_end_token(ct2_llm: CTranslate2LLM) -> None:
    capped = ct2_llm.generate(["Once upon a time"], max_tokens=5)
    assert capped.usage.completion_tokens == 5
    short = ct2_llm.generate([[{"role": "user", "content": "Say only: yes"}]], max_tokens=40)
    assert 1 < short.usage.completion_tokens < 40  # stopped by the end token, which counts


def test_labels_after_one_prompt_take_one_forward_pass_and_score_as_alone(
    ct2_llm: CTranslate2LLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A yes/no or a choice's labels: the prompt runs once, and each label scores as it does alone."""
    labels = ["Yes", "No", "Maybe"]
    requests = [(VEGETARIAN, label) for label in labels] + [(BARBECUE, "Yes"), REQUESTS[0]]
    alone = [ct2_llm.loglikelihood([request])[0] for request in requests]  # one request: a score row
    engine, calls = ct2_llm.generator, []

    class Counted:  # the real engine, its calls noted
        def __getattr__(self, name: str) -> object:
            calls.append(name)
            return getattr(engine, name)

    monkeypatch.setattr(ct2_llm, "generator", Counted())
    together = ct2_llm.loglikelihood(requests)
    assert list(together) == pytest.approx(alone, abs=1e-4)
    assert together.token_counts == [1, 1, 1, 1, len(ct2_llm.tokenizer.encode(" Paris"))]
    assert calls == ["forward_batch", "score_batch"]  # VEGETARIAN's three labels; the two others


def test_a_changed_conversion_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(ct2_model_path("smollm2-135m"), copy)
    read_ct2_manifest(copy, verify=True)  # hashed once: a stamp records the file it hashed
    assert (copy / "model.bin.verified").is_file()
    with (copy / "model.bin").open("r+b") as weights:  # the same size, changed after the stamp
        weights.seek(4096)
        byte = weights.read(1)
        weights.seek(4096)
        weights.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(LLMError, match="sha256"):
        CTranslate2LLM.from_converted(copy)
    (copy / "personamem-ct2.json").unlink()
    with pytest.raises(LLMError, match="not a converted CTranslate2 model"):
        CTranslate2LLM.from_converted(copy)


def test_workers_starting_together_convert_a_model_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Web workers (or test workers) opening one model on a fresh machine: one converts, the rest wait."""
    import threading

    import transformers

    from personamem.llm import packaged

    tokenizer = transformers.AutoTokenizer.from_pretrained(ct2_model_path("smollm2-135m") / "tokenizer")
    tiny = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    source = tmp_path / "tiny"
    transformers.LlamaForCausalLM(tiny).save_pretrained(source)
    tokenizer.save_pretrained(source)
    conversions, convert = [], packaged.convert_to_ct2

    def counted(*args: object, **kwargs: object) -> None:
        conversions.append(args)
        convert(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(packaged, "convert_to_ct2", counted)
    barrier, paths = threading.Barrier(4), []

    def open_model() -> None:
        barrier.wait()
        paths.append(ct2_model_path(str(source), tmp_path / "cache"))

    threads = [threading.Thread(target=open_model) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(conversions) == 1 and len(set(paths)) == 1 and len(paths) == 4
    scores = CTranslate2LLM.from_converted(paths[0]).loglikelihood([("The capital of France is", " Paris")])
    assert len(scores) == 1  # the one copy loads and scores


def test_names_and_folders_are_checked(tmp_path: Path) -> None:
    assert packaged_model("smollm2") is packaged_model("smollm2-135m")
    with pytest.raises(LLMError, match="neither a packaged model"):
        ct2_model_path(str(tmp_path))
    for runtime in ("transformers", "ctranslate2"):
        with pytest.raises(LLMError, match="'gpt-17' is neither a packaged model"):
            load_llm("gpt-17", runtime=runtime)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown LLM runtime"):
        load_llm("smollm2", runtime="onnx")  # type: ignore[arg-type]


def test_thread_count_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERSONAMEM_LLM_THREADS", "3")
    assert default_threads() == 3
    for bad in ("0", "two"):
        monkeypatch.setenv("PERSONAMEM_LLM_THREADS", bad)
        with pytest.raises(ConfigError, match="PERSONAMEM_LLM_THREADS"):
            default_threads()
    monkeypatch.delenv("PERSONAMEM_LLM_THREADS")
    assert default_threads() >= 1


def test_models_command(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(out, "_width", 250)  # fixed when the console was made (xdist workers set COLUMNS)
    assert main(["models", "list"]) == 0
    listing = capsys.readouterr().out
    assert "smollm2-135m (default)" in listing and "Apache-2.0" in listing
    assert "qwen2.5-coder-1.5b" in listing and "none in the wheels" in listing
    assert main(["models", "install", "gpt-17"]) == 2
    assert "unknown model 'gpt-17'" in capsys.readouterr().err
    assert main(["models", "install", "smollm2-135m"]) == 0  # installed and converted: checks only
    assert "smollm2-135m: ready for ctranslate2" in capsys.readouterr().out


@pytest.mark.slow
def test_the_pipeline_runs_its_llm_stages_on_the_configured_runtime(
    tmp_path: Path, encoder: object, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValidationError, match="llm_runtime"):
        PipelineConfig(llm="smollm2-135m", llm_runtime="onnx")  # type: ignore[arg-type]
    assert PipelineConfig().llm_runtime == "ctranslate2"
    store = ["--store", str(tmp_path / "store")]
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"text": "I am vegetarian."}\n{"text": "I play the cello."}\n', encoding="utf-8")
    assert main([*store, "ingest", str(notes), "--user", "ana"]) == 0
    capsys.readouterr()
    for runtime in ("ctranslate2", "transformers"):
        argv = [*store, "search", "--user", "ana", "dinner ideas", "--method", "q2t", "--json"]
        assert main([*argv, "--llm", "smollm2-135m", "--llm-runtime", runtime]) == 0
        assert len(capsys.readouterr().out.splitlines()) == 2
