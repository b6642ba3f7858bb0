"""Reader groups over several streams: the segments of all of them shared among readers.

    group = ReaderGroup.create("joiner", streams=["shop/orders", "shop/payments"],
                               store=store, bootstrap_servers=bootstrap,
                               delta_root="/data/delta", from_time=t)
    reader = group.reader("r1")
    event = reader.read_next(1_000)        # an EventRead; event.stream names its stream
    group.current_time_window()            # the joint window (tidemark.pipelines.reading.streams)
    group.initiate_checkpoint("c1").result()
    group.reset_to("c1")                   # every stream back to its cut (no reader online)

Each stream is read by a **member group** of its own, an ordinary
:class:`~tidemark.pipelines.reading.group.ReaderGroup` named ``<name>.<i>`` (``i``: the
stream's place in the list), so one stream's segments are shared among the
readers, kept in Kafka and checkpointed exactly as for a one-stream group. A
reader of this group is one reader in every member group; ``read_next`` takes
the events of its members in turn.

- **Time window**: lower = the smallest of the streams' lower bounds,
  upper = the largest upper bound (:func:`~tidemark.pipelines.reading.streams.joint_window`):
  the group never reports a lower bound above any stream's.
- **Start**: ``from_time=t`` starts each stream at its own ``stream_cut_at(t)``,
  so no event with time >= ``t`` is skipped on any of them.
- **Checkpoints**: a checkpoint is one checkpoint of the same name in every
  member, requested together; it exists once all are taken (a member that
  times out withdraws the others). ``reset_to`` moves every member.
- **Alignment** (``max_drift_ms``): each member's readers count the readers
  of the other members in the lower bound they pause by
  (``ReaderGroup.peers``, ``tidemark.pipelines.reading.balance``), so a stream running
  ahead of the slowest one by more than the drift pauses.

Every check (names, streams, timestamp, online readers) runs before anything
is created or moved; a failed create leaves no member behind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidemark.controller.closing import Closing
from tidemark.controller.delta.location import Root
from tidemark.controller.model import StreamCut, TimeWindow
from tidemark.controller.navigation import head_cut, start_or_head
from tidemark.controller.store import MetadataStore
from tidemark.pipelines.reading.checkpoints import POLL_S, Checkpoint, PendingCheckpoint
from tidemark.pipelines.reading.exceptions import (
    CheckpointExistsError,
    CheckpointTimeoutError,
    ReaderConfigError,
    ReaderGroupActiveError,
    UnknownCheckpointError,
)
from tidemark.pipelines.reading.reader import EventRead, EventReader
from tidemark.pipelines.reading.registry import GroupRecord, GroupRegistry, check_name
from tidemark.pipelines.reading.seek import (
    SeekIndex,
    check_timestamp,
    live_metadata,
    wall_clock_ms,
)
from tidemark.pipelines.reading.streams import check_streams, joint_window
from tidemark.pipelines.reading.time_service import default_index

if TYPE_CHECKING:
    from tidemark.pipelines.reading.group import ReaderGroup

MemberGroup = Callable[[str, str, "StreamCut | None"], "ReaderGroup"]
"""``(member name, stream, cut)`` -> the member group: created at ``cut``, or opened
(created at the head when missing) for ``None`` -- ``tidemark.pipelines.reading.group`` gives
it, so that this module needs no import of that one."""

log = logging.getLogger(__name__)

TURN_WAIT_MS = 20
"""How long ``read_next`` waits on one member reader when none has an event at hand,
before looking at the next (a stream's events must not wait behind another's poll)."""


def member_names(name: str, count: int) -> list[str]:
    """The member groups' names, ``<name>.<i>`` (each a valid group name)."""
    return [check_name("reader group", f"{name}.{i}") for i in range(count)]


@dataclass(frozen=True)
class StreamsCheckpoint:
    """A checkpoint of a group over several streams: one :class:`Checkpoint` per stream."""

    name: str
    group: str
    checkpoints: Mapping[str, Checkpoint]

    @property
    def stream_cuts(self) -> dict[str, dict[int, int]]:
        return {s: dict(c.stream_cut) for s, c in self.checkpoints.items()}

    @property
    def window(self) -> TimeWindow:
        """The joint time window at the checkpoint."""
        return joint_window(TimeWindow(c.lower, c.upper) for c in self.checkpoints.values())

    @property
    def taken_at_ms(self) -> int:
        return max(c.taken_at_ms for c in self.checkpoints.values())


