"""Each adapter says its service did not answer with its own typed error of the common
hierarchy, naming the address it used -- here against ports nothing listens on."""

from __future__ import annotations

import pytest

from tidemark.errors import ServiceUnavailableError
from tidemark.infra.ports import unused_address

pytestmark = pytest.mark.unit


def test_zookeeper_giving_no_session_is_zookeepers_error() -> None:
    from tidemark.controller.exceptions import ZooKeeperUnavailableError
    from tidemark.controller.zookeeper.session import open_session

    address = unused_address()
    with pytest.raises(ZooKeeperUnavailableError) as raised:
        open_session(address, start_timeout_s=0.5)
    error = raised.value
    assert isinstance(error, ServiceUnavailableError)
    assert (error.service, error.address) == ("ZooKeeper", address)
    assert error.reason == "gave no session within 0.5 s"


def test_kafka_not_answering_an_admin_request_is_kafkas_error() -> None:
    from tidemark.controller.exceptions import KafkaUnavailableError
    from tidemark.controller.kafka.admin import StreamTopics

    address = unused_address()
    with pytest.raises(KafkaUnavailableError) as raised:
        StreamTopics(address, timeout_s=0.5).delete("orders")
    error = raised.value
    assert isinstance(error, ServiceUnavailableError) and isinstance(error, TimeoutError)
    assert (error.service, error.address) == ("Kafka", address)
    # the client's last connection error says why
    assert error.reason.startswith("gave no answer in time; its last error: "), error.reason
    assert "Connection refused" in error.reason, error.reason


def test_postgresql_refusing_the_connection_is_the_timelines_error() -> None:
    from tidemark.pipelines.timeline.exceptions import StoreUnavailableError
    from tidemark.pipelines.timeline.store import TimelineStore

    address = unused_address()
    with pytest.raises(StoreUnavailableError) as raised:
        TimelineStore(f"postgresql://alice:s3cret@{address}/db", connect_timeout_s=2)
    error = raised.value
    assert isinstance(error, ServiceUnavailableError)
    assert (error.service, error.address) == ("PostgreSQL", f"{address}/db")
    assert error.reason.startswith("refused or did not answer (") and "s3cret" not in error.reason
    assert str(error).startswith("[store-unavailable] ")  # the timeline's rule, as before


def test_the_time_service_not_answering_is_its_clients_error() -> None:
    from tidemark.pipelines.reading.time_service import (
        TimeServiceClient,
        TimeServiceUnavailableError,
    )

    url = f"http://{unused_address()}"
    with pytest.raises(TimeServiceUnavailableError) as raised:
        TimeServiceClient(url, timeout_s=0.5).get("/api/streams")
    error = raised.value
    assert isinstance(error, ServiceUnavailableError)
    assert (error.service, error.address) == ("the time service", url)
    assert error.reason.startswith("gave no answer (")


def test_an_adapter_that_wraps_kafkas_errors_keeps_its_type_caused_by_the_outage() -> None:
    from confluent_kafka import KafkaError, KafkaException

    from tidemark.controller.exceptions import KafkaOperationError, KafkaUnavailableError
    from tidemark.controller.kafka.outages import named_cause

    down = KafkaException(KafkaError(KafkaError._TRANSPORT))
    cause = named_cause("k1:9092", down)
    assert isinstance(cause, KafkaUnavailableError) and cause.__cause__ is down
    assert cause.address == "k1:9092" and cause.reason.startswith("gave no answer (")
    refused = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert named_cause("k1:9092", refused) is refused  # Kafka answered: it refused
    assert not issubclass(KafkaUnavailableError, KafkaOperationError)


