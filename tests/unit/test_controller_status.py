"""``tidemark controller status``'s laggards: each stream's last snapshot, described."""

from __future__ import annotations

from controller.laggards import LAGGING, SLOWEST, Laggard
from schemas.tables import laggard_rows
from tidemark.cli.controller import describe_laggard, stream_laggards


def test_each_streams_last_snapshot_and_cleared_streams_left_out():
    a1 = Laggard("s/a", "w1", LAGGING, 100, 200, 900, 1_000, 1_500)
    a2 = Laggard("s/a", "w2", SLOWEST, 150, 200, 30_000, None, 2_000)
    b = Laggard("s/b", "w9", LAGGING, 5, 10, 50, 700, 800)
    rows = [
        *laggard_rows("s/a", 1_500, [a1]),
        *laggard_rows("s/b", 800, [b]),
        *laggard_rows("s/a", 2_000, [a2, a1]),
        *laggard_rows("s/b", 900, []),  # s/b caught up
    ]
    found = stream_laggards(rows)
    assert list(found) == ["s/a"]
    assert [(r["writer"], r["kind"]) for r in found["s/a"]] == [
        ("w2", "slowest"),
        ("w1", "lagging"),
    ]


def test_a_laggard_is_described_with_since_distance_and_age():
    (row,) = laggard_rows("s/a", 10_000, [Laggard("s/a", "w1", LAGGING, 1, 2, 4_000, 0, 10_000)])
    assert describe_laggard(row, now_ms=12_000) == (
        "w1 lagging since 1970-01-01T00:00:00Z (for 12.0 s), 4.0 s behind (as of 2.0 s ago)"
    )
    (slow,) = laggard_rows("s/a", 10_000, [Laggard("s/a", "w2", SLOWEST, 1, 2, 500, None, 1)])
    assert describe_laggard(slow, now_ms=10_000) == "w2 slowest, 0.5 s behind (as of 0.0 s ago)"
