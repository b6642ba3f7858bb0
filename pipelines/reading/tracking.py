"""Tracking a Delta table written by a streaming query: each version -> complete through T.

    track("/lake/orders_enriched", "/chk/orders_enriched", delta_root="/data/delta")
    tracker = Tracker(TableLocation.of("/data/delta"))
    tracker.poll()            # every tracked table's new versions answered; [] while idle

For each new version of the table, the writer's batch it commits (the ``txn`` action of
the writer id: the query's id for the Delta streaming sink, a ``foreachBatch`` writer's
``txnAppId``; or the record :func:`recording_consumed` leaves in the commit) gives,
through the query's offset log (or that record), what had been consumed of each
stream (Kafka partition -> next offset), and the streams' watermarks (the ``index``
table, as readers see it) give the time that is complete through
(:mod:`tidemark.controller.completeness`). Answers are appended to ``table_completeness``;
a version whose time a later watermark raises gets a row again. A version with no batch
of the writer's (OPTIMIZE, a VACUUM, a batch whose offsets the checkpoint has purged)
keeps its predecessor's time. A checkpoint that is gone, or that now belongs to another
query, makes the table's completeness unknown, with that reason, until it is tracked
again; nothing said before is lowered.

While neither the table nor, for a version that could still rise, a stream's
watermarks move, a poll costs a ``stat`` per table.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tidemark.controller.completeness import (
    Answer,
    Series,
    answer,
    could_rise,
    raised,
    through_of,
    unknown,
)
from tidemark.controller.delta.location import Root, TableLocation
from tidemark.controller.delta.tracked import (
    Writer,
    answer_of,
    answer_row,
    append_answers,
    completeness_table,
    latest_rows,
    read_answers,
    table_id,
    writer_of,
)
from tidemark.controller.delta.writer_log import (
    Commit,
    StreamingCheckpoint,
    consumed_metadata,
    latest_version,
    next_commit,
    table_commits,
)
from tidemark.controller.naming import stream_of_topic
from tidemark.controller.timestamps import wall_clock_ms
from tidemark.errors import TidemarkError
from tidemark.pipelines.reading.exceptions import TableCompletenessError
from tidemark.pipelines.reading.seek import SeekIndex, shared_index

log = logging.getLogger(__name__)


def streams_read(checkpoint: StreamingCheckpoint) -> set[str]:
    """The tidemark streams a query reads (its Kafka topics that are streams')."""
    return {s for t in checkpoint.topics() if (s := stream_of_topic(t)) is not None}


@dataclass
class TableTracker:
    """One tracked table: who writes it, the streams it reads, what was answered so far."""

    table: str
    writer: Writer
    streams: set[str]
    latest: Answer | None = None
    open: list[Answer] = field(default_factory=list)
    """Answers a newer watermark could still raise."""

    @property
    def checkpoint(self) -> StreamingCheckpoint:
        return StreamingCheckpoint(self.writer.checkpoint)

    def poll(self, index: SeekIndex) -> list[Answer]:
        """The new answers: new versions, raised ones, or the turn to unknown."""
        reason = self._unknown_reason()
        if reason is not None:
            if self.latest is not None and self.latest.reason == reason:
                return []
            version = latest_version(self.table)
            gone = unknown(-1 if version is None else version, reason)
            self.latest, self.open = gone, []
            return [gone]
        last = None if self.latest is None else self.latest.version
        moved = last is None or next_commit(self.table, last)
        if not moved and not self.open:
            return []
        series = self._series(index)
        found = [a for a in (raised(o, series) for o in self.open) if a not in self.open]
        for a in found:
            if self.latest is not None and a.version == self.latest.version:
                self.latest = a
        if moved:
            found += self._versions(table_commits(self.table, last), series)
        kept = {a.version: a for a in [*self.open, *found]}
        self.open = [a for a in kept.values() if could_rise(a, series)][-OPEN_KEPT:]
        return found

    def _unknown_reason(self) -> str | None:
        current = self.checkpoint.query_id()
        where = self.writer.checkpoint
        if current is None:
            return f"the checkpoint {where} is gone (or unreadable)"
        if self.writer.query_id is not None and current != self.writer.query_id:
            return (
                f"the checkpoint {where} now belongs to another query ({current}, not "
                f"{self.writer.query_id}): it was dropped and started afresh; track the "
                "table again"
            )
        return None

    def _versions(self, commits: list[Commit], series: Mapping[str, Series]) -> list[Answer]:
        found = []
        for commit in commits:
            batch = commit.txns.get(self.writer.app_id)
            recorded = commit.recorded.get(self.writer.app_id)
            if recorded is not None:  # the commit itself says what its batch consumed
                consumed: dict[str, dict[int, int]] | None = self._by_stream(recorded)
            else:
                consumed = None if batch is None else self._consumed(batch)
            if batch is not None and consumed is None:
                log.warning(
                    "%s: version %d's batch %d is no longer in the checkpoint: kept at "
                    "its predecessor's time",
                    self.table,
                    commit.version,
                    batch,
                )
            through = None if consumed is None else through_of(consumed, series)
            self.latest = answer(self.latest, commit.version, consumed, through, batch=batch)
            found.append(self.latest)
        return found

    def _consumed(self, batch: int) -> dict[str, dict[int, int]] | None:
        offsets = self.checkpoint.consumed(batch)
        return None if offsets is None else self._by_stream(offsets)

    def _by_stream(self, offsets: Mapping[str, Mapping[int, int]]) -> dict[str, dict[int, int]]:
        """Consumed offsets by topic as this table's streams' (every stream it reads)."""
        by_stream = {s: c for t, c in offsets.items() if (s := stream_of_topic(t)) is not None}
        self.streams |= set(by_stream)
        # Every stream the query reads, those without offsets yet as nothing consumed:
        # a source that has read nothing holds the table back, it is not left out.
        return {s: dict(by_stream.get(s) or {}) for s in sorted(self.streams)}

    def _series(self, index: SeekIndex) -> dict[str, Series]:
        return {stream: _series_of(index, stream) for stream in self.streams}


OPEN_KEPT = 64
"""At most this many answers per table are kept for a newer watermark to raise (the
newest): an older version is complete through what it was first found to be."""


def _series_of(index: SeekIndex, stream: str) -> Series:
    """A stream's watermarks as the index holds them now (cuts read where searched)."""
    seqs, times, _ = index.columns(stream)
    seqs, times = seqs[:], times[:]  # (copies: the index's arrays grow as it refreshes)

    def cut(at: int) -> Mapping[int, int]:
        return index.cut(stream, seqs[at], times[at])

    return Series(times, cut)


class Tracker:
    """Tracks every table registered under a delta root (``table_completeness``'s)."""

    def __init__(self, lake: Root, index: SeekIndex | None = None) -> None:
        self.lake = TableLocation.of(lake)
        self.index = index or shared_index(self.lake)
        self.tables: dict[str, TableTracker] = {}
        self._lock = threading.Lock()
        self._loaded: int | None = None
        """The version of ``table_completeness`` :meth:`load` read last."""

    def load(self) -> None:
        """Pick up the tables registered under the root, as their latest rows left them
        (a ``stat`` while ``table_completeness`` has not moved since the last load)."""
        answers = completeness_table(self.lake)
        if not answers.on_object_store:
            if self._loaded is not None and not next_commit(answers.uri, self._loaded):
                return
            self._loaded = latest_version(answers.uri)
        by_table: dict[str, list[dict[str, Any]]] = {}
        for row in read_answers(self.lake):
            by_table.setdefault(str(row["table"]), []).append(row)
        with self._lock:
            for table, rows in by_table.items():
                if table not in self.tables:
                    self.tables[table] = _resumed(table, rows)

    def add(self, table: str, checkpoint: str, app_id: str | None = None) -> TableTracker:
        """Register ``table``, written by the query whose checkpoint is ``checkpoint``
        (``app_id``: the writer id of its ``txn`` actions; default the query's id). A
        table tracked before goes on from its latest answer."""
        name = table_id(table)
        if latest_version(name) is None:
            raise TableCompletenessError(
                f"no Delta table at {table}: start the query that writes it first"
            )
        chk = StreamingCheckpoint(str(checkpoint))
        query_id = chk.query_id()
        if query_id is None:
            raise TableCompletenessError(
                f"no streaming query checkpoint at {checkpoint} (no metadata file): give "
                "the checkpointLocation of the query that writes the table"
            )
        streams = streams_read(chk)
        if not streams:
            raise TableCompletenessError(
                f"the query of checkpoint {checkpoint} reads no tidemark stream (its "
                f"Kafka topics: {', '.join(sorted(chk.topics())) or 'none'})"
            )
        writer = Writer(chk.uri, app_id or query_id, query_id)
        rows = read_answers(self.lake, name)
        tracker = TableTracker(name, writer, streams)
        if rows:
            before = _resumed(name, rows)
            tracker.latest, tracker.open = before.latest, before.open
            tracker.streams |= before.streams
        with self._lock:
            self.tables[name] = tracker
        return tracker

    def poll(self) -> list[Answer]:
        """One pass over every tracked table; the answers appended."""
        now = wall_clock_ms()
        found: list[Answer] = []
        with self._lock:
            rows = []
            for tracker in self.tables.values():
                try:
                    answers = tracker.poll(self.index)
                except (OSError, TidemarkError) as exc:
                    log.warning("%s: not tracked this time: %s", tracker.table, exc)
                    continue
                rows += [answer_row(tracker.table, a, tracker.writer, now) for a in answers]
                found += answers
            append_answers(self.lake, rows)
        return found

    def run(self, stop: threading.Event, interval_ms: int = 1000) -> None:
        """Poll every ``interval_ms`` until ``stop`` is set (tables registered meanwhile
        are picked up at the next pass)."""
        while not stop.is_set():
            self.load()
            self.poll()
            stop.wait(interval_ms / 1000)


def _resumed(table: str, rows: list[dict[str, Any]]) -> TableTracker:
    """A table's tracker as its rows left it: the latest version's answer, and the
    answers a watermark could still raise (checked again at the next poll)."""
    latest = latest_rows(rows)
    answers = [answer_of(latest[v]) for v in sorted(latest)]
    writer = writer_of(latest[max(latest)])
    streams = {s for a in answers for s in a.consumed}
    tracker = TableTracker(
        table, writer, streams or streams_read(StreamingCheckpoint(writer.checkpoint))
    )
    tracker.latest = answers[-1]
    tracker.open = [a for a in answers if a.known and a.consumed][-OPEN_KEPT:]
    return tracker


USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
"""The Spark setting whose text Delta writes into each commit's ``userMetadata``."""


@contextlib.contextmanager
def recording_consumed(
    spark: Any, checkpoint: str, batch_id: int, *, writer: str | None = None
) -> Iterator[str]:
    """Within the block, every Delta commit ``spark`` makes records that it is batch
    ``batch_id`` of ``writer`` (default: the query's id, as tracking expects) and what
    that batch had consumed (its end offsets, from the checkpoint's offset log), for a
    ``foreachBatch`` writer that uses neither the Delta sink nor ``txnAppId``::

        def write(batch, batch_id):
            with recording_consumed(batch.sparkSession, CHECKPOINT, batch_id):
                batch.write.format("delta").mode("append").save(TABLE)

    ``spark`` is the batch's session (``batch.sparkSession``: the query's own), whose
    ``userMetadata`` setting is taken for the block and given back after. The record
    does not make the write idempotent: a replayed batch commits again, recording the
    same offsets. Yields the recorded text; :class:`TableCompletenessError` when the
    checkpoint holds no query or no offsets for the batch."""
    chk = StreamingCheckpoint(str(checkpoint))
    name = writer or chk.query_id()
    if name is None:
        raise TableCompletenessError(
            f"no streaming query checkpoint at {checkpoint} (no metadata file): give the "
            "checkpointLocation of the query whose batch this is"
        )
    consumed = chk.consumed(batch_id)
    if consumed is None:
        raise TableCompletenessError(
            f"the checkpoint {checkpoint} holds no offsets for batch {batch_id}: give the "
            "checkpointLocation of the query whose batch this is"
        )
    text = consumed_metadata(name, batch_id, consumed)
    before = spark.conf.get(USER_METADATA_CONF, None)
    spark.conf.set(USER_METADATA_CONF, text)
    try:
        yield text
    finally:
        if before is None:
            spark.conf.unset(USER_METADATA_CONF)
        else:
            spark.conf.set(USER_METADATA_CONF, before)


def track(
    table: str, checkpoint: str, *, app_id: str | None = None, lake: Root = None
) -> list[Answer]:
    """Register ``table`` under ``lake``'s ``table_completeness`` and answer its versions
    so far; tracking goes on in :meth:`Tracker.run` (``tidemark table track --follow``)."""
    tracker = Tracker(lake)
    tracker.add(table, checkpoint, app_id)
    return tracker.poll()


__all__ = [
    "OPEN_KEPT",
    "USER_METADATA_CONF",
    "TableTracker",
    "Tracker",
    "recording_consumed",
    "streams_read",
    "track",
]
