"""What a Spark Python worker looks up: stream metadata and writer registrations
(ZooKeeper), and last stable offsets.

    streams = worker_streams(settings)      # one per process, cached
    streams.stream("shop/orders")           # StreamMetadata | None
    worker_registrations(settings).registrations("shop/orders", "w1", token, batch_ms)
    lso = worker_committed(settings)
    lso.last_stable("tidemark.shop.orders", {0: 17})

Both are built once per worker process (Spark reuses Python workers) and keep
their connections. Cached metadata is dropped when its stream's record
changes (a ZooKeeper watch per cached stream, set before it is read): a
``tidemark stream update`` of the writer timeout, start-up delay or time
bounds reaches the next batch that meets the stream. It is also read again
when a mark names a segment it does not know (a scale the watch has not told
yet) or the stream is not known yet.
Registrations are read only for a mark whose token is not the one its writer
id is bound to (the workflow asks no more), and kept: they are only ever
added, so a cached list that names a registration after the mark's token's
answers (it stays superseded), and so does one read after the mark reached
Kafka (a writer registers before its first mark); a list whose last entry is
the mark's token is read again (each worker process caches on its own, and a
later registration may have come since);
a forged token costs at most one read per writer id and micro-batch.
Last stable offsets only grow, so a cached value at or above what a cut
needs answers without asking Kafka; so does one read after the caller's
records were stored (``fresh_since_ms``: the micro-batch's timestamp).
When one must be asked, every partition a cut needed in the last
``RECENT_S`` seconds is asked in the same request: the streams of a
micro-batch then cost one round trip between them, not one each.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tidemark.controller.admission import Registration
from tidemark.controller.exceptions import InvalidModelError, UnknownStreamError
from tidemark.controller.kafka import roles
from tidemark.controller.kafka.admin import StreamTopics
from tidemark.controller.kafka.retry import LEADER_MOVING, KafkaRetry
from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.naming import is_stream_name
from tidemark.controller.zookeeper.session import close_session, open_session
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.jobs.config import WorkflowSettings

log = logging.getLogger(__name__)

_lock = threading.Lock()
_streams: dict[tuple[str, str], ZooKeeperStreams] = {}
_committed: dict[str, KafkaCommittedOffsets] = {}
_registrations: dict[tuple[str, str], ZooKeeperRegistrations] = {}

RECENT_S = 60.0
"""Partitions a cut needed this recently are refreshed with any other's request."""


class ZooKeeperStreams:
    """:class:`tidemark.jobs.workflow.StreamLookup` over the ZooKeeper metadata store, cached while
    unchanged (see the module docstring)."""

    def __init__(self, zk_connect: str, root: str) -> None:
        self.zk_connect = zk_connect
        self.root = root
        self._client: Any = None
        self._store: ZooKeeperStore | None = None
        self._cache: dict[str, StreamMetadata] = {}
        self._watched: set[str] = set()
        """Streams with a watch set that has not fired: only their reads are cached."""
        self._lock = threading.Lock()
        """Guards both against the watches (the session's thread)."""
        self.changes = 0
        """Cached streams dropped because their record changed (for tests)."""

    def store(self) -> ZooKeeperStore:
        """The metadata store (the session opened on first use)."""
        return self._get_store()

    def _get_store(self) -> ZooKeeperStore:
        if self._store is None:
            self._client = open_session(self.zk_connect)
            self._store = ZooKeeperStore(self._client, self.root)
        return self._store

    def _watch(self, streams: Sequence[str]) -> None:
        """A watch on each of ``streams`` not watched yet (before reading them: a change
        after the read then always fires). A name that is no stream (a hostile mark's key)
        is not watched: it is rejected later, and must not cost the valid names their watch."""
        with self._lock:
            new = [s for s in streams if s not in self._watched and is_stream_name(s)]
            self._watched.update(new)
        if not new:
            return
        try:
            self._get_store().watch_once(new, self._changed)
        except BaseException:
            with self._lock:  # not watched after all: nothing of theirs may be cached
                self._watched.difference_update(new)
            raise

    def _changed(self, stream: str) -> None:
        with self._lock:
            self._watched.discard(stream)
            if self._cache.pop(stream, None) is not None:
                self.changes += 1

    def _remember(self, stream: str, meta: StreamMetadata) -> None:
        """Cache ``meta`` unless the stream's watch fired since it was set: the read may
        predate the change, so the next lookup reads (and watches) again."""
        with self._lock:
            if stream in self._watched:
                self._cache[stream] = meta

    def stream(self, stream: str, refresh: bool = False) -> StreamMetadata | None:
        if not refresh:
            with self._lock:
                cached = self._cache.get(stream)
            if cached is not None:
                return cached
        self._watch([stream])
        try:
            meta: StreamMetadata = self._get_store().get_stream(stream)
        except (UnknownStreamError, InvalidModelError):
            with self._lock:
                self._cache.pop(stream, None)
            return None
        self._remember(stream, meta)
        return meta

    def prefetch(self, streams: Sequence[str]) -> None:
        """Read the streams not cached yet together (:meth:`ZooKeeperStore.read_streams`):
        a worker new to a thousand streams waited for two round trips per stream, one
        after the other, in its first batches. Any failure leaves them to :meth:`stream`."""
        with self._lock:
            missing = [s for s in streams if s not in self._cache and is_stream_name(s)]
        if len(missing) < 2:
            return
        try:
            self._watch(missing)
            found = self._get_store().read_streams(missing)
        except Exception as exc:  # each is looked up on its own, with its own errors
            log.debug("prefetching %d streams failed: %s", len(missing), exc)
            return
        for stream, versioned in found.items():
            self._remember(stream, versioned.metadata)

    def close(self) -> None:
        if self._client is not None:
            close_session(self._client)
            self._client = None
            self._store = None
        with self._lock:
            self._cache.clear()
            self._watched.clear()


