from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from personamem import PersonaMem, SentenceEncoder, default_encoder
from personamem.llm import TransformersLLM

DATA = Path(os.environ.get("PERSONAMEM_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(scope="session")
def encoder() -> SentenceEncoder:
    """The real default encoder, loaded once per test session."""
    return default_encoder()


@pytest.fixture
def mem(tmp_path: Path, encoder: SentenceEncoder) -> Iterator[PersonaMem]:
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as memory:
        yield memory


@pytest.fixture(scope="session")
def llm() -> TransformersLLM:
    """The real default frozen LLM (SmolLM2-135M-Instruct), loaded once per test session."""
    return TransformersLLM.default()
