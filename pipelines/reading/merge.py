"""Several streams read as one, in event-time order: release a record once every stream
has passed its time.

    with merged_reader(["shop/orders", "shop/payments"], from_time=t, store=store,
                       bootstrap_servers=kafka, delta_root="/data/delta") as merged:
        for event in merged.events(idle_ms=2_000):
            print(event.stream, event.timestamp, event.body)
        print(merged.late, "late records")

:class:`TimeMerge` reads each stream with its own reader (``read_batch``) and
holds the records back until they are safe to hand out. A reader's time
window lower bound is the time of the latest watermark whose cut it has
passed: every record of that stream with a time at or below it has been read
(for well-behaved writers). A record is released once its time is at or below
the **smallest** lower bound over all streams, so no stream can still bring
an earlier one: the merged output is in timestamp order (ties in no set
order). A stream without a watermark holds everything back; :meth:`flush`
hands out what is held, in order, at the end of a bounded read (everything
committed was read, so the order is exact there too).

Late records: a record read with a time below the latest time already
released (a writer whose events run behind the times it noted) is not
dropped: it is released with the next records, so it appears out of order,
and is counted in :attr:`TimeMerge.late`. Records before ``from_time`` are
skipped (the start cuts are as coarse as the watermarks).

The readers are any :class:`~pipelines.reading.reader.EventReader`\\ s, one per
stream (a reader group's readers will do as well as the private groups
:func:`merged_reader` opens).
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from itertools import chain, islice
from operator import attrgetter, gt

from controller.store import MetadataStore
from pipelines.reading.config import ReaderConfig
from pipelines.reading.exceptions import ReaderConfigError
from pipelines.reading.group import ReaderGroup
from pipelines.reading.reader import EventRead, EventReader
from pipelines.reading.seek import SeekIndex, check_timestamp, stream_cut_at
from pipelines.reading.streams import check_streams

log = logging.getLogger(__name__)

_time_of = attrgetter("timestamp")


class _Held:
    """One stream's records held back: sorted by time, with their times beside them (a
    plain int list, so finding what a bound releases is one C bisect, and a release
    takes a slice, not record by record)."""

    __slots__ = ("events", "times")

    def __init__(self) -> None:
        self.events: list[EventRead] = []
        self.times: list[int] = []

    def add(self, events: list[EventRead], times: list[int]) -> None:
        """Hold a batch (``times`` its records' times): appended as it is when it is in
        order after what is held (the usual case), else merged in by time (timsort
        over two sorted runs)."""
        if any(map(gt, times, islice(times, 1, None))):
            events = sorted(events, key=_time_of)
            times = sorted(times)
        held, held_times = self.events, self.times
        if held_times and held_times[-1] > times[0]:
            held.extend(events)
            held.sort(key=_time_of)
            self.times = list(map(_time_of, held))
        else:
            held.extend(events)
            held_times.extend(times)

    def take(self, bound: int | None) -> list[EventRead]:
        """The held records with time <= ``bound`` (None: all), no longer held."""
        cut = len(self.times) if bound is None else bisect_right(self.times, bound)
        if not cut:
            return []
        out = self.events[:cut]
        del self.events[:cut], self.times[:cut]
        return out


class TimeMerge:
    """The records of several readers (one per stream) in timestamp order.

    :meth:`poll` reads a batch from each reader and returns the records now
    safe to release; :meth:`flush` returns the rest; :meth:`events` iterates.
    ``late`` counts records read below the time already released;
    ``released_time`` is the largest time released so far.

    ``max_held`` (default ``2 * batch_size``) bounds the records a stream holds
    while another stream still has records to bring: a stream holding that many
    is not read (its records stay in Kafka's client, out of Python's heap) until
    the streams behind it bring theirs, or have nothing to bring (at their tail,
    or nothing came within a poll's wait). Held records cannot be released
    before the slowest stream passes their time, so reading further ahead only
    grows the heap (and the garbage collector's walks over it).
    """

    def __init__(
        self,
        readers: Sequence[EventReader],
        *,
        from_time: int | None = None,
        batch_size: int = 1_000,
        max_held: int | None = None,
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
        self.late = 0
        self.released_time: int | None = None
        self._held = [_Held() for _ in self.readers]
        self._bounds: list[int | None] = [None] * len(self.readers)

    def poll(self, timeout_ms: float = 100) -> list[EventRead]:
        """One batch from each reader (waiting at most ``timeout_ms`` over all of them);
        the records whose time every stream has now passed, in timestamp order.

        What the readers hold already is taken first, without waiting; only when
        none holds anything does each wait its share of ``timeout_ms``, and only
        until one brings something (waiting on one stream while the others'
        records sat fetched kept the merge at a quarter of a plain read's rate),
        the streams holding the release back (lowest lower bound) first.
        Streams holding ``max_held`` records are read only when the others
        bring nothing (see the class docstring)."""
        behind = self._behind()
        if not self._read_each(behind, 0.0):
            wait = max(0.0, timeout_ms) / len(behind)
            bounds = self._bounds
            slowest = sorted(behind, key=lambda i: (bounds[i] is not None, bounds[i] or 0))
            if not self._read_each(slowest, wait) and len(behind) < len(self.readers):
                self._read_each([i for i in range(len(self.readers)) if i not in behind], 0.0)
        bound = self._bound()
        return [] if bound is None else self._release(bound)

    def _behind(self) -> list[int]:
        """The readers to read first: all of them, unless some hold ``max_held`` records
        while others may still bring some (not at their tail); then those others."""
        held, limit = self._held, self.max_held
        behind = [i for i, h in enumerate(held) if len(h.times) < limit]
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
                self._take(i, batch.events)
                bounds[i] = batch.window.lower
            elif wait_ms or bounds[i] is None:
                bounds[i] = reader.current_time_window().lower
        return got

    def flush(self) -> list[EventRead]:
        """Every record held back, in timestamp order (at the end of a bounded read)."""
        return self._release(None)

    def events(self, *, idle_ms: float | None = None, poll_ms: float = 100) -> Iterator[EventRead]:
        """The merged records as they become safe; with ``idle_ms``, once no reader has
        brought anything for that long, the records held back (:meth:`flush`) and the end."""
        idle_since = time.monotonic()
        while True:
            before = self.held
            released = self.poll(poll_ms)
            if released or self.held != before:
                idle_since = time.monotonic()
            yield from released
            if idle_ms is not None and (time.monotonic() - idle_since) * 1000 >= idle_ms:
                yield from self.flush()
                return

    @property
    def held(self) -> int:
        """How many records are held back (read, not yet safe to release)."""
        return sum(len(h.times) for h in self._held)

    def _take(self, i: int, batch: Sequence[EventRead]) -> None:
        events = list(batch)
        times = list(map(_time_of, events))
        start, released = self.from_time, self.released_time
        if start is not None and min(times) < start:
            events = [e for e in events if e.timestamp >= start]
            times = list(map(_time_of, events))
            if not times:
                return
        if released is not None and min(times) < released:
            late = sum(1 for t in times if t < released)
            self.late += late
            log.debug("%d late record(s) on %s (below %d)", late, events[0].stream, released)
        self._held[i].add(events, times)

    def _bound(self) -> int | None:
        """The smallest lower bound over the streams; None while any stream has none."""
        if any(b is None for b in self._bounds):
            return None
        return min(b for b in self._bounds if b is not None)

    def _release(self, bound: int | None) -> list[EventRead]:
        """The held records with time <= ``bound`` (None: all of them), merged by time."""
        runs = [run for run in (h.take(bound) for h in self._held) if run]
        if not runs:
            return []
        # Sorting the joined runs merges them (timsort finds the sorted runs) in C.
        out = runs[0] if len(runs) == 1 else sorted(chain.from_iterable(runs), key=_time_of)
        last = out[-1].timestamp
        if self.released_time is None or last > self.released_time:
            self.released_time = last
        return out


@contextmanager
def merged_reader(
    streams: Sequence[str],
    from_time: object = None,
    *,
    store: MetadataStore,
    bootstrap_servers: str,
    delta_root: str | None = None,
    config: ReaderConfig | None = None,
    index: SeekIndex | None = None,
    batch_size: int = 1_000,
) -> Iterator[TimeMerge]:
    """A :class:`TimeMerge` over ``streams`` from ``from_time`` (None: their heads), each read
    by a private reader group kept in memory (nothing committed anywhere), starting at
    the stream's start cut for ``from_time`` (:func:`~pipelines.reading.seek.stream_cut_at`).
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
        yield TimeMerge(readers, from_time=start, batch_size=batch_size)


__all__ = ["TimeMerge", "merged_reader"]
