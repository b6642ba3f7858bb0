"""Errors of the local services layer."""

from __future__ import annotations

from tidemark.errors import ConfigurationError, TidemarkError


class ServiceError(TidemarkError):
    """A local service could not be started, reached or stopped.

    The message names the service and the log file to read.
    """


class ServiceTimeout(ServiceError):
    """A service did not become ready in time; read its log (named in the message)."""


class MissingToolError(ServiceError):
    """Java, Maven or another required program is missing; install it and retry."""


class SetupRequiredError(ServiceError):
    """The JVM artifacts have not been resolved yet; run ``make setup``."""


__all__ = [
    "ConfigurationError",
    "MissingToolError",
    "ServiceError",
    "ServiceTimeout",
    "SetupRequiredError",
]
