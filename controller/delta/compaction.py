"""Compaction in time order: small files rewritten as files sorted by time, one commit.

    removed, added = compact_in_time_order(dt, "index", target_bytes=16 << 20, row_group_rows=8192)

The layout readers rely on (``tidemark.pipelines.reading.seek``): every file and every
Parquet row group of a compacted table covers a short span of time, for all
streams, so a lookup for (stream, t) finds its row group from statistics.
delta-rs ``optimize.compact`` bin-packs files in an order of its own (by
size, then the snapshot's order, which a checkpoint shuffles), so its row
groups span most of the table; this rewrite orders them itself:

1. the small files (below ``target_bytes / TIER``; and, once ``min_files``
   of them wait, the files between that and ``target_bytes``) are taken in
   the order of their minimum time (``time``; ``at`` for ``rejected_marks``)
   and cut into bins of up to ``target_bytes`` (two tiers: a growing file
   is rewritten only while it is small);
2. each bin's rows are sorted by ``(time, stream, seq)`` and written as one
   Parquet file of ``row_group_rows``-row groups beside the table's files;
3. one commit removes the bin's files and adds the new ones, every action
   with ``dataChange=false`` (the rows do not change), with exact Delta
   statistics for the top-level columns.

The commit only removes files it read, and the controller's appends only
add files, so the two never conflict; a commit that fails anyway (another
compactor removed a file first) deletes its new files and raises
:class:`deltalake.exceptions.CommitFailedError` for the caller to retry on
the new version. Plain Parquet and plain Delta actions: delta-spark and
delta-rs read the result.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import PostCommitHookProperties
from deltalake.transaction import AddAction, RemoveAction

from tidemark.controller.delta.tables import add_actions, filesystem_path
from tidemark.schemas.arrow import ARROW_SCHEMAS
from tidemark.schemas.tables import REJECTED_MARKS

ORDER: dict[str, tuple[str, ...]] = {REJECTED_MARKS: ("at", "kafka_partition", "kafka_offset")}
"""Sort columns per table; the first is the one files are binned by."""
DEFAULT_ORDER = ("time", "stream", "seq")
STATS_TYPES = (pa.types.is_integer, pa.types.is_string)
TIER = 64
"""Files below ``target / TIER`` are merged whenever compaction runs; files between
that and the target only once ``min_files`` of them wait. So a growing file is
rewritten while it is small only (below 256 KiB at the default 16 MiB target), and
a row is rewritten a few times at most."""


@dataclass(frozen=True)
class SmallFile:
    path: str
    size: int
    first: int | None
    """Minimum of the table's first order column (``None``: no statistics)."""


def order_of(table: str) -> tuple[str, ...]:
    return ORDER.get(table, DEFAULT_ORDER)


def small_files(dt: Any, table: str, target_bytes: int) -> list[SmallFile]:
    """The table's files below ``target_bytes``, by minimum time (then path)."""
    actions = add_actions(dt)
    if actions.num_rows == 0:
        return []
    first = f"min.{order_of(table)[0]}"
    firsts = (
        actions.column(first).to_pylist()
        if first in actions.column_names
        else [None] * len(actions)
    )
    files = [
        SmallFile(path, int(size), low)
        for path, size, low in zip(
            actions.column("path").to_pylist(),
            actions.column("size_bytes").to_pylist(),
            firsts,
            strict=True,
        )
        if size < target_bytes
    ]
    return sorted(files, key=lambda f: (f.first is None, f.first or 0, f.path))


def bins(files: Sequence[SmallFile], target_bytes: int) -> list[list[SmallFile]]:
    """Consecutive runs of ``files`` of up to ``target_bytes`` each; runs of one file
    are left alone (nothing to merge)."""
    out: list[list[SmallFile]] = []
    current: list[SmallFile] = []
    size = 0
    for f in files:
        if current and size + f.size > target_bytes:
            out.append(current)
            current, size = [], 0
        current.append(f)
        size += f.size
    if current:
        out.append(current)
    return [b for b in out if len(b) >= 2]


