"""Who may do what in the timeline's database: its clients, and its stream clock.

    with psycopg.connect(owner_dsn, autocommit=True) as conn:   # the schema's owner
        grant_timeline_roles(conn, clients=["orders_app"], clocks=["timeline_relay"])

A stream's time (``timeline_stream_times``) makes every message waiting for that
stream due: moving it early releases a backfill's messages at once. Recording it is
the stream clock's job (``timeline relay``, ``timeline ingest`` and a
:class:`~tidemark.pipelines.timeline.consumer.TimelineConsumer` with a
``stream_clock``), so the database itself refuses it to anyone else:

- **clients** (producers, a consumer without a stream clock, the CLI's message verbs,
  and the like) use messages, timelines, consumers and the buffer's offsets, and
  may read stream times but never write them;
- **clocks** (the relay and the consumers that feed stream times) may also insert and
  raise stream times.

The grants are made exact each call: a client's earlier write grant on stream times is
revoked, and so is any PUBLIC one. The schema's owner (who ran the migrations) keeps
every right; run clients and clocks as other roles. PostgreSQL only (CockroachDB has
its own role system and no PUBLIC default to revoke).
"""

from __future__ import annotations

from collections.abc import Iterable

import psycopg
from psycopg import sql

STREAM_TIMES = "timeline_stream_times"
"""The table only clocks may write."""

USED_TABLES = (
    "timeline_timelines",
    "timeline_messages",
    "timeline_consumers",
    "timeline_source_offsets",
    # The relay's cursor and batches: an owner's move or delete locks the relay's state
    # (``FOR SHARE``, which PostgreSQL grants with a write right) before it checks.
    "timeline_relay_state",
    "timeline_relay_batches",
)
"""The tables every timeline process reads and writes."""

READ_ONLY_TABLES = ("timeline_schema_migrations",)
"""Read by every process (which migrations ran), written only by the schema's owner."""

_WRITES = sql.SQL("INSERT, UPDATE, DELETE, TRUNCATE")


def grant_timeline_roles(
    conn: psycopg.Connection[tuple[object, ...]],
    clients: Iterable[str] = (),
    clocks: Iterable[str] = (),
) -> None:
    """Give each client role the clients' rights and each clock role the clocks' (above),
    on a migrated schema, as its owner (or a superuser)."""
    used = sql.SQL(", ").join(sql.Identifier(t) for t in USED_TABLES)
    read_only = sql.SQL(", ").join(sql.Identifier(t) for t in READ_ONLY_TABLES)
    times = sql.Identifier(STREAM_TIMES)
    conn.execute(sql.SQL("REVOKE {} ON {} FROM PUBLIC").format(_WRITES, times))
    for role, clock in [*((c, False) for c in clients), *((c, True) for c in clocks)]:
        who = sql.Identifier(role)
        conn.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}").format(used, who))
        conn.execute(sql.SQL("GRANT SELECT ON {}, {} TO {}").format(read_only, times, who))
        if clock:
            conn.execute(sql.SQL("GRANT INSERT, UPDATE ON {} TO {}").format(times, who))
        else:
            conn.execute(sql.SQL("REVOKE {} ON {} FROM {}").format(_WRITES, times, who))


__all__ = ["READ_ONLY_TABLES", "STREAM_TIMES", "USED_TABLES", "grant_timeline_roles"]
