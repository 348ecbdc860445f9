"""Answer attribution's fit: which served records an answer used, learned from benchmarks' gold evidence."""

from personamem.trainers.attribution.config import (
    AttributionDataConfig,
    AttributionRunConfig,
    AttributionTrainConfig,
)

__all__ = ["AttributionDataConfig", "AttributionRunConfig", "AttributionTrainConfig"]