def test_a_timeline_producer_whose_flush_no_broker_answers_names_the_outage() -> None:
    from tidemark.controller.exceptions import KafkaUnavailableError
    from tidemark.pipelines.timeline.exceptions import TimelineError
    from tidemark.pipelines.timeline.producer import KafkaTimelineProducer

    address = unused_address()
    producer = KafkaTimelineProducer(address, "timeline-in", "reminders", "signup")
    producer.put(b"hello", timestamp_ms=1_000, id="hello-1")
    with pytest.raises(TimelineError, match="1 messages to 'timeline-in' unacknowledged") as raised:
        producer.flush(timeout_s=0.5)
    cause = raised.value.__cause__
    assert isinstance(cause, KafkaUnavailableError)
    assert cause.address == address and cause.reason.startswith("gave no answer (")


def test_an_outage_a_client_hears_of_is_kafkas_error_once_metadata_goes_unanswered() -> None:
    import time

    from tidemark.controller.exceptions import KafkaUnavailableError
    from tidemark.controller.kafka import roles
    from tidemark.controller.kafka.outages import OutageWatch

    address = unused_address()
    watch = OutageWatch(address, timeout_s=0.5)
    producer = roles.client(roles.RELAY_PRODUCER, address, watch.settings)
    started = time.monotonic()
    watch.check(producer)  # nothing heard yet: nothing asked
    assert time.monotonic() - started < 0.2
    producer.produce("due", b"x")
    deadline = time.monotonic() + 10
    while watch.heard is None:
        assert time.monotonic() < deadline, "no error event from a closed port"
        producer.poll(0.1)
    with pytest.raises(KafkaUnavailableError) as raised:
        watch.check(producer)
    assert raised.value.address == address
    producer.purge()


def test_a_time_out_tells_the_last_specific_error_heard_while_it_is_recent() -> None:
    """What a client heard about a bootstrap (a refused handshake) is told with a time-out
    talking to it; "all brokers down" adds nothing and keeps it; it goes stale; another
    bootstrap's is not told."""
    from confluent_kafka import KafkaError

    from tidemark.controller.kafka.outages import HEARD_FOR_S, hear, last_heard, unavailable

    address, other = unused_address(), "never-heard.invalid:9092"
    handshake = KafkaError(KafkaError._SSL, "SSL handshake failed:\n certificate required")
    hear(address, handshake, now=100.0)
    hear(address, KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"), now=101.0)
    assert last_heard(address, now=101.0) == "SSL handshake failed: certificate required"
    assert last_heard(address, now=100.0 + HEARD_FOR_S + 1) is None
    assert last_heard(other, now=101.0) is None
    hear(address, handshake)
    said = str(unavailable(address, TimeoutError()))
    assert said.endswith(
        "gave no answer in time; its last error: SSL handshake failed: certificate required"
    ), said
    assert str(unavailable(other, TimeoutError())).endswith("gave no answer in time")


def test_a_held_call_is_an_outage_within_its_bound_and_the_next_call_runs_at_once() -> None:
    """librdkafka can hold a call past its own time-out: the caller is answered within
    the bound (the outage named), the held call ends on its thread, and the next call
    does not wait behind it."""
    import threading
    import time

    from tidemark.controller.exceptions import KafkaUnavailableError
    from tidemark.controller.kafka.outages import HeldCalls, outages_named

    calls = HeldCalls("held-test")
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(KafkaUnavailableError) as raised, outages_named("k1:9092"):
        calls.run(lambda: release.wait(30), 0.2)
    assert time.monotonic() - started < 5
    assert raised.value.address == "k1:9092"
    assert calls.run(lambda: 7, 5) == 7  # a thread of its own, not behind the held call
    with pytest.raises(TimeoutError, match="its own"):  # the call's error, passed as is
        calls.run(lambda: (_ for _ in ()).throw(TimeoutError("its own")), 5)
    assert calls.run(lambda: 8, 5) == 8  # and that thread stays in use
    release.set()
    calls.close()
    deadline = time.monotonic() + 5
    while any(t.name == "held-test" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "a thread outlived its held call and close"
        time.sleep(0.01)
