"""PURPLE: learned profile selection (which K records the LLM sees, in which order).

A record scorer (:mod:`.model`) gives each candidate a propensity; a Plackett–Luce policy
(:mod:`.policy`) over K-permutations samples profiles during training (REINFORCE against the frozen
LLM's log-likelihood of the true answer, in :mod:`personamem.trainers.purple`) and takes the top K by
propensity at inference (:mod:`.selector`). Only the config is imported here: the other modules
load torch, which the command line and configs should not pay for.
"""

from personamem.profile.purple.config import PurpleConfig

__all__ = ["PurpleConfig"]
