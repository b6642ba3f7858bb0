"""The producer's side of the timeline store: create, read, move and delete messages.

    store.create("reminders", b"hi", timestamp_ms=t, producer_group="app")
    store.move("reminders", message_id, "app", timestamp_ms=t + 60_000)

A create is idempotent by id (a retry with the same body and group is a success that
created nothing, :class:`Created`); a batch goes through ``COPY`` into a staging table
and one ``INSERT ... SELECT`` on PostgreSQL, one pipelined statement a message on
CockroachDB. The owner's move and delete are refused while a lease is live (the
message is its holder's then, :mod:`.store_leases`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from tidemark.pipelines.timeline.clock import NOW_MS
from tidemark.pipelines.timeline.config import TimelineConfig
from tidemark.pipelines.timeline.exceptions import (
    BodyTooLargeError,
    DuplicateIdError,
    InvalidMessageError,
    TimelineError,
)
from tidemark.pipelines.timeline.model import (
    Counts,
    Message,
    Op,
    bucket_of,
    check_headers,
    check_id,
    check_name,
    check_timestamp,
    encode_headers,
    new_id,
)
from tidemark.pipelines.timeline.store_session import StoreSession
from tidemark.pipelines.timeline.store_sql import (
    _COLS,
    _TS,
    NOTIFY_CHANNEL,
    WXID_NOW,
    Row,
    _check_message,
    _message,
    _object_new,
    live_columns,
    relayed_clause,
)


@dataclass(frozen=True)
class NewMessage:
    """A message to create; ``id`` None means a generated, time-sortable id."""

    body: bytes
    timestamp_ms: int
    producer_group: str
    id: str | None = None
    due_stream: str | None = None
    """Due when this stream's watermark reaches ``timestamp_ms`` (an event time)."""
    headers: Any = None
    """Kafka headers the relay delivers with the body (``model.check_headers``)."""


@dataclass(frozen=True)
class Created:
    """The stored message, and whether this call created it (False: an idempotent retry)."""

    message: Message
    new: bool


_PLACEHOLDER = Message("", "", 0, b"", "", None, 0, 0)


