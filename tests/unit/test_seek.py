"""Timestamp seek: input checks, offset ranges, and the Delta-backed index (no broker)."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemark.controller.delta.tables import (
    INDEX_COLUMNS,
    MARKS_COLUMNS,
    MarksTail,
    append_watermarks,
    one_moment,
)
from tidemark.controller.index import index_rows, start_cut, stop_cut
from tidemark.controller.model import KeyRange, Segment, Watermark, segment_id
from tidemark.pipelines.reading.exceptions import InvalidDurationError, InvalidTimestampError
from tidemark.pipelines.reading.seek import (
    SeekIndex,
    check_timestamp,
    parse_duration,
    ranges_between,
)
from tidemark.schemas.arrow import INDEX_ARROW as INDEX_SCHEMA
from tidemark.schemas.arrow import MARKS_ARROW as MARKS_SCHEMA

STREAM = "s/t"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0), (1_700_000_000_000, 1_700_000_000_000), ("42", 42), (" 7 ", 7), (3.0, 3)],
)
def test_check_timestamp_accepts(value, expected):
    assert check_timestamp(value) == expected


@pytest.mark.parametrize("value", [-1, "-5", "1.5", 1.5, "abc", "", None, True, [1], 2**63])
def test_check_timestamp_refuses(value):
    with pytest.raises(InvalidTimestampError):
        check_timestamp(value)


@pytest.mark.parametrize(
    ("text", "ms"),
    [("1h", 3_600_000), ("90s", 90_000), ("1h30m", 5_400_000), ("250ms", 250), ("2d", 172_800_000)],
)
def test_parse_duration(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "1", "h", "1x", "-1h", "1h 2", "1.5h", None])
def test_parse_duration_refuses(text):
    with pytest.raises(InvalidDurationError):
        parse_duration(text)


@pytest.mark.parametrize("table", ["marks", "index", "rejected_marks"])
def test_spark_schema_of_the_job_matches_the_shared_arrow_schema(table):
    """The job writes by Spark schemas, readers read by tidemark.schemas.tables: same columns and
    types."""
    from pyspark.sql.types import ArrayType, LongType

    from tidemark.jobs.tables import spark_schema
    from tidemark.schemas.arrow import ARROW_SCHEMAS

    def spark_type(t):
        if isinstance(t, ArrayType):
            return f"list<{spark_type(t.elementType)}>"
        if hasattr(t, "fields"):
            return (
                "struct<" + ",".join(f"{f.name}:{spark_type(f.dataType)}" for f in t.fields) + ">"
            )
        return {"LongType": "int64", "StringType": "string", "BinaryType": "binary",
                "IntegerType": "int32"}[type(t).__name__]  # fmt: skip

    def arrow_type(t):
        import pyarrow as pa

        if pa.types.is_list(t):
            return f"list<{arrow_type(t.value_type)}>"
        if pa.types.is_struct(t):
            return "struct<" + ",".join(f"{f.name}:{arrow_type(f.type)}" for f in t) + ">"
        return str(t)

    spark = spark_schema(table)
    arrow = ARROW_SCHEMAS[table]
    assert [(f.name, spark_type(f.dataType)) for f in spark.fields] == [
        (f.name, arrow_type(f.type)) for f in arrow
    ]
    assert isinstance(spark.fields[1].dataType, LongType) or table == "rejected_marks"
    assert tuple(ARROW_SCHEMAS["marks"].names) == MARKS_COLUMNS
    assert tuple(ARROW_SCHEMAS["index"].names) == INDEX_COLUMNS
    assert (ARROW_SCHEMAS["marks"], ARROW_SCHEMAS["index"]) == (MARKS_SCHEMA, INDEX_SCHEMA)


# --- offset ranges between two cuts -------------------------------------------------------

S0 = Segment(segment_id(0, 0), KeyRange(0.0, 1.0))
S1 = Segment(segment_id(1, 1), KeyRange(0.0, 0.5))
S2 = Segment(segment_id(1, 2), KeyRange(0.5, 1.0))
SEGS = {s.id: s for s in (S0, S1, S2)}


def test_ranges_within_one_epoch():
    out = ranges_between(SEGS, {}, {S0.id: 3}, {S0.id: 9})
    assert [(r.segment.id, r.start, r.end) for r in out] == [(S0.id, 3, 9)]


def test_ranges_across_a_scale():
    out = ranges_between(SEGS, {S0.id: 20}, {S0.id: 3}, {S1.id: 4, S2.id: 0})
    assert [(r.segment.id, r.start, r.end) for r in out] == [(S0.id, 3, 20), (S1.id, None, 4)]


def test_ranges_skip_segments_wholly_before_the_start():
    out = ranges_between(SEGS, {S0.id: 20}, {S1.id: 2, S2.id: 1}, {S1.id: 5, S2.id: 1})
    assert [(r.segment.id, r.start, r.end) for r in out] == [(S1.id, 2, 5)]


def test_ranges_head_start():
    out = ranges_between(SEGS, {}, {}, {S0.id: 4})
    assert [(r.segment.id, r.start, r.end) for r in out] == [(S0.id, None, 4)]


# --- the Delta-backed index ---------------------------------------------------------------


def _marks(times: list[tuple[int, int]], start_seq: int = 0) -> list[Watermark]:
    return [
        Watermark(STREAM, t, t + up, {0: 10 * (start_seq + i)}, start_seq + i)
        for i, (t, up) in enumerate(times)
    ]


def _ascending(draw_pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, t = [], 0
    for step, ahead in draw_pairs:
        t += step
        out.append((t, ahead))
    return out


def test_lookups_match_the_pure_search(tmp_path):
    marks = _marks([(100, 80), (200, 0), (300, 50), (400, 10)])
    append_watermarks(str(tmp_path), marks[:2])
    append_watermarks(str(tmp_path), marks[2:], previous_upper_time_max=180)
    index = SeekIndex(str(tmp_path), refresh_interval_ms=0)
    rows = index_rows(marks)
    for t in range(0, 520, 10):
        found = index.start(STREAM, t)
        assert (None if found is None else found.stream_cut) == start_cut(rows, t), t
        stop = index.stop(STREAM, t)
        assert (None if stop is None else stop.stream_cut) == stop_cut(rows, t), t
        cold = index.cold_start_seq(STREAM, t)
        assert cold == (None if found is None else found.seq), t
        cold_stop = index.cold_stop_seq(STREAM, t)
        assert cold_stop == (None if stop is None else stop.seq), t


def test_index_refreshes_incrementally(tmp_path):
    root = str(tmp_path)
    index = SeekIndex(root, refresh_interval_ms=0)
    assert index.start(STREAM, 1000) is None  # no table yet: the head
    assert index.stop(STREAM, 1) is None
    append_watermarks(root, _marks([(100, 0)]))
    assert index.refresh(STREAM) == 1
    append_watermarks(root, _marks([(200, 0), (300, 0)], start_seq=1), previous_upper_time_max=100)
    other = [Watermark("s/other", 5000, 5000, {0: 1}, 0)]
    append_watermarks(root, other)
    assert index.refresh(STREAM) == 3
    assert index.stop(STREAM, 250).seq == 2
    assert index.start(STREAM, 250).seq == 1
    assert index.start("s/other", 6000).stream_cut == {0: 1}


def test_refresh_interval_bounds_staleness(tmp_path):
    root = str(tmp_path)
    now = [0.0]
    index = SeekIndex(root, refresh_interval_ms=1000, monotonic=lambda: now[0])
    append_watermarks(root, _marks([(100, 0)]))
    assert index.refresh(STREAM) == 1
    append_watermarks(root, _marks([(200, 0)], start_seq=1), previous_upper_time_max=100)
    assert index.refresh(STREAM) == 1  # not due yet
    now[0] = 1.5
    assert index.refresh(STREAM) == 2


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pairs=st.lists(st.tuples(st.integers(1, 50), st.integers(0, 120)), min_size=1, max_size=12),
    split=st.integers(0, 12),
    probes=st.lists(st.integers(0, 800), min_size=1, max_size=10),
)
def test_warm_and_cold_agree_with_controller_index(tmp_path_factory, pairs, split, probes):
    root = str(tmp_path_factory.mktemp("delta"))
    marks = _marks(_ascending(pairs))
    rows = index_rows(marks)
    cut = min(split, len(marks))
    append_watermarks(root, marks[:cut])
    append_watermarks(
        root, marks[cut:], previous_upper_time_max=rows[cut - 1].upper_time_max if cut else None
    )
    index = SeekIndex(root, refresh_interval_ms=0)
    for t in probes:
        found = index.start(STREAM, t)
        assert (None if found is None else found.stream_cut) == start_cut(rows, t)
        assert index.cold_start_seq(STREAM, t) == (None if found is None else found.seq)
        stop = index.stop(STREAM, t)
        assert (None if stop is None else stop.stream_cut) == stop_cut(rows, t)


def test_a_cold_lookup_answers_from_the_index_row_alone(tmp_path):
    """Index rows carry their watermark's cut: a cold lookup opens one table. With
    ``marks`` gone, cold lookups still answer, each cut exactly the watermark's."""
    root = str(tmp_path)
    marks = _marks([(100, 80), (200, 0), (300, 50), (400, 10)])
    append_watermarks(root, marks)
    rows = index_rows(marks)
    shutil.rmtree(tmp_path / "marks")
    for t in (0, 150, 181, 250, 301, 399, 500):
        index = SeekIndex(root, refresh_interval_ms=0)
        found = index.start(STREAM, t)
        assert (None if found is None else found.stream_cut) == start_cut(rows, t)
        stop = SeekIndex(root, refresh_interval_ms=0).stop(STREAM, t)
        assert (None if stop is None else stop.stream_cut) == stop_cut(rows, t)


