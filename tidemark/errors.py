"""The one root of every error tidemark raises.

Each package derives its own errors from :class:`TidemarkError` in its
``exceptions`` module, so ``except TidemarkError`` catches anything tidemark
refuses, and nothing else. This module imports nothing, so every package,
the pure core included, may depend on it.
"""

from __future__ import annotations


class TidemarkError(Exception):
    """Something tidemark refused or could not do; the message says what to change."""


class ConfigurationError(TidemarkError, ValueError):
    """A setting or argument is invalid; the message names it and the valid choices."""


class ServiceUnavailableError(TidemarkError):
    """A service a request needs does not answer; ``service`` names it (``ZooKeeper``,
    ``PostgreSQL``): start it, or check the address the service was given.

    Each adapter raises its own subclass (ZooKeeper's, Kafka's, PostgreSQL's, the time
    service's), with ``address`` (where it looked; ``None`` when it does not know) and
    ``reason`` (what happened, after the address: ``gave no answer in time``), so a caller
    tells the services apart by type. A subclass that also derives from another package's
    error (whose constructor passes one finished message on) sets these three attributes
    itself (:meth:`describe`)."""

    service: str
    address: str | None
    reason: str

    def __init__(self, service: str, detail: str | None = None, *, address: str | None = None):
        if detail is None:  # a co-parent's constructor passing its finished message on
            super().__init__(service)
            return
        super().__init__(f"{service} is unavailable: {detail}")
        self.describe(service, address, detail)

    def describe(self, service: str, address: str | None, reason: str) -> None:
        """Set :attr:`service`, :attr:`address` and :attr:`reason`."""
        self.service, self.address, self.reason = service, address, reason
