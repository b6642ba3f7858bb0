"""One stream's side of the controller job, without Spark: marks in, watermarks out.

    wf = StreamWorkflow(WorkflowSettings(interval_ms=1000), epochs, committed, registrations)
    state = StreamState()
    out = wf.on_records("shop/orders", state, [MarkInput(value, partition=0, offset=7)], now_ms)
    state.due_ms                         # when it needs a cycle without marks (None: never)
    out += wf.on_due("shop/orders", state, state.due_ms or now_ms)

The Spark processor (:mod:`tidemark.jobs.processor`) keeps a :class:`StreamState` per
stream (JSON in the state store), hands each micro-batch's records and each
due record to a :class:`StreamWorkflow`, and turns its outputs
(:class:`Emitted`, :class:`Rejected`) into rows. Everything that decides
lives in ``tidemark.controller.watermarks``; this module adds what the pure core
leaves to its caller:

- **decoding and admission**: a record that is not a writer mark, or names
  another stream than its key, is ``malformed``; an unknown stream or segment
  is rejected (after one refresh of the cached metadata); then
  :func:`~tidemark.controller.watermarks.accept_mark` against the writer's last
  accepted mark. The mark's instance token is checked against the writer id's
  registrations (:func:`~tidemark.controller.admission.check_registered`), looked up
  only for a mark whose token is not the one the id is bound to (a new writer id,
  a restart, a forgery): the marks of a bound instance cost no lookup; a mark
  without a token, or under an id nobody registered, is ``unregistered``;
- **when a cycle runs**: with timers, right after a micro-batch's marks of
  the stream, and otherwise only at the stream's *due time* (``due_ms``):
  the earliest moment waiting can change the outcome -- a lagging writer's
  timeout (the stream's own ``timestamp_aggregation_timeout_ms``, the job's
  ``writer_timeout_ms`` when it sets none), the end of the stream's
  ``first_watermark_delay_ms``, the retry of a held cut, or -- after a
  watermark some writer is above -- a timeout after it, to see the writers
  left at the watermark's time lag even when no mark comes (they are then
  dropped a timeout later); a stream whose writers are all in step has no due
  time and costs nothing until its next mark. With ticks (tests), exactly at
  each tick record;
- **the high-water mark**: a cut must not point past the data topic's last
  stable offset; such a cycle is *held* (nothing emitted, state unchanged,
  retried next cycle) and after ``lso_hold_ms`` the writers whose positions
  reach past it are rejected (``beyond_committed``) and forgotten.

The clock is whatever the caller passes as ``now_ms``: Spark's batch
timestamp, which a re-run of the same micro-batch after a failure reuses,
so a replayed batch decides the same way.

Why one module: one stream's workflow and the state it keeps between micro-batches
change together: the state's fields are exactly what the workflow decides on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from tidemark.controller.admission import (
    RESTARTED,
    Holder,
    Registration,
    check_registered,
    check_time,
)
from tidemark.controller.laggards import Laggard, WriterSeen
from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.model import Watermark, WriterMark, segment_number
from tidemark.controller.watermarks import GenerationState, Verdict, accept_mark, watermark_cycle
from tidemark.jobs.config import CycleTrigger, WorkflowSettings
from tidemark.jobs.lateness import laggard_update, laggards_of
from tidemark.jobs.tables import Reason
from tidemark.schemas.mark_input import Undecodable, decode_mark
from tidemark.schemas.records import WriterMarkRecord

log = logging.getLogger(__name__)

TICK_PREFIX = b"tidemark-tick:"
STATE_VERSION = 2


def tick_value(now_ms: int) -> bytes:
    """A tick record's value: in :attr:`CycleTrigger.TICKS` mode it runs a cycle at ``now_ms``."""
    return TICK_PREFIX + str(int(now_ms)).encode("ascii")


def parse_tick(value: bytes | None) -> int | None:
    if value is None or not value.startswith(TICK_PREFIX):
        return None
    try:
        return int(value[len(TICK_PREFIX) :])
    except ValueError:
        return None


