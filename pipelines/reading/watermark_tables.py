"""Reading the controller's ``marks`` and ``index`` Delta tables with deltalake (no Spark).

    tail = TableTail(table_path("/data/delta", MARKS), stream="shop/orders")
    rows = tail.poll()            # new rows of the stream since the last poll (pyarrow)
    cut = read_cut("/data/delta", "shop/orders", seq=41)
    marks = read_watermarks("/data/delta", "shop/orders")     # list[Watermark]

The one deltalake reader of the tables: readers, seek, tools and the Spark
jobs (``jobs.tables`` re-exports the readers) all read through it.

Names, columns and schemas come from :mod:`schemas.tables`, the one
definition the controller job writes by.

Incremental by table version: a :class:`TableTail` keeps the ``DeltaTable``
open, and on each poll applies only the newer log versions
(``update_incremental``); when the version moved, it reads only the data
files it has not seen, and of those only the ones whose Delta file
statistics (min/max of ``stream`` and ``seq``) say they may hold rows of the
stream newer than the last one read. Rows are immutable once committed and
``seq`` has no gaps per stream, so "new" is simply ``seq > last seq``; a
compaction that rewrites old rows into new files costs nothing but a glance
at the statistics.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from controller.index import IndexRow, index_rows, running_max
from controller.model import Watermark
from pipelines.reading.exceptions import WatermarksUnavailableError
from schemas.tables import (
    INDEX,
    INDEX_ARROW,
    INDEX_COLUMNS,
    MARKS,
    MARKS_ARROW,
    MARKS_COLUMNS,
    cut_from_cell,
    index_row,
    marks_row,
    table_path,
    watermark_from_row,
)

log = logging.getLogger(__name__)

MARKS_SCHEMA = MARKS_ARROW
INDEX_SCHEMA = INDEX_ARROW

DELTA_ROOT_ENV = "TIDEMARK_DELTA_ROOT"
"""The variable ``infra.environment`` names; read here only as a fallback, since
``pipelines`` does not import ``infra``."""


def resolve_delta_root(delta_root: str | os.PathLike[str] | None) -> str:
    """``delta_root`` if given, else ``$TIDEMARK_DELTA_ROOT``; a clear error when neither."""
    if delta_root is not None and str(delta_root):
        return str(delta_root)
    found = os.environ.get(DELTA_ROOT_ENV, "").strip()
    if found:
        return found
    raise WatermarksUnavailableError(
        f"no delta root: pass delta_root=... or set {DELTA_ROOT_ENV} to where the "
        "controller writes its tables"
    )


@dataclass(frozen=True)
class DataFile:
    """One data file of a table and the statistics the log records for it."""

    uri: str
    minimum: Mapping[str, Any]
    maximum: Mapping[str, Any]

    def may_hold(self, column: str, low: Any = None, high: Any = None) -> bool:
        """True unless the statistics prove no value of ``column`` lies in [low, high]."""
        lo, hi = self.minimum.get(column), self.maximum.get(column)
        if low is not None and hi is not None and hi < low:
            return False
        return not (high is not None and lo is not None and lo > high)


class DeltaSource:
    """An open ``DeltaTable`` (or none yet: a missing table reads as empty)."""

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.uri = uri
        self.storage_options = dict(storage_options or {})
        self._table: Any = None

    def refresh(self) -> bool:
        """Load newer log versions; True when the version moved (or the table appeared)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        if self._table is None:
            try:
                self._table = DeltaTable(self.uri, storage_options=self.storage_options or None)
            except TableNotFoundError:
                return False
            except Exception as exc:
                raise WatermarksUnavailableError(f"cannot open table {self.uri}: {exc}") from exc
            return True
        before = self._table.version()
        try:
            self._table.update_incremental()
        except Exception as exc:
            raise WatermarksUnavailableError(f"cannot refresh table {self.uri}: {exc}") from exc
        return bool(self._table.version() != before)

    @property
    def version(self) -> int | None:
        return None if self._table is None else int(self._table.version())

    def rows(self, stream: str | None = None) -> pa.Table:
        """Every row of the current version (optionally one stream's); empty when no table."""
        if self._table is None:
            return pa.table({})
        import pyarrow.dataset as ds

        flt = None if stream is None else ds.field("stream") == stream
        return self._table.to_pyarrow_dataset().to_table(filter=flt)

    def files(self) -> list[DataFile]:
        """Every data file of the current version, with its min/max statistics."""
        if self._table is None:
            return []
        actions = pa.table(self._table.get_add_actions(flatten=True))
        paths = actions.column("path").to_pylist()
        if not paths:
            return []
        uris = self._table.file_uris()
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
        return [
            DataFile(
                prefix + path,
                {c: v[i] for c, v in mins.items()},
                {c: v[i] for c, v in maxs.items()},
            )
            for i, path in enumerate(paths)
        ]


def _prefix(uris: Sequence[str], path: str) -> str:
    for uri in uris:
        if uri.endswith(path):
            return uri[: len(uri) - len(path)]
    raise WatermarksUnavailableError(f"data file {path} is not among the table's files")


