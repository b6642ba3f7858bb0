"""Positions of the drop-in producer, marks and writer config (pure).

The event and transactional writers' positions and notes: ``test_sent_records``.
"""

from __future__ import annotations

import pytest

from tidemark.controller.model import WriterMark
from tidemark.controller.naming import ClusterSettings, bucket_of
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.exceptions import WriterConfigError
from tidemark.pipelines.writing.marks import mark_message, to_writer_mark
from tidemark.pipelines.writing.positions import DeliveryGroups, merge
from tidemark.schemas.records import WriterMarkRecord


def test_merge_takes_the_larger_offset() -> None:
    assert merge({1: 5, 2: 3}, {2: 7, 3: 1}) == {1: 5, 2: 7, 3: 1}


# --- marks and config ---------------------------------------------------------------------------


def test_mark_message_goes_to_the_streams_bucket() -> None:
    settings = ClusterSettings(marks_topic="m", bucket_count=5)
    msg = mark_message(settings, "s/x", "w1", WriterMark(10, {1: 2}, alive=False), "t1")
    assert (msg.topic, msg.partition, msg.key) == ("m", bucket_of("s/x", 5), b"s/x")
    rec = WriterMarkRecord.decode(msg.value)
    assert rec == WriterMarkRecord("s/x", "w1", 10, {1: 2}, False, "t1")
    assert to_writer_mark(rec) == WriterMark(10, {1: 2}, alive=False)


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"producer_overrides": {"enable.idempotence": False}}, "may not set"),
        ({"producer_overrides": {"transactional.id": "x"}}, "may not set"),
        ({"note_time_interval_ms": 0}, "note_time_interval_ms"),
        ({"delivery_timeout_ms": 1.5}, "delivery_timeout_ms"),
        ({"transaction_timeout_ms": 500}, "Kafka's minimum"),
        ({"linger_ms": -1}, "linger_ms"),
        ({"replay_window_ms": 0}, "replay_window_ms"),
    ],
)
def test_bad_writer_config(kwargs: dict, text: str) -> None:
    with pytest.raises(WriterConfigError, match=text):
        WriterConfig(**kwargs)


def test_producer_settings() -> None:
    cfg = WriterConfig(producer_overrides={"compression.type": "lz4"})
    s = cfg.producer_settings("b:1", "c", transactional_id="t")
    assert s["enable.idempotence"] is True
    assert s["transactional.id"] == "t"
    assert s["compression.type"] == "lz4"
    assert "transactional.id" not in cfg.producer_settings("b:1", "c")


# --- DeliveryGroups (the drop-in producer's positions) ------------------------------------


def _off(msg: str) -> int:
    return int(msg.split("@")[1])


def test_groups_wait_for_a_later_report_or_idle_and_exclude_later_records() -> None:
    g = DeliveryGroups([0, 1])
    for off in (10, 11):
        g.used[0] = True
        g.setters[0](None, f"m@{off}")
    g.used[1] = True  # sent, not reported yet
    note = g.note(100)
    g.used[0] = True
    g.setters[0](None, "m@12")  # after the note: completes partition 0's group
    assert g.ready(idle=False, offset=_off) == []  # partition 1 still in flight
    g.setters[0](None, "m@13")
    g.note(200)  # a second note queues behind the first
    assert g.ready(idle=False, offset=_off) == []
    assert g.position(_off) == {0: 14}
    # partition 1's record was stored at offset 3: reported into the closed group
    note.closed[1][None] = "m@3"
    ready = g.ready(idle=True, offset=_off)
    assert [(n.time, n.position) for n in ready] == [(100, {0: 12, 1: 4}), (200, {0: 14, 1: 4})]
    assert not g.waiting


def test_a_group_with_a_failed_record_fails_its_note_only() -> None:
    g = DeliveryGroups([0])
    g.used[0] = True
    g.setters[0](None, "m@5")
    g.setters[0](RuntimeError("timed out"), "m@-1")
    first = g.note(100)
    g.used[0] = True
    g.setters[0](None, "m@7")
    second = g.note(200)
    assert g.ready(idle=True, offset=_off) == [first, second]
    assert first.failed == ["m@-1"] and second.failed == []
    assert second.position == {0: 8}


def test_a_report_with_the_applications_callback_is_made_once_per_group() -> None:
    g = DeliveryGroups([0])
    heard: list[str] = []

    def app(err: object, msg: str) -> None:
        heard.append(msg)

    first = g.reporting_to(0, app)
    assert g.reports[0].get(app) is first  # the hot path finds it
    g.used[0] = True
    first(None, "m@4")
    note = g.note(100)
    assert g.reports[0] == {None: g.setters[0]}  # a new group: a new report
    second = g.reporting_to(0, app)
    g.used[0] = True
    second(None, "m@5")
    assert heard == ["m@4", "m@5"]
    assert g.ready(idle=False, offset=_off) == [note] and note.position == {0: 5}
    for _ in range(40):  # a new callback per record (lambdas): the kept ones stay few
        g.reporting_to(0, lambda err, msg: None)
    assert len(g.reports[0]) <= 16 and g.reports[0][None] == g.setters[0]
