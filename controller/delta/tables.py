"""The controller's Delta tables read and appended with deltalake (no Spark).

    tail = MarksTail("/data/delta", "shop/orders")
    new = tail.poll()             # the stream's watermarks committed since the last poll
    cut = read_cut("/data/delta", "shop/orders", seq=41)
    marks = read_watermarks("/data/delta", "shop/orders", since=t)   # list[Watermark]

The one deltalake module of the tables: readers, waits, the time service,
seek (``tidemark.pipelines.reading.seek``, the timestamp -> cut lookup) and the Spark
jobs read through it; tests and tools append through it. Layout and rows
come from :mod:`tidemark.schemas.tables`, the definition the controller job writes by.

Incremental by table version: a :class:`TableTail` keeps the ``DeltaTable``
open, and on each poll applies only the newer log versions
(``update_incremental``); when the version moved, it reads only the data
files it has not seen, and of those only the ones whose Delta file
statistics (min/max of ``stream`` and ``seq``) say they may hold rows of the
stream newer than the last one read. Rows are immutable once committed and
``seq`` has no gaps per stream, so "new" is simply ``seq > last seq``; a
compaction that rewrites old rows into new files costs nothing but a glance
at the statistics. pyarrow and deltalake are imported where a table is read
or written, so importing this module (every reader does) stays light.

Why one module: every reader's view of the tables -- tails, cut reads, bounded reads
and the statistics that skip files -- shares one open-table cache and one file filter;
split, each half would need the other's internals.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from tidemark.controller.delta.exceptions import DeltaUnavailableError
from tidemark.controller.delta.location import (
    DELTA_ROOT_ENV,
    Root,
    TableLocation,
    resolve_delta_root,
    shared,
)
from tidemark.controller.index import running_max
from tidemark.controller.model import Watermark
from tidemark.schemas.tables import (
    INDEX,
    INDEX_COLUMNS,
    INDEX_SEARCH_COLUMNS,
    MARKS,
    MARKS_COLUMNS,
    REJECTED_MARKS,
    cut_from_cell,
    index_row,
    marks_row,
    on_object_store,
    table_path,
    watermark_from_row,
)

if TYPE_CHECKING:  # pyarrow is imported where a table is read or written
    import pyarrow as pa
    import pyarrow.parquet as pq

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataFile:
    """One data file of a table and the statistics the log records for it."""

    uri: str
    minimum: Mapping[str, Any]
    maximum: Mapping[str, Any]
    group: int | None = None
    """One row group of the file (its Parquet statistics); ``None``: the whole file."""
    storage_options: Mapping[str, str] = field(default_factory=dict, compare=False)
    """How to reach the file's store (the table's delta-rs options; empty: the ``AWS_*``
    variables and the like, as delta-rs reads them)."""

    def may_hold(self, column: str, low: Any = None, high: Any = None) -> bool:
        """True unless the statistics prove no value of ``column`` lies in [low, high]."""
        lo, hi = self.minimum.get(column), self.maximum.get(column)
        if low is not None and hi is not None and hi < low:
            return False
        return not (high is not None and lo is not None and lo > high)

    def has_column(self, column: str) -> bool:
        """Whether the file has ``column`` (a file written before it joined has not)."""
        return column in _footer_of(self.uri, self.storage_options).names

    def row_groups(self, columns: Sequence[str] | None = None) -> list[DataFile]:
        """The file's row groups, each with the min/max its Parquet footer records (of
        ``columns`` only, when given: a compacted file has hundreds of groups); made once
        per process and columns, with the footer."""
        footer = _footer_of(self.uri, self.storage_options)
        key = None if columns is None else tuple(columns)
        found = footer.groups.get(key)
        if found is None:
            found = footer.groups[key] = self._row_groups(footer, columns)
        return list(found)

    def _row_groups(self, footer: _Footer, columns: Sequence[str] | None) -> list[DataFile]:
        names = [c for c in footer.columns if columns is None or c in columns]
        stats = {name: footer.stats(name) for name in names}
        options = dict(self.storage_options)  # one mapping for every group of the file
        groups = []
        for g in range(footer.metadata.num_row_groups):
            low, high = {}, {}
            for name, per_group in stats.items():
                bounds = per_group[g]
                if bounds is not None:
                    low[name], high[name] = bounds
            groups.append(DataFile(self.uri, low, high, g, options))
        return groups


class _Footer:
    """A data file's Parquet footer and, per column as asked, each row group's (min, max)
    from it (``None``: no statistics). A Delta data file never changes, so both are read
    once per process: a lookup then picks row groups without parsing statistics again."""

    def __init__(self, metadata: pq.FileMetaData) -> None:
        self.metadata = metadata
        paths = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
        self.columns = {path: i for i, path in enumerate(paths) if "." not in path}
        """The top-level columns (nested ones have no usable statistics here) -> index."""
        self.names = frozenset(path.split(".", 1)[0] for path in paths)
        """Every top-level column's name, nested ones too."""
        self.groups: dict[tuple[str, ...] | None, list[DataFile]] = {}
        """:meth:`DataFile.row_groups` of the file, per columns asked."""
        self._stats: dict[str, list[tuple[Any, Any] | None]] = {}

    def stats(self, column: str) -> list[tuple[Any, Any] | None]:
        """Per row group, ``(min, max)`` of ``column`` (``None``: not recorded)."""
        found = self._stats.get(column)
        if found is None:
            i = self.columns.get(column)
            found = []
            for g in range(self.metadata.num_row_groups):
                st = None if i is None else self.metadata.row_group(g).column(i).statistics
                found.append((st.min, st.max) if st is not None and st.has_min_max else None)
            self._stats[column] = found  # (two threads may both parse it: same result)
        return found


