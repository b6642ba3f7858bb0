"""Errors of the schemas package: a record that cannot be encoded or decoded.

A record that cannot be decoded is data, not a crash: callers that consume a
topic catch :class:`DecodeError` and route the bytes (``error.data``) and the
reason to a dead-letter destination.
"""

from __future__ import annotations

from tidemark.errors import TidemarkError


class SchemaError(TidemarkError):
    """Root of the schema and codec errors."""


class SchemaFileError(SchemaError):
    """A ``.avsc`` file under ``schemas/versions`` is malformed or misnamed.

    Fix the file; names are ``<name>.v<N>.avsc`` and each must parse as Avro.
    """


class UnknownSchemaError(SchemaError, LookupError):
    """No schema of that name (or version) is kept; the message lists the known ones."""


class EncodeError(SchemaError, ValueError):
    """A record does not match its schema (a missing field, a wrong type, an extra field)."""

    def __init__(self, message: str, record: object = None) -> None:
        super().__init__(message)
        self.record = record


class DecodeError(SchemaError, ValueError):
    """Bytes that are not a record this project can read; ``data`` holds them."""

    def __init__(self, message: str, data: bytes = b"") -> None:
        super().__init__(message)
        self.data = data


class UnknownFingerprintError(DecodeError):
    """The writer's schema fingerprint matches no version kept in ``schemas/versions``.

    The record was written with a schema this build does not know: upgrade the
    reader, or add the writer's schema version to ``schemas/versions``.
    """


class SchemaMismatchError(DecodeError):
    """The writer's schema cannot be resolved to the requested reader schema."""


__all__ = [
    "DecodeError",
    "EncodeError",
    "SchemaError",
    "SchemaFileError",
    "SchemaMismatchError",
    "UnknownFingerprintError",
    "UnknownSchemaError",
]
