"""The Kafka side of stream operations: one topic per stream, one partition per segment.

    topics = StreamTopics("127.0.0.1:9092")
    topics.create("tidemark.shop.orders", partitions=2, configs={"retention.ms": None})
    topics.end_offsets("tidemark.shop.orders", [0, 1])      # {0: 17, 1: 4}
    topics.stable_offsets([("tidemark.shop.orders", 0), ("gone", 0)], required=False)

Each call is idempotent where Kafka allows it (creating an existing topic
with enough partitions, adding partitions that exist, deleting a topic that
is gone), so a repeated stream operation can re-run every step. Kafka's
errors surface as :class:`KafkaOperationError` naming the topic.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition

# confluent_kafka.admin re-exports these without __all__, which mypy --strict flags.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from confluent_kafka.cimpl import _AdminClientImpl

from tidemark.controller.exceptions import (
    KafkaOperationError,
    KafkaUnavailableError,
    MarksTopicError,
)
from tidemark.controller.kafka import roles
from tidemark.controller.kafka.acls import grant_tidemark_acls, tidemark_acls  # their old home
from tidemark.controller.kafka.outages import answer, answering, named_cause, outages_named
from tidemark.controller.kafka.retry import LEADER_MOVING, KafkaRetry
from tidemark.controller.naming import (
    LOG_APPEND_TIME,
    MARKS_TOPIC_CONFIGS,
    TIMESTAMP_TYPE,
    ClusterSettings,
)
from tidemark.retries import RetryPolicy

log = logging.getLogger(__name__)


class TopicConfigsNotShownError(KafkaOperationError):
    """A topic's settings were changed, but its broker kept describing the old ones."""


OFFSET_LOOKUP_RETRIABLE = LEADER_MOVING | {
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
}
"""What the per-partition requests ask again: a leader moving, or a partition just added
(a scale) that a broker's metadata does not show yet ("Unknown partition")."""

DEFAULT_TIMEOUT_S = 30.0

T = TypeVar("T")


def _code(exc: KafkaException) -> int | None:
    err = exc.args[0] if exc.args else None
    return err.code() if isinstance(err, KafkaError) else None


Key = tuple[str, int]
"""A partition: ``(topic, partition)``."""


