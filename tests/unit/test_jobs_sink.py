"""tidemark.jobs.sink without Spark: idempotent, fenced appends to the controller's Delta tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError

from tidemark.controller.delta.appends import DeltaTables, ensure_tables, through_store_outage
from tidemark.controller.model import Watermark
from tidemark.jobs.processor import output_row
from tidemark.jobs.sink import DeltaSink, split_rows
from tidemark.jobs.workflow import Emitted, Rejected
from tidemark.schemas.arrow import ARROW_SCHEMAS
from tidemark.schemas.tables import INDEX, MARKS, REJECTED_MARKS, TABLES, table_path


def _tables(root: Path) -> str:
    for table in TABLES:
        DeltaTable.create(table_path(str(root), table), schema=ARROW_SCHEMAS[table])
    return str(root)


def watermark(stream: str, seq: int) -> dict[str, Any]:
    mark = Watermark(stream, 100 + seq, 110 + seq, {0: seq, 4294967296: 7}, seq)
    return output_row(Emitted(mark, ("w1",), 110 + seq, 5))


def rejected(offset: int) -> dict[str, Any]:
    return output_row(Rejected("s", "w", "malformed", b"\x00", 0, offset, 9))


def rows_of(root: str, table: str) -> list[dict[str, Any]]:
    return DeltaTable(table_path(root, table)).to_pyarrow_table().to_pylist()  # type: ignore[no-any-return]


def test_split_rows_sorts_marks_and_shapes_each_table() -> None:
    out = split_rows([watermark("b", 1), rejected(3), watermark("a", 2), watermark("b", 0)])
    assert [(r["stream"], r["seq"]) for r in out[MARKS]] == [("a", 2), ("b", 0), ("b", 1)]
    assert out[MARKS][0]["stream_cut"] == [
        {"segment": 0, "offset": 2},
        {"segment": 4294967296, "offset": 7},
    ]
    assert [r["upper_time_max"] for r in out[INDEX]] == [112, 110, 111]
    assert out[REJECTED_MARKS] == [
        {
            "stream": "s",
            "writer": "w",
            "reason": "malformed",
            "raw": b"\x00",
            "kafka_partition": 0,
            "kafka_offset": 3,
            "at": 9,
        }
    ]


def test_a_batch_written_again_is_skipped(tmp_path: Path) -> None:
    root = _tables(tmp_path)
    sink = DeltaSink(root, "app/bucket-0")
    sink.bind("q1")
    sink.write([watermark("a", 0), rejected(1)], 0)
    sink.write([watermark("a", 1)], 1)
    again = DeltaSink(root, "app/bucket-0")  # a restart: same query id, same batch
    again.bind("q1")
    again.write([watermark("a", 1)], 1)
    assert sorted(r["seq"] for r in rows_of(root, MARKS)) == [0, 1]
    assert sorted(r["seq"] for r in rows_of(root, INDEX)) == [0, 1]
    assert len(rows_of(root, REJECTED_MARKS)) == 1
    assert DeltaTables(root).committed_version(MARKS, "app/bucket-0/q1") == 1
    assert DeltaTables(root).committed_version(REJECTED_MARKS, "app/bucket-0/q1") == 0


def test_two_writers_of_one_batch_write_it_once(tmp_path: Path) -> None:
    """A fenced-out query re-running a batch: it skips what is committed, and a commit
    racing between its check and its own commit is refused by delta-rs."""
    root = _tables(tmp_path)
    rows = split_rows([watermark("a", 0)])[MARKS]
    stale = DeltaTable(table_path(root, MARKS))  # checked before the other commit landed
    assert DeltaTables(root).append(MARKS, rows, "app", 3)
    assert not DeltaTables(root).append(MARKS, rows, "app", 3)
    with pytest.raises(CommitFailedError, match=r"(?i)concurrent transaction"):
        write_deltalake(
            stale,
            pa.Table.from_pylist(rows, schema=ARROW_SCHEMAS[MARKS]),
            mode="append",
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id="app", version=3)]
            ),
        )
    assert [r["seq"] for r in rows_of(root, MARKS)] == [0]


def test_an_open_writer_whose_batch_another_committed_skips_it(tmp_path: Path) -> None:
    """The sink appends without reading the log first: when another instance
    committed the same batch meanwhile, delta-rs refuses the commit, the sink reads the
    log, sees its batch and skips it -- the batch is in the table once."""
    root = _tables(tmp_path)
    rows = split_rows([watermark("a", 0)])[MARKS]
    mine = DeltaTables(root)
    assert mine.append(MARKS, rows, "app", 1)
    assert DeltaTables(root).append(MARKS, rows, "app", 2)  # the other instance, batch 2
    assert not mine.append(MARKS, rows, "app", 2)  # its handle still at batch 1
    assert mine.append(MARKS, rows, "app", 3)
    assert len(rows_of(root, MARKS)) == 3
    assert DeltaTables(root).committed_version(MARKS, "app") == 3


def test_an_open_writer_appends_over_other_commits(tmp_path: Path) -> None:
    """Commits of other application ids (the maintainer's, another bucket's) land
    between two appends of an open writer: delta-rs puts its append after them."""
    root = _tables(tmp_path)
    rows = split_rows([watermark("a", 0)])[INDEX]
    mine = DeltaTables(root)
    assert mine.append(INDEX, rows, "app", 0)
    other = DeltaTables(root)
    for batch in range(3):
        assert other.append(INDEX, rows, "other", batch)
    assert mine.append(INDEX, rows, "app", 1)
    table = DeltaTable(table_path(root, INDEX))
    assert table.version() == 5
    assert (table.transaction_version("app"), table.transaction_version("other")) == (1, 2)
    assert len(rows_of(root, INDEX)) == 5


def test_laggard_snapshots_go_to_their_table_in_the_batch_once(tmp_path: Path) -> None:
    from tidemark.controller.laggards import LAGGING, Laggard
    from tidemark.jobs.processor import output_rows
    from tidemark.jobs.workflow import LaggardRows
    from tidemark.schemas.tables import LAGGARDS, laggard_rows

    lag = Laggard("a", "w2", LAGGING, 100, 150, 900, 40, 77, "inst-1", 20, 70)
    rows = [
        *output_rows(LaggardRows("a", tuple(laggard_rows("a", 77, [lag])))),
        *output_rows(LaggardRows("b", tuple(laggard_rows("b", 78, [])))),
        watermark("a", 0),
    ]
    assert split_rows(rows)[LAGGARDS] == [
        {
            "stream": "a",
            "at": 77,
            "writer": "w2",
            "kind": "lagging",
            "noted_time": 100,
            "watermark_time": 150,
            "behind_ms": 900,
            "since": 40,
            "instance": "inst-1",
            "first_seen": 20,
            "last_seen": 70,
        },
        {
            "stream": "b",
            "at": 78,
            "writer": None,
            "kind": "clear",
            "noted_time": None,
            "watermark_time": None,
            "behind_ms": None,
            "since": None,
            "instance": None,
            "first_seen": None,
            "last_seen": None,
        },
    ]
    root = _tables(tmp_path)
    sink = DeltaSink(root, "app")
    sink.bind("q1")
    sink.write(rows, 4)
    sink.write(rows, 4)  # the batch re-run
    assert sorted(r["stream"] for r in rows_of(root, LAGGARDS)) == ["a", "b"]
    assert DeltaTables(root).committed_version(LAGGARDS, "app/q1") == 4


def test_a_laggards_table_from_before_the_writer_columns_gets_them_and_keeps_its_rows(
    tmp_path: Path,
) -> None:
    """A table written before ``instance``, ``first_seen`` and ``last_seen`` joined the
    layout: the controller's start adds them (one commit, nullable); its rows read as
    null there, and the sink appends the new rows after it."""
    from tidemark.controller.delta.appends import evolve_tables, missing_columns
    from tidemark.controller.laggards import LAGGING, Laggard
    from tidemark.jobs.processor import output_rows
    from tidemark.jobs.workflow import LaggardRows
    from tidemark.schemas.tables import LAGGARDS, laggard_rows

    root = str(tmp_path)  # the other tables do not exist: nothing to evolve there
    new = ("instance", "first_seen", "last_seen")
    path = table_path(root, LAGGARDS)
    old_schema = pa.schema([f for f in ARROW_SCHEMAS[LAGGARDS] if f.name not in new])
    DeltaTable.create(path, schema=old_schema)
    old_row = {"stream": "a", "at": 5, "writer": "w1", "kind": LAGGING, "noted_time": 3}
    write_deltalake(path, pa.Table.from_pylist([old_row], schema=old_schema), mode="append")
    assert missing_columns(root, LAGGARDS, {}) == list(new)

    assert evolve_tables(root) == {LAGGARDS: list(new)}
    assert evolve_tables(root) == {}  # once only
    assert [f.name for f in DeltaTable(path).schema().fields] == ARROW_SCHEMAS[LAGGARDS].names
    lag = Laggard("a", "w2", LAGGING, 100, 150, 900, 40, 77, "inst-1", 20, 70)
    sink = DeltaSink(root, "app")
    sink.bind("q1")
    sink.write(output_rows(LaggardRows("a", tuple(laggard_rows("a", 77, [lag])))), 0)
    found = {r["writer"]: r for r in rows_of(root, LAGGARDS)}
    assert (found["w1"]["noted_time"], found["w1"]["instance"], found["w1"]["first_seen"]) == (
        3,
        None,
        None,
    )
    assert (found["w2"]["instance"], found["w2"]["first_seen"], found["w2"]["last_seen"]) == (
        "inst-1",
        20,
        70,
    )


def test_the_operator_output_keeps_every_kind_of_row_through_arrow() -> None:
    """A call's outputs as the Python worker sends them (its own serializer, the output
    schema's Arrow type) arrive as the rows the sink reads: typed, bytes untouched."""
    from pyspark.sql.pandas.serializers import TransformWithStateInPandasSerializer
    from pyspark.sql.pandas.types import to_arrow_schema, to_arrow_type

    from tidemark.controller.laggards import LAGGING, Laggard
    from tidemark.jobs.processor import OUTPUT_SCHEMA, SlotDue, output_frames, output_rows
    from tidemark.jobs.workflow import LaggardRows, Observation
    from tidemark.schemas.tables import laggard_rows

    lag = Laggard("a", "w2", LAGGING, 100, 150, 900, 40, 77)
    seen = Observation(("o",), 900, 2)
    outputs = [
        Emitted(Watermark("a", 103, 113, {0: 3, 4294967296: 7}, 3), ("w1",), 113, 5, 4),
        Emitted(Watermark("b", 5, 7, {}, 0), ("o", "w"), 7, 100, None, seen),
        Rejected("a", "w1", "bad_value", b"\x00\xff", 2, 41, 99),
        LaggardRows("a", tuple(laggard_rows("a", 77, [lag]))),
        SlotDue(5, None),
        SlotDue(6, 1234),
    ]
    rows = [row for o in outputs for row in output_rows(o)]
    serializer = TransformWithStateInPandasSerializer(
        "UTC", False, True, 10_000, 2**31 - 1, int_to_decimal_coercion_enabled=False
    )
    [frame] = output_frames(outputs)
    batch = serializer._create_batch((frame, to_arrow_type(OUTPUT_SCHEMA)))
    arrived = batch.column(0).to_pylist()
    assert arrived == rows
    # The driver's collect (``DataFrame.toArrow``) casts what the JVM sends to the output
    # schema; the JVM gives a null struct's fields nulls.
    schema = to_arrow_schema(OUTPUT_SCHEMA)
    columns = {"kind": pa.array([r["kind"] for r in rows])}
    for struct in list(schema)[1:]:
        fields = list(struct.type)
        present = [r[struct.name] is not None for r in rows]
        cells = [
            pa.array([r[struct.name][f.name] if r[struct.name] else None for r in rows], f.type)
            for f in fields
        ]
        mask = pa.array([not p for p in present])
        columns[struct.name] = pa.StructArray.from_arrays(cells, fields=fields, mask=mask)
    assert pa.table(columns).cast(schema).to_pylist() == rows
    assert arrived[2]["rejected"]["raw"] == b"\x00\xff"
    assert arrived[0]["watermark"]["stream_cut"] == [
        {"segment": 0, "offset": 3},
        {"segment": 4294967296, "offset": 7},
    ]


