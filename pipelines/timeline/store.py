"""The timeline store: scheduled messages in SQL, every condition checked atomically.

    with TimelineStore(dsn) as store:
        store.migrate()
        store.create_timeline(TimelineConfig("reminders"))
        store.create("reminders", b"hi", timestamp_ms=t, producer_group="app")
        for lease in store.lease("reminders", "worker-1", lease_ms=30_000):
            ...
            store.delete("reminders", lease.message.id, consumer="worker-1", token=lease.token)

Each operation is **one** SQL statement whose ``WHERE`` holds the whole
condition, evaluated with the database's ``now()``; when it changes nothing,
a read of the message explains why (:func:`model.explain_refusal`) and the
typed error names the rule. The SQL is what PostgreSQL and CockroachDB both
run (``FOR UPDATE SKIP LOCKED``, ``ON CONFLICT``, ``UPDATE ... FROM``,
partial indexes); serialization failures (SQLSTATE 40001, CockroachDB's
retry error) are retried. ``LISTEN/NOTIFY`` is used only to wake consumers
early on PostgreSQL; CockroachDB has none, and nothing depends on it.

Leases are capabilities, as SQS receipt handles are: each lease carries an
unguessable token (:attr:`model.Lease.token`) of which the table keeps only
the hash; extend, release and delete by the holder must present it, checked
in the same statement, and a new lease of the message replaces it. A
consumer's name alone no longer acts on its leases. An extension reaches at
most :data:`model.MAX_LEASE_MS` past the database's now, as a lease does.
While a lease is live the message is the holder's, as an SQS message in
flight is its receipt handle's: the producer group's delete is refused with
:class:`~exceptions.LeasedError` naming the holder and the lease's end (its
move with ``NotWaitingError``); once the lease is given back or has ended the
message is the group's again, and the old token opens nothing.

Stream times (:meth:`TimelineStore.advance_stream_time`) only move forward,
and never further than :data:`model.MAX_STREAM_TIME_LEAD_MS` past the
database's clock: a watermark is the time of events already written, so a
time beyond that is a bug or an attack that would make every event-time
message due for good. Either refusal is an error, not a silent no-op.
Recording them is the consumers' job (from their ``stream_clock``, fed by the
controller's watermarks); a deployment where clients must not record stream
times at all grants ``UPDATE`` on ``timeline_stream_times`` only to the
consumers' database role, the one check an API on a shared database cannot
make.

Every failure reaches the caller as a :class:`~exceptions.TimelineError`
naming its rule: inputs PostgreSQL text cannot hold (NUL, lone surrogates)
are refused before the database is asked, and any database error left is
mapped (:meth:`TimelineStore._run`).

A store holds one connection and serialises its calls; give each thread or
consumer its own store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
import psycopg.conninfo
import psycopg.errors
from tidemark.controller.closing import Closing
from tidemark.pipelines.timeline.clock import NOW_MS, ClockDrift, DatabaseClock, DueCondition
from tidemark.pipelines.timeline.config import TimelineConfig
from tidemark.pipelines.timeline.exceptions import (
    BodyTooLargeError,
    ConcurrentChangeError,
    DuplicateIdError,
    InvalidMessageError,
    MessageNotFoundError,
    StoreUnavailableError,
    StreamTimeAheadError,
    StreamTimeBackwardsError,
    TimeInPastError,
    TimelineConflictError,
    TimelineDatabaseError,
    TimelineError,
    UnknownTimelineError,
)
from tidemark.pipelines.timeline.migrations import apply_migrations
from tidemark.pipelines.timeline.model import (
    MAX_LEASE_MS,
    MAX_STREAM_TIME_LEAD_MS,
    Counts,
    Lease,
    Message,
    Op,
    base_hash,
    bucket_of,
    check_headers,
    check_id,
    check_lease,
    check_name,
    check_timestamp,
    check_token,
    decode_headers,
    encode_headers,
    explain_refusal,
    lease_token,
    new_id,
    new_token_base,
    token_hash,
)

from tidemark.retries import RetryPolicy

log = logging.getLogger(__name__)

T = TypeVar("T")
Row = tuple[Any, ...]

NOTIFY_CHANNEL = "tidemark_timeline"
# A message's time as Message shows it: the lease end while leased (or lapsed), else
# ``ts``, its due time, which a lease leaves alone (migration 7: leases are HOT updates).
_TS = "COALESCE(m.lease_until_ms, m.ts)"
_FIELDS = (
    "timeline, id, {ts}, body, producer_group, lock_consumer, bucket, version, "
    "deleted_at_ms, due_stream, headers"
)
_COLS = _FIELDS.format(ts="COALESCE(lease_until_ms, ts) AS ts")
_N = 11  # columns in _COLS: what a row holds after them starts here
_M_COLS = ", ".join(_TS if c == "{ts}" else f"m.{c}" for c in _FIELDS.replace(" ", "").split(","))
_VERSION_OK = "(%(version)s::BIGINT IS NULL OR m.version = %(version)s::BIGINT)"
# A live lease of consumer %(a)s whose token hashes to %(h)s.
_HOLDER = f"m.lock_consumer = %(a)s AND m.lease_token = %(h)s AND {_TS} > {NOW_MS}"
# The latest time a due (or leased) row's ts can hold: the database's now, or a stream's
# recorded time (an event-time message's lease sets its ts to at most now). An index
# bound: a scan for due rows or for leases stops at the first row past it, however many
# wait behind. (A lease taken under a horizon ahead of it is found once it passes its ts.)
_LATEST_DUE_MS = f"GREATEST({NOW_MS}, (SELECT max(st.time_ms) FROM timeline_stream_times AS st))"
LEASED_TS_BOUND = f"m.ts <= {_LATEST_DUE_MS}"
# What a lease writes: no indexed column changes for a message due on the clock (ts is
# written unchanged), so PostgreSQL makes it a HOT update. An event-time message leaves
# the stream index, and its ts comes down to now at most, under the bound above.
_LEASE_SET = f"""lock_consumer = %(c)s, lease_until_ms = {NOW_MS} + %(lease)s,
    version = m.version + 1, due_stream = NULL,
    ts = CASE WHEN m.due_stream IS NULL THEN m.ts ELSE LEAST(m.ts, {NOW_MS}) END"""


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


_object_new = object.__new__


def _message(row: Sequence[Any]) -> Message:
    """A :class:`Message` of a row's first columns (:data:`_COLS`' order).

    Its fields are set in its ``__dict__`` (the frozen dataclass's ``__init__``
    sets each through ``object.__setattr__``: most of a lease's client time,
    a lease hands out thousands of them)."""
    message = _object_new(Message)
    message.__dict__.update(
        timeline=row[0],
        id=row[1],
        timestamp_ms=int(row[2]),
        body=bytes(row[3]),
        producer_group=row[4],
        lock_consumer=row[5],
        bucket=int(row[6]),
        version=int(row[7]),
        deleted=row[8] is not None,
        due_stream=row[9],
        headers=decode_headers(row[10]),
    )
    return message


def database_error(
    exc: psycopg.Error | UnicodeEncodeError, dsn: str | None = None
) -> TimelineError:
    """The :class:`TimelineError` naming the rule a driver or database error broke: a
    value the database cannot hold, the store not answering (at ``dsn``), or anything
    else it refused.
    """
    if isinstance(exc, psycopg.DataError | UnicodeEncodeError):
        return InvalidMessageError(f"the database cannot hold a value: {exc}")
    if isinstance(exc, psycopg.OperationalError):
        return unavailable(f"the timeline store failed: {exc}", dsn, exc)
    return TimelineDatabaseError(f"the timeline store refused: {exc}")


def postgres_address(dsn: str) -> str | None:
    """``host:port/dbname`` of a DSN (never its password); ``None`` when it names no host."""
    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:  # a DSN psycopg cannot parse: name no part of it
        return None
    if not parts.get("host"):
        return None
    return f"{parts['host']}:{parts.get('port', 5432)}/{parts.get('dbname', '')}"


def unavailable(message: str, dsn: str | None, exc: BaseException) -> StoreUnavailableError:
    """PostgreSQL at ``dsn`` not answering (or refusing the connection: a wrong password
    is an ``OperationalError`` too, so the reason says both)."""
    first = (str(exc).strip() or type(exc).__name__).splitlines()[0].strip()
    return StoreUnavailableError(
        message,
        address=None if dsn is None else postgres_address(dsn),
        reason=f"refused or did not answer ({first})",
    )


class TimelineStore(Closing):
    def __init__(
        self,
        dsn: str,
        due: DueCondition | None = None,
        retries: int = 8,
        connect_timeout_s: int = 10,
        notify: bool = True,
    ) -> None:
        self.dsn = dsn
        self.notify = notify
        self.due = due or DatabaseClock()
        self.retries = retries
        try:
            self._conn: psycopg.Connection[Row] = psycopg.connect(
                dsn, autocommit=True, connect_timeout=connect_timeout_s
            )
        except psycopg.OperationalError as exc:
            raise unavailable(f"cannot connect to the timeline store: {exc}", dsn, exc) from exc
        self._lock = threading.Lock()
        self._timelines: dict[str, TimelineConfig] = {}
        row = self._one("SELECT version()", {})
        version = str(row[0]) if row else ""
        self.is_cockroach = "cockroach" in version.lower()
        self.supports_notify = not self.is_cockroach

    # -- plumbing -----------------------------------------------------------

    def _run(self, fn: Callable[[psycopg.Connection[Row]], T]) -> T:
        """Run ``fn`` on the connection, retrying serialization failures.

        Whatever the driver or the database raises leaves as a TimelineError
        naming a rule: the inputs are checked first, so these are the cases no
        check foresaw.
        """

        def attempt() -> T:
            try:
                return fn(self._conn)
            except psycopg.errors.SerializationFailure:
                raise  # retried
            except (psycopg.Error, UnicodeEncodeError) as exc:
                raise database_error(exc, self.dsn) from exc

        policy = RetryPolicy(first_delay_s=0.005, max_delay_s=0.5, max_attempts=self.retries + 1)
        with self._lock:
            try:
                return policy.call(
                    attempt,
                    retry_on=psycopg.errors.SerializationFailure,
                    what="a transaction",
                    logger=log,
                    level=logging.DEBUG,  # contention: expected, and retried in milliseconds
                )
            except psycopg.errors.SerializationFailure as exc:
                raise ConcurrentChangeError(
                    f"still conflicting after {self.retries} retries: {exc}"
                ) from exc

    def transaction(self, fn: Callable[[psycopg.Connection[Row]], T]) -> T:
        """Run ``fn`` in one database transaction (retried whole on a serialization
        failure): all its statements take effect, or none."""

        def run(conn: psycopg.Connection[Row]) -> T:
            with conn.transaction():
                return fn(conn)

        return self._run(run)

    def _one(self, sql: str, params: dict[str, Any]) -> Row | None:
        return self._run(lambda c: c.execute(sql, params).fetchone())

    def _exec(self, sql: str, params: dict[str, Any]) -> None:
        self._run(lambda c: c.execute(sql, params))

    def _all(self, sql: str, params: dict[str, Any], prepare: bool | None = None) -> list[Row]:
        return self._run(lambda c: c.execute(sql, params, prepare=prepare).fetchall())

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def migrate(self) -> list[int]:
        """Create or upgrade the schema; returns the migration versions applied."""
        return self._run(apply_migrations)

    # -- clock ----------------------------------------------------------------

    def now_ms(self) -> int:
        row = self._one(f"SELECT {NOW_MS}", {})
        assert row is not None
        return int(row[0])

    def clock_drift(self) -> ClockDrift:
        """The database's clock minus ours, from one round trip (error ≤ rtt / 2)."""
        before = time.time() * 1000
        db_ms = self.now_ms()
        after = time.time() * 1000
        return ClockDrift(drift_ms=db_ms - (before + after) / 2, rtt_ms=after - before)

    # -- timelines ------------------------------------------------------------

    def create_timeline(self, config: TimelineConfig) -> TimelineConfig:
        """Create a timeline; again with the same settings is a no-op."""
        self._exec(
            "INSERT INTO timeline_timelines (name, buckets, max_body_bytes) "
            "VALUES (%(name)s, %(buckets)s, %(max)s) ON CONFLICT (name) DO NOTHING",
            {"name": config.name, "buckets": config.buckets, "max": config.max_body_bytes},
        )
        stored = self.timeline(config.name, cached=False)
        if stored != config:
            raise TimelineConflictError(
                f"timeline {config.name!r} exists with {stored}, not {config}", config.name
            )
        return stored

    def timeline(self, name: str, cached: bool = True) -> TimelineConfig:
        """A timeline's settings (they never change, so they are cached)."""
        check_name("timeline", name)
        if cached and name in self._timelines:
            return self._timelines[name]
        row = self._one(
            "SELECT name, buckets, max_body_bytes FROM timeline_timelines WHERE name = %(name)s",
            {"name": name},
        )
        if row is None:
            raise UnknownTimelineError(f"no timeline named {name!r}; create it first", name)
        config = TimelineConfig(row[0], int(row[1]), int(row[2]))
        self._timelines[name] = config
        return config

    def timelines(self) -> list[TimelineConfig]:
        rows = self._all(
            "SELECT name, buckets, max_body_bytes FROM timeline_timelines ORDER BY name", {}
        )
        return [TimelineConfig(r[0], int(r[1]), int(r[2])) for r in rows]

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

    def _prepare(self, timeline: str, new: NewMessage) -> dict[str, Any]:
        config = self.timeline(timeline)
        message_id = new_id() if new.id is None else new.id
        check_id(message_id)
        check_name("producer_group", new.producer_group)
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
        return {
            "timeline": timeline,
            "id": message_id,
            "bucket": bucket_of(message_id, config.buckets),
            "ts": new.timestamp_ms,
            "body": body,
            "group": new.producer_group,
            "due_stream": new.due_stream,
            "headers": encode_headers(check_headers(new.headers)),
        }

    def _settle(self, params: dict[str, Any], row: Row | None) -> Created:
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
        params = self._prepare(timeline, message)
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
        for message in messages:
            try:
                params = self._prepare(timeline, message)
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

    # -- reads ------------------------------------------------------------------

    def get(self, timeline: str, message_id: str, include_deleted: bool = False) -> Message | None:
        _check_message(timeline, message_id)
        row = self._one(
            f"SELECT {_COLS} FROM timeline_messages WHERE timeline = %(t)s AND id = %(id)s",
            {"t": timeline, "id": message_id},
        )
        if row is None:
            return None
        message = _message(row)
        return message if include_deleted or not message.deleted else None

    def _get_with_now(
        self, timeline: str, message_id: str
    ) -> tuple[Message | None, int, str | None]:
        """The message (None: not there), the database's now, and the lease token's hash."""
        row = self._one(
            f"SELECT {NOW_MS}, lease_token, {_COLS} FROM (SELECT 1) AS one "
            "LEFT JOIN timeline_messages ON timeline = %(t)s AND id = %(id)s",
            {"t": timeline, "id": message_id},
        )
        assert row is not None
        return (None if row[3] is None else _message(row[2:])), int(row[0]), row[1]

    def _refused(
        self,
        op: Op,
        timeline: str,
        message_id: str,
        actor: str,
        version: int | None,
        target_ms: int | None = None,
        token: str | None = None,
    ) -> TimelineError:
        self.timeline(timeline)  # an unknown timeline is the first reason
        message, now, stored_hash = self._get_with_now(timeline, message_id)
        stream_time = None
        if message is not None and message.due_stream is not None:
            stream_time = self.stream_times([message.due_stream]).get(message.due_stream)
        error = explain_refusal(
            op,
            message,
            now,
            actor=actor,
            expected_version=version,
            target_ms=target_ms,
            stream_time_ms=stream_time,
            token_matches=token is None or stored_hash == token_hash(token),
        )
        if isinstance(error, MessageNotFoundError):
            error = MessageNotFoundError(
                f"no message {message_id!r} on timeline {timeline!r}", timeline, message_id
            )
        return error

    # -- leases -----------------------------------------------------------------

    def _due_clause(self) -> tuple[str, Any]:
        """The condition of an available message, and the horizon it names (None: the
        database's now).

        An event-time message (due_stream set; never leased yet) is due when its
        stream's recorded time reached ts; any other by the due condition, a lapsed
        lease when its end has passed on the database's clock. The first term bounds
        ``ts`` so an index scan stops at the first row that cannot be due.
        """
        stream_due = (
            "(m.due_stream IS NOT NULL AND m.lock_consumer IS NULL AND m.ts <= ("
            "SELECT st.time_ms FROM timeline_stream_times AS st WHERE st.stream = m.due_stream))"
        )
        horizon = self.due.horizon_ms()
        clock_due = f"(m.due_stream IS NULL AND {_TS} <= {NOW_MS})"
        if horizon is None:
            return f"({LEASED_TS_BOUND} AND ({clock_due} OR {stream_due}))", None
        return (
            f"(m.ts <= GREATEST(%(horizon)s::BIGINT, {_LATEST_DUE_MS}) AND"
            f" ((m.due_stream IS NULL AND m.lock_consumer IS NULL AND m.ts <= %(horizon)s::BIGINT)"
            f" OR (m.lock_consumer IS NOT NULL AND {clock_due}) OR {stream_due}))",
            horizon,
        )

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
        due, horizon = self._due_clause()
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
                FROM {_due_rows(scanned, due)}
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
        due, horizon = self._due_clause()
        token = lease_token(new_token_base(), 1)
        sql = f"""
            WITH due AS (
                SELECT m.timeline, m.id, {_TS} AS due_ms, m.due_stream
                FROM timeline_messages AS m
                WHERE m.timeline = %(t)s AND m.id = %(id)s
                  AND m.deleted_at_ms IS NULL AND {due} AND {_VERSION_OK}
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

    def _update_one(
        self,
        op: Op,
        timeline: str,
        message_id: str,
        actor: str,
        set_sql: str,
        condition: str,
        version: int | None,
        target_ms: int | None = None,
        token: str | None = None,
    ) -> Message:
        """One guarded update; ``%(h)s`` in ``condition`` is the hash of ``token``."""
        _check_message(timeline, message_id)
        if token is not None:
            check_token(token)
        sql = f"""
            UPDATE timeline_messages AS m SET {set_sql}, version = m.version + 1
            WHERE m.timeline = %(t)s AND m.id = %(id)s AND m.deleted_at_ms IS NULL
              AND {condition} AND {_VERSION_OK}
            RETURNING {_M_COLS}"""
        params = {
            "t": timeline,
            "id": message_id,
            "a": actor,
            "version": version,
            "target": target_ms,
            "h": None if token is None else token_hash(token),
        }
        row = self._one(sql, params)
        if row is None:
            raise self._refused(op, timeline, message_id, actor, version, target_ms, token)
        return _message(row)

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

    def move(
        self,
        timeline: str,
        message_id: str,
        producer_group: str,
        *,
        timestamp_ms: int,
        version: int | None = None,
    ) -> Message:
        """The owner changes the timestamp of a waiting message (future, not leased)."""
        check_name("producer_group", producer_group)
        check_timestamp("timestamp_ms", timestamp_ms)
        return self._update_one(
            Op.MOVE,
            timeline,
            message_id,
            producer_group,
            "ts = %(target)s",
            f"m.producer_group = %(a)s AND {_TS} > {NOW_MS} AND m.lock_consumer IS NULL",
            version,
            timestamp_ms,
        )

    def delete(
        self,
        timeline: str,
        message_id: str,
        *,
        producer_group: str | None = None,
        consumer: str | None = None,
        token: str | None = None,
        version: int | None = None,
    ) -> Message:
        """Mark deleted, by its owner (refused while a lease is live: ``LeasedError``) or
        by the holder of a live lease.

        Give exactly one of ``producer_group`` and ``consumer``; the holder also
        gives the lease's ``token``. The row is removed later by :meth:`purge`.
        """
        if (producer_group is None) == (consumer is None):
            raise InvalidMessageError(
                "delete needs exactly one of producer_group (owner) or consumer (holder)",
                timeline,
                message_id,
            )
        if consumer is not None:
            if token is None:
                raise InvalidMessageError(
                    "delete by the lease holder needs the lease's token", timeline, message_id
                )
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
        assert producer_group is not None
        check_name("producer_group", producer_group)
        return self._update_one(
            Op.DELETE_BY_OWNER,
            timeline,
            message_id,
            producer_group,
            f"deleted_at_ms = {NOW_MS}",
            f"m.producer_group = %(a)s AND NOT ({_TS} > {NOW_MS} AND m.lock_consumer IS NOT NULL)",
            version,
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
        row = self._one(
            f"""INSERT INTO timeline_stream_times (stream, time_ms, updated_at_ms)
                SELECT %(s)s, %(t)s, {NOW_MS} WHERE %(t)s::BIGINT <= {NOW_MS} + %(lead)s
                ON CONFLICT (stream) DO UPDATE
                SET time_ms = excluded.time_ms, updated_at_ms = excluded.updated_at_ms
                WHERE timeline_stream_times.time_ms <= excluded.time_ms
                RETURNING time_ms""",
            params,
        )
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

    def stream_times(self, streams: Sequence[str]) -> dict[str, int]:
        """The recorded time of each of ``streams`` that has one."""
        for stream in streams:
            check_name("stream", stream)
        rows = self._all(
            "SELECT stream, time_ms FROM timeline_stream_times WHERE stream = ANY(%(s)s)",
            {"s": list(streams)},
        )
        return {str(r[0]): int(r[1]) for r in rows}

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

    # -- counts, purge, membership -----------------------------------------------

    def count(self, timeline: str, from_ms: int | None = None, to_ms: int | None = None) -> Counts:
        """Messages with ``from_ms <= ts < to_ms`` (either bound open), by status now."""
        self.timeline(timeline)
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
                  AND (%(hi)s::BIGINT IS NULL OR {_TS} < %(hi)s::BIGINT)""",
            {"t": timeline, "lo": from_ms, "hi": to_ms},
        )
        assert row is not None
        return Counts(*(int(v) for v in row))

    def purge(self, keep_deleted_ms: int = 3_600_000, batch_size: int = 1_000) -> int:
        """Remove messages deleted more than ``keep_deleted_ms`` ago, in batches.

        Until purged, a deleted id cannot be created again: this window is how
        long replayed creates (ingest, retries) are recognised as duplicates.
        """
        total = 0
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

    # -- delivery under a transaction's row locks (the relay) --------------------------

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
        due, horizon = self._due_clause()
        held_columns = f"{_M_COLS}, {_TS} AS due_ms, {NOW_MS}, m.due_stream, m.ts AS order_ts"
        # Each bucket's fair share, rounded up (the few rows past ``limit`` stay locked
        # until the end of the transaction, unchanged): rows stay locked while they are
        # delivered, so a bucket's surplus would be held back from every other reader.
        sql = f"""
            SELECT x.* FROM {_due_rows(held_columns, due)}
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


_STAGE = "timeline_stage"
_STAGE_COLS = "n, id, bucket, ts, body, producer_group, due_stream, headers"


def _copy_insert(
    conn: psycopg.Connection[Row], timeline: str, prepared: Sequence[dict[str, Any]], notify: bool
) -> list[Row | None]:
    """Insert checked messages through ``COPY`` into a per-session staging table and one
    ``INSERT ... SELECT ... ON CONFLICT DO NOTHING``, in one transaction; returns each
    message's new row, None where its id was taken (or the timeline or cap changed:
    the caller explains). Of two messages with one id, only the first gets the row.

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
                RETURNING {_COLS}""",
            {"t": timeline},
        ).fetchall()
        if notify and inserted:
            # One wake-up a batch, at its earliest due time: "<ts> <timeline>".
            conn.execute(
                f"SELECT pg_notify('{NOTIFY_CHANNEL}', %(p)s)",
                {"p": f"{min(int(r[2]) for r in inserted)} {timeline}"},
            )
    by_id = {r[1]: r for r in inserted}
    return [by_id.pop(p["id"], None) for p in prepared]


def _lease(row: Row, token: str | None) -> Lease:
    """A row of a lease statement: the message's columns, then due ts, now, due stream."""
    lease = _object_new(Lease)  # (as _message)
    lease.__dict__.update(
        message=_message(row),
        due_ms=int(row[_N]),
        leased_at_ms=int(row[_N + 1]),
        due_stream=row[_N + 2],
        token=token,
    )
    return lease


def _due_rows(columns: str, due: str) -> str:
    """``FROM`` the oldest available rows of each of ``%(buckets)s`` (at most
    ``%(per_bucket)s`` a bucket, ``columns`` of each as ``x``), locked, skipping rows
    another transaction holds: one index range scan per bucket, forced by LATERAL."""
    return f"""unnest(%(buckets)s::INT[]) AS b (bucket),
        LATERAL (
            SELECT {columns}
            FROM timeline_messages AS m
            WHERE m.timeline = %(t)s AND m.bucket = b.bucket
              AND m.deleted_at_ms IS NULL AND {due}
            ORDER BY m.ts LIMIT %(per_bucket)s
            FOR UPDATE SKIP LOCKED
        ) AS x"""


def _roll_back(conn: psycopg.Connection[Row]) -> None:
    """End the open transaction, if the connection still has one (a broken connection
    has ended it already: nothing to raise on the way out of another error)."""
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        return
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error as exc:
        log.debug("rollback: %s", exc)


def _check_message(timeline: str, message_id: str) -> None:
    """The names of a message, checked before they reach the database."""
    check_name("timeline", timeline)
    check_id(message_id)


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
