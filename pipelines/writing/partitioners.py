"""librdkafka's key partitioners, so a wrapper knows a record's partition before sending it.

    >>> kafka_partition("consistent_random", b"customer-7", 3)   # CRC-32 of the key, mod 3
    2
    >>> kafka_partition("murmur2_random", b"21", 3)      # as Kafka's Java producer
    0

The drop-in producer counts the records it sends per partition, to tell
when every record produced before a ``note_time`` is acknowledged; on a
topic whose producers route with Kafka's partitioner it computes the
partition the wrapped producer's ``partitioner`` setting would choose
(librdkafka's default is ``consistent_random``), then names it explicitly,
so the records land exactly where the bare producer would put them. Keyless
(or empty-key) records of the ``*_random`` partitioners go to a random
partition, as librdkafka's do. Pure, no I/O.
"""

from __future__ import annotations

import random
import zlib

from tidemark.pipelines.writing.exceptions import WriterConfigError

DEFAULT_PARTITIONER = "consistent_random"
SUPPORTED = ("consistent_random", "consistent", "murmur2_random", "murmur2", "random")

_M = 0x5BD1E995


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c), as ``org.apache.kafka.common.utils.Utils.murmur2``."""
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    whole = length & ~3
    for i in range(0, whole, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * _M) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * _M) & 0xFFFFFFFF
        h = (h * _M) & 0xFFFFFFFF
        h ^= k
    extra = length & 3
    if extra == 3:
        h ^= data[whole + 2] << 16
    if extra >= 2:
        h ^= data[whole + 1] << 8
    if extra >= 1:
        h ^= data[whole]
        h = (h * _M) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * _M) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def check_partitioner(name: str) -> str:
    if name not in SUPPORTED:
        raise WriterConfigError(
            f"partitioner {name!r} is not one the drop-in producer can follow; "
            f"use one of: {', '.join(SUPPORTED)}"
        )
    return name


def kafka_partition(partitioner: str, key: bytes | str | None, partitions: int) -> int:
    """The partition librdkafka's ``partitioner`` gives ``key`` among ``partitions``."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    if partitioner == "random" or (not key and partitioner.endswith("_random")):
        return random.randrange(partitions)
    data = key or b""
    if partitioner.startswith("murmur2"):
        return (murmur2(data) & 0x7FFFFFFF) % partitions
    return zlib.crc32(data) % partitions


__all__ = ["DEFAULT_PARTITIONER", "SUPPORTED", "check_partitioner", "kafka_partition", "murmur2"]
