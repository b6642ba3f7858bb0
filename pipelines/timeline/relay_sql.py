"""The SQL of the relay's cursor: due messages read past a per-bucket cursor, nothing
written per message.

    state = start(conn, "reminders", buckets=16, committed=7)    # resume after batch 7
    batch = take(conn, state, limit=1_000, horizon=None)         # read, record batch 8
    purge_relayed(conn, keep_ms=3_600_000)                       # delivered rows, by range

**The rule.** A relayed timeline has one cursor per bucket over ``(ts, id)`` and the
snapshot ``S`` of the read that moved it (``timeline_relay_state``, migration 8).
Every message of a bucket at or behind its cursor whose writing transaction
(``wxid``) is visible in ``S`` has been taken by the relay; nothing else has. A batch:

1. locks the state row ``FOR UPDATE``: a producer's move or delete, which locks it
   ``FOR SHARE`` in its own statement, has committed before the batch reads, or
   waits until the batch is recorded (and then sees the new cursor) -- the horizon:
   the cursor never passes a message a running move or delete could still change;
2. reads, in one statement and so under one snapshot ``S'``: per bucket the next
   due messages past the cursor, in ``(ts, id)`` order (the sweep), and every message
   at or behind the cursor whose writer is not visible in ``S`` (the late ones: created
   "now" or in the past, moved behind the cursor, committed late by a long
   transaction -- they committed after ``S``, so no earlier batch saw them);
3. writes the new cursor (the last swept row of each bucket) and ``S'`` to the state
   row and to a batch row of its own (``timeline_relay_batches``), once per batch.

The batch is then produced in one Kafka transaction whose offset commit names the
batch's number: the batch row the committed number names is the truth after a crash
(:func:`start` resumes from it and drops the later ones, which Kafka aborted).

A message deleted or moved by its producer before a batch read it is read as it is
then (a delete: not at all); once a batch took it, the producer's move and delete are
refused (:func:`.store_sql.relayed_clause`). Due-ness (``ts`` at or before the database's now,
or a horizon), the batch rows' times and the purge use the database's clock.

Delivered rows are removed in bulk by :func:`purge_relayed`: one range ``DELETE`` a
bucket, behind the cursor of the latest batch older than the keep window (until then
their ids stay taken, so a replayed create is still recognised).

PostgreSQL only (``xid8``, ``pg_snapshot``). Event-time messages (``due_stream``) are
made clock messages once their stream's time passes (:func:`release_stream_due`, one
row write each, in a batch), and then relayed as any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from tidemark.pipelines.timeline.clock import NOW_MS
from tidemark.pipelines.timeline.exceptions import RelayFencedError, RelayStateError
from tidemark.pipelines.timeline.store_sql import _PASSED, WXID_NOW

Conn = psycopg.Connection[tuple[Any, ...]]

BEFORE_ALL = (-1, "")
"""A cursor behind every message (timestamps are never negative)."""

ACKED = "acked"
"""``timeline_relay_state.delivery`` of a relay delivering by acknowledgement."""


@dataclass(frozen=True)
class CursorState:
    """Where the relay of ``timeline`` stands: after batch ``seq`` of ``epoch``."""

    timeline: str
    epoch: int
    seq: int
    cursor_ts: tuple[int, ...]
    cursor_id: tuple[str, ...]
    snapshot: str


@dataclass(frozen=True)
class TakenBatch:
    """The rows of one batch (``bucket, ts, id, body, headers, producer_group``) and the
    state recorded with it."""

    rows: list[tuple[Any, ...]]
    state: CursorState
    now_ms: int


def _first_state(conn: Conn, timeline: str, buckets: int, delivery: str | None) -> None:
    """The state row of a timeline no relay has served yet: before every message."""
    conn.execute(
        f"""INSERT INTO timeline_relay_state (timeline, epoch, seq, confirmed, cursor_ts,
                cursor_id, snap, updated_at_ms, delivery)
            VALUES (%(t)s, 0, 0, 0, %(ts)s, %(ids)s, pg_current_snapshot(), {NOW_MS}, %(d)s)
            ON CONFLICT (timeline) DO NOTHING""",
        {
            "t": timeline,
            "ts": [BEFORE_ALL[0]] * buckets,
            "ids": [BEFORE_ALL[1]] * buckets,
            "d": delivery,
        },
    )


def start(
    conn: Conn, timeline: str, buckets: int, committed: int | None, delivery: str | None = None
) -> CursorState:
    """Take the relay of ``timeline`` over (a new epoch fences any earlier relay's
    writes) at the batch Kafka committed last (``committed``; None: Kafka names none,
    then the last batch known committed here), its delivery ``delivery`` from now on
    (None: transactional; ``"acked"``: :mod:`.relay_acked`'s, which settles a
    transactional relay's last batches here first).

    A relay that delivered by acknowledgement last has its own account of what was
    delivered (``confirmed``), and Kafka's last commit is an older relay's: resumed
    from the former, and only once it is settled (:class:`RelayStateError` else)."""
    with conn.transaction():
        _first_state(conn, timeline, buckets, None)
        row = conn.execute(
            "SELECT epoch, seq, confirmed, delivery FROM timeline_relay_state "
            "WHERE timeline = %(t)s FOR UPDATE",
            {"t": timeline},
        ).fetchone()
        assert row is not None
        epoch, recorded, confirmed = int(row[0]) + 1, int(row[1]), int(row[2])
        if row[3] == ACKED:
            if recorded != confirmed:
                raise RelayStateError(
                    f"relay of {timeline!r}: batches {confirmed + 1}-{recorded} of its "
                    "acknowledged delivery are not settled; run its relay (the timeline "
                    "relay) once to deliver them before a transactional relay takes over",
                    timeline,
                )
            committed = None  # Kafka's last commit is older than the acked batches
        # No marker in Kafka: none committed yet, or one expired (the group's offsets
        # outlive an idle relay only offsets.retention.minutes): resume after the last
        # batch known committed; the ones after it may be sent again, none is lost.
        seq = confirmed if committed is None else committed
        if seq > recorded:
            raise RelayStateError(
                f"relay of {timeline!r}: Kafka committed batch {seq}, the database knows "
                f"{recorded}; was the database restored from a backup? Remove the "
                "relay's consumer group offsets to start over from the database",
                timeline,
            )
        if seq == 0:
            ts, ids = [BEFORE_ALL[0]] * buckets, [BEFORE_ALL[1]] * buckets
            snap = str(conn.execute("SELECT pg_current_snapshot()::TEXT").fetchone()[0])  # type: ignore[index]
        else:
            found = conn.execute(
                "SELECT cursor_ts, cursor_id, snap::TEXT FROM timeline_relay_batches "
                "WHERE timeline = %(t)s AND seq = %(s)s",
                {"t": timeline, "s": seq},
            ).fetchone()
            if found is None:
                raise RelayStateError(
                    f"relay of {timeline!r}: batch {seq} is not recorded (purged?)", timeline
                )
            ts, ids, snap = list(found[0]), list(found[1]), str(found[2])
        if len(ts) != buckets:
            raise RelayStateError(f"relay of {timeline!r}: cursor of another bucket count")
        conn.execute(
            "DELETE FROM timeline_relay_batches WHERE timeline = %(t)s AND seq > %(s)s",
            {"t": timeline, "s": seq},
        )
        conn.execute(
            f"""UPDATE timeline_relay_state
                SET epoch = %(e)s, seq = %(s)s, confirmed = %(s)s, cursor_ts = %(ts)s,
                    cursor_id = %(ids)s, snap = %(snap)s::pg_snapshot, updated_at_ms = {NOW_MS},
                    delivery = %(d)s, positions = NULL
                WHERE timeline = %(t)s""",
            {
                "t": timeline,
                "e": epoch,
                "s": seq,
                "ts": ts,
                "ids": ids,
                "snap": snap,
                "d": delivery,
            },
        )
    return CursorState(timeline, epoch, seq, tuple(ts), tuple(ids), snap)


def rewind(conn: Conn, to: CursorState) -> None:
    """Set the relay's state back to ``to`` (the last batch Kafka committed) after a
    batch failed before its commit was asked for: its rows are not taken after all."""
    with conn.transaction():
        conn.execute(
            f"""UPDATE timeline_relay_state
                SET seq = %(s)s, confirmed = %(s)s, cursor_ts = %(ts)s, cursor_id = %(ids)s,
                    snap = %(snap)s::pg_snapshot, updated_at_ms = {NOW_MS}
                WHERE timeline = %(t)s AND epoch = %(e)s""",
            {
                "t": to.timeline,
                "e": to.epoch,
                "s": to.seq,
                "ts": list(to.cursor_ts),
                "ids": list(to.cursor_id),
                "snap": to.snapshot,
            },
        )
        conn.execute(
            "DELETE FROM timeline_relay_batches WHERE timeline = %(t)s AND seq > %(s)s",
            {"t": to.timeline, "s": to.seq},
        )


def _read_sql(horizon: bool) -> str:
    bound = "%(horizon)s::BIGINT" if horizon else NOW_MS
    columns = "m.bucket, m.ts, m.id, m.body, m.headers, m.producer_group"
    cursors = (
        "unnest(%(buckets)s::INT[], %(cts)s::BIGINT[], %(cid)s::TEXT[]) AS b (bucket, cts, cid)"
    )
    # The sweep's rows come bucket by bucket, each in (ts, id) order (a nested loop
    # over the index range scans LATERAL forces): the last of a bucket is its cursor.
    return f"""
        SELECT s.snap, s.now, x.* FROM (SELECT pg_current_snapshot()::TEXT AS snap,
                                               {NOW_MS} AS now) AS s
        LEFT JOIN LATERAL (
            SELECT y.*, FALSE AS late FROM {cursors}, LATERAL (
                SELECT {columns} FROM timeline_messages AS m
                WHERE m.timeline = %(t)s AND m.bucket = b.bucket
                  AND (m.ts, m.id) > (b.cts, b.cid) AND m.ts <= {bound}
                  AND m.deleted_at_ms IS NULL AND m.due_stream IS NULL
                ORDER BY m.ts, m.id LIMIT %(per_bucket)s) AS y
            UNION ALL
            SELECT {columns}, TRUE FROM timeline_messages AS m JOIN {cursors}
                ON b.bucket = m.bucket
            WHERE m.timeline = %(t)s AND m.deleted_at_ms IS NULL
              AND m.wxid >= pg_snapshot_xmin(%(snap)s::pg_snapshot)::TEXT::BIGINT
              AND NOT pg_visible_in_snapshot(m.wxid::TEXT::xid8, %(snap)s::pg_snapshot)
              AND (m.ts, m.id) <= (b.cts, b.cid) AND m.due_stream IS NULL
        ) AS x ON TRUE"""


_READ = {False: _read_sql(False), True: _read_sql(True)}

_ORDERED_SCANS = "set_config('enable_sort', 'off', TRUE)"
"""Run in the transaction of a sweep (its effect ends with it): the sweep's rows come
from the due index's range scans, in order. Without statistics (a timeline filled
since the last ``ANALYZE``) the planner reads every message of the timeline through
the ``wxid`` index and sorts them, once a bucket: a hundred times slower."""


def take(
    conn: Conn,
    state: CursorState,
    limit: int,
    horizon: int | None,
    confirmed: int,
    positions: Sequence[int] | None = None,
) -> TakenBatch:
    """Read the next batch past ``state`` (at most ``limit`` swept rows, about evenly
    per bucket, and every late row) and record it as batch ``state.seq + 1``, in one
    transaction, with ``confirmed``, the last batch Kafka has (and, given, the target
    ``positions`` after it); nothing is recorded when nothing was read.

    :class:`RelayFencedError` when another relay has started since ``state``'s."""
    timeline = state.timeline
    buckets = len(state.cursor_ts)
    with conn.transaction():
        row = conn.execute(
            f"SELECT epoch, {_ORDERED_SCANS} FROM timeline_relay_state "
            "WHERE timeline = %(t)s FOR UPDATE",
            {"t": timeline},
        ).fetchone()
        if row is None or int(row[0]) != state.epoch:
            raise RelayFencedError(
                f"relay of {timeline!r}: another relay took over (epoch "
                f"{None if row is None else row[0]}, this one {state.epoch}); stop this one",
                timeline,
            )
        got = conn.execute(
            _READ[horizon is not None],
            {
                "t": timeline,
                "buckets": list(range(buckets)),
                "cts": list(state.cursor_ts),
                "cid": list(state.cursor_id),
                "per_bucket": -(-limit // buckets),
                "snap": state.snapshot,
                "horizon": horizon,
            },
            binary=True,  # bodies as bytes, not hex text
        ).fetchall()
        snap, now = str(got[0][0]), int(got[0][1])
        ts, ids = list(state.cursor_ts), list(state.cursor_id)
        rows = []
        for r in got:
            if r[2] is None:
                continue  # nothing read (the LEFT JOIN's one row)
            if not r[8]:
                ts[r[2]], ids[r[2]] = r[3], r[4]
            rows.append(r[2:8])
        if not rows:
            return TakenBatch([], state, now)
        seq = state.seq + 1
        params = {
            "t": timeline,
            "s": seq,
            "c": confirmed,
            "ts": ts,
            "ids": ids,
            "snap": snap,
            "p": None if positions is None else list(positions),
        }
        conn.execute(
            f"""INSERT INTO timeline_relay_batches
                    (timeline, seq, cursor_ts, cursor_id, snap, written_at_ms)
                VALUES (%(t)s, %(s)s, %(ts)s, %(ids)s, %(snap)s::pg_snapshot, {NOW_MS})""",
            params,
        )
        conn.execute(
            f"""UPDATE timeline_relay_state
                SET seq = %(s)s, confirmed = %(c)s, cursor_ts = %(ts)s, cursor_id = %(ids)s,
                    snap = %(snap)s::pg_snapshot, updated_at_ms = {NOW_MS},
                    positions = COALESCE(%(p)s::BIGINT[], positions)
                WHERE timeline = %(t)s""",
            params,
        )
    new = CursorState(timeline, state.epoch, seq, tuple(ts), tuple(ids), snap)
    return TakenBatch(rows, new, now)


@dataclass(frozen=True)
class AckedResume:
    """Where an acknowledging relay resumes: after ``state``'s batch (the last recorded,
    with the new epoch), the batches after ``owed_from`` (the last known delivered;
    None: all were) perhaps delivered in part, the last one recorded at
    ``written_at_ms``; ``positions``: the target's offsets before the owed records."""

    state: CursorState
    owed_from: CursorState | None
    written_at_ms: int | None
    positions: tuple[int, ...]
    now_ms: int
    previous_epoch: int
    """The epoch before this take-over (whether the last relay was this one)."""


def resume_acked(conn: Conn, timeline: str, buckets: int) -> AckedResume | None:
    """Take the relay of ``timeline`` over for acknowledged delivery (a new epoch: an
    earlier relay's next batch is refused); None when a transactional relay's batches
    are to be settled first (:func:`start` with Kafka's last commit)."""
    with conn.transaction():
        _first_state(conn, timeline, buckets, ACKED)
        row = conn.execute(
            f"""SELECT epoch, seq, confirmed, cursor_ts, cursor_id, snap::TEXT, delivery,
                       positions, {NOW_MS}
                FROM timeline_relay_state WHERE timeline = %(t)s FOR UPDATE""",
            {"t": timeline},
        ).fetchone()
        assert row is not None
        epoch, seq, confirmed = int(row[0]) + 1, int(row[1]), int(row[2])
        if row[6] != ACKED and seq > 0:
            return None
        if len(row[3]) != buckets:
            raise RelayStateError(f"relay of {timeline!r}: cursor of another bucket count")
        state = CursorState(timeline, epoch, seq, tuple(row[3]), tuple(row[4]), str(row[5]))
        owed_from: CursorState | None = None
        written_at: int | None = None
        if confirmed < seq:
            found = conn.execute(
                """SELECT seq, cursor_ts, cursor_id, snap::TEXT, written_at_ms
                   FROM timeline_relay_batches
                   WHERE timeline = %(t)s AND seq IN (%(c)s, %(s)s)""",
                {"t": timeline, "c": confirmed, "s": seq},
            ).fetchall()
            by_seq = {int(r[0]): r for r in found}
            if seq not in by_seq or (confirmed > 0 and confirmed not in by_seq):
                raise RelayStateError(
                    f"relay of {timeline!r}: batch {confirmed} or {seq} is not recorded (purged?)",
                    timeline,
                )
            written_at = int(by_seq[seq][4])
            if confirmed == 0:
                before = ([BEFORE_ALL[0]] * buckets, [BEFORE_ALL[1]] * buckets, state.snapshot)
            else:
                before = (by_seq[confirmed][1], by_seq[confirmed][2], str(by_seq[confirmed][3]))
            owed_from = CursorState(
                timeline, epoch, confirmed, tuple(before[0]), tuple(before[1]), before[2]
            )
        conn.execute(
            "UPDATE timeline_relay_state SET epoch = %(e)s, delivery = %(d)s "
            "WHERE timeline = %(t)s",
            {"t": timeline, "e": epoch, "d": ACKED},
        )
    positions = tuple(int(p) for p in row[7] or ())
    return AckedResume(state, owed_from, written_at, positions, int(row[8]), epoch - 1)


def owed_rows(conn: Conn, owed_from: CursorState, to: CursorState) -> list[tuple[Any, ...]]:
    """The messages the batches after ``owed_from`` up to ``to`` took (the rule: taken
    by ``to``, not by ``owed_from``), as a batch reads them: those swept between the two
    cursors and those behind the first written after its snapshot."""
    visible = "(m.wxid IS NULL OR pg_visible_in_snapshot(m.wxid::TEXT::xid8, {}::pg_snapshot))"
    columns = "m.bucket, m.ts, m.id, m.body, m.headers, m.producer_group"
    cursors = (
        "unnest(%(buckets)s::INT[], %(fts)s::BIGINT[], %(fid)s::TEXT[], %(tts)s::BIGINT[], "
        "%(tid)s::TEXT[]) AS b (bucket, fts, fid, tts, tid)"
    )
    rows = conn.execute(
        f"""SELECT {columns} FROM {cursors} JOIN timeline_messages AS m
                ON m.timeline = %(t)s AND m.bucket = b.bucket
            WHERE (m.ts, m.id) > (b.fts, b.fid) AND (m.ts, m.id) <= (b.tts, b.tid)
              AND m.deleted_at_ms IS NULL AND m.due_stream IS NULL
              AND {visible.format("%(to)s")}
            UNION ALL
            SELECT {columns} FROM {cursors} JOIN timeline_messages AS m
                ON m.timeline = %(t)s AND m.bucket = b.bucket
            WHERE (m.ts, m.id) <= (b.fts, b.fid)
              AND m.deleted_at_ms IS NULL AND m.due_stream IS NULL
              AND m.wxid >= pg_snapshot_xmin(%(from)s::pg_snapshot)::TEXT::BIGINT
              AND NOT pg_visible_in_snapshot(m.wxid::TEXT::xid8, %(from)s::pg_snapshot)
              AND pg_visible_in_snapshot(m.wxid::TEXT::xid8, %(to)s::pg_snapshot)""",
        {
            "t": to.timeline,
            "buckets": list(range(len(to.cursor_ts))),
            "fts": list(owed_from.cursor_ts),
            "fid": list(owed_from.cursor_id),
            "tts": list(to.cursor_ts),
            "tid": list(to.cursor_id),
            "from": owed_from.snapshot,
            "to": to.snapshot,
        },
        binary=True,
    ).fetchall()
    return [tuple(r) for r in rows]


def settle(conn: Conn, state: CursorState, positions: Sequence[int]) -> None:
    """Record every batch up to ``state``'s delivered, the target's ``positions`` after
    them; :class:`RelayFencedError` when another relay has started since."""
    with conn.transaction():
        cur = conn.execute(
            f"""UPDATE timeline_relay_state
                SET confirmed = %(s)s, positions = %(p)s, updated_at_ms = {NOW_MS}
                WHERE timeline = %(t)s AND epoch = %(e)s AND seq = %(s)s""",
            {"t": state.timeline, "e": state.epoch, "s": state.seq, "p": list(positions)},
        )
        if cur.rowcount != 1:
            raise RelayFencedError(
                f"relay of {state.timeline!r}: another relay took over; stop this one",
                state.timeline,
            )


def next_due_ms(conn: Conn, state: CursorState) -> tuple[int | None, int]:
    """The earliest time past the cursor (None: nothing waits) and the database's now."""
    with conn.transaction():
        conn.execute(f"SELECT {_ORDERED_SCANS}")
        row = conn.execute(
            f"""SELECT min(x.ts), {NOW_MS} FROM
                unnest(%(buckets)s::INT[], %(cts)s::BIGINT[], %(cid)s::TEXT[])
                    AS b (bucket, cts, cid),
                LATERAL (SELECT m.ts FROM timeline_messages AS m
                         WHERE m.timeline = %(t)s AND m.bucket = b.bucket
                           AND (m.ts, m.id) > (b.cts, b.cid)
                           AND m.deleted_at_ms IS NULL AND m.due_stream IS NULL
                         ORDER BY m.ts, m.id LIMIT 1) AS x""",
            {
                "t": state.timeline,
                "buckets": list(range(len(state.cursor_ts))),
                "cts": list(state.cursor_ts),
                "cid": list(state.cursor_id),
            },
        ).fetchone()
    assert row is not None
    return (None if row[0] is None else int(row[0])), int(row[1])


def release_stream_due(conn: Conn, timeline: str) -> int:
    """Make the event-time messages whose stream's time has passed theirs clock messages
    due at once (at their event time, at most now): the relay's next batch takes them,
    swept or late (the write is a new ``wxid``). Returns how many."""
    cur = conn.execute(
        f"""UPDATE timeline_messages AS m
            SET due_stream = NULL, ts = LEAST(m.ts, {NOW_MS}), wxid = {WXID_NOW},
                version = m.version + 1
            FROM timeline_stream_times AS st
            WHERE m.timeline = %(t)s AND m.due_stream IS NOT NULL
              AND m.deleted_at_ms IS NULL AND m.lock_consumer IS NULL
              AND st.stream = m.due_stream AND m.ts <= st.time_ms""",
        {"t": timeline},
    )
    return max(cur.rowcount, 0)


def purge_relayed(conn: Conn, keep_ms: int) -> int:
    """Remove the messages every relay delivered more than ``keep_ms`` ago: per bucket
    one range ``DELETE`` behind the cursor of the latest batch recorded that long ago
    and known committed by Kafka (and the batch rows before it); returns how many."""
    batches = conn.execute(
        f"""SELECT DISTINCT ON (b.timeline) b.timeline, b.seq, b.cursor_ts, b.cursor_id,
                   b.snap::TEXT
            FROM timeline_relay_batches AS b JOIN timeline_relay_state AS s
                 ON s.timeline = b.timeline AND b.seq <= s.confirmed
            WHERE b.written_at_ms <= {NOW_MS} - %(keep)s
            ORDER BY b.timeline, b.seq DESC""",
        {"keep": keep_ms},
    ).fetchall()
    removed = 0
    for timeline, seq, cursor_ts, cursor_id, snap in batches:
        cur = conn.execute(
            """DELETE FROM timeline_messages AS m
               USING unnest(%(buckets)s::INT[], %(cts)s::BIGINT[], %(cid)s::TEXT[])
                   AS b (bucket, cts, cid)
               WHERE m.timeline = %(t)s AND m.bucket = b.bucket
                 AND (m.ts, m.id) <= (b.cts, b.cid) AND m.deleted_at_ms IS NULL
                 AND m.due_stream IS NULL
                 AND (m.wxid IS NULL
                      OR pg_visible_in_snapshot(m.wxid::TEXT::xid8, %(snap)s::pg_snapshot))""",
            {
                "t": timeline,
                "buckets": list(range(len(cursor_ts))),
                "cts": list(cursor_ts),
                "cid": list(cursor_id),
                "snap": snap,
            },
        )
        removed += max(cur.rowcount, 0)
        conn.execute(
            "DELETE FROM timeline_relay_batches WHERE timeline = %(t)s AND seq < %(s)s",
            {"t": timeline, "s": seq},
        )
    return removed


def relayed_ids(conn: Conn, timeline: str, ids: Sequence[str]) -> set[str]:
    """Which of ``ids`` a relay of ``timeline`` has taken (and not purged yet)."""
    rows = conn.execute(
        f"""SELECT m.id FROM timeline_messages AS m JOIN timeline_relay_state AS rs
                ON rs.timeline = m.timeline
            WHERE m.timeline = %(t)s AND m.id = ANY(%(ids)s) AND {_PASSED}""",
        {"t": timeline, "ids": list(ids)},
    ).fetchall()
    return {str(r[0]) for r in rows}
