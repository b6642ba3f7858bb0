"""How many bytes each segment of a stream holds, counted by reading each record once.

    sizes = SegmentSizes("127.0.0.1:9092")
    held = sizes.measure(meta)              # segment id -> policies.SegmentBytes
    held[0].from_offset(120)                # bytes at offset 120 and after

Kafka's clients cannot ask a broker for a partition's size (no
DescribeLogDirs in librdkafka), so the size of a stream is counted here: a
record's bytes are its key, value and headers (the payload, not Kafka's
batch framing). Each call reads only what was appended since the last one
(the first call reads each segment from its first retained record), and
keeps a running count at every ``mark_every``-th record, so the bytes after
any offset are known to within ``mark_every`` records -- counted high,
never low. When a truncation moves a segment's first offset, the marks
before it are dropped. The loop that uses this (``tidemark.controller.policy_loop``)
measures only streams whose policies need bytes (by-size retention,
scaling by byte rate).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from tidemark.controller.exceptions import KafkaOperationError
from tidemark.controller.kafka import roles
from tidemark.controller.kafka.admin import StreamTopics
from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.policies import SegmentBytes

log = logging.getLogger(__name__)

MAX_MARKS = 4096
"""Marks kept per segment; beyond it every other one is dropped (coarser, still high)."""


@dataclass
class _Counted:
    marks: list[tuple[int, int]] = field(default_factory=list)
    next_offset: int = 0
    total: int = 0
    since_mark: int = 0


def record_bytes(msg: Any) -> int:
    """A record's payload size: key, value and headers."""
    size = len(msg.key() or b"") + len(msg.value() or b"")
    for name, value in msg.headers() or ():
        size += len(name.encode("utf-8")) + len(value or b"")
    return size


class SegmentSizes:
    """Running byte counts of the segments of the streams it is asked about."""

    def __init__(
        self,
        bootstrap: str,
        *,
        mark_every: int = 256,
        timeout_s: float = 30.0,
        topics: StreamTopics | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.mark_every = mark_every
        self.timeout_s = timeout_s
        self.topics = topics or StreamTopics(bootstrap)
        self._counted: dict[tuple[str, int], _Counted] = {}
        self._consumer: Any = None

    def measure(self, meta: StreamMetadata) -> dict[int, SegmentBytes]:
        """Segment id -> bytes it holds now, for every segment of ``meta``."""
        segs = meta.segments()
        numbers = {s.number: sid for sid, s in segs.items()}
        starts = self.topics.start_offsets(meta.topic, numbers)
        ends = self.topics.end_offsets(meta.topic, numbers)
        todo: dict[int, int] = {}
        for number in numbers:
            counted = self._counted.setdefault((meta.topic, number), _Counted())
            _forget_before(counted, starts[number])
            if counted.next_offset < ends[number]:
                todo[number] = ends[number]
        if todo:
            self._read(meta.topic, todo)
        out: dict[int, SegmentBytes] = {}
        for number, seg_id in numbers.items():
            counted = self._counted[(meta.topic, number)]
            marks = [*counted.marks, (counted.next_offset, counted.total)]
            out[seg_id] = SegmentBytes(tuple(marks), counted.next_offset, counted.total)
        return out

    def forget(self, topic: str) -> None:
        """Drop the counts of a topic (a deleted stream)."""
        for key in [k for k in self._counted if k[0] == topic]:
            del self._counted[key]

    def _read(self, topic: str, ends: dict[int, int]) -> None:
        consumer = self._reader()
        tps = [
            TopicPartition(topic, n, self._counted[(topic, n)].next_offset) for n in sorted(ends)
        ]
        consumer.assign(tps)
        pending = dict(ends)
        deadline = time.monotonic() + self.timeout_s
        try:
            while pending:
                if time.monotonic() > deadline:
                    raise KafkaOperationError(
                        f"counting the bytes of topic {topic!r}: partitions {sorted(pending)} "
                        f"not read to their end within {self.timeout_s} s"
                    )
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                number = msg.partition()
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if msg.offset() >= pending.get(number, 0):
                            pending.pop(number, None)
                        continue
                    raise KafkaOperationError(f"counting the bytes of topic {topic!r}: {err}")
                if number not in pending:
                    continue
                self._count(self._counted[(topic, number)], msg.offset(), record_bytes(msg))
                if msg.offset() + 1 >= pending[number]:
                    pending.pop(number)
        finally:
            consumer.unassign()
        for number, end in ends.items():
            counted = self._counted[(topic, number)]
            counted.next_offset = max(counted.next_offset, end)  # control records at the end

    def _count(self, counted: _Counted, offset: int, size: int) -> None:
        if not counted.marks:
            counted.marks.append((offset, counted.total))
        elif counted.since_mark >= self.mark_every:
            counted.marks.append((offset, counted.total))
            counted.since_mark = 0
            if len(counted.marks) > MAX_MARKS:
                counted.marks[:] = counted.marks[:1] + counted.marks[2::2]
        counted.total += size
        counted.since_mark += 1
        counted.next_offset = offset + 1

    def _reader(self) -> Any:
        if self._consumer is None:
            self._consumer = roles.client(roles.SEGMENT_SIZES_CONSUMER, self.bootstrap)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def _forget_before(counted: _Counted, start: int) -> None:
    """A truncation moved the first offset to ``start``: drop the marks before it,
    keeping the count of the last one at or below it as the new first mark."""
    if counted.next_offset < start:
        counted.marks.clear()
        counted.next_offset = start
        counted.since_mark = 0
        return
    below = [m for m in counted.marks if m[0] <= start]
    if below:
        counted.marks[:] = [(start, below[-1][1])] + [m for m in counted.marks if m[0] > start]


__all__ = ["MAX_MARKS", "SegmentSizes", "record_bytes"]
