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

The reasons are the values of ``schemas.tables.Reason`` of the same names
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
    none, under an id bound to a live instance.

    A writer id is bound to the instance token of its first accepted mark, until
    that instance shuts down or the controller forgets the writer (its timeout).
    After the shutdown mark, the next instance is heard at once, in the same
    micro-batch or a later one; a mark without a token never takes a bound id.
    Marks of writers older than the token (``bound is None``) bind on upgrade.

    >>> check_instance("a1", "a1") is None, check_instance(None, "b2") is None
    (True, True)
    >>> check_instance("a1", "b2"), check_instance("a1", None)
    ('impersonated', 'impersonated')
    >>> check_instance("a1", "b2", bound_alive=False), check_instance("a1", None, False)
    ('restarted', 'impersonated')
    """
    if bound is None or claimed == bound:
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