class one_moment:
    """Refreshes of a :class:`DeltaSource` on this thread inside the block are asked at the
    block's start: the tails of several streams asking at one moment (a merge's
    ``read_batch`` resolving each stream's time window) share one read of the
    table's log -- a refresh begun after the block started loads every commit made
    before it, the promise a refresh keeps. Nested blocks are the outer one."""

    __slots__ = ("_outer",)

    def __enter__(self) -> None:
        self._outer = getattr(_MOMENT, "asked", None)
        if self._outer is None:
            _MOMENT.asked = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        if self._outer is None:
            _MOMENT.asked = None


_MOMENT = threading.local()
"""``asked``: the start of this thread's :class:`one_moment` block (None: none)."""


class DeltaSource:
    """An open ``DeltaTable`` (or none yet: a missing table reads as empty). Thread-safe:
    one may serve several tails (:func:`shared_source`).

    :meth:`refresh` loads every commit made before it was called: it reads the
    log unless a refresh begun since the call (or since the start of the
    thread's :class:`one_moment` block) already did."""

    def __init__(self, table: Root) -> None:
        self.location = TableLocation.of(table)
        self.uri = self.location.uri
        self.storage_options = self.location.storage_options
        self._table: Any = None
        self._lock = threading.RLock()
        self._began = float("-inf")
        """``time.monotonic()`` when the refresh the loaded version came from began."""

    def refresh(self) -> bool:
        """Load newer log versions; True when the version moved (or the table appeared).
        False, nothing read, when a refresh begun at or after the call's moment (the
        call, or the thread's :class:`one_moment` block) has loaded them already."""
        asked = getattr(_MOMENT, "asked", None)
        if asked is None:
            asked = time.monotonic()
        with self._lock:
            if self._table is not None and self._began >= asked:
                return False
            began = time.monotonic()
            moved = self._refresh()
            self._began = began
            return moved

    def _refresh(self) -> bool:
        from deltalake import DeltaTable  # on use: importing this module stays light
        from deltalake.exceptions import TableNotFoundError  # as above

        if self._table is None:
            try:
                self._table = DeltaTable(self.uri, storage_options=self.location.delta_rs_options)
            except TableNotFoundError:
                return False
            except Exception as exc:
                raise DeltaUnavailableError(f"cannot open table {self.uri}: {exc}") from exc
            return True
        before = self._table.version()
        try:
            self._table.update_incremental()
        except Exception as exc:
            raise DeltaUnavailableError(f"cannot refresh table {self.uri}: {exc}") from exc
        return bool(self._table.version() != before)

    @property
    def version(self) -> int | None:
        with self._lock:
            return None if self._table is None else int(self._table.version())

    def rows(self, stream: str | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        """Every row of the current version (optionally one stream's, only ``columns``);
        empty when no table."""
        with self._lock:
            return self._rows(stream, columns)

    def _rows(self, stream: str | None, columns: Sequence[str] | None) -> pa.Table:
        import pyarrow as pa  # on use: importing this module stays light

        if self._table is None:
            return pa.table({})
        return scan_files(self._files(), table_schema(self._table), columns, stream)

    def files(self) -> list[DataFile]:
        """Every data file of the current version, with its min/max statistics."""
        with self._lock:
            return self._files()

    def latest_files(self) -> list[DataFile]:
        """Every data file of the latest version (a :meth:`refresh`, then :meth:`files`).
        A local table not opened yet stays so: its log is read directly
        (:func:`tidemark.controller.delta.log.live_files`, a checkpoint and the commits
        after it: a third of a delta-rs open), as its files are all that is asked."""
        with self._lock:
            if self._table is None and not on_object_store(self.uri):
                from tidemark.controller.delta.log import live_files  # pyarrow on use

                root = self.uri.removeprefix("file://")
                found = live_files(root)
                if found is not None:
                    return [self._file_of(root, path, stats) for path, stats in found.items()]
            self.refresh()
            return self._files()

    def _file_of(self, root: str, path: str, stats: str | None) -> DataFile:
        """A data file from its log entry: ``path`` (relative ones are percent-encoded
        under the table's directory) and its ``stats`` JSON (top-level columns' min/max)."""
        if path.startswith("file:"):  # an absolute local URI (file:/x or file:///x)
            uri = unquote(urlparse(path).path)
        else:
            uri = path if "://" in path else os.path.join(root, unquote(path))
        found = json.loads(stats) if stats else {}
        low, high = found.get("minValues") or {}, found.get("maxValues") or {}
        return DataFile(
            uri,
            {c: v for c, v in low.items() if not isinstance(v, dict | list)},
            {c: v for c, v in high.items() if not isinstance(v, dict | list)},
            storage_options=self.storage_options,
        )

    def _files(self) -> list[DataFile]:
        if self._table is None:
            return []
        return data_files(self._table, self.storage_options)


def data_files(table: Any, storage_options: Mapping[str, str]) -> list[DataFile]:
    """Every data file of a ``DeltaTable``'s loaded version, with the min/max statistics
    its log records."""
    actions = add_actions(table)
    paths = actions.column("path").to_pylist()
    if not paths:
        return []
    uris = table.file_uris()
    prefix = _prefix(uris, paths[0])
    mins = {
        name[4:]: actions.column(name).to_pylist()
        for name in actions.column_names
        if name.startswith("min.")
    }
    maxs = {
        name[4:]: actions.column(name).to_pylist()
        for name in actions.column_names
        if name.startswith("max.")
    }
    # A column with no value in a file (all null) has no bound: delta-rs says None,
    # the log's statistics leave it out; both readers give the same files.
    return [
        DataFile(
            prefix + path,
            {c: v[i] for c, v in mins.items() if v[i] is not None},
            {c: v[i] for c, v in maxs.items() if v[i] is not None},
            storage_options=storage_options,
        )
        for i, path in enumerate(paths)
    ]


def add_actions(table: Any) -> pa.Table:
    """A ``DeltaTable``'s add actions with flattened statistics, as a pyarrow table.

    Through the Arrow C stream: ``pa.table(...)`` would first ask whether it is
    a pandas frame, importing pandas (half a second in a fresh process).
    """
    import pyarrow as pa  # on use: importing this module stays light

    return pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=True)).read_all()


