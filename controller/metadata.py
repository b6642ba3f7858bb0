"""A stream's metadata record, its pending operation, and their JSON form.

    >>> meta = new_stream_metadata("shop/orders", StreamConfiguration(), now_ms=0)
    >>> [s.id for s in meta.current_epoch().segments]
    [0]
    >>> decode_metadata(encode_metadata(meta)) == meta
    True

Pure: frozen dataclasses, no I/O. Epochs are append-only: a segment keeps its
id (``creation epoch << 32 | number``) in every epoch it belongs to; a segment
absent from the current epoch is sealed, and its sealed size (end offset) is
recorded in ``sealed_sizes`` once the scale or seal has measured it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tidemark.controller.config import StreamConfiguration
from tidemark.controller.exceptions import InvalidModelError
from tidemark.controller.model import Epoch, KeyRange, Segment, StreamCut, segment_id
from tidemark.controller.naming import split_stream, topic_for
from tidemark.controller.states import StreamState


@dataclass(frozen=True)
class PendingScale:
    """A scale under way: seal ``sealed``, add ``new_ranges`` as epoch ``epoch`` from ``at_ms``."""

    sealed: tuple[int, ...]
    new_ranges: tuple[KeyRange, ...]
    at_ms: int
    epoch: int


@dataclass(frozen=True)
class PendingTruncate:
    cut: Mapping[int, int]


@dataclass(frozen=True)
class PendingUpdate:
    config: StreamConfiguration


@dataclass(frozen=True)
class PendingSeal:
    pass


PendingOperation = PendingScale | PendingTruncate | PendingUpdate | PendingSeal


@dataclass(frozen=True)
class Adoption:
    """A stream registered over a topic that existed before (``tidemark stream adopt``).

    ``tidemark_routing``: its producers route keys by the stream's key ranges
    (tidemark's writers or the drop-in producer), so it may scale; a topic
    written through Kafka's own partitioner may not (a key would change
    partition mid-stream and lose its order).
    """

    tidemark_routing: bool = False
    adopted_at_ms: int = 0


@dataclass(frozen=True)
class StreamMetadata:
    """Everything the store keeps about one stream (``name`` is ``scope/stream``)."""

    name: str
    topic: str
    config: StreamConfiguration
    state: StreamState
    epochs: tuple[Epoch, ...]
    truncation: StreamCut = field(default_factory=dict)
    sealed_sizes: Mapping[int, int] = field(default_factory=dict)
    pending: PendingOperation | None = None
    created_at_ms: int = 0
    adoption: Adoption | None = None
    """Set when the stream was adopted over an existing topic (release leaves the topic)."""

    def __post_init__(self) -> None:
        if not self.epochs:
            raise InvalidModelError(f"stream {self.name!r} needs at least one epoch")
        for i, epoch in enumerate(self.epochs):
            if epoch.number != i:
                raise InvalidModelError(
                    f"stream {self.name!r}: epoch at index {i} is numbered {epoch.number}"
                )

    @property
    def scope(self) -> str:
        return split_stream(self.name)[0]

    def current_epoch(self) -> Epoch:
        return self.epochs[-1]

    def segments(self) -> Mapping[int, Segment]:
        """Every segment ever created, by id."""
        return {seg.id: seg for epoch in self.epochs for seg in epoch.segments}

    def segment(self, seg_id: int) -> Segment:
        found = self.segments().get(seg_id)
        if found is None:
            raise InvalidModelError(f"stream {self.name!r} has no segment {seg_id}")
        return found

    def active_segments(self) -> tuple[Segment, ...]:
        """The tail: the current epoch's segments, ordered by key range."""
        return self.current_epoch().segments

    def is_sealed(self, seg_id: int) -> bool:
        """True when the segment exists and no writer may append to it any more.

        That is: it left the current epoch (a scale sealed it), or the stream is sealed.
        """
        if seg_id not in self.segments():
            return False
        if self.state in (StreamState.SEALED, StreamState.DELETING):
            return True
        return all(s.id != seg_id for s in self.current_epoch().segments)

    def partition_count(self) -> int:
        """The topic's partitions: one per segment ever created (partition = segment number)."""
        return len(self.segments())

    def with_changes(self, **changes: Any) -> StreamMetadata:
        return replace(self, **changes)


