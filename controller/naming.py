"""Names and placement shared by writers, the control plane and the controller job.

    >>> topic_for("shop/orders")
    'tidemark.shop.orders'
    >>> 0 <= bucket_of("shop/orders", 16) < 16
    True

A stream is named ``scope/name``; each is one Kafka topic. Writer marks go
to one marks topic whose partitions are the controller's buckets; a stream's
marks all land in the partition of its bucket, so one controller instance
sees all of them in order.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from tidemark.controller.exceptions import InvalidModelError

_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,99}$")

TOPIC_PREFIX = "tidemark."
WRITER_TRANSACTIONAL_PREFIX = "tidemark:"
"""Every writer's Kafka ``transactional.id`` starts so (the writer role is granted it)."""
BUFFER_TRANSACTIONAL_PREFIX = "tidemark-buffer."
"""Every timeline buffer relay's ``transactional.id`` (and group) starts so (the
timeline role is granted it; no writer id starts so)."""
RELAY_TRANSACTIONAL_PREFIX = "tidemark-relay."
"""Every timeline relay's ``transactional.id`` (and group) starts so: ``tidemark-relay.``
and the timeline's name (the timeline role is granted it; no writer id starts so)."""
DEFAULT_MARKS_TOPIC = "tidemark-marks"
DEFAULT_BUCKET_COUNT = 8

TIMESTAMP_TYPE = "message.timestamp.type"
LOG_APPEND_TIME = "LogAppendTime"
MARKS_TOPIC_CONFIGS: Mapping[str, str] = MappingProxyType({TIMESTAMP_TYPE: LOG_APPEND_TIME})
"""The marks topic's settings: the broker stamps each mark with its arrival time, which
the controller bounds the mark's time by (a writer cannot forge it)."""


def is_stream_name(stream: str) -> bool:
    """Whether ``stream`` is a valid ``scope/name`` (:func:`split_stream` without the error).

    >>> is_stream_name("shop/orders"), is_stream_name("")
    (True, False)
    """
    scope, sep, name = stream.partition("/")
    return bool(sep and _PART.match(scope) and _PART.match(name))


def split_stream(stream: str) -> tuple[str, str]:
    """``"scope/name"`` -> ``("scope", "name")``, or a clear error."""
    if not is_stream_name(stream):
        raise InvalidModelError(
            f"stream {stream!r} must be 'scope/name', each part 1-100 of [A-Za-z0-9_-] "
            "starting with a letter or digit"
        )
    scope, _, name = stream.partition("/")
    return scope, name


_INSTANCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")


def check_instance_id(instance_id: str) -> str:
    """A controller instance id (a ZooKeeper node name): 1-100 of ``[A-Za-z0-9_.-]``,
    starting with a letter or digit; checked before anything starts.

    >>> check_instance_id("c-1")
    'c-1'
    """
    if not _INSTANCE.match(instance_id):
        raise InvalidModelError(
            f"instance id {instance_id!r} must be 1-100 of [A-Za-z0-9_.-] "
            "starting with a letter or digit"
        )
    return instance_id


_NODE_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")


def writer_node_name(writer_id: str) -> str:
    """A writer id as a ZooKeeper node name (its registrations' node; the JVM interceptor
    spells it the same way): each UTF-8 byte outside ``[A-Za-z0-9_.-]`` as ``%XX``, and
    the dots of ``.`` and ``..`` too.

    >>> writer_node_name("orders-1"), writer_node_name("job/3 é"), writer_node_name("..")
    ('orders-1', 'job%2F3%20%C3%A9', '%2E%2E')
    """
    name = "".join(chr(b) if b in _NODE_SAFE else f"%{b:02X}" for b in writer_id.encode())
    return name.replace(".", "%2E") if name in (".", "..") else name


def topic_for(stream: str) -> str:
    """The Kafka topic that holds ``stream``'s segments (one partition per segment)."""
    scope, name = split_stream(stream)
    return f"{TOPIC_PREFIX}{scope}.{name}"


def stream_of_topic(topic: str) -> str | None:
    """The stream whose topic is ``topic`` (:func:`topic_for`'s inverse: neither part of
    a stream's name holds a dot); ``None`` for a topic that is no stream's.

    >>> stream_of_topic("tidemark.shop.orders"), stream_of_topic("orders")
    ('shop/orders', None)
    """
    scope, _, name = topic.removeprefix(TOPIC_PREFIX).partition(".")
    stream = f"{scope}/{name}"
    return stream if topic.startswith(TOPIC_PREFIX) and is_stream_name(stream) else None


def collision_key(topic: str) -> str:
    """Kafka refuses a topic whose name equals an existing one's once ``.`` and ``_`` are
    taken as the same character (their metric names would clash): ``a_b/c`` and ``a/b_c``
    both give ``tidemark_a_b_c``.

    >>> collision_key(topic_for("a_b/c")) == collision_key(topic_for("a/b_c"))
    True
    """
    return topic.replace(".", "_")


def bucket_of(stream: str, bucket_count: int) -> int:
    """The controller bucket of ``stream``: a stable hash (CRC-32), never Python's ``hash``."""
    if bucket_count < 1:
        raise InvalidModelError(f"bucket_count must be >= 1, got {bucket_count}")
    return zlib.crc32(stream.encode("utf-8")) % bucket_count


@dataclass(frozen=True)
class ClusterSettings:
    """Settings every part of one tidemark installation must agree on."""

    marks_topic: str = DEFAULT_MARKS_TOPIC
    bucket_count: int = DEFAULT_BUCKET_COUNT
    zk_root: str = "/tidemark"

    def __post_init__(self) -> None:
        if self.bucket_count < 1:
            raise InvalidModelError(f"bucket_count must be >= 1, got {self.bucket_count}")
