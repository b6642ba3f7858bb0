"""What every part of the timeline store stands on: one connection and its retries,
the database's clock, the timelines' settings, and the one guarded update.

    class Leases(StoreSession): ...   # a part: its statements run through _one/_all/_run

A store holds one connection and serialises its calls (:meth:`StoreSession._run`
retries serialization failures and maps every other driver error to a
:class:`~exceptions.TimelineError` naming its rule). An operation on one message is
one ``UPDATE`` whose ``WHERE`` holds the whole condition (:meth:`_update_one`); when it
changes nothing, a read of the message (and of its stream's time) explains why
(:meth:`_refused`), which is why the stream times are read here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
import psycopg.conninfo
import psycopg.errors

from tidemark.controller.closing import Closing
from tidemark.pipelines.timeline.clock import NOW_MS, ClockDrift, DatabaseClock, DueCondition
from tidemark.pipelines.timeline.config import TimelineConfig
from tidemark.pipelines.timeline.exceptions import (
    ConcurrentChangeError,
    InvalidMessageError,
    MessageNotFoundError,
    StoreUnavailableError,
    TimelineConflictError,
    TimelineDatabaseError,
    TimelineError,
    UnknownTimelineError,
)
from tidemark.pipelines.timeline.model import (
    Message,
    Op,
    check_name,
    check_token,
    explain_refusal,
    token_hash,
)
from tidemark.pipelines.timeline.store_sql import (
    _M_COLS,
    _VERSION_OK,
    RELAY_STATE_SHARE,
    Row,
    _check_message,
    _message,
    live_columns,
)
from tidemark.retries import RetryPolicy

log = logging.getLogger(__name__)

T = TypeVar("T")


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


class StoreSession(Closing):
    """One connection to the timeline's database, shared by the store's parts."""

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

    def stream_times(self, streams: Sequence[str]) -> dict[str, int]:
        """The recorded time of each of ``streams`` that has one."""
        for stream in streams:
            check_name("stream", stream)
        rows = self._all(
            "SELECT stream, time_ms FROM timeline_stream_times WHERE stream = ANY(%(s)s)",
            {"s": list(streams)},
        )
        return {str(r[0]): int(r[1]) for r in rows}

    # -- one guarded update, and why it changed nothing ------------------------

    def _get_with_now(
        self, timeline: str, message_id: str
    ) -> tuple[Message | None, int, str | None]:
        """The message (None: not there), the database's now, and the lease token's hash."""
        row = self._one(
            f"SELECT {NOW_MS}, m.lease_token, {live_columns(not self.is_cockroach)} "
            "FROM (SELECT 1) AS one "
            "LEFT JOIN timeline_messages AS m ON m.timeline = %(t)s AND m.id = %(id)s",
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
        if op in (Op.MOVE, Op.DELETE_BY_OWNER) and not self.is_cockroach:

            def locked(conn: psycopg.Connection[Row]) -> Row | None:
                conn.execute(RELAY_STATE_SHARE, params)
                return conn.execute(sql, params).fetchone()

            row = self.transaction(locked)
        else:
            row = self._one(sql, params)
        if row is None:
            raise self._refused(op, timeline, message_id, actor, version, target_ms, token)
        return _message(row)