class PendingStreamsCheckpoint:
    """A checkpoint being taken in every member; :meth:`result` waits for all of them.

    Each member's request stands until every member's checkpoint is taken: a reader
    that has reached one stream's place holds still on that stream while it reads on to
    the others' places, so what it returns before the checkpoint's place is exactly
    what the cuts hold. A daemon thread moves it on, as for one stream's checkpoint."""

    def __init__(self, group: StreamsReaderGroup, name: str, *, timeout_ms: int) -> None:
        self.group = group
        self.name = check_name("checkpoint", name)
        self._pending: dict[str, PendingCheckpoint] = {}
        self._lock = threading.Lock()
        self._taken = False
        self._over = threading.Event()
        try:
            for stream, member in group.members.items():
                self._pending[stream] = member.initiate_checkpoint(
                    name, timeout_ms=timeout_ms, keep_request=True
                )
        except BaseException:
            self.cancel()
            raise
        threading.Thread(
            target=self._drive, name=f"checkpoint-{group.name}-{name}", daemon=True
        ).start()

    def done(self) -> bool:
        """True once every member's is taken (then the readers carry on); a member's
        timeout withdraws the rest and forgets those taken (:class:`CheckpointTimeoutError`)."""
        with self._lock:
            if self._taken:
                return True
            try:
                taken = all([p.done() for p in self._pending.values()])
            except CheckpointTimeoutError:
                self._over.set()
                self._undo()
                raise
            if taken:
                for pending in self._pending.values():
                    pending.release()
                self._taken = True
                self._over.set()
            return taken

    def _drive(self) -> None:
        """Until taken or given up: an initiator that never waits holds no reader still."""
        while not self._over.wait(PendingCheckpoint.DRIVE_S):
            try:
                self.done()
            except (CheckpointTimeoutError, CheckpointExistsError):
                return
            except Exception as exc:  # a member's drive withdraws its request at its deadline
                log.debug("reader group %s: checkpoint %s: %s", self.group.name, self.name, exc)

    def result(self, timeout_ms: int | None = None) -> StreamsCheckpoint:
        until = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        while not self.done():
            if until is not None and time.monotonic() >= until:
                missing = [r for p in self._pending.values() for r in p.missing()]
                self._undo()
                raise CheckpointTimeoutError(self.group.name, self.name, sorted(set(missing)))
            time.sleep(POLL_S)
        return StreamsCheckpoint(
            self.name, self.group.name, {s: p.result() for s, p in self._pending.items()}
        )

    def cancel(self) -> None:
        """Withdraw every member's request; nothing is recorded."""
        self._over.set()
        for pending in self._pending.values():
            pending.release()

    def _undo(self) -> None:
        self.cancel()
        for stream in self._pending:
            self.group.members[stream].registry.delete_checkpoint(
                self.group.members[stream].name, self.name
            )


class StreamsReader(Closing):
    """A reader of a group over several streams: one :class:`EventReader` per stream."""

    def __init__(self, group: StreamsReaderGroup, name: str) -> None:
        self.group = group
        self.name = name
        self.readers: dict[str, EventReader] = {}
        try:
            for stream, member in group.members.items():
                self.readers[stream] = member.reader(name)
        except BaseException:
            self.close()
            raise
        self._order = list(self.readers.values())
        self._turn = 0
        self._places: dict[str, set[int]] = {}
        """Checkpoint name -> the members whose reader has returned its place."""

    def read_next(
        self, timeout_ms: float | None = None, *, timeout: float | None = None
    ) -> EventRead | None:
        """The next event of any stream (``event.stream`` says which), or ``None`` when
        none came within ``timeout_ms`` (default 1000). The streams take turns.

        A checkpoint's place (``event.is_checkpoint``, ``event.stream`` the group's
        name) comes once every stream's reader has reached it."""
        wait_ms = timeout_ms if timeout_ms is not None else timeout
        deadline = time.monotonic() + (1000 if wait_ms is None else wait_ms) / 1000
        order, count = self._order, len(self._order)
        while True:
            for k in range(count):
                i = (self._turn + k) % count
                event = order[i].read_next(0)
                if event is not None:
                    self._turn = (i + 1) % count
                    event = self._placed(i, event)
                    if event is not None:
                        return event
            left_ms = (deadline - time.monotonic()) * 1000
            if left_ms <= 0:
                return None
            i = self._turn
            self._turn = (i + 1) % count
            event = order[i].read_next(min(left_ms, TURN_WAIT_MS))
            if event is not None:
                event = self._placed(i, event)
                if event is not None:
                    return event

    def _placed(self, member: int, event: EventRead) -> EventRead | None:
        """``event`` as this reader returns it: a member's checkpoint place is held
        back (``None``) until every member has reached the checkpoint."""
        name = event.checkpoint_name
        if name is None:
            return event
        reached = self._places.setdefault(name, set())
        reached.add(member)
        if len(reached) < len(self._order):
            return None
        del self._places[name]
        return EventRead.checkpoint(self.group.name, name)

    def position(self) -> dict[str, dict[int, int]]:
        """Each stream's reader position (``EventReader.position``)."""
        return {s: r.position() for s, r in self.readers.items()}

    def time_windows(self) -> dict[str, TimeWindow]:
        return {s: r.current_time_window() for s, r in self.readers.items()}

    def current_time_window(self) -> TimeWindow:
        """The joint time window at this reader's positions."""
        return joint_window(self.time_windows().values())

    def commit(self) -> None:
        for reader in self.readers.values():
            reader.commit()

    def close(self) -> None:
        """Close every stream's reader (committing its position)."""
        for reader in list(self.readers.values()):
            reader.close()


