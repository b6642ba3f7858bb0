"""What ``tidemark serve`` knows, kept warm by one background thread.

    service = TimeService(store, zk_client, lake, bootstrap_servers=kafka)
    service.start()                       # refreshes every refresh_ms
    service.start_lookup("shop/orders", t)   # Found | None, from memory
    service.close()

Every ``refresh_ms`` the thread reads the streams' metadata from the store,
brings each stream's in-memory index up to date (the
:class:`~tidemark.pipelines.reading.seek.SeekIndex` reads only the Delta versions
added since) and appends the new watermarks to a bounded per-stream
history (``emitted_at``, ``time``, ``upper_time``) for the dashboard's
charts. A lookup therefore never touches Delta while the stream is known;
a stream created since the last refresh is read on first use.

Waits for stream time (``GET .../wait``) sleep on :class:`StreamWaits`: one
``asyncio.Event`` per stream, set (through the event loop) when the stream's
history gains watermarks. While anyone waits, a second thread, the tail,
watches the ``marks`` table's next commit file for each stream waited on
(a stat every ``tail_ms``) and reads the new version at once, so a waiter
wakes when the commit lands, not at the next refresh. (A table on an object
store, which has no cheap stat, is read by the refresh alone.)
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, overload

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tidemark.controller.delta.exceptions import DeltaUnavailableError
from tidemark.controller.delta.location import Root, TableLocation
from tidemark.controller.delta.tables import (
    MarksTail,
    read_marks_as_of,
    read_rejected,
    read_table,
    read_watermarks,
)
from tidemark.controller.exceptions import ZooKeeperUnavailableError
from tidemark.controller.index import stop_index
from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.model import Watermark
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.store import MetadataStore
from tidemark.controller.zookeeper.driver import controller_view
from tidemark.errors import ConfigurationError, ServiceUnavailableError, TidemarkError
from tidemark.pipelines.reading.group import open_group
from tidemark.pipelines.reading.seek import Found, SeekIndex, check_timestamp, live_metadata
from tidemark.pipelines.reading.table_time import tables_status
from tidemark.pipelines.reading.time_service import cut_to_json
from tidemark.schemas.tables import LAGGARDS, cut_from_cell, laggards_by_stream, observation_of
from tidemark.service.group_metrics import GroupLagCollector
from tidemark.service.waits import StreamWaits

log = logging.getLogger(__name__)

HISTORY_COLUMNS = ("stream", "seq", "time", "upper_time", "emitted_at", "stream_cut")


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class HistoryPoint:
    seq: int
    time: int
    upper_time: int
    emitted_at: int


class _History:
    """A stream's recent watermarks (bounded), appended by table version, and their
    cuts by ``seq`` (so a lookup needs no read of ``marks``)."""

    def __init__(self, lake: TableLocation, stream: str, limit: int) -> None:
        self.tail = MarksTail(lake, stream, columns=HISTORY_COLUMNS)
        self.points: deque[HistoryPoint] = deque(maxlen=limit)
        self.cuts: OrderedDict[int, dict[int, int]] = OrderedDict()
        self.limit = limit
        self.count = 0

    def poll(self, lock: threading.RLock) -> int:
        """Read the new watermarks (then keep them, holding ``lock``); how many there were."""
        rows = self.tail.poll_rows()
        if not rows:
            return 0
        with lock:
            return self._keep(rows)

    def _keep(self, rows: list[dict[str, Any]]) -> int:
        for row in rows:
            seq = int(row["seq"])
            self.points.append(
                HistoryPoint(
                    seq, int(row["time"]), int(row["upper_time"]), int(row["emitted_at"] or 0)
                )
            )
            self.cuts[seq] = cut_from_cell(row["stream_cut"])
            if len(self.cuts) > self.limit:
                self.cuts.popitem(last=False)
        self.count += len(rows)
        return len(rows)

    def first_reaching(self, stream: str, t: int) -> Watermark | int | None:
        """The first watermark with ``time >= t`` (watermark times only rise), ``None``
        while there is none; the ``seq`` to read from Delta when it is older than the
        kept history."""
        points = self.points
        at = stop_index(_Times(points), t)
        if at is None:
            return None
        point = points[at]
        if at == 0 and self.count > len(points):
            return point.seq  # an older one, no longer kept, may reach t too
        return self._watermark(stream, point)

    def latest(self, stream: str) -> Watermark | None:
        return self._watermark(stream, self.points[-1]) if self.points else None

    def _watermark(self, stream: str, point: HistoryPoint) -> Watermark:
        cut = dict(self.cuts[point.seq])
        return Watermark(stream, point.time, point.upper_time, cut, point.seq)


class _Times(Sequence[int]):
    """The ``time`` column of the kept history, for ``tidemark.controller.index``'s search."""

    def __init__(self, points: deque[HistoryPoint]) -> None:
        self._points = points

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[int]: ...
    def __getitem__(self, index: int | slice) -> int | Sequence[int]:
        if isinstance(index, slice):
            return [p.time for p in list(self._points)[index]]
        return self._points[index].time

    def __len__(self) -> int:
        return len(self._points)


