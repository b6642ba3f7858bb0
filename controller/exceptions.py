"""Errors of the control plane (model, metadata store, stream operations).

Every error names the offending value (stream, segment, range, offset, state)
and says what an operator can do about it.
"""

from __future__ import annotations

from tidemark.errors import ConfigurationError, ServiceUnavailableError, TidemarkError


class ControllerError(TidemarkError):
    """Root of the control plane's errors."""


class InvalidModelError(ControllerError, ValueError):
    """A model value is malformed (a key range outside [0, 1), a negative offset, ...)."""


class MarksTopicError(ControllerError, ConfigurationError):
    """The marks topic is missing (and may not be created) or has the wrong partition
    count; every writer and controller must agree on ``ClusterSettings.bucket_count``."""


class InvalidTimestampError(ControllerError, ValueError):
    """A timestamp is not an int of milliseconds within 0 … 2**63-1 (the one such
    error: writers, readers and seek all raise it; ``value`` is the input).

    Pass milliseconds since the epoch (13 digits for dates of this century);
    a classic mistake is passing seconds.
    """

    def __init__(self, message: str, value: object = None) -> None:
        self.value = value
        super().__init__(message)


class InvalidDurationError(ControllerError, ValueError):
    """A duration (a flag such as ``--ago`` or ``--timeout``, an HTTP parameter) does not
    parse: use ``<number><unit>`` with units ms, s, m, h, d (``90s``, ``15m``, ``1h30m``,
    ``2d``); ``value`` is the input."""

    def __init__(self, message: str, value: object = None) -> None:
        self.value = value
        super().__init__(message)


class InvalidConfigurationError(ControllerError, ConfigurationError):
    """A stream configuration is invalid; the message names the field and the valid choices."""


class UnknownStreamError(ControllerError, LookupError):
    """No stream of that name exists; check it (``scope/name``) with ``tidemark stream list``."""

    def __init__(self, stream: str, detail: str = "") -> None:
        self.stream = stream
        super().__init__(f"unknown stream {stream!r}" + (f": {detail}" if detail else ""))


class StreamNameCollisionError(ControllerError, ValueError):
    """Two stream names would map to Kafka topics that Kafka takes for the same one
    (``.`` and ``_`` collide: ``a_b/c`` and ``a/b_c``); pick another name."""

    def __init__(self, stream: str, existing: str) -> None:
        self.stream = stream
        self.existing = existing
        super().__init__(
            f"stream {stream!r} would collide with stream {existing!r} in Kafka, which takes "
            "'.' and '_' in topic names for the same character; pick another name"
        )


class UnknownScopeError(ControllerError, LookupError):
    """No scope of that name exists; create it first (``tidemark scope create SCOPE``)."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        super().__init__(
            f"unknown scope {scope!r}: create it first with `tidemark scope create {scope}` "
            "(or StreamManager.create_scope)"
        )


class ScopeNotEmptyError(ControllerError):
    """A scope that still holds streams cannot be deleted; seal and delete them first."""

    def __init__(self, scope: str, streams: list[str]) -> None:
        self.scope = scope
        self.streams = streams
        shown = ", ".join(streams[:5]) + (" ..." if len(streams) > 5 else "")
        super().__init__(
            f"scope {scope!r} holds {len(streams)} stream(s) ({shown}): "
            "seal and delete them before deleting the scope"
        )


class StreamExistsError(ControllerError):
    """A stream of that name exists already; describe it, or delete it first."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        super().__init__(f"stream {stream!r} exists already")


class IllegalTransitionError(ControllerError):
    """The stream's state does not allow the operation; the message names both states."""

    def __init__(self, stream: str, current: str, target: str, hint: str = "") -> None:
        self.stream = stream
        self.current = current
        self.target = target
        text = f"stream {stream!r} cannot go from {current} to {target}"
        super().__init__(text + (f": {hint}" if hint else ""))


class StreamSealedError(IllegalTransitionError):
    """The stream is sealed (or being sealed): nothing may be written, scaled or changed."""


