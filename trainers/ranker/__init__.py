"""The learned ranker's training: runtime features of benchmarks' questions, a LightGBM lambdarank fit.

The inference half (the features, the model folder, the ranker the default pipeline runs) lives in
:mod:`personamem.retrieval.ranker`; training computes its features through that same code, over a
real store, so what is learned is what is served. The configs import without LightGBM (the command
line builds its options from them).
"""

from personamem.trainers.ranker.config import RankerDataConfig, RankerRunConfig, RankerTrainConfig

__all__ = ["RankerDataConfig", "RankerRunConfig", "RankerTrainConfig"]
