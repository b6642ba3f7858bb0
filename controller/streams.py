"""Stream operations on real Kafka and the metadata store.

    manager = StreamManager(ZooKeeperStore(client), "127.0.0.1:9092")
    manager.create_scope("shop")
    manager.create("shop/orders", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    manager.scale("shop/orders", sealed=[0], new_ranges=[KeyRange(0, 0.25), KeyRange(0.25, 0.5)])
    manager.truncate("shop/orders", {segment_id(1, 2): 0, segment_id(1, 3): 0, 1: 10})
    manager.seal("shop/orders"); manager.delete("shop/orders")

Segments and partitions
    A stream is the topic ``topic_for(stream)``; a segment is the partition
    whose index is the segment's *number* (``segment_id & 0xffffffff``).
    Numbers grow across epochs: a scale's new segments get the next
    partitions (added with ``create_partitions``), so partitions are never
    reused and a segment id names one partition forever.

Operations are steps, each idempotent
    Every operation first moves the stream record (compare-and-set) into its
    busy state with the request recorded as ``pending``; only one operation
    runs on a stream at a time, and another request gets
    :class:`ConcurrentOperationError` ("stream is scaling"). If the process
    dies in the middle, repeating the *same* request (or :meth:`resume`)
    re-runs the remaining steps and completes it. A scale runs:

    1. ``started``: state ``scaling``, ``PendingScale`` recorded (nothing else changed);
    2. ``partitions``: the topic grown to cover the new segments;
    3. ``epoch``: the new epoch record written (old segments leave the current
       epoch, i.e. they are sealed) -- writers watching the stream switch now;
    4. after ``seal_drain_ms``: the sealed segments' Kafka end offsets
       recorded in ``sealed_sizes``, state back to ``active``.

How a scale fences writers (Kafka cannot seal a partition)
    The sealed size is the truth: a sealed segment's content is its records
    at offsets below its sealed size, and readers never read past it. A
    writer watches the stream (``store.watch_stream``); when the current
    epoch no longer holds a segment it wrote to, it routes new events by the
    new epoch but, for keys of the sealed segments, first flushes what is in
    flight, waits until ``sealed_sizes`` names the segment (state back to
    ``active``; about ``seal_drain_ms`` later), and re-sends to the successor,
    in order, every event acknowledged at an offset >= the sealed size. A
    transactional writer aborts and replays a transaction that touched a
    segment sealed while it was open. Guarantee: every acknowledged event is
    read exactly once, in per-key order, across any number of scales -- the
    drain only makes re-sends rare -- provided readers see the new epoch
    within ``seal_drain_ms`` (they look every ``ReaderConfig.metadata_interval_ms``,
    100 ms by default, and hold a sealed segment until its size is recorded;
    a reader that saw the epoch later logs what it read past the size).
    :meth:`seal` works the same way for the whole stream
    (``tidemark.controller.states.require_writable`` refuses appends).

Readers' navigation (per-key order)
    ``tidemark.controller.navigation.readable_segments(metadata, finished)``: a
    segment may be read once all its predecessors are read to their sealed
    size (a reader's position marks them -1). Start from
    ``navigation.head_cut(metadata)``.

Adopting an existing topic
    :meth:`adopt` registers a topic that existed before as a stream: its
    partitions become epoch 0's segments (segment ``i`` = partition ``i``),
    no record and no topic setting is touched unless ``apply_topic_config``
    asks for the stream configuration's settings. Producers that route keys
    with Kafka's partitioner cannot keep per-key order across a scale, so an
    adopted stream refuses :meth:`scale` unless adopted with
    ``tidemark_routing=True``, and refuses :meth:`delete` (it would remove a
    topic tidemark did not create); :meth:`release` unregisters it and
    leaves the topic as it is.

Truncation deletes the records before the cut (``delete_records``), empties
the segments wholly before it, then records the cut; it is refused when
behind the current truncation point. Delete needs a sealed stream and
removes the topic, then the metadata.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from tidemark.controller.config import (
    ScalingPolicy,
    StreamConfiguration,
    TimestampingMode,
    topic_configs,
)
from tidemark.controller.exceptions import (
    AdoptionError,
    ConcurrentOperationError,
    ConflictError,
    InvalidCutError,
    KafkaOperationError,
    StreamExistsError,
    StreamNameCollisionError,
    UnknownStreamError,
)
from tidemark.controller.kafka.admin import StreamTopics
from tidemark.controller.metadata import (
    Adoption,
    PendingScale,
    PendingSeal,
    PendingTruncate,
    PendingUpdate,
    StreamMetadata,
    Versioned,
    adopted_stream_metadata,
    new_stream_metadata,
)
from tidemark.controller.model import KeyRange
from tidemark.controller.naming import (
    ClusterSettings,
    bucket_of,
    collision_key,
    split_stream,
    topic_for,
)
from tidemark.controller.planning import is_done_scale, plan_scale, segments_before, validate_cut
from tidemark.controller.states import StreamState, require_transition
from tidemark.controller.store import MetadataStore
from tidemark.controller.timestamps import wall_clock_ms

log = logging.getLogger(__name__)

S = StreamState
StepHook = Callable[[str, str], None]
"""``hook(operation, step)`` runs after each step; tests raise from it to simulate a crash."""

_BEGIN_ATTEMPTS = 3


class StreamManager:
    """Create, describe, update, scale, truncate, seal, delete and list streams."""

    def __init__(
        self,
        store: MetadataStore,
        kafka_bootstrap: str,
        settings: ClusterSettings | None = None,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        seal_drain_ms: int = 200,
        step_hook: StepHook | None = None,
        topics: StreamTopics | None = None,
    ) -> None:
        self.store = store
        self.topics = topics or StreamTopics(kafka_bootstrap)
        self.settings = settings or ClusterSettings()
        self.clock = clock
        self.seal_drain_ms = seal_drain_ms
        self._hook = step_hook

    # --- scopes ------------------------------------------------------------------------------

    def create_scope(self, scope: str) -> bool:
        """Create ``scope`` (streams are created only in an existing scope); idempotent:
        ``False`` when it existed."""
        return self.store.create_scope(scope)

    def delete_scope(self, scope: str) -> None:
        """Delete an empty scope (:class:`ScopeNotEmptyError` while it holds streams)."""
        self.store.delete_scope(scope)

    def list_scopes(self) -> list[str]:
        return self.store.list_scopes()

    # --- queries -----------------------------------------------------------------------------

    def describe(self, stream: str) -> StreamMetadata:
        split_stream(stream)
        return self.store.get_stream(stream)

    def list(self, scope: str | None = None) -> list[str]:
        return self.store.list_streams(scope)

    def bucket_of(self, stream: str) -> int:
        return bucket_of(stream, self.settings.bucket_count)

    def segment_offsets(self, stream: str) -> dict[int, tuple[int, int]]:
        """Segment id -> (first, next) offset in Kafka, for every segment of the stream."""
        meta = self.describe(stream)
        segs = meta.segments()
        numbers = [s.number for s in segs.values()]
        starts = self.topics.start_offsets(meta.topic, numbers)
        ends = self.topics.end_offsets(meta.topic, numbers)
        return {sid: (starts[s.number], ends[s.number]) for sid, s in segs.items()}

    # --- create / update -------------------------------------------------------------------

    def create(self, stream: str, config: StreamConfiguration) -> StreamMetadata:
        """Record the stream (state ``creating``), create its topic, make it ``active``.

        All or nothing: a name that would collide with another stream's topic is
        refused before anything is written, and when the Kafka step fails the
        metadata record is removed again (the error says so), so the same
        ``create`` can simply be repeated. A crash between the steps leaves
        ``creating``, which ``resume`` (or ``create`` again) completes.
        """
        split_stream(stream)
        self._refuse_collision(stream)
        try:
            v = self.store.create_stream(new_stream_metadata(stream, config, self.clock()))
        except StreamExistsError:
            v = self.store.read_stream(stream)
            if v.metadata.state is not S.CREATING or v.metadata.config != config:
                raise
            log.info("resuming the creation of stream %r", stream)
        self._step("create", "recorded")
        meta = v.metadata
        try:
            found = self.topics.create(meta.topic, meta.partition_count(), topic_configs(config))
            self.topics.alter_configs(meta.topic, topic_configs(config))
            if found != meta.partition_count():
                raise KafkaOperationError(
                    f"topic {meta.topic!r} has {found} partitions, stream {stream!r} expects "
                    f"{meta.partition_count()}: a topic of that name existed before"
                )
        except KafkaOperationError as exc:
            self.store.delete_stream(stream, v.version)
            raise KafkaOperationError(
                f"stream {stream!r} was not created (its metadata is removed again): {exc}"
            ) from exc
        self._step("create", "topic")
        return self._move(v, S.ACTIVE).metadata

    def _refuse_collision(self, stream: str) -> None:
        wanted = collision_key(topic_for(stream))
        for other in self.store.list_streams():
            if other != stream and collision_key(topic_for(other)) == wanted:
                raise StreamNameCollisionError(stream, other)

    def update(self, stream: str, config: StreamConfiguration) -> StreamMetadata:
        """Change the configuration (and the topic settings that carry it)."""
        v = self._read(stream)
        meta = v.metadata
        if meta.state is S.UPDATING and meta.pending == PendingUpdate(config):
            log.info("resuming the update of stream %r", stream)
        elif meta.state is S.ACTIVE and meta.config == config:
            return meta
        else:
            v = self._begin(stream, S.UPDATING, lambda m: PendingUpdate(config))
        self._step("update", "started")
        self.topics.alter_configs(meta.topic, topic_configs(config))
        self._step("update", "topic")
        return self._move(v, S.ACTIVE, config=config).metadata

    # --- scale -----------------------------------------------------------------------------

    def scale(
        self, stream: str, sealed: Sequence[int], new_ranges: Sequence[KeyRange]
    ) -> StreamMetadata:
        """Seal ``sealed`` (adjacent active segments) and replace them with ``new_ranges``."""
        sealed_t = tuple(sorted(sealed))
        ranges_t = tuple(sorted(new_ranges))
        v = self._read(stream)
        meta = v.metadata
        if meta.adoption is not None and not meta.adoption.tidemark_routing:
            raise AdoptionError(
                f"stream {stream!r} was adopted over topic {meta.topic!r} whose producers route "
                "keys with Kafka's partitioner: after a scale a key would move to another "
                "partition and lose its order. Adopt it with tidemark routing (producers "
                "routing by the stream's key ranges) to scale it"
            )
        pending = meta.pending
        if meta.state is S.SCALING and isinstance(pending, PendingScale):
            if (pending.sealed, pending.new_ranges) != (sealed_t, ranges_t):
                raise ConcurrentOperationError(
                    stream,
                    meta.state,
                    S.SCALING,
                    f"stream is scaling (sealing {list(pending.sealed)}); repeat that request "
                    "or wait",
                )
            log.info("resuming the scale of stream %r", stream)
        elif meta.state is S.ACTIVE and is_done_scale(meta, sealed_t, ranges_t):
            return meta  # the same request again, after it completed

        else:

            def plan(m: StreamMetadata) -> PendingScale:
                at_ms = max(self.clock(), m.current_epoch().created_at_ms)
                epoch = plan_scale(m, sealed_t, ranges_t, at_ms)
                return PendingScale(sealed_t, ranges_t, at_ms, epoch.number)

            v = self._begin(stream, S.SCALING, plan)
        return self._finish_scale(v)

    def _finish_scale(self, v: Versioned) -> StreamMetadata:
        meta = v.metadata
        pending = meta.pending
        assert isinstance(pending, PendingScale)
        self._step("scale", "started")
        appended = meta.current_epoch().number >= pending.epoch
        if appended:
            self.topics.ensure_partitions(meta.topic, meta.partition_count())
        else:
            epoch = plan_scale(meta, pending.sealed, pending.new_ranges, pending.at_ms)
            self.topics.ensure_partitions(meta.topic, max(s.number for s in epoch.segments) + 1)
            self._step("scale", "partitions")
            v = self.store.replace_stream(
                meta.with_changes(epochs=(*meta.epochs, epoch)), v.version
            )
            log.info(
                "stream %r: epoch %d written, segments %s sealed",
                meta.name,
                epoch.number,
                list(pending.sealed),
            )
        self._step("scale", "epoch")
        sizes = self._measure(v.metadata, pending.sealed)
        return self._move(v, S.ACTIVE, sealed_sizes={**v.metadata.sealed_sizes, **sizes}).metadata

    def _measure(self, meta: StreamMetadata, seg_ids: Sequence[int]) -> dict[int, int]:
        """Kafka end offsets of segments just sealed, after the writers' drain time."""
        if self.seal_drain_ms > 0:
            time.sleep(self.seal_drain_ms / 1000)
        segs = meta.segments()
        ends = self.topics.end_offsets(meta.topic, [segs[s].number for s in seg_ids])
        return {s: ends[segs[s].number] for s in seg_ids}

    # --- truncate ----------------------------------------------------------------------------

    def truncate(self, stream: str, cut: Mapping[int, int]) -> StreamMetadata:
        """Delete everything before ``cut`` and make it the stream's head."""
        wanted = {int(k): int(v) for k, v in cut.items()}
        v = self._read(stream)
        meta = v.metadata
        pending = meta.pending
        if meta.state is S.TRUNCATING and isinstance(pending, PendingTruncate):
            if dict(pending.cut) != wanted:
                raise ConcurrentOperationError(
                    stream, meta.state, S.TRUNCATING, "stream is truncating at another cut"
                )
        elif meta.state is S.ACTIVE and dict(meta.truncation) == wanted:
            return meta
        else:

            def plan(m: StreamMetadata) -> PendingTruncate:
                checked = validate_cut(m, wanted)
                self._check_offsets(m, checked)
                return PendingTruncate(checked)

            v = self._begin(stream, S.TRUNCATING, plan)
        self._step("truncate", "started")
        meta = v.metadata
        segs = meta.segments()
        before = {segs[s].number: -1 for s in segments_before(meta, wanted)}
        at = {segs[s].number: off for s, off in wanted.items() if off > 0}
        self.topics.delete_records(meta.topic, {**before, **at})
        self._step("truncate", "deleted")
        return self._move(v, S.ACTIVE, truncation=wanted).metadata

    def _check_offsets(self, meta: StreamMetadata, cut: Mapping[int, int]) -> None:
        segs = meta.segments()
        ends = self.topics.end_offsets(meta.topic, [segs[s].number for s in cut])
        for seg_id, offset in cut.items():
            end = ends[segs[seg_id].number]
            if offset > end:
                raise InvalidCutError(
                    f"offset {offset} of segment {seg_id} lies beyond its end offset {end}"
                )

    # --- seal / delete -----------------------------------------------------------------------

    def seal(self, stream: str) -> StreamMetadata:
        """No writer may write to the stream afterwards; sealed sizes are recorded."""
        v = self._read(stream)
        meta = v.metadata
        if meta.state is S.SEALED:
            return meta
        if meta.state is not S.SEALING:
            v = self._begin(stream, S.SEALING, lambda m: PendingSeal())
        self._step("seal", "started")
        active = [s.id for s in v.metadata.current_epoch().segments]
        sizes = self._measure(v.metadata, active)
        return self._move(v, S.SEALED, sealed_sizes={**v.metadata.sealed_sizes, **sizes}).metadata

    def delete(self, stream: str) -> None:
        """Remove a sealed stream: its topic, then its metadata."""
        v = self._read(stream)
        if v.metadata.adoption is not None:
            raise AdoptionError(
                f"stream {stream!r} was adopted over topic {v.metadata.topic!r}, which tidemark "
                "did not create; `release` unregisters the stream and leaves the topic"
            )
        if v.metadata.state is not S.DELETING:
            v = self._begin(stream, S.DELETING, lambda m: None)
        self._step("delete", "started")
        self.topics.delete(v.metadata.topic)
        self._step("delete", "topic")
        self.store.delete_stream(stream, v.version)

    # --- adopt / release -------------------------------------------------------------------

    def adopt(
        self,
        stream: str,
        topic: str,
        *,
        tidemark_routing: bool = False,
        config: StreamConfiguration | None = None,
        apply_topic_config: bool = False,
    ) -> StreamMetadata:
        """Register the existing ``topic`` as ``stream`` (its partitions as epoch 0).

        ``config`` defaults to one fixed segment per partition, with the
        timestamping the topic already has (``arrival`` for LogAppendTime).
        Adopting the same topic again returns the stream as it is.
        """
        split_stream(stream)
        if topic == self.settings.marks_topic:
            raise AdoptionError(f"topic {topic!r} is the marks topic; it cannot be a stream")
        partitions = self.topics.partition_count(topic)
        if partitions is None:
            raise AdoptionError(
                f"topic {topic!r} does not exist; adopt takes an existing topic "
                f"(`stream create` makes a new one)"
            )
        try:
            existing = self.store.get_stream(stream)
        except UnknownStreamError:
            existing = None
        if existing is not None:
            if existing.adoption is not None and existing.topic == topic:
                return existing
            raise AdoptionError(
                f"stream {stream!r} already exists (topic {existing.topic!r}); "
                "choose another name or release it first"
            )
        for other in self.store.list_streams():
            if self.store.get_stream(other).topic == topic:
                raise AdoptionError(f"topic {topic!r} is already the topic of stream {other!r}")
        if config is None:
            current = self.topics.topic_configs(topic)
            mode = TimestampingMode.CLIENT_PREFER
            if current.get("message.timestamp.type") == "LogAppendTime":
                mode = TimestampingMode.ARRIVAL
            config = StreamConfiguration(
                scaling_policy=ScalingPolicy.fixed(partitions), timestamping=mode
            )
        if config.initial_segments != partitions:
            raise AdoptionError(
                f"topic {topic!r} has {partitions} partitions but the configuration asks for "
                f"{config.initial_segments} segments; an adopted stream has one per partition"
            )
        if apply_topic_config:
            self.topics.alter_configs(topic, topic_configs(config))
        meta = adopted_stream_metadata(
            stream, topic, partitions, config, Adoption(tidemark_routing, self.clock())
        )
        try:
            created = self.store.create_stream(meta).metadata
        except StreamExistsError:  # a concurrent adopt of the same name
            return self.adopt(stream, topic, tidemark_routing=tidemark_routing, config=config)
        log.info("adopted topic %r (%d partitions) as stream %r", topic, partitions, stream)
        return created

    def release(self, stream: str) -> StreamMetadata:
        """Unregister an adopted stream; its topic, records and settings stay as they are."""
        v = self._read(stream)
        meta = v.metadata
        if meta.adoption is None:
            raise AdoptionError(
                f"stream {stream!r} was created by tidemark, not adopted; seal and delete it"
            )
        if meta.state not in (S.ACTIVE, S.SEALED):
            raise ConcurrentOperationError(
                stream, meta.state, meta.state, f"stream is {meta.state}; release it afterwards"
            )
        self.store.delete_stream(stream, v.version)
        log.info("released stream %r; topic %r left as it is", stream, meta.topic)
        return meta

    def resume(self, stream: str) -> StreamMetadata | None:
        """Complete an operation a crash interrupted (None when the stream got deleted)."""
        meta = self._read(stream).metadata
        match meta.state, meta.pending:
            case S.CREATING, _:
                return self.create(stream, meta.config)
            case S.SCALING, PendingScale() as p:
                return self.scale(stream, p.sealed, p.new_ranges)
            case S.TRUNCATING, PendingTruncate() as p:
                return self.truncate(stream, p.cut)
            case S.UPDATING, PendingUpdate() as p:
                return self.update(stream, p.config)
            case S.SEALING, _:
                return self.seal(stream)
            case S.DELETING, _:
                self.delete(stream)
                return None
        return meta

    # --- helpers -------------------------------------------------------------------------------

    def _read(self, stream: str) -> Versioned:
        split_stream(stream)
        return self.store.read_stream(stream)

    def _begin(
        self,
        stream: str,
        target: StreamState,
        plan: Callable[
            [StreamMetadata], PendingScale | PendingTruncate | PendingUpdate | PendingSeal | None
        ],
    ) -> Versioned:
        """Move ``active`` (or ``sealed``) -> ``target`` with the planned request recorded.

        ``plan`` validates the request against the metadata read (raising
        before anything changes); a lost race is re-read and re-judged.
        """
        for attempt in range(_BEGIN_ATTEMPTS):
            v = self.store.read_stream(stream)
            require_transition(stream, v.metadata.state, target)
            pending = plan(v.metadata)
            try:
                return self.store.replace_stream(
                    v.metadata.with_changes(state=target, pending=pending), v.version
                )
            except ConflictError:
                if attempt == _BEGIN_ATTEMPTS - 1:
                    raise
                log.info("stream %r changed while starting %s; re-reading", stream, target)
        raise AssertionError("unreachable")  # pragma: no cover

    def _move(self, v: Versioned, target: StreamState, **changes: object) -> Versioned:
        """Finish a step: ``v``'s busy state -> ``target``, pending cleared."""
        require_transition(v.metadata.name, v.metadata.state, target)
        return self.store.replace_stream(
            v.metadata.with_changes(state=target, pending=None, **changes), v.version
        )

    def _step(self, operation: str, step: str) -> None:
        log.debug("%s: step %s done", operation, step)
        if self._hook is not None:
            self._hook(operation, step)


__all__ = ["StepHook", "StreamManager", "wall_clock_ms"]