class StreamTopics:
    """``role``: the admin client's (:data:`roles.ADMIN`); ``retry``: how a per-partition
    request is asked again (by default while a leader moves or a partition just added is
    not known yet, for up to ``timeout_s``)."""

    def __init__(
        self,
        bootstrap: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        role: roles.Role[Any] = roles.ADMIN,
        retry: KafkaRetry | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self._role = role
        self._admin: Any = roles.client(role, bootstrap)
        self.timeout_s = timeout_s
        self._retry = retry or KafkaRetry(
            OFFSET_LOOKUP_RETRIABLE, timeout_s=timeout_s, max_delay_s=0.05
        )

    @property
    def admin(self) -> Any:
        """The admin client (:class:`KafkaOperationError` once :meth:`close` let it go)."""
        if self._admin is None:
            raise KafkaOperationError(f"the topic operations on {self.bootstrap} were closed")
        return self._admin

    def close(self) -> None:
        """Let go of the admin client now: it has no close of its own, and its threads and
        broker connections end with its last reference (held here only), so nothing
        reconnects after. A second call does nothing."""
        self._admin = None

    def _wait(self, what: str, future: Any, ok_codes: Iterable[int] = ()) -> Any:
        with outages_named(self.bootstrap):
            try:
                return answer(future, self.timeout_s, self._admin)
            except KafkaException as exc:
                if _code(exc) in set(ok_codes):
                    return None
                raise KafkaOperationError(f"{what}: {exc.args[0]}") from named_cause(
                    self.bootstrap, exc
                )

    def partition_count(self, topic: str) -> int | None:
        """The topic's partitions, or None when it does not exist."""
        meta = answering(self.admin, self.bootstrap, self.timeout_s, topic)
        found = meta.topics.get(topic)
        if found is None or found.error is not None:
            return None
        return len(found.partitions)

    def create(self, topic: str, partitions: int, configs: Mapping[str, str | None]) -> int:
        """Create ``topic``; an existing one is kept and grown to ``partitions``. Returns
        the partition count once the topic's metadata shows it."""
        settings = {k: v for k, v in configs.items() if v is not None}
        futures = self.admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, config=settings)],
            operation_timeout=self.timeout_s,
        )
        self._wait(f"creating topic {topic!r}", futures[topic], [KafkaError.TOPIC_ALREADY_EXISTS])
        current = self._await_count(topic, 1, "did not appear after its creation")
        return self._grow(topic, current, partitions)

    def ensure_partitions(self, topic: str, count: int) -> int:
        """Grow ``topic`` to ``count`` partitions (nothing to do when it has them); returns
        its partition count."""
        current = self.partition_count(topic)
        if current is None:
            raise KafkaOperationError(f"topic {topic!r} does not exist")
        return self._grow(topic, current, count)

    def _grow(self, topic: str, current: int, count: int) -> int:
        if current >= count:
            return current
        futures = self.admin.create_partitions(
            [NewPartitions(topic, count)], operation_timeout=self.timeout_s
        )
        self._wait(
            f"adding partitions to topic {topic!r} (to {count})",
            futures[topic],
            [KafkaError.INVALID_PARTITIONS],
        )
        return self._await_count(topic, count, f"did not reach {count} partitions")

    def _await_count(self, topic: str, at_least: int, failure: str) -> int:
        """The topic's partition count once some broker's metadata shows ``at_least``. A
        change reaches the brokers one by one, and each metadata request may ask another
        one, so one answer that shows it does not mean the next will: callers use the
        count returned here rather than asking again."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            count = self.partition_count(topic)
            if count is not None and count >= at_least:
                return count
            if time.monotonic() > deadline:
                raise KafkaOperationError(f"topic {topic!r} {failure}")
            time.sleep(0.05)

    def alter_configs(self, topic: str, configs: Mapping[str, str | None]) -> None:
        """Set each setting; ``None`` resets it to the broker's default."""
        entries = [
            ConfigEntry(
                name,
                value,
                incremental_operation=(
                    AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
                ),
            )
            for name, value in configs.items()
        ]
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
        futures = self.admin.incremental_alter_configs([resource])
        for future in futures.values():
            self._wait(f"configuring topic {topic!r}", future)
        self._until_shown(topic, {k: v for k, v in configs.items() if v is not None})

    def _until_shown(self, topic: str, wanted: Mapping[str, str]) -> None:
        """Wait until the broker describes ``topic`` with the ``wanted`` settings: the
        controller commits a change before every broker has applied it, and a describe
        right after (the caller's next step, or a user's) could show the old values."""

        def shown() -> None:
            now = self.topic_configs(topic)
            stale = sorted(name for name, value in wanted.items() if now.get(name) != value)
            if stale:
                raise TopicConfigsNotShownError(
                    f"topic {topic!r}: the broker does not show the new {', '.join(stale)} "
                    f"within {self.timeout_s:.0f} s of setting them"
                )

        policy = RetryPolicy(first_delay_s=0.02, max_delay_s=0.25, max_elapsed_s=self.timeout_s)
        policy.call(shown, retry_on=TopicConfigsNotShownError, what=f"topic {topic!r} settings")

    def topic_configs(self, topic: str) -> dict[str, str]:
        futures = self.admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
        out: dict[str, str] = {}
        for future in futures.values():
            for name, entry in self._wait(f"describing topic {topic!r}", future).items():
                out[name] = entry.value
        return out

    def end_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """Each partition's high watermark: the offset the next record would get."""
        return self._offsets(topic, partitions, OffsetSpec.latest(), "end offset")  # type: ignore[no-untyped-call]

    def last_stable_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """Each partition's last stable offset: where committed data ends (read_committed)."""
        found = self.stable_offsets([(topic, p) for p in partitions])
        return {p: off for (_, p), off in found.items()}

    def stable_offsets(
        self, keys: Iterable[Key], required: bool | Collection[Key] = True, earliest: bool = False
    ) -> dict[Key, int]:
        """Last stable offsets (``earliest``: first offsets) of partitions of any topics, in
        one request. A partition whose leader is moving (:data:`LEADER_MOVING`) has the
        request asked again; one that fails otherwise raises when ``required`` (all, or
        those in the collection), else is left out of the answer (a deleted topic's)."""
        wanted = list(keys)
        if not wanted:
            return {}
        spec = OffsetSpec.earliest() if earliest else OffsetSpec.latest()  # type: ignore[no-untyped-call]
        request = {TopicPartition(t, p): spec for t, p in wanted}

        def needed(key: Key) -> bool:
            return required if isinstance(required, bool) else key in required

        def ask() -> dict[Key, int]:
            futures = self.admin.list_offsets(
                request,
                isolation_level=IsolationLevel.READ_COMMITTED,
                request_timeout=self.timeout_s,
            )
            found: dict[Key, int] = {}
            for tp, future in futures.items():
                key = (tp.topic, tp.partition)
                try:
                    found[key] = int(answer(future, self.timeout_s, self._admin).offset)
                except KafkaException as exc:
                    if _code(exc) in LEADER_MOVING or needed(key):
                        raise  # asked again while the retry allows, else the request fails
            return found

        what = "first" if earliest else "last stable"
        topics = ", ".join(sorted({t for t, _ in wanted}))
        return self._retrying_call(f"{what} offsets of {len(wanted)} partitions of {topics}", ask)

    def start_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """Each partition's log start offset (after deleted records)."""
        return self._offsets(topic, partitions, OffsetSpec.earliest(), "start offset")  # type: ignore[no-untyped-call]

    def max_timestamps(
        self, topic: str, partitions: Iterable[int]
    ) -> dict[int, tuple[int, int] | None]:
        """Each partition's record with the largest timestamp, ``(offset, timestamp)``, as
        the broker knows it without reading records (ListOffsets' max-timestamp spec);
        ``None`` for a partition with no record."""
        return self.partition_offsets(topic).max_records(list(partitions))

    def _offsets(
        self,
        topic: str,
        partitions: Iterable[int],
        spec: Any,
        what: str,
    ) -> dict[int, int]:
        wanted = list(partitions)
        if not wanted:
            return {}
        results = self._retrying(
            f"{what} of {topic}{wanted}",
            lambda: self.admin.list_offsets(
                {TopicPartition(topic, p): spec for p in wanted}, request_timeout=self.timeout_s
            ),
        )
        return {tp.partition: int(r.offset) for tp, r in results.items()}

    def delete_records(self, topic: str, before: Mapping[int, int]) -> None:
        """Delete the records before ``before[partition]`` (-1: every record)."""
        if not before:
            return
        self._retrying(
            f"deleting records of {topic} before {dict(before)}",
            lambda: self.admin.delete_records(
                [TopicPartition(topic, p, off) for p, off in sorted(before.items())],
                request_timeout=self.timeout_s,
                operation_timeout=self.timeout_s,
            ),
        )

    def _retrying(self, what: str, call: Callable[[], Mapping[Any, Any]]) -> dict[Any, Any]:
        """Run ``call`` (a per-partition admin request) until no partition answers with a
        retriable error: partitions just added may lack a leader for a moment."""
        return self._retrying_call(
            what, lambda: {k: answer(f, self.timeout_s, self._admin) for k, f in call().items()}
        )

    def _retrying_call(self, what: str, call: Callable[[], T]) -> T:
        """``call()`` (it waits for its answers), again while it raises a retriable error;
        Kafka's other errors as :class:`KafkaOperationError`, an outage typed."""

        def attempt() -> T:
            try:
                return call()
            except KafkaException as exc:
                if _code(exc) == KafkaError._UNKNOWN_PARTITION and self._admin is not None:
                    # a partition just added (a scale) that the client's metadata cache
                    # lacks, and keeps lacking until its next refresh (minutes): a fresh
                    # client asks the brokers, the retry asks it again
                    self._admin = roles.client(self._role, self.bootstrap)
                raise

        with outages_named(self.bootstrap):
            try:
                return self._retry(attempt, what)
            except KafkaException as exc:
                raise KafkaOperationError(f"{what}: {exc.args[0]}") from named_cause(
                    self.bootstrap, exc
                )

    def delete(self, topic: str) -> None:
        futures = self.admin.delete_topics([topic], operation_timeout=self.timeout_s)
        self._wait(f"deleting topic {topic!r}", futures[topic], [KafkaError.UNKNOWN_TOPIC_OR_PART])

    def partition_offsets(self, topic: str) -> PartitionOffsets:
        """``topic``'s offsets for a caller that asks often (:class:`PartitionOffsets`)."""
        return PartitionOffsets(self, topic)


