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

The reasons are the values of ``tidemark.schemas.tables.Reason`` of the same names
(the pure core does not import ``schemas``).
"""

from __future__ import annotations

NEGATIVE_TIME = "negative_time"
FUTURE_TIME = "future_time"
IMPERSONATED = "impersonated"
RESTARTED = "restarted"
"""Not a rejection: a new instance takes a writer id whose bound instance shut down."""

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

    A writer id is held by the token of its first accepted mark -- or by "no
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


__all__ = [
    "DEFAULT_MAX_FUTURE_MS",
    "FUTURE_TIME",
    "IMPERSONATED",
    "NEGATIVE_TIME",
    "RESTARTED",
    "check_instance",
    "check_time",
]
