"""Write a ranker folder: the kept trees as ONNX for the runtime, LightGBM's text, and ``ranker.json``.

The runtime scores candidates with onnxruntime (:mod:`personamem.retrieval.ranker` says why), so the
trees are exported with onnxmltools here, at training time. ONNX's tree ensemble holds float32
thresholds where LightGBM's are float64: a candidate whose feature sits within float32 rounding of a
threshold can take the other branch (about 1 % of LoCoMo's candidate rows move, by at most 0.07 of a
score whose start is ``alpha · fused``). The ONNX graph is the model that ships, and every reported
number is measured through it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from personamem.retrieval.ranker import FEATURES, INFO_FILE, MODEL_FILE, MODEL_INPUT, TREES_FILE

if TYPE_CHECKING:
    import lightgbm

__all__ = ["save_ranker"]

ONNX_OPSET = 15
"""The newest opset onnxmltools' LightGBM converter writes."""


def save_ranker(
    folder: Path, booster: lightgbm.Booster | None, *, alpha: float, iterations: int, info: dict[str, Any]
) -> None:
    """Write ``folder``: ``booster``'s first ``iterations`` trees (none: the default's order) and a record."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in (MODEL_FILE, TREES_FILE):
        (folder / stale).unlink(missing_ok=True)
    sha256 = None
    features = list(FEATURES) if booster is None else booster.feature_name()  # the columns it was fitted on
    if booster is not None and iterations:
        import lightgbm
        from onnxmltools import convert_lightgbm
        from onnxmltools.convert.common.data_types import FloatTensorType

        trees = booster.model_to_string(num_iteration=iterations)
        (folder / TREES_FILE).write_text(trees, encoding="utf-8")
        kept = lightgbm.Booster(model_str=trees)  # the converter exports every tree it is given
        model = convert_lightgbm(
            kept,
            initial_types=[(MODEL_INPUT, FloatTensorType([None, len(features)]))],
            target_opset=ONNX_OPSET,
            zipmap=False,
        )
        model.graph.name = "personamem-ranker"  # the converter names it by a random uuid: a rerun must match
        graph = model.SerializeToString()
        (folder / MODEL_FILE).write_bytes(graph)
        sha256 = hashlib.sha256(graph).hexdigest()
    record = {**info, "features": features, "alpha": alpha, "iterations": iterations, "sha256": sha256}
    (folder / INFO_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
