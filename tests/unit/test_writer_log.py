"""tidemark.controller.delta.writer_log: a query's checkpoint and a table's commits, as files."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.controller.delta.exceptions import DeltaUnavailableError
from tidemark.controller.delta.writer_log import (
    StreamingCheckpoint,
    consumed_metadata,
    latest_version,
    next_commit,
    recorded_batch,
    table_commits,
)

pytestmark = pytest.mark.unit

META = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}})


def _checkpoint(tmp_path, batches):
    chk = tmp_path / "chk"
    (chk / "offsets").mkdir(parents=True)
    (chk / "metadata").write_text(json.dumps({"id": "q-1"}))
    for batch, lines in batches.items():
        (chk / "offsets" / str(batch)).write_text("\n".join(["v1", META, *lines]))
    return StreamingCheckpoint(str(chk))


def test_a_batchs_offsets_over_every_kafka_source_and_nothing_of_other_sources(tmp_path) -> None:
    chk = _checkpoint(
        tmp_path,
        {
            0: ['{"tidemark.a.b":{"0":5,"1":-2}}', "-"],  # a source with no offsets yet
            1: [
                '{"tidemark.a.b":{"0":9,"1":3}}',
                '{"tidemark.c.d":{"0":4}}',
                '{"sourceVersion":1,"reservoirId":"x","index":3}',  # not a Kafka source
                "not json",
            ],
        },
    )
    assert chk.query_id() == "q-1"
    assert chk.batches() == [0, 1]
    assert chk.consumed(0) == {"tidemark.a.b": {0: 5, 1: 0}}  # Spark's -2: nothing consumed
    assert chk.consumed(1) == {"tidemark.a.b": {0: 9, 1: 3}, "tidemark.c.d": {0: 4}}
    assert chk.consumed(2) is None  # purged, or never written: unknown, not guessed
    assert chk.topics() == {"tidemark.a.b", "tidemark.c.d"}


def test_a_checkpoint_that_is_gone_has_no_query_id(tmp_path) -> None:
    gone = StreamingCheckpoint(str(tmp_path / "nothing"))
    assert (gone.exists(), gone.query_id(), gone.batches(), gone.topics()) == (
        False,
        None,
        [],
        set(),
    )


def test_commits_name_their_writers_batches_and_whether_data_changed(tmp_path) -> None:
    log = tmp_path / "t" / "_delta_log"
    log.mkdir(parents=True)
    commits = [
        [
            {"commitInfo": {"operation": "STREAMING UPDATE"}},
            {"txn": {"appId": "q-1", "version": 0}},
            {"add": {"path": "a.parquet", "dataChange": True}},
        ],
        [
            {"commitInfo": {"operation": "OPTIMIZE"}},
            {"add": {"path": "b.parquet", "dataChange": False}},
            {"remove": {"path": "a.parquet", "dataChange": False}},
        ],
    ]
    for version, actions in enumerate(commits):
        (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions))
    (log / f"{3:020d}.json").write_text("{broken")
    table = str(tmp_path / "t")
    assert latest_version(table) == 3
    found = table_commits(table, None)
    assert [(c.version, c.operation, dict(c.txns), c.data_change, c.readable) for c in found] == [
        (0, "STREAMING UPDATE", {"q-1": 0}, True, True),
        (1, "OPTIMIZE", {}, False, True),
        (2, None, {}, False, False),  # cleaned up: nothing known of it
        (3, None, {}, False, False),  # unreadable: the same
    ]
    assert next_commit(table, 2) and not next_commit(table, 3)
    assert latest_version(str(tmp_path / "none")) is None


def test_an_object_store_is_refused_with_what_to_do() -> None:
    with pytest.raises(DeltaUnavailableError, match="local or mounted file system"):
        StreamingCheckpoint("s3://bucket/chk")


@given(
    writer=st.text(max_size=20),
    batch=st.integers(0, 2**40),
    consumed=st.dictionaries(
        st.text(min_size=1, max_size=10),
        st.dictionaries(st.integers(0, 64), st.integers(0, 2**40), max_size=4),
        max_size=3,
    ),
)
def test_a_recorded_batch_reads_back_as_written(writer, batch, consumed) -> None:
    assert recorded_batch(consumed_metadata(writer, batch, consumed)) == (writer, batch, consumed)


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "a note of the user's own",
        "tidemark",  # names the key, is no record
        '{"tidemark": 5}',
        '{"tidemark": {"writer": "q", "batch": -1, "consumed": {}}}',
        '{"tidemark": {"writer": "q", "batch": "7", "consumed": {}}}',
        '{"tidemark": {"writer": 3, "batch": 7, "consumed": {}}}',
        '{"tidemark": {"writer": "q", "batch": 7, "consumed": {"t": {"x": 1}}}}',
        '{"tidemark": {"writer": "q", "batch": 7, "consumed": {"t": 5}}}',
        '{"tidemark": {"writer": "q", "batch": 7}}',
    ],
)
def test_user_metadata_that_records_no_whole_batch_is_none(text) -> None:
    assert recorded_batch(text) is None


def test_a_commit_that_records_its_batch_names_it_and_what_it_consumed(tmp_path) -> None:
    log = tmp_path / "t" / "_delta_log"
    log.mkdir(parents=True)
    recorded = consumed_metadata("q-1", 4, {"tidemark.a.b": {0: 9, 1: 3}})
    actions = [
        {"commitInfo": {"operation": "WRITE", "userMetadata": recorded}},
        {"add": {"path": "a.parquet", "dataChange": True}},
    ]
    (log / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in actions))
    (found,) = table_commits(str(tmp_path / "t"), None)
    assert (dict(found.txns), found.data_change) == ({"q-1": 4}, True)
    assert found.recorded == {"q-1": {"tidemark.a.b": {0: 9, 1: 3}}}
