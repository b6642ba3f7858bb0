"""Avro single-object encoding of tidemark's records, through fastavro.

    >>> data = encode("scheduled_message", {"id": "m1", "timestamp": 5, "body": b"x",
    ...                                      "producer_group": "g", "timeline": "t"})
    >>> data[:2]
    b'\\xc3\\x01'
    >>> decode(data)[0]
    'scheduled_message'

Framing (Avro specification, "single-object encoding"): two marker bytes
``0xC3 0x01``, the 8-byte little-endian CRC-64-AVRO (Rabin) fingerprint of
the writer schema's Parsing Canonical Form, then the Avro binary body.

Every version of every schema is kept as ``schemas/versions/<name>.v<N>.avsc``;
the highest ``N`` is the one :func:`encode` writes. :func:`decode` finds the
writer's schema by fingerprint among all kept versions and resolves it to the
reader schema (by default the current version of the same name), so a new
optional field (with a default) is read by an old reader and the other way
round. Never edit a released version: add ``v<N+1>``.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import to_parsing_canonical_form
from fastavro.validation import validate

from tidemark.schemas.exceptions import (
    DecodeError,
    EncodeError,
    SchemaFileError,
    SchemaMismatchError,
    UnknownFingerprintError,
    UnknownSchemaError,
)

MAGIC = b"\xc3\x01"
HEADER_SIZE = len(MAGIC) + 8
VERSIONS_DIR = Path(__file__).resolve().parent / "versions"

_FILE_NAME = re.compile(r"^(?P<name>[a-z][a-z0-9_]*)\.v(?P<version>[1-9][0-9]*)\.avsc$")

_EMPTY64 = 0xC15D213AA4D7A795


def _rabin_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY64 & -(fp & 1))
        table.append(fp)
    return tuple(table)


_RABIN_TABLE = _rabin_table()


def rabin_fingerprint(data: bytes) -> int:
    """CRC-64-AVRO, the 64-bit Rabin fingerprint the Avro specification defines."""
    fp = _EMPTY64
    for byte in data:
        fp = (fp >> 8) ^ _RABIN_TABLE[(fp ^ byte) & 0xFF]
    return fp


@dataclass(frozen=True)
class SchemaVersion:
    """One kept schema version: ``name``, ``version``, and its single-object header."""

    name: str
    version: int
    parsed: Any
    canonical_form: str
    fingerprint: int
    path: Path

    @property
    def label(self) -> str:
        return f"{self.name}.v{self.version}"

    @property
    def header(self) -> bytes:
        return MAGIC + self.fingerprint.to_bytes(8, "little")


def load_version(path: Path) -> SchemaVersion:
    """Parse one ``<name>.v<N>.avsc`` file."""
    match = _FILE_NAME.match(path.name)
    if not match:
        raise SchemaFileError(f"{path}: schema files are named <name>.v<N>.avsc")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        parsed = fastavro.parse_schema(raw, named_schemas={})
        canonical = to_parsing_canonical_form(raw)
    except Exception as exc:  # json, fastavro: any failure means a bad file
        raise SchemaFileError(f"{path}: not a valid Avro schema: {exc}") from exc
    return SchemaVersion(
        name=match["name"],
        version=int(match["version"]),
        parsed=parsed,
        canonical_form=canonical,
        fingerprint=rabin_fingerprint(canonical.encode("utf-8")),
        path=path,
    )


class SchemaRegistry:
    """Every kept version of every schema in one directory, indexed by name and fingerprint."""

    def __init__(self, directory: Path = VERSIONS_DIR) -> None:
        self.directory = directory
        versions = [load_version(p) for p in sorted(directory.glob("*.avsc"))]
        if not versions:
            raise SchemaFileError(f"{directory}: no <name>.v<N>.avsc files")
        self._by_label: dict[str, SchemaVersion] = {v.label: v for v in versions}
        self._by_fingerprint: dict[int, SchemaVersion] = {}
        for v in versions:
            clash = self._by_fingerprint.get(v.fingerprint)
            if clash is not None:
                raise SchemaFileError(
                    f"{v.path} and {clash.path} have the same canonical form; "
                    "a new version must change the schema"
                )
            self._by_fingerprint[v.fingerprint] = v
        self._current: dict[str, SchemaVersion] = {}
        for v in versions:
            if v.name not in self._current or v.version > self._current[v.name].version:
                self._current[v.name] = v

    def names(self) -> list[str]:
        return sorted(self._current)

    def versions(self) -> list[SchemaVersion]:
        return sorted(self._by_label.values(), key=lambda v: (v.name, v.version))

    def get(self, name: str) -> SchemaVersion:
        """``name`` (its current version) or ``name.vN`` (that version)."""
        found = self._current.get(name) or self._by_label.get(name)
        if found is None:
            raise UnknownSchemaError(
                f"no schema {name!r}; known: {', '.join(self.names())} "
                f"(or <name>.v<N>: {', '.join(sorted(self._by_label))})"
            )
        return found

    def by_fingerprint(self, fingerprint: int) -> SchemaVersion | None:
        return self._by_fingerprint.get(fingerprint)

    def encode(self, name: str, record: Mapping[str, Any], checked: Collection[str] = ()) -> bytes:
        """``record`` as single-object bytes with schema ``name`` (current or ``name.vN``).

        ``checked``: array fields whose items the caller has type-checked itself (a
        position of a thousand segments is most of a mark's validation); they are
        validated as empty arrays, and their items are still written strictly (a value
        out of a ``long``'s range is refused)."""
        version = self.get(name)
        if not isinstance(record, Mapping):
            raise EncodeError(
                f"{version.label}: a record must be a mapping of field names, "
                f"got {type(record).__name__}",
                record,
            )
        shape = {**record, **{f: [] for f in checked if isinstance(record.get(f), list)}}
        try:
            validate(shape, version.parsed, raise_errors=True, strict=True)
        except Exception as exc:  # fastavro's ValidationError and friends
            raise EncodeError(f"{version.label}: record does not match: {exc}", record) from exc
        buf = io.BytesIO()
        buf.write(version.header)
        try:
            fastavro.schemaless_writer(buf, version.parsed, dict(record), strict=True)
        except Exception as exc:
            raise EncodeError(f"{version.label}: cannot encode: {exc}", record) from exc
        return buf.getvalue()

    def writer_version(self, data: bytes) -> SchemaVersion:
        """The kept schema version ``data`` was written with (header checks only)."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise DecodeError(f"expected bytes, got {type(data).__name__}")
        data = bytes(data)
        if len(data) < HEADER_SIZE:
            raise DecodeError(
                f"truncated: {len(data)} bytes, a single-object header alone is {HEADER_SIZE}",
                data,
            )
        if data[:2] != MAGIC:
            raise DecodeError(
                f"not Avro single-object encoding: starts with {data[:2].hex()}, expected c301",
                data,
            )
        fingerprint = int.from_bytes(data[2:HEADER_SIZE], "little")
        version = self._by_fingerprint.get(fingerprint)
        if version is None:
            raise UnknownFingerprintError(
                f"unknown writer schema fingerprint {fingerprint:016x}; "
                f"known: {', '.join(sorted(self._by_label))}",
                data,
            )
        return version

    def decode(self, data: bytes, reader: str | None = None) -> tuple[str, dict[str, Any]]:
        """``(name, record)`` from single-object bytes, resolved to ``reader``.

        ``reader`` is a schema name (its current version) or ``name.vN``;
        ``None`` reads with the current version of the writer schema's name.
        """
        written = self.writer_version(data)
        target = self.get(reader if reader is not None else written.name)
        if target.name != written.name:
            raise SchemaMismatchError(
                f"record was written as {written.label}, cannot be read as {target.label}",
                bytes(data),
            )
        body = io.BytesIO(bytes(data)[HEADER_SIZE:])
        try:
            record = fastavro.schemaless_reader(
                body,
                written.parsed,
                None if target is written else target.parsed,
            )
        except fastavro.read.SchemaResolutionError as exc:
            raise SchemaMismatchError(
                f"{written.label} cannot be resolved to {target.label}: {exc}", bytes(data)
            ) from exc
        except Exception as exc:  # EOF, bad varint, bad UTF-8 ...
            raise DecodeError(
                f"{written.label}: corrupt or truncated body: {exc!r}", bytes(data)
            ) from exc
        rest = len(body.getbuffer()) - body.tell()
        if rest:
            raise DecodeError(f"{written.label}: {rest} bytes left after the record", bytes(data))
        if not isinstance(record, dict):
            raise DecodeError(f"{written.label}: not a record", bytes(data))
        return target.name, record


@lru_cache(maxsize=1)
def default_registry() -> SchemaRegistry:
    """The schemas shipped in ``schemas/versions`` (parsed once)."""
    return SchemaRegistry(VERSIONS_DIR)


def encode(name: str, record: Mapping[str, Any], checked: Collection[str] = ()) -> bytes:
    """Encode ``record`` with the current version of schema ``name`` (or ``name.vN``;
    ``checked``: see :meth:`SchemaRegistry.encode`)."""
    return default_registry().encode(name, record, checked)


def decode(data: bytes, reader: str | None = None) -> tuple[str, dict[str, Any]]:
    """Decode single-object bytes: ``(schema name, record)``; see :meth:`SchemaRegistry.decode`."""
    return default_registry().decode(data, reader)


__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "SchemaRegistry",
    "SchemaVersion",
    "decode",
    "default_registry",
    "encode",
    "load_version",
    "rabin_fingerprint",
]
