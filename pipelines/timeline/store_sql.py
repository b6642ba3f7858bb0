"""The SQL the timeline store's parts share: the columns a message is read with, the
conditions of a live lease and of a due message, the locked scan of due rows, and the
decoding of a row into a :class:`~model.Message` or :class:`~model.Lease`.

Written once here so that the producer's statements (:mod:`.store_messages`) and the
consumers' (:mod:`.store_leases`) read and lock rows alike. The names are the store's
own, not an API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tidemark.pipelines.timeline.clock import NOW_MS, DueCondition
from tidemark.pipelines.timeline.model import Lease, Message, check_id, check_name, decode_headers

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

# A message a batch of its timeline's relay has taken (see the rule above): the owner's
# move and delete are refused then. ``rs`` is the locked state row.
_PASSED = """(m.due_stream IS NULL
    AND (m.ts, m.id) <= (rs.cursor_ts[m.bucket + 1], rs.cursor_id[m.bucket + 1])
    AND (m.wxid IS NULL OR pg_visible_in_snapshot(m.wxid::TEXT::xid8, rs.snap)))"""
WXID_NOW = "pg_current_xact_id()::TEXT::BIGINT"
"""The writing transaction's id as ``wxid`` keeps it (migration 8: a BIGINT)."""


def relayed_clause() -> str:
    """The SQL condition "no relay has taken ``m``" (``m``: a row of timeline_messages)."""
    return f"""NOT EXISTS (
        SELECT 1 FROM timeline_relay_state AS rs
        WHERE rs.timeline = m.timeline AND {_PASSED})"""


RELAY_STATE_SHARE = "SELECT 1 FROM timeline_relay_state WHERE timeline = %(t)s FOR SHARE"
"""The owner's move and delete take this lock in a statement of its own, before theirs:
a batch recording meanwhile has committed (the next statement's snapshot shows what it
took), or waits for the owner's commit (and then reads what the owner wrote)."""


def live_columns(postgres: bool) -> str:
    """:data:`_M_COLS`, where a message a relay has taken reads as deleted (PostgreSQL:
    the relay's cursor is PostgreSQL's alone)."""
    if not postgres:
        return _M_COLS
    taken = f"COALESCE(m.deleted_at_ms, CASE WHEN {relayed_clause()} THEN NULL ELSE 0 END)"
    return _M_COLS.replace("m.deleted_at_ms", taken)


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


def _due_rows(columns: str, due: str, postgres: bool) -> str:
    """``FROM`` the oldest available rows of each of ``%(buckets)s`` (at most
    ``%(per_bucket)s`` a bucket, ``columns`` of each as ``x``), locked, skipping rows
    another transaction holds: one index range scan per bucket, forced by LATERAL.
    On PostgreSQL, rows a relay of the timeline has taken are skipped too (its state
    read once a statement; nothing to check on a timeline no relay serves)."""
    if not postgres:
        buckets, untaken = "unnest(%(buckets)s::INT[]) AS b (bucket)", ""
    else:
        buckets = (
            "unnest(%(buckets)s::INT[]) AS b (bucket) "
            "LEFT JOIN timeline_relay_state AS rs ON rs.timeline = %(t)s"
        )
        untaken = f" AND (rs.timeline IS NULL OR NOT {_PASSED})"
    return f"""{buckets},
        LATERAL (
            SELECT {columns}
            FROM timeline_messages AS m
            WHERE m.timeline = %(t)s AND m.bucket = b.bucket
              AND m.deleted_at_ms IS NULL AND {due}{untaken}
            ORDER BY m.ts LIMIT %(per_bucket)s
            FOR UPDATE SKIP LOCKED
        ) AS x"""


def due_clause(due: DueCondition) -> tuple[str, Any]:
    """The condition of an available message under ``due``, and the horizon it names
    (None: the database's now).

    An event-time message (due_stream set; never leased yet) is due when its
    stream's recorded time reached ts; any other by the due condition, a lapsed
    lease when its end has passed on the database's clock. The first term bounds
    ``ts`` so an index scan stops at the first row that cannot be due.
    """
    stream_due = (
        "(m.due_stream IS NOT NULL AND m.lock_consumer IS NULL AND m.ts <= ("
        "SELECT st.time_ms FROM timeline_stream_times AS st WHERE st.stream = m.due_stream))"
    )
    horizon = due.horizon_ms()
    clock_due = f"(m.due_stream IS NULL AND {_TS} <= {NOW_MS})"
    if horizon is None:
        return f"({LEASED_TS_BOUND} AND ({clock_due} OR {stream_due}))", None
    return (
        f"(m.ts <= GREATEST(%(horizon)s::BIGINT, {_LATEST_DUE_MS}) AND"
        f" ((m.due_stream IS NULL AND m.lock_consumer IS NULL AND m.ts <= %(horizon)s::BIGINT)"
        f" OR (m.lock_consumer IS NOT NULL AND {clock_due}) OR {stream_due}))",
        horizon,
    )


def _check_message(timeline: str, message_id: str) -> None:
    """The names of a message, checked before they reach the database."""
    check_name("timeline", timeline)
    check_id(message_id)
