"""The timeline store's housekeeping: the schema's migrations, the stream times that
make event-time messages due, and the purge of deleted rows.

    store.migrate()
    store.advance_stream_time("shop/orders", watermark_ms)
    store.purge(keep_deleted_ms=3_600_000)    # what PurgeLoop runs on a schedule
"""

from __future__ import annotations

import psycopg

from tidemark.pipelines.timeline.clock import NOW_MS
from tidemark.pipelines.timeline.exceptions import (
    ConcurrentChangeError,
    StreamTimeAheadError,
    StreamTimeBackwardsError,
    StreamTimeNotPermittedError,
    TimelineDatabaseError,
)
from tidemark.pipelines.timeline.migrations import apply_migrations
from tidemark.pipelines.timeline.model import MAX_STREAM_TIME_LEAD_MS, check_name, check_timestamp
from tidemark.pipelines.timeline.relay_sql import purge_relayed
from tidemark.pipelines.timeline.store_session import StoreSession


class Housekeeping(StoreSession):
    """Migrations, stream times and purge: the statements no message's owner or holder makes."""

    def migrate(self) -> list[int]:
        """Create or upgrade the schema; returns the migration versions applied."""
        return self._run(apply_migrations)

    # -- stream times (event-time messages) -------------------------------------

    def advance_stream_time(self, stream: str, time_ms: int) -> int:
        """Record that ``stream``'s watermark reached ``time_ms``; returns the recorded time.

        Feed it only watermark times (``wait_for_time``, a watermark source): a
        message due at stream time T is handed out as soon as a time >= T is
        recorded here. Refused, in the same statement, with
        :class:`StreamTimeBackwardsError` when ``time_ms`` is behind the
        recorded time (the same time again is a no-op) and with
        :class:`StreamTimeAheadError` when it is more than
        :data:`MAX_STREAM_TIME_LEAD_MS` past the database's now.
        """
        check_name("stream", stream)
        check_timestamp("time_ms", time_ms)
        params = {"s": stream, "t": time_ms, "lead": MAX_STREAM_TIME_LEAD_MS}
        try:
            row = self._one(
                f"""INSERT INTO timeline_stream_times (stream, time_ms, updated_at_ms)
                    SELECT %(s)s, %(t)s, {NOW_MS} WHERE %(t)s::BIGINT <= {NOW_MS} + %(lead)s
                    ON CONFLICT (stream) DO UPDATE
                    SET time_ms = excluded.time_ms, updated_at_ms = excluded.updated_at_ms
                    WHERE timeline_stream_times.time_ms <= excluded.time_ms
                    RETURNING time_ms""",
                params,
            )
        except TimelineDatabaseError as exc:
            if isinstance(exc.__cause__, psycopg.errors.InsufficientPrivilege):
                raise StreamTimeNotPermittedError(
                    f"stream {stream!r}: this database role may not record stream times; "
                    "only the relay's and consumers' roles may (grant_timeline_roles clocks)"
                ) from exc
            raise
        if row is not None:
            return int(row[0])
        now = self.now_ms()
        if time_ms > now + MAX_STREAM_TIME_LEAD_MS:
            raise StreamTimeAheadError(
                f"stream {stream!r}: time {time_ms} is more than {MAX_STREAM_TIME_LEAD_MS} ms "
                f"past the database's now {now}; a watermark never is"
            )
        recorded = self.stream_times([stream]).get(stream)
        if recorded is not None and recorded > time_ms:
            raise StreamTimeBackwardsError(
                f"stream {stream!r}: time {time_ms} is behind the recorded {recorded}; "
                "stream time only moves forward"
            )
        raise ConcurrentChangeError(f"stream {stream!r}: time changed concurrently; retry")

    def waiting_streams(self, timeline: str) -> dict[str, int]:
        """Streams that event-time messages of ``timeline`` wait for -> the earliest time."""
        check_name("timeline", timeline)
        rows = self._all(
            """SELECT m.due_stream, min(m.ts) FROM timeline_messages AS m
               WHERE m.timeline = %(t)s AND m.due_stream IS NOT NULL
                 AND m.deleted_at_ms IS NULL
               GROUP BY m.due_stream""",
            {"t": timeline},
        )
        return {str(r[0]): int(r[1]) for r in rows}

    # -- purge ----------------------------------------------------------------------

    def purge(self, keep_deleted_ms: int = 3_600_000, batch_size: int = 1_000) -> int:
        """Remove messages deleted more than ``keep_deleted_ms`` ago, in batches.

        Until purged, a deleted id cannot be created again: this window is how
        long replayed creates (ingest, retries) are recognised as duplicates. On
        PostgreSQL the messages relays delivered that long ago go too, by range
        (:func:`.relay_sql.purge_relayed`).
        """
        total = 0 if self.is_cockroach else self._run(lambda c: purge_relayed(c, keep_deleted_ms))
        while True:
            rows = self._all(
                f"""DELETE FROM timeline_messages WHERE (timeline, id) IN (
                        SELECT timeline, id FROM timeline_messages
                        WHERE deleted_at_ms IS NOT NULL
                          AND deleted_at_ms <= {NOW_MS} - %(keep)s
                        LIMIT %(n)s)
                    RETURNING id""",
                {"keep": keep_deleted_ms, "n": batch_size},
            )
            total += len(rows)
            if len(rows) < batch_size:
                return total
