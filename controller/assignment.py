"""Which controller instance should own which bucket: a pure function.

    >>> assign_buckets(["b", "a"], 5)
    {'a': frozenset({0, 2, 4}), 'b': frozenset({1, 3})}

Members are sorted by id and take buckets round-robin, so every instance
computes the same answer from the same member list, and the shares differ by
at most one bucket.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller.exceptions import InvalidModelError


def assign_buckets(members: Iterable[str], bucket_count: int) -> dict[str, frozenset[int]]:
    """Member id -> the buckets it should own (every bucket to exactly one member)."""
    if bucket_count < 1:
        raise InvalidModelError(f"bucket_count must be >= 1, got {bucket_count}")
    ordered = sorted(set(members))
    if not ordered:
        return {}
    return {
        member: frozenset(range(i, bucket_count, len(ordered))) for i, member in enumerate(ordered)
    }


__all__ = ["assign_buckets"]
