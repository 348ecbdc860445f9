"""The packaged models' conversion: a GGUF is parsed once per conversion, not once per reader."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from personamem.llm.packaged import _one_parse_per_gguf


def _tiny_gguf(path: Path) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.arange(12, dtype=np.float32).reshape(3, 4))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_gguf_is_parsed_once_inside_the_block_and_anew_after(tmp_path: Path) -> None:
    path = _tiny_gguf(tmp_path / "tiny.gguf")
    original = gguf.GGUFReader
    with _one_parse_per_gguf():
        first = gguf.GGUFReader(path)  # transformers passes a str; the config read, a path
        assert gguf.GGUFReader(str(path)) is first
        assert [t.name for t in first.tensors] == ["token_embd.weight"]
        assert np.array_equal(first.tensors[0].data.reshape(3, 4), np.arange(12).reshape(3, 4))
    assert gguf.GGUFReader is original
    assert gguf.GGUFReader(path) is not first