def _prefix(uris: Sequence[str], path: str) -> str:
    for uri in uris:
        if uri.endswith(path):
            return uri[: len(uri) - len(path)]
    raise DeltaUnavailableError(f"data file {path} is not among the table's files")


Bounds = Mapping[str, tuple[int | None, int | None]]
"""Inclusive ``(low, high)`` per int column (``None``: open); see :func:`read_files`."""


def read_files(
    files: Iterable[DataFile],
    columns: Sequence[str],
    stream: str,
    min_seq: int | None = None,
    bounds: Bounds | None = None,
) -> pa.Table:
    """The stream's rows of ``files`` with ``seq > min_seq`` and each bounded column
    within its bounds, sorted by ``seq``.

    Only the row groups whose Parquet statistics may hold such rows are read
    (compacted files have small row groups, see ``tidemark.controller.delta.maintenance``), and
    the rows are filtered with compute kernels, not a dataset scan.
    """
    import pyarrow as pa  # on use: importing this module stays light

    wanted = dict(bounds or {})
    if min_seq is not None:
        low, high = wanted.get("seq", (None, None))
        wanted["seq"] = (min_seq + 1 if low is None else max(low, min_seq + 1), high)
    needed = list(dict.fromkeys([*columns, "stream", *wanted]))
    tables = []
    for f in files:
        parquet, footer = _open_parquet(f.uri, f.storage_options)
        checks = {**wanted, "stream": (stream, stream)}
        if f.group is None:
            groups = _groups_holding(footer, checks)
        elif all(f.may_hold(c, low, high) for c, (low, high) in checks.items()):
            groups = [f.group]
        else:
            groups = []
        if not groups:
            continue
        rows = parquet.read_row_groups(groups, columns=needed, use_threads=False)
        tables.append(rows.filter(_rows_within(rows, stream, wanted)).select(list(columns)))
    if not tables:
        return pa.table({c: [] for c in columns})
    return pa.concat_tables(tables).sort_by("seq")


