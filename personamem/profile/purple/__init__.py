"""PURPLE: learned profile selection (which K records the LLM sees, in which order).

A record scorer gives each candidate a propensity; a Plackett–Luce policy over K-permutations samples
profiles during training (REINFORCE against the frozen LLM's log-likelihood of the true answer, in
``personamem.trainers.purple``) and takes the top K by propensity at inference.
"""

from personamem.profile.purple.model import PurpleConfig, RecordScorer
from personamem.profile.purple.policy import plackett_luce_log_prob, plackett_luce_sample

__all__ = ["PurpleConfig", "RecordScorer", "plackett_luce_log_prob", "plackett_luce_sample"]
