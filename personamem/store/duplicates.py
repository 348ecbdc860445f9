"""Near-duplicates at write: what ``add`` does with a statement the user's memory nearly holds.

Exact repeats are free already (a record's id is its content's hash, and re-adding it is a no-op);
a near-duplicate ("I'm vegetarian." after "I am vegetarian.") has another id. ``add`` compares the
new vector with the user's current records, which costs one exact nearest-neighbour lookup.
"""

from __future__ import annotations

from enum import StrEnum

from personamem.errors import InvalidInputError

__all__ = ["DUPLICATE_THRESHOLD", "DuplicatePolicy", "check_duplicates"]

# cosine at or above which two records say the same thing (all-MiniLM-L6-v2); see docs/RESULTS.md
DUPLICATE_THRESHOLD = 0.95


class DuplicatePolicy(StrEnum):
    """What ``add`` does when the user already has a near-duplicate of the record."""

    KEEP = "keep"  # store it anyway, and report the duplicate
    SKIP = "skip"  # store nothing; return the existing record
    MERGE_METADATA = "merge-metadata"  # add the new record's metadata to the existing one


def check_duplicates(policy: object, threshold: object) -> tuple[DuplicatePolicy, float]:
    """A valid (policy, threshold) pair.

    Raises:
        InvalidInputError: an unknown policy, or a threshold outside (0, 1] other than one above 1
            (which turns the check off).
    """
    try:
        chosen = DuplicatePolicy(str(policy))  # a member's str is its value
    except ValueError:
        names = ", ".join(p.value for p in DuplicatePolicy)
        raise InvalidInputError(f"duplicates must be one of {names}, got {policy!r}") from None
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not threshold > 0:
        raise InvalidInputError(
            f"duplicate threshold must be a cosine in (0, 1] (above 1: off), got {threshold!r}"
        )
    return chosen, float(threshold)
