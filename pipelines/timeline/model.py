"""The timeline's values and rules, without I/O.

    >>> m = Message("t", "a", 1_000, b"x", "billing", None, 3, 1)
    >>> m.status(now_ms=999), m.status(now_ms=1_000)
    (<Status.WAITING: 'waiting'>, <Status.AVAILABLE: 'available'>)

A message's status is derived from its fields and a time (the database's
``now()`` in the store): **available** when its timestamp has come (new,
released, or a lease that ran out), **waiting** when in the future without a
lease, **processing** when in the future under a lease (the timestamp is then
the end of the lease). :func:`explain_refusal` turns a refused operation and
a snapshot of the message into the error naming the rule; the store only
calls it after the atomic statement changed nothing.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import json
import os
import secrets
import time
import zlib
from dataclasses import dataclass

from tidemark.controller.exceptions import InvalidTimestampError
from tidemark.controller.timestamps import check_timestamp as check_time
from tidemark.pipelines.timeline.exceptions import (
    ConcurrentChangeError,
    InvalidMessageError,
    LeasedError,
    LeaseExpiredError,
    LeaseTokenError,
    LeaseTooLongError,
    MessageNotFoundError,
    NotAvailableError,
    NotHolderError,
    NotOwnerError,
    NotWaitingError,
    StaleVersionError,
    TimeInPastError,
    TimelineError,
)

MAX_ID_CHARS = 200
MAX_NAME_CHARS = 200
MAX_TIMESTAMP_MS = 2**62
MAX_LEASE_MS = 366 * 86_400_000
"""The longest lease, and the farthest an extension may reach past the database's now."""
MAX_TOKEN_CHARS = 100
MAX_STREAM_TIME_LEAD_MS = 300_000
"""How far a recorded stream time may be ahead of the database's clock (clock skew)."""


class Status(enum.Enum):
    AVAILABLE = "available"
    WAITING = "waiting"
    PROCESSING = "processing"


class Op(enum.Enum):
    """The operations whose conditions the store checks atomically."""

    LEASE = "lease"
    EXTEND = "extend"
    RELEASE = "release"
    DELETE_BY_OWNER = "delete-by-owner"
    DELETE_BY_HOLDER = "delete-by-holder"
    MOVE = "move"


@dataclass(frozen=True)
class Message:
    """One scheduled message; ``id``, ``bucket``, ``body`` and ``producer_group`` never change."""

    timeline: str
    id: str
    timestamp_ms: int
    body: bytes
    producer_group: str
    lock_consumer: str | None
    bucket: int
    version: int
    deleted: bool = False
    due_stream: str | None = None
    """Set while the message waits for this stream's watermark to reach ``timestamp_ms``
    (an event time); its first lease clears it."""
    headers: Headers = ()
    """Kafka headers the relay delivers with the body (:func:`check_headers`)."""

    def status(self, now_ms: int, stream_time_ms: int | None = None) -> Status:
        """``stream_time_ms``: the watermark time of ``due_stream`` (unknown: waiting)."""
        if self.due_stream is not None and self.lock_consumer is None:
            reached = stream_time_ms is not None and self.timestamp_ms <= stream_time_ms
            return Status.AVAILABLE if reached else Status.WAITING
        if self.timestamp_ms <= now_ms:
            return Status.AVAILABLE
        return Status.WAITING if self.lock_consumer is None else Status.PROCESSING

    def leased_by(self, consumer: str, now_ms: int) -> bool:
        """True while ``consumer`` holds a live lease."""
        return self.lock_consumer == consumer and self.timestamp_ms > now_ms


@dataclass(frozen=True)
class Lease:
    """A message handed to a consumer: held until ``message.timestamp_ms`` (database time).

    ``due_ms`` is the timestamp the message had when it was leased (for
    restored leases, unknown: the lease end); ``leased_at_ms`` the database's
    now at that moment.
    """

    message: Message
    due_ms: int
    leased_at_ms: int
    due_stream: str | None = None
    """The stream whose watermark made it due (``due_ms`` is then an event time)."""
    token: str | None = None
    """The capability to extend, release or delete under this lease (None: not known here,
    e.g. a lease listed by :meth:`TimelineStore.leases_of`)."""

    @property
    def until_ms(self) -> int:
        return self.message.timestamp_ms


