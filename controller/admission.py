"""Bounds on a writer mark before it may take part in a watermark (pure).

    >>> check_time(5_000, arrival_ms=4_000, max_future_ms=3_600_000) is None
    True
    >>> check_time(-1, arrival_ms=4_000, max_future_ms=3_600_000)
    'negative_time'
    >>> check_time(2**62, arrival_ms=4_000, max_future_ms=3_600_000)
    'future_time'

A mark's time is a claim by whoever wrote it. Trusted without limit, one
mark far in the future makes a stream look complete for a century, and every
later, honest mark of that writer ``stale_time``. So, in the spirit of
Kafka's ``message.timestamp.after.max.ms``: a mark whose time is more than
``max_future_ms`` ahead of its **arrival** (the marks topic's
``LogAppendTime``, the broker's clock, which a writer cannot forge) is
rejected, and so is a negative time. ``max_future_ms=None`` switches the
future bound off, for applications whose times are not milliseconds.

A mark's instance token is checked against the writer id's **registrations**
(:func:`check_registered`): a writer registers each instance's token in the
metadata store before its first mark, so a restarted writer is heard at once
and the instance it replaced stops counting. A mark under an id nobody
registered, or without a token, is refused (``unregistered``): an id belongs
to whoever may write its registration, never to whoever marks first.

The reasons are the values of ``tidemark.schemas.tables.Reason`` of the same names
(the pure core does not import ``schemas``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

NEGATIVE_TIME = "negative_time"
FUTURE_TIME = "future_time"
IMPERSONATED = "impersonated"
UNREGISTERED = "unregistered"
SUPERSEDED = "superseded"
RESTARTED = "restarted"
"""Not a rejection: a new instance takes the writer id from the instance bound to it."""

DEFAULT_MAX_FUTURE_MS = 3_600_000
"""One hour, Kafka's default ``message.timestamp.after.max.ms`` (KIP-1030)."""


def check_time(time_ms: int, arrival_ms: int | None, max_future_ms: int | None) -> str | None:
    """Why a mark's time is refused (``negative_time``, ``future_time``), or ``None``.

    ``arrival_ms`` is ``None`` when the record carries no broker time (then only
    the sign is checked); a time exactly ``max_future_ms`` ahead is accepted.
    """
    if time_ms < 0:
        return NEGATIVE_TIME
    if arrival_ms is None or max_future_ms is None:
        return None
    if time_ms - arrival_ms > max_future_ms:
        return FUTURE_TIME
    return None


@dataclass(frozen=True)
class Registration:
    """A writer instance registered under a writer id: its token, and when the store
    recorded it (``since_ms``, the store's clock). It holds the id until the next one."""

    instance: str
    since_ms: int


@dataclass(frozen=True)
class Holder:
    """The instance a writer id is bound to now (``instance=None``: marks without a
    token), and whether it is alive (it sent no shutdown mark)."""

    instance: str | None
    alive: bool = True


def check_registered(
    claimed: str | None,
    arrival_ms: int | None,
    registrations: Sequence[Registration],
    holder: Holder | None,
) -> str | None:
    """How a mark with token ``claimed`` that reached the broker at ``arrival_ms`` stands
    with the id's ``registrations`` (oldest first) and its ``holder`` (``None``: no
    instance holds the id): ``None`` (accepted: the holder's own mark, or nobody held
    the id), ``restarted`` (accepted: the mark's instance takes the id from the holder,
    alive or not), ``superseded`` (a registered instance's mark that arrived once a later
    instance was registered), ``unregistered`` (the id has no registrations, or the mark
    no token) or ``impersonated`` (a token never registered under the id).

    A registered token is heard at once, until the next registration; the holder it
    replaces stops counting. An unknown ``arrival_ms`` counts as later than any
    registration. Nothing is heard without a registration naming its token: neither a
    first mark nor a holder bound before registrations were required.

    >>> ab = [Registration("a1", 1_000), Registration("b2", 5_000)]
    >>> check_registered("b2", 6_000, ab, Holder("a1")), check_registered("a1", 4_000, ab, None)
    ('restarted', None)
    >>> check_registered("a1", 6_000, ab, Holder("b2")), check_registered("f0", 6_000, ab, None)
    ('superseded', 'impersonated')
    >>> check_registered("c3", 500, [], None), check_registered(None, 9, ab, Holder(None))
    ('unregistered', 'unregistered')
    """
    if claimed is None or not registrations:
        return UNREGISTERED
    index = _registered_at(registrations, claimed)
    if index is None:
        return IMPERSONATED
    later = registrations[index + 1 :]
    if later and (arrival_ms is None or arrival_ms >= later[0].since_ms):
        return SUPERSEDED
    if holder is None or holder.instance == claimed:
        return None
    held = _registered_at(registrations, holder.instance)
    if held is not None and held > index:  # the holder was registered after this instance
        return SUPERSEDED
    return RESTARTED


def _registered_at(registrations: Sequence[Registration], instance: str | None) -> int | None:
    """The index of ``instance``'s latest registration (``None``: it has none)."""
    if instance is None:
        return None
    for i in range(len(registrations) - 1, -1, -1):
        if registrations[i].instance == instance:
            return i
    return None


__all__ = [
    "DEFAULT_MAX_FUTURE_MS",
    "FUTURE_TIME",
    "IMPERSONATED",
    "NEGATIVE_TIME",
    "RESTARTED",
    "SUPERSEDED",
    "UNREGISTERED",
    "Holder",
    "Registration",
    "check_registered",
    "check_time",
]
