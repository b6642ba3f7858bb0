"""Hostile marks without Spark: undecodable keys and values, and bounded times."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_jobs_workflow import Committed, Registered, Streams
from tidemark.controller.admission import (
    DEFAULT_MAX_FUTURE_MS,
    FUTURE_TIME,
    IMPERSONATED,
    NEGATIVE_TIME,
    UNREGISTERED,
    Registration,
    check_time,
)
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.exceptions import InvalidConfigurationError
from tidemark.controller.metadata import new_stream_metadata
from tidemark.jobs.config import WorkflowSettings
from tidemark.jobs.processor import output_row
from tidemark.jobs.workflow import (
    Emitted,
    MarkInput,
    Rejected,
    StreamState,
    StreamWorkflow,
    retired_writer,
)
from tidemark.schemas.codec import MAGIC
from tidemark.schemas.mark_input import Undecodable, decode_mark, decode_stream_key, printable_key
from tidemark.schemas.records import WriterMarkRecord
from tidemark.schemas.tables import Reason

S = "shop/orders"
HOUR = 3_600_000


@pytest.mark.parametrize(
    ("time_ms", "arrival_ms", "max_future_ms", "expected"),
    [
        pytest.param(0, 0, HOUR, None, id="zero"),
        pytest.param(-1, 0, HOUR, NEGATIVE_TIME, id="negative"),
        pytest.param(-(2**63), None, None, NEGATIVE_TIME, id="negative-without-bound"),
        pytest.param(1_000 + HOUR, 1_000, HOUR, None, id="exactly-at-the-bound"),
        pytest.param(1_001 + HOUR, 1_000, HOUR, FUTURE_TIME, id="one-past-the-bound"),
        pytest.param(2**62, 1_000, HOUR, FUTURE_TIME, id="a-century-ahead"),
        pytest.param(2**62, None, HOUR, None, id="no-arrival-time"),
        pytest.param(2**62, 1_000, None, None, id="bound-off"),
        pytest.param(5, 10**13, 0, None, id="the-past-is-fine"),
    ],
)
def test_check_time(
    time_ms: int, arrival_ms: int | None, max_future_ms: int | None, expected: str | None
) -> None:
    assert check_time(time_ms, arrival_ms, max_future_ms) == expected


@given(st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**45), st.integers(0, 2**40))
def test_check_time_accepts_exactly_the_bounded_window(t: int, arrival: int, bound: int) -> None:
    ok = check_time(t, arrival, bound) is None
    assert ok == (0 <= t <= arrival + bound)


def test_reasons_of_the_pure_core_are_reasons_of_the_table() -> None:
    assert {NEGATIVE_TIME, FUTURE_TIME} <= set(Reason.ALL)


def test_max_future_ms_is_a_stream_setting_with_a_default() -> None:
    assert StreamConfiguration().max_future_ms == DEFAULT_MAX_FUTURE_MS == HOUR
    old = StreamConfiguration().to_dict()
    del old["max_future_ms"]  # metadata written before the setting existed
    assert StreamConfiguration.from_dict(old).max_future_ms == HOUR
    off = StreamConfiguration(max_future_ms=None)
    assert StreamConfiguration.from_dict(off.to_dict()) == off
    for bad in (-1, 2**63, "5", 1.5):
        with pytest.raises(InvalidConfigurationError, match="max_future_ms"):
            StreamConfiguration(max_future_ms=bad)  # type: ignore[arg-type]


def test_keys() -> None:
    assert decode_stream_key(None) == ""
    assert decode_stream_key(b"a/b") == "a/b"
    bad = decode_stream_key(b"\xff\xfea/b")
    assert isinstance(bad, Undecodable) and bad.reason == Reason.MALFORMED_KEY
    assert printable_key(b"\xff\xfea/b") == "\\xff\\xfea/b"


@given(st.binary(max_size=64))
def test_every_key_decodes_or_is_undecodable(key: bytes) -> None:
    got = decode_stream_key(key)
    shown = printable_key(key)
    shown.encode("utf-8")  # strict: a Delta string column takes it
    if isinstance(got, str):
        assert got == shown and got.encode("utf-8") == key
    else:
        assert got.reason == Reason.MALFORMED_KEY and "\\x" in shown


GOOD = WriterMarkRecord(S, "w", 5, {0: 3})
UNKNOWN_FINGERPRINT = MAGIC + b"\x01" * 8 + b"body"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        pytest.param(None, Reason.MALFORMED, id="no-value"),
        pytest.param(b"", Reason.MALFORMED, id="empty"),
        pytest.param(b"\x00\x01", Reason.MALFORMED, id="short"),
        pytest.param(UNKNOWN_FINGERPRINT, Reason.UNKNOWN_SCHEMA, id="unknown-schema"),
        pytest.param(GOOD.encode()[:-1], Reason.MALFORMED, id="truncated"),
        pytest.param(GOOD.encode() + b"\x00", Reason.MALFORMED, id="trailing"),
        pytest.param(WriterMarkRecord(S, "", 5, {}).encode(), Reason.MALFORMED, id="empty-writer"),
        pytest.param(
            WriterMarkRecord(S, "w", 5, {0: -1}).encode(), Reason.MALFORMED, id="negative-offset"
        ),
        pytest.param(
            WriterMarkRecord(S, "w", 5, {-4: 1}).encode(), Reason.MALFORMED, id="negative-segment"
        ),
    ],
)
def test_undecodable_values(value: bytes | None, reason: str) -> None:
    got = decode_mark(value)
    assert isinstance(got, Undecodable) and got.reason == reason, got


def test_a_string_field_that_is_not_utf8_is_malformed() -> None:
    data = bytearray(WriterMarkRecord(S, "wq", 5, {}).encode())
    at = data.index(b"wq")
    data[at] = 0xFF
    got = decode_mark(bytes(data))
    assert isinstance(got, Undecodable) and got.reason == Reason.MALFORMED


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_are_undecodable(value: bytes) -> None:
    assert isinstance(decode_mark(value), WriterMarkRecord | Undecodable)
    framed = GOOD.encode()[:10] + value  # a known header with a random body
    assert isinstance(decode_mark(framed), WriterMarkRecord | Undecodable)


def workflow(max_future_ms: int | None = HOUR, *tokens: str) -> StreamWorkflow:
    """A workflow where writer ``a`` registered ``tokens`` in turn (the first before any
    mark, each next one after the marks of :func:`as_instance`), other ids their own name."""
    config = StreamConfiguration(ScalingPolicy.fixed(2), max_future_ms=max_future_ms)
    history = [Registration(t, 0 if i == 0 else 20_000 + i) for i, t in enumerate(tokens)]
    return StreamWorkflow(
        WorkflowSettings(),
        Streams(new_stream_metadata(S, config, 0)),
        Committed(),
        Registered({"a": history} if tokens else None),
    )


def mark(writer: str, t: int, offset: int, arrival: int | None = 10_000) -> MarkInput:
    record = WriterMarkRecord(S, writer, t, {0: offset}, instance=writer)
    return MarkInput(record.encode(), 0, offset, arrival)


def test_a_forged_future_mark_is_rejected_and_the_real_writer_goes_on() -> None:
    w, state = workflow(), StreamState()
    out = w.on_records(S, state, [mark("a", 10_000 + 10 * 365 * 86_400_000, 1)], 10_000)
    assert [(o.reason, o.writer) for o in out if isinstance(o, Rejected)] == [(FUTURE_TIME, "a")]
    assert state.marks == {}
    out = w.on_records(S, state, [mark("a", 9_000, 2), mark("a", 9_500, 3)], 10_000)
    assert not [o for o in out if isinstance(o, Rejected)]
    assert state.marks["a"].mark.time == 9_500


def test_negative_time_is_rejected_and_the_bound_can_be_switched_off() -> None:
    w, state = workflow(max_future_ms=None), StreamState()
    out = w.on_records(S, state, [mark("a", -5, 1), mark("b", 2**62, 2)], 10_000)
    assert [(o.reason, o.writer) for o in out if isinstance(o, Rejected)] == [(NEGATIVE_TIME, "a")]
    assert set(state.marks) == {"b"}


def as_instance(writer: str, t: int, offset: int, instance: str | None, alive: bool = True):
    record = WriterMarkRecord(S, writer, t, {0: offset}, alive, instance=instance)
    return MarkInput(record.encode(), 0, offset, 10_000)


def test_a_mark_from_another_instance_under_a_bound_writer_id_is_impersonated() -> None:
    w, state = workflow(HOUR, "real"), StreamState()
    out = w.on_records(
        S,
        state,
        [
            as_instance("a", 100, 1, "real"),
            as_instance("a", 9_000, 2, "forger"),  # ahead, but not the bound instance
            as_instance("a", 9_000, 3, None),  # a v1 mark cannot claim a bound id either
            as_instance("a", 200, 4, "real"),
        ],
        10_000,
    )
    assert [(o.reason, o.offset) for o in out if isinstance(o, Rejected)] == [
        (IMPERSONATED, 2),
        (UNREGISTERED, 3),
    ]
    assert state.marks["a"].mark.time == 200 and state.marks["a"].seen.instance == "real"
    # the state keeps the binding across batches (and JSON), and old states still load
    again = StreamState.from_json(S, state.to_json())
    assert again.marks["a"].seen.instance == "real"
    raw = state.to_raw()
    raw["marks"]["a"] = raw["marks"]["a"][:5]  # a state written before instance tokens
    assert StreamState.from_raw(S, raw).marks["a"].seen.instance is None


def test_once_the_bound_instance_shut_down_a_new_one_takes_the_writer_id() -> None:
    w, state = workflow(HOUR, "old", "new"), StreamState()
    w.on_records(S, state, [as_instance("a", 100, 1, "old")], 10_000)
    w.on_records(S, state, [as_instance("a", 100, 1, "old", alive=False)], 11_000)
    w.cycle(S, state, 12_000)  # the cycle drops the shut-down writer
    assert "a" not in state.marks
    out = w.on_records(S, state, [as_instance("a", 300, 2, "new")], 13_000)
    assert not [o for o in out if isinstance(o, Rejected)]
    assert state.marks["a"].seen.instance == "new"


def restarts(rounds: int = 3) -> list[MarkInput]:
    """Writer ``a`` on segment 0, closed and started again ``rounds`` times under its id
    (a new instance token each time), beside writer ``z`` on segment 1, in marks-topic order."""
    out: list[MarkInput] = []
    offset = 0

    def add(writer: str, t: int, pos: dict[int, int], instance: str, alive: bool = True) -> None:
        nonlocal offset
        record = WriterMarkRecord(S, writer, t, pos, alive, instance=instance)
        out.append(MarkInput(record.encode(), 0, offset, 10_000))
        offset += 1

    for n in range(rounds + 1):
        base = 1_000 * (n + 1)
        add("a", base, {0: 10 * n + 5}, f"gen{n}")
        add("z", base + 100, {1: n + 1}, "z")
        add("a", base + 500, {0: 10 * n + 9}, f"gen{n}", alive=n == rounds)
        add("z", base + 600, {1: n + 2}, "z")
    return out


def run_restarts(batches: list[list[MarkInput]], replay: bool = False):
    w, state = workflow(HOUR, *(f"gen{n}" for n in range(4))), StreamState()
    outputs = []
    for i, batch in enumerate(batches):
        if replay:  # the batch is run, lost, and run again on the state of the last commit
            w.on_records(S, StreamState.from_json(S, state.to_json()), batch, 10_000 + i)
            state = StreamState.from_json(S, state.to_json())
        outputs += w.on_records(S, state, batch, 10_000 + i)
    for _ in range(5):  # the controller's next cycles, with no new marks
        outputs += w.cycle(S, state, 20_000)
    return state, outputs


@pytest.mark.parametrize(
    "split",
    ["one batch", "a batch per mark", "a batch per pair", "each batch replayed"],
)
def test_a_writer_restarted_under_its_id_three_times_is_heard_at_once(split: str) -> None:
    marks = restarts(3)
    if split == "one batch":
        batches = [marks]
    elif split == "a batch per pair":
        batches = [marks[i : i + 2] for i in range(0, len(marks), 2)]
    else:
        batches = [[m] for m in marks]
    state, outputs = run_restarts(batches, replay=split == "each batch replayed")
    assert [o for o in outputs if isinstance(o, Rejected)] == []
    emitted = [o.watermark for o in outputs if isinstance(o, Emitted)]
    assert emitted, "watermarks continue"
    assert [w.seq for w in emitted] == list(range(len(emitted)))
    # the last instance's marks reach the watermark, and every cut covers the final
    # position of each instance that shut down before it (cuts never go backwards)
    assert emitted[-1].time >= 4_000
    assert emitted[-1].stream_cut[0] >= 29
    assert state.marks["a"].seen.instance == "gen3"
    assert set(state.marks) == {"a", "z"}  # every shut-down instance was dropped in time


def test_a_retired_instance_takes_part_until_the_cut_holds_its_last_position() -> None:
    """The old instance wrote on segment 0, the new one writes on segment 1: the first
    watermark after the restart still covers the old instance's last position."""
    w, state = workflow(HOUR, "old", "new"), StreamState()

    def at(t: int, pos: dict[int, int], instance: str, offset: int, alive: bool = True):
        record = WriterMarkRecord(S, "a", t, pos, alive, instance=instance)
        return MarkInput(record.encode(), 0, offset, 10_000)

    batch = [at(1_000, {0: 7}, "old", 0), at(1_500, {0: 9}, "old", 1, alive=False)]
    batch.append(at(1_200, {1: 3}, "new", 2))
    out = w.on_records(S, state, batch, 10_000)
    assert [o for o in out if isinstance(o, Rejected)] == []
    (made,) = [o for o in out if isinstance(o, Emitted)]
    emitted = made.watermark
    assert (emitted.time, emitted.stream_cut) == (1_200, {0: 9, 1: 3})
    # both instances vouched for it, each under the writer id and its own token
    assert made.vouchers == (("a", "new"), ("a", "old"))
    row = output_row(made)["watermark"]
    assert row["vouchers"] == [
        {"writer": "a", "instance": "new"},
        {"writer": "a", "instance": "old"},
    ]
    assert row["writers"] == sorted(["a", retired_writer("a", "old")])
    # kept under a name of its own until a watermark passed its time, then dropped
    assert retired_writer("a", "old") in state.marks
    out = w.on_records(S, state, [at(1_600, {1: 4}, "new", 3)], 11_000)
    # still bounded by it once; the cycle that drops it runs at once and emits again
    assert [(o.watermark.time, o.watermark.stream_cut) for o in out if isinstance(o, Emitted)] == [
        (1_500, {0: 9, 1: 4}),
        (1_600, {0: 9, 1: 4}),
    ]
    assert set(state.marks) == {"a"} and state.marks["a"].seen.instance == "new"


