"""Streams grouped into *slots*: the unit of the controller job's Spark state.

    slot = SlotState.from_json(stored)                 # stored: the slot's JSON or None
    outputs = run_slot(workflow, slot, {"shop/orders": [MarkInput(...)]}, now_ms)
    slot.due(workflow)                                 # the slot's earliest due time, or None
    text = slot.to_json()

The controller's query keys its ``transformWithStateInPandas`` by slot (slot
``pmod(xxhash64(stream), slot_count)``, keyed by
:func:`~tidemark.jobs.slot_keys.balanced_slot_keys`),
not by stream: every key costs the Python worker several round trips to the
JVM's state server per micro-batch (set the key, read the value, write it),
and with one key per stream those round trips, not the watermark logic, were
most of a batch (about 4 ms per stream and batch on two busy cores). A slot holds the
:class:`~tidemark.jobs.workflow.StreamState` of each of its streams as plain JSON
values; only the streams a batch touches -- new records, or a cycle due --
are decoded and re-encoded.

The slots are spread over the query's state partitions by Spark's hash
partitioning of their keys, which :mod:`tidemark.jobs.slot_keys` chooses so that
every state partition holds ``SLOTS_PER_PARTITION`` slots. A
record whose key is :func:`~tidemark.jobs.slot_keys.due_key` ``(slot)`` -- produced by the driver
(:mod:`tidemark.jobs.due`), never by a writer: ``#`` is not allowed in stream names
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

from tidemark.jobs.workflow import MarkInput, Output, StreamState, StreamWorkflow

SLOT_VERSION = 2


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

    def pending_streams(self, workflow: StreamWorkflow) -> set[str]:
        """Streams with a due time, due or not yet."""
        return {s for s, raw in self.streams.items() if workflow.due_for(raw["due"]) is not None}

    def due(self, workflow: StreamWorkflow) -> int | None:
        """The earliest due time of the slot's streams (``None``: nothing pending)."""
        dues = (workflow.due_for(raw["due"]) for raw in self.streams.values())
        return min((d for d in dues if d is not None), default=None)


def run_slot(
    workflow: StreamWorkflow,
    slot: SlotState,
    records: Mapping[str, Sequence[MarkInput]],
    now_ms: int,
    reevaluate: bool = False,
) -> list[Output]:
    """One micro-batch of a slot: fold each stream's records, then run due cycles.

    ``records`` may be empty (only a due record came). ``reevaluate`` (a sweep's due
    record came, :data:`~tidemark.jobs.slot_keys.REEVALUATE`): every stream with a due
    time runs its cycle now, due or not. Streams are visited in name order, so a
    re-run of the batch yields the same outputs in the same order.
    """
    outputs: list[Output] = []
    pending = slot.pending_streams(workflow) if reevaluate else set()
    streams = sorted(slot.due_streams(workflow, now_ms).union(pending, records))
    workflow.expect(streams)
    for stream in streams:
        state = slot.state(stream)
        if stream in records:
            outputs += workflow.on_records(stream, state, records[stream], now_ms)
        else:
            outputs += workflow.on_due(stream, state, now_ms, anyway=stream in pending)
        slot.put(stream, state)
    return outputs


__all__ = ["SLOT_VERSION", "SlotState", "run_slot"]