def _old_layout_rows(root: str, marks: list[Watermark]) -> None:
    """``marks`` appended as the controller wrote them before ``index`` had a cut: marks
    rows, and index rows of the four columns of the time (a table of that schema)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from tidemark.schemas.tables import INDEX_SEARCH_COLUMNS, index_row, marks_row

    old_index = pa.schema([INDEX_SCHEMA.field(c) for c in INDEX_SEARCH_COLUMNS])
    maxima = [r.upper_time_max for r in index_rows(marks)]
    write_deltalake(
        f"{root}/marks",
        pa.Table.from_pylist([marks_row(w) for w in marks], schema=MARKS_SCHEMA),
        mode="append",
    )
    old_rows = [
        {c: v for c, v in index_row(w, top).items() if c in INDEX_SEARCH_COLUMNS}
        for w, top in zip(marks, maxima, strict=True)
    ]
    write_deltalake(
        f"{root}/index", pa.Table.from_pylist(old_rows, schema=old_index), mode="append"
    )


def test_index_rows_written_before_their_cut_are_answered_through_marks(tmp_path):
    """A table written before ``index`` had ``stream_cut``: the controller adds the column
    when it starts (``evolve_tables``) and new rows carry their cut; the old rows (null
    there, in their own files and, after a compaction, beside new rows in one file) are
    answered through ``marks``, exactly as before -- and only they need it."""
    from tidemark.controller.delta.appends import evolve_tables
    from tidemark.controller.delta.maintenance import Maintainer, MaintenanceSettings
    from tidemark.pipelines.reading.exceptions import WatermarksUnavailableError

    root = str(tmp_path)
    marks = _marks([(100, 80), (200, 0), (300, 50), (400, 10), (500, 5), (600, 0)])
    rows = index_rows(marks)
    _old_layout_rows(root, marks[:3])
    assert evolve_tables(root) == {"index": ["stream_cut"]}
    append_watermarks(root, marks[3:], previous_upper_time_max=rows[2].upper_time_max)
    probes = (0, 150, 181, 250, 301, 350, 399, 450, 505, 610, 700)

    def agree() -> None:
        for t in probes:
            found = SeekIndex(root, refresh_interval_ms=0).start(STREAM, t)
            assert (None if found is None else found.stream_cut) == start_cut(rows, t)
            stop = SeekIndex(root, refresh_interval_ms=0).stop(STREAM, t)
            assert (None if stop is None else stop.stream_cut) == stop_cut(rows, t)

    agree()
    Maintainer(MaintenanceSettings(root, compact_min_files=2)).run_once(force=True)
    agree()  # old and new rows in one compacted file: nulls beside cuts
    shutil.rmtree(tmp_path / "marks")
    assert SeekIndex(root).start(STREAM, 610).stream_cut == rows[5].stream_cut  # index alone
    with pytest.raises(WatermarksUnavailableError):
        SeekIndex(root).start(STREAM, 350)  # seq 1, an old row: its cut is only in marks


def test_joint_lookups_follow_one_snapshot_and_agree_with_each_stream(tmp_path):
    """start_cuts/stop_cuts: the loaded streams refresh together (one index snapshot) and
    answer as each stream's own lookup does, while rows keep being appended."""
    root = str(tmp_path)
    now = [0.0]
    joint = SeekIndex(root, refresh_interval_ms=1000, warm_after=0, monotonic=lambda: now[0])
    streams = ["s/a", "s/b", "s/c"]  # s/c never has a row: head, never complete
    for n, stream in enumerate(streams[:2]):
        append_watermarks(root, [Watermark(stream, 100 + n, 150, {0: 5 + n}, 0)])
    assert joint.start_cuts(streams, 200) == {"s/a": {0: 5}, "s/b": {0: 6}, "s/c": None}
    for n, stream in enumerate(streams[:2]):
        append_watermarks(
            root, [Watermark(stream, 300 + n, 300, {0: 9 + n}, 1)], previous_upper_time_max=150
        )
    assert joint.stop_cuts(streams, 250) == {"s/a": None, "s/b": None, "s/c": None}  # not due
    now[0] = 1.5
    assert joint.stop_cuts(streams, 250) == {"s/a": {0: 9}, "s/b": {0: 10}, "s/c": None}
    fresh = SeekIndex(root, refresh_interval_ms=0)
    for t in (0, 150, 151, 301, 400):
        for stream in streams:
            one = fresh.start(stream, t)
            assert joint.start_cuts(streams, t)[stream] == (None if one is None else one.stream_cut)
            stop = fresh.stop(stream, t)
            assert joint.stop_cuts(streams, t)[stream] == (
                None if stop is None else stop.stream_cut
            )