OFFSETS_BATCH = 100
"""Partitions in one ListOffsets admin request of :class:`PartitionOffsets`. librdkafka
groups a request's partitions by leader and merges the answers with a linear search
per partition, so one request of n partitions costs it n² comparisons; batches of this
size keep it near linear, and the batches of one look are in flight together."""

_LATEST = -1  # librdkafka's offset specs, as the TopicPartition offsets of a request
_MAX_TIMESTAMP = -3


class PartitionOffsets:
    """The last stable offsets and largest-timestamp records of one topic's partitions,
    for a caller that asks every second (the stream observer).

    The same answers as :meth:`StreamTopics.last_stable_offsets` and
    :meth:`StreamTopics.max_timestamps` (the same retries and errors), at a fraction
    of their CPU on many partitions: ``AdminClient.list_offsets`` makes and resolves a
    Python future per partition, which here is one future per batch of
    :data:`OFFSETS_BATCH` partitions (the client's C-level ``list_offsets``, the call
    the public method wraps); the batches are sent together, so a look still waits
    one round trip; each partition's ``TopicPartition`` is made once.
    """

    def __init__(self, topics: StreamTopics, topic: str) -> None:
        self.topic = topic
        self._topics = topics
        self._asked: dict[int, dict[int, TopicPartition]] = {_LATEST: {}, _MAX_TIMESTAMP: {}}

    def last_stable(self, partitions: Sequence[int]) -> dict[int, int]:
        """Each partition's last stable offset (``read_committed``)."""
        found = self._ask(
            partitions,
            _LATEST,
            "last stable offset",
            isolation_level_value=IsolationLevel.READ_COMMITTED.value,
        )
        return {tp.partition: int(r.offset) for tp, r in found}

    def max_records(self, partitions: Sequence[int]) -> dict[int, tuple[int, int] | None]:
        """Each partition's record with the largest timestamp, ``(offset, timestamp)``;
        ``None`` for a partition with no record."""
        found = self._ask(partitions, _MAX_TIMESTAMP, "max timestamp")
        return {
            tp.partition: None if r.offset < 0 else (int(r.offset), int(r.timestamp))
            for tp, r in found
        }

    def _ask(
        self, partitions: Sequence[int], spec: int, what: str, **options: Any
    ) -> list[tuple[TopicPartition, Any]]:
        if not partitions:
            return []
        made = self._asked[spec]
        request = []
        for p in partitions:
            tp = made.get(p)
            if tp is None:
                tp = made[p] = TopicPartition(self.topic, p, spec)
            request.append(tp)
        batches = [request[i : i + OFFSETS_BATCH] for i in range(0, len(request), OFFSETS_BATCH)]
        topics = self._topics
        timeout_s = topics.timeout_s

        def ask() -> list[tuple[TopicPartition, Any]]:
            admin = topics.admin
            futures = []
            for batch in batches:
                future: concurrent.futures.Future[Any] = concurrent.futures.Future()
                future.set_running_or_notify_cancel()
                _AdminClientImpl.list_offsets(
                    admin, batch, future, request_timeout=timeout_s, **options
                )
                futures.append(future)
            found: list[tuple[TopicPartition, Any]] = []
            for future in futures:
                answers = answer(future, timeout_s, admin)
                for one in answers.values():
                    if isinstance(one, KafkaError):
                        raise KafkaException(one)  # the retry decides, as for one future
                found.extend(answers.items())
            return found

        return topics._retrying_call(f"{what} of {self.topic} ({len(request)} partitions)", ask)


