"""Typed records for the schemas, with ``to_dict``/``from_dict`` and bytes round trips.

    >>> rec = WriterMarkRecord("shop/orders", "w1", time=1000, position={7: 3})
    >>> WriterMarkRecord.decode(rec.encode()) == rec
    True

Positions and stream cuts are ``{segment id: next offset}`` here and an
array of ``{segment, offset}`` records (sorted by segment) in Avro, because
Avro map keys are strings and segment ids are 64-bit integers.

This package imports nothing of the project but ``tidemark.errors``, so the
model's ``WriterMark`` and ``Watermark`` are met structurally
(:class:`MarkLike`, :class:`WatermarkLike`); ``tidemark.controller.model`` values fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tidemark.schemas.codec import decode, encode
from tidemark.schemas.exceptions import DecodeError, EncodeError
from tidemark.schemas.tables import cut_cell

WRITER_MARK = "writer_mark"
WATERMARK = "watermark"
SCHEDULED_MESSAGE = "scheduled_message"


class MarkLike(Protocol):
    """What ``tidemark.controller.model.WriterMark`` offers."""

    @property
    def time(self) -> int: ...
    @property
    def position(self) -> Mapping[int, int]: ...
    @property
    def alive(self) -> bool: ...
    @property
    def max_event_time(self) -> int | None: ...
    @property
    def observed_lateness_ms(self) -> int | None: ...
    @property
    def possibly_late(self) -> int | None: ...


class WatermarkLike(Protocol):
    """What ``tidemark.controller.model.Watermark`` offers."""

    @property
    def stream(self) -> str: ...
    @property
    def time(self) -> int: ...
    @property
    def upper_time(self) -> int: ...
    @property
    def stream_cut(self) -> Mapping[int, int]: ...
    @property
    def seq(self) -> int: ...


cut_to_avro = cut_cell
"""``{segment: offset}`` -> ``[{"segment": s, "offset": o}, ...]`` sorted by segment: the
same shape as a Delta ``stream_cut`` cell (``marks`` rows are ``watermark`` records)."""


def cut_from_avro(items: Any) -> dict[int, int]:
    """The inverse of :func:`cut_to_avro`; a segment named twice is a decode error."""
    cut: dict[int, int] = {}
    for item in items:
        seg, off = int(item["segment"]), int(item["offset"])
        if seg in cut:
            raise DecodeError(f"segment {seg} appears twice in a position")
        cut[seg] = off
    return cut


def _int_keys(cut: Mapping[int, int], what: str) -> dict[int, int]:
    if not isinstance(cut, Mapping):
        raise EncodeError(f"{what} must be a mapping segment id -> offset", cut)
    for seg, off in cut.items():
        if type(seg) is not int or type(off) is not int:
            raise EncodeError(f"{what} must map int segment ids to int offsets, got {cut!r}", cut)
    return dict(cut)


@dataclass(frozen=True)
class WriterMarkRecord:
    """A writer mark on the marks topic (``alive=False``: the writer's shutdown)."""

    stream: str
    writer_id: str
    time: int
    position: Mapping[int, int] = field(default_factory=dict)
    alive: bool = True
    transaction_id: str | None = None
    instance: str | None = None
    """The writer instance's token (schema v2); ``None`` in marks of v1 writers."""
    max_event_time: int | None = None
    """The highest record timestamp written up to ``position`` (v2; ``None`` in v1 marks)."""
    observed_lateness_ms: int | None = None
    """Set on an observed mark (v3): its time is the brokers' largest record timestamp
    minus this stated lateness; ``None``: a noted mark."""
    possibly_late: int | None = None
    """An observer's count of records that may lie behind a watermark (v3)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "position", _int_keys(self.position, "position"))

    @classmethod
    def from_mark(
        cls,
        stream: str,
        writer_id: str,
        mark: MarkLike,
        transaction_id: str | None = None,
        instance: str | None = None,
    ) -> WriterMarkRecord:
        return cls(
            stream,
            writer_id,
            mark.time,
            dict(mark.position),
            mark.alive,
            transaction_id,
            instance,
            mark.max_event_time,
            mark.observed_lateness_ms,
            mark.possibly_late,
        )

    @property
    def version(self) -> str:
        """The schema version this record is written as: the oldest that holds its fields
        (a noted mark stays ``writer_mark.v2``, the bytes every controller since v2 reads;
        an observed one needs v3)."""
        if self.observed_lateness_ms is None and self.possibly_late is None:
            return f"{WRITER_MARK}.v2"
        return WRITER_MARK

    def to_dict(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "writer_id": self.writer_id,
            "time": self.time,
            "position": cut_to_avro(self.position),
            "alive": self.alive,
            "transaction_id": self.transaction_id,
            "instance": self.instance,
            "max_event_time": self.max_event_time,
            **(
                {}
                if self.version != WRITER_MARK  # v2: the observed fields are all null
                else {
                    "observed_lateness_ms": self.observed_lateness_ms,
                    "possibly_late": self.possibly_late,
                }
            ),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WriterMarkRecord:
        return cls(
            stream=d["stream"],
            writer_id=d["writer_id"],
            time=d["time"],
            position=cut_from_avro(d["position"]),
            alive=d["alive"],
            transaction_id=d.get("transaction_id"),
            instance=d.get("instance"),
            max_event_time=d.get("max_event_time"),
            observed_lateness_ms=d.get("observed_lateness_ms"),
            possibly_late=d.get("possibly_late"),
        )

    def encode(self) -> bytes:
        # __post_init__ checked every position entry is an int pair (no bool)
        return encode(self.version, self.to_dict(), checked=("position",))

    @classmethod
    def decode(cls, data: bytes) -> WriterMarkRecord:
        return cls.from_dict(decode(data, WRITER_MARK)[1])


@dataclass(frozen=True)
class WatermarkRecord:
    """A row of the Delta table ``marks``: one emitted watermark."""

    stream: str
    seq: int
    time: int
    upper_time: int
    stream_cut: Mapping[int, int]
    writers: tuple[str, ...] = ()
    emitted_at: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "stream_cut", _int_keys(self.stream_cut, "stream_cut"))
        object.__setattr__(self, "writers", tuple(sorted(self.writers)))

    @classmethod
    def from_watermark(
        cls, watermark: WatermarkLike, writers: tuple[str, ...] = (), emitted_at: int = 0
    ) -> WatermarkRecord:
        return cls(
            watermark.stream,
            watermark.seq,
            watermark.time,
            watermark.upper_time,
            dict(watermark.stream_cut),
            writers,
            emitted_at,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "seq": self.seq,
            "time": self.time,
            "upper_time": self.upper_time,
            "stream_cut": cut_to_avro(self.stream_cut),
            "writers": list(self.writers),
            "emitted_at": self.emitted_at,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WatermarkRecord:
        return cls(
            stream=d["stream"],
            seq=d["seq"],
            time=d["time"],
            upper_time=d["upper_time"],
            stream_cut=cut_from_avro(d["stream_cut"]),
            writers=tuple(d["writers"]),
            emitted_at=d["emitted_at"],
        )

    def encode(self) -> bytes:
        return encode(WATERMARK, self.to_dict())

    @classmethod
    def decode(cls, data: bytes) -> WatermarkRecord:
        return cls.from_dict(decode(data, WATERMARK)[1])


@dataclass(frozen=True)
class ScheduledMessageRecord:
    """A timeline's scheduled message: deliver ``body`` at or after ``timestamp`` (ms)."""

    id: str
    timestamp: int
    body: bytes
    producer_group: str
    timeline: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "timestamp": self.timestamp,
            "body": self.body,
            "producer_group": self.producer_group,
            "timeline": self.timeline,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ScheduledMessageRecord:
        return cls(d["id"], d["timestamp"], bytes(d["body"]), d["producer_group"], d["timeline"])

    def encode(self) -> bytes:
        return encode(SCHEDULED_MESSAGE, self.to_dict())

    @classmethod
    def decode(cls, data: bytes) -> ScheduledMessageRecord:
        return cls.from_dict(decode(data, SCHEDULED_MESSAGE)[1])


AnyRecord = WriterMarkRecord | WatermarkRecord | ScheduledMessageRecord

_TYPES: dict[str, type[WriterMarkRecord] | type[WatermarkRecord] | type[ScheduledMessageRecord]] = {
    WRITER_MARK: WriterMarkRecord,
    WATERMARK: WatermarkRecord,
    SCHEDULED_MESSAGE: ScheduledMessageRecord,
}


def decode_record(data: bytes) -> AnyRecord:
    """Any tidemark record from its bytes, as its typed record."""
    name, record = decode(data)
    return _TYPES[name].from_dict(record)


__all__ = [
    "SCHEDULED_MESSAGE",
    "WATERMARK",
    "WRITER_MARK",
    "AnyRecord",
    "MarkLike",
    "ScheduledMessageRecord",
    "WatermarkLike",
    "WatermarkRecord",
    "WriterMarkRecord",
    "cut_from_avro",
    "cut_to_avro",
    "decode_record",
]
