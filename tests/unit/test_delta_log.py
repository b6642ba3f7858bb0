"""The Delta log read directly (tidemark.controller.delta.log): the same live files and
statistics as delta-rs's snapshot, through appends, compaction with removes,
checkpoints and a trimmed log; anything else is left to delta-rs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from tidemark.controller.delta.log import _plan, live_files
from tidemark.controller.delta.tables import DataFile, DeltaSource, append_watermarks
from tidemark.controller.model import Watermark

STREAMS = ("s/a", "s/b")


def _files(files: list[DataFile]) -> set[tuple[str, str, str]]:
    """Each file's uri and bounds; a column with no value in a file (all null) has no
    bound: delta-rs says ``None``, the direct read leaves it out."""

    def bounds(values: dict[str, object]) -> str:
        return repr(sorted((k, v) for k, v in values.items() if v is not None))

    return {(f.uri, bounds(f.minimum), bounds(f.maximum)) for f in files}


def _as_delta_rs_sees_it(table: str) -> set[tuple[str, str, str]]:
    source = DeltaSource(table)
    source.refresh()
    return _files(source.files())


def _read_directly(table: str) -> set[tuple[str, str, str]]:
    """The live files through the direct read; the table is not opened for them."""
    assert live_files(table) is not None
    source = DeltaSource(table)
    found = source.latest_files()
    assert source.version is None  # (delta-rs never opened it)
    return _files(found)


def _append(root: str, stream: str, first_seq: int, count: int) -> None:
    marks = [
        Watermark(stream, 100 * s, 100 * s + 5, {0: s, 1: 2 * s}, s)
        for s in range(first_seq, first_seq + count)
    ]
    previous = None if first_seq == 0 else 100 * (first_seq - 1) + 5
    append_watermarks(root, marks, previous_upper_time_max=previous)


def test_appends_compaction_checkpoint_and_later_commits_match_delta_rs(tmp_path: Path) -> None:
    from tidemark.controller.delta.maintenance import Maintainer, MaintenanceSettings

    root = str(tmp_path)
    index, marks = f"{root}/index", f"{root}/marks"
    for k in range(6):
        for stream in STREAMS:
            _append(root, stream, 3 * k, 3)
    for table in (index, marks):  # JSON commits only, no checkpoint
        assert _read_directly(table) == _as_delta_rs_sees_it(table)
        assert len(_as_delta_rs_sees_it(table)) == 12
    # compaction (one commit adding a file and removing twelve), then a checkpoint
    Maintainer(MaintenanceSettings(root, compact_min_files=2)).run_once(force=True)
    assert any(n.endswith(".checkpoint.parquet") for n in os.listdir(f"{index}/_delta_log"))
    for stream in STREAMS:  # commits after the checkpoint
        _append(root, stream, 18, 2)
    for table in (index, marks):
        assert _read_directly(table) == _as_delta_rs_sees_it(table)
        assert len(_as_delta_rs_sees_it(table)) < 12
    # a second checkpoint and the log before it deleted (what trimming the log leaves)
    dt = DeltaTable(index)
    dt.create_checkpoint()
    checkpointed = dt.version()
    for name in os.listdir(f"{index}/_delta_log"):
        if name[:20].isdigit() and int(name[:20]) < checkpointed:
            os.remove(f"{index}/_delta_log/{name}")
    _append(root, "s/a", 20, 1)
    assert _read_directly(index) == _as_delta_rs_sees_it(index)


def test_a_file_removed_after_the_checkpoint_is_gone(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    for i in range(3):
        write_deltalake(table, pa.table({"x": [i, i + 10]}), mode="append")
    DeltaTable(table).create_checkpoint()
    DeltaTable(table).delete("x = 1")  # rewrites the file holding 1: a remove and an add
    write_deltalake(table, pa.table({"x": [7]}), mode="append")
    assert _read_directly(table) == _as_delta_rs_sees_it(table)
    assert len(_read_directly(table)) == 4


def test_what_it_does_not_reconstruct_is_left_to_delta_rs(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    assert live_files(table) is None  # no table
    for i in range(3):
        write_deltalake(table, pa.table({"x": [i]}), mode="append")
    assert live_files(table) is not None
    # a protocol a plain reader may not read (column mapping, deletion vectors: >= 2)
    newer = {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": []}}
    with open(f"{table}/_delta_log/{3:020d}.json", "w") as commit:
        commit.write(json.dumps(newer) + "\n")
    assert live_files(table) is None
    os.remove(f"{table}/_delta_log/{3:020d}.json")
    os.remove(f"{table}/_delta_log/{1:020d}.json")  # a gap in the commits
    assert live_files(table) is None


def test_the_latest_complete_checkpoint_and_the_commits_after_it_are_read() -> None:
    def commit(v: int) -> str:
        return f"{v:020d}.json"

    def part(v: int, i: int, n: int) -> str:
        return f"{v:020d}.checkpoint.{i:010d}.{n:010d}.parquet"

    names = [commit(v) for v in range(0, 25)] + [f"{10:020d}.checkpoint.parquet"]
    assert _plan(names) == (10, [f"{10:020d}.checkpoint.parquet"], list(range(11, 25)))
    # a multi-part checkpoint, complete: its parts in order
    done = [*names, part(20, 2, 2), part(20, 1, 2)]
    assert _plan(done) == (20, [part(20, 1, 2), part(20, 2, 2)], [21, 22, 23, 24])
    # one part missing (still being written): the one before it
    assert _plan([*names, part(20, 1, 2)])[0] == 10
    # no checkpoint: every commit from 0; other files of the log are not commits
    assert _plan([commit(0), commit(1), "_last_checkpoint", f"{0:020d}.crc"]) == (None, [], [0, 1])


def test_relative_paths_are_percent_decoded_and_absolute_ones_kept(tmp_path: Path) -> None:
    """A path in the log is a URI: relative ones percent-encoded under the table, an
    absolute one (a file elsewhere, as a shallow clone has) taken as it is."""
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"x": [1]}))
    (first,) = [n for n in os.listdir(table) if n.endswith(".parquet")]
    elsewhere = tmp_path / "other dir"
    elsewhere.mkdir()
    os.rename(table / first, elsewhere / first)
    (table / "a b").mkdir()
    write_deltalake(str(tmp_path / "u"), pa.table({"x": [2]}))
    (second,) = [n for n in os.listdir(tmp_path / "u") if n.endswith(".parquet")]
    os.rename(tmp_path / "u" / second, table / "a b" / second)
    log = table / "_delta_log"
    actions = [
        {"remove": {"path": first, "dataChange": True, "deletionTimestamp": 1}},
        {
            "add": {
                "path": (elsewhere / first).as_uri(),
                "size": 1,
                "partitionValues": {},
                "modificationTime": 1,
                "dataChange": True,
                "stats": None,
            }
        },
        {
            "add": {
                "path": f"a%20b/{second}",
                "size": 1,
                "partitionValues": {},
                "modificationTime": 1,
                "dataChange": True,
                "stats": None,
            }
        },
    ]
    (log / f"{1:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    uris = {f.uri for f in DeltaSource(str(table)).latest_files()}
    assert uris == {str(elsewhere / first), str(table / "a b" / second)}
    assert all(os.path.exists(u) for u in uris)
