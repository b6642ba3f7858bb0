"""The timeline's schema, as numbered migrations applied once each.

    apply_migrations(conn)      # idempotent; safe from several processes at once

Every statement is ``IF NOT EXISTS`` and runs on its own (CockroachDB limits
schema changes inside explicit transactions), so a migration interrupted
half-way is simply applied again. The SQL is the common subset of
PostgreSQL and CockroachDB: no sequences, no triggers, no PL/pgSQL, partial
indexes only.

Tables:
- ``timeline_timelines``: one row per timeline (bucket count, body cap).
- ``timeline_messages``: one row per message, keyed by ``(timeline, id)``;
  ``ts`` is the message's place on the timeline (UTC ms; while leased, the end
  of the lease); ``deleted_at_ms`` marks a deleted message until a purge
  removes it (and, until then, keeps a replayed create from reviving it).
- ``timeline_consumers``: live consumers (heartbeats), to spread buckets.
- ``timeline_stream_times`` (migration 2): the latest watermark time known
  per stream, only ever raised; a message with ``due_stream`` set is due when
  its ``ts`` (an event time) is at or below its stream's time here.
- ``timeline_messages.lease_token`` (migration 3): the hash of the current
  lease's token (:func:`model.token_hash`), the capability that extend,
  release and delete by the holder must present. Leases taken before the upgrade have none: nobody
  can act on them, and they come back when they lapse.
- ``timeline_messages.headers`` (migration 4): a message's Kafka headers
  (:func:`model.encode_headers`; NULL: none), delivered by the relay.
- ``timeline_source_offsets`` (migration 5): the buffer's source offsets.
- migration 6 drops the index by producer group, which no statement used.
- ``timeline_messages.lease_until_ms`` (migration 7): the end of the current (or
  lapsed) lease, set with ``lock_consumer`` and cleared with it. ``ts`` stays
  the due time and a lease writes only columns no index covers (the index by
  consumer is dropped), so on PostgreSQL a lease is a HOT update: no index
  entry is written, the new row version stays on its page (``fillfactor`` 35
  leaves the room; PostgreSQL only, skipped on CockroachDB). A message's time
  as :class:`~model.Message` shows it is ``COALESCE(lease_until_ms, ts)``:
  the lease end while leased, as before.
- migration 8 (PostgreSQL only: ``xid8`` and ``pg_snapshot`` are PostgreSQL's), the
  relay's cursor (:mod:`.relay_sql`): ``timeline_messages.wxid``, the transaction that
  wrote the row's place (create or move; NULL for rows written before; its xid as a
  BIGINT), indexed per timeline; ``timeline_relay_state``, one row per relayed timeline (the relay's
  epoch, its last batch and the last one Kafka is known to have, the per-bucket
  cursor and the snapshot it read under), which the producer's move and delete lock
  ``FOR SHARE``; ``timeline_relay_batches``, the state after each batch, kept until
  purged, to resume from the one Kafka committed.
- migration 9 (PostgreSQL only), the relay's delivery (:mod:`.relay_acked`):
  ``timeline_relay_state.delivery`` (``acked``, or NULL: transactional) and
  ``positions``, per partition of the target topic an offset before which every
  record of the batches known delivered lies (where a restart's look for the
  records of the batches after starts).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg

from tidemark.pipelines.timeline.clock import NOW_MS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]
    postgres_only: tuple[str, ...] = ()
    """Storage settings CockroachDB has no use for (run after ``statements``)."""


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "timelines, messages, consumers and their indexes",
        (
            """CREATE TABLE IF NOT EXISTS timeline_timelines (
                name TEXT PRIMARY KEY,
                buckets INT NOT NULL,
                max_body_bytes INT NOT NULL,
                created_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )""",
            """CREATE TABLE IF NOT EXISTS timeline_messages (
                timeline TEXT NOT NULL,
                id TEXT NOT NULL,
                bucket INT NOT NULL,
                ts BIGINT NOT NULL,
                body BYTEA NOT NULL,
                producer_group TEXT NOT NULL,
                lock_consumer TEXT,
                version BIGINT NOT NULL,
                created_at_ms BIGINT NOT NULL,
                deleted_at_ms BIGINT,
                PRIMARY KEY (timeline, id)
            )""",
            # Delivery: due messages of a consumer's buckets, oldest first. The id
            # completes the key, so a lookup by (bucket, ts, id) is exact here too.
            """CREATE INDEX IF NOT EXISTS timeline_messages_due
                ON timeline_messages (timeline, bucket, ts, id) WHERE deleted_at_ms IS NULL""",
            # A consumer's leases (restart with the same id).
            """CREATE INDEX IF NOT EXISTS timeline_messages_consumer
                ON timeline_messages (timeline, lock_consumer)
                WHERE lock_consumer IS NOT NULL AND deleted_at_ms IS NULL""",
            # A producer group's messages (dropped by migration 6: nothing asked).
            """CREATE INDEX IF NOT EXISTS timeline_messages_group
                ON timeline_messages (timeline, producer_group)""",
            # Batch purge of deleted messages.
            """CREATE INDEX IF NOT EXISTS timeline_messages_deleted
                ON timeline_messages (deleted_at_ms) WHERE deleted_at_ms IS NOT NULL""",
            """CREATE TABLE IF NOT EXISTS timeline_consumers (
                timeline TEXT NOT NULL,
                consumer_id TEXT NOT NULL,
                heartbeat_ms BIGINT NOT NULL,
                PRIMARY KEY (timeline, consumer_id)
            )""",
        ),
    ),
    Migration(
        2,
        "event-time messages: due_stream, stream times",
        (
            # Set while a message waits for a stream's watermark to pass ts;
            # cleared by its first lease (from then on, the usual lease rules).
            "ALTER TABLE timeline_messages ADD COLUMN IF NOT EXISTS due_stream TEXT",
            """CREATE INDEX IF NOT EXISTS timeline_messages_stream_due
                ON timeline_messages (timeline, due_stream, ts)
                WHERE due_stream IS NOT NULL AND deleted_at_ms IS NULL""",
            """CREATE TABLE IF NOT EXISTS timeline_stream_times (
                stream TEXT PRIMARY KEY,
                time_ms BIGINT NOT NULL,
                updated_at_ms BIGINT NOT NULL
            )""",
        ),
    ),
    Migration(
        3,
        "lease tokens: the hash of the current lease's capability",
        ("ALTER TABLE timeline_messages ADD COLUMN IF NOT EXISTS lease_token TEXT",),
    ),
    Migration(
        4,
        "message headers: the Kafka headers the relay delivers",
        ("ALTER TABLE timeline_messages ADD COLUMN IF NOT EXISTS headers BYTEA",),
    ),
    Migration(
        5,
        "buffer source offsets: the next offset of each source partition, per timeline",
        (
            # Written in the transaction that stores the records read up to it,
            # so a restarted buffer reads on from exactly there.
            """CREATE TABLE IF NOT EXISTS timeline_source_offsets (
                timeline TEXT NOT NULL,
                topic TEXT NOT NULL,
                part INT NOT NULL,
                next_offset BIGINT NOT NULL,
                PRIMARY KEY (timeline, topic, part)
            )""",
        ),
    ),
    Migration(
        6,
        "drop the producer-group index: no statement reads by group alone",
        (
            # Every write moves a message in its indexes (create, lease: ts; delete:
            # deleted_at_ms), so an index no query uses costs each of them an insert.
            "DROP INDEX IF EXISTS timeline_messages_group",
        ),
    ),
    Migration(
        7,
        "lease end in a column of its own: a lease writes no indexed column",
        (
            "ALTER TABLE timeline_messages ADD COLUMN IF NOT EXISTS lease_until_ms BIGINT",
            # Leases taken before the upgrade kept their end in ts: it becomes their
            # lease end (their time when they lapse, as before), and ts comes down to
            # now at most, where the statements that look for leases find them.
            f"""UPDATE timeline_messages
                SET lease_until_ms = ts, ts = LEAST(ts, {NOW_MS})
                WHERE lock_consumer IS NOT NULL AND lease_until_ms IS NULL""",
            # A lease sets lock_consumer: indexed, no lease could be a HOT update.
            # leases_of and the buffer's recovery find leases by the due index instead.
            "DROP INDEX IF EXISTS timeline_messages_consumer",
        ),
        postgres_only=(
            # Room on each page for a new version of its rows (a lease adds ~80 bytes
            # to a row): the rows leased in one batch were created together, so they
            # share pages. 35 %: rows of ~150 bytes (a 64-byte body) all fit again.
            "ALTER TABLE timeline_messages SET (fillfactor = 35)",
        ),
    ),
    Migration(
        8,
        "the relay's cursor: writing transaction per row, relay state and batches",
        (),
        postgres_only=(
            # No default on the ADD (a volatile default rewrites the table): rows
            # written before have none, and count as written before any cursor.
            "ALTER TABLE timeline_messages ADD COLUMN IF NOT EXISTS wxid BIGINT",
            "ALTER TABLE timeline_messages ALTER COLUMN wxid "
            "SET DEFAULT pg_current_xact_id()::TEXT::BIGINT",
            # The relay's late rows: written since the snapshot of its last batch. (A
            # BRIN index costs a create less, but the pages not summarised yet, those
            # written last, are read whole by every batch.)
            """CREATE INDEX IF NOT EXISTS timeline_messages_written
                ON timeline_messages (timeline, wxid) WHERE deleted_at_ms IS NULL""",
            """CREATE TABLE IF NOT EXISTS timeline_relay_state (
                timeline TEXT PRIMARY KEY,
                epoch BIGINT NOT NULL,
                seq BIGINT NOT NULL,
                confirmed BIGINT NOT NULL,
                cursor_ts BIGINT[] NOT NULL,
                cursor_id TEXT[] NOT NULL,
                snap pg_snapshot NOT NULL,
                updated_at_ms BIGINT NOT NULL
            )""",
            """CREATE TABLE IF NOT EXISTS timeline_relay_batches (
                timeline TEXT NOT NULL,
                seq BIGINT NOT NULL,
                cursor_ts BIGINT[] NOT NULL,
                cursor_id TEXT[] NOT NULL,
                snap pg_snapshot NOT NULL,
                written_at_ms BIGINT NOT NULL,
                PRIMARY KEY (timeline, seq)
            )""",
        ),
    ),
    Migration(
        9,
        "the relay's delivery and, for acknowledged delivery, its target positions",
        (),
        postgres_only=(
            # NULL: transactional (every relay before this migration was).
            "ALTER TABLE timeline_relay_state ADD COLUMN IF NOT EXISTS delivery TEXT",
            "ALTER TABLE timeline_relay_state ADD COLUMN IF NOT EXISTS positions BIGINT[]",
        ),
    ),
)

_LEDGER = """CREATE TABLE IF NOT EXISTS timeline_schema_migrations (
    version INT PRIMARY KEY,
    description TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)"""


def applied_versions(conn: psycopg.Connection[tuple[object, ...]]) -> set[int]:
    rows = conn.execute("SELECT version FROM timeline_schema_migrations").fetchall()
    return {int(str(row[0])) for row in rows}


def apply_migrations(conn: psycopg.Connection[tuple[object, ...]]) -> list[int]:
    """Apply what is missing on an autocommit connection; returns the versions applied."""
    try:
        # Read first: a client role that may not create tables (only use them) migrates
        # nothing once the schema is there, and never reaches a CREATE.
        done = applied_versions(conn)
    except psycopg.errors.UndefinedTable:
        conn.execute(_LEDGER)
        done = applied_versions(conn)
    row = conn.execute("SELECT version()").fetchone()
    postgres = row is not None and "cockroach" not in str(row[0]).lower()
    applied = []
    for migration in MIGRATIONS:
        if migration.version in done:
            continue
        extra = migration.postgres_only if postgres else ()
        for statement in (*migration.statements, *extra):
            try:
                conn.execute(statement)
            except psycopg.errors.UniqueViolation:
                # Two processes creating the same table at once (PostgreSQL's
                # IF NOT EXISTS is not race-free); the other one made it.
                log.info("migration %s: created concurrently", migration.version)
        conn.execute(
            "INSERT INTO timeline_schema_migrations (version, description) VALUES (%s, %s) "
            "ON CONFLICT (version) DO NOTHING",
            (migration.version, migration.description),
        )
        applied.append(migration.version)
        log.info("applied timeline migration %s: %s", migration.version, migration.description)
    return applied
