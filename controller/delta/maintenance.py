"""Automatic maintenance of the controller's Delta tables: compact, checkpoint, vacuum.

    maintainer = Maintainer(MaintenanceSettings("/data/tidemark")).start()   # a daemon thread
    ...
    maintainer.stop()

    Maintainer(MaintenanceSettings(root)).run_once(force=True)   # jobs/compact_index.py

The controller appends one small file per table per batch. Left alone, a
table of a 1 s controller holds 86 400 files after a day and a cold lookup
opens them all. Each pass, for each table, :func:`plan` (pure) decides from
the table's file count and sizes what to do:

- **compact** when ``compact_min_files`` files are smaller than
  ``target_file_bytes / TIER`` (or they add up to that much), or as many
  wait between that and the target:
  :mod:`tidemark.controller.delta.compaction` rewrites them, sorted by time, into files of up to
  ``target_file_bytes`` with row groups of ``row_group_rows`` rows
  (``marks_row_group_rows`` for ``marks``; both small, since the rows of both
  tables carry a cut each) -- one
  ``dataChange=false`` commit: readers at an older version keep reading
  their files, the rows do not change. Files that reached the target are
  never rewritten again, so the table holds about
  ``size / target_file_bytes`` full files plus fewer than
  ``compact_min_files`` small ones;
- **checkpoint** when ``checkpoint_every`` commits were added since the last
  checkpoint (and after each compaction), so opening the table replays a
  checkpoint plus a bounded tail of JSON commits;
- **trim the log** after each checkpoint: commits and checkpoints older than
  ``log_retention_s`` (the table's ``delta.logRetentionDuration``, which the
  maintainer sets, see :func:`retention_properties`) and older than the
  latest checkpoint are deleted;
- **vacuum** every ``vacuum_every_s``: data files removed more than
  ``time_travel_hours`` ago are deleted. A reader that holds an old version
  keeps its files for that span.

Why the log is kept shorter than the removed files: on a local
file system delta-rs lists the whole ``_delta_log`` directory on every open,
``update_incremental`` and commit (about 1 µs per entry each time): with
10 000 entries (under 3 h of a 1 s controller) a table open took 2.6x and a
commit 2.7x as long as with 100. So on a local file system the log is kept
15 minutes by default (:func:`default_log_retention_s`), on an object store
(whose listing starts at an offset) as long as the removed files. Time
travel to a version or a time (``?version=`` / ``?as_of=``) reaches back
the log retention, not ``time_travel_hours``.

Appends win. A compaction commit that conflicts with a concurrent commit is
retried on the new version (``commit_attempts`` times, with a growing
pause); the appends themselves are blind appends that a compaction never
makes fail. Every error of a pass is logged and the loop goes on: the
maintainer never stops or fails the controller that runs it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from tidemark.controller.delta.commit_turns import commit_turn
from tidemark.controller.delta.compaction import TIER, compact_in_time_order
from tidemark.controller.delta.exceptions import DeltaConfigurationError
from tidemark.controller.delta.tables import add_actions
from tidemark.retries import RetryPolicy
from tidemark.schemas.tables import MARKS, TABLES, on_object_store, table_path

log = logging.getLogger(__name__)

MIB = 1024 * 1024
DEFAULT_TARGET_FILE_BYTES = 16 * MIB
DEFAULT_ROW_GROUP_ROWS = 1024
"""``index`` rows carry their watermark's cut too (``tidemark.schemas.tables``): a cold lookup
decodes the cuts of its whole row group, so the groups stay as small as ``marks``'s."""
DEFAULT_MARKS_ROW_GROUP_ROWS = 1024
"""A cold lookup that finds an ``index`` row without its cut (written before the column)
decodes a whole ``marks`` row group for it, and each row carries a cut of every segment."""
DEFAULT_TIME_TRAVEL_HOURS = 168
LOCAL_LOG_RETENTION_S = 900.0
"""Log kept on a local file system, where every open and commit lists all of it."""