class Messages(StoreSession):
    """The producer group's statements: create, get, count, move, and delete by owner."""

    # -- create ----------------------------------------------------------------

    def _insert_sql(self, notify: bool) -> str:
        # Existence of the timeline and the body cap are part of the statement.
        # Payload "<ts> <timeline>": a sleeping consumer wakes only if it is due sooner.
        select_notify = (
            f", pg_notify('{NOTIFY_CHANNEL}', ins.ts::TEXT || ' ' || ins.timeline)"
            if notify
            else ""
        )
        return f"""
            WITH t AS (
                SELECT max_body_bytes FROM timeline_timelines WHERE name = %(timeline)s
            ), ins AS (
                INSERT INTO timeline_messages
                    (timeline, id, bucket, ts, body, producer_group, lock_consumer, version,
                     created_at_ms, due_stream, headers)
                SELECT %(timeline)s, %(id)s, %(bucket)s, %(ts)s, %(body)s, %(group)s, NULL, 1,
                       {NOW_MS}, %(due_stream)s, %(headers)s
                FROM t WHERE octet_length(%(body)s) <= t.max_body_bytes
                ON CONFLICT (timeline, id) DO NOTHING
                RETURNING {_COLS}
            )
            SELECT ins.*{select_notify} FROM ins"""

    def _prepare(
        self, config: TimelineConfig, new: NewMessage, groups: set[str] | None = None
    ) -> dict[str, Any]:
        """A message checked and made the statement's parameters; ``groups``: producer
        groups already checked in this batch (each is checked once)."""
        timeline = config.name
        message_id = new_id() if new.id is None else new.id
        check_id(message_id)
        group = new.producer_group
        if groups is None or group not in groups:
            check_name("producer_group", group)
            if groups is not None:
                groups.add(group)
        check_timestamp("timestamp_ms", new.timestamp_ms)
        if new.due_stream is not None:
            check_name("due_stream", new.due_stream)
        if not isinstance(new.body, bytes | bytearray | memoryview):
            raise InvalidMessageError(
                f"body must be bytes, got {type(new.body).__name__}", timeline, message_id
            )
        body = bytes(new.body)
        if len(body) > config.max_body_bytes:
            raise BodyTooLargeError(
                f"body of {len(body)} bytes exceeds {config.max_body_bytes} on {timeline!r}",
                timeline,
                message_id,
            )
        headers = check_headers(new.headers)
        return {
            "timeline": timeline,
            "id": message_id,
            "bucket": bucket_of(message_id, config.buckets),
            "ts": new.timestamp_ms,
            "body": body,
            "group": group,
            "due_stream": new.due_stream,
            "headers": encode_headers(headers),
            "checked_headers": headers,
        }

    def _settle(self, params: dict[str, Any], row: Row | None) -> Created:
        if row is not None and len(row) == 1:  # a batch returns the new rows' ids only
            return Created(_new_message(params), True)
        if row is not None:
            return Created(_message(row), True)
        existing = self.get(params["timeline"], params["id"], include_deleted=True)
        if existing is None:
            # The timeline vanished or the cap changed under us; re-read and explain.
            config = self.timeline(params["timeline"], cached=False)
            if len(params["body"]) > config.max_body_bytes:
                raise BodyTooLargeError(
                    f"body exceeds {config.max_body_bytes} bytes", config.name, params["id"]
                )
            raise TimelineError("create changed nothing; retry", config.name, params["id"])
        if existing.body != params["body"] or existing.producer_group != params["group"]:
            # (a leased event-time message no longer shows its stream: not compared)
            raise DuplicateIdError(
                f"id {params['id']!r} exists on {params['timeline']!r} with a different "
                + ("body" if existing.body != params["body"] else "producer group"),
                params["timeline"],
                params["id"],
            )
        return Created(existing, False)

    def create(
        self,
        timeline: str,
        body: bytes,
        *,
        timestamp_ms: int,
        producer_group: str,
        id: str | None = None,
        due_stream: str | None = None,
        headers: Any = None,
    ) -> Created:
        """Create a message; a retry with the same id, body and group is a no-op success.

        With ``due_stream``, ``timestamp_ms`` is an event time of that stream:
        the message is due once the stream's time (:meth:`advance_stream_time`)
        reaches it, whatever the clock says. An id stays taken after a delete
        until the deleted row is purged, so a replayed create does not bring a
        delivered message back.
        """
        new = NewMessage(body, timestamp_ms, producer_group, id, due_stream, headers)
        return self.create_message(timeline, new)

    def create_message(self, timeline: str, message: NewMessage) -> Created:
        """:meth:`create` of a message already made a :class:`NewMessage`."""
        params = self._prepare(self.timeline(timeline), message)
        sql = self._insert_sql(self.supports_notify and self.notify)
        return self._settle(params, self._one(sql, params))

    def create_many(self, timeline: str, messages: Sequence[NewMessage]) -> list[Created]:
        """Create many in one pipelined round trip; raises the first refusal (after the rest)."""
        results = self.try_create_many(timeline, messages)
        for result in results:
            if isinstance(result, TimelineError):
                raise result
        return [r for r in results if isinstance(r, Created)]

    def try_create_many(
        self, timeline: str, messages: Sequence[NewMessage]
    ) -> list[Created | TimelineError]:
        """Like :meth:`create_many`, with each refusal returned in its message's place."""
        results: list[Created | TimelineError] = []
        prepared: list[dict[str, Any]] = []
        try:
            config = self.timeline(timeline)
        except TimelineError as exc:  # (an unknown timeline: every message's refusal)
            return [exc] * len(messages)
        groups: set[str] = set()
        for message in messages:
            try:
                params = self._prepare(config, message, groups)
            except TimelineError as exc:
                results.append(exc)
            else:
                prepared.append(params)
                results.append(Created(_PLACEHOLDER, False))
        if not prepared:
            return results
        if self.is_cockroach:
            # CockroachDB has temporary tables only behind a flag: one pipelined
            # statement a message instead.
            sql = self._insert_sql(self.notify and self.supports_notify)

            def run(conn: psycopg.Connection[Row]) -> list[Row | None]:
                with conn.cursor() as cur:
                    cur.executemany(sql, prepared, returning=True)
                    rows: list[Row | None] = []
                    while True:
                        rows.append(cur.fetchone())
                        if not cur.nextset():
                            break
                    return rows

            stored = self._run(run)
        else:
            stored = self._run(lambda c: _copy_insert(c, timeline, prepared, self.notify))
        rows = iter(zip(prepared, stored, strict=True))
        for i, result in enumerate(results):
            if isinstance(result, TimelineError):
                continue
            params, row = next(rows)
            try:
                results[i] = self._settle(params, row)
            except TimelineError as exc:
                results[i] = exc
        return results

    def _untaken(self) -> str:
        """The owner's condition "no relay has taken it" (:mod:`.relay_sql`; PostgreSQL:
        :meth:`_update_one` locks the relay's state first, so no batch takes it
        meanwhile)."""
        return "" if self.is_cockroach else f" AND {relayed_clause()}"

    # -- reads ------------------------------------------------------------------

    def get(self, timeline: str, message_id: str, include_deleted: bool = False) -> Message | None:
        """The message (one a relay has taken reads as deleted)."""
        _check_message(timeline, message_id)
        row = self._one(
            f"SELECT {live_columns(not self.is_cockroach)} FROM timeline_messages AS m "
            "WHERE m.timeline = %(t)s AND m.id = %(id)s",
            {"t": timeline, "id": message_id},
        )
        if row is None:
            return None
        message = _message(row)
        return message if include_deleted or not message.deleted else None

    def count(self, timeline: str, from_ms: int | None = None, to_ms: int | None = None) -> Counts:
        """Messages with ``from_ms <= ts < to_ms`` (either bound open), by status now (not
        those a relay has taken)."""
        self.timeline(timeline)
        untaken = "" if self.is_cockroach else f"AND {relayed_clause()}"
        row = self._one(
            f"""SELECT count(*),
                  coalesce(sum(CASE WHEN m.due_stream IS NULL AND {_TS} <= n.now
                               THEN 1 ELSE 0 END), 0),
                  coalesce(sum(CASE WHEN m.due_stream IS NOT NULL
                                 OR ({_TS} > n.now AND m.lock_consumer IS NULL)
                               THEN 1 ELSE 0 END), 0),
                  coalesce(sum(CASE WHEN {_TS} > n.now AND m.lock_consumer IS NOT NULL
                               THEN 1 ELSE 0 END), 0)
                FROM timeline_messages AS m, (SELECT {NOW_MS} AS now) AS n
                WHERE m.timeline = %(t)s AND m.deleted_at_ms IS NULL
                  AND (%(lo)s::BIGINT IS NULL OR {_TS} >= %(lo)s::BIGINT)
                  AND (%(hi)s::BIGINT IS NULL OR {_TS} < %(hi)s::BIGINT) {untaken}""",
            {"t": timeline, "lo": from_ms, "hi": to_ms},
        )
        assert row is not None
        return Counts(*(int(v) for v in row))

    def move(
        self,
        timeline: str,
        message_id: str,
        producer_group: str,
        *,
        timestamp_ms: int,
        version: int | None = None,
    ) -> Message:
        """The owner changes the timestamp of a waiting message (future, not leased, not
        taken by a relay)."""
        check_name("producer_group", producer_group)
        check_timestamp("timestamp_ms", timestamp_ms)
        return self._update_one(
            Op.MOVE,
            timeline,
            message_id,
            producer_group,
            "ts = %(target)s" + ("" if self.is_cockroach else f", wxid = {WXID_NOW}"),
            f"m.producer_group = %(a)s AND {_TS} > {NOW_MS} AND m.lock_consumer IS NULL"
            + self._untaken(),
            version,
            timestamp_ms,
        )

    def _delete_by_owner(
        self, timeline: str, message_id: str, producer_group: str, version: int | None
    ) -> Message:
        """:meth:`TimelineStore.delete` by the producer group that owns the message: refused
        while a lease is live (``LeasedError``)."""
        check_name("producer_group", producer_group)
        return self._update_one(
            Op.DELETE_BY_OWNER,
            timeline,
            message_id,
            producer_group,
            f"deleted_at_ms = {NOW_MS}",
            f"m.producer_group = %(a)s AND NOT ({_TS} > {NOW_MS} AND m.lock_consumer IS NOT NULL)"
            + self._untaken(),
            version,
        )


