"""The consumers' side of the timeline store: leases and the capability tokens that act
on them.

    for lease in store.lease("reminders", "worker-1", lease_ms=30_000):
        store.delete("reminders", lease.message.id, consumer="worker-1", token=lease.token)

A lease locks the oldest due rows of each bucket (skipping rows another consumer is
leasing), writes the consumer's name, the lease's end and the hash of its token, and
hands the token out; extend, release and delete by the holder present it, checked in
the same statement. Membership (heartbeats of the consumers of a timeline) lives here
too: it is what a consumer group shares its buckets by.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from tidemark.pipelines.timeline.clock import NOW_MS
from tidemark.pipelines.timeline.exceptions import InvalidMessageError, TimeInPastError
from tidemark.pipelines.timeline.model import (
    MAX_LEASE_MS,
    Lease,
    Message,
    Op,
    base_hash,
    check_lease,
    check_name,
    check_timestamp,
    check_token,
    lease_token,
    new_token_base,
    token_hash,
)
from tidemark.pipelines.timeline.store_session import StoreSession
from tidemark.pipelines.timeline.store_sql import (
    _HOLDER,
    _LEASE_SET,
    _M_COLS,
    _N,
    _TS,
    _VERSION_OK,
    LEASED_TS_BOUND,
    Row,
    _check_message,
    _due_rows,
    _lease,
    _message,
    due_clause,
    relayed_clause,
)


class Leases(StoreSession):
    """A consumer's statements: lease, extend, release, delete by holder, membership."""

    def lease(
        self,
        timeline: str,
        consumer: str,
        *,
        lease_ms: int,
        limit: int = 100,
        buckets: Sequence[int] | None = None,
    ) -> list[Lease]:
        """Lease up to ``limit`` available messages (oldest first) of ``buckets`` (default all).

        Rows another consumer is leasing right now are skipped, not waited for.
        """
        check_name("consumer", consumer)
        check_lease(lease_ms)
        if lease_ms <= 0:
            raise TimeInPastError(f"a lease of {lease_ms} ms would end in the past", timeline)
        if limit <= 0:
            raise InvalidMessageError(f"limit must be positive, got {limit}", timeline)
        config = self.timeline(timeline)
        chosen = list(range(config.buckets)) if buckets is None else list(buckets)
        base = new_token_base()
        due, horizon = due_clause(self.due)
        # The oldest due rows of each bucket, locked, skipping rows another consumer
        # is leasing (_due_rows: the cost does not grow with a backlog whatever the
        # planner's statistics say). Each bucket gives at most ``per_bucket`` (twice
        # its fair share): close to oldest-first overall without locking buckets x
        # limit rows. The update joins on the whole key of either index and checks
        # nothing else: the rows are locked, so unchanged since the scan checked them
        # (with the due condition there too, and its ts bound, a plan without
        # statistics scanned the whole timeline once per leased row: 8 s for 1 000
        # of 20 000). Row ``n`` of the batch gets token ``<base>.<n>``.
        per_bucket = min(limit, 2 * -(-limit // max(1, len(chosen))))
        scanned = f"m.timeline, m.id, m.bucket, m.ts, {_TS} AS due_ms, m.due_stream"
        sql = f"""
            WITH due AS (
                SELECT x.timeline, x.id, x.bucket, x.ts, x.due_ms, x.due_stream,
                       row_number() OVER (ORDER BY x.ts) AS n
                FROM {_due_rows(scanned, due, not self.is_cockroach)}
                ORDER BY x.ts LIMIT %(limit)s
            )
            UPDATE timeline_messages AS m
            SET {_LEASE_SET}, lease_token = %(base_hash)s || '.' || due.n::TEXT
            FROM due
            WHERE m.timeline = due.timeline AND m.id = due.id
              AND m.bucket = due.bucket AND m.ts = due.ts
            RETURNING {_M_COLS}, due.due_ms, {NOW_MS}, due.due_stream, due.n"""
        rows = self._all(
            sql,
            {
                "t": timeline,
                "buckets": chosen,
                "limit": limit,
                "per_bucket": per_bucket,
                "c": consumer,
                "lease": lease_ms,
                "horizon": horizon,
                "base_hash": base_hash(base),
            },
        )
        leases = [_lease(r, lease_token(base, int(r[_N + 3]))) for r in rows]
        leases.sort(key=lambda lease: lease.due_ms)
        return leases

    def lease_one(
        self,
        timeline: str,
        message_id: str,
        consumer: str,
        *,
        lease_ms: int,
        version: int | None = None,
    ) -> Lease:
        """Lease one message by id: it must be available (due, no live lease)."""
        _check_message(timeline, message_id)
        check_name("consumer", consumer)
        check_lease(lease_ms)
        if lease_ms <= 0:
            raise TimeInPastError(
                f"a lease of {lease_ms} ms would end in the past", timeline, message_id
            )
        due, horizon = due_clause(self.due)
        untaken = "" if self.is_cockroach else f" AND {relayed_clause()}"
        token = lease_token(new_token_base(), 1)
        sql = f"""
            WITH due AS (
                SELECT m.timeline, m.id, {_TS} AS due_ms, m.due_stream
                FROM timeline_messages AS m
                WHERE m.timeline = %(t)s AND m.id = %(id)s
                  AND m.deleted_at_ms IS NULL AND {due} AND {_VERSION_OK}{untaken}
                FOR UPDATE
            )
            UPDATE timeline_messages AS m
            SET {_LEASE_SET}, lease_token = %(hash)s
            FROM due
            WHERE m.timeline = due.timeline AND m.id = due.id
            RETURNING {_M_COLS}, due.due_ms, {NOW_MS}, due.due_stream"""
        row = self._one(
            sql,
            {
                "t": timeline,
                "id": message_id,
                "c": consumer,
                "lease": lease_ms,
                "version": version,
                "horizon": horizon,
                "hash": token_hash(token),
            },
        )
        if row is None:
            raise self._refused(Op.LEASE, timeline, message_id, consumer, version)
        return _lease(row, token)

    def extend(
        self,
        timeline: str,
        message_id: str,
        consumer: str,
        *,
        until_ms: int,
        token: str,
        version: int | None = None,
    ) -> Message:
        """Move the end of the live lease ``token`` names to ``until_ms``.

        ``until_ms`` is in the future and at most :data:`MAX_LEASE_MS` past the
        database's now, the bound of a lease.
        """
        check_timestamp("until_ms", until_ms)
        return self._update_one(
            Op.EXTEND,
            timeline,
            message_id,
            consumer,
            "lease_until_ms = %(target)s",
            f"{_HOLDER} AND %(target)s::BIGINT > {NOW_MS} "
            f"AND %(target)s::BIGINT <= {NOW_MS} + {MAX_LEASE_MS}",
            version,
            until_ms,
            token,
        )

    def release(
        self,
        timeline: str,
        message_id: str,
        consumer: str,
        *,
        token: str,
        at_ms: int | None = None,
        version: int | None = None,
    ) -> Message:
        """Give the live lease ``token`` names back: the message is due again at ``at_ms``
        (or now), and the token is spent."""
        if at_ms is not None:
            check_timestamp("at_ms", at_ms)
        return self._update_one(
            Op.RELEASE,
            timeline,
            message_id,
            consumer,
            f"ts = COALESCE(%(target)s::BIGINT, {NOW_MS}), lock_consumer = NULL, "
            "lease_until_ms = NULL, lease_token = NULL",
            f"{_HOLDER} AND (%(target)s::BIGINT IS NULL OR %(target)s::BIGINT >= {NOW_MS})",
            version,
            at_ms,
            token,
        )

    def _delete_by_holder(
        self, timeline: str, message_id: str, consumer: str, token: str, version: int | None
    ) -> Message:
        """:meth:`TimelineStore.delete` by the holder of the live lease ``token`` names."""
        return self._update_one(
            Op.DELETE_BY_HOLDER,
            timeline,
            message_id,
            consumer,
            f"deleted_at_ms = {NOW_MS}, lease_token = NULL",
            _HOLDER,
            version,
            token=token,
        )

    def delete_leased(self, timeline: str, consumer: str, leases: Sequence[Lease]) -> list[str]:
        """Delete many messages under live leases of ``consumer``; returns the ids deleted.

        Each lease must carry its token. The ids left out were not (or no
        longer) leased to ``consumer`` under that token.
        """
        if not leases:
            return []
        check_name("timeline", timeline)
        check_name("consumer", consumer)
        hashes = []
        for lease in leases:
            if lease.token is None:
                raise InvalidMessageError(
                    "a lease without its token cannot be acted on", timeline, lease.message.id
                )
            check_token(lease.token)
            hashes.append(token_hash(lease.token))
        # Planned with the arrays' values, not prepared: PostgreSQL then checks the pairs
        # through a hash table (a prepared plan compares each row with every pair).
        rows = self._all(
            f"""UPDATE timeline_messages AS m
                SET deleted_at_ms = {NOW_MS}, version = m.version + 1, lease_token = NULL
                WHERE m.timeline = %(t)s AND m.id = ANY(%(ids)s)
                  AND m.id || ' ' || m.lease_token = ANY(%(pairs)s)
                  AND m.deleted_at_ms IS NULL AND m.lock_consumer = %(c)s
                  AND {_TS} > {NOW_MS}
                RETURNING m.id""",
            {
                "t": timeline,
                "ids": [lease.message.id for lease in leases],
                # "<id> <hash>": a hash holds no space, so each message matches its
                # own token only; the id list keeps the primary key lookup.
                "pairs": [
                    f"{lease.message.id} {h}" for lease, h in zip(leases, hashes, strict=True)
                ],
                "c": consumer,
            },
            prepare=False,
        )
        return [r[0] for r in rows]

    def leases_of(self, timeline: str, consumer: str) -> list[Lease]:
        """The live leases held under the name ``consumer``, without their tokens.

        For inspection: a name is not a capability, so these leases cannot be
        extended, released or deleted with what this returns.
        """
        check_name("timeline", timeline)
        check_name("consumer", consumer)
        rows = self._all(
            f"""SELECT {_M_COLS}, {NOW_MS} FROM timeline_messages AS m
                WHERE m.timeline = %(t)s AND {LEASED_TS_BOUND} AND m.lock_consumer = %(c)s
                  AND m.deleted_at_ms IS NULL AND {_TS} > {NOW_MS}
                ORDER BY {_TS}""",
            {"t": timeline, "c": consumer},
        )
        return [Lease(_message(r), int(r[2]), int(r[_N])) for r in rows]

    def next_due_ms(self, timeline: str, buckets: Sequence[int]) -> tuple[int | None, int]:
        """The earliest timestamp among ``buckets`` (None when empty) and the database's now.

        Per bucket, the first message not leased (one index probe past the leased
        rows, which a lease leaves in place) and the earliest end of a lease (the
        leased rows, all below the due bound), when it becomes available again.
        Event-time messages do not count: their time is a stream's, not the clock's.
        """
        check_name("timeline", timeline)
        row = self._one(
            f"""SELECT least(min(x.first_ms), min(x.lease_end_ms)), {NOW_MS}
                FROM unnest(%(buckets)s::INT[]) AS b (bucket),
                LATERAL (SELECT (
                    SELECT m.ts FROM timeline_messages AS m
                    WHERE m.timeline = %(t)s AND m.bucket = b.bucket
                      AND m.deleted_at_ms IS NULL AND m.due_stream IS NULL
                      AND m.lock_consumer IS NULL
                    ORDER BY m.ts LIMIT 1
                ) AS first_ms, (
                    SELECT min({_TS}) FROM timeline_messages AS m
                    WHERE m.timeline = %(t)s AND m.bucket = b.bucket AND {LEASED_TS_BOUND}
                      AND m.deleted_at_ms IS NULL AND m.lock_consumer IS NOT NULL
                ) AS lease_end_ms) AS x""",
            {"t": timeline, "buckets": list(buckets)},
        )
        assert row is not None
        return (None if row[0] is None else int(row[0])), int(row[1])

    # -- membership ----------------------------------------------------------------

    def heartbeat(self, timeline: str, consumer: str, ttl_ms: int) -> list[str]:
        """Record ``consumer`` as alive; returns the live consumers, sorted."""
        check_name("timeline", timeline)
        check_name("consumer", consumer)
        rows = self._run(lambda c: _heartbeat(c, {"t": timeline, "c": consumer, "ttl": ttl_ms}))
        return [r[0] for r in rows]

    def leave(self, timeline: str, consumer: str) -> None:
        check_name("timeline", timeline)
        check_name("consumer", consumer)
        self._exec(
            "DELETE FROM timeline_consumers WHERE timeline = %(t)s AND consumer_id = %(c)s",
            {"t": timeline, "c": consumer},
        )


def _heartbeat(conn: psycopg.Connection[Row], params: dict[str, Any]) -> list[Row]:
    conn.execute(
        f"""INSERT INTO timeline_consumers (timeline, consumer_id, heartbeat_ms)
            VALUES (%(t)s, %(c)s, {NOW_MS})
            ON CONFLICT (timeline, consumer_id)
            DO UPDATE SET heartbeat_ms = excluded.heartbeat_ms""",
        params,
    )
    return conn.execute(
        f"""SELECT consumer_id FROM timeline_consumers
            WHERE timeline = %(t)s AND heartbeat_ms > {NOW_MS} - %(ttl)s
            ORDER BY consumer_id""",
        params,
    ).fetchall()
