"""Errors of the Delta adapter: one for a store that does not answer, one for settings."""

from __future__ import annotations

from tidemark.errors import ConfigurationError, ServiceUnavailableError


class DeltaUnavailableError(ServiceUnavailableError):
    """The Delta tables cannot be reached or read (no delta root given, an object store
    that does not answer, a table or version that cannot be opened). The message names
    the table or the store: start the store, or check the delta root and its options."""

    def __init__(self, detail: str) -> None:
        super().__init__("delta", detail)
        self.detail = detail

    def __str__(self) -> str:
        return self.detail


class StoreOutageError(DeltaUnavailableError, OSError):
    """The tables' object store did not answer for as long as a write waits for it (an
    ``OSError`` too, as delta-rs reports a store that does not answer)."""


class DeltaConfigurationError(ConfigurationError):
    """A setting of the Delta adapter (maintenance, table location) is invalid; the
    message names it."""


__all__ = ["DeltaConfigurationError", "DeltaUnavailableError", "StoreOutageError"]
