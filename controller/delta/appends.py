"""Appends to the controller's Delta tables with delta-rs: table creation, schema
evolution, idempotent appends, and waiting out an object store that does not answer.

    tables = DeltaTables(delta_root)
    tables.append(MARKS, rows, app_id, batch_id)   # False: that batch is there already

Each commit carries the Delta transaction identifier ``(appId, version)``; a batch whose
version a table already holds for that appId is skipped, so a batch re-run after a crash
never duplicates a row (``tidemark.jobs.sink.DeltaSink`` names the appIds).

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
from collections.abc import Callable, Mapping
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

from tidemark.controller.delta.commit_turns import commit_turn
from tidemark.controller.delta.exceptions import StoreOutageError
from tidemark.controller.delta.location import Root, TableLocation
from tidemark.controller.delta.maintenance import default_log_retention_s, retention_properties
from tidemark.retries import RetryPolicy
from tidemark.schemas.arrow import ARROW_SCHEMAS
from tidemark.schemas.tables import TABLES, table_path

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
    5 s; after that the outage is a :class:`StoreOutageError` (``outage_s`` 0: the
    ``OSError`` itself, a local path's); any other error propagates unchanged."""
    if outage_s <= 0:
        return call()
    policy = RetryPolicy(
        first_delay_s=first_delay_s, max_delay_s=max(first_delay_s, 5.0), max_elapsed_s=outage_s
    )
    try:
        return policy.call(
            call,
            retry_on=OSError,
            what=f"{what}: the store did not answer",
            logger=log,
            level=logging.WARNING,
        )
    except StoreOutageError:
        raise
    except OSError as exc:
        raise StoreOutageError(
            f"{what}: the store did not answer for {outage_s:g} s ({exc})"
        ) from exc


def ensure_tables(
    delta_root: Root,
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
    lake = TableLocation.of(delta_root, storage_options)
    if log_retention_s is None:
        log_retention_s = default_log_retention_s(lake.uri)
    properties: dict[str, str | None] = {**retention_properties(log_retention_s)}

    def create(table: str) -> None:
        for attempt in range(attempts):
            try:
                DeltaTable.create(
                    lake.table(table).uri,
                    schema=ARROW_SCHEMAS[table],
                    mode="ignore",
                    configuration=properties,
                    storage_options=lake.delta_rs_options,
                )
                return
            except OSError:  # the store did not answer: not a race
                raise
            except Exception as exc:  # a concurrent creator won the race: look again
                if attempt == attempts - 1:
                    raise
                log.info("creating table %s raced (%s); retrying", table, exc)

    outage_s = STORE_OUTAGE_S if lake.on_object_store else 0.0
    for table in TABLES:
        through_store_outage(functools.partial(create, table), f"creating table {table}", outage_s)
    through_store_outage(
        lambda: evolve_tables(lake.uri, lake.storage_options, attempts=attempts),
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


class DeltaTables:
    """Idempotent appends to the tables under ``delta_root`` (delta-rs, no Spark).

    One :class:`deltalake.DeltaTable` per table is kept open; ``storage_options``
    go to delta-rs (object-store credentials, as for any delta-rs writer).

    An append does not re-read the log first (on a local file system
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

    def __init__(self, lake: Root) -> None:
        self.location = TableLocation.of(lake)
        self._open: dict[str, Any] = {}

    def _table(self, table: str, *, refresh: bool = True) -> Any:
        """The open table; ``refresh``: brought up to date first (lists the log)."""
        dt = self._open.get(table)
        if dt is None:
            where = self.location.table(table)
            dt = self._open[table] = DeltaTable(where.uri, storage_options=where.delta_rs_options)
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
                with commit_turn(self.location.table(table).uri):
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
            # checkpoints and log cleanup belong to tidemark.controller.delta.maintenance,
            # off the append path (delta-rs would write one in every 100th append otherwise)
            post_commithook_properties=PostCommitHookProperties(
                create_checkpoint=False, cleanup_expired_logs=False
            ),
        )


__all__ = [
    "STORE_OUTAGE_S",
    "DeltaTables",
    "ensure_tables",
    "evolve_tables",
    "missing_columns",
    "retention_properties",
    "through_store_outage",
]
