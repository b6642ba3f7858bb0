"""The Delta sink of the controller's query: idempotent appends to the Delta tables.

    sink = DeltaSink(delta_root, app_id="tidemark-controller/tidemark-marks")
    query = ...start(); sink.bind(query.id)         # the query id names the transactions
    sink.write(rows, batch_id)                      # controller_job.Batches, per batch

Each micro-batch's output (a handful of rows per stream and interval) is
collected once to the driver -- the stateful stage runs exactly once per
batch -- and appended to ``marks``, then ``index``, then ``rejected_marks``,
then ``laggards`` with delta-rs (:mod:`deltalake`), each commit carrying the Delta transaction
identifier ``(appId = <app id>/<query id>, version = <batch id>)``. A batch
whose version a table already holds for that appId is skipped, so a batch
re-run after a crash (same offsets, same state, same batch timestamp) never
duplicates a row. The query id persists in the bucket's checkpoint, so the
instance that takes a bucket over continues the same application id; a
*new* checkpoint gets a new id and starts its own count.

Why delta-rs and not Spark's Delta writer: the rows are already on the
driver, and a Spark append with ``txnAppId``/``txnVersion`` runs Spark jobs
to rebuild the table's transaction state on every commit; delta-rs keeps the
table's log state in memory and reads only the commits it has not seen. The
two write the same Delta protocol: the tables stay readable, writable and
compactable (``OPTIMIZE``) by Spark. Rows are made by :mod:`tidemark.schemas.tables`,
the schemas come from its layout.

A table written before a column joined the layout (``laggards.instance``,
``first_seen``, ``last_seen``) gets it when the controller starts
(:func:`evolve_tables`, called by :func:`ensure_tables`): one ``ADD COLUMN``
commit, nullable, so the rows already there read as null in it and every
reader (delta-rs or Spark) sees one schema; no data file is rewritten.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from deltalake import (
    CommitProperties,
    DeltaTable,
    PostCommitHookProperties,
    Schema,
    Transaction,
    write_deltalake,
)
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from tidemark.controller.model import Watermark
from tidemark.jobs.commit_turns import commit_turn
from tidemark.jobs.maintenance import default_log_retention_s, retention_properties
from tidemark.jobs.processor import LAGGARD, REJECTED, WATERMARK
from tidemark.schemas.arrow import ARROW_SCHEMAS
from tidemark.schemas.tables import (
    INDEX,
    LAGGARDS,
    LAGGARDS_COLUMNS,
    MARKS,
    REJECTED_COLUMNS,
    REJECTED_MARKS,
    TABLES,
    index_row,
    marks_row,
    on_object_store,
    rejected_row,
    table_path,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

STORE_OUTAGE_S = 120.0
"""How long a store that does not answer is waited for before its error goes on."""


def through_store_outage(
    call: Callable[[], T],
    what: str,
    outage_s: float = STORE_OUTAGE_S,
    first_delay_s: float = 0.5,
) -> T:
    """``call()``, tried again while the store does not answer (``OSError``: an object
    store restarting, a reset connection) for up to ``outage_s``, the delay doubling to
    5 s; after that, or on any other error, the error propagates unchanged."""
    deadline = time.monotonic() + outage_s
    delay = first_delay_s
    while True:
        try:
            return call()
        except OSError as exc:
            if time.monotonic() + delay > deadline:
                raise
            log.warning(
                "%s: the store did not answer (%s); trying again in %.1f s", what, exc, delay
            )
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def ensure_tables(
    delta_root: str,
    storage_options: Mapping[str, str] | None = None,
    attempts: int = 5,
    log_retention_s: float | None = None,
) -> None:
    """Create the tables if missing (plain Delta, with delta-rs as the appends: no Spark
    job, so a new controller does not wait for a cold JVM's first Delta commands).

    A new table gets :func:`retention_properties`; the maintainer gives them
    to an existing one (the sink retries the append that races that commit).
    An object store that does not answer is waited for (:func:`through_store_outage`),
    so a driver starting while its store restarts does not exit; a local path's
    error (no such directory, no permission) is not an outage and comes at once.
    """
    if log_retention_s is None:
        log_retention_s = default_log_retention_s(delta_root)
    properties: dict[str, str | None] = {**retention_properties(log_retention_s)}

    def create(table: str) -> None:
        for attempt in range(attempts):
            try:
                DeltaTable.create(
                    table_path(delta_root, table),
                    schema=ARROW_SCHEMAS[table],
                    mode="ignore",
                    configuration=properties,
                    storage_options=dict(storage_options) if storage_options else None,
                )
                return
            except OSError:  # the store did not answer: not a race
                raise
            except Exception as exc:  # a concurrent creator won the race: look again
                if attempt == attempts - 1:
                    raise
                log.info("creating table %s raced (%s); retrying", table, exc)

    outage_s = STORE_OUTAGE_S if on_object_store(str(delta_root)) else 0.0
    for table in TABLES:
        through_store_outage(functools.partial(create, table), f"creating table {table}", outage_s)
    through_store_outage(
        lambda: evolve_tables(delta_root, storage_options, attempts=attempts),
        "adding the layout's columns",
        outage_s,
    )


def missing_columns(delta_root: str, table: str, storage_options: Mapping[str, str]) -> list[str]:
    """The columns of ``table``'s layout its Delta table lacks (none when there is no table)."""
    try:
        dt = DeltaTable(
            table_path(delta_root, table), storage_options=dict(storage_options) or None
        )
    except TableNotFoundError:
        return []
    present = {field.name for field in dt.schema().fields}
    return [name for name in ARROW_SCHEMAS[table].names if name not in present]


def evolve_tables(
    delta_root: str, storage_options: Mapping[str, str] | None = None, attempts: int = 5
) -> dict[str, list[str]]:
    """Add to each existing table the layout's columns it lacks; returns what was added.

    Only nullable columns are ever added to the layout, so rows written before
    read as null there. Two controllers starting at once may both try: the one
    whose commit fails looks again and finds the columns there.
    """
    options = dict(storage_options or {})
    added: dict[str, list[str]] = {}
    for table in TABLES:
        for attempt in range(attempts):
            missing = missing_columns(delta_root, table, options)
            if not missing:
                break
            fields = [ARROW_SCHEMAS[table].field(name) for name in missing]
            try:
                dt = DeltaTable(table_path(delta_root, table), storage_options=options or None)
                with commit_turn(table_path(delta_root, table)):
                    dt.alter.add_columns(list(Schema.from_arrow(pa.schema(fields)).fields))
                added[table] = missing
                log.info("table %s: added columns %s", table, ", ".join(missing))
                break
            except Exception as exc:  # a concurrent evolver committed first: look again
                if attempt == attempts - 1:
                    raise
                log.info("adding columns to %s raced (%s); retrying", table, exc)
    return added


def split_rows(
    rows: Sequence[Mapping[str, Any]],
) -> dict[str, list[dict[str, Any]]]:
    """A batch's output rows (``tidemark.jobs.processor.COLUMNS``) -> the rows of each Delta table,
    made by :mod:`tidemark.schemas.tables` (marks sorted by stream, seq)."""
    emitted = sorted(
        (r for r in rows if r["kind"] == WATERMARK), key=lambda r: (r["stream"], r["seq"])
    )
    marks = [(r, watermark_of(r)) for r in emitted]
    return {
        MARKS: [marks_row(w, r["writers"] or (), r["emitted_at"], r) for r, w in marks],
        INDEX: [index_row(w, r["upper_time_max"]) for r, w in marks],
        REJECTED_MARKS: [
            rejected_row(**{c: r[c] for c in REJECTED_COLUMNS})
            for r in rows
            if r["kind"] == REJECTED
        ],
        LAGGARDS: [
            {**{c: r[c] for c in LAGGARDS_COLUMNS}, "kind": r["laggard_kind"]}
            for r in rows
            if r["kind"] == LAGGARD
        ],
    }


def watermark_of(row: Mapping[str, Any]) -> Watermark:
    """The watermark of an output row of kind ``watermark`` (its cut in two arrays)."""
    cut = dict(zip(row["cut_segments"], row["cut_offsets"], strict=True))
    return Watermark(row["stream"], row["time"], row["upper_time"], cut, row["seq"])


class DeltaTables:
    """Idempotent appends to the tables under ``delta_root`` (delta-rs, no Spark).

    One :class:`deltalake.DeltaTable` per table is kept open; ``storage_options``
    go to delta-rs (object-store credentials, as for any delta-rs writer).

    An append does not re-read the log first (issue 19: on a local file system
    every ``update_incremental`` lists the whole ``_delta_log``, so an append
    cost grew with the log). The handle is current after its own commit, and
    delta-rs resolves a blind append against newer commits by itself (the
    maintainer's compactions, checkpoints, property changes). A newer commit
    carrying the same application id -- another instance took the bucket over
    -- makes delta-rs fail the commit (``ConcurrentTransaction``); the append
    then reads the log and checks the id again, so a batch is still written
    exactly once.
    """

    COMMIT_ATTEMPTS = 3

    def __init__(self, delta_root: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.delta_root = delta_root
        self.storage_options = dict(storage_options or {})
        self._open: dict[str, Any] = {}

    def _table(self, table: str, *, refresh: bool = True) -> Any:
        """The open table; ``refresh``: brought up to date first (lists the log)."""
        dt = self._open.get(table)
        if dt is None:
            dt = self._open[table] = DeltaTable(
                table_path(self.delta_root, table), storage_options=self.storage_options or None
            )
        elif refresh:
            dt.update_incremental()
        return dt

    def open_all(self, refresh: bool = False) -> None:
        """Open every table now (``refresh``: and read the commits since it was opened)."""
        for table in TABLES:
            self._table(table, refresh=refresh)

    def committed_version(self, table: str, app_id: str) -> int | None:
        """The last ``version`` committed to ``table`` under ``app_id`` (``None``: none)."""
        version = self._table(table).transaction_version(app_id)
        return None if version is None else int(version)

    def append(self, table: str, rows: list[dict[str, Any]], app_id: str, version: int) -> bool:
        """Append ``rows`` as transaction ``(app_id, version)``; ``False``: already there.

        A store that does not answer is waited for (:func:`through_store_outage`),
        reading the log again before each try after the first, so a commit that landed
        before its answer was lost is not written twice; then the error goes to the
        query (and the leadership)."""
        tries = itertools.count()
        return through_store_outage(
            lambda: self._append(table, rows, app_id, version, refresh=next(tries) > 0),
            f"{table}: batch {version}",
        )

    def _append(
        self, table: str, rows: list[dict[str, Any]], app_id: str, version: int, refresh: bool
    ) -> bool:
        for attempt in range(1, self.COMMIT_ATTEMPTS + 1):
            # the first attempt trusts the handle (current after its own last commit);
            # a failed commit means someone else committed: read the log, check again
            dt = self._table(table, refresh=refresh or attempt > 1)
            done = dt.transaction_version(app_id)
            if done is not None and int(done) >= version:
                log.info("%s: batch %d of %s already committed; skipped", table, version, app_id)
                return False
            try:
                with commit_turn(table_path(self.delta_root, table)):
                    self._write(dt, table, rows, app_id, version)
                return True
            except CommitFailedError as exc:
                if attempt == self.COMMIT_ATTEMPTS:
                    raise
                log.info("%s: commit of batch %d failed (%s); reading the log", table, version, exc)
        raise AssertionError("unreachable")

    @staticmethod
    def _write(dt: Any, table: str, rows: list[dict[str, Any]], app_id: str, version: int) -> None:
        data = pa.Table.from_pylist(rows, schema=ARROW_SCHEMAS[table])
        write_deltalake(
            dt,
            data,
            mode="append",
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=app_id, version=version)]
            ),
            # issue 19: checkpoints and log cleanup belong to tidemark.jobs.maintenance, off the
            # append path (delta-rs would write one in every 100th append otherwise)
            post_commithook_properties=PostCommitHookProperties(
                create_checkpoint=False, cleanup_expired_logs=False
            ),
        )


