import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from personamem import Encoder, SentenceEncoder, TruncationWarning


def test_is_an_encoder(encoder: SentenceEncoder) -> None:
    assert isinstance(encoder, Encoder)
    assert encoder.dim == 384


def test_vectors_are_normalized_float32_and_batch_invariant(encoder: SentenceEncoder) -> None:
    texts = ["short", "a somewhat longer sentence about hiking in the Alps", "tea"]
    batch = encoder.encode(texts)
    assert batch.dtype == np.float32 and batch.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    one_by_one = np.stack([encoder.encode([t])[0] for t in texts])
    np.testing.assert_allclose(batch, one_by_one, atol=1e-5)


def test_empty_batch(encoder: SentenceEncoder) -> None:
    assert encoder.encode([]).shape == (0, 384)


def test_token_states_match_mean_pooled_vector(encoder: SentenceEncoder) -> None:
    texts = ["I'm vegetarian.", "My daughter plays the cello in an orchestra."]
    states = encoder.encode_tokens(texts)
    assert states.states.shape[:2] == states.mask.shape
    assert states.states.shape[2] == 384
    assert states.mask.sum(1).tolist() == encoder.count_tokens(texts)
    mask = states.mask.unsqueeze(-1).float()
    pooled = (states.states * mask).sum(1) / mask.sum(1)
    pooled = pooled / pooled.norm(dim=1, keepdim=True)
    np.testing.assert_allclose(pooled.numpy(), encoder.encode(texts), atol=1e-5)


def test_long_text_is_truncated_with_a_warning(encoder: SentenceEncoder) -> None:
    long_text = "word " * 1000
    with pytest.warns(TruncationWarning, match="256-token window"):
        vector = encoder.encode([long_text])
    assert vector.shape == (1, 384)


def test_missing_model_directory(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="encoder model directory"):
        SentenceEncoder(tmp_path / "nope")


_VARIED = [
    "I bought a used road bike for 300 euros.",
    "  padded with spaces \n",
    "Ünïcödé façade, naïve café in 東京",
    "I'M SHOUTING!!! 🎉",
    "",
    "word " * 300,  # over the 256-token window
]


def test_the_onnx_runtime_matches_sentence_transformers(encoder: SentenceEncoder) -> None:
    """onnxruntime gives the vectors and token counts torch gives (stored vectors stay valid)."""
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(encoder.path), device="cpu", local_files_only=True)
    with pytest.warns(TruncationWarning):
        ours = encoder.encode(_VARIED)
    expected = reference.encode(_VARIED, normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(ours, expected, atol=1e-6)
    counted = reference.tokenizer(_VARIED, add_special_tokens=True, truncation=False)["input_ids"]
    assert encoder.count_tokens(_VARIED) == [len(ids) for ids in counted]
    assert encoder.max_tokens == reference.max_seq_length == 256
    features = reference.preprocess(_VARIED)  # PURPLE's token states, from the same exported graph
    expected_states = reference.forward(features)["token_embeddings"].detach()
    states = encoder.encode_tokens(_VARIED)
    assert states.mask.tolist() == features["attention_mask"].bool().tolist()
    np.testing.assert_allclose(
        states.states[states.mask].numpy(), expected_states[states.mask].numpy(), atol=1e-4
    )


def test_large_batches_agree_with_small_ones(encoder: SentenceEncoder) -> None:
    """A batch runs in chunks of similar length, side by side; no vector moves, none swaps place."""
    texts = [
        f"Record {i}: I went hiking with my {i} friends {'far ' * (i % 7)}in the Alps." for i in range(100)
    ]
    batch = encoder.encode(texts)
    one_by_one = np.concatenate([encoder.encode(texts[i : i + 4]) for i in range(0, 100, 4)])
    np.testing.assert_allclose(batch, one_by_one, atol=1e-6)


def test_a_query_needs_no_torch(encoder: SentenceEncoder) -> None:
    """Once exported (the fixture made sure), encoding loads neither torch nor sentence-transformers;
    token states (PURPLE's) need torch's tensors but not sentence-transformers (~4 s of CPU to import)."""
    loaded = (
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))"
    )
    code = (
        f"import sys; from personamem import default_encoder; default_encoder().encode(['a query', 'b']); "
        f"{loaded}; default_encoder().encode_tokens(['a query', 'b']); {loaded}"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["[]", "['torch']"]


def test_other_layouts_run_on_sentence_transformers(encoder: SentenceEncoder, tmp_path: Path) -> None:
    """A folder that is not a plain BERT layout (sentence-transformers 6 saves its own) runs on torch."""
    from sentence_transformers import SentenceTransformer

    SentenceTransformer(str(encoder.path), device="cpu").save(str(tmp_path / "saved"))  # as towers are
    saved = SentenceEncoder(tmp_path / "saved")
    texts = ["I bought a used road bike.", "tea"]
    np.testing.assert_allclose(saved.encode(texts), encoder.encode(texts), atol=1e-6)


def test_the_export_is_made_once_and_shared(encoder: SentenceEncoder, tmp_path: Path) -> None:
    """A second encoder over the same model loads the cached export instead of exporting again."""
    from personamem.onnx_encoder import export_onnx

    first = export_onnx(encoder.path, tmp_path)
    made = first.stat().st_mtime_ns
    assert export_onnx(encoder.path, tmp_path) == first and first.stat().st_mtime_ns == made
    assert [p.name for p in first.parent.iterdir() if not p.name.endswith(".lock")] == ["model.onnx"]


def test_an_unwritable_cache_falls_back_to_torch_with_a_warning(
    encoder: SentenceEncoder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no export can be written, the encoder still works, on torch, and says why."""
    from personamem.errors import PersonaMemWarning

    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("PERSONAMEM_CACHE", str(blocked))
    with pytest.warns(PersonaMemWarning, match="encoding with torch, not onnxruntime"):
        fallback = SentenceEncoder(encoder.path)
    texts = ["I bought a used road bike.", "tea"]
    np.testing.assert_allclose(fallback.encode(texts), encoder.encode(texts), atol=1e-5)