def default_log_retention_s(
    delta_root: str, time_travel_hours: float = DEFAULT_TIME_TRAVEL_HOURS
) -> float:
    """How long the log of tables under ``delta_root`` is kept unless told.

    On a local file system (a path or ``file://``) :data:`LOCAL_LOG_RETENTION_S`,
    15 minutes: delta-rs lists the whole ``_delta_log`` there on every open,
    refresh and commit (~1 µs per entry each time). On an object store the
    listing starts at an offset, so the log costs storage, not time: it is
    kept as long as the removed data files, ``time_travel_hours``.
    """
    if not on_object_store(str(delta_root)):
        return LOCAL_LOG_RETENTION_S
    return float(time_travel_hours) * 3600.0


def retention_properties(log_retention_s: float) -> dict[str, str]:
    """The tables' Delta retention properties (set at creation and by the maintainer).

    ``delta.logRetentionDuration``: how long commits stay in ``_delta_log`` (time
    travel by version or time reaches that far). ``delta.deletedFileRetentionDuration``:
    how long a checkpoint carries the tombstone of a removed file -- no longer than
    the log, since every checkpoint repeats them all (600 000 a table after 7 days
    at 1 commit/s). The maintainer's vacuum does not read it: it keeps removed
    data files ``time_travel_hours`` (a Spark ``VACUUM`` without ``RETAIN`` would
    use the shorter span).
    """
    span = f"interval {max(1, int(log_retention_s))} seconds"
    return {"delta.logRetentionDuration": span, "delta.deletedFileRetentionDuration": span}


@dataclass(frozen=True)
class MaintenanceSettings:
    """What the maintainer keeps, and when it acts (defaults: the controller's)."""

    delta_root: str
    tables: tuple[str, ...] = TABLES
    compact_min_files: int = 32
    """Compact once this many files are smaller than ``target_file_bytes``."""
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES
    """Size compaction aims at; a file this large is left alone."""
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS
    """Rows per Parquet row group in compacted files (what one lookup reads at least)."""
    marks_row_group_rows: int = DEFAULT_MARKS_ROW_GROUP_ROWS
    """The same for ``marks`` (a lookup reads one of its row groups for one cut)."""
    checkpoint_every: int = 20
    """Checkpoint once this many commits were added since the last checkpoint."""
    time_travel_hours: int = DEFAULT_TIME_TRAVEL_HOURS
    """Removed data files stay this long (readers of old versions); Delta's 7 days."""
    log_retention_s: float | None = None
    """Log entries (and tombstones) stay this long: the reach of time travel by version.
    ``None``: :func:`default_log_retention_s` (15 min on a local file system, else
    ``time_travel_hours``); see :attr:`log_retention`."""
    vacuum_every_s: float = 3600.0
    check_interval_s: float = 5.0
    commit_attempts: int = 5
    storage_options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not str(self.delta_root).strip():
            raise DeltaConfigurationError("no delta root: pass the directory or URI of the tables")
        if self.compact_min_files < 2:
            raise DeltaConfigurationError(
                f"compact_min_files must be at least 2: got {self.compact_min_files}"
            )
        small = {
            "target_file_bytes": self.target_file_bytes,
            "row_group_rows": self.row_group_rows,
            "marks_row_group_rows": self.marks_row_group_rows,
            "checkpoint_every": self.checkpoint_every,
            "commit_attempts": self.commit_attempts,
        }
        bad = [f"{name}={value}" for name, value in small.items() if value < 1]
        if bad:
            raise DeltaConfigurationError(f"must be at least 1: {', '.join(bad)}")
        if self.time_travel_hours < 0 or self.check_interval_s <= 0 or self.vacuum_every_s < 0:
            raise DeltaConfigurationError(
                "time_travel_hours and vacuum_every_s must be >= 0, check_interval_s > 0"
            )
        if self.log_retention_s is not None and self.log_retention_s < 1:
            raise DeltaConfigurationError(
                f"log_retention_s must be at least 1: got {self.log_retention_s}"
            )
        unknown = [t for t in self.tables if t not in TABLES]
        if unknown:
            raise DeltaConfigurationError(
                f"unknown table(s) {', '.join(unknown)}; valid: {', '.join(TABLES)}"
            )

    @property
    def log_retention(self) -> float:
        """The log retention in seconds (``log_retention_s`` or the default for the root)."""
        if self.log_retention_s is not None:
            return float(self.log_retention_s)
        return default_log_retention_s(self.delta_root, self.time_travel_hours)


