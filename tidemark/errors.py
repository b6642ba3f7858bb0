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
    """A service a request needs does not answer; ``service`` names it (``zookeeper``,
    ``postgresql``): start it, or check the address the service was given."""

    def __init__(self, service: str, detail: str) -> None:
        super().__init__(f"{service} is unavailable: {detail}")
        self.service = service