@dataclass(frozen=True)
class Counts:
    """Messages with a timestamp in a range, by status at the database's now."""

    total: int
    available: int
    waiting: int
    processing: int


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_id(now_ms: int | None = None) -> str:
    """A 26-character id that sorts by creation time (48-bit ms + 80 random bits)."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms & (2**48 - 1)) << 80 | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_token_base() -> str:
    """The secret of one lease call (192 random bits): its n-th lease's token is ``<base>.<n>``.

    One secret per call, not per lease, keeps a batch as cheap as before; the
    leases of a batch go to one holder, who can tell their tokens apart anyway.
    Never starting with ``-``: a token on a command line (``--token T``) must not
    read as an option (1 in 64 did, and ``timeline delete --token`` refused it).
    """
    while True:
        base = secrets.token_urlsafe(24)
        if not base.startswith("-"):
            return base


def lease_token(base: str, n: int) -> str:
    return f"{base}.{n}"


def base_hash(base: str) -> str:
    return hashlib.sha256(base.encode("ascii")).hexdigest()


def token_hash(token: str) -> str:
    """What the store keeps of a token: the SHA-256 (hex) of its secret, then ``.<n>``
    (a leaked table grants nothing)."""
    base, _, n = token.rpartition(".")
    return f"{base_hash(base)}.{n}"


def bucket_of(message_id: str, buckets: int) -> int:
    """The bucket a message id falls in (stable across processes and versions)."""
    return zlib.crc32(message_id.encode()) % buckets


def check_text(what: str, value: str, limit: int = MAX_NAME_CHARS) -> None:
    """A name, id or token: 1..``limit`` characters PostgreSQL text can hold as UTF-8.

    NUL and lone surrogates are refused here, naming the rule, rather than by the
    driver or the database with an error of their own.
    """
    if not isinstance(value, str) or not value or len(value) > limit:
        raise InvalidMessageError(f"{what} must be 1..{limit} characters, got {value!r}")
    if "\x00" in value:
        raise InvalidMessageError(f"{what} must not contain NUL characters: {value!r}")
    if not value.isascii() and any("\ud800" <= c <= "\udfff" for c in value):
        raise InvalidMessageError(f"{what} must be valid Unicode (a lone surrogate): {value!r}")


def check_name(what: str, value: str) -> None:
    check_text(what, value)
    if any(ord(c) < 32 for c in value):
        raise InvalidMessageError(f"{what} must not contain control characters: {value!r}")


def check_id(message_id: str) -> None:
    check_text("id", message_id, MAX_ID_CHARS)


def check_token(token: str) -> None:
    check_text("lease token", token, MAX_TOKEN_CHARS)
    if not token.isascii():
        raise InvalidMessageError(f"a lease token is ASCII, got {token!r}")


def check_lease(lease_ms: int) -> None:
    """A lease lasts 1 ms .. :data:`MAX_LEASE_MS` (checked before the database is asked)."""
    if isinstance(lease_ms, bool) or not isinstance(lease_ms, int):
        raise InvalidMessageError(f"a lease lasts an integer of ms, got {lease_ms!r}")
    if lease_ms > MAX_LEASE_MS:
        raise LeaseTooLongError(
            f"a lease lasts at most {MAX_LEASE_MS} ms (366 days), got {lease_ms!r}"
        )


Headers = tuple[tuple[str, bytes], ...]
"""A message's Kafka headers: ``(name, value)`` pairs, in order, names may repeat."""

RESERVED_HEADER_PREFIX = "tidemark-"
"""The relay's own headers (``tidemark-id`` ...) start with this; a message's may not."""


def check_headers(headers: object) -> Headers:
    """A message's headers, checked: ``(str, bytes)`` pairs (a mapping: its items), no
    name starting ``tidemark-`` (the relay's own), a name as :func:`check_name` wants.

    >>> check_headers({"trace-id": b"ab"})
    (('trace-id', b'ab'),)
    """
    if headers is None:
        return ()
    items = list(headers.items()) if isinstance(headers, dict) else headers
    if not isinstance(items, list | tuple):
        raise InvalidMessageError(
            f"headers must be (name, value) pairs or a mapping, got {type(headers).__name__}"
        )
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise InvalidMessageError(f"header {i}: must be a (name, value) pair, got {item!r}")
        name, value = item
        check_name(f"header {i} name", name)
        if name.startswith(RESERVED_HEADER_PREFIX):
            raise InvalidMessageError(
                f"header {i} ({name!r}): names starting {RESERVED_HEADER_PREFIX!r} are the "
                "relay's own (tidemark-id, tidemark-timeline, ...)"
            )
        if not isinstance(value, bytes | bytearray | memoryview):
            raise InvalidMessageError(
                f"header {i} ({name!r}): value must be bytes, got {type(value).__name__}"
            )
        out.append((name, bytes(value)))
    return tuple(out)


