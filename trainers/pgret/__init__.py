"""PG-Ret training: logged pairs, the LLM judge, the policy-gradient trainer, the InfoNCE baseline.

The inference half (the query tower and its checkpoint format) lives in
:mod:`personamem.retrieval.query_tower`. The configs import without torch (the command line builds
its options from them).
"""

from personamem.trainers.pgret.config import PGRetDataConfig, PGRetTrainConfig, Variant

__all__ = ["PGRetDataConfig", "PGRetTrainConfig", "Variant"]
