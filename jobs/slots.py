"""Streams grouped into *slots*: the unit of the controller job's Spark state.

    slot = SlotState.from_json(stored)                 # stored: the slot's JSON or None
    outputs = run_slot(workflow, slot, {"shop/orders": [MarkInput(...)]}, now_ms)
    slot.due(workflow)                                 # the slot's earliest due time, or None
    text = slot.to_json()

The controller's query keys its ``transformWithStateInPandas`` by slot (slot
``pmod(xxhash64(stream), slot_count)``, keyed by :func:`balanced_slot_keys`),
not by stream: every key costs the Python worker several round trips to the
JVM's state server per micro-batch (set the key, read the value, write it),
and with one key per stream those round trips, not the watermark logic, were
most of a batch (about 4 ms per stream and batch on two busy cores). A slot holds the
:class:`~jobs.workflow.StreamState` of each of its streams as plain JSON
values; only the streams a batch touches -- new records, or a cycle due --
are decoded and re-encoded.

The slots are spread over the query's state partitions by Spark's hash
partitioning of their keys, which :func:`balanced_slot_keys` chooses so that
every state partition holds ``SLOTS_PER_PARTITION`` slots. A
record whose key is :func:`due_key` ``(slot)`` -- produced by the driver
(:mod:`jobs.due`), never by a writer: ``#`` is not allowed in stream names
-- goes to that slot and runs its due cycles.

The slot count is fixed by the query's checkpoint (the state is keyed by
it), as are the state partitions it follows. It does not follow the bucket
count: a slot holds streams of any bucket, so the work of a micro-batch
(keys, state round trips, output frames) is the same for 8 buckets or 64.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobs.workflow import MarkInput, Output, StreamState, StreamWorkflow

SLOTS_PER_PARTITION = 4
"""Slots per state partition: several, so that a stream's hash spreads the streams
evenly over the slots, few enough that per-key round trips stay negligible and
a slot's JSON stays small."""

DUE_PREFIX = "#due:"
SLOT_VERSION = 2


def slot_expression(keys: int | Sequence[int]) -> str:
    """The Spark SQL expression of a record's slot key (the ``stream`` column is its key,
    binary or string: ``xxhash64`` hashes the same bytes alike). ``keys``: the slots' key
    values (:func:`balanced_slot_keys`), or a slot count for keys ``0 .. count - 1``."""
    count = keys if isinstance(keys, int) else len(keys)
    index = f"CAST(pmod(xxhash64(stream), {count}) AS INT)"
    if not isinstance(keys, int) and list(keys) != list(range(count)):
        index = f"element_at(array({', '.join(str(int(k)) for k in keys)}), {index} + 1)"
    return (
        f"CASE WHEN CAST(stream AS STRING) LIKE '{DUE_PREFIX}%' "
        f"THEN CAST(substring(CAST(stream AS STRING), {len(DUE_PREFIX) + 1}) AS INT) "
        f"ELSE {index} END"
    )


_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def spark_partition(key: int, partitions: int) -> int:
    """The partition Spark's hash partitioning gives an ``INT`` key: ``pmod(hash(key), n)``,
    Murmur3 x86 32-bit with seed 42 (``Murmur3_x86_32.hashInt``)."""
    k1 = (key & _MASK) * 0xCC9E2D51 & _MASK
    k1 = _rotl(k1, 15) * 0x1B873593 & _MASK
    h1 = _rotl(42 ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _MASK
    h1 ^= 4
    h1 = ((h1 ^ (h1 >> 16)) * 0x85EBCA6B) & _MASK
    h1 = ((h1 ^ (h1 >> 13)) * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    signed = h1 - (1 << 32) if h1 >= 1 << 31 else h1
    return signed % partitions


def balanced_slot_keys(slot_count: int, partitions: int) -> tuple[int, ...]:
    """Key values for ``slot_count`` slots that Spark's hash partitioning spreads evenly
    over ``partitions`` state partitions: slot ``i``'s key is the smallest unused
    non-negative integer in partition ``i % partitions``.

    Keys ``0 .. slot_count - 1`` land where Murmur3 puts them: with 4 slots per
    partition and 2 partitions, 3 and 5 -- one task had 63% of the streams and the
    batch waited for it."""
    keys: list[int] = []
    candidate = {p: 0 for p in range(partitions)}
    for i in range(slot_count):
        want = i % partitions
        k = candidate[want]
        while spark_partition(k, partitions) != want:
            k += 1
        keys.append(k)
        candidate[want] = k + 1
    return tuple(keys)


def due_key(slot: int) -> str:
    """The key of a due record for ``slot``."""
    return f"{DUE_PREFIX}{slot}"


def is_due_key(stream: str) -> bool:
    return stream.startswith(DUE_PREFIX)


@dataclass
class SlotState:
    """The streams of one slot (raw JSON values, decoded on use)."""

    streams: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, text: str | None) -> SlotState:
        if text is None:
            return cls()
        raw = json.loads(text)
        if raw.get("v") != SLOT_VERSION:
            raise ValueError(f"unknown slot state version {raw.get('v')!r}")
        return cls(dict(raw["streams"]))

    def to_json(self) -> str:
        return json.dumps(
            {"v": SLOT_VERSION, "streams": self.streams}, separators=(",", ":"), sort_keys=True
        )

    def state(self, stream: str) -> StreamState:
        raw = self.streams.get(stream)
        return StreamState() if raw is None else StreamState.from_raw(stream, raw)

    def put(self, stream: str, state: StreamState) -> None:
        self.streams[stream] = state.to_raw()

    def due_streams(self, workflow: StreamWorkflow, now_ms: int) -> set[str]:
        """Streams whose cycle is due at ``now_ms`` (asked without decoding them)."""
        return {s for s, raw in self.streams.items() if workflow.is_due(raw["due"], now_ms)}

    def due(self, workflow: StreamWorkflow) -> int | None:
        """The earliest due time of the slot's streams (``None``: nothing pending)."""
        dues = (workflow.due_for(raw["due"]) for raw in self.streams.values())
        return min((d for d in dues if d is not None), default=None)


def run_slot(
    workflow: StreamWorkflow,
    slot: SlotState,
    records: Mapping[str, Sequence[MarkInput]],
    now_ms: int,
) -> list[Output]:
    """One micro-batch of a slot: fold each stream's records, then run due cycles.

    ``records`` may be empty (only a due record came). Streams are visited in
    name order, so a re-run of the batch yields the same outputs in the same order.
    """
    outputs: list[Output] = []
    streams = sorted(slot.due_streams(workflow, now_ms).union(records))
    workflow.expect(streams)
    for stream in streams:
        state = slot.state(stream)
        if stream in records:
            outputs += workflow.on_records(stream, state, records[stream], now_ms)
        else:
            outputs += workflow.on_due(stream, state, now_ms)
        slot.put(stream, state)
    return outputs


__all__ = [
    "DUE_PREFIX",
    "SLOTS_PER_PARTITION",
    "SlotState",
    "balanced_slot_keys",
    "due_key",
    "is_due_key",
    "run_slot",
    "slot_expression",
    "spark_partition",
]