class StreamsReaderGroup(Closing):
    """A named group of readers sharing the segments of several streams.

    Made by ``ReaderGroup.create(name, streams=[...])`` and opened by
    ``tidemark.pipelines.reading.group.open_streams_group`` (they give the member groups).
    """

    def __init__(
        self, record: GroupRecord, registry: GroupRegistry, members: Sequence[ReaderGroup]
    ) -> None:
        self.name = record.name
        self.record = record
        self.registry = registry
        self.streams = list(record.streams)
        self.members: dict[str, ReaderGroup] = dict(zip(self.streams, members, strict=True))
        names = [m.name for m in members]
        for member in members:
            member.peers = tuple(n for n in names if n != member.name)

    @classmethod
    def open(cls, name: str, registry: GroupRegistry, member: MemberGroup) -> StreamsReaderGroup:
        """The existing group ``name`` (:class:`UnknownReaderGroupError` otherwise)."""
        record = registry.get(check_name("reader group", name))
        if not record.streams:
            raise ReaderConfigError(
                f"reader group {name!r} reads one stream ({record.stream}): "
                "open it with ReaderGroup"
            )
        opened: list[ReaderGroup] = []
        try:
            for stream, member_name in zip(
                record.streams, member_names(name, len(record.streams)), strict=True
            ):
                opened.append(member(member_name, stream, None))
        except BaseException:
            for group in opened:
                group.close()
            raise
        return cls(record, registry, opened)

    @classmethod
    def create(
        cls,
        name: str,
        streams: Sequence[str],
        *,
        store: MetadataStore,
        registry: GroupRegistry,
        member: MemberGroup,
        from_time: object = None,
        delta_root: Root = None,
        index: SeekIndex | None = None,
    ) -> StreamsReaderGroup:
        """A new group over ``streams``, each at its ``stream_cut_at(from_time)`` (or its
        head); :class:`ReaderGroupExistsError` if the name (or a member's) is taken."""
        check_name("reader group", name)
        names = check_streams(streams)
        members = member_names(name, len(names))
        metas = {s: live_metadata(store, s) for s in names}
        if from_time is not None:
            ts = check_timestamp(from_time)
            idx = index or default_index(delta_root)
            found = idx.start_cuts(names, ts)
            cuts = {s: start_or_head(found[s], metas[s]) for s in names}
        else:
            cuts = {s: head_cut(metas[s]) for s in names}
        record = GroupRecord(name, ", ".join(names), {}, wall_clock_ms(), tuple(names))
        registry.create(record)
        made: list[ReaderGroup] = []
        try:
            for stream, member_name in zip(names, members, strict=True):
                made.append(member(member_name, stream, cuts[stream]))
        except BaseException:
            for group in made:
                group.delete()
            registry.delete(name)
            raise
        log.info("reader group %s created on %s at %s", name, names, cuts)
        return cls(record, registry, made)

    # --- readers ----------------------------------------------------------------------------

    def reader(self, name: str) -> StreamsReader:
        """A new reader in this group: one reader of that name in every member."""
        check_name("reader", name)
        return StreamsReader(self, name)

    def online_readers(self) -> list[str]:
        """Readers online in any member, sorted."""
        return sorted({r for m in self.members.values() for r in m.online_readers()})

    # --- position and time ------------------------------------------------------------------

    def stream_cuts(self) -> dict[str, dict[int, int]]:
        """Each stream's committed position."""
        return {s: m.stream_cut() for s, m in self.members.items()}

    def time_windows(self) -> dict[str, TimeWindow]:
        """Each stream's time window at its committed position."""
        return {s: m.current_time_window() for s, m in self.members.items()}

    def current_time_window(self) -> TimeWindow:
        """The joint time window at the committed positions (see the module docstring)."""
        return joint_window(self.time_windows().values())

    def seek(
        self, timestamp: object = None, *, cuts: Mapping[str, StreamCut] | None = None
    ) -> dict[str, dict[int, int]]:
        """Move every stream to ``stream_cut_at(timestamp)`` (or to ``cuts``, one per
        stream); refused while readers are online, checked before anything moves."""
        if (timestamp is None) == (cuts is None):
            raise ReaderConfigError("seek needs a timestamp or cuts (one of them)")
        if cuts is not None and set(cuts) != set(self.streams):
            raise ReaderConfigError(
                f"cuts must name exactly the group's streams {self.streams}, got {sorted(cuts)}"
            )
        if timestamp is not None:
            check_timestamp(timestamp)
        self._check_offline()
        if cuts is not None:
            return {s: m.seek(cut=cuts[s]) for s, m in self.members.items()}
        return {s: m.seek(timestamp) for s, m in self.members.items()}

    # --- checkpoints ------------------------------------------------------------------------

    def initiate_checkpoint(
        self, name: str, *, timeout_ms: int = 30_000
    ) -> PendingStreamsCheckpoint:
        """Start taking checkpoint ``name`` of every stream (readers keep calling read_next)."""
        return PendingStreamsCheckpoint(self, name, timeout_ms=timeout_ms)

    def checkpoint(self, name: str) -> StreamsCheckpoint:
        """A taken checkpoint (:class:`UnknownCheckpointError` unless every stream has it)."""
        try:
            found = {s: m.checkpoint(name) for s, m in self.members.items()}
        except UnknownCheckpointError as exc:
            raise UnknownCheckpointError(self.name, name) from exc
        return StreamsCheckpoint(name, self.name, found)

    def checkpoints(self) -> list[StreamsCheckpoint]:
        """The checkpoints every stream has, oldest first."""
        named = [set(m.registry.checkpoint_names(m.name)) for m in self.members.values()]
        found = [self.checkpoint(n) for n in sorted(set.intersection(*named))]
        return sorted(found, key=lambda c: (c.taken_at_ms, c.name))

    def delete_checkpoint(self, name: str) -> None:
        self.checkpoint(name)
        for member in self.members.values():
            member.delete_checkpoint(name)

    def reset_to(
        self, target: StreamsCheckpoint | str | Mapping[str, StreamCut]
    ) -> dict[str, dict[int, int]]:
        """Move every stream to a checkpoint (or its name) or to ``{stream: cut}``."""
        if isinstance(target, str):
            target = self.checkpoint(target)
        if isinstance(target, StreamsCheckpoint):
            if target.group != self.name:
                raise ReaderConfigError(
                    f"checkpoint {target.name!r} is of group {target.group!r}, not {self.name!r}"
                )
            return self.seek(cuts=target.stream_cuts)
        if isinstance(target, Mapping):
            return self.seek(cuts=target)
        raise ReaderConfigError(
            "reset_to takes a StreamsCheckpoint, a checkpoint name or {stream: cut}, "
            f"got {target!r}"
        )

    # --- lifecycle --------------------------------------------------------------------------

    def _check_offline(self) -> None:
        online = self.online_readers()
        if online:
            raise ReaderGroupActiveError(self.name, online)

    def delete(self) -> None:
        """Forget the group and its members (no reader may be online)."""
        self._check_offline()
        for member in self.members.values():
            member.delete()
        self.registry.delete(self.name)

    def close(self) -> None:
        """Close this process's readers of every member."""
        for member in self.members.values():
            member.close()


__all__ = [
    "MemberGroup",
    "PendingStreamsCheckpoint",
    "StreamsCheckpoint",
    "StreamsReader",
    "StreamsReaderGroup",
    "member_names",
]
