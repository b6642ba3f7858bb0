"""``tidemark controller status``'s laggards: each stream's last snapshot, described
(who: id, instance, noted time, first and last seen)."""

from __future__ import annotations

from tidemark.cli.controller import describe_laggard
from tidemark.controller.laggards import LAGGING, SLOWEST, Laggard
from tidemark.schemas.tables import (
    LAGGARDS_COLUMNS,
    laggard_rows,
    laggards_by_stream,
    latest_laggards,
)


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
    found = laggards_by_stream(rows)
    assert list(found) == ["s/a"]
    assert [(r["writer"], r["kind"]) for r in found["s/a"]] == [
        ("w2", "slowest"),
        ("w1", "lagging"),
    ]


def test_a_laggard_is_described_with_since_distance_and_age():
    (row,) = laggard_rows("s/a", 10_000, [Laggard("s/a", "w1", LAGGING, 1, 2, 4_000, 0, 10_000)])
    assert describe_laggard(row, now_ms=12_000) == (
        "w1 lagging since 1970-01-01T00:00:00Z (for 12.0 s), 4.0 s behind, noted 1 "
        "(as of 2.0 s ago)"
    )
    (slow,) = laggard_rows("s/a", 10_000, [Laggard("s/a", "w2", SLOWEST, 1, 2, 500, None, 1)])
    assert describe_laggard(slow, now_ms=10_000) == (
        "w2 slowest, 0.5 s behind, noted 1 (as of 0.0 s ago)"
    )


def test_a_laggard_is_named_with_its_instance_and_when_it_was_first_and_last_seen():
    who = Laggard("s/a", "w1", LAGGING, 7, 9, 4_000, 60_000, 70_000, "inst-2", 50_000, 69_500)
    (row,) = laggard_rows("s/a", 70_000, [who])
    assert (row["writer"], row["instance"], row["noted_time"]) == ("w1", "inst-2", 7)
    assert (row["first_seen"], row["last_seen"]) == (50_000, 69_500)
    assert describe_laggard(row, now_ms=71_000) == (
        "w1 (instance inst-2) lagging since 1970-01-01T00:01:00Z (for 11.0 s), 4.0 s behind, "
        "noted 7, first seen 1970-01-01T00:00:50Z, last seen 1.5 s ago (as of 1.0 s ago)"
    )


def test_rows_of_a_table_written_before_the_writer_columns_read_as_unknown():
    old = {c: None for c in LAGGARDS_COLUMNS if c not in ("instance", "first_seen", "last_seen")}
    old.update(stream="s/a", at=5, writer="w1", kind=LAGGING, noted_time=3, behind_ms=2)
    (row,) = latest_laggards([old])
    assert row["instance"] is None and row["first_seen"] is None and row["last_seen"] is None
    assert (
        describe_laggard(row, now_ms=1_005) == "w1 lagging, 0.0 s behind, noted 3 (as of 1.0 s ago)"
    )
