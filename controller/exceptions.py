"""Errors of the control plane (model, metadata store, stream operations)."""

from __future__ import annotations

from tidemark.errors import ConfigurationError, TidemarkError


class ControllerError(TidemarkError):
    """Root of the control plane's errors."""


class InvalidModelError(ControllerError, ValueError):
    """A model value is malformed (a key range outside [0, 1), a negative offset, ...)."""


__all__ = ["ConfigurationError", "ControllerError", "InvalidModelError"]
