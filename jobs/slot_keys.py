"""Slot keys: which slot a marks-topic record belongs to, and which key each slot has.

    keys = balanced_slot_keys(slot_count, partitions)   # one key per slot
    frame.withColumn("slot", expr(slot_expression(keys)))
    due_key(3)                                         # "#due:3", a due record's key
    is_reevaluation(value)                             # a sweep's due record (REEVALUATE)

A stream's slot is ``pmod(xxhash64(stream), slot_count)``; the keys are chosen so
that Spark's hash partitioning gives every state partition the same number of
slots. Plain arithmetic on ints and strings, imported by the settings
(:mod:`tidemark.jobs.config`) and by the slots' state (:mod:`tidemark.jobs.slots`) alike.
"""

from __future__ import annotations

from collections.abc import Sequence

SLOTS_PER_PARTITION = 4
"""Slots per state partition: several, so that a stream's hash spreads the streams
evenly over the slots, few enough that per-key round trips stay negligible and
a slot's JSON stays small."""

DUE_PREFIX = "#due:"
"""Begins the key of a due record (produced by the driver, :mod:`tidemark.jobs.due`); ``#`` is
not allowed in stream names, so no writer's mark has such a key."""


def slot_expression(keys: int | Sequence[int]) -> str:
    """The Spark SQL expression of a record's slot key (the ``stream`` column is its key,
    binary or string: ``xxhash64`` hashes the same bytes alike). ``keys``: the slots' key
    values (:func:`balanced_slot_keys`), or a slot count for keys ``0 .. count - 1``."""
    count = keys if isinstance(keys, int) else len(keys)
    index = f"CAST(pmod(xxhash64(stream), {count}) AS INT)"
    if not isinstance(keys, int) and list(keys) != list(range(count)):
        index = f"element_at(array({', '.join(str(int(k)) for k in keys)}), {index} + 1)"
    return (
        f"CASE WHEN CAST(stream AS STRING) LIKE '{DUE_PREFIX}%' "
        f"THEN CAST(substring(CAST(stream AS STRING), {len(DUE_PREFIX) + 1}) AS INT) "
        f"ELSE {index} END"
    )


_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def spark_partition(key: int, partitions: int) -> int:
    """The partition Spark's hash partitioning gives an ``INT`` key: ``pmod(hash(key), n)``,
    Murmur3 x86 32-bit with seed 42 (``Murmur3_x86_32.hashInt``)."""
    k1 = (key & _MASK) * 0xCC9E2D51 & _MASK
    k1 = _rotl(k1, 15) * 0x1B873593 & _MASK
    h1 = _rotl(42 ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _MASK
    h1 ^= 4
    h1 = ((h1 ^ (h1 >> 16)) * 0x85EBCA6B) & _MASK
    h1 = ((h1 ^ (h1 >> 13)) * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    signed = h1 - (1 << 32) if h1 >= 1 << 31 else h1
    return signed % partitions


def balanced_slot_keys(slot_count: int, partitions: int) -> tuple[int, ...]:
    """Key values for ``slot_count`` slots that Spark's hash partitioning spreads evenly
    over ``partitions`` state partitions: slot ``i``'s key is the smallest unused
    non-negative integer in partition ``i % partitions``.

    Keys ``0 .. slot_count - 1`` land where Murmur3 puts them: with 4 slots per
    partition and 2 partitions, 3 and 5 -- one task had 63% of the streams and the
    batch waited for it."""
    keys: list[int] = []
    candidate = {p: 0 for p in range(partitions)}
    for i in range(slot_count):
        want = i % partitions
        k = candidate[want]
        while spark_partition(k, partitions) != want:
            k += 1
        keys.append(k)
        candidate[want] = k + 1
    return tuple(keys)


def due_key(slot: int) -> str:
    """The key of a due record for ``slot``."""
    return f"{DUE_PREFIX}{slot}"


def is_due_key(stream: str) -> bool:
    return stream.startswith(DUE_PREFIX)


REEVALUATE = b"re-evaluate"
"""The value of a due record that runs a cycle of every stream of its slot with a time
pending, due or not: due times are computed under a stream's configuration, so a
changed one (a lowered timeout or start-up delay) is not waited out."""


def is_reevaluation(value: bytes | None) -> bool:
    return value == REEVALUATE


__all__ = [
    "DUE_PREFIX",
    "REEVALUATE",
    "SLOTS_PER_PARTITION",
    "balanced_slot_keys",
    "due_key",
    "is_due_key",
    "is_reevaluation",
    "slot_expression",
    "spark_partition",
]
