"""The packaged models' conversion: a GGUF parsed once, its name maps built once, collections kept small."""

from __future__ import annotations

import gc
from pathlib import Path

import gguf
import numpy as np

from personamem.llm.packaged import _collections_skip_the_heap, _one_parse_per_gguf


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


def test_a_tensor_name_map_is_built_once_inside_the_block_and_anew_after() -> None:
    original = gguf.get_tensor_name_map
    with _one_parse_per_gguf():
        first = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 30)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 30) is first
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is not first
        assert first.get_name("blk.29.attn_q") == "blk.29.attn_q"
    assert gguf.get_tensor_name_map is original
    assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 30) is not first


def test_collections_inside_the_conversion_skip_what_existed_and_an_applications_freeze_is_kept() -> None:
    with _collections_skip_the_heap():
        assert gc.get_freeze_count() > 0  # what existed is out of the collections' walk
    assert gc.get_freeze_count() == 0  # thawed: collected as before
    gc.freeze()  # an application's own (a server freezing before it forks)
    try:
        frozen = gc.get_freeze_count()
        made_since = [[] for _ in range(1_000)]  # would be frozen too, were the block to freeze again
        with _collections_skip_the_heap():
            pass
        # Still frozen, nothing added; a frozen object another thread frees meanwhile leaves the count.
        assert 0 < gc.get_freeze_count() <= frozen, len(made_since)
    finally:
        gc.unfreeze()
