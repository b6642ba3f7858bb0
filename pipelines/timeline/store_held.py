"""Due messages held by a transaction's row locks, written nothing until the batch is
settled (the relay's path before its cursor, :mod:`.relay_sql`; kept for a holder
that delivers elsewhere and deletes what it delivered).

    held = store.hold_due("reminders", limit=500)           # rows locked, nothing written
    store.settle_held("reminders", delivered, retry=failed, consumer="relay-1",
                      retry_after_ms=30_000)                # delete delivered, park failed

A store holding a batch serves nothing else meanwhile: give each batch in flight a
store of its own. If the process dies, the transaction ends with its
connection and the messages are due again at once (at least once, by id).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import psycopg
import psycopg.errors

from tidemark.pipelines.timeline.clock import NOW_MS
from tidemark.pipelines.timeline.exceptions import InvalidMessageError
from tidemark.pipelines.timeline.model import Lease, check_lease, check_name
from tidemark.pipelines.timeline.store_session import StoreSession
from tidemark.pipelines.timeline.store_sql import (
    _LEASE_SET,
    _M_COLS,
    _TS,
    Row,
    _due_rows,
    _lease,
    due_clause,
)

log = logging.getLogger(__name__)


class HeldBatches(StoreSession):
    """A holder's statements: hold a batch of due rows, then settle or release it."""

    def hold_due(
        self, timeline: str, *, limit: int, buckets: Sequence[int] | None = None
    ) -> list[Lease]:
        """Lock up to ``limit`` available messages (about oldest first) in a transaction
        left open on this store's connection, writing nothing: no lease.

        Deliver them, then :meth:`settle_held` (delete the delivered ones, commit) or
        :meth:`release_held` (roll back). Until then the rows are held as a live lease
        holds them: consumers' lease scans skip them, other writers wait. If the
        process dies the transaction ends with its connection, and the messages are
        available again at once. The returned leases carry no token (there is no
        lease to act on); a store holding a batch serves nothing else meanwhile.
        Nothing due: the transaction is ended and ``[]`` returned.
        """
        if limit <= 0:
            raise InvalidMessageError(f"limit must be positive, got {limit}", timeline)
        config = self.timeline(timeline)
        chosen = list(range(config.buckets)) if buckets is None else list(buckets)
        due, horizon = due_clause(self.due)
        held_columns = f"{_M_COLS}, {_TS} AS due_ms, {NOW_MS}, m.due_stream, m.ts AS order_ts"
        # Each bucket's fair share, rounded up (the few rows past ``limit`` stay locked
        # until the end of the transaction, unchanged): rows stay locked while they are
        # delivered, so a bucket's surplus would be held back from every other reader.
        sql = f"""
            SELECT x.* FROM {_due_rows(held_columns, due, not self.is_cockroach)}
            ORDER BY x.order_ts LIMIT %(limit)s"""
        params = {
            "t": timeline,
            "buckets": chosen,
            "limit": limit,
            "per_bucket": -(-limit // max(1, len(chosen))),
            "horizon": horizon,
        }

        def run(conn: psycopg.Connection[Row]) -> list[Row]:
            conn.execute("BEGIN")
            try:
                rows = conn.execute(sql, params).fetchall()
            except BaseException:
                _roll_back(conn)
                raise
            if not rows:
                conn.execute("ROLLBACK")
            return rows

        rows = self._run(run)
        return [_lease(r, None) for r in rows]

    def settle_held(
        self,
        timeline: str,
        delivered: Sequence[str],
        *,
        retry: Sequence[str] = (),
        consumer: str | None = None,
        retry_after_ms: int = 0,
    ) -> list[str]:
        """End the transaction of :meth:`hold_due`: delete the ``delivered`` messages and
        commit; returns the ids deleted. The rest are available again at once, but for
        ``retry`` (ids whose delivery failed): those are leased to ``consumer`` for
        ``retry_after_ms`` with no token (a lease that just lapses), so a message the
        target refuses is tried again that much later, as when a lease holder dies,
        not in a loop."""
        deleting = f"""
            UPDATE timeline_messages AS m
            SET deleted_at_ms = {NOW_MS}, version = m.version + 1, lease_token = NULL,
                due_stream = NULL
            WHERE m.timeline = %(t)s AND m.id = ANY(%(ids)s) AND m.deleted_at_ms IS NULL
            RETURNING m.id"""
        parking = f"""
            UPDATE timeline_messages AS m SET {_LEASE_SET}, lease_token = NULL
            WHERE m.timeline = %(t)s AND m.id = ANY(%(ids)s) AND m.deleted_at_ms IS NULL"""
        if retry:
            if consumer is None:
                raise InvalidMessageError("messages to retry need the consumer to hold them")
            check_name("consumer", consumer)
            check_lease(retry_after_ms)

        def run(conn: psycopg.Connection[Row]) -> list[Row]:
            # Never retried: once the transaction is lost its locks are gone, and the
            # same ids may be another consumer's by now. Nothing is deleted then; the
            # messages are delivered again (at least once).
            try:
                rows = []
                if delivered:
                    rows = conn.execute(
                        deleting, {"t": timeline, "ids": list(delivered)}
                    ).fetchall()
                if retry:
                    conn.execute(
                        parking,
                        {"t": timeline, "ids": list(retry), "c": consumer, "lease": retry_after_ms},
                    )
                conn.execute("COMMIT")
            except psycopg.errors.SerializationFailure as exc:
                _roll_back(conn)
                log.warning(
                    "%s: delivered messages not deleted (%s); they come again", timeline, exc
                )
                return []
            except BaseException:
                _roll_back(conn)
                raise
            return rows

        if not delivered and not retry:
            self.release_held()
            return []
        return [r[0] for r in self._run(run)]

    def release_held(self) -> None:
        """End the transaction of :meth:`hold_due` without deleting anything."""
        self._run(_roll_back)


def _roll_back(conn: psycopg.Connection[Row]) -> None:
    """End the open transaction, if the connection still has one (a broken connection
    has ended it already: nothing to raise on the way out of another error)."""
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        return
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error as exc:
        log.debug("rollback: %s", exc)