# --- values ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class MarkInput:
    """One record of the marks topic, as the job reads it."""

    value: bytes | None
    partition: int
    offset: int
    arrival_ms: int | None = None
    """The broker's append time (the marks topic is ``LogAppendTime``); ``None``: unknown."""


@dataclass(frozen=True)
class StoredMark:
    """A writer's last accepted mark and where it came from."""

    mark: WriterMark
    partition: int
    offset: int
    seen: WriterSeen = field(default_factory=WriterSeen)
    """Who sent it: the instance bound to the writer id, when that instance's first mark
    was accepted (its arrival, else the batch time), and when this one reached the broker
    (``last_seen_ms``: its Kafka timestamp, ``LogAppendTime``)."""


@dataclass(frozen=True)
class Observation:
    """What a watermark rests on when observers took part (``tidemark stream observe``):
    their writer ids, the largest lateness they stated, and the records they counted as
    possibly late (each observer's running count, summed)."""

    writers: tuple[str, ...]
    lateness_ms: int
    possibly_late: int

    @classmethod
    def of(cls, marks: Mapping[str, WriterMark]) -> Observation | None:
        """The observers among ``marks`` (``None``: every writer noted its time)."""
        observed = {w: m for w, m in marks.items() if m.observed_lateness_ms is not None}
        if not observed:
            return None
        return cls(
            tuple(sorted(observed)),
            max(m.observed_lateness_ms or 0 for m in observed.values()),
            sum(m.possibly_late or 0 for m in observed.values()),
        )


@dataclass(frozen=True)
class Emitted:
    watermark: Watermark
    writers: tuple[str, ...]
    upper_time_max: int
    emitted_at: int
    noted_at: int | None = None
    """The Kafka timestamp of the newest mark the watermark was made of (``None``:
    unknown): freshness is measured from it to the Delta commit."""
    observation: Observation | None = None
    """Set when some writer of the watermark observed its time rather than noted it."""
    vouchers: tuple[tuple[str, str | None], ...] = ()
    """The writers that vouched for it: (writer id, instance token) of each accepted mark
    that took part, a replaced instance's last mark under its own writer id and token."""


@dataclass(frozen=True)
class Rejected:
    stream: str | None
    writer: str | None
    reason: str
    raw: bytes | None
    partition: int
    offset: int
    at: int


@dataclass(frozen=True)
class LaggardRows:
    """The stream's laggards changed: rows for the ``laggards`` table (a ``clear`` row
    when none is left)."""

    stream: str
    rows: tuple[dict[str, Any], ...]


Output = Emitted | Rejected | LaggardRows


