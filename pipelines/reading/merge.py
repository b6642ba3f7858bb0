"""Several streams read as one, in event-time order: release a record once every stream
has passed its time.

    with merged_reader(["shop/orders", "shop/payments"], from_time=t, store=store,
                       bootstrap_servers=kafka, delta_root="/data/delta") as merged:
        for event in merged.events(idle_ms=2_000):
            print(event.stream, event.timestamp, event.body)
        print(merged.late, "late records")
        # or what is released at once, as a batch (merged.read_batch(timeout_ms=100)):
        for batch in merged.batches(idle_ms=2_000):
            batch.values(), batch.times(), batch.streams()  # in time order, no EventRead
            batch.events                                    # each EventRead, made when asked

:class:`TimeMerge` reads each stream with its own reader (``read_batch``) and
holds the records back until they are safe to hand out. A reader's time
window lower bound is the time of the latest watermark whose cut it has
passed: every record of that stream with a time at or below it has been read
(for well-behaved writers). A record is released once its time is at or below
the **smallest** lower bound over all streams, so no stream can still bring
an earlier one: the merged output is in timestamp order (equal times in
the readers' order). A stream without a watermark holds everything back; :meth:`flush`
hands out what is held, in order, at the end of a bounded read (everything
committed was read, so the order is exact there too).

The records are held as columns of plain values taken from the readers' fetches
(:class:`~tidemark.pipelines.reading.merged_batch.Columns`; see there why) and released as
a :class:`~tidemark.pipelines.reading.merged_batch.MergedBatch`: bodies, times and streams
without making any :class:`~tidemark.pipelines.reading.reader.EventRead` (most of the
merge's cost when made for every record), events only when asked.

Late records: a record read with a time below the latest time already
released (a writer whose events run behind the times it noted) is not
dropped: it is released with the next records, so it appears out of order,
and is counted in :attr:`TimeMerge.late`. Records before ``from_time`` are
skipped (the start cuts are as coarse as the watermarks).

The readers are any :class:`~tidemark.pipelines.reading.reader.EventReader`\\ s, one per
stream (a reader group's readers will do as well as the private groups
:func:`merged_reader` opens).
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from itertools import repeat
from operator import le

from tidemark.controller.delta.location import Root
from tidemark.controller.delta.tables import one_moment
from tidemark.controller.store import MetadataStore
from tidemark.pipelines.reading.config import ReaderConfig
from tidemark.pipelines.reading.exceptions import ReaderConfigError
from tidemark.pipelines.reading.group import ReaderGroup
from tidemark.pipelines.reading.merged_batch import Columns, MergedBatch, Run
from tidemark.pipelines.reading.reader import EventBatch, EventRead, EventReader, records_of
from tidemark.pipelines.reading.seek import SeekIndex, check_timestamp, stream_cut_at
from tidemark.pipelines.reading.streams import check_streams

log = logging.getLogger(__name__)


BATCH_SIZE = 256
"""Records a merge takes from each reader per read (``batch_size``'s default). Kept
well below the garbage collector's young-generation threshold (700 new objects by
default): a fetch of more Kafka records than that sets off a collection while it
is being made, every fetch, and the records it promotes make the older
collections walk further."""


class _Held:
    """One stream's records held back, in time order: the fetches as they came, each a
    :class:`Columns` sorted by time, each starting at or after the one before ends
    (finding what a bound releases is one C bisect over a fetch's times; whole fetches
    are released as they are, only the one a bound falls in is split)."""

    __slots__ = ("chunks", "count", "stream")

    def __init__(self) -> None:
        self.chunks: list[Columns] = []
        self.count = 0
        self.stream = ""

    def __len__(self) -> int:
        return self.count

    def add(self, records: Columns) -> None:
        """Hold a fetch (sorted by time): kept as it is when it starts at or after what is
        held ends (the usual case), else merged in by time with everything held
        (timsort over sorted runs)."""
        chunks = self.chunks
        self.count += len(records)
        if not chunks or chunks[-1].times[-1] <= records.times[0]:
            chunks.append(records)
            return
        whole = chunks[0]
        for more in chunks[1:]:
            whole.extend(more)
        whole.extend(records)
        self.chunks = [whole.in_time_order()]

    def take(self, bound: int | None) -> list[Run]:
        """The held records with time <= ``bound`` (None: all), no longer held, as runs
        (one a fetch)."""
        chunks, stream = self.chunks, self.stream
        if bound is None:
            self.chunks, self.count = [], 0
            return [Run(stream, records) for records in chunks]
        runs = []
        whole = 0
        for records in chunks:
            if records.times[-1] <= bound:
                runs.append(Run(stream, records))
                whole += 1
                continue
            cut = bisect_right(records.times, bound)
            if cut:
                runs.append(Run(stream, records.take(cut)))
            break
        del chunks[:whole]
        self.count -= sum(len(run.records) for run in runs)
        return runs


class TimeMerge:
    """The records of several readers (one per stream) in timestamp order.

    :meth:`read_batch` reads a batch from each reader and returns the records now
    safe to release (a :class:`~tidemark.pipelines.reading.merged_batch.MergedBatch`);
    :meth:`flush_batch` returns the rest; :meth:`batches` iterates. :meth:`poll`,
    :meth:`flush` and :meth:`events` do the same with each record's ``EventRead``.
    ``late`` counts records read below the time already released;
    ``released_time`` is the largest time released so far.

    ``max_held`` (default ``2 * batch_size``) bounds the records a stream holds
    while another stream still has records to bring: a stream holding that many
    is not read (its records stay in Kafka's client, out of Python's heap) until
    the streams behind it bring theirs, or have nothing to bring (at their tail,
    or nothing came within a poll's wait). Held records cannot be released
    before the slowest stream passes their time, so reading further ahead only
    grows the heap (and the garbage collector's walks over it).

    ``bodies_only``: the batches give bodies, times and streams, never events
    (``batch.events`` raises :class:`~tidemark.pipelines.reading.exceptions.ReaderConfigError`);
    each record's time and body are all that is taken from Kafka's record (its
    segment, offset, key and headers are not), for a read that wants only the
    bodies.
    """

    def __init__(
        self,
        readers: Sequence[EventReader],
        *,
        from_time: int | None = None,
        batch_size: int = BATCH_SIZE,
        max_held: int | None = None,
        bodies_only: bool = False,
    ) -> None:
        if not readers:
            raise ReaderConfigError("a merge needs at least one reader")
        if type(batch_size) is not int or batch_size < 1:
            raise ReaderConfigError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if max_held is not None and (type(max_held) is not int or max_held < 1):
            raise ReaderConfigError(f"max_held must be an int >= 1, got {max_held!r}")
        self.readers = list(readers)
        self.from_time = from_time
        self.batch_size = batch_size
        self.max_held = 2 * batch_size if max_held is None else max_held
        self.bodies_only = bodies_only
        self.late = 0
        self.released_time: int | None = None
        self._held = [_Held() for _ in self.readers]
        self._bounds: list[int | None] = [None] * len(self.readers)

    def poll(self, timeout_ms: float = 100) -> list[EventRead]:
        """The events :meth:`read_batch` releases (``list(batch.events)``)."""
        return list(self.read_batch(timeout_ms=timeout_ms).events)

    def read_batch(self, *, timeout_ms: float = 100) -> MergedBatch:
        """One batch from each reader (waiting at most ``timeout_ms`` over all of them);
        the records whose time every stream has now passed, in timestamp order.

        What the readers hold already is taken first, without waiting; only when
        none holds anything does each wait its share of ``timeout_ms``, and only
        until one brings something (waiting on one stream while the others'
        records sat fetched kept the merge at a quarter of a plain read's rate),
        the streams holding the release back (lowest lower bound) first.
        Streams holding ``max_held`` records are read only when the others
        bring nothing (see the class docstring). The streams' watermark tails
        due for a refresh in one call share one read of the ``marks`` log
        (:class:`~tidemark.controller.delta.tables.one_moment`): each still sees
        every watermark committed before the call."""
        with one_moment():
            return self._read_batch(timeout_ms)

    def _read_batch(self, timeout_ms: float) -> MergedBatch:
        behind = self._behind()
        if not self._read_each(behind, 0.0):
            wait = max(0.0, timeout_ms) / len(behind)
            bounds = self._bounds
            slowest = sorted(behind, key=lambda i: (bounds[i] is not None, bounds[i] or 0))
            if not self._read_each(slowest, wait) and len(behind) < len(self.readers):
                self._read_each([i for i in range(len(self.readers)) if i not in behind], 0.0)
        bound = self._bound()
        return MergedBatch(()) if bound is None else self._release(bound)

    def _behind(self) -> list[int]:
        """The readers to read first: all of them, unless some hold ``max_held`` records
        while others may still bring some (not at their tail); then those others."""
        held, limit = self._held, self.max_held
        behind = [i for i, h in enumerate(held) if len(h) < limit]
        if not behind or len(behind) == len(held):
            return list(range(len(held)))
        live = [i for i in behind if not self.readers[i].at_tail()]
        return live or list(range(len(held)))

    def _read_each(self, which: Sequence[int], wait_ms: float) -> int:
        """A batch from each reader of ``which``, waiting at most ``wait_ms`` on each until
        one brings something; how many came. A reader that brought nothing without
        waiting keeps its last lower bound (a stale lower bound only holds records
        back longer); when waiting, its window is asked again (new watermarks move it)."""
        got = 0
        bounds = self._bounds
        for i in which:
            reader = self.readers[i]
            batch = reader.read_batch(self.batch_size, timeout_ms=0.0 if got else wait_ms)
            if len(batch):
                got += len(batch)
                self._take(i, batch)
                bounds[i] = batch.window.lower
            elif wait_ms or bounds[i] is None:
                bounds[i] = reader.current_time_window().lower
        return got

    def flush(self) -> list[EventRead]:
        """The events :meth:`flush_batch` releases (``list(batch.events)``)."""
        return list(self.flush_batch().events)

    def flush_batch(self) -> MergedBatch:
        """Every record held back, in timestamp order (at the end of a bounded read)."""
        return self._release(None)

    def events(self, *, idle_ms: float | None = None, poll_ms: float = 100) -> Iterator[EventRead]:
        """The merged records as they become safe; with ``idle_ms``, once no reader has
        brought anything for that long, the records held back (:meth:`flush`) and the end."""
        for batch in self.batches(idle_ms=idle_ms, poll_ms=poll_ms):
            yield from batch.events

    def batches(
        self, *, idle_ms: float | None = None, poll_ms: float = 100
    ) -> Iterator[MergedBatch]:
        """As :meth:`events`, a batch at a time (:meth:`read_batch`; none empty)."""
        idle_since = time.monotonic()
        while True:
            before = self.held
            released = self.read_batch(timeout_ms=poll_ms)
            if len(released) or self.held != before:
                idle_since = time.monotonic()
            if len(released):
                yield released
            if idle_ms is not None and (time.monotonic() - idle_since) * 1000 >= idle_ms:
                rest = self.flush_batch()
                if len(rest):
                    yield rest
                return

    @property
    def held(self) -> int:
        """How many records are held back (read, not yet safe to release)."""
        return sum(map(len, self._held))

    def _take(self, i: int, batch: EventBatch) -> None:
        """Hold a reader's batch as columns (its records or events let go), from
        ``from_time`` on; late ones counted."""
        held = self._held[i]
        parts = records_of(batch) if isinstance(batch, EventBatch) else None
        if parts is None:
            events = batch.events
            held.stream = events[0].stream
            records = Columns.of_events(events, full=not self.bodies_only)
        else:
            msgs, segment_of, held.stream = parts
            records = Columns.of_records(msgs, segment_of, full=not self.bodies_only)
        records = records.in_time_order()  # (the smallest time is then the first)
        start, released = self.from_time, self.released_time
        if start is not None and records.times[0] < start:
            records = records.kept(map(le, repeat(start), records.times))
            if not len(records):
                return
        if released is not None and records.times[0] < released:
            late = sum(1 for t in records.times if t < released)
            self.late += late
            log.debug("%d late record(s) on %s (below %d)", late, held.stream, released)
        held.add(records)

    def _bound(self) -> int | None:
        """The smallest lower bound over the streams; None while any stream has none."""
        if any(b is None for b in self._bounds):
            return None
        return min(b for b in self._bounds if b is not None)

    def _release(self, bound: int | None) -> MergedBatch:
        """The held records with time <= ``bound`` (None: all of them), merged by time."""
        batch = MergedBatch(run for held in self._held for run in held.take(bound))
        last = batch.last_time
        if last is not None and (self.released_time is None or last > self.released_time):
            self.released_time = last
        return batch


@contextmanager
def merged_reader(
    streams: Sequence[str],
    from_time: object = None,
    *,
    store: MetadataStore,
    bootstrap_servers: str,
    delta_root: Root = None,
    config: ReaderConfig | None = None,
    index: SeekIndex | None = None,
    batch_size: int = BATCH_SIZE,
    bodies_only: bool = False,
) -> Iterator[TimeMerge]:
    """A :class:`TimeMerge` over ``streams`` from ``from_time`` (None: their heads), each read
    by a private reader group kept in memory (nothing committed anywhere), starting at
    the stream's start cut for ``from_time``
    (:func:`~tidemark.pipelines.reading.seek.stream_cut_at`);
    ``bodies_only`` as :class:`TimeMerge`'s.
    """
    names = check_streams(streams)
    start = None if from_time is None else check_timestamp(from_time)
    cuts = (
        {}
        if start is None
        else stream_cut_at(names, start, delta_root=delta_root, store=store, index=index)
    )
    with ExitStack() as stack:
        readers = []
        for name in names:
            group = stack.enter_context(
                ReaderGroup.ephemeral_group(
                    name,
                    cuts.get(name),
                    store=store,
                    bootstrap_servers=bootstrap_servers,
                    delta_root=delta_root,
                    config=config,
                )
            )
            readers.append(stack.enter_context(group.reader("merge")))
        yield TimeMerge(readers, from_time=start, batch_size=batch_size, bodies_only=bodies_only)


__all__ = ["BATCH_SIZE", "TimeMerge", "merged_reader"]
