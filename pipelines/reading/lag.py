"""How far a reader group is behind: in records (Kafka) and in time (the watermarks).

    lag = group_lag(group)                 # GroupLag(group, stream, records, time, readers)
    lag.time_lag_ms(now_ms)                # wall clock minus the group's time

``records`` counts, over every segment the group has not finished, the committed records
between the group's committed offset and the segment's end (its sealed size, else its last
stable offset: what ``read_committed`` readers can reach), as ``kafka-consumer-groups
--describe`` sums LAG. ``time`` is the lower bound of the group's time window at its
committed position: every event before it has been read. ``tidemark group list`` and
``describe``, and the time service's ``tidemark_reader_group_*`` metrics, show them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tidemark.controller.kafka.admin import StreamTopics
from tidemark.pipelines.reading.group import ReaderGroup
from tidemark.pipelines.reading.view import GroupView


@dataclass(frozen=True)
class GroupLag:
    """A group's lag: ``records`` still to read; ``time``: its time (None: no watermark
    at its position yet); ``readers``: how many are online."""

    group: str
    stream: str
    records: int
    time: int | None
    readers: int

    def time_lag_ms(self, now_ms: int) -> int | None:
        """Wall clock minus the group's time (None while the group has no time)."""
        return None if self.time is None else max(0, now_ms - self.time)


def lag_records(view: GroupView, ends: Mapping[int, int]) -> int:
    """Records between the group's offsets and ``ends`` (segment id -> end offset) over the
    segments it has not finished (a segment with no known end counts nothing)."""
    return sum(
        max(0, ends[seg] - offset)
        for seg, offset in view.offsets.items()
        if seg not in view.finished and seg in ends
    )


def group_lag(group: ReaderGroup, topics: StreamTopics | None = None) -> GroupLag:
    """``group``'s lag now (one metadata read, one ``ListOffsets`` for its open segments)."""
    view = group.view()
    sealed, _ = group.sealing()
    segments = group.segments()
    ends = {seg: size for seg, size in sealed.items() if seg not in view.finished}
    open_segments = [seg for seg in view.offsets if seg not in view.finished and seg not in sealed]
    if open_segments:
        admin = topics or StreamTopics(group.bootstrap_servers)
        stable = admin.last_stable_offsets(group.topic, [segments[s].number for s in open_segments])
        ends.update({seg: stable[segments[seg].number] for seg in open_segments})
    window = group.current_time_window()
    return GroupLag(
        group.name,
        group.stream,
        lag_records(view, ends),
        window.lower,
        len(group.online_readers()),
    )


__all__ = ["GroupLag", "group_lag", "lag_records"]
