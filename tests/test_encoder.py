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
