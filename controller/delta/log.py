"""A local Delta table's live data files, read from its log without opening the table.

    files = live_files("/data/delta/index")   # {relative path: stats JSON or None}, or None

Opening a table with delta-rs costs 2-7 ms whatever is asked of it (its kernel
builds a snapshot with every action's metadata); a cold timestamp lookup only
needs the live files and their statistics. This is the Delta protocol's own
snapshot reconstruction for that question alone, on a local file system:

1. list ``_delta_log``: the latest complete checkpoint (``N.checkpoint.parquet``
   or every part of ``N.checkpoint.i.n.parquet``) and the commits
   ``N+1.json ...`` after it, which must be contiguous (no checkpoint: from
   ``0.json``);
2. the checkpoint's ``add`` actions are the live files at ``N`` (its
   ``remove`` actions are tombstones, not needed to list live files);
3. each later commit, in order: ``add`` puts a file (a later add of the same
   path replaces its statistics), ``remove`` drops it.

Anything it does not handle exactly gives ``None`` and the caller opens the
table with delta-rs: a protocol whose ``minReaderVersion`` is not 1 (column
mapping, deletion vectors, v2 checkpoints and every reader feature need 2 or
3), a gap in the commits, a file that cannot be read. An object store is left
to delta-rs too (its listing and reads are what delta-rs already does well).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

_COMMIT = re.compile(r"(\d{20})\.json")
_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet")

LiveFiles = Mapping[str, str | None]
"""Each live data file's path as the log records it -> its ``stats`` JSON (``None``: none)."""


class _Unsupported(Exception):
    """The log holds something this reader does not reconstruct: ask delta-rs."""


def live_files(table_dir: str) -> dict[str, str | None] | None:
    """The live data files of the table in ``table_dir`` (a local directory) at its
    latest version, with their ``stats`` JSON; ``None`` when the table is missing or
    its log is not one this reader reconstructs exactly (then open it with delta-rs)."""
    log_dir = os.path.join(table_dir, "_delta_log")
    try:
        names = os.listdir(log_dir)
    except OSError:
        return None
    try:
        checkpoint, parts, commits = _plan(names)
        files: dict[str, str | None] = {}
        if checkpoint is not None:
            _read_checkpoint([os.path.join(log_dir, p) for p in parts], files)
        for version in commits:
            _replay(os.path.join(log_dir, f"{version:020d}.json"), files)
    except Exception as exc:  # (_Unsupported, OSError, bad JSON, pyarrow's errors on a
        # partly written checkpoint: whatever it is, delta-rs reads the log instead)
        log.debug("%s: log read by delta-rs instead (%r)", table_dir, exc)
        return None
    return files


def _plan(names: list[str]) -> tuple[int | None, list[str], list[int]]:
    """From ``_delta_log``'s names: (the latest complete checkpoint's version, its files,
    the commit versions to replay after it, in order)."""
    commits = sorted(int(m[1]) for n in names if (m := _COMMIT.fullmatch(n)))
    by_version: dict[int, dict[tuple[int, int], str]] = {}
    for n in names:
        m = _CHECKPOINT.fullmatch(n)
        if m is not None:
            part = (int(m[2]), int(m[3])) if m[2] is not None else (1, 1)
            by_version.setdefault(int(m[1]), {})[part] = n
    checkpoint: int | None = None
    parts: list[str] = []
    for version in sorted(by_version, reverse=True):
        found = by_version[version]
        total = next(iter(found))[1]
        if all((i, total) in found for i in range(1, total + 1)):  # every part written
            checkpoint, parts = version, [found[(i, total)] for i in range(1, total + 1)]
            break
    first = 0 if checkpoint is None else checkpoint + 1
    tail = [v for v in commits if v >= first]
    if checkpoint is None and not tail:
        raise _Unsupported("no commit and no checkpoint")
    if tail != list(range(first, first + len(tail))):
        raise _Unsupported(f"commits after version {first - 1} are not contiguous")
    return checkpoint, parts, tail


def _read_checkpoint(paths: list[str], files: dict[str, str | None]) -> None:
    import pyarrow.parquet as pq  # on use: importing this module stays light

    for path in paths:
        # pre_buffer off, one thread: a checkpoint is small, and both cost more than they
        # save on one (a ParquetFile's default read of it is 2-3x as long).
        parquet = pq.ParquetFile(path, pre_buffer=False)
        schema = parquet.schema_arrow
        add = schema.field("add").type if "add" in schema.names else None
        with_stats = add is not None and add.get_field_index("stats") >= 0
        wanted = ["protocol.minReaderVersion"] if "protocol" in schema.names else []
        wanted += ["add.path", "add.stats"] if with_stats else ["add.path"] if add else []
        if not wanted:
            continue
        read = parquet.read(columns=wanted, use_threads=False)  # one read of the columns
        if "protocol" in read.column_names:
            for version in _fields(read.column("protocol"))[0]:
                if version is not None and version != 1:
                    raise _Unsupported(f"minReaderVersion {version}")
        if add is None:
            continue
        adds = _fields(read.column("add"))
        stats = adds[1] if with_stats else [None] * len(adds[0])
        for p, s in zip(adds[0], stats, strict=True):
            if p is not None:  # (a row holding another action)
                files[p] = s


def _fields(column: Any) -> list[list[Any]]:
    """A struct column's fields as Python lists, null where the struct is (a checkpoint
    row holds one action: the other actions' structs are null)."""
    return [field.to_pylist() for field in column.combine_chunks().flatten()]


def _replay(path: str, files: dict[str, str | None]) -> None:
    with open(path, encoding="utf-8") as commit:
        for line in commit:
            if not line.strip():
                continue
            action = json.loads(line)
            if (add := action.get("add")) is not None:
                files[add["path"]] = add.get("stats")
            elif (remove := action.get("remove")) is not None:
                files.pop(remove["path"], None)
            elif (protocol := action.get("protocol")) is not None and (
                version := protocol.get("minReaderVersion")
            ) != 1:
                raise _Unsupported(f"minReaderVersion {version}")


__all__ = ["LiveFiles", "live_files"]
