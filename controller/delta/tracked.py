"""The ``table_completeness`` table: what each version of a tracked table is complete through.

    append_answers(lake, [row, ...])          # rows of tidemark.schemas.tables' layout
    rows = read_answers(lake, "/lake/orders_enriched")    # that table's rows, as dicts

Appended by the tracking only (one process per delta root), created on its first
answer; read by every lookup, which then never replays the tracked table's log. A
version has a row when it was first tracked and one more each time its time was raised.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tidemark.controller.completeness import Answer
from tidemark.controller.delta.exceptions import DeltaUnavailableError
from tidemark.controller.delta.location import Root, TableLocation
from tidemark.controller.delta.tables import append_rows
from tidemark.controller.delta.writer_log import local_path
from tidemark.schemas.tables import TABLE_COMPLETENESS


def completeness_table(lake: Root) -> TableLocation:
    """Where the ``table_completeness`` table of ``lake`` lives."""
    return TableLocation.of(lake).table(TABLE_COMPLETENESS)


def append_answers(lake: Root, rows: Sequence[dict[str, Any]]) -> None:
    """Append ``rows`` (dicts of the table's columns), creating the table when missing."""
    if not rows:
        return
    import pyarrow as pa  # on use: importing this module stays light

    from tidemark.schemas.arrow import ARROW_SCHEMAS  # pyarrow, as above

    schema = ARROW_SCHEMAS[TABLE_COMPLETENESS]
    append_rows(completeness_table(lake), pa.Table.from_pylist(list(rows), schema=schema))


def read_answers(lake: Root, table: str | None = None) -> list[dict[str, Any]]:
    """The rows of ``table`` (``None``: of every tracked table), in no particular order;
    empty when nothing was ever tracked under ``lake``.

    Read with delta-rs's own query engine, whose Arrow arrays need no pyarrow: a lookup
    from a fresh process costs little more than opening the table."""
    from deltalake import DeltaTable, QueryBuilder  # on use: importing this stays light
    from deltalake.exceptions import TableNotFoundError  # as above

    where = completeness_table(lake)
    try:
        dt = DeltaTable(where.uri, storage_options=where.delta_rs_options)
        sql = "SELECT * FROM answers"
        if table is not None:
            sql += ' WHERE "table" = \'' + table.replace("'", "''") + "'"
        found = QueryBuilder().register("answers", dt).execute(sql).read_all()
    except TableNotFoundError:
        return []
    except Exception as exc:
        raise DeltaUnavailableError(f"cannot read table {where.uri}: {exc}") from exc
    names = list(found.column_names)
    columns = [found.column(name).to_pylist() for name in names]
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def table_id(table: str) -> str:
    """The name a table is tracked by: its absolute local path."""
    return local_path(str(table), "table")


@dataclass(frozen=True)
class Writer:
    """Who writes a tracked table: its query's ``checkpoint``, the writer id of its
    ``txn`` actions (``app_id``) and the checkpoint's query id when tracking began."""

    checkpoint: str
    app_id: str
    query_id: str | None


def answer_row(table: str, found: Answer, writer: Writer, recorded_at: int) -> dict[str, Any]:
    """``found`` (a version of ``table``) as a row of the table."""
    consumed = {s: {str(p): o for p, o in sorted(c.items())} for s, c in found.consumed.items()}
    return {
        "table": table,
        "version": found.version,
        "complete_through": found.complete_through,
        "consumed": json.dumps(consumed, sort_keys=True),
        "batch": found.batch,
        "reason": found.reason,
        "checkpoint": writer.checkpoint,
        "app_id": writer.app_id,
        "query_id": writer.query_id,
        "recorded_at": recorded_at,
    }


def answer_of(row: dict[str, Any]) -> Answer:
    """A row back as the answer it records."""
    consumed = json.loads(row.get("consumed") or "{}")
    return Answer(
        int(row["version"]),
        row.get("complete_through"),
        {s: {int(p): int(o) for p, o in c.items()} for s, c in consumed.items()},
        row.get("batch"),
        row.get("reason"),
    )


def writer_of(row: dict[str, Any]) -> Writer:
    """Who the row says writes its table."""
    return Writer(str(row["checkpoint"]), str(row["app_id"]), row.get("query_id"))


def latest_rows(rows: Iterable[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per version, its latest row (the last recorded; the order read breaks a tie)."""
    out: dict[int, dict[str, Any]] = {}
    for row in rows:
        kept = out.get(row["version"])
        if kept is None or row["recorded_at"] >= kept["recorded_at"]:
            out[row["version"]] = row
    return out


__all__ = [
    "Writer",
    "answer_of",
    "answer_row",
    "append_answers",
    "completeness_table",
    "latest_rows",
    "read_answers",
    "table_id",
    "writer_of",
]