class ZooKeeperRegistrations:
    """:class:`tidemark.jobs.workflow.RegistrationLookup` over the metadata store's
    registration znodes, cached (see the module docstring)."""

    MAX_CACHED = 100_000
    """Writer ids kept; the oldest read is dropped beyond (a flood of forged ids)."""

    def __init__(self, streams: ZooKeeperStreams) -> None:
        self._streams = streams
        self._cache: dict[tuple[str, str], tuple[tuple[Registration, ...], int]] = {}
        """(stream, writer id) -> its registrations and when (wall ms) they were asked for."""
        self._lock = threading.Lock()
        self.reads = 0
        """Registrations read from ZooKeeper (for tests)."""

    def registrations(
        self, stream: str, writer_id: str, claimed: str | None, fresh_since_ms: int | None
    ) -> tuple[Registration, ...]:
        key = (stream, writer_id)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            found, read_at = cached
            # A registration cached after the claimed one settles it (superseded, whatever
            # was added since); the claimed one cached last does not: a later one may have
            # been added since the read (by another worker process's cache, say).
            later = any(r.instance == claimed for r in found[:-1])
            if later or (fresh_since_ms is not None and read_at >= fresh_since_ms):
                return found
        if not is_stream_name(stream):
            return ()
        read_at = int(time.time() * 1000)
        found = self._streams.store().writer_registrations(stream, writer_id, latest=True)
        with self._lock:
            self.reads += 1
            self._cache.pop(key, None)
            if len(self._cache) >= self.MAX_CACHED:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = (found, read_at)
        return found


_LOOKUP_RETRY = KafkaRetry(LEADER_MOVING, timeout_s=10.0)
"""A lookup answered with a leader moving is asked again, not failed (an unknown
partition is not retried: a deleted stream's topic is left out, and a partition new to
the client is asked again by a fresh one, see ``last_stable``)."""


