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
and the instance it replaced stops counting; ids without registrations keep
the first-mark binding (:func:`check_instance`).

The reasons are the values of ``tidemark.schemas.tables.Reason`` of the same names
(the pure core does not import ``schemas``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

NEGATIVE_TIME = "negative_time"
FUTURE_TIME = "future_time"
IMPERSONATED = "impersonated"
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


def check_instance(bound: str | None, claimed: str | None, bound_alive: bool = True) -> str | None:
    """``None`` when the mark may be accepted (and binds ``claimed``); ``restarted``
    when the bound instance sent its shutdown mark (``bound_alive=False``) and a
    new token claims the writer id; ``impersonated`` otherwise: another token, or
    none, under an id held by a live instance.

    The rule for ids without registrations (:func:`check_registered` applies it to
    them). A writer id is held by the token of its first accepted mark -- or by "no
    token" when that mark had none (a v1 writer) -- until that instance shuts down
    or the controller forgets the writer (its timeout). While it lives, a mark
    with another token is refused, and so is a mark without one under an id held
    by a token: nobody takes over a live writer's id, whichever marks it sends.
    After the shutdown mark, the first mark with a new token is heard at once, in
    the same micro-batch or a later one; a mark without a token never takes an
    id held by a token. Marks without a token cannot be told apart: any of them
    is heard under an id no token holds.

    >>> check_instance("a1", "a1") is None, check_instance(None, None) is None
    (True, True)
    >>> check_instance("a1", "b2"), check_instance("a1", None), check_instance(None, "b2")
    ('impersonated', 'impersonated', 'impersonated')
    >>> check_instance("a1", "b2", bound_alive=False), check_instance(None, "b2", False)
    ('restarted', 'restarted')
    >>> check_instance("a1", None, bound_alive=False)
    'impersonated'
    """
    if claimed == bound:
        return None
    if not bound_alive and claimed is not None:
        return RESTARTED
    return IMPERSONATED


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
    instance was registered) or ``impersonated`` (a token never registered under the id,
    or none).

    A registered token is heard at once, until the next registration; the holder it
    replaces stops counting. Marks that arrived before the id's first known registration,
    and every mark of an id that has none (a writer speaking the protocol by hand), follow
    :func:`check_instance`. An unknown ``arrival_ms`` counts as later than any registration.

    >>> ab = [Registration("a1", 1_000), Registration("b2", 5_000)]
    >>> check_registered("b2", 6_000, ab, Holder("a1")), check_registered("a1", 4_000, ab, None)
    ('restarted', None)
    >>> check_registered("a1", 6_000, ab, Holder("b2")), check_registered("f0", 6_000, ab, None)
    ('superseded', 'impersonated')
    >>> check_registered("c3", 500, ab, Holder("c3")), check_registered("c3", 9, [], Holder("a1"))
    (None, 'impersonated')
    """
    index = _registered_at(registrations, claimed)
    if index is None:
        before_any = not registrations or (
            arrival_ms is not None and arrival_ms < registrations[0].since_ms
        )
        if not before_any:
            return IMPERSONATED
        return None if holder is None else check_instance(holder.instance, claimed, holder.alive)
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
    "Holder",
    "Registration",
    "check_instance",
    "check_registered",
    "check_time",
]
