"""S2's opt-out (``refuse_adjustments``): refuse instead of adjusting (pure)."""

from __future__ import annotations

import pytest

from tidemark.controller.config import StreamConfiguration, TimestampingMode
from tidemark.controller.exceptions import InvalidConfigurationError
from tidemark.pipelines.writing.exceptions import InvalidTimestampError, TimestampAdjustmentError
from tidemark.pipelines.writing.timestamping import SegmentClock, TimestampPolicy, refuse_adjusted

REFUSING = TimestampPolicy(refuse_adjustments=True)


def test_a_record_below_the_floor_is_refused_and_leaves_the_floor() -> None:
    clock = SegmentClock(REFUSING)
    ts = clock.peek(0, 1000, arrival_ms=5000)
    clock.advance(0, ts)
    with pytest.raises(TimestampAdjustmentError, match="900 would be stored as 1000") as info:
        clock.peek(0, 900, arrival_ms=5000)
    assert (info.value.given, info.value.stored) == (900, 1000)
    assert isinstance(info.value, InvalidTimestampError)
    assert clock.floor(0) == 1000
    assert clock.peek(0, 1000, arrival_ms=5000) == 1000  # equal is not an adjustment
    assert clock.peek(1, 900, arrival_ms=5000) == 900  # another segment has its own floor


def test_a_capped_timestamp_is_refused_and_uncapped_is_not() -> None:
    with pytest.raises(TimestampAdjustmentError, match="arrival time"):
        SegmentClock(REFUSING).peek(0, 9_000, arrival_ms=5_000)
    uncapped = TimestampPolicy(uncapped=True, refuse_adjustments=True)
    assert SegmentClock(uncapped).peek(0, 9_000, arrival_ms=5_000) == 9_000


def test_no_timestamp_and_replays_are_never_refused() -> None:
    clock = SegmentClock(REFUSING)
    clock.advance(0, 1000)
    assert clock.peek(0, None, arrival_ms=500) == 1000  # arrival raised: no client ts given
    assert clock.peek(0, 900, arrival_ms=5000, refuse=False) == 1000


def test_batches_are_checked_as_a_whole() -> None:
    refuse_adjusted(REFUSING, [1000, None, 1200], [1000, 1000, 1200])
    with pytest.raises(TimestampAdjustmentError, match=r"timestamps\[1\]"):
        refuse_adjusted(REFUSING, [1000, 900], [1000, 1000])
    refuse_adjusted(TimestampPolicy(), [1000, 900], [1000, 1000])  # off: adjusting is fine


def test_the_setting_round_trips_and_refuses_arrival() -> None:
    cfg = StreamConfiguration(refuse_adjustments=True)
    assert StreamConfiguration.from_dict(cfg.to_dict()) == cfg
    old = {k: v for k, v in StreamConfiguration().to_dict().items() if k != "refuse_adjustments"}
    assert StreamConfiguration.from_dict(old).refuse_adjustments is False
    with pytest.raises(InvalidConfigurationError, match="client timestamps"):
        StreamConfiguration(timestamping=TimestampingMode.ARRIVAL, refuse_adjustments=True)
