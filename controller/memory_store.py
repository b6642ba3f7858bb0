"""The in-memory metadata store, for unit tests and single-process demos.

    store = MemoryStore()
    store.create_stream(new_stream_metadata("s/x", StreamConfiguration(), now_ms=0))

Same contract as the ZooKeeper store (the shared contract tests run both):
versions start at 0 and grow by one per update; watchers are called
directly, after the update, outside the store's lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from tidemark.controller.admission import Registration
from tidemark.controller.exceptions import (
    ConflictError,
    ScopeNotEmptyError,
    StreamExistsError,
    UnknownScopeError,
    UnknownStreamError,
)
from tidemark.controller.metadata import StreamMetadata, Versioned
from tidemark.controller.store import (
    KEPT_REGISTRATIONS,
    MetadataStore,
    StreamCallback,
    check_append_only,
    check_scope,
    check_scope_name,
)

log = logging.getLogger(__name__)


class MemoryStore(MetadataStore):
    """``clock_ms``: when a registration is recorded (default: the wall clock)."""

    def __init__(self, clock_ms: Callable[[], int] | None = None) -> None:
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._lock = threading.RLock()
        self._streams: dict[str, Versioned] = {}
        self._scopes: set[str] = set()
        self._watchers: dict[str, list[StreamCallback]] = {}
        self._registrations: dict[tuple[str, str], list[Registration]] = {}

    def create_scope(self, scope: str) -> bool:
        check_scope_name(scope)
        with self._lock:
            if scope in self._scopes:
                return False
            self._scopes.add(scope)
            return True

    def delete_scope(self, scope: str) -> None:
        with self._lock:
            held = self.list_streams(scope)
            if held:
                raise ScopeNotEmptyError(scope, held)
            self._scopes.discard(scope)

    def create_stream(self, metadata: StreamMetadata) -> Versioned:
        with self._lock:
            if metadata.name in self._streams:
                raise StreamExistsError(metadata.name)
            if metadata.scope not in self._scopes:
                raise UnknownScopeError(metadata.scope)
            stored = Versioned(metadata, 0)
            self._streams[metadata.name] = stored
        self._notify(stored.metadata)
        return stored

    def read_stream(self, stream: str) -> Versioned:
        with self._lock:
            found = self._streams.get(stream)
        if found is None:
            raise UnknownStreamError(stream)
        return found

    def replace_stream(self, metadata: StreamMetadata, expected_version: int) -> Versioned:
        with self._lock:
            current = self.read_stream(metadata.name)
            if current.version != expected_version:
                raise ConflictError(f"stream {metadata.name!r}", expected_version, current.version)
            check_append_only(current.metadata, metadata)
            stored = Versioned(metadata, current.version + 1)
            self._streams[metadata.name] = stored
        self._notify(metadata)
        return stored

    def delete_stream(self, stream: str, expected_version: int) -> None:
        with self._lock:
            current = self.read_stream(stream)
            if current.version != expected_version:
                raise ConflictError(f"stream {stream!r}", expected_version, current.version)
            del self._streams[stream]
            self._watchers.pop(stream, None)
            for key in [k for k in self._registrations if k[0] == stream]:
                del self._registrations[key]

    def list_streams(self, scope: str | None = None) -> list[str]:
        with self._lock:
            check_scope(scope, sorted(self._scopes))
            return sorted(n for n in self._streams if scope is None or n.startswith(scope + "/"))

    def list_scopes(self) -> list[str]:
        with self._lock:
            return sorted(self._scopes)

    def watch_stream(self, stream: str, callback: StreamCallback) -> None:
        current = self.read_stream(stream)
        with self._lock:
            self._watchers.setdefault(stream, []).append(callback)
        callback(current.metadata)

    def register_writer(self, stream: str, writer_id: str, instance: str) -> bool:
        with self._lock:
            self.read_stream(stream)
            kept = self._registrations.setdefault((stream, writer_id), [])
            if kept and kept[-1].instance == instance:
                return False
            kept.append(Registration(instance, self._clock_ms()))
            del kept[:-KEPT_REGISTRATIONS]
            return True

    def writer_registrations(self, stream: str, writer_id: str) -> tuple[Registration, ...]:
        with self._lock:
            return tuple(self._registrations.get((stream, writer_id), ()))

    def _notify(self, metadata: StreamMetadata) -> None:
        with self._lock:
            callbacks = list(self._watchers.get(metadata.name, ()))
        for callback in callbacks:
            try:
                callback(metadata)
            except Exception:
                log.exception("a watcher of stream %r failed", metadata.name)


__all__ = ["MemoryStore"]