@dataclass
class StreamState:
    """What the job keeps per stream between micro-batches (mutable; serialised as JSON)."""

    marks: dict[str, StoredMark] = field(default_factory=dict)
    generation: GenerationState = field(default_factory=GenerationState)
    upper_time_max: int | None = None
    due_ms: int | None = None
    """When the next cycle must run even without new marks (``None``: never)."""
    held_since_ms: int | None = None
    first_mark_ms: int | None = None
    """When the stream's first mark was accepted (for ``first_watermark_delay_ms``)."""
    laggards: list[Laggard] | None = None
    """The last snapshot recorded in the ``laggards`` table (``None``: none yet)."""

    def to_raw(self) -> dict[str, Any]:
        """The state as JSON-ready values (:meth:`to_json` is this, dumped)."""
        prev = self.generation.previous
        return {
            "v": STATE_VERSION,
            "marks": {
                w: [
                    s.mark.time,
                    _pairs(s.mark.position),
                    s.mark.alive,
                    s.partition,
                    s.offset,
                    s.seen.instance,
                    s.mark.max_event_time,
                    s.seen.last_seen_ms,
                    s.seen.first_seen_ms,
                    s.mark.observed_lateness_ms,
                    s.mark.possibly_late,
                ]
                for w, s in self.marks.items()
            },
            "previous": None
            if prev is None
            else [prev.time, prev.upper_time, _pairs(prev.stream_cut), prev.seq],
            "lagging": dict(self.generation.lagging_since),
            "upper_max": self.upper_time_max,
            "due": self.due_ms,
            "held": self.held_since_ms,
            "first": self.first_mark_ms,
            "lg": None
            if self.laggards is None
            else [
                [
                    *(x.writer, x.kind, x.noted_time, x.watermark_time, x.behind_ms),
                    *(x.since_ms, x.at_ms, x.instance, x.first_seen_ms, x.last_seen_ms),
                ]
                for x in self.laggards
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_raw(), separators=(",", ":"))

    @classmethod
    def from_json(cls, stream: str, text: str) -> StreamState:
        return cls.from_raw(stream, json.loads(text))

    @classmethod
    def from_raw(cls, stream: str, raw: Mapping[str, Any]) -> StreamState:
        if raw.get("v") not in (1, STATE_VERSION):  # 1 had no "first"; "lg" is optional
            raise ValueError(f"stream {stream!r}: unknown state version {raw.get('v')!r}")
        prev = raw["previous"]
        previous = (
            None
            if prev is None
            else Watermark(stream, int(prev[0]), int(prev[1]), _cut(prev[2]), int(prev[3]))
        )
        return cls(
            marks={w: _stored(entry) for w, entry in raw["marks"].items()},
            generation=GenerationState(previous, {w: int(v) for w, v in raw["lagging"].items()}),
            upper_time_max=raw["upper_max"],
            due_ms=raw["due"],
            held_since_ms=raw["held"],
            first_mark_ms=raw.get("first"),
            laggards=None
            if raw.get("lg") is None
            else [Laggard(stream, *entry) for entry in raw["lg"]],
        )


def _shut_down_at_watermark(state: StreamState) -> bool:
    previous = state.generation.previous
    return previous is not None and any(
        not s.mark.alive and s.mark.time <= previous.time for s in state.marks.values()
    )


def retired_writer(writer_id: str, instance: str | None) -> str:
    """The name a shut-down instance's last mark keeps once a new instance takes its id."""
    return f"{writer_id}{_retired_suffix(instance)}"


def _retired_suffix(instance: str | None) -> str:
    return f" (instance {instance}, shut down)"


def voucher(name: str, stored: StoredMark) -> tuple[str, str | None]:
    """The (writer id, instance token) of the mark kept under ``name`` in a state's marks
    (a :func:`retired_writer` name is its instance's writer id)."""
    instance = stored.seen.instance
    suffix = _retired_suffix(instance)
    return (name.removesuffix(suffix) if name.endswith(suffix) else name), instance


def _stored(entry: Sequence[Any]) -> StoredMark:
    """``[time, position, alive, partition, offset, instance, max_event_time, arrival,
    first_seen, observed_lateness_ms, possibly_late]``; older state has five, seven, eight
    or nine items (the missing ones ``None``)."""
    t, pos, alive, p, o = entry[:5]
    instance, top, arrival, first_seen, lateness, late = [*entry[5:11], *[None] * 6][:6]
    mark = WriterMark(
        int(t),
        _cut(pos),
        bool(alive),
        _int_or_none(top),
        _int_or_none(lateness),
        _int_or_none(late),
    )
    seen = WriterSeen(
        None if instance is None else str(instance),
        None if first_seen is None else int(first_seen),
        None if arrival is None else int(arrival),
    )
    return StoredMark(mark, int(p), int(o), seen)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _pairs(cut: Mapping[int, int]) -> list[list[int]]:
    return [[s, o] for s, o in sorted(cut.items())]


def _cut(pairs: Sequence[Sequence[int]]) -> dict[int, int]:
    return {int(s): int(o) for s, o in pairs}


# --- what the workflow asks of the outside world --------------------------------------------


class StreamLookup(Protocol):
    """Stream metadata (epochs are immutable, so a cached copy stays right for what it names)."""

    def stream(self, stream: str, refresh: bool = False) -> StreamMetadata | None:
        """The stream's metadata, or ``None`` when there is no such stream."""

    def prefetch(self, streams: Sequence[str]) -> None:
        """Streams about to be looked up: a lookup that reads a store may read them together."""


class CommittedOffsets(Protocol):
    """The last stable offset (``read_committed`` end) of a topic's partitions."""

    def last_stable(
        self, topic: str, needed: Mapping[int, int], fresh_since_ms: int | None = None
    ) -> Mapping[int, int]:
        """At least the partitions of ``needed``; may answer from a cache when every
        cached value is already >= the needed offset (last stable offsets only grow), or
        when every needed value was read at or after the wall time ``fresh_since_ms``
        (the caller knows all it needs was stored before then: asking again now could
        only see transactions committed since)."""

    def expect(self, topic: str, partitions: Sequence[int]) -> None:
        """Cuts of ``topic``'s ``partitions`` are about to be checked: ask for them with
        the next request (a worker's first batch meets many streams at once)."""


class RegistrationLookup(Protocol):
    """Writer ids' registrations (``MetadataStore.writer_registrations``)."""

    def registrations(
        self, stream: str, writer_id: str, claimed: str | None, fresh_since_ms: int | None
    ) -> Sequence[Registration]:
        """The id's registrations, oldest first (empty: none). May answer from a cache
        when a registration later than ``claimed``'s is among the cached ones
        (registrations are only ever added, so the claimed one stays superseded), or when
        the cached ones were read at or after the wall time ``fresh_since_ms`` (every mark
        the caller checks reached Kafka before then, and a writer registers before its
        first mark). A claimed registration cached last is no proof that none followed."""


# --- the workflow ---------------------------------------------------------------------------


class StreamWorkflow:
    def __init__(
        self,
        settings: WorkflowSettings,
        streams: StreamLookup,
        committed: CommittedOffsets,
        registrations: RegistrationLookup,
    ) -> None:
        self.settings = settings
        self.streams = streams
        self.committed = committed
        self.registrations = registrations

    # entry points ---------------------------------------------------------------------------

    def on_records(
        self, stream: str, state: StreamState, records: Sequence[MarkInput], now_ms: int
    ) -> list[Output]:
        """Fold a micro-batch's records of ``stream`` (any order; sorted by offset here).

        Timers mode: then run the cycle (micro-batches come at most once per
        ``interval_ms``, so this paces each stream too)."""
        out: list[Output] = []
        ticks = self.settings.trigger is CycleTrigger.TICKS
        for record in sorted(records, key=lambda r: (r.partition, r.offset)):
            tick = parse_tick(record.value) if ticks else None
            if tick is not None:
                out += self.cycle(stream, state, tick)
            else:
                rejected = self.fold(stream, state, record, now_ms)
                if rejected is not None:
                    out.append(rejected)
        if not ticks:
            out += self.cycle(stream, state, now_ms)
        return out

    def expect(self, streams: Iterable[str]) -> None:
        """The streams of a call: their metadata is read together, and the partitions of
        their cuts are asked for together, so streams new to this worker cost a couple of
        round trips between them."""
        streams = list(streams)
        self.streams.prefetch(streams)
        for stream in streams:
            meta = self.streams.stream(stream)
            if meta is not None:
                self.committed.expect(meta.topic, [s.number for s in meta.active_segments()])

    def on_due(
        self, stream: str, state: StreamState, now_ms: int, anyway: bool = False
    ) -> list[Output]:
        """A due record of the stream's slot arrived: run the cycle when one is due, or
        ``anyway`` (its configuration may have changed since its due time was set)."""
        if not anyway and not self.is_due(state.due_ms, now_ms):
            return []
        return self.cycle(stream, state, now_ms)

    def wants_due(self, state: StreamState) -> int | None:
        """When the stream needs a cycle without new marks (``None``: it does not)."""
        return self.due_for(state.due_ms)

    def is_due(self, due_ms: int | None, now_ms: int) -> bool:
        """Timers mode: a stream cycles without marks once its due time came.

        Takes the field rather than a :class:`StreamState` so that callers holding
        the state as JSON (:mod:`tidemark.jobs.slots`) ask without decoding it."""
        due = self.due_for(due_ms)
        return due is not None and now_ms >= due

    def due_for(self, due_ms: int | None) -> int | None:
        """The due time a stream with this field reports (``None``: none; ticks: never)."""
        if self.settings.trigger is CycleTrigger.TICKS:
            return None
        return due_ms

    def timeout_ms(self, meta: StreamMetadata) -> int:
        """The stream's writer timeout: its own setting, else the job's default."""
        own = meta.config.timestamp_aggregation_timeout_ms
        return self.settings.writer_timeout_ms if own is None else own

    # admission ------------------------------------------------------------------------------

    def fold(
        self, stream: str, state: StreamState, record: MarkInput, now_ms: int
    ) -> Rejected | None:
        """Accept one record into ``state.marks`` or say why not."""

        def reject(reason: str, writer: str | None = None, named: str | None = None) -> Rejected:
            return Rejected(
                named if named is not None else (stream or None),
                writer,
                reason,
                record.value,
                record.partition,
                record.offset,
                now_ms,
            )

        decoded = decode_mark(record.value)
        if isinstance(decoded, Undecodable):
            log.debug("stream %r: %s at %d: %s", stream, decoded.reason, record.offset, decoded)
            return reject(decoded.reason)
        if decoded.stream != stream:
            return reject(Reason.MALFORMED, decoded.writer_id, decoded.stream)
        meta = self.streams.stream(stream)
        if meta is None:
            meta = self.streams.stream(stream, refresh=True)
        if meta is None:
            return reject(Reason.UNKNOWN_STREAM, decoded.writer_id)
        if any(seg not in meta.segments() for seg in decoded.position):
            meta = self.streams.stream(stream, refresh=True)
            if meta is None or any(seg not in meta.segments() for seg in decoded.position):
                return reject(Reason.UNKNOWN_SEGMENT, decoded.writer_id)
        registered = meta.config.writers
        if registered is not None and decoded.writer_id not in registered:
            return reject(Reason.UNKNOWN_WRITER, decoded.writer_id)
        out_of_bounds = check_time(decoded.time, record.arrival_ms, meta.config.max_future_ms)
        if out_of_bounds is not None:
            return reject(out_of_bounds, decoded.writer_id)
        mark = WriterMark(
            decoded.time,
            dict(decoded.position),
            decoded.alive,
            decoded.max_event_time,
            decoded.observed_lateness_ms,
            decoded.possibly_late,
        )
        stored = state.marks.get(decoded.writer_id)
        if decoded.instance is None:  # no registration can name it
            return reject(Reason.UNREGISTERED, decoded.writer_id)
        if stored is None or decoded.instance != stored.seen.instance:
            fresh = None if self.settings.trigger is CycleTrigger.TICKS else now_ms
            instances = self.registrations.registrations(
                stream, decoded.writer_id, decoded.instance, fresh
            )
            holder = None if stored is None else Holder(stored.seen.instance, stored.mark.alive)
            verdict_of_instance = check_registered(
                decoded.instance, record.arrival_ms, instances, holder
            )
            if verdict_of_instance == RESTARTED and stored is not None:
                # The replaced instance counts as shut down at its last mark, which still
                # takes part in a cycle under a name of its own (its position must reach
                # the next cut; it is dropped once it lags); the new instance starts afresh.
                retired = StoredMark(
                    replace(stored.mark, alive=False), stored.partition, stored.offset, stored.seen
                )
                state.marks[retired_writer(decoded.writer_id, stored.seen.instance)] = retired
                stored = None
            elif verdict_of_instance not in (None, RESTARTED):
                return reject(verdict_of_instance, decoded.writer_id)
        verdict = accept_mark(stored.mark if stored else None, mark)
        if verdict is not Verdict.ACCEPTED:
            return reject(verdict.value, decoded.writer_id)
        first_seen = now_ms if record.arrival_ms is None else record.arrival_ms
        seen = WriterSeen(
            decoded.instance,
            first_seen if stored is None else stored.seen.first_seen_ms,
            record.arrival_ms,
        )
        state.marks[decoded.writer_id] = StoredMark(mark, record.partition, record.offset, seen)
        if state.first_mark_ms is None:
            state.first_mark_ms = now_ms
        return None

    # the cycle ------------------------------------------------------------------------------

    def cycle(self, stream: str, state: StreamState, now_ms: int) -> list[Output]:
        """One run of ``watermark_cycle`` with the last-stable-offset check around it;
        sets ``state.due_ms`` to when waiting can next change the outcome. Then the
        stream's laggards, when they changed since the last recorded snapshot."""
        out = self._cycle(stream, state, now_ms)
        for _ in range(len(state.marks)):
            if not (out and isinstance(out[-1], Emitted) and _shut_down_at_watermark(state)):
                break
            # A shut-down writer that bounded this watermark is dropped by the next cycle,
            # which may emit again at once (a retired instance in a replayed batch): run it
            # now rather than wait for the stream's next mark.
            out += self._cycle(stream, state, now_ms)
        found = laggards_of(stream, state, now_ms, self.settings.laggard_threshold_ms)
        rows = laggard_update(stream, found, state.laggards, now_ms)
        if rows is not None:
            state.laggards = found
            out.append(LaggardRows(stream, tuple(rows)))
        return out

    def _cycle(self, stream: str, state: StreamState, now_ms: int) -> list[Output]:
        state.due_ms = None
        if not state.marks:
            return []
        meta = self.streams.stream(stream)
        if meta is None:  # deleted since its marks were accepted: nothing to emit
            return []
        timeout = self.timeout_ms(meta)
        first, delay = state.first_mark_ms, meta.config.first_watermark_delay_ms
        if delay and state.generation.previous is None and first is not None:
            starts = first + delay
            if now_ms < starts:  # Pravega's start-up delay: late writers may still join
                state.due_ms = starts
                return []
        stored = dict(state.marks)
        marks = {w: s.mark for w, s in stored.items()}
        arrivals = [
            s.seen.last_seen_ms for s in state.marks.values() if s.seen.last_seen_ms is not None
        ]
        result = watermark_cycle(stream, marks, state.generation, meta.epochs, now_ms, timeout)
        wm = result.watermark
        if wm is not None:
            beyond = self._beyond_committed(meta, wm.stream_cut, now_ms)
            if beyond:
                out = self._hold(stream, state, meta, beyond, now_ms)
                state.due_ms = (
                    now_ms + self.settings.interval_ms
                    if state.held_since_ms is not None
                    else self._lag_due(state.generation, timeout, now_ms)
                )
                return out
        state.held_since_ms = None
        previous = state.generation.previous
        state.generation = result.state
        for writer in result.removed:
            state.marks.pop(writer, None)
        state.due_ms = self._lag_due(state.generation, timeout, now_ms)
        if wm is None:
            return []
        if any(s.mark.time > wm.time for s in state.marks.values()):
            # Writers at the watermark's time lag from the next cycle on, and only a cycle
            # can see it: with no further mark (every writer gone quiet), that is a due one.
            # A timeout later (an interval at least), so that a stream with marks flowing
            # never needs it.
            state.due_ms = now_ms + max(timeout, self.settings.interval_ms)
        writers = tuple(
            sorted(w for w, m in marks.items() if previous is None or m.time > previous.time)
        )
        top = (
            wm.upper_time
            if state.upper_time_max is None
            else max(state.upper_time_max, wm.upper_time)
        )
        state.upper_time_max = top
        observation = Observation.of({w: marks[w] for w in writers})
        vouchers = tuple(sorted({voucher(w, stored[w]) for w in writers}, key=str))
        noted = max(arrivals, default=None)
        return [Emitted(wm, writers, top, now_ms, noted, observation, vouchers)]

    @staticmethod
    def _lag_due(generation: GenerationState, timeout_ms: int, now_ms: int) -> int | None:
        """When the earliest lagging writer times out (``None``: no writer lags)."""
        if not generation.lagging_since:
            return None
        return max(now_ms + 1, min(generation.lagging_since.values()) + timeout_ms)

    def _beyond_committed(
        self, meta: StreamMetadata, cut: Mapping[int, int], now_ms: int
    ) -> dict[int, int]:
        """Partition -> offset of the cut's entries past the topic's last stable offset.

        Timers mode: ``now_ms`` is the micro-batch's timestamp, taken before its input's
        end offsets were read, so every mark of the batch -- and the records its position
        covers -- was in Kafka before then. A last stable offset read at or after it is
        fresh enough for every stream of the batch: a Python worker asks Kafka once per
        batch, not once per slot (a cut still beyond it holds, and the hold asks again).
        Ticks mode: tick times are not wall-clock times; the cache answers only when
        it is already past the cut."""
        needed: dict[int, int] = {}
        for seg, offset in cut.items():
            if offset > 0:
                part = segment_number(seg)
                needed[part] = max(offset, needed.get(part, 0))
        if not needed:
            return {}
        fresh = None if self.settings.trigger is CycleTrigger.TICKS else now_ms
        stable = self.committed.last_stable(meta.topic, needed, fresh)
        return {p: o for p, o in needed.items() if o > stable.get(p, 0)}

    def _hold(
        self,
        stream: str,
        state: StreamState,
        meta: StreamMetadata,
        beyond: Mapping[int, int],
        now_ms: int,
    ) -> list[Output]:
        if state.held_since_ms is None:
            state.held_since_ms = now_ms
            log.info("stream %s: cut past the last stable offset %s; holding", stream, beyond)
        if now_ms - state.held_since_ms < self.settings.lso_hold_ms:
            return []
        needed: dict[int, int] = {}
        for stored in state.marks.values():
            for seg, off in stored.mark.position.items():
                part = segment_number(seg)
                needed[part] = max(off, needed.get(part, 0))
        stable = self.committed.last_stable(meta.topic, needed)
        out: list[Output] = []
        for writer, stored in sorted(state.marks.items()):
            if any(
                off > stable.get(segment_number(seg), 0)
                for seg, off in stored.mark.position.items()
            ):
                del state.marks[writer]
                record = WriterMarkRecord.from_mark(
                    stream, writer, stored.mark, instance=stored.seen.instance
                )
                out.append(
                    Rejected(
                        stream,
                        writer,
                        Reason.BEYOND_COMMITTED,
                        record.encode(),
                        stored.partition,
                        stored.offset,
                        now_ms,
                    )
                )
        state.held_since_ms = None
        return out


def describe(outputs: Sequence[Output]) -> dict[str, Any]:
    """A summary for logs: counts by kind and reason."""
    summary: dict[str, Any] = {"emitted": 0, "rejected": {}}
    for o in outputs:
        if isinstance(o, Emitted):
            summary["emitted"] += 1
        elif isinstance(o, LaggardRows):
            summary["laggards"] = summary.get("laggards", 0) + 1
        else:
            summary["rejected"][o.reason] = summary["rejected"].get(o.reason, 0) + 1
    return summary


__all__ = [
    "TICK_PREFIX",
    "CommittedOffsets",
    "Emitted",
    "LaggardRows",
    "MarkInput",
    "Observation",
    "Output",
    "RegistrationLookup",
    "Rejected",
    "StoredMark",
    "StreamLookup",
    "StreamState",
    "StreamWorkflow",
    "parse_tick",
    "retired_writer",
    "tick_value",
    "voucher",
]
