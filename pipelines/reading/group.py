"""Reader groups: a Kafka consumer group that reads a stream segment by segment.

    group = ReaderGroup.create("billing", "shop/orders", store=store,
                               bootstrap_servers=bootstrap, delta_root="/data/delta",
                               from_time=1_700_000_000_000)
    reader = group.reader("reader-1")
    group.stream_cut()              # the group's committed position: {segment id: offset}
    group.current_time_window()     # TimeWindow at that position
    group.seek(1_700_000_600_000)   # move it (no reader may be online)
    group.initiate_checkpoint("c1").result()   # a consistent, durable position
    group.reset_to("c1")            # back there (no reader may be online)

The group's **position** is the Kafka consumer group's committed offsets
(group id = the group's name): a stream cut once read through
``tidemark.pipelines.reading.view.group_view`` (finished segments dropped, successors
added as they become readable). The group's registry
(``tidemark.pipelines.reading.registry``; ZooKeeper beside a ``ZooKeeperStore``)
records its stream and the cut it started at, and which reader owns which
segment.

``from_time=t`` starts every reader at **one** cut, ``stream_cut_at(t)``
(the latest watermark whose running-max upper time is below ``t``), committed
as the group's offsets before any reader exists -- not a per-partition guess.
Nothing with time >= ``t`` lies before it (for well-behaved writers).

A failed call never moves the position: names, stream, timestamp and cut are
all checked before anything is committed.

``ReaderGroup.create(name, streams=[...], from_time=t)`` makes a group over
several streams instead (``tidemark.pipelines.reading.streams_group``): one member
group per stream, readers reading them all.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Required, TypedDict, Unpack, overload

from tidemark.controller.closing import Closing
from tidemark.controller.delta.location import Root, TableLocation
from tidemark.controller.exceptions import UnknownStreamError
from tidemark.controller.kafka import roles
from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.model import Segment, StreamCut, TimeWindow
from tidemark.controller.navigation import head_cut
from tidemark.controller.store import MetadataStore
from tidemark.pipelines.reading.checkpoints import Checkpoint, PendingCheckpoint, load_checkpoint
from tidemark.pipelines.reading.config import RESERVED_CONSUMER_KEYS, ReaderConfig
from tidemark.pipelines.reading.exceptions import (
    ReaderClosedError,
    ReaderConfigError,
    ReaderGroupActiveError,
    ReaderGroupExistsError,
    StreamDeletedError,
    UnknownCheckpointError,
    UnknownReaderGroupError,
)
from tidemark.pipelines.reading.offsets import KafkaOffsets, MemoryOffsets, OffsetStore
from tidemark.pipelines.reading.reader import EventReader
from tidemark.pipelines.reading.registry import (
    GroupRecord,
    GroupRegistry,
    MemoryGroupRegistry,
    check_name,
    registry_for,
)
from tidemark.pipelines.reading.seek import (
    SeekIndex,
    at_or_after_head,
    check_timestamp,
    live_metadata,
    start_cut_for,
    wall_clock_ms,
)
from tidemark.pipelines.reading.streams_group import MemberGroup, StreamsReaderGroup
from tidemark.pipelines.reading.time_service import default_index
from tidemark.pipelines.reading.view import GroupView, cut_commits, group_view, sizes_pending
from tidemark.pipelines.reading.windows import WatermarkFeed, reader_position, window_at

log = logging.getLogger(__name__)


class GroupHome(TypedDict, total=False):
    """Where a group lives (``store`` and ``bootstrap_servers`` required): the keywords
    every way of opening a group takes, written once for :func:`open_group`,
    :func:`open_streams_group` and the member groups of a group over several streams."""

    store: Required[MetadataStore]
    bootstrap_servers: Required[str]
    delta_root: Root
    config: ReaderConfig | None
    registry: GroupRegistry | None


class GroupPlace(GroupHome, total=False):
    """The keywords both kinds of :meth:`ReaderGroup.create` take: where the group
    lives and where it starts."""

    from_time: object
    index: SeekIndex | None


class ReaderGroup(Closing):
    """A named group of readers sharing one position on one stream.

    ``ReaderGroup(name, stream, ...)`` opens the group, creating it at the
    stream's head when it does not exist; ``ReaderGroup(name, ...)`` (no
    stream) opens an existing one (:class:`UnknownReaderGroupError`
    otherwise). :meth:`create` creates one at a chosen time or cut.
    """

    def __init__(
        self,
        name: str,
        stream: str | None = None,
        *,
        store: MetadataStore,
        bootstrap_servers: str,
        delta_root: Root = None,
        config: ReaderConfig | None = None,
        registry: GroupRegistry | None = None,
        ephemeral: bool = False,
        _record: GroupRecord | None = None,
    ) -> None:
        self.name = check_name("reader group", name)
        self.store = store
        self.bootstrap_servers = bootstrap_servers
        self.delta_root = delta_root
        self.config = config or ReaderConfig()
        self.registry = registry or registry_for(store)
        self.ephemeral = ephemeral
        self._lock = threading.RLock()
        self._readers: dict[str, EventReader] = {}
        self._feed: WatermarkFeed | None = None
        self._closed = False
        self.peers: tuple[str, ...] = ()
        """Member groups of the other streams, when this one is a member of a group
        over several streams (their readers count in alignment's lower bound)."""
        created = False
        if _record is None:
            try:
                _record = self.registry.get(self.name)
            except UnknownReaderGroupError:
                if stream is None:
                    raise
                _record = _new_record(self.name, stream, head_cut(live_metadata(store, stream)))
                self.registry.create(_record)
                created = True
        if _record.streams:
            raise ReaderConfigError(
                f"reader group {self.name!r} reads several streams ({_record.stream}): "
                "open it with open_streams_group"
            )
        if stream is not None and stream != _record.stream:
            raise ReaderGroupExistsError(self.name, _record.stream)
        self.record = _record
        self.stream = _record.stream
        self._meta = self._metadata()
        self.topic = self._meta.topic
        self._index_segments(self._meta)
        self.offsets: OffsetStore = (
            MemoryOffsets()
            if ephemeral
            else KafkaOffsets(
                self.topic,
                self.consumer_settings(client_id=f"tidemark-{self.name}"),
                timeout_s=self.config.kafka_timeout_ms / 1000,
            )
        )
        if created:
            try:
                self._commit_cut(self._meta, _record.start_cut)
            except BaseException:
                self.registry.delete(self.name)
                raise

    # --- creating ---------------------------------------------------------------------------

    @overload
    @classmethod
    def create(
        cls,
        name: str,
        stream: str,
        *,
        start_cut: StreamCut | None = None,
        ephemeral: bool = False,
        **where: Unpack[GroupPlace],
    ) -> ReaderGroup: ...

    @overload
    @classmethod
    def create(
        cls, name: str, stream: None = None, *, streams: Sequence[str], **where: Unpack[GroupPlace]
    ) -> StreamsReaderGroup: ...

    @classmethod
    def create(
        cls,
        name: str,
        stream: str | None = None,
        *,
        streams: Sequence[str] | None = None,
        store: MetadataStore,
        bootstrap_servers: str,
        delta_root: Root = None,
        from_time: object = None,
        start_cut: StreamCut | None = None,
        config: ReaderConfig | None = None,
        registry: GroupRegistry | None = None,
        index: SeekIndex | None = None,
        ephemeral: bool = False,
    ) -> ReaderGroup | StreamsReaderGroup:
        """A new group on ``stream``, positioned at ``from_time`` (``stream_cut_at``),
        at ``start_cut``, or at the head; :class:`ReaderGroupExistsError` if the name
        is taken. Every reader starts from that one cut. ``ephemeral``: the position
        lives in memory, not in Kafka (see :meth:`ephemeral_group`).

        ``streams=[...]`` instead of ``stream``: a group over those streams
        (:class:`~tidemark.pipelines.reading.streams_group.StreamsReaderGroup`), each at its
        own ``stream_cut_at(from_time)`` or head (``start_cut`` and ``ephemeral``
        are for one stream)."""
        check_name("reader group", name)
        if (stream is None) == (streams is None):
            raise ReaderConfigError("give a stream or streams=[...] (one of them)")
        reg = registry or registry_for(store)
        home = GroupHome(
            store=store,
            bootstrap_servers=bootstrap_servers,
            delta_root=delta_root,
            config=config,
            registry=reg,
        )
        if streams is not None:
            if start_cut is not None or ephemeral:
                raise ReaderConfigError("start_cut and ephemeral are for a one-stream group")
            return StreamsReaderGroup.create(
                name,
                streams,
                store=store,
                registry=reg,
                member=_members(home),
                from_time=from_time,
                delta_root=delta_root,
                index=index,
            )
        assert stream is not None
        if from_time is not None and start_cut is not None:
            raise ReaderConfigError("give from_time or start_cut, not both")
        meta = live_metadata(store, stream)
        if from_time is not None:
            # the running time service when one is configured, else Delta
            idx = index or default_index(delta_root)
            cut = start_cut_for(stream, check_timestamp(from_time), meta, idx)
        elif start_cut is not None:
            cut = at_or_after_head(start_cut, meta)
        else:
            cut = head_cut(meta)
        record = _new_record(name, stream, cut)
        reg.create(record)
        try:
            group = cls(name, stream, ephemeral=ephemeral, _record=record, **home)
            group._commit_cut(meta, cut)
        except BaseException:
            reg.delete(name)
            raise
        log.info("reader group %s created on %s at %s", name, stream, cut)
        return group

    @classmethod
    def ephemeral_group(
        cls,
        stream: str,
        start_cut: StreamCut | None,
        *,
        store: MetadataStore,
        bootstrap_servers: str,
        delta_root: Root = None,
        config: ReaderConfig | None = None,
    ) -> ReaderGroup:
        """A private, unregistered group whose position lives in memory (for one-off reads):
        :meth:`create` with a registry and offsets of this process alone."""
        return cls.create(
            f"tidemark-read-{uuid.uuid4().hex[:12]}",
            stream,
            start_cut=start_cut or None,
            config=config,
            store=store,
            bootstrap_servers=bootstrap_servers,
            delta_root=delta_root,
            registry=MemoryGroupRegistry(),
            ephemeral=True,
        )

    # --- readers ----------------------------------------------------------------------------

    def reader(self, name: str) -> EventReader:
        """A new reader in this group (one per name while it is online)."""
        self._check_open()
        check_name("reader", name)
        return EventReader(self, name)

    def online_readers(self) -> list[str]:
        return self.registry.readers(self.name)

    # --- position and time ------------------------------------------------------------------

    def view(self) -> GroupView:
        """The group's state from its committed offsets (metadata read afresh)."""
        meta = self._metadata()
        return group_view(meta, self.committed_offsets(meta.segments()), self.record.start_cut)

    def stream_cut(self) -> dict[int, int]:
        """The group's committed position as a stream cut (empty: a sealed stream read through)."""
        return self.view().cut

    def current_time_window(self) -> TimeWindow:
        """The time window at the group's committed position."""
        self._check_open()
        view = self.view()
        segments = self.segments()
        position = reader_position(view.cut, view.finished, segments)
        return window_at(self.watermark_feed(), position, segments)

    def seek(self, timestamp: object = None, *, cut: StreamCut | None = None) -> dict[int, int]:
        """Move the group to ``stream_cut_at(timestamp)`` (or to ``cut``); returns the cut.

        Refused (:class:`ReaderGroupActiveError`) while readers are online;
        every check runs before anything is committed.
        """
        self._check_open()
        if (timestamp is None) == (cut is None):
            raise ReaderConfigError("seek needs a timestamp or a cut (one of them)")
        meta = self._metadata()
        if timestamp is not None:
            idx = default_index(self._lake())
            target = start_cut_for(self.stream, check_timestamp(timestamp), meta, idx)
        else:
            assert cut is not None
            target = at_or_after_head(cut, meta)
        online = self.online_readers()
        if online:
            raise ReaderGroupActiveError(self.name, online)
        self._commit_cut(meta, target)
        self.record = self.record.moved_to(target)
        self.registry.replace(self.record)
        log.info("reader group %s moved to %s", self.name, target)
        return dict(target)

    # --- checkpoints -----------------------------------------------------------------------

    def initiate_checkpoint(
        self, name: str, *, timeout_ms: int = 30_000, keep_request: bool = False
    ) -> PendingCheckpoint:
        """Start taking checkpoint ``name`` of the whole group
        (``tidemark.pipelines.reading.checkpoints``).

        Online readers commit, acknowledge and hold still at their next
        ``read_next``; ``.result()`` waits for them and returns the
        :class:`Checkpoint`. With no reader online it is taken on the first
        ``done()``/``result()``. :class:`CheckpointExistsError` when the name is
        taken, :class:`CheckpointInProgressError` while another is being taken.
        """
        self._check_open()
        return PendingCheckpoint(self, name, timeout_ms=timeout_ms, keep_request=keep_request)

    def checkpoints(self) -> list[Checkpoint]:
        """The group's taken checkpoints, oldest first."""
        found = [self.checkpoint(n) for n in self.registry.checkpoint_names(self.name)]
        return sorted(found, key=lambda c: (c.taken_at_ms, c.name))

    def checkpoint(self, name: str) -> Checkpoint:
        """A taken checkpoint (:class:`UnknownCheckpointError` otherwise)."""
        found = load_checkpoint(self.registry, self.name, check_name("checkpoint", name))
        if found is None:
            raise UnknownCheckpointError(self.name, name)
        return found

    def delete_checkpoint(self, name: str) -> None:
        self.checkpoint(name)
        self.registry.delete_checkpoint(self.name, name)

    def reset_to(self, target: Checkpoint | str | StreamCut) -> dict[int, int]:
        """Move the group to a checkpoint (or its name) or to a stream cut; returns the cut.

        Committed offsets, ``read_next`` and windows all start from there: nothing
        before it is read again, nothing after it is skipped. Refused
        (:class:`ReaderGroupActiveError`) while readers are online.
        """
        self._check_open()
        if isinstance(target, str):
            target = self.checkpoint(target)
        if isinstance(target, Checkpoint):
            if target.group != self.name or target.stream != self.stream:
                raise ReaderConfigError(
                    f"checkpoint {target.name!r} is of group {target.group!r} on "
                    f"{target.stream!r}, not of {self.name!r} on {self.stream!r}"
                )
            cut: StreamCut = target.stream_cut
        elif isinstance(target, Mapping):
            cut = _checked_cut(target)
        else:
            raise ReaderConfigError(
                f"reset_to takes a Checkpoint, a checkpoint name or a stream cut, got {target!r}"
            )
        return self.seek(cut=cut)

    # --- plumbing used by readers -----------------------------------------------------------

    def consumer_settings(self, client_id: str) -> dict[str, Any]:
        # The consumers never join the group (assigned, not subscribed): the session
        # timeout only bounds how long a close waits for a commit that a gone broker
        # never answers (librdkafka's default, 45 s, would hold every reader's close).
        return roles.READER_CONSUMER.config(
            self.bootstrap_servers,
            {
                "group.id": self.name,
                "client.id": client_id,
                "session.timeout.ms": self.config.kafka_timeout_ms,
                **self.config.consumer_overrides,
            },
        )

    def committed_offsets(self, seg_ids: Iterable[int]) -> dict[int, int]:
        """Segment id -> committed offset, for those that have one."""
        return self.offsets.committed(seg_ids)

    def commit_offsets(self, offsets: Mapping[int, int], consumer: Any = None) -> None:
        """Commit segment id -> offset as the group's position."""
        self.offsets.commit(offsets, consumer=consumer)

    def attach(self, reader: EventReader) -> None:
        """Count ``reader`` among this process's readers (closed with the group)."""
        with self._lock:
            self._readers[reader.name] = reader

    def detach(self, reader: EventReader) -> None:
        with self._lock:
            if self._readers.get(reader.name) is reader:
                del self._readers[reader.name]

    def _commit_cut(self, meta: StreamMetadata, cut: StreamCut) -> None:
        self.commit_offsets(cut_commits(meta, cut))

    def segments(self) -> Mapping[int, Segment]:
        return self._segments

    def segment_of(self, partition: int) -> int:
        found = self._by_number.get(partition)
        if found is None:
            self._metadata()
            found = self._by_number[partition]
        return found

    def sealed_size(self, seg_id: int) -> int | None:
        return self._sealing[0].get(seg_id)

    def sealing(self) -> tuple[Mapping[int, int], frozenset[int]]:
        """The sealed sizes recorded, and the segments sealed whose sizes are not yet
        (``view.sizes_pending``: readers hold them), from one metadata read."""
        return self._sealing

    def refresh(self) -> None:
        """Read the stream's metadata again (epochs, sealed sizes)."""
        self._metadata()

    def _lake(self) -> TableLocation:
        """Where the watermark tables are (resolved on use: a group that never asks
        about time needs no delta root)."""
        return TableLocation.of(self.delta_root)

    def watermark_feed(self) -> WatermarkFeed:
        with self._lock:
            if self._feed is None:
                self._feed = WatermarkFeed(
                    self._lake(),
                    self.stream,
                    refresh_interval_ms=self.config.window_refresh_interval_ms,
                )
            return self._feed

    def _metadata(self) -> StreamMetadata:
        try:
            meta = live_metadata(self.store, self.stream, self.name)
        except StreamDeletedError:
            raise
        except UnknownStreamError as exc:
            raise StreamDeletedError(self.stream, self.name) from exc
        if getattr(self, "_meta", None) is not meta:
            self._meta = meta
            self._index_segments(meta)
        return meta

    def _index_segments(self, meta: StreamMetadata) -> None:
        self._segments = dict(meta.segments())
        self._by_number = {s.number: s.id for s in self._segments.values()}
        self._sealing = (meta.sealed_sizes, sizes_pending(meta))

    # --- lifecycle --------------------------------------------------------------------------

    def delete(self) -> None:
        """Forget the group (registry and Kafka consumer group); no reader may be online."""
        online = self.online_readers()
        if online:
            raise ReaderGroupActiveError(self.name, online)
        self.registry.delete(self.name)
        self.offsets.forget()
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ReaderClosedError(f"reader group {self.name!r} is closed")

    def close(self) -> None:
        """Close this process's readers of the group (committing their positions)."""
        if self._closed:
            return
        self._closed = True
        for reader in list(self._readers.values()):
            reader.close()
        self.offsets.close()


def _checked_cut(cut: Mapping[Any, Any]) -> dict[int, int]:
    out: dict[int, int] = {}
    for seg, offset in cut.items():
        if type(seg) is not int or type(offset) is not int or offset < 0:
            raise ReaderConfigError(
                f"a stream cut maps int segment ids to offsets >= 0, got {dict(cut)!r}"
            )
        out[seg] = offset
    return out


def _new_record(name: str, stream: str, cut: StreamCut) -> GroupRecord:
    return GroupRecord(name, stream, dict(cut), wall_clock_ms())


def open_group(name: str, **home: Unpack[GroupHome]) -> ReaderGroup:
    """An existing group (:class:`UnknownReaderGroupError` otherwise)."""
    return ReaderGroup(name, **home)


def open_streams_group(name: str, **home: Unpack[GroupHome]) -> StreamsReaderGroup:
    """An existing group over several streams (:class:`UnknownReaderGroupError` otherwise)."""
    registry = home.get("registry") or registry_for(home["store"])
    return StreamsReaderGroup.open(name, registry, _members({**home, "registry": registry}))


def _members(home: GroupHome) -> MemberGroup:
    """How a group over several streams makes (at a cut) or opens its member groups
    (``home``'s registry given, so that every member shares it)."""

    def member(name: str, stream: str, cut: StreamCut | None) -> ReaderGroup:
        if cut is None:
            return ReaderGroup(name, stream, **home)
        return ReaderGroup.create(name, stream, start_cut=cut, **home)

    return member


__all__ = [
    "RESERVED_CONSUMER_KEYS",
    "ReaderConfig",
    "ReaderGroup",
    "StreamsReaderGroup",
    "open_group",
    "open_streams_group",
]