ZOOKEEPER, POSTGRESQL, KAFKA = "zookeeper", "postgresql", "kafka"


class TimeService:
    """Warm indexes, metadata and watermark history of every stream in ``store``."""

    def __init__(
        self,
        store: MetadataStore,
        zk_client: Any,
        lake: Root,
        *,
        bootstrap_servers: str,
        cluster: ClusterSettings | None = None,
        postgres_dsn: str | None = None,
        refresh_ms: int = 500,
        tail_ms: int = 10,
        history_limit: int = 20_000,
    ) -> None:
        if refresh_ms < 10:
            raise ConfigurationError(f"refresh_ms must be >= 10, got {refresh_ms}")
        if tail_ms < 1:
            raise ConfigurationError(f"tail_ms must be >= 1, got {tail_ms}")
        self.store = store
        self.zk_client = zk_client
        self.location = TableLocation.of(lake)
        self.bootstrap_servers = bootstrap_servers
        self.cluster = cluster or ClusterSettings()
        self.postgres_dsn = postgres_dsn
        self.refresh_s = refresh_ms / 1000
        self.tail_s = tail_ms / 1000
        # Lookups never refresh on their own while the thread keeps up (5 intervals).
        self.index = SeekIndex(self.location, refresh_interval_ms=refresh_ms * 5)
        self._history_limit = history_limit
        self._lock = threading.RLock()
        self._meta: dict[str, StreamMetadata] = {}
        self._history: dict[str, _History] = {}
        self._polling = threading.Lock()
        """Held while a history reads its tail (the refresh and the tail thread both do)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tail_thread: threading.Thread | None = None
        self.refreshes = 0
        self.last_refresh_error: str | None = None
        self.registry = CollectorRegistry()
        self.registry.register(_StreamCollector(self))
        self.group_lag = GroupLagCollector(store, bootstrap_servers, self.location)
        self.registry.register(self.group_lag)
        self.waits = StreamWaits()

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> TimeService:
        self.refresh_all()
        self._thread = threading.Thread(target=self._loop, name="tidemark-serve", daemon=True)
        self._thread.start()
        self._tail_thread = threading.Thread(
            target=self._tail_loop, name="tidemark-serve-tail", daemon=True
        )
        self._tail_thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self.waits.arrived.set()
        for thread in (self._thread, self._tail_thread):
            if thread is not None:
                thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.refresh_all()
                self.last_refresh_error = None
            except Exception as exc:  # keep serving what we have; say why on the dashboard
                self.last_refresh_error = f"{type(exc).__name__}: {exc}"
                log.warning("refresh failed: %s", exc)

    def _tail_loop(self) -> None:
        """Read a waited-on stream's new watermarks as soon as their commit file exists."""
        while not self._stop.is_set():
            waited = self.waits.waited()
            if not waited:  # nobody waits: sleep until someone does
                self.waits.arrived.wait(1.0)
                self.waits.arrived.clear()
                continue
            try:
                for name in waited:
                    self._tail_stream(name)
            except Exception as exc:  # the refresh reads it again; say why in the log
                log.warning("tail of marks failed: %s", exc)
            self._stop.wait(self.tail_s)

    def _tail_stream(self, name: str) -> None:
        with self._lock:
            history = self._history.get(name)
        if history is None:
            return
        commit = history.tail.next_commit_file()
        if commit is None or not os.path.exists(commit):
            return  # no new version (an object store: left to the refresh, one read per turn)
        if self._poll_history(history):
            self.waits.changed(name)

    def _poll_history(self, history: _History) -> int:
        with self._polling:
            return history.poll(self._lock)

    def refresh_all(self) -> None:
        names = self.store.list_streams()
        for name in names:
            self._refresh_stream(name)
        with self._lock:
            for gone in set(self._meta) - set(names):
                self._meta.pop(gone, None)
                self._history.pop(gone, None)
        self.refreshes += 1

    def _refresh_stream(self, name: str) -> StreamMetadata:
        meta = live_metadata(self.store, name)
        with self._lock:
            self._meta[name] = meta
            history = self._history.get(name)
            if history is None:
                history = self._history[name] = _History(self.location, name, self._history_limit)
        self.index.refresh(name, force=True)
        if self._poll_history(history):
            self.waits.changed(name)
        return meta

    # --- lookups ------------------------------------------------------------------------------

    def metadata(self, stream: str) -> StreamMetadata:
        """The stream's metadata as of the last refresh (read now when not known yet)."""
        with self._lock:
            meta = self._meta.get(stream)
        return meta if meta is not None else self._refresh_stream(stream)

    def start_lookup(self, stream: str, timestamp: object) -> Found | None:
        """``SeekIndex.start``: the watermark to start at for ``timestamp``; None: the head."""
        ts = check_timestamp(timestamp)
        self.metadata(stream)
        return self._found(stream, self.index.start_position(stream, ts))

    def stop_lookup(self, stream: str, timestamp: object) -> Found | None:
        """``SeekIndex.stop``: the watermark to stop at; None: not complete yet."""
        ts = check_timestamp(timestamp)
        self.metadata(stream)
        return self._found(stream, self.index.stop_position(stream, ts))

    def _found(self, stream: str, position: int | None) -> Found | None:
        """The index row at ``position`` with its cut: from the history when it holds it
        (no Delta read), else from ``marks`` through the index's cache."""
        if position is None:
            return None
        seqs, times, upper = self.index.columns(stream)
        seq = seqs[position]
        with self._lock:
            history = self._history.get(stream)
            cut = None if history is None else history.cuts.get(seq)
        if cut is None:
            cut = self.index.cut(stream, seq)
        return Found(seq, times[position], upper[position], dict(cut))

    def reached(self, stream: str, t: int) -> tuple[Watermark | int | None, Watermark | None]:
        """(the first watermark with ``time >= t``, else ``None``, or the ``seq`` of one
        older than the kept history -- :meth:`first_from_delta` reads it; the latest
        watermark), from memory."""
        self.metadata(stream)
        with self._lock:
            history = self._history.get(stream)
            if history is None:  # dropped by a refresh just now
                return None, None
            return history.first_reaching(stream, t), history.latest(stream)

    def first_from_delta(self, stream: str, t: int) -> Watermark | None:
        """The first watermark with ``time >= t`` from the ``marks`` table (blocking I/O)."""
        found = read_watermarks(self.location, stream, since=t)
        return found[0] if found else None

    def streams(self) -> list[StreamMetadata]:
        with self._lock:
            return [self._meta[n] for n in sorted(self._meta)]

    def history(self, stream: str, since_ms: int | None = None) -> list[HistoryPoint]:
        """The stream's watermarks emitted at or after ``since_ms`` (all kept ones: None)."""
        self.metadata(stream)
        with self._lock:
            points = list(self._history[stream].points)
        if since_ms is None:
            return points
        return [p for p in points if p.emitted_at >= since_ms]

    def latest(self, stream: str) -> HistoryPoint | None:
        with self._lock:
            history = self._history.get(stream)
            return history.points[-1] if history is not None and history.points else None

    def watermark_count(self, stream: str) -> int:
        with self._lock:
            history = self._history.get(stream)
            return 0 if history is None else history.count

    # --- Delta time travel ---------------------------------------------------------------------

    def watermarks(
        self,
        stream: str,
        *,
        since_ms: int = 0,
        version: int | None = None,
        as_of_ms: int | None = None,
        limit: int = 1000,
    ) -> tuple[int | None, list[dict[str, Any]]]:
        """The stream's watermarks with time >= ``since_ms`` in the ``marks`` table as of a
        table ``version`` or a time ``as_of_ms`` (latest: neither); (version read, rows)."""
        if version is not None and as_of_ms is not None:
            raise ConfigurationError("give version or as_of, not both")
        self.metadata(stream)
        try:
            read, rows = read_marks_as_of(
                self.location, stream, since_ms=since_ms, version=version, as_of_ms=as_of_ms
            )
        except DeltaUnavailableError as exc:
            raise ConfigurationError(str(exc)) from exc
        return read, [
            {
                "seq": r["seq"],
                "time": r["time"],
                "upper_time": r["upper_time"],
                "emitted_at": r["emitted_at"],
                "writers": list(r["writers"] or ()),
                "stream_cut": cut_to_json(cut_from_cell(r["stream_cut"])),
                "observed": observation_of(r),
            }
            for r in rows[-limit:]
        ]

    def rejected(self, stream: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """The latest rejected marks (all streams: None), newest first."""
        return read_rejected(self.location, stream, limit)

    def laggards(self, stream: str | None = None) -> dict[str, list[dict[str, Any]]]:
        """Per stream (all: None), the writers holding its watermark back -- id, instance,
        noted time, first and last seen -- from the last snapshot in ``laggards``;
        streams nobody holds back are left out."""
        return laggards_by_stream(read_table(self.location, LAGGARDS, stream))

    def tables(self) -> list[dict[str, Any]]:
        """Every table tracked under the delta root (``table_completeness``), by name: the
        time it is complete through at which version, or why that is unknown, and how far
        it is behind its streams' latest watermarks (this service's warm index)."""
        return [s.as_row() for s in tables_status(index=self.index, delta_root=self.location)]

    # --- other views ----------------------------------------------------------------------------

    def group_lags(self, now_ms: int) -> list[dict[str, Any]]:
        """Every reader group's lag in records and in time (the metrics' cached figures),
        the furthest behind in time first; groups with no time yet first of all."""
        if self.zk_client is not None and not self.zk_client.connected:
            # the groups are listed from ZooKeeper: asking now would wait for the session
            raise ServiceUnavailableError(ZOOKEEPER, "not connected (reader groups live there)")
        try:
            lags = self.group_lag.lags()
        except TidemarkError as exc:  # Kafka's end offsets: the broker does not answer
            raise ServiceUnavailableError(KAFKA, str(exc)) from exc
        rows = [{**asdict(g), "time_lag_ms": g.time_lag_ms(now_ms)} for g in lags]
        rows.sort(
            key=lambda r: (r["time_lag_ms"] is not None, -(r["time_lag_ms"] or 0), r["group"])
        )
        return rows

    def controller(self) -> dict[str, Any]:
        """The controller drivers alive (the leader runs every bucket) and its last batch
        (from ZooKeeper)."""
        try:
            view = controller_view(self.zk_client, self.cluster.zk_root, self.cluster.marks_topic)
        except ZooKeeperUnavailableError as exc:
            raise ServiceUnavailableError(ZOOKEEPER, str(exc)) from exc
        members = [] if view.leader is None else [view.leader, *view.standbys]
        return {
            "leader": view.leader,
            "standbys": list(view.standbys),
            "members": members,
            "buckets": {str(b): view.leader for b in range(self.cluster.bucket_count)},
            "marks_topic": self.cluster.marks_topic,
            "last_batch": view.progress,
        }

    def window(self, group_name: str) -> dict[str, Any]:
        """A reader group's committed position and its time window."""
        with open_group(
            group_name,
            store=self.store,
            bootstrap_servers=self.bootstrap_servers,
            delta_root=self.location,
        ) as group:
            window = group.current_time_window()
            cut = group.stream_cut()
            readers = group.online_readers()
            stream = group.stream
        return {
            "group": group_name,
            "stream": stream,
            "lower": window.lower,
            "upper": window.upper,
            "stream_cut": cut_to_json(cut),
            "readers": readers,
        }

    def timeline_counts(
        self, from_ms: int | None = None, to_ms: int | None = None
    ) -> list[dict[str, Any]] | None:
        """Per timeline, messages by status with a time in [from_ms, to_ms); None: no database."""
        if self.postgres_dsn is None:
            return None
        import psycopg  # only with a database (the timeline extra)

        from tidemark.pipelines.timeline.exceptions import TimelineError
        from tidemark.pipelines.timeline.store import TimelineStore

        try:
            store = TimelineStore(self.postgres_dsn)
        except TimelineError as exc:
            raise ServiceUnavailableError(POSTGRESQL, str(exc)) from exc
        try:
            store.migrate()  # an empty database gets the schema from whoever first needs it
            return [
                {"timeline": t.name, **asdict(store.count(t.name, from_ms, to_ms))}
                for t in store.timelines()
            ]
        except psycopg.OperationalError as exc:
            raise ServiceUnavailableError(POSTGRESQL, str(exc)) from exc
        finally:
            store.close()


def stream_json(meta: StreamMetadata, latest: HistoryPoint | None, now_ms: int) -> dict[str, Any]:
    """A stream's epochs and segments, and its latest watermark, as JSON."""
    current = meta.current_epoch().number
    return {
        "stream": meta.name,
        "topic": meta.topic,
        "state": str(meta.state.value if hasattr(meta.state, "value") else meta.state),
        "current_epoch": current,
        "epochs": [
            {
                "number": e.number,
                "created_at": e.created_at_ms,
                "segments": [
                    {
                        "id": s.id,
                        "number": s.number,
                        "key_range": [s.key_range.low, s.key_range.high],
                        "sealed_size": meta.sealed_sizes.get(s.id),
                        "active": e.number == current,
                    }
                    for s in e.segments
                ],
            }
            for e in meta.epochs
        ],
        "truncation": cut_to_json(meta.truncation),
        "watermark": None
        if latest is None
        else {
            "seq": latest.seq,
            "time": latest.time,
            "upper_time": latest.upper_time,
            "lag_ms": max(0, now_ms - latest.time),
        },
    }


class _StreamCollector(Collector):
    """``tidemark_stream_*``: what the service sees of each stream, computed when scraped.

    The one home of a stream's watermark lag and time: the service reads every stream's
    watermarks from Delta (the controller only knows those it wrote since it started).
    Watermarks written are counted by the controller (``tidemark_controller_watermarks_total``).
    """

    def __init__(self, service: TimeService) -> None:
        self.service = service

    def collect(self) -> Iterable[Any]:
        now = wall_ms()
        lag = GaugeMetricFamily(
            "tidemark_stream_watermark_lag_seconds",
            "Wall clock now minus the time of the stream's latest watermark.",
            labels=["stream"],
        )
        at = GaugeMetricFamily(
            "tidemark_stream_watermark_time_seconds",
            "Time of the stream's latest watermark.",
            labels=["stream"],
        )
        segments = GaugeMetricFamily(
            "tidemark_stream_active_segments", "Segments of the current epoch.", labels=["stream"]
        )
        epoch = GaugeMetricFamily(
            "tidemark_stream_epoch", "The stream's current epoch.", labels=["stream"]
        )
        for meta in self.service.streams():
            name = meta.name
            latest = self.service.latest(name)
            if latest is not None:
                lag.add_metric([name], max(0, now - latest.time) / 1000)
                at.add_metric([name], latest.time / 1000)
            segments.add_metric([name], len(meta.current_epoch().segments))
            epoch.add_metric([name], meta.current_epoch().number)
        yield from (lag, at, segments, epoch)


__all__ = ["HistoryPoint", "StreamWaits", "TimeService", "stream_json", "wall_ms"]
