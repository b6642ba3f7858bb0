"""The timeline's pure rules: statuses, refusal explanations, ids, buckets, pacing."""

from __future__ import annotations

import pytest

from tidemark.pipelines.timeline import exceptions as errors
from tidemark.pipelines.timeline import model
from tidemark.pipelines.timeline.config import ConsumerConfig, RelayConfig, TimelineConfig
from tidemark.pipelines.timeline.consumer import (
    assigned_buckets,
    next_batch_limit,
    percentile,
    wake_delay_ms,
)
from tidemark.pipelines.timeline.model import MAX_LEASE_MS, Message, Op, Status
from tidemark.pipelines.timeline.wire import ScheduledMessage, decode_scheduled, encode_scheduled

NOW = 10_000


def msg(ts: int, holder: str | None = None, version: int = 3, deleted: bool = False) -> Message:
    return Message("tl", "m1", ts, b"body", "owner", holder, 0, version, deleted)


@pytest.mark.parametrize(
    ("ts", "holder", "status"),
    [
        (NOW, None, Status.AVAILABLE),  # due exactly now
        (NOW - 1, None, Status.AVAILABLE),
        (NOW - 1, "c1", Status.AVAILABLE),  # a lease that lapsed
        (NOW + 1, None, Status.WAITING),
        (NOW + 1, "c1", Status.PROCESSING),
    ],
)
def test_status_is_derived_from_timestamp_lock_and_now(ts, holder, status):
    assert msg(ts, holder).status(NOW) is status


REFUSALS = [
    # op, message, actor, version, target, error
    (Op.LEASE, None, "c1", None, None, errors.MessageNotFoundError),
    (Op.LEASE, msg(NOW - 5, deleted=True), "c1", None, None, errors.MessageNotFoundError),
    (Op.LEASE, msg(NOW - 5), "c1", 2, None, errors.StaleVersionError),
    (Op.LEASE, msg(NOW + 5), "c1", None, None, errors.NotAvailableError),
    (Op.LEASE, msg(NOW + 5, "c2"), "c1", None, None, errors.NotAvailableError),
    (Op.EXTEND, msg(NOW + 5, "c2"), "c1", None, NOW + 99, errors.NotHolderError),
    (Op.EXTEND, msg(NOW + 5), "c1", None, NOW + 99, errors.NotHolderError),
    (Op.EXTEND, msg(NOW - 5, "c1"), "c1", None, NOW + 99, errors.LeaseExpiredError),
    (Op.EXTEND, msg(NOW + 5, "c1"), "c1", None, NOW, errors.TimeInPastError),
    (Op.EXTEND, msg(NOW + 5, "c1"), "c1", 7, NOW + 99, errors.StaleVersionError),
    (Op.RELEASE, msg(NOW + 5, "c1"), "c1", None, NOW - 1, errors.TimeInPastError),
    (Op.RELEASE, msg(NOW + 5, "c2"), "c1", None, None, errors.NotHolderError),
    (Op.DELETE_BY_HOLDER, msg(NOW - 1, "c1"), "c1", None, None, errors.LeaseExpiredError),
    (Op.DELETE_BY_OWNER, msg(NOW + 5), "intruder", None, None, errors.NotOwnerError),
    (Op.DELETE_BY_OWNER, msg(NOW + 5, "c1"), "owner", None, None, errors.LeasedError),
    (Op.MOVE, msg(NOW - 5), "owner", None, NOW + 50, errors.NotWaitingError),
    (Op.MOVE, msg(NOW + 5, "c1"), "owner", None, NOW + 50, errors.NotWaitingError),
    (Op.MOVE, msg(NOW + 5), "other", None, NOW + 50, errors.NotOwnerError),
    # The condition holds now: the message changed between statement and read.
    (Op.LEASE, msg(NOW - 5), "c1", None, None, errors.ConcurrentChangeError),
    (Op.DELETE_BY_OWNER, msg(NOW + 5), "owner", None, None, errors.ConcurrentChangeError),
]


@pytest.mark.parametrize(("op", "message", "actor", "version", "target", "error"), REFUSALS)
def test_refusals_name_the_rule(op, message, actor, version, target, error):
    found = model.explain_refusal(
        op, message, NOW, actor=actor, expected_version=version, target_ms=target
    )
    assert type(found) is error
    assert str(found).startswith(f"[{error.rule}]")