def compact_in_time_order(
    dt: Any,
    table: str,
    *,
    target_bytes: int,
    row_group_rows: int,
    min_files: int = 2,
    turn: AbstractContextManager[Any] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> tuple[int, int]:
    """Rewrite the small files of ``dt`` (the open table named ``table``) in time order;
    ``(files removed, files added)``. One commit for all bins, made holding ``turn``
    (:func:`tidemark.controller.delta.commit_turns.commit_turn`: the files are read and
    written without it).
    ``storage_options``: the table's delta-rs options, to reach its files."""
    files = small_files(dt, table, target_bytes)
    first = [f for f in files if f.size < target_bytes // TIER]
    second = [f for f in files if f.size >= target_bytes // TIER]
    todo = bins(first, target_bytes)
    if len(second) >= min_files:
        todo += bins(second, target_bytes)
    if not todo:
        return 0, 0
    base = str(dt.table_uri).rstrip("/")
    options = dict(storage_options or {})
    now_ms = int(time.time() * 1000)
    written: list[str] = []
    actions: list[Any] = []
    try:
        for run in todo:
            rows = pa.concat_tables(
                [_read(f"{base}/{f.path}", ARROW_SCHEMAS[table], options) for f in run]
            ).sort_by([(c, "ascending") for c in order_of(table)])
            name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
            size = _write(f"{base}/{name}", rows, row_group_rows, options)
            written.append(f"{base}/{name}")
            actions.append(AddAction(name, size, {}, now_ms, False, json.dumps(_stats(rows))))
            actions.extend(RemoveAction(f.path, False, now_ms, f.size, {}) for f in run)
        with turn or nullcontext():
            dt.create_write_transaction(
                actions,
                "append",
                dt.schema(),
                post_commithook_properties=PostCommitHookProperties(create_checkpoint=False),
            )
    except BaseException:
        for uri in written:
            _delete(uri, options)
        raise
    return sum(len(run) for run in todo), len(todo)


def _read(uri: str, schema: pa.Schema, options: Mapping[str, str]) -> pa.Table:
    filesystem, path = filesystem_path(uri, options)
    return pq.read_table(path, filesystem=filesystem, schema=schema)


def _write(uri: str, rows: pa.Table, row_group_rows: int, options: Mapping[str, str]) -> int:
    filesystem, path = filesystem_path(uri, options)
    pq.write_table(
        rows, path, filesystem=filesystem, row_group_size=row_group_rows, compression="snappy"
    )
    if filesystem is None:
        return os.path.getsize(path)
    return int(filesystem.get_file_info(path).size)


def _delete(uri: str, options: Mapping[str, str]) -> None:
    filesystem, path = filesystem_path(uri, options)
    try:
        if filesystem is None:
            os.remove(path)
        else:
            filesystem.delete_file(path)
    except OSError:
        pass  # never committed: an orphan a vacuum with a full listing would remove


def _stats(rows: pa.Table) -> dict[str, Any]:
    """Delta file statistics (numRecords, min/max, nullCount) of the top-level columns."""
    minimum: dict[str, Any] = {}
    maximum: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for field in rows.schema:
        column = rows.column(field.name)
        if pa.types.is_nested(field.type):
            continue
        nulls[field.name] = column.null_count
        if not any(check(field.type) for check in STATS_TYPES) or column.null_count == len(column):
            continue
        bounds = pc.min_max(column).as_py()
        minimum[field.name], maximum[field.name] = bounds["min"], bounds["max"]
    return {
        "numRecords": rows.num_rows,
        "minValues": minimum,
        "maxValues": maximum,
        "nullCount": nulls,
    }


__all__ = ["TIER", "SmallFile", "bins", "compact_in_time_order", "order_of", "small_files"]
