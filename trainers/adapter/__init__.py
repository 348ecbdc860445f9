"""The query adapter's training: benchmark or store questions, the InfoNCE fit, ``personamem improve``.

The inference half (the adapter and its folder format) lives in
:mod:`personamem.retrieval.query_adapter`. The configs import without torch (the command line builds
its options from them).
"""

from personamem.trainers.adapter.config import AdapterDataConfig, AdapterTrainConfig, ImproveConfig

__all__ = ["AdapterDataConfig", "AdapterTrainConfig", "ImproveConfig"]