def test_generated_ids_sort_by_time_and_are_unique():
    ids = [model.new_id(now_ms=1_000 + i // 10) for i in range(100)]
    assert len(set(ids)) == 100
    assert all(len(i) == 26 for i in ids)
    assert model.new_id(now_ms=1) < model.new_id(now_ms=2) < model.new_id(now_ms=2**40)


def test_buckets_are_stable_and_spread():
    assert model.bucket_of("order-17", 16) == model.bucket_of("order-17", 16)
    counts = [0] * 8
    for i in range(8_000):
        counts[model.bucket_of(f"m{i}", 8)] += 1
    assert min(counts) > 800


@pytest.mark.parametrize("bad", ["", "x" * 201, 5, "a\x00b", "a\ud800b"])
def test_bad_ids_are_refused(bad):
    with pytest.raises(errors.InvalidMessageError):
        model.check_id(bad)


@pytest.mark.parametrize(
    ("bad", "said"), [("tl\x00", "NUL"), ("tl\udfff", "lone surrogate"), ("a\tb", "control")]
)
def test_names_postgresql_cannot_hold_are_refused_naming_why(bad, said):
    with pytest.raises(errors.InvalidMessageError, match=said) as info:
        model.check_name("timeline", bad)
    assert str(info.value).startswith("[invalid-input]")


@pytest.mark.parametrize("bad", ["", "é" * 3, "x" * 101, "\ud800", None])
def test_bad_tokens_are_refused(bad):
    with pytest.raises(errors.InvalidMessageError):
        model.check_token(bad)


def test_tokens_are_unguessable_and_kept_as_hashes():
    bases = {model.new_token_base() for _ in range(1_000)}
    assert len(bases) == 1_000
    base = bases.pop()
    tokens = [model.lease_token(base, n) for n in (1, 2)]
    for token in tokens:
        model.check_token(token)
        assert len(token) >= 32 and base not in model.token_hash(token)
    hashes = [model.token_hash(t) for t in tokens]
    assert hashes[0] != hashes[1] and len(hashes[0].partition(".")[0]) == 64
    assert model.token_hash(model.lease_token(bases.pop(), 1)) != hashes[0]


def test_a_lease_longer_than_366_days_is_refused_naming_the_rule():
    model.check_lease(MAX_LEASE_MS)
    with pytest.raises(errors.LeaseTooLongError, match=r"^\[lease-too-long\]"):
        model.check_lease(MAX_LEASE_MS + 1)


def test_refusals_of_a_holder_with_the_wrong_token_or_too_far_an_extension():
    leased = msg(NOW + 5, holder="c1")
    wrong = model.explain_refusal(Op.EXTEND, leased, NOW, actor="c1", token_matches=False)
    assert type(wrong) is errors.LeaseTokenError and isinstance(wrong, errors.NotHolderError)
    assert str(wrong).startswith("[lease-token]")
    for op in (Op.RELEASE, Op.DELETE_BY_HOLDER):
        assert type(model.explain_refusal(op, leased, NOW, actor="c1", token_matches=False)) is (
            errors.LeaseTokenError
        )
    # Another holder is named as such, whatever the token.
    other = model.explain_refusal(Op.EXTEND, leased, NOW, actor="c2", token_matches=False)
    assert type(other) is errors.NotHolderError
    far = model.explain_refusal(
        Op.EXTEND, leased, NOW, actor="c1", target_ms=NOW + MAX_LEASE_MS + 1
    )
    assert type(far) is errors.LeaseTooLongError
    at_bound = model.explain_refusal(
        Op.EXTEND, leased, NOW, actor="c1", target_ms=NOW + MAX_LEASE_MS
    )
    assert type(at_bound) is errors.ConcurrentChangeError


@pytest.mark.parametrize("bad", [-1, 2**62, 1.5, True, "7"])
def test_bad_timestamps_are_refused(bad):
    with pytest.raises(errors.InvalidMessageError):
        model.check_timestamp("timestamp_ms", bad)


def test_buckets_are_spread_over_live_consumers():
    members = ["b", "a", "c"]
    spread = [assigned_buckets(8, members, m) for m in ("a", "b", "c")]
    assert spread == [[0, 3, 6], [1, 4, 7], [2, 5]]
    assert assigned_buckets(4, ["a"], "zz") == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("next_due", "now", "max_idle", "delay"),
    [(None, 0, 1_000, 1_000), (150, 100, 1_000, 50), (50, 100, 1_000, 0), (9_999, 0, 500, 500)],
)
def test_sleep_until_next_due_time_at_most_max_idle(next_due, now, max_idle, delay):
    assert wake_delay_ms(next_due, now, max_idle) == delay


@pytest.mark.parametrize(
    ("limit", "got", "following"),
    [
        (1_000, 1_000, 2_000),  # full: behind, ask for more
        (2_000, 2_000, 4_000),
        (8_000, 8_000, 16_000),
        (16_000, 16_000, 16_000),  # at most 16 x the base
        (16_000, 15_999, 1_000),  # short: caught up, back to the base
        (1_000, 0, 1_000),
    ],
)
def test_a_relay_that_is_behind_takes_larger_batches(limit, got, following):
    assert next_batch_limit(limit, got, 1_000) == following


def test_percentile_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 0.5) == 50
    assert percentile(values, 0.99) == 99
    assert percentile([], 0.5) == 0.0