def test_a_second_live_instance_under_the_same_id_is_still_impersonated() -> None:
    """An instance that did not register is refused whether or not the registered one
    still lives; the next registered one is heard."""
    w, state = workflow(HOUR, "first", "third"), StreamState()
    out = w.on_records(
        S,
        state,
        [
            as_instance("a", 100, 1, "first"),
            as_instance("a", 200, 2, "second"),  # never registered: refused
            as_instance("a", 300, 3, "first", alive=False),
            as_instance("a", 350, 4, "second"),  # not after the shutdown either
            as_instance("a", 500, 5, "third"),  # registered: heard
        ],
        10_000,
    )
    assert [(o.reason, o.offset) for o in out if isinstance(o, Rejected)] == [
        (IMPERSONATED, 2),
        (IMPERSONATED, 4),
    ]
    assert state.marks["a"].seen.instance == "third"


def test_an_id_nobody_registered_or_a_mark_without_a_token_is_never_followed() -> None:
    """No first-come binding: the first mark under an id nobody registered is refused
    (``unregistered``), however far ahead, and so is every mark without a token, also
    under a registered id; the registered writer is heard beside them."""
    config = StreamConfiguration(ScalingPolicy.fixed(2))
    registered = Registered({"a": [Registration("real", 0)]}, others=False)
    w = StreamWorkflow(
        WorkflowSettings(), Streams(new_stream_metadata(S, config, 0)), Committed(), registered
    )
    state = StreamState()
    out = w.on_records(
        S,
        state,
        [
            as_instance("squatter", 9_000, 1, "s-1"),  # first under an id: not bound
            as_instance("a", 9_000, 2, None),  # a v1 mark, before the real writer
            as_instance("a", 100, 3, "real"),
            as_instance("squatter", 9_500, 4, "s-1"),  # still refused
            as_instance("a", 9_000, 5, None),  # after it, too
        ],
        10_000,
    )
    assert [(o.reason, o.writer, o.offset) for o in out if isinstance(o, Rejected)] == [
        (UNREGISTERED, "squatter", 1),
        (UNREGISTERED, "a", 2),
        (UNREGISTERED, "squatter", 4),
        (UNREGISTERED, "a", 5),
    ]
    assert set(state.marks) == {"a"} and state.marks["a"].seen.instance == "real"
    assert [o.watermark.time for o in out if isinstance(o, Emitted)] == [100]


def test_a_registered_writers_stream_refuses_any_other_writer_id() -> None:
    config = StreamConfiguration(ScalingPolicy.fixed(2), writers=("b", "a", "a"))
    assert config.writers == ("a", "b")
    assert StreamConfiguration.from_dict(config.to_dict()) == config
    w = StreamWorkflow(
        WorkflowSettings(), Streams(new_stream_metadata(S, config, 0)), Committed(), Registered()
    )
    state = StreamState()
    out = w.on_records(
        S, state, [mark("a", 1_000, 1), mark("phantom", 5, 2), mark("b", 1_200, 3)], 10_000
    )
    assert [(o.reason, o.writer) for o in out if isinstance(o, Rejected)] == [
        (Reason.UNKNOWN_WRITER, "phantom")
    ]
    assert set(state.marks) == {"a", "b"}  # the phantom holds nothing back
    assert [o.watermark.time for o in out if isinstance(o, Emitted)] == [1_000]


@pytest.mark.parametrize("bad", ["a", ["a", ""], [3]])
def test_registered_writers_must_be_ids(bad) -> None:
    with pytest.raises(InvalidConfigurationError, match="writers must be"):
        StreamConfiguration(writers=bad)
