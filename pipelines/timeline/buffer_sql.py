"""The SQL of the timeline buffer: records and source offsets in one transaction.

Each function takes a connection inside a transaction
(:meth:`TimelineStore.transaction`). The statements are the PostgreSQL /
CockroachDB common subset: ``unnest`` of several arrays, ``ON CONFLICT``,
``LIKE`` on the lease token's hash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from tidemark.pipelines.timeline.clock import NOW_MS
from tidemark.pipelines.timeline.store import LEASED_TS_BOUND, NOTIFY_CHANNEL

Conn = psycopg.Connection[tuple[Any, ...]]


@dataclass(frozen=True)
class BufferedRows:
    """A batch of records as columns: ``ts`` is relative to the database's now()
    where ``relative`` is set (a delay), absolute otherwise."""

    ids: list[str]
    buckets: list[int]
    ts: list[int]
    relative: list[bool]
    bodies: list[bytes]
    streams: list[str | None]


def load_offsets(conn: Conn, timeline: str, topic: str) -> dict[int, int]:
    """The next offset to read of each partition of ``topic`` that has one stored."""
    rows = conn.execute(
        "SELECT part, next_offset FROM timeline_source_offsets "
        "WHERE timeline = %(t)s AND topic = %(topic)s",
        {"t": timeline, "topic": topic},
    ).fetchall()
    return {int(r[0]): int(r[1]) for r in rows}


def store_batch(
    conn: Conn,
    timeline: str,
    producer_group: str,
    rows: BufferedRows,
    topic: str,
    next_offsets: Mapping[int, int],
    notify: bool,
) -> int:
    """Insert the records (an id already there is skipped) and move the offsets on;
    returns how many records were new."""
    inserted = 0
    if rows.ids:
        cur = conn.execute(
            f"""INSERT INTO timeline_messages
                    (timeline, id, bucket, ts, body, producer_group, lock_consumer, version,
                     created_at_ms, due_stream)
                SELECT %(t)s, u.id, u.bucket,
                       CASE WHEN u.rel THEN {NOW_MS} + u.ts ELSE u.ts END,
                       u.body, %(g)s, NULL, 1, {NOW_MS}, u.stream
                FROM unnest(%(ids)s::TEXT[], %(buckets)s::INT[], %(ts)s::BIGINT[],
                            %(rel)s::BOOL[], %(bodies)s::BYTEA[], %(streams)s::TEXT[])
                     AS u (id, bucket, ts, rel, body, stream)
                ON CONFLICT (timeline, id) DO NOTHING""",
            {
                "t": timeline,
                "g": producer_group,
                "ids": rows.ids,
                "buckets": rows.buckets,
                "ts": rows.ts,
                "rel": rows.relative,
                "bodies": rows.bodies,
                "streams": rows.streams,
            },
        )
        inserted = max(cur.rowcount, 0)
    if next_offsets:
        conn.execute(
            """INSERT INTO timeline_source_offsets (timeline, topic, part, next_offset)
               SELECT %(t)s, %(topic)s, u.part, u.next_offset
               FROM unnest(%(parts)s::INT[], %(offsets)s::BIGINT[]) AS u (part, next_offset)
               ON CONFLICT (timeline, topic, part) DO UPDATE
               SET next_offset = excluded.next_offset
               WHERE timeline_source_offsets.next_offset < excluded.next_offset""",
            {
                "t": timeline,
                "topic": topic,
                "parts": list(next_offsets),
                "offsets": list(next_offsets.values()),
            },
        )
    if notify and rows.ids:
        # One wake-up per batch, at its earliest due time (LEAST skips NULLs).
        absolute = [t for t, r in zip(rows.ts, rows.relative, strict=True) if not r]
        delays = [t for t, r in zip(rows.ts, rows.relative, strict=True) if r]
        conn.execute(
            f"""SELECT pg_notify('{NOTIFY_CHANNEL}',
                   LEAST(%(abs)s::BIGINT, {NOW_MS} + %(rel)s::BIGINT)::TEXT || ' ' || %(t)s)""",
            {
                "t": timeline,
                "abs": min(absolute, default=None),
                "rel": min(delays, default=None),
            },
        )
    return inserted


def finish_batches(conn: Conn, timeline: str, consumer: str, hashes: Sequence[str]) -> int:
    """Delete the messages still leased under the lease calls whose token hashes are
    ``hashes`` (a batch the target topic has committed); returns how many."""
    if not hashes:
        return 0
    cur = conn.execute(
        f"""UPDATE timeline_messages AS m
            SET deleted_at_ms = {NOW_MS}, version = m.version + 1, lease_token = NULL
            WHERE m.timeline = %(t)s AND {LEASED_TS_BOUND} AND m.lock_consumer = %(c)s
              AND m.deleted_at_ms IS NULL AND m.lease_token LIKE ANY(%(patterns)s)""",
        {"t": timeline, "c": consumer, "patterns": [f"{h}.%" for h in hashes]},
    )
    return max(cur.rowcount, 0)


def release_all(conn: Conn, timeline: str, consumer: str) -> int:
    """Give back every lease held under ``consumer`` (an earlier run's, whose Kafka
    transaction was aborted): due again now; returns how many."""
    cur = conn.execute(
        f"""UPDATE timeline_messages AS m
            SET ts = {NOW_MS}, lock_consumer = NULL, lease_until_ms = NULL, lease_token = NULL,
                version = m.version + 1
            WHERE m.timeline = %(t)s AND {LEASED_TS_BOUND} AND m.lock_consumer = %(c)s
              AND m.deleted_at_ms IS NULL""",
        {"t": timeline, "c": consumer},
    )
    return max(cur.rowcount, 0)