class KafkaCommittedOffsets:
    """:class:`tidemark.jobs.workflow.CommittedOffsets` through the admin API
    (``READ_COMMITTED``)."""

    def __init__(self, bootstrap: str, timeout_s: float = 30.0) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._topics: StreamTopics | None = None
        self._cache: dict[tuple[str, int], int] = {}
        self._read_at: dict[tuple[str, int], int] = {}
        """When (wall ms) each cached value was asked for: it is at least Kafka's value then."""
        self._used: dict[tuple[str, int], float] = {}

    def query(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """The last stable offsets of ``topic``'s ``partitions`` (raises if one is unknown)."""
        found = self.query_keys([(topic, p) for p in partitions], required=True)
        return {p: off for (_, p), off in found.items()}

    def retained(self, topic: str, partitions: list[int]) -> int:
        """Records (and transaction markers) ``topic``'s partitions still hold."""
        ends = self.query_keys([(topic, p) for p in partitions], required=True)
        starts = self.query_keys([(topic, p) for p in partitions], required=True, earliest=True)
        return sum(ends[k] - starts[k] for k in ends)

    def query_keys(
        self,
        keys: list[tuple[str, int]],
        required: bool | set[tuple[str, int]],
        earliest: bool = False,
    ) -> dict[tuple[str, int], int]:
        """Last stable offsets (``earliest``: first offsets) of ``(topic, partition)`` keys
        in one request (:meth:`StreamTopics.stable_offsets`). A key that fails raises when
        ``required`` (all, or those in the set), else is left out and no longer asked for."""
        if self._topics is None:
            self._topics = StreamTopics(
                self.bootstrap,
                self.timeout_s,
                role=roles.CONTROLLER_LOOKUPS,
                retry=_LOOKUP_RETRY,
            )
        found = self._topics.stable_offsets(keys, required, earliest)
        for key in set(keys) - found.keys():
            self._used.pop(key, None)  # a deleted stream's topic, say: stop asking
        return found

    def expect(self, topic: str, partitions: Sequence[int]) -> None:
        """Ask for ``partitions`` with the next request (as if a cut had just needed them)."""
        now = time.monotonic()
        for p in partitions:
            self._used[(topic, p)] = now

    def last_stable(
        self, topic: str, needed: Mapping[int, int], fresh_since_ms: int | None = None
    ) -> Mapping[int, int]:
        self.expect(topic, list(needed))
        known = {p: self._cache.get((topic, p), -1) for p in needed}
        if all(known[p] >= off for p, off in needed.items()):
            return known
        if fresh_since_ms is not None and all(
            self._read_at.get((topic, p), -1) >= fresh_since_ms for p in needed
        ):
            return known  # read after everything the caller needs was stored
        now = time.monotonic()
        self._used = {k: t for k, t in self._used.items() if now - t < RECENT_S}
        wanted = {(topic, p) for p in needed}
        fresh: dict[tuple[str, int], int] | None = None
        asked_ms = int(time.time() * 1000)
        for attempt in (1, 2):
            try:
                fresh = self.query_keys(sorted(self._used.keys() | wanted), required=wanted)
                break
            except Exception as exc:  # Kafka unreachable, or partitions new to this client
                # A scale adds partitions the client's metadata cache does not know yet
                # (UNKNOWN_PARTITION): a fresh client asks the brokers again. If that
                # fails too, the cycle holds and retries next time.
                log.warning("last stable offsets of %s (attempt %d): %s", topic, attempt, exc)
                self._topics = None
        if fresh is None:
            return known
        for key, off in fresh.items():
            self._cache[key] = max(off, self._cache.get(key, -1))
            self._read_at[key] = asked_ms
        return {p: self._cache[(topic, p)] for p in needed}


def worker_streams(settings: WorkflowSettings) -> ZooKeeperStreams:
    key = (settings.zk_connect, settings.zk_root)
    with _lock:
        found = _streams.get(key)
        if found is None:
            found = _streams[key] = ZooKeeperStreams(*key)
        return found


def worker_registrations(settings: WorkflowSettings) -> ZooKeeperRegistrations:
    streams = worker_streams(settings)
    key = (settings.zk_connect, settings.zk_root)
    with _lock:
        found = _registrations.get(key)
        if found is None:
            found = _registrations[key] = ZooKeeperRegistrations(streams)
        return found


def worker_committed(settings: WorkflowSettings) -> KafkaCommittedOffsets:
    with _lock:
        found = _committed.get(settings.kafka_bootstrap)
        if found is None:
            found = _committed[settings.kafka_bootstrap] = KafkaCommittedOffsets(
                settings.kafka_bootstrap
            )
        return found


__all__ = [
    "KafkaCommittedOffsets",
    "ZooKeeperRegistrations",
    "ZooKeeperStreams",
    "worker_committed",
    "worker_registrations",
    "worker_streams",
]