_checked_marks: set[tuple[str, str, int, bool]] = set()
_checked_lock = threading.Lock()


def ensure_marks_topic(
    bootstrap: str, cluster: ClusterSettings, *, create: bool = True, alter: bool = False
) -> None:
    """Make sure the marks topic exists with ``bucket_count`` partitions (checked once
    per process): created when missing and ``create`` (``LogAppendTime``); any other
    count is refused (:class:`MarksTopicError`), since marks would land in the wrong
    buckets. ``alter`` (the controller job) also switches an existing topic to
    ``LogAppendTime``; writers do not (on a secured cluster they may not alter
    configs). The one check writers and the controller job share."""
    topic, buckets = cluster.marks_topic, cluster.bucket_count
    key = (bootstrap, topic, buckets, alter)
    with _checked_lock:
        if key in _checked_marks:
            return
    try:
        topics = StreamTopics(bootstrap)
        count = topics.partition_count(topic)
        if count is None:
            if not create:
                raise MarksTopicError(
                    f"marks topic {topic!r} does not exist; create it with {buckets} "
                    "partitions, or let writers create it (WriterConfig.create_marks_topic=True)"
                )
            log.info("creating marks topic %s with %d partitions", topic, buckets)
            count = topics.create(topic, buckets, MARKS_TOPIC_CONFIGS)
        elif alter and topics.topic_configs(topic).get(TIMESTAMP_TYPE) != LOG_APPEND_TIME:
            log.warning("marks topic %s: setting %s=%s", topic, TIMESTAMP_TYPE, LOG_APPEND_TIME)
            topics.alter_configs(topic, MARKS_TOPIC_CONFIGS)
    except (KafkaException, KafkaOperationError, KafkaUnavailableError) as exc:
        raise MarksTopicError(f"marks topic {topic!r}: {exc}") from named_cause(bootstrap, exc)
    if count != buckets:
        raise MarksTopicError(
            f"marks topic {topic!r} has {count} partitions but bucket_count is {buckets}; "
            "every writer and controller must agree on it"
        )
    with _checked_lock:
        _checked_marks.add(key)


__all__ = [
    "OFFSETS_BATCH",
    "PartitionOffsets",
    "StreamTopics",
    "ensure_marks_topic",
    "grant_tidemark_acls",
    "tidemark_acls",
]