def test_the_tails_of_several_streams_share_one_open_marks_table(tmp_path):
    """A process opens ``marks`` once for all its tails (``shared_source``); each tail
    still reads only its own stream's new rows, also when the tails poll at once from
    several threads."""
    root = str(tmp_path)
    streams = [f"s/t{i}" for i in range(4)]

    def add(first_seq: int, count: int) -> None:
        for i, stream in enumerate(streams):
            marks = [
                Watermark(stream, seq * 10 + i, seq * 10 + i + 5, {0: seq}, seq)
                for seq in range(first_seq, first_seq + count)
            ]
            append_watermarks(root, marks)

    add(0, 2)
    tails = [MarksTail(root, stream) for stream in streams]
    assert len({id(t.tail.source) for t in tails}) == 1
    assert [[(w.stream, w.seq) for w in t.poll()] for t in tails] == [
        [(stream, 0), (stream, 1)] for stream in streams
    ]
    add(2, 3)
    with ThreadPoolExecutor(len(tails)) as pool:
        polled = list(pool.map(lambda t: t.poll(), tails))
    assert [[(w.stream, w.seq, w.time) for w in got] for got in polled] == [
        [(stream, seq, seq * 10 + i) for seq in (2, 3, 4)] for i, stream in enumerate(streams)
    ]
    assert all(t.poll() == [] for t in tails)