@dataclass(frozen=True)
class TableState:
    """What :func:`plan` looks at: one table's version, files and sizes."""

    version: int
    files: int
    small_files: int
    small_bytes: int
    total_bytes: int
    checkpoint_version: int | None
    """The last version this maintainer checkpointed (``None``: not yet)."""
    vacuumed_at: float | None
    """When this maintainer last vacuumed the table (``None``: not yet)."""
    medium_files: int = 0
    """Files between ``target_file_bytes / TIER`` and the target (the second tier)."""


@dataclass(frozen=True)
class Plan:
    """What :func:`plan` decided for one table: compact its small files, write a
    checkpoint (then trim the log), vacuum removed files -- in that order."""

    compact: bool
    checkpoint: bool
    vacuum: bool


def plan(state: TableState, settings: MaintenanceSettings, now: float) -> Plan:
    """What to do to a table now (pure; ``now`` in seconds, as ``vacuumed_at``)."""
    compact = (
        state.small_files >= settings.compact_min_files
        or state.medium_files >= settings.compact_min_files
        or (state.small_files >= 2 and state.small_bytes >= settings.target_file_bytes // TIER)
    )
    since = (
        state.version + 1
        if state.checkpoint_version is None
        else (state.version - state.checkpoint_version)
    )
    checkpoint = compact or since >= settings.checkpoint_every
    vacuum = state.vacuumed_at is None or now - state.vacuumed_at >= settings.vacuum_every_s
    return Plan(compact, checkpoint and state.version > 0, vacuum)


@dataclass(frozen=True)
class PassReport:
    """What one pass did to one table (files before and after, what ran)."""

    table: str
    version: int
    files_before: int
    files_after: int
    compacted: bool = False
    files_removed: int = 0
    files_added: int = 0
    checkpointed: bool = False
    vacuumed: int = 0
    error: str | None = None


class Maintainer:
    """Runs :func:`plan` and its actions on the tables, in a loop or once.

    ``clock`` (seconds) and ``sleep`` are injectable. Thread-safe to stop
    from another thread; one pass at a time.
    """

    def __init__(
        self,
        settings: MaintenanceSettings,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._sleep = sleep
        self._open: dict[str, Any] = {}
        self._checkpointed: dict[str, int] = {}
        self._vacuumed: dict[str, float] = {}
        self._configured: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pass_lock = threading.Lock()
        self.passes = 0
        self.busy_s = 0.0
        self.longest_pass_s = 0.0
        self.last_reports: list[PassReport] = []

    # -- the loop -----------------------------------------------------------------------------

    def start(self) -> Maintainer:
        """Run passes every ``check_interval_s`` in a daemon thread until :meth:`stop`."""
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="tidemark-maintenance", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop the loop after the pass under way (a commit is never cut in half)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def __enter__(self) -> Maintainer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # never let maintenance take the controller down
                log.exception("maintenance pass failed; trying again later")
            self._stop.wait(self.settings.check_interval_s)

    # -- one pass -----------------------------------------------------------------------------

    def run_once(self, *, force: bool = False, vacuum: bool = True) -> list[PassReport]:
        """One pass over the tables; ``force`` compacts, checkpoints and (unless not
        ``vacuum``) vacuums regardless of the policy."""
        with self._pass_lock:
            started = time.monotonic()
            reports = [self._maintain(table, force, vacuum) for table in self.settings.tables]
            took = time.monotonic() - started
            self.busy_s += took
            self.longest_pass_s = max(self.longest_pass_s, took)
            self.passes += 1
            self.last_reports = reports
            return reports

    def _maintain(self, table: str, force: bool, vacuum: bool) -> PassReport:
        dt = self._table(table)
        if dt is None:
            return PassReport(table, -1, 0, 0)
        state = self.state(table)
        todo = Plan(True, True, True) if force else plan(state, self.settings, self._clock())
        if not vacuum:
            todo = Plan(todo.compact, todo.checkpoint, False)
        report = PassReport(table, state.version, state.files, state.files)
        try:
            if table not in self._configured:
                self._configure(table)
            if todo.compact and (state.small_files >= 2 or state.medium_files >= 2):
                removed, added = self._compact(table)
                report = _with(report, compacted=True, files_removed=removed, files_added=added)
            if todo.checkpoint:
                self._checkpoint(table)
                report = _with(report, checkpointed=True)
            if todo.vacuum:
                report = _with(report, vacuumed=self._vacuum(table))
        except Exception as exc:
            log.warning("maintenance of %s: %s", table, exc)
            report = _with(report, error=str(exc))
        files = self.state(table).files
        report = _with(report, files_after=files)
        if report.compacted or report.vacuumed:
            log.info("maintenance: %s", report)
        return report

    def state(self, table: str) -> TableState:
        """The table's current :class:`TableState` (files and sizes from the log)."""
        dt = self._table(table)
        if dt is None:
            return TableState(-1, 0, 0, 0, 0, None, None)
        sizes = add_actions(dt).column("size_bytes").to_pylist()
        tier = self.settings.target_file_bytes // TIER
        small = [s for s in sizes if s < tier]
        medium = sum(1 for s in sizes if tier <= s < self.settings.target_file_bytes)
        return TableState(
            version=int(dt.version()),
            files=len(sizes),
            small_files=len(small),
            small_bytes=sum(small),
            total_bytes=sum(sizes),
            checkpoint_version=self._checkpointed.get(table),
            vacuumed_at=self._vacuumed.get(table),
            medium_files=medium,
        )

    def _table(self, table: str) -> Any:
        """The open table, brought up to date; ``None`` while it does not exist."""
        dt = self._open.get(table)
        if dt is None:
            try:
                dt = DeltaTable(
                    table_path(self.settings.delta_root, table),
                    storage_options=dict(self.settings.storage_options) or None,
                )
            except TableNotFoundError:
                return None
            self._open[table] = dt
        else:
            dt.update_incremental()
        return dt

    def _compact(self, table: str) -> tuple[int, int]:
        """Rewrite the small files in time order; a failed commit is retried on the new version."""

        def attempt() -> tuple[int, int]:
            return compact_in_time_order(
                self._table(table),
                table,
                target_bytes=self.settings.target_file_bytes,
                row_group_rows=self.settings.marks_row_group_rows
                if table == MARKS
                else self.settings.row_group_rows,
                min_files=self.settings.compact_min_files,
                turn=self._turn(table),
                storage_options=self.settings.storage_options,
            )

        return self._retrying(table, "compaction", attempt)

    def _configure(self, table: str) -> None:
        """Give the table the retention properties of the settings (once per maintainer).

        A table created before them (or by other tools) gets them in one commit;
        the sink's append that races it is retried by the sink.
        """
        dt = self._table(table)
        wanted = retention_properties(self.settings.log_retention)
        have = dt.metadata().configuration
        if any(have.get(key) != value for key, value in wanted.items()):
            log.info("maintenance of %s: setting %s", table, wanted)

            def attempt() -> tuple[int, int]:
                with self._turn(table):
                    self._table(table).alter.set_table_properties(wanted)
                return 0, 0

            self._retrying(table, "setting retention", attempt)
        self._configured.add(table)

    def _turn(self, table: str) -> threading.Lock:
        """The table's commit turn, shared with the sink's appends in this process."""
        return commit_turn(table_path(self.settings.delta_root, table))

    def _checkpoint(self, table: str) -> None:
        """Checkpoint, then delete the log entries older than the retention (and the
        checkpoint): opening the table lists that directory."""
        dt = self._table(table)
        dt.create_checkpoint()
        self._checkpointed[table] = int(dt.version())
        dt.cleanup_metadata()

    def _vacuum(self, table: str) -> int:
        """Delete files removed more than ``time_travel_hours`` ago; old log entries too."""
        dt = self._table(table)
        with self._turn(table):  # delta-rs commits the vacuum's start and end
            deleted = dt.vacuum(
                retention_hours=self.settings.time_travel_hours,
                dry_run=False,
                enforce_retention_duration=False,
            )
        dt.cleanup_metadata()
        self._vacuumed[table] = self._clock()
        return len(deleted)

    def _retrying(
        self, table: str, what: str, action: Callable[[], tuple[int, int]]
    ) -> tuple[int, int]:
        policy = RetryPolicy(
            first_delay_s=0.05,
            max_delay_s=2.0,
            max_attempts=self.settings.commit_attempts,
            sleep=self._sleep,
        )
        return policy.call(
            action, retry_on=CommitFailedError, what=f"{what} of {table}", logger=log
        )


class MaintenanceSwitch:
    """A :class:`Maintainer` that runs while its controller instance leads.

        switch = MaintenanceSwitch(MaintenanceSettings(delta_root))
        switch.lead(0 in owned_buckets)     # on every ownership change; idempotent
        switch.close()                      # on shutdown

    Exactly one instance should lead (two would only waste work: their
    compactions conflict and one retries).
    """

    def __init__(self, settings: MaintenanceSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._running: Maintainer | None = None

    @property
    def leading(self) -> bool:
        with self._lock:
            return self._running is not None

    def lead(self, leading: bool) -> None:
        with self._lock:
            if leading and self._running is None:
                log.info("maintenance of %s: starting", self.settings.delta_root)
                self._running = Maintainer(self.settings).start()
            elif not leading and self._running is not None:
                log.info("maintenance of %s: handing over", self.settings.delta_root)
                self._running.stop()
                self._running = None

    def close(self) -> None:
        self.lead(False)


MAINTENANCE_BUCKET = 0
"""Until the controller elects a leader, the owner of this bucket maintains the tables."""


def maintenance_switch(settings: Any) -> MaintenanceSwitch:
    """The switch for a controller's settings (``ControllerSettings``: its delta root)."""
    return MaintenanceSwitch(MaintenanceSettings(settings.delta_root))


def _with(report: PassReport, **changes: Any) -> PassReport:
    return replace(report, **changes)


def table_files(
    delta_root: str, table: str, storage_options: Mapping[str, str] | None = None
) -> tuple[int, int]:
    """``(files, bytes)`` of a table's current version; ``(0, 0)`` when it does not exist."""
    settings = MaintenanceSettings(
        str(delta_root), tables=(table,), storage_options=dict(storage_options or {})
    )
    state = Maintainer(settings).state(table)
    return state.files, state.total_bytes


__all__ = [
    "DEFAULT_MARKS_ROW_GROUP_ROWS",
    "DEFAULT_ROW_GROUP_ROWS",
    "DEFAULT_TARGET_FILE_BYTES",
    "DEFAULT_TIME_TRAVEL_HOURS",
    "LOCAL_LOG_RETENTION_S",
    "MAINTENANCE_BUCKET",
    "MIB",
    "Maintainer",
    "MaintenanceSettings",
    "MaintenanceSwitch",
    "PassReport",
    "Plan",
    "TableState",
    "default_log_retention_s",
    "maintenance_switch",
    "plan",
    "retention_properties",
    "table_files",
]