@dataclass(frozen=True)
class Versioned:
    """Metadata as read from a store, with the version a compare-and-set must name."""

    metadata: StreamMetadata
    version: int


def even_ranges(count: int) -> tuple[KeyRange, ...]:
    """``count`` equal ranges covering [0, 1) exactly (the last one ends at 1.0)."""
    if count < 1:
        raise InvalidModelError(f"a stream needs at least one segment, got {count}")
    bounds = [i / count for i in range(count)] + [1.0]
    return tuple(KeyRange(bounds[i], bounds[i + 1]) for i in range(count))


def new_stream_metadata(stream: str, config: StreamConfiguration, now_ms: int) -> StreamMetadata:
    """A stream being created: epoch 0 with ``config.initial_segments`` even segments."""
    ranges = even_ranges(config.initial_segments)
    epoch = Epoch(
        0, tuple(Segment(segment_id(0, i), r) for i, r in enumerate(ranges)), created_at_ms=now_ms
    )
    return StreamMetadata(
        name=stream,
        topic=topic_for(stream),
        config=config,
        state=StreamState.CREATING,
        epochs=(epoch,),
        created_at_ms=now_ms,
    )


def adopted_stream_metadata(
    stream: str,
    topic: str,
    partitions: int,
    config: StreamConfiguration,
    adoption: Adoption,
    state: StreamState = StreamState.ACTIVE,
) -> StreamMetadata:
    """An existing topic of ``partitions`` partitions as epoch 0: segment ``i`` = partition ``i``.

    The key ranges split [0, 1) evenly; with Kafka's own partitioner they
    say nothing about which keys a partition holds, which the watermark
    algorithm does not need (it only needs the segments to cover [0, 1)).
    """
    if partitions < 1:
        raise InvalidModelError(f"topic {topic!r} has no partitions")
    epoch = Epoch(
        0,
        tuple(Segment(segment_id(0, i), r) for i, r in enumerate(even_ranges(partitions))),
        created_at_ms=adoption.adopted_at_ms,
    )
    return StreamMetadata(
        name=stream,
        topic=topic,
        config=config,
        state=state,
        epochs=(epoch,),
        created_at_ms=adoption.adopted_at_ms,
        adoption=adoption,
    )


# --- JSON form ---------------------------------------------------------------------------


def epoch_to_dict(epoch: Epoch) -> dict[str, Any]:
    return {
        "number": epoch.number,
        "created_at_ms": epoch.created_at_ms,
        "segments": [
            {"id": s.id, "low": s.key_range.low, "high": s.key_range.high} for s in epoch.segments
        ],
    }


def epoch_from_dict(raw: Mapping[str, Any]) -> Epoch:
    return Epoch(
        number=int(raw["number"]),
        segments=tuple(
            Segment(int(s["id"]), KeyRange(float(s["low"]), float(s["high"])))
            for s in raw["segments"]
        ),
        created_at_ms=int(raw.get("created_at_ms", 0)),
    )


def cut_to_json(cut: Mapping[int, int]) -> dict[str, int]:
    """A stream cut as JSON keeps it: segment ids as strings (JSON keys), in order."""
    return {str(k): int(v) for k, v in sorted(cut.items())}


def cut_from_json(raw: Mapping[str, Any]) -> dict[int, int]:
    """:func:`cut_to_json`'s inverse."""
    return {int(k): int(v) for k, v in raw.items()}


def pending_to_dict(op: PendingOperation | None) -> dict[str, Any] | None:
    match op:
        case None:
            return None
        case PendingScale(sealed, new_ranges, at_ms, epoch):
            return {
                "op": "scale",
                "sealed": list(sealed),
                "new_ranges": [[r.low, r.high] for r in new_ranges],
                "at_ms": at_ms,
                "epoch": epoch,
            }
        case PendingTruncate(cut):
            return {"op": "truncate", "cut": cut_to_json(cut)}
        case PendingUpdate(config):
            return {"op": "update", "config": config.to_dict()}
        case PendingSeal():
            return {"op": "seal"}
    raise InvalidModelError(f"unknown pending operation {op!r}")  # pragma: no cover