# --- a store that does not answer --------------------------------------------------------------


def test_a_call_is_tried_again_through_a_store_outage_then_answers():
    answers = iter([OSError("connection refused"), OSError("connection refused"), "done"])
    calls = []

    def call():
        calls.append(1)
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert through_store_outage(call, "test", outage_s=5.0, first_delay_s=0.01) == "done"
    assert len(calls) == 3


def test_an_outage_longer_than_its_budget_and_other_errors_propagate():
    calls = []

    def refused():
        calls.append(1)
        raise OSError("connection refused")

    with pytest.raises(OSError, match="connection refused"):
        through_store_outage(refused, "test", outage_s=0.05, first_delay_s=0.01)
    assert 1 < len(calls) < 10

    def wrong():
        calls.append(1)
        raise ValueError("not a store error")

    calls.clear()
    with pytest.raises(ValueError, match="not a store error"):
        through_store_outage(wrong, "test", outage_s=5.0, first_delay_s=0.01)
    assert calls == [1]


def test_a_local_root_that_cannot_hold_tables_fails_without_waiting(tmp_path: Path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(Exception):  # noqa: B017 (delta-rs' own error for the path)
        ensure_tables(str(blocker / "tidemark"))
    assert not [r for r in caplog.records if "did not answer" in r.getMessage()]