def encode_headers(headers: Headers) -> bytes | None:
    """As the store keeps them: JSON ``[[name, base64 value], ...]`` (None: no headers)."""
    if not headers:
        return None
    return json.dumps([[n, base64.b64encode(v).decode("ascii")] for n, v in headers]).encode()


def decode_headers(data: bytes | memoryview | None) -> Headers:
    if data is None:
        return ()
    return tuple((n, base64.b64decode(v)) for n, v in json.loads(bytes(data)))


def check_timestamp(what: str, value: int) -> None:
    """The one checker (``tidemark.controller.timestamps``) with the timeline's bound,
    below 2^62: a due time plus a lease stays within the database's bigint."""
    try:
        check_time(value, what, maximum=MAX_TIMESTAMP_MS - 1)
    except InvalidTimestampError as exc:
        raise InvalidMessageError(str(exc)) from None


def explain_refusal(
    op: Op,
    message: Message | None,
    now_ms: int,
    *,
    actor: str,
    expected_version: int | None = None,
    target_ms: int | None = None,
    stream_time_ms: int | None = None,
    token_matches: bool = True,
) -> TimelineError:
    """Why ``op`` by ``actor`` was refused, given the message as it is at ``now_ms``
    (and its ``due_stream``'s time, for an event-time message; ``token_matches``:
    whether the lease token given is the message's current one)."""
    if message is None or message.deleted:
        return MessageNotFoundError("no such message", None, None)
    timeline, mid = message.timeline, message.id
    where = f"message {mid!r} on timeline {timeline!r}"
    if expected_version is not None and expected_version != message.version:
        return StaleVersionError(
            f"{where} is at version {message.version}, not {expected_version}", timeline, mid
        )
    status = message.status(now_ms, stream_time_ms)
    if op is Op.LEASE:
        if status is Status.WAITING and message.due_stream is not None:
            known = "unknown" if stream_time_ms is None else str(stream_time_ms)
            return NotAvailableError(
                f"{where} is not due: it waits for stream {message.due_stream!r} to reach "
                f"time {message.timestamp_ms} (its watermark time: {known})",
                timeline,
                mid,
            )
        if status is Status.WAITING:
            return NotAvailableError(
                f"{where} is not due: due at {message.timestamp_ms}, now {now_ms}", timeline, mid
            )
        if status is Status.PROCESSING:
            return NotAvailableError(
                f"{where} is leased to {message.lock_consumer!r} until {message.timestamp_ms}",
                timeline,
                mid,
            )
    elif op in (Op.EXTEND, Op.RELEASE, Op.DELETE_BY_HOLDER):
        if message.lock_consumer != actor:
            holder = message.lock_consumer or "nobody"
            return NotHolderError(
                f"{where} is not leased to {actor!r} ({holder} holds it)", timeline, mid
            )
        if not token_matches:
            return LeaseTokenError(
                f"the lease token given is not the current one of {mid!r} (a newer lease "
                "replaced it, or it was never this consumer's)",
                timeline,
                mid,
            )
        if status is not Status.PROCESSING:
            return LeaseExpiredError(
                f"the lease of {actor!r} on {mid!r} ended at {message.timestamp_ms} (now {now_ms})",
                timeline,
                mid,
            )
        if op is Op.EXTEND and target_ms is not None and target_ms > now_ms + MAX_LEASE_MS:
            return LeaseTooLongError(
                f"extend of {mid!r} to {target_ms} is more than {MAX_LEASE_MS} ms (366 days) "
                f"after the database's now {now_ms}",
                timeline,
                mid,
            )
        if target_ms is not None and (
            target_ms <= now_ms if op is Op.EXTEND else target_ms < now_ms
        ):
            return TimeInPastError(
                f"{op.value} of {mid!r} to {target_ms} is not after the database's now {now_ms}",
                timeline,
                mid,
            )
    elif op in (Op.DELETE_BY_OWNER, Op.MOVE):
        if message.producer_group != actor:
            return NotOwnerError(
                f"{where} belongs to producer group {message.producer_group!r}, not {actor!r}",
                timeline,
                mid,
            )
        if op is Op.DELETE_BY_OWNER and status is Status.PROCESSING:
            return LeasedError(
                f"{where} is leased to {message.lock_consumer!r} until {message.timestamp_ms}; "
                "only the holder may delete it now",
                timeline,
                mid,
            )
        if op is Op.MOVE and status is not Status.WAITING:
            return NotWaitingError(f"{where} is {status.value}, not waiting", timeline, mid)
    return ConcurrentChangeError(f"{where} changed concurrently; retry", timeline, mid)