def _rows_within(rows: Any, stream: str | None, bounds: Bounds) -> Any:
    """The mask of ``rows`` (a pyarrow table) of ``stream`` (``None``: any) with each
    bounded column within its inclusive bounds; ``None`` when nothing is asked."""
    import pyarrow.compute as pc  # on use: importing this module stays light

    checks = [] if stream is None else [pc.equal(rows.column("stream"), stream)]
    for column, (low, high) in bounds.items():
        if low is not None:
            checks.append(pc.greater_equal(rows.column(column), low))
        if high is not None:
            checks.append(pc.less_equal(rows.column(column), high))
    mask = None
    for check in checks:
        mask = check if mask is None else pc.and_(mask, check)
    return mask


def table_schema(table: Any) -> pa.Schema:
    """A ``DeltaTable``'s schema as pyarrow's: the columns and types a read returns."""
    import pyarrow as pa  # on use: importing this module stays light

    return pa.schema(table.schema().to_arrow())


def scan_files(
    files: Iterable[DataFile],
    schema: pa.Schema,
    columns: Sequence[str] | None = None,
    stream: str | None = None,
    bounds: Bounds | None = None,
) -> pa.Table:
    """The rows of ``files`` (those of ``stream`` with each bounded column within its
    inclusive bounds, when given) as ``columns`` of ``schema`` (the table's; ``None``:
    all of them); a column a file was written without reads as nulls.

    Each file is read whole, on the calling thread: no pyarrow dataset scan. A scan
    reads through pyarrow's I/O threads, and through deltalake's Python file system
    (``to_pyarrow_dataset``) each read's buffer is a Python object: an I/O thread that
    drops the last one after the scan returned takes the GIL, and once the interpreter
    is finalizing that ends the thread (``pthread_exit``) through C++ frames that may
    not be unwound -- ``std::terminate``, the short-lived processes of CLI verbs dying
    with SIGABRT ("terminate called without an active exception") after their output.
    """
    import pyarrow as pa  # on use: importing this module stays light

    wanted = dict(bounds or {})
    names = list(schema.names if columns is None else columns)
    needed = list(dict.fromkeys([*names, *([] if stream is None else ["stream"]), *wanted]))
    full = pa.schema([schema.field(name) for name in needed])
    checks = {**wanted, **({} if stream is None else {"stream": (stream, stream)})}
    tables = []
    for f in files:
        if not all(f.may_hold(c, low, high) for c, (low, high) in checks.items()):
            continue
        parquet, footer = _open_parquet(f.uri, f.storage_options)
        present = [name for name in needed if name in footer.names]
        rows = _conformed(parquet.read(columns=present, use_threads=False), full)
        mask = _rows_within(rows, stream, wanted)
        tables.append((rows if mask is None else rows.filter(mask)).select(names))
    if not tables:
        return pa.schema([schema.field(name) for name in names]).empty_table()
    return pa.concat_tables(tables)


