"""The stream state machine: the states and every legal transition, in one place.

    >>> require_transition("s/x", StreamState.ACTIVE, StreamState.SCALING)
    >>> require_transition("s/x", StreamState.SEALED, StreamState.SCALING)
    Traceback (most recent call last):
    ...
    tidemark.controller.exceptions.StreamSealedError: stream 's/x' cannot go from sealed to ...

Legal transitions::

    creating   -> active | deleting   (a half-created stream can always be removed)
    active     -> updating | scaling | truncating | sealing
    updating   -> active
    scaling    -> active
    truncating -> active
    sealing    -> sealed
    sealed     -> deleting
    deleting   -> (gone: the metadata is removed)

One operation runs on a stream at a time: the *-ing states are busy, and a
second operation gets :class:`ConcurrentOperationError` ("stream is scaling").
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from tidemark.controller.exceptions import (
    ConcurrentOperationError,
    IllegalTransitionError,
    StreamNotSealedError,
    StreamSealedError,
)


class StreamState(StrEnum):
    CREATING = "creating"
    ACTIVE = "active"
    UPDATING = "updating"
    SCALING = "scaling"
    TRUNCATING = "truncating"
    SEALING = "sealing"
    SEALED = "sealed"
    DELETING = "deleting"


S = StreamState

TRANSITIONS: Mapping[StreamState, frozenset[StreamState]] = {
    S.CREATING: frozenset({S.ACTIVE, S.DELETING}),
    S.ACTIVE: frozenset({S.UPDATING, S.SCALING, S.TRUNCATING, S.SEALING}),
    S.UPDATING: frozenset({S.ACTIVE}),
    S.SCALING: frozenset({S.ACTIVE}),
    S.TRUNCATING: frozenset({S.ACTIVE}),
    S.SEALING: frozenset({S.SEALED}),
    S.SEALED: frozenset({S.DELETING}),
    S.DELETING: frozenset(),
}
"""state -> the states it may move to."""

BUSY: frozenset[StreamState] = frozenset(
    {S.CREATING, S.UPDATING, S.SCALING, S.TRUNCATING, S.DELETING}
)
"""States in which an operation is under way."""

WRITABLE: frozenset[StreamState] = frozenset({S.ACTIVE, S.UPDATING, S.SCALING, S.TRUNCATING})
"""States in which writers may append (to the current epoch's segments)."""


def is_legal(current: StreamState, target: StreamState) -> bool:
    return target in TRANSITIONS[current]


def require_transition(stream: str, current: StreamState, target: StreamState) -> None:
    """Return when ``current -> target`` is legal, else raise the most telling typed error."""
    if is_legal(current, target):
        return
    if current in (S.SEALING, S.SEALED) and target is not S.DELETING:
        raise StreamSealedError(stream, current, target, "the stream is sealed")
    if target is S.DELETING:
        raise StreamNotSealedError(stream, current, target, "seal the stream before deleting it")
    if current in BUSY:
        raise ConcurrentOperationError(
            stream, current, target, f"stream is {current}; retry when it is active"
        )
    raise IllegalTransitionError(stream, current, target)


def require_writable(stream: str, state: StreamState) -> None:
    """For writers: raise :class:`StreamSealedError` unless appends are allowed in ``state``."""
    if state not in WRITABLE:
        if state in (S.SEALING, S.SEALED, S.DELETING):
            raise StreamSealedError(stream, state, S.ACTIVE, "no writes to a sealed stream")
        raise IllegalTransitionError(stream, state, S.ACTIVE, f"stream is {state}; not writable")


__all__ = [
    "BUSY",
    "TRANSITIONS",
    "WRITABLE",
    "StreamState",
    "is_legal",
    "require_transition",
    "require_writable",
]
