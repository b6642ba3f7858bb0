"""Adopted streams' metadata and the drop-in producer's partitioners (pure)."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.exceptions import InvalidModelError
from tidemark.controller.metadata import (
    Adoption,
    adopted_stream_metadata,
    decode_metadata,
    encode_metadata,
    metadata_to_dict,
    new_stream_metadata,
)
from tidemark.pipelines.writing.exceptions import WriterConfigError
from tidemark.pipelines.writing.partitioners import check_partitioner, kafka_partition, murmur2

CONFIG = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(3))


def test_an_adopted_topic_is_epoch_0_with_one_segment_per_partition() -> None:
    meta = adopted_stream_metadata("s/legacy", "orders-v1", 3, CONFIG, Adoption(False, 42))
    assert meta.topic == "orders-v1"
    assert [(s.id, s.number) for s in meta.current_epoch().segments] == [(0, 0), (1, 1), (2, 2)]
    assert meta.current_epoch().segments[-1].key_range.high == 1.0
    assert decode_metadata(encode_metadata(meta)) == meta
    assert metadata_to_dict(meta)["adoption"] == {"tidemark_routing": False, "adopted_at_ms": 42}
    with pytest.raises(InvalidModelError, match="no partitions"):
        adopted_stream_metadata("s/legacy", "orders-v1", 0, CONFIG, Adoption())


def test_created_streams_carry_no_adoption_key() -> None:
    meta = new_stream_metadata("s/x", CONFIG, now_ms=0)
    assert "adoption" not in metadata_to_dict(meta)
    assert decode_metadata(encode_metadata(meta)).adoption is None


@pytest.mark.parametrize(
    ("data", "expected"),
    [  # Kafka's UtilsTest.testMurmur2
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected & 0xFFFFFFFF


@given(st.binary(min_size=1), st.integers(min_value=1, max_value=64))
def test_keyed_partitions_are_stable_and_in_range(key: bytes, n: int) -> None:
    for name in ("consistent_random", "consistent", "murmur2_random", "murmur2"):
        p = kafka_partition(name, key, n)
        assert 0 <= p < n and p == kafka_partition(name, key, n)
    assert kafka_partition("consistent_random", key, n) == zlib.crc32(key) % n
    assert kafka_partition("consistent", key.decode("latin-1"), n) == kafka_partition(
        "consistent", key.decode("latin-1").encode("utf-8"), n
    )


def test_unknown_partitioners_are_refused_with_the_choices() -> None:
    with pytest.raises(WriterConfigError, match=r"fnv1a_random.*consistent_random"):
        check_partitioner("fnv1a_random")
