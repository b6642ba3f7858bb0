"""The rules that turn one-stream time answers into joint ones
(tidemark.pipelines.reading.streams)."""

from __future__ import annotations

import pytest

from tidemark.controller.model import Watermark
from tidemark.pipelines.reading.exceptions import (
    ReaderConfigError,
    StreamsTimeTimeoutError,
    StreamTimeTimeoutError,
)
from tidemark.pipelines.reading.streams import (
    all_complete,
    check_streams,
    each_stream,
    wait_for_all,
)

pytestmark = pytest.mark.unit


def mark(stream: str, t: int) -> Watermark:
    return Watermark(stream, t, t, {0: 1}, 0)


@pytest.mark.parametrize(
    ("streams", "problem"),
    [
        ("a/s", "list of stream names"),
        ([], "at least one"),
        (["a/s", ""], "non-empty strings"),
        (["a/s", 3], "non-empty strings"),
        (["a/s", "b/s", "a/s"], "repeated"),
        (None, "list of stream names"),
    ],
)
def test_bad_stream_lists_are_refused_naming_the_problem(streams, problem):
    with pytest.raises(ReaderConfigError, match=problem):
        check_streams(streams)


def test_each_stream_keeps_the_order_and_complete_needs_every_stream():
    assert list(each_stream(["b", "a"], str.upper)) == ["b", "a"]
    cuts = {"a": {0: 5}, "b": {0: 7}}
    assert all_complete(["a", "b"], cuts.get) == cuts
    asked = []

    def partial(s):
        asked.append(s)
        return None if s == "b" else {0: 1}

    assert all_complete(["a", "b", "c"], partial) is None
    assert asked == ["a", "b"]  # stops at the first stream not complete


def test_a_joint_wait_names_every_stream_behind_and_its_writers():
    times = {"a": 100, "b": 40, "c": 10}
    waits = []

    def wait_one(stream, left_ms):
        waits.append((stream, left_ms))
        if times[stream] >= 50:
            return mark(stream, times[stream])
        raise StreamTimeTimeoutError(stream, 50, mark(stream, times[stream]), [f"w-{stream}"])

    assert wait_for_all(["a"], 50, 1_000, wait_one) == {"a": mark("a", 100)}
    waits.clear()
    with pytest.raises(StreamsTimeTimeoutError) as err:
        wait_for_all(["a", "b", "c"], 50, 1_000, wait_one)
    assert err.value.streams == ["b", "c"] and err.value.stream == "b"
    assert err.value.holding == ["b: w-b", "c: w-c"]
    assert err.value.behind["c"].time == 10
    assert isinstance(err.value, StreamTimeTimeoutError)
    assert "'b' (at 40, held back by: w-b)" in str(err.value)
    assert waits[2] == ("c", 0)  # after one timed out, the rest are looked at once


@pytest.mark.parametrize(
    ("windows", "expected"),
    [
        ([(100, 300), (50, 400)], (50, 400)),
        ([(100, 300), (None, 400)], (None, 400)),
        ([(100, None), (50, 400)], (50, None)),
        ([], (None, None)),
    ],
)
def test_the_joint_window_is_never_above_any_streams_lower_bound(windows, expected):
    from tidemark.controller.model import TimeWindow
    from tidemark.pipelines.reading.streams import joint_window

    assert joint_window(TimeWindow(lo, up) for lo, up in windows) == TimeWindow(*expected)


def test_a_group_record_over_several_streams_round_trips():
    from tidemark.pipelines.reading.registry import GroupRecord

    record = GroupRecord("g", "s/a, s/b", {}, 5, ("s/a", "s/b"))
    assert GroupRecord.from_json(record.to_json()) == record
    one = GroupRecord("g", "s/a", {0: 3}, 5)
    assert b"streams" not in one.to_json()  # one stream: the record as before
    assert GroupRecord.from_json(one.to_json()) == one