class DeltaSink:
    """Writes the batches :class:`tidemark.jobs.controller_job.Batches` (the query's
    ``foreachBatch``)
    collects; :meth:`bind` gives it the query id once started."""

    def __init__(
        self,
        delta_root: str,
        app_id: str,
        storage_options: Mapping[str, str] | None = None,
        tables: DeltaTables | None = None,
    ) -> None:
        self.delta_root = delta_root
        self.app_id = app_id
        self.tables = tables if tables is not None else DeltaTables(delta_root, storage_options)
        self._query_id: str | None = None
        self._bound = threading.Event()
        self.batches = 0
        self.rows_written = 0
        # metrics hook (tidemark.jobs.metrics): called as observer(rows, batch_id, duration_s)
        self.observer: Callable[[Sequence[Mapping[str, Any]], int, float], None] | None = None

    def bind(self, query_id: str) -> None:
        """The query started: its id names the transactions. The tables are brought up
        to date first: a new leader's handles predate the old leader's last commits,
        which carry the same application id, so a blind first append would fail on
        each table and read the log anyway."""
        self._query_id = query_id
        try:
            self.tables.open_all(refresh=True)
        except Exception:  # the appends open and refresh what they need themselves
            log.exception("opening the tables under %s failed", self.delta_root)
        self._bound.set()

    def txn_app_id(self) -> str:
        if not self._bound.wait(120):
            raise RuntimeError("the sink was never bound to its query")
        return f"{self.app_id}/{self._query_id}"

    def write(self, rows: Sequence[Mapping[str, Any]], batch_id: int) -> None:
        """Append one batch's output rows (the processor's ``OUTPUT_SCHEMA``)."""
        app = self.txn_app_id()
        by_table = split_rows(rows)
        for table in TABLES:
            if by_table[table]:
                self.tables.append(table, by_table[table], app, batch_id)
        self.batches += 1
        self.rows_written += len(rows)
        if rows:
            log.debug(
                "batch %d of %s: %d watermarks, %d rejected, %d laggard rows",
                batch_id,
                app,
                len(by_table[MARKS]),
                len(by_table[REJECTED_MARKS]),
                len(by_table[LAGGARDS]),
            )


__all__ = [
    "DeltaSink",
    "DeltaTables",
    "ensure_tables",
    "evolve_tables",
    "missing_columns",
    "retention_properties",
    "split_rows",
    "watermark_of",
]