class ConcurrentOperationError(IllegalTransitionError):
    """Another operation runs on the stream ("stream is scaling"); retry when it is active.

    Repeating the *same* request completes an interrupted operation.
    """


class StreamNotSealedError(IllegalTransitionError):
    """Only a sealed stream may be deleted; seal it first."""


class ConflictError(ControllerError):
    """A compare-and-set lost a race: the record changed since it was read. Read and retry."""

    def __init__(self, what: str, expected: int | None, found: int | None) -> None:
        self.what = what
        self.expected = expected
        self.found = found
        super().__init__(f"{what} changed concurrently: expected version {expected}, found {found}")


class InvalidScaleError(ControllerError, ValueError):
    """A scale request is malformed: unknown, sealed or non-adjacent segments, or new
    ranges that overlap, leave gaps or do not cover exactly the sealed ranges."""


class InvalidCutError(ControllerError, ValueError):
    """A stream cut is malformed, does not cover [0, 1), or lies behind the truncation point."""


class KafkaOperationError(ControllerError):
    """Kafka refused an admin operation; the message carries Kafka's error."""


class ZooKeeperUnavailableError(ControllerError, ServiceUnavailableError):
    """ZooKeeper did not answer (stopped, unreachable, or the session is being
    re-established); check that the ensemble named by the connect string is up."""

    def __init__(self, address: str, reason: str) -> None:
        ServiceUnavailableError.__init__(self, "ZooKeeper", f"{address} {reason}", address=address)
        self.reason = reason


class ZooKeeperConfigError(ControllerError, ConfigurationError):
    """The ZooKeeper settings are unusable (``$TIDEMARK_ZK_AUTH`` not ``user:password``);
    the message names the variable, never its value."""


class WriterIdOwnedError(ControllerError):
    """A writer id's registrations belong to another ZooKeeper principal: this session may
    not register under it. Use the principal that registered the id, or another id."""

    def __init__(self, stream: str, writer_id: str) -> None:
        self.stream = stream
        self.writer_id = writer_id
        super().__init__(
            f"writer id {writer_id!r} of stream {stream!r} is registered by another "
            "ZooKeeper principal: ZooKeeper refused this session's registration (NoAuth); "
            "register as that principal ($TIDEMARK_ZK_AUTH) or use another writer id"
        )


class KafkaUnavailableError(ControllerError, ServiceUnavailableError, TimeoutError):
    """No Kafka broker answered (stopped, unreachable, or every request timed out);
    check that the brokers named by the bootstrap servers are up. Also a
    :class:`TimeoutError`: a request that got no answer in time."""

    def __init__(self, address: str | None, reason: str) -> None:
        detail = reason if address is None else f"{address} {reason}"
        ServiceUnavailableError.__init__(self, "Kafka", detail, address=address)
        self.reason = reason


class AdoptionError(ControllerError):
    """An adopt or release request does not fit the stream or topic; the message says why.

    Also raised when an operation would break an adopted stream's promise: a
    scale of a stream whose producers route by Kafka's partitioner (adopt it
    with tidemark routing to allow scaling), or a delete, which would remove
    a topic tidemark did not create (``release`` unregisters it instead).
    """


__all__ = [
    "AdoptionError",
    "ConcurrentOperationError",
    "ConfigurationError",
    "ConflictError",
    "ControllerError",
    "IllegalTransitionError",
    "InvalidConfigurationError",
    "InvalidCutError",
    "InvalidDurationError",
    "InvalidModelError",
    "InvalidScaleError",
    "InvalidTimestampError",
    "KafkaOperationError",
    "KafkaUnavailableError",
    "MarksTopicError",
    "ScopeNotEmptyError",
    "StreamExistsError",
    "StreamNameCollisionError",
    "StreamNotSealedError",
    "StreamSealedError",
    "UnknownScopeError",
    "UnknownStreamError",
    "WriterIdOwnedError",
    "ZooKeeperConfigError",
    "ZooKeeperUnavailableError",
]
