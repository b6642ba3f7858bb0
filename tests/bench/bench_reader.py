"""Reader benchmarks: timestamp lookups (warm and cold) and time-window resolution.

``run(services)`` returns printable lines; each figure comes with its baseline,
measured in the same process on the same data, and the ratio (goal in brackets):

- warm lookup over 10 million index rows (``SeekIndex.start_position``, the
  in-memory index after its first load) vs ``bisect`` on a Python list of
  the same times  [<= 2x, p99 < 50 us];
- cold lookup from Delta (a fresh ``index`` open, file statistics, one row group
  read and the found row's cut: timestamp -> stream cut) vs Kafka's
  ``offsets_for_times`` over all partitions of a 16-partition topic, on the
  table as appended and again after a maintenance pass  [<= 2x, max <= 20 ms];
- time-window resolution per event (``PositionWindow.at``) vs a plain offset
  comparison against the next watermark's cut, and the same window resolved
  once per batch the way ``EventReader.read_batch`` does (the reader's
  position, then ``PositionWindow.at``), counted per event  [<= 3x]
  (all timed in this thread's CPU time; the per-event ones in interleaved rounds).
"""

from __future__ import annotations

import bisect
import random
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tests.bench.percentile import percentile

WARM_ROWS = 10_000_000
COLD_ROWS = 200_000
PARTITIONS = 16
LOOKUPS = 20_000
COLD_LOOKUPS = 30


def _us(samples_ns: list[int], q: float) -> float:
    """A percentile of samples in ns, in us."""
    return percentile(samples_ns, q) / 1000


def _cuts(lo: int, hi: int) -> list[list[dict[str, int]]]:
    """The ``stream_cut`` cells of watermarks ``lo`` .. ``hi - 1``: every segment."""
    return [[{"segment": p, "offset": i * 2 + p} for p in range(PARTITIONS)] for i in range(lo, hi)]