def pending_from_dict(raw: Mapping[str, Any] | None) -> PendingOperation | None:
    if raw is None:
        return None
    match raw.get("op"):
        case "scale":
            return PendingScale(
                tuple(int(s) for s in raw["sealed"]),
                tuple(KeyRange(float(lo), float(hi)) for lo, hi in raw["new_ranges"]),
                int(raw["at_ms"]),
                int(raw["epoch"]),
            )
        case "truncate":
            return PendingTruncate(cut_from_json(raw["cut"]))
        case "update":
            return PendingUpdate(StreamConfiguration.from_dict(raw["config"]))
        case "seal":
            return PendingSeal()
    raise InvalidModelError(f"unknown pending operation {raw!r}")


def record_to_dict(meta: StreamMetadata) -> dict[str, Any]:
    """The mutable part of the metadata (everything but the epochs' contents)."""
    out: dict[str, Any] = {
        "name": meta.name,
        "topic": meta.topic,
        "config": meta.config.to_dict(),
        "state": meta.state.value,
        "current_epoch": meta.current_epoch().number,
        "truncation": cut_to_json(meta.truncation),
        "sealed_sizes": cut_to_json(meta.sealed_sizes),
        "pending": pending_to_dict(meta.pending),
        "created_at_ms": meta.created_at_ms,
    }
    if meta.adoption is not None:  # absent for created streams: older readers are unaffected
        out["adoption"] = {
            "tidemark_routing": meta.adoption.tidemark_routing,
            "adopted_at_ms": meta.adoption.adopted_at_ms,
        }
    return out


def record_from_dict(raw: Mapping[str, Any], epochs: tuple[Epoch, ...]) -> StreamMetadata:
    return StreamMetadata(
        name=str(raw["name"]),
        topic=str(raw["topic"]),
        config=StreamConfiguration.from_dict(raw["config"]),
        state=StreamState(raw["state"]),
        epochs=epochs,
        truncation=cut_from_json(raw["truncation"]),
        sealed_sizes=cut_from_json(raw["sealed_sizes"]),
        pending=pending_from_dict(raw.get("pending")),
        created_at_ms=int(raw.get("created_at_ms", 0)),
        adoption=_adoption_from_dict(raw.get("adoption")),
    )


def _adoption_from_dict(raw: Mapping[str, Any] | None) -> Adoption | None:
    if raw is None:
        return None
    return Adoption(bool(raw["tidemark_routing"]), int(raw.get("adopted_at_ms", 0)))


def metadata_to_dict(meta: StreamMetadata) -> dict[str, Any]:
    """The whole metadata as JSON-able values (what ``tidemark stream describe`` prints)."""
    out = record_to_dict(meta)
    out["epochs"] = [epoch_to_dict(e) for e in meta.epochs]
    return out


def metadata_from_dict(raw: Mapping[str, Any]) -> StreamMetadata:
    return record_from_dict(raw, tuple(epoch_from_dict(e) for e in raw["epochs"]))


def json_bytes(value: Mapping[str, Any]) -> bytes:
    """A stored record's bytes: UTF-8 JSON with sorted keys (equal records, equal bytes)."""
    return json.dumps(value, sort_keys=True).encode("utf-8")


def json_from_bytes(data: bytes) -> dict[str, Any]:
    """:func:`json_bytes`' inverse."""
    raw: dict[str, Any] = json.loads(data.decode("utf-8"))
    return raw


def encode_metadata(meta: StreamMetadata) -> bytes:
    return json_bytes(metadata_to_dict(meta))


def decode_metadata(data: bytes) -> StreamMetadata:
    return metadata_from_dict(json_from_bytes(data))


__all__ = [
    "Adoption",
    "PendingOperation",
    "PendingScale",
    "PendingSeal",
    "PendingTruncate",
    "PendingUpdate",
    "StreamMetadata",
    "Versioned",
    "adopted_stream_metadata",
    "cut_from_json",
    "cut_to_json",
    "decode_metadata",
    "encode_metadata",
    "even_ranges",
    "json_bytes",
    "json_from_bytes",
    "metadata_from_dict",
    "metadata_to_dict",
    "new_stream_metadata",
]