_STAGE = "timeline_stage"
_STAGE_COLS = "n, id, bucket, ts, body, producer_group, due_stream, headers"


def _copy_insert(
    conn: psycopg.Connection[Row], timeline: str, prepared: Sequence[dict[str, Any]], notify: bool
) -> list[Row | None]:
    """Insert checked messages through ``COPY`` into a per-session staging table and one
    ``INSERT ... SELECT ... ON CONFLICT DO NOTHING``, in one transaction; returns each
    message's new row (its id alone), None where its id was taken (or the timeline or
    cap changed: the caller explains). Of two messages with one id, only the first gets the row.

    A few round trips a batch instead of one statement a message. PostgreSQL only:
    CockroachDB keeps temporary tables behind a session flag.
    """
    with conn.transaction():
        conn.execute(
            f"""CREATE TEMPORARY TABLE IF NOT EXISTS {_STAGE} (
                    n INT NOT NULL, id TEXT NOT NULL, bucket INT NOT NULL, ts BIGINT NOT NULL,
                    body BYTEA NOT NULL, producer_group TEXT NOT NULL, due_stream TEXT,
                    headers BYTEA) ON COMMIT DELETE ROWS"""
        )
        copy_sql = f"COPY {_STAGE} ({_STAGE_COLS}) FROM STDIN (FORMAT BINARY)"
        with conn.cursor() as cur, cur.copy(copy_sql) as copy:
            copy.set_types(["int4", "text", "int4", "int8", "bytea", "text", "text", "bytea"])
            for n, p in enumerate(prepared):
                copy.write_row(
                    (
                        n,
                        p["id"],
                        p["bucket"],
                        p["ts"],
                        p["body"],
                        p["group"],
                        p["due_stream"],
                        p["headers"],
                    )
                )
        inserted = conn.execute(
            f"""INSERT INTO timeline_messages
                    (timeline, id, bucket, ts, body, producer_group, lock_consumer, version,
                     created_at_ms, due_stream, headers)
                SELECT t.name, s.id, s.bucket, s.ts, s.body, s.producer_group, NULL, 1,
                       {NOW_MS}, s.due_stream, s.headers
                FROM {_STAGE} AS s JOIN timeline_timelines AS t ON t.name = %(t)s
                WHERE octet_length(s.body) <= t.max_body_bytes
                ORDER BY s.n
                ON CONFLICT (timeline, id) DO NOTHING
                RETURNING id""",
            {"t": timeline},
        ).fetchall()
        if notify and inserted:
            # One wake-up a batch, at its earliest due time: "<ts> <timeline>".
            new = {r[0] for r in inserted}
            conn.execute(
                f"SELECT pg_notify('{NOTIFY_CHANNEL}', %(p)s)",
                {"p": f"{min(p['ts'] for p in prepared if p['id'] in new)} {timeline}"},
            )
    by_id = {r[0]: r for r in inserted}
    return [by_id.pop(p["id"], None) for p in prepared]


def _new_message(params: dict[str, Any]) -> Message:
    """The message a create of ``params`` (:meth:`Messages._prepare`) has just stored
    (its fields set as :func:`.store_sql._message` sets them: a batch makes thousands)."""
    message = _object_new(Message)
    message.__dict__.update(
        timeline=params["timeline"],
        id=params["id"],
        timestamp_ms=params["ts"],
        body=params["body"],
        producer_group=params["group"],
        lock_consumer=None,
        bucket=params["bucket"],
        version=1,
        deleted=False,
        due_stream=params["due_stream"],
        headers=params["checked_headers"],
    )
    return message