def _write_index(
    root: Path, stream: str, rows: int, files: int, *, cuts: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` index rows in ``files`` appends; ``cuts``: with each row's ``stream_cut``
    (as the controller writes them now; without: as written before that column)."""
    from deltalake import write_deltalake

    from tidemark.controller.delta.tables import INDEX, table_path
    from tidemark.schemas.arrow import INDEX_ARROW as INDEX_SCHEMA

    rng = np.random.default_rng(7)
    times = np.arange(rows, dtype=np.int64) * 10 + 1_000_000
    upper = np.maximum.accumulate(times + rng.integers(0, 500, rows))
    per = rows // files
    for f in range(files):
        lo, hi = f * per, rows if f == files - 1 else (f + 1) * per
        table = pa.table(
            {
                "stream": pa.array([stream] * (hi - lo), pa.string()),
                "seq": pa.array(np.arange(lo, hi, dtype=np.int64)),
                "time": pa.array(times[lo:hi]),
                "upper_time_max": pa.array(upper[lo:hi]),
                "stream_cut": pa.array(
                    _cuts(lo, hi) if cuts else [None] * (hi - lo),
                    INDEX_SCHEMA.field("stream_cut").type,
                ),
            },
            schema=INDEX_SCHEMA,
        )
        write_deltalake(table_path(str(root), INDEX), table, mode="append")
    return times, upper


def _write_marks(root: Path, stream: str, times: np.ndarray, upper: np.ndarray, files: int) -> None:
    from deltalake import write_deltalake

    from tidemark.controller.delta.tables import MARKS, table_path
    from tidemark.schemas.arrow import MARKS_ARROW as MARKS_SCHEMA

    rows = len(times)
    per = rows // files
    for f in range(files):
        lo, hi = f * per, rows if f == files - 1 else (f + 1) * per
        table = pa.table(
            {
                "stream": [stream] * (hi - lo),
                "seq": pa.array(np.arange(lo, hi, dtype=np.int64)),
                "time": pa.array(times[lo:hi]),
                "upper_time": pa.array(upper[lo:hi]),
                "stream_cut": _cuts(lo, hi),
                "writers": [[] for _ in range(hi - lo)],
                "emitted_at": pa.array(np.zeros(hi - lo, dtype=np.int64)),
            },
            schema=MARKS_SCHEMA,
        )
        write_deltalake(table_path(str(root), MARKS), table, mode="append")


def bench_warm(work: Path) -> list[str]:
    from tidemark.pipelines.reading.seek import SeekIndex

    root = work / "warm-delta"
    stream = "bench/warm"
    started = time.perf_counter()
    _, upper = _write_index(root, stream, WARM_ROWS, files=20)
    written = time.perf_counter() - started
    index = SeekIndex(str(root), refresh_interval_ms=3_600_000)
    started = time.perf_counter()
    index.refresh(stream, force=True)
    loaded = time.perf_counter() - started
    baseline = upper.tolist()
    rng = random.Random(3)
    probes = [rng.randrange(int(upper[0]) - 100, int(upper[-1]) + 100) for _ in range(LOOKUPS)]
    for t in probes[:1000]:  # agree before timing
        got = index.start_position(stream, t)
        want = bisect.bisect_left(baseline, t) - 1
        assert (got if got is not None else -1) == want
    ours, base = [], []
    clock = time.perf_counter_ns
    for t in probes:
        a = clock()
        index.start_position(stream, t)
        b = clock()
        bisect.bisect_left(baseline, t)
        c = clock()
        ours.append(b - a)
        base.append(c - b)
    ratio = statistics.median(ours) / statistics.median(base)
    return [
        f"warm lookup, {WARM_ROWS:,} index rows (write {written:.1f} s, first load {loaded:.1f} s)",
        f"  SeekIndex.start_position  p50 {_us(ours, 0.5):.2f} us  p99 {_us(ours, 0.99):.2f} us",
        f"  bisect on a list          p50 {_us(base, 0.5):.2f} us  p99 {_us(base, 0.99):.2f} us",
        f"  ratio (p50) {ratio:.2f}x  [goal <= 2x, p99 < 50 us]",
    ]


def bench_cold(work: Path, bootstrap: str) -> list[str]:
    from tests.bench.kafka_baseline import timed_topic
    from tidemark.controller.delta.maintenance import Maintainer, MaintenanceSettings

    root = work / "cold-delta"
    stream = "bench/cold"
    times, upper = _write_index(root, stream, COLD_ROWS, files=10, cuts=True)
    _write_marks(root, stream, times, upper, files=10)
    lines = [f"cold lookup, {COLD_ROWS:,} watermarks of a {PARTITIONS}-segment stream"]
    with timed_topic(bootstrap) as topic:
        rng = random.Random(5)
        ours, kafka = _cold_lookups(root, stream, upper, topic, rng)
        lines += _cold_rows("as appended (10 files, one row group each)", ours, kafka)
        # The layout tidemark's maintenance gives a table (compacted in time order, row
        # groups of its sizes, checkpointed); min files 2 so the 10 large appends qualify.
        Maintainer(MaintenanceSettings(str(root), compact_min_files=2)).run_once(force=True)
        ours, kafka = _cold_lookups(root, stream, upper, topic, rng)
        lines += _cold_rows("after maintenance (compacted, checkpointed)", ours, kafka)
    return lines


def _cold_lookups(
    root: Path, stream: str, upper: np.ndarray, topic: Any, rng: random.Random
) -> tuple[list[float], list[float]]:
    """Cold lookups (a fresh ``SeekIndex`` each) alternating with Kafka's; ms each."""
    from tidemark.pipelines.reading.seek import SeekIndex

    ours: list[float] = []
    kafka: list[float] = []
    for _ in range(COLD_LOOKUPS):
        t = rng.randrange(int(upper[0]), int(upper[-1]))
        a = time.perf_counter()
        cut = SeekIndex(str(root)).cold_start_cut(stream, t)
        b = time.perf_counter()
        kafka.append(topic.lookup(topic.base_ts + rng.randrange(0, 20_000)))
        assert cut is not None and len(cut) == PARTITIONS
        ours.append((b - a) * 1000)
    return ours, kafka


def _cold_rows(layout: str, ours: list[float], kafka: list[float]) -> list[str]:
    ratio = statistics.median(ours) / statistics.median(kafka)
    return [
        f"  {layout}:",
        f"    Delta (1 open, stats, 1 index row group, 1 cut)   p50 {statistics.median(ours):.1f}"
        f" ms  max {max(ours):.1f} ms",
        f"    Kafka offsets_for_times, {PARTITIONS} partitions         "
        f"p50 {statistics.median(kafka):.1f} ms  max {max(kafka):.1f} ms",
        f"    ratio (p50) {ratio:.2f}x  [goal <= 2x, max <= 20 ms]",
    ]


def bench_window(rounds: int = 8) -> list[str]:
    """Per event, in ``rounds`` slices of the offsets, each slice timed three ways back to
    back (so a ratio compares code run at the same moment of a shared machine)."""
    from tidemark.controller.model import KeyRange, Segment, Watermark
    from tidemark.pipelines.reading.reader import FETCH_SIZE
    from tidemark.pipelines.reading.windows import PositionWindow, WatermarkFeed, reader_position

    segs = {0: Segment(0, KeyRange(0.0, 1.0))}
    marks = [Watermark("bench/w", i * 10, i * 10 + 5, {0: i * 100}, i) for i in range(2_000)]
    feed: Any = WatermarkFeed.__new__(WatermarkFeed)  # a feed holding the marks, no table behind it
    feed.watermarks = marks
    feed.refresh = lambda force=False: len(marks)
    window = PositionWindow(feed, lambda: segs)
    clock = time.thread_time  # CPU time of this thread: what a busy machine disturbs least
    events = 200_000
    floor = _Floor(window.at({0: events}))
    window.reset()
    nxt, cuts = 0, [m.stream_cut[0] for m in marks]
    ours, base, least = [], [], []
    size = events // rounds
    for start in range(0, events, size):
        a = clock()
        for offset in range(start, start + size):
            window.at({0: offset})
        b = clock()
        for offset in range(start, start + size):  # the plain comparison: passed the next cut?
            while nxt < len(cuts) and offset >= cuts[nxt]:
                nxt += 1
        c = clock()
        for offset in range(start, start + size):  # what any at(position) costs: a call, a dict
            floor.at({0: offset})
        d = clock()
        ours.append((b - a) / size * 1e9)
        base.append((c - b) / size * 1e9)
        least.append((d - c) / size * 1e9)
    ratio = sorted(o / b for o, b in zip(ours, base, strict=True))
    floor_ratio = sorted(f / b for f, b in zip(least, base, strict=True))
    lines = [
        f"time window per event, {events:,} events, {len(marks):,} watermarks, {rounds} rounds",
        f"  PositionWindow.at  {min(ours):.0f}-{max(ours):.0f} ns/event",
        f"  offset comparison  {min(base):.0f}-{max(base):.0f} ns/event",
        f"  ratio per round {ratio[0]:.2f}-{ratio[-1]:.2f}x, median {statistics.median(ratio):.2f}x"
        "  [goal <= 3x]",
        f"  (floor: a method returning a stored window, fresh dict per call:"
        f" {min(least):.0f}-{max(least):.0f} ns/event,"
        f" {floor_ratio[0]:.2f}-{floor_ratio[-1]:.2f}x)",
    ]
    base_ns = statistics.median(base)
    for batch in (FETCH_SIZE, 500):
        per_batch = PositionWindow(feed, lambda: segs)
        a = clock()
        for end in range(batch, events + 1, batch):  # read_batch: position, then the window
            per_batch.at(reader_position({0: end}, frozenset(), segs))
        b = clock()
        assert per_batch.at({0: events}) == window.at({0: events})
        per_event = (b - a) / events * 1e9
        lines.append(
            f"  per batch of {batch} (read_batch)  {per_event:.1f} ns/event"
            f"  ratio {per_event / base_ns:.2f}x (of the median comparison)  [goal <= 3x]"
        )
    return lines


class _Floor:
    """The least any ``at(position)`` can cost: a method call returning a stored window."""

    def __init__(self, window: Any) -> None:
        self._window = window

    def at(self, position: Any) -> Any:
        return self._window


PARTS = ("warm", "cold", "window")


def run(services: Any, parts: list[str] | None = None) -> list[str]:
    """Every part, or those named (``python -m tests.bench bench_reader:cold,window``)."""
    work = Path(services.work_dir) / "bench-reader"
    work.mkdir(parents=True, exist_ok=True)
    wanted = parts or list(PARTS)
    unknown = sorted(set(wanted) - set(PARTS))
    if unknown:
        raise SystemExit(f"unknown part(s) {unknown}; the parts are {', '.join(PARTS)}")
    lines: list[str] = []
    if "warm" in wanted:
        lines += bench_warm(work)
    if "cold" in wanted:
        lines += bench_cold(work, services.bootstrap)
    if "window" in wanted:
        lines += bench_window()
    return lines
