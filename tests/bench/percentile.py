"""The percentile the benchmarks print: the nearest rank, no interpolation.

p99_ms = percentile(samples_ms, 0.99)
"""

from __future__ import annotations

from collections.abc import Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """The sample at rank ``int(q * n)`` of the sorted ``samples`` (``q`` from 0 to 1; the
    largest sample at most), in the samples' own unit."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
