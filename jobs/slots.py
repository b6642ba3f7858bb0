"""Streams grouped into *slots*: the unit of the controller job's Spark state.

    slot = SlotState.from_json(stored)                 # stored: the slot's JSON or None
    outputs = run_slot(workflow, slot, {"shop/orders": [MarkInput(...)]}, now_ms)
    slot.timer_ms = slot.wanted_timer(workflow)        # the processor (re)registers it
    text = slot.to_json()

A bucket's query keys its ``transformWithState`` by slot, ``pmod(xxhash64(stream),
SLOTS)``, not by stream: every key costs the Python worker several round trips
to the JVM's state server per micro-batch (set the key, read the value, write
it, move its timer), and with one key per stream those round trips, not the
watermark logic, were most of a batch (about 4 ms per stream and batch on two
busy cores). A slot holds the :class:`~jobs.workflow.StreamState` of each of
its streams, as plain JSON values, and one processing-time timer: the
earliest time one of its streams is due for a cycle. Only the streams a batch
touches -- new records, or a cycle due -- are decoded and re-encoded.

``SLOTS`` is fixed by a bucket's checkpoint (the state is keyed by it); a new
value needs new checkpoints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobs.workflow import MarkInput, Output, StreamState, StreamWorkflow

SLOTS = 16
"""Slots per bucket query: few enough that per-key round trips stay negligible,
enough that a slot's JSON stays small (a few hundred streams per bucket make
slots of tens of kilobytes)."""

SLOT_EXPRESSION = f"pmod(xxhash64(stream), {SLOTS})"
"""The Spark SQL expression of a record's slot (its key is the stream name)."""

SLOT_VERSION = 1


@dataclass
class SlotState:
    """The streams of one slot (raw JSON values, decoded on use) and the slot's timer."""

    streams: dict[str, dict[str, Any]] = field(default_factory=dict)
    timer_ms: int | None = None

    @classmethod
    def from_json(cls, text: str | None) -> SlotState:
        if text is None:
            return cls()
        raw = json.loads(text)
        if raw.get("v") != SLOT_VERSION:
            raise ValueError(f"unknown slot state version {raw.get('v')!r}")
        return cls(dict(raw["streams"]), raw["timer"])

    def to_json(self) -> str:
        return json.dumps(
            {"v": SLOT_VERSION, "timer": self.timer_ms, "streams": self.streams},
            separators=(",", ":"),
            sort_keys=True,
        )

    def state(self, stream: str) -> StreamState:
        raw = self.streams.get(stream)
        return StreamState() if raw is None else StreamState.from_raw(stream, raw)

    def put(self, stream: str, state: StreamState) -> None:
        self.streams[stream] = state.to_raw()

    def due(self, workflow: StreamWorkflow, now_ms: int) -> set[str]:
        """Streams whose next cycle is due at ``now_ms`` (asked without decoding them)."""
        return {
            s
            for s, raw in self.streams.items()
            if workflow.is_due(bool(raw["marks"]), raw["due"], now_ms)
        }

    def wanted_timer(self, workflow: StreamWorkflow) -> int | None:
        """The earliest timer one of the streams needs (``None``: none does)."""
        timers = (workflow.timer_for(bool(r["marks"]), r["due"]) for r in self.streams.values())
        return min((t for t in timers if t is not None), default=None)


def run_slot(
    workflow: StreamWorkflow,
    slot: SlotState,
    records: Mapping[str, Sequence[MarkInput]],
    now_ms: int,
) -> list[Output]:
    """One micro-batch of a slot: fold each stream's records, then run due cycles.

    ``records`` may be empty (a timer fired). Streams are visited in name order,
    so a re-run of the batch yields the same outputs in the same order.
    """
    outputs: list[Output] = []
    for stream in sorted(slot.due(workflow, now_ms).union(records)):
        state = slot.state(stream)
        if stream in records:
            outputs += workflow.on_records(stream, state, records[stream], now_ms)
        else:
            outputs += workflow.on_timer(stream, state, now_ms)
        slot.put(stream, state)
    return outputs


__all__ = ["SLOTS", "SLOT_EXPRESSION", "SlotState", "run_slot"]