@pytest.mark.parametrize(
    "make",
    [
        lambda: TimelineConfig(""),
        lambda: TimelineConfig("t", buckets=0),
        lambda: TimelineConfig("t", max_body_bytes=-1),
        lambda: ConsumerConfig("c", heartbeat_ms=5_000, member_ttl_ms=5_000),
        lambda: ConsumerConfig("c", batch_size=0),
        lambda: RelayConfig(""),
    ],
)
def test_bad_settings_are_refused(make):
    with pytest.raises(errors.ConfigurationError):
        make()


def test_wire_round_trip():
    message = ScheduledMessage("m-1", 1_700_000_000_000, b"\x00\xff", "grp", "tl")
    assert decode_scheduled(encode_scheduled(message)) == message


def test_message_headers_are_checked_and_kept_byte_for_byte() -> None:
    given = (("trace-id", b"ab"), ("hop", b""), ("hop", b"\xff\x00"))
    assert model.check_headers(list(given)) == given
    assert model.check_headers({"k": bytearray(b"v")}) == (("k", b"v"),)
    assert model.check_headers(None) == () and model.encode_headers(()) is None
    assert (
        model.decode_headers(model.encode_headers(given)) == given
        and model.decode_headers(None) == ()
    )
    for bad, named in [
        ([("tidemark-id", b"x")], "header 0 ('tidemark-id'): names starting 'tidemark-'"),
        ([("k", "text")], "header 0 ('k'): value must be bytes, got str"),
        ([("", b"x")], "header 0 name must be 1..200 characters"),
        ([("k",)], "header 0: must be a (name, value) pair"),
        ("k=v", "headers must be (name, value) pairs or a mapping, got str"),
    ]:
        with pytest.raises(errors.InvalidMessageError) as caught:
            model.check_headers(bad)
        assert named in str(caught.value)


def test_the_kafka_producer_refuses_an_event_time_message_naming_the_other_producer():
    """Both producers share ``put``; the scheduled_message record has no stream field, so
    an event-time message through Kafka is refused before anything is queued."""
    from tidemark.pipelines.timeline.exceptions import InvalidMessageError
    from tidemark.pipelines.timeline.producer import KafkaTimelineProducer

    producer = KafkaTimelineProducer("127.0.0.1:1", "timeline-in", "reminders", "signup")
    with pytest.raises(InvalidMessageError, match="with TimelineProducer"):
        producer.put(b"x", due_at_stream_time=("shop/orders", 5), id="m1")
    with pytest.raises(InvalidMessageError, match="exactly one of"):
        producer.put(b"x", timestamp_ms=5, delay_ms=5)
    producer.close()  # nothing queued: returns at once


def test_a_lease_token_never_reads_as_a_command_line_option():
    from tidemark.pipelines.timeline.model import new_token_base

    assert not any(new_token_base().startswith("-") for _ in range(2_000))


@pytest.mark.parametrize(
    ("deleted_at", "headers", "due_stream"),
    [(None, None, None), (7, model.encode_headers((("h", b"\x00v"),)), "shop/orders")],
)
def test_rows_become_the_same_messages_and_leases_as_their_constructors(
    deleted_at, headers, due_stream
):
    """The store fills a row's Message and Lease without their __init__ (client time):
    every field set, equal to what the constructors make."""
    from dataclasses import fields

    from tidemark.pipelines.timeline.model import Lease
    from tidemark.pipelines.timeline.store import _lease, _message

    row = ("tl", "m1", 42, b"body", "owner", "c1", 3, 5, deleted_at, due_stream, headers)
    row += (40, 41, due_stream)
    made = _lease(row, "token.1")
    want = Message(
        "tl",
        "m1",
        42,
        b"body",
        "owner",
        "c1",
        3,
        5,
        deleted_at is not None,
        due_stream,
        model.decode_headers(headers),
    )
    assert made == Lease(want, 40, 41, due_stream, "token.1")
    assert set(vars(made.message)) == {f.name for f in fields(Message)}
    assert set(vars(made)) == {f.name for f in fields(Lease)}
    assert _message(row) == want and hash(_message(row)) == hash(want)