def read_files(
    files: Iterable[DataFile], columns: Sequence[str], stream: str, min_seq: int | None = None
) -> pa.Table:
    """The stream's rows (``seq > min_seq``) of ``files``, sorted by ``seq``."""
    expr = pc.field("stream") == stream
    if min_seq is not None:
        expr = expr & (pc.field("seq") > min_seq)
    tables = []
    for f in files:
        filesystem, path = _filesystem(f.uri)
        tables.append(
            pq.read_table(path, columns=list(columns), filters=expr, filesystem=filesystem)
        )
    if not tables:
        return pa.table({c: [] for c in columns})
    return pa.concat_tables(tables).sort_by("seq")


def _filesystem(uri: str) -> tuple[Any, str]:
    if "://" not in uri or uri.startswith("file://"):
        return None, uri.removeprefix("file://")
    import pyarrow.fs as pafs

    filesystem, path = pafs.FileSystem.from_uri(uri)
    return filesystem, str(path)


class TableTail:
    """A stream's rows of one table, read incrementally by table version."""

    def __init__(
        self,
        uri: str,
        stream: str,
        columns: Sequence[str],
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        self.source = DeltaSource(uri, storage_options)
        self.stream = stream
        self.columns = tuple(columns)
        self.last_seq = -1
        self._seen: set[str] = set()

    def poll(self) -> pa.Table:
        """Rows of the stream with ``seq`` above the last one returned, in ``seq`` order."""
        if not self.source.refresh():
            return pa.table({c: [] for c in self.columns})
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


def append_watermarks(
    delta_root: str,
    watermarks: Sequence[Watermark],
    *,
    previous_upper_time_max: int | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Append watermarks (one stream, ``seq`` order) to ``marks`` then ``index``.

    The controller job is the writer in production; this is for tests,
    benchmarks and tools. ``previous_upper_time_max`` continues the running
    maximum of earlier rows.
    """
    from deltalake import write_deltalake

    if not watermarks:
        return
    uppers = [w.upper_time for w in watermarks]
    if previous_upper_time_max is None:
        maxima = running_max(uppers)
    else:
        maxima = running_max([previous_upper_time_max, *uppers])[1:]
    marks = pa.Table.from_pylist([marks_row(w) for w in watermarks], schema=MARKS_SCHEMA)
    index = pa.Table.from_pylist(
        [index_row(w, top) for w, top in zip(watermarks, maxima, strict=True)],
        schema=INDEX_SCHEMA,
    )
    options = dict(storage_options or {}) or None
    write_deltalake(table_path(delta_root, MARKS), marks, mode="append", storage_options=options)
    write_deltalake(table_path(delta_root, INDEX), index, mode="append", storage_options=options)


def read_watermarks(
    delta_root: str, stream: str, storage_options: Mapping[str, str] | None = None
) -> list[Watermark]:
    """Every watermark of ``stream`` in the ``marks`` table, in ``seq`` order."""
    tail = TableTail(table_path(delta_root, MARKS), stream, MARKS_COLUMNS, storage_options)
    return [watermark_from_row(row, Watermark) for row in tail.poll().to_pylist()]


def read_index_rows(
    delta_root: str, stream: str, storage_options: Mapping[str, str] | None = None
) -> list[IndexRow]:
    """``stream``'s index rows in ``seq`` order, each with its cut from ``marks``.

    Reads ``marks`` alone (``upper_time_max`` is its running maximum), so the
    rows are consistent even while the job is between its two appends.
    """
    return index_rows(read_watermarks(delta_root, stream, storage_options))


def read_table(
    delta_root: str,
    table: str,
    stream: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Rows of any of the tables (optionally one stream's) as dicts; for tools and tests."""
    source = DeltaSource(table_path(delta_root, table), storage_options)
    source.refresh()
    return list(source.rows(stream).to_pylist())


def read_cut(
    delta_root: str, stream: str, seq: int, storage_options: Mapping[str, str] | None = None
) -> dict[int, int] | None:
    """The ``stream_cut`` of watermark ``seq`` from ``marks`` (file statistics pick the files)."""
    source = DeltaSource(table_path(delta_root, MARKS), storage_options)
    if not source.refresh():
        return None
    return read_cut_from(source, stream, seq)


def read_cut_from(source: DeltaSource, stream: str, seq: int) -> dict[int, int] | None:
    files = [
        f
        for f in source.files()
        if f.may_hold("stream", stream, stream) and f.may_hold("seq", seq, seq)
    ]
    rows = read_files(files, ("stream", "seq", "stream_cut"), stream, seq - 1)
    for row in rows.to_pylist():
        if row["seq"] == seq:
            return cut_from_cell(row["stream_cut"])
    return None


__all__ = [
    "DELTA_ROOT_ENV",
    "INDEX",
    "INDEX_COLUMNS",
    "INDEX_SCHEMA",
    "MARKS",
    "MARKS_COLUMNS",
    "MARKS_SCHEMA",
    "DataFile",
    "DeltaSource",
    "TableTail",
    "append_watermarks",
    "cut_from_cell",
    "read_cut",
    "read_cut_from",
    "read_files",
    "read_index_rows",
    "read_table",
    "read_watermarks",
    "resolve_delta_root",
    "table_path",
]
