"""Slot keys spread evenly over the state partitions (tidemark.jobs.slot_keys.balanced_slot_keys).

``spark_partition`` is checked against Spark's own ``pmod(hash(k), n)`` in
tests/integration/test_spark_local.py; here, what the keys promise."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from tidemark.jobs.slot_keys import balanced_slot_keys, slot_expression, spark_partition


@given(st.integers(1, 64), st.integers(1, 16))
def test_each_partition_gets_its_share_of_the_slots(partitions: int, per: int) -> None:
    keys = balanced_slot_keys(partitions * per, partitions)
    assert len(set(keys)) == len(keys) and min(keys) >= 0
    assert [spark_partition(k, partitions) for k in keys] == [
        i % partitions for i in range(len(keys))
    ]
    assert set(Counter(spark_partition(k, partitions) for k in keys).values()) == {per}
    assert balanced_slot_keys(partitions * per, partitions) == keys  # deterministic


@given(st.integers(-(2**31), 2**31 - 1), st.integers(1, 1000))
def test_a_partition_is_in_range(key: int, partitions: int) -> None:
    assert 0 <= spark_partition(key, partitions) < partitions


def test_keys_zero_to_n_are_uneven_which_is_why_the_keys_are_chosen() -> None:
    # 8 slots on 2 partitions, keys 0..7: Murmur3 puts 3 in one and 5 in the other
    assert sorted(Counter(spark_partition(k, 2) for k in range(8)).values()) == [3, 5]


def test_the_expression_maps_hash_indexes_to_the_keys() -> None:
    assert "element_at(array(2, 0, 4, 1, 5, 3, 10, 6)" in slot_expression(balanced_slot_keys(8, 2))
    assert "element_at" not in slot_expression(8)
    assert "element_at" not in slot_expression(tuple(range(8)))