def _conformed(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` as ``schema``: its columns in order, cast to its types, the ones ``rows``
    lacks (a file written before they joined the table) all null."""
    import pyarrow as pa  # on use: importing this module stays light

    columns = [
        rows.column(f.name).cast(f.type)
        if f.name in rows.column_names
        else pa.nulls(rows.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def find_in_group(
    group: DataFile, stream: str, columns: Sequence[str], bounds: Bounds, *, latest: bool
) -> tuple[dict[str, Any], int] | None:
    """The first (``latest``: last) by ``seq`` of ``stream``'s rows in one row group
    (``group``, from :meth:`DataFile.row_groups`) with each bounded column within its
    inclusive bounds: ``(its columns as Python values, its position in the group)``;
    ``None`` when there is none. Only the found row becomes Python objects, and its
    position lets :func:`read_cell` take a wide column of that row alone."""
    import pyarrow.compute as pc  # on use: importing this module stays light

    parquet, _ = _open_parquet(group.uri, group.storage_options)
    needed = list(dict.fromkeys([*columns, "stream", "seq", *bounds]))
    rows = parquet.read_row_group(group.group or 0, columns=needed, use_threads=False)
    at = pc.indices_nonzero(_rows_within(rows, stream, bounds))
    if not len(at):
        return None
    seqs = pc.take(rows.column("seq"), at)  # (no numpy: light CLI verbs run without it)
    position = int(at[pc.index(seqs, pc.max(seqs) if latest else pc.min(seqs)).as_py()].as_py())
    return {c: rows.column(c)[position].as_py() for c in columns}, position


def read_cell(group: DataFile, position: int, column: str) -> Any:
    """The ``column`` value of the row at ``position`` in one row group (``group``, from
    :meth:`DataFile.row_groups`; the position :func:`find_in_group` gave): only that
    column of the group is read, only that row's value becomes a Python object."""
    parquet, _ = _open_parquet(group.uri, group.storage_options)
    rows = parquet.read_row_group(group.group or 0, columns=[column], use_threads=False)
    return rows.column(column)[position].as_py()


def _groups_holding(footer: _Footer, checks: Mapping[str, tuple[Any, Any]]) -> list[int]:
    """The row groups whose statistics may hold a row with every column of ``checks``
    within its inclusive ``(low, high)``; each group is looked at only until one column
    rules it out (a compacted file has hundreds of groups)."""
    columns = [(footer.stats(c), low, high) for c, (low, high) in checks.items()]
    found = []
    for g in range(footer.metadata.num_row_groups):
        for stats, low, high in columns:
            bounds = stats[g]
            if bounds is None:
                continue
            if (low is not None and bounds[1] < low) or (high is not None and bounds[0] > high):
                break
        else:
            found.append(g)
    return found


def _open_parquet(
    uri: str, storage_options: Mapping[str, str] | None = None
) -> tuple[pq.ParquetFile, _Footer]:
    """The file and its footer, parsed once per process (a Delta data file never changes:
    a lookup that picks a row group and then reads it parses the footer once)."""
    import pyarrow.parquet as pq  # on use: importing this module stays light

    filesystem, path = filesystem_path(uri, storage_options)
    source = path if filesystem is None else filesystem.open_input_file(path)
    footer = _kept_footer(uri)
    if footer is not None:
        return pq.ParquetFile(source, metadata=footer.metadata), footer
    opened = pq.ParquetFile(source)
    return opened, _keep_footer(uri, _Footer(opened.metadata))


def _footer_of(uri: str, storage_options: Mapping[str, str] | None = None) -> _Footer:
    """The file's footer (parsed once per process), without opening the file again when
    it is kept."""
    footer = _kept_footer(uri)
    return footer if footer is not None else _open_parquet(uri, storage_options)[1]


def _kept_footer(uri: str) -> _Footer | None:
    with _FOOTERS_LOCK:
        footer = _FOOTERS.get(uri)
        if footer is not None:
            _FOOTERS.move_to_end(uri)
        return footer


def _keep_footer(uri: str, footer: _Footer) -> _Footer:
    with _FOOTERS_LOCK:
        _FOOTERS[uri] = footer
        if len(_FOOTERS) > _FOOTERS_KEPT:
            _FOOTERS.popitem(last=False)
    return footer


_FOOTERS: OrderedDict[str, _Footer] = OrderedDict()
_FOOTERS_KEPT = 64
_FOOTERS_LOCK = threading.Lock()


def filesystem_path(uri: str, storage_options: Mapping[str, str] | None = None) -> tuple[Any, str]:
    """``(pyarrow filesystem or None for a local path, path)`` of a file URI.

    An object-store URI (``s3://``, ``s3a://``, ``gs://``, ``abfss://``, ...) is opened
    through delta-rs's own store, rooted at the bucket, with the table's
    ``storage_options`` (none: the ``AWS_*`` variables and the like, as delta-rs reads
    them); pyarrow's own file systems know neither ``s3a://`` nor an S3 endpoint from
    the environment."""
    if not on_object_store(uri):
        return None, uri.removeprefix("file://")
    scheme, _, rest = uri.partition("://")
    bucket, _, key = rest.partition("/")
    import pyarrow.fs as pafs  # on use: importing this module stays light
    from deltalake.fs import DeltaStorageHandler  # as above

    options = dict(storage_options or {}) or None
    handler = DeltaStorageHandler(f"{scheme}://{bucket}", options=options)
    return pafs.PyFileSystem(handler), key


class TableTail:
    """A stream's rows of one table, read incrementally by table version.

    ``source``: a :class:`DeltaSource` of the table shared with other tails (several
    streams' tails then follow one snapshot: one log read refreshes them all)."""

    def __init__(
        self,
        table: Root,
        stream: str,
        columns: Sequence[str],
        source: DeltaSource | None = None,
    ) -> None:
        self.source = source or DeltaSource(table)
        self.stream = stream
        self.columns = tuple(columns)
        self.last_seq = -1
        self._seen: set[str] = set()
        self._version: int | None = None

    def poll(self, *, refreshed: bool = False) -> pa.Table:
        """Rows of the stream with ``seq`` above the last one returned, in ``seq`` order
        (``refreshed``: the shared source was just refreshed; read at its version)."""
        import pyarrow as pa  # on use: importing this module stays light
        import pyarrow.compute as pc  # as above

        if not refreshed:
            self.source.refresh()
        version = self.source.version
        if version is None or version == self._version:
            return pa.table({c: [] for c in self.columns})
        self._version = version
        current = self.source.files()
        fresh = [
            f
            for f in current
            if f.uri not in self._seen
            and f.may_hold("stream", self.stream, self.stream)
            and f.may_hold("seq", self.last_seq + 1, None)
        ]
        self._seen = {f.uri for f in current}
        rows = read_files(fresh, self.columns, self.stream, self.last_seq)
        if rows.num_rows:
            seqs = rows.column("seq")
            self.last_seq = int(pc.max(seqs).as_py())
            log.debug(
                "%s: %d new row(s) of %s from %d file(s), up to seq %d",
                self.source.uri,
                rows.num_rows,
                self.stream,
                len(fresh),
                self.last_seq,
            )
        return rows


def shared_source(table: Root) -> DeltaSource:
    """The process's one :class:`DeltaSource` of a table (per storage options): the tails
    of many streams open the table once and follow one snapshot, instead of one each."""
    location = TableLocation.of(table)
    return shared("source", location, lambda: DeltaSource(location))


class MarksTail:
    """A stream's new ``marks`` rows, read incrementally (:class:`TableTail`): the one way
    readers, waits and the time service follow a stream's watermarks. The tails of a
    process share one open table (:func:`shared_source`)."""

    def __init__(
        self,
        lake: Root,
        stream: str,
        columns: Sequence[str] = MARKS_COLUMNS,
    ) -> None:
        marks = TableLocation.of(lake).table(MARKS)
        self.uri = marks.uri
        self.tail = TableTail(marks, stream, columns, source=shared_source(marks))

    @property
    def last_seq(self) -> int:
        """The ``seq`` of the last row read (-1: none yet)."""
        return self.tail.last_seq

    @property
    def version(self) -> int | None:
        """The table version read last (``None``: no table yet)."""
        return self.tail.source.version

    def poll_rows(self) -> list[dict[str, Any]]:
        """The rows committed since the last poll, in ``seq`` order."""
        return list(self.tail.poll().to_pylist())

    def poll(self) -> list[Watermark]:
        """The watermarks committed since the last poll, in ``seq`` order."""
        return [watermark_from_row(row, Watermark) for row in self.poll_rows()]

    def next_commit_file(self) -> str | None:
        """The commit file the next table version will have, on a local path (an object
        store: ``None``); its appearance is a cheap sign of new rows."""
        if on_object_store(self.uri):
            return None
        version = self.version
        following = 0 if version is None else version + 1
        return os.path.join(
            self.uri.removeprefix("file://"), "_delta_log", f"{following:020d}.json"
        )


def append_watermarks(
    lake: Root,
    watermarks: Sequence[Watermark],
    *,
    previous_upper_time_max: int | None = None,
) -> None:
    """Append watermarks (one stream, ``seq`` order) to ``marks`` then ``index``.

    The controller job is the writer in production; this is for tests,
    benchmarks and tools. ``previous_upper_time_max`` continues the running
    maximum of earlier rows.
    """
    import pyarrow as pa  # pyarrow and deltalake only where a table is written

    from tidemark.schemas.arrow import (  # pyarrow: its Arrow schemas, as above
        INDEX_ARROW,
        MARKS_ARROW,
    )

    if not watermarks:
        return
    uppers = [w.upper_time for w in watermarks]
    if previous_upper_time_max is None:
        maxima = running_max(uppers)
    else:
        maxima = running_max([previous_upper_time_max, *uppers])[1:]
    marks = pa.Table.from_pylist([marks_row(w) for w in watermarks], schema=MARKS_ARROW)
    index = pa.Table.from_pylist(
        [index_row(w, top) for w, top in zip(watermarks, maxima, strict=True)],
        schema=INDEX_ARROW,
    )
    tables = TableLocation.of(lake)
    append_rows(tables.table(MARKS), marks)
    append_rows(tables.table(INDEX), index)


def append_rows(table: Root, rows: pa.Table) -> None:
    """Append ``rows`` (already in the table's Arrow schema) to ``table``,
    creating it when missing; for tools and tests (the controller appends through
    :class:`tidemark.controller.delta.appends.DeltaTables`)."""
    from deltalake import write_deltalake  # on use: importing this module stays light

    where = TableLocation.of(table)
    write_deltalake(where.uri, rows, mode="append", storage_options=where.delta_rs_options)


def is_table(table: Root) -> bool:
    """Whether a Delta table lives at ``table``."""
    from deltalake import DeltaTable  # on use: importing this module stays light

    where = TableLocation.of(table)
    return bool(DeltaTable.is_deltatable(where.uri, storage_options=where.delta_rs_options))


def column_max(table: Root, column: str, stream: str) -> int | None:
    """The largest ``column`` of ``stream``'s rows in ``table`` (``None``: no table, no
    row)."""
    import pyarrow.compute as pc  # on use: importing this module stays light
    from deltalake import DeltaTable  # as above
    from deltalake.exceptions import TableNotFoundError  # as above

    where = TableLocation.of(table)
    try:
        dt = DeltaTable(where.uri, storage_options=where.delta_rs_options)
    except TableNotFoundError:
        return None
    files = data_files(dt, where.storage_options)
    values = scan_files(files, table_schema(dt), [column], stream).column(column)
    found = pc.max(values).as_py() if len(values) else None
    return None if found is None else int(found)


def read_watermarks(
    delta_root: Root,
    stream: str,
    storage_options: Mapping[str, str] | None = None,
    *,
    since: int | None = None,
) -> list[Watermark]:
    """The watermarks of ``stream`` in the ``marks`` table (those whose time is >=
    ``since``, when given), in ``seq`` order.

    With ``since``, only the files and row groups whose ``time`` statistics reach
    it are read: compacted files are in commit order, so a recent ``since``
    reads the table's tail, whatever its age.
    """
    marks = TableLocation.of(delta_root, storage_options).table(MARKS)
    if since is None:
        rows = TableTail(marks, stream, MARKS_COLUMNS).poll()
    else:
        source = DeltaSource(marks)
        source.refresh()
        files = [
            f
            for f in source.files()
            if f.may_hold("stream", stream, stream) and f.may_hold("time", since, None)
        ]
        rows = read_files(files, MARKS_COLUMNS, stream, None, {"time": (since, None)})
    return [watermark_from_row(row, Watermark) for row in rows.to_pylist()]


def read_table(lake: Root, table: str, stream: str | None = None) -> list[dict[str, Any]]:
    """Rows of any of the tables (optionally one stream's) as dicts; for tools and tests."""
    source = DeltaSource(TableLocation.of(lake).table(table))
    source.refresh()
    return list(source.rows(stream).to_pylist())


def read_marks_as_of(
    lake: Root,
    stream: str,
    *,
    since_ms: int = 0,
    version: int | None = None,
    as_of_ms: int | None = None,
) -> tuple[int | None, list[dict[str, Any]]]:
    """``stream``'s ``marks`` rows with ``time >= since_ms`` as of a table ``version`` or a
    time ``as_of_ms`` (neither: the latest), in ``seq`` order; (version read, rows).
    ``(None, [])`` when there is no table; :class:`DeltaUnavailableError` when the
    version does not exist."""
    from deltalake import DeltaTable  # pyarrow and deltalake only where a table is read
    from deltalake.exceptions import DeltaError, TableNotFoundError  # as above

    marks = TableLocation.of(lake).table(MARKS)
    try:
        dt = DeltaTable(marks.uri, storage_options=marks.delta_rs_options, version=version)
        if as_of_ms is not None:
            dt.load_as_version(datetime.datetime.fromtimestamp(as_of_ms / 1000, datetime.UTC))
    except TableNotFoundError:
        return None, []
    except (DeltaError, ValueError, OSError) as exc:
        raise DeltaUnavailableError(f"marks table: no such version ({exc})") from exc
    files = data_files(dt, marks.storage_options)
    table = scan_files(files, table_schema(dt), None, stream, {"time": (since_ms, None)})
    return int(dt.version()), sorted(table.to_pylist(), key=lambda r: r["seq"])


REJECTED_SHOWN = ("stream", "writer", "reason", "kafka_partition", "kafka_offset", "at")
"""The ``rejected_marks`` columns :func:`read_rejected` returns (not the raw bytes)."""


def read_rejected(lake: Root, stream: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """The latest ``limit`` rejected marks (of every stream: ``None``), newest first,
    without their raw bytes."""
    source = DeltaSource(TableLocation.of(lake).table(REJECTED_MARKS))
    source.refresh()
    rows = source.rows(stream, REJECTED_SHOWN).to_pylist()
    return sorted(rows, key=lambda r: r["at"] or 0, reverse=True)[:limit]


def read_cut(lake: Root, stream: str, seq: int) -> dict[int, int] | None:
    """The ``stream_cut`` of watermark ``seq`` from ``marks`` (file statistics pick the files)."""
    source = DeltaSource(TableLocation.of(lake).table(MARKS))
    if not source.refresh():
        return None
    return read_cut_from(source, stream, seq)


def read_cut_from(
    source: DeltaSource, stream: str, seq: int, time: int | None = None
) -> dict[int, int] | None:
    """The cut of watermark ``seq``; its ``time``, when known, narrows the files and row
    groups read (compacted files are in commit order, so their ``time`` ranges are tight
    whatever the streams' ``seq`` ranges)."""
    files = [
        f
        for f in source.files()
        if f.may_hold("stream", stream, stream)
        and f.may_hold("seq", seq, seq)
        and (time is None or f.may_hold("time", time, time))
    ]
    bounds: dict[str, tuple[int | None, int | None]] = {"seq": (seq, seq)}
    if time is not None:
        bounds["time"] = (time, time)
    rows = read_files(files, ("stream", "seq", "stream_cut"), stream, None, bounds)
    for row in rows.to_pylist():
        if row["seq"] == seq:
            return cut_from_cell(row["stream_cut"])
    return None


__all__ = [
    "DELTA_ROOT_ENV",
    "INDEX",
    "INDEX_COLUMNS",
    "INDEX_SEARCH_COLUMNS",
    "MARKS",
    "MARKS_COLUMNS",
    "REJECTED_SHOWN",
    "Bounds",
    "DataFile",
    "DeltaSource",
    "MarksTail",
    "Root",
    "TableLocation",
    "TableTail",
    "add_actions",
    "append_rows",
    "append_watermarks",
    "column_max",
    "cut_from_cell",
    "data_files",
    "filesystem_path",
    "find_in_group",
    "is_table",
    "one_moment",
    "read_cell",
    "read_cut",
    "read_cut_from",
    "read_files",
    "read_marks_as_of",
    "read_rejected",
    "read_table",
    "read_watermarks",
    "resolve_delta_root",
    "scan_files",
    "shared_source",
    "table_path",
    "table_schema",
]