def test_the_tails_of_one_moment_share_a_refresh_and_see_what_came_before_it(tmp_path):
    """Inside ``one_moment`` the tails' refreshes are asked at the block's start: the
    first reads the log, the others take that read (a watermark committed after the
    block began is left for the next call), and a watermark committed before the
    block is always seen, whichever tail read the log."""
    root = str(tmp_path)
    a, b = "s/a", "s/b"

    def add(stream: str, seq: int) -> None:
        append_watermarks(root, [Watermark(stream, seq * 10, seq * 10 + 5, {0: seq}, seq)])

    def seqs(tail: MarksTail) -> list[int]:
        return [w.seq for w in tail.poll()]

    add(a, 0)
    add(b, 0)
    tail_a, tail_b = MarksTail(root, a), MarksTail(root, b)
    with one_moment():
        assert seqs(tail_a) == [0]  # reads the log
        add(b, 1)  # committed after the moment began
        assert seqs(tail_b) == [0]  # the same read: b's seq 1 is not loaded yet
        assert tail_b.tail.source.refresh() is False
    assert seqs(tail_b) == [1]  # a call of its own reads the log
    add(a, 1)  # committed before the next moment
    with one_moment():
        assert seqs(tail_b) == []  # this read of the log ...
        assert seqs(tail_a) == [1]  # ... loaded a's new watermark for a's tail too
    add(a, 2)
    with one_moment():
        assert seqs(tail_a) == [2]
