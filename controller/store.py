"""The metadata store: one interface, an in-memory and a ZooKeeper implementation.

    store = MemoryStore()                    # or ZooKeeperStore(kazoo_client)
    store.create_scope("shop")               # a stream's scope must exist first
    v = store.create_stream(meta)            # Versioned(metadata, version)
    v = store.replace_stream(changed, v.version)   # compare-and-set
    store.watch_stream("shop/orders", on_change)   # on_change(StreamMetadata)
    store.register_writer("shop/orders", "w1", token)  # before the writer's first mark
    store.writer_registrations("shop/orders", "w1")    # (Registration, ...), oldest first

Every update is a compare-and-set on the version read: a lost race raises
:class:`~tidemark.controller.exceptions.ConflictError`, never overwrites silently.
Epochs are append-only: an update may add epochs, never change or drop one.
Scopes are explicit: a stream is created only in an existing scope, and a
scope is deleted only while it holds no stream (both checked atomically by
the store). A writer registers each instance (its token) under its writer id
before its first mark; the controller hears a registered instance at once
(``tidemark.controller.admission.check_registered``). A store keeps the last
:data:`KEPT_REGISTRATIONS` of each id.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence

from tidemark.controller.admission import Registration
from tidemark.controller.exceptions import (
    ConflictError,
    InvalidModelError,
    UnknownScopeError,
    UnknownStreamError,
)
from tidemark.controller.metadata import StreamMetadata, Versioned
from tidemark.controller.naming import split_stream
from tidemark.controller.states import require_writable

StreamCallback = Callable[[StreamMetadata], None]

KEPT_REGISTRATIONS = 16
"""Registrations a store keeps per writer id (older ones are dropped): enough for a
controller replaying the marks topic to tell the recent instances apart."""


class MetadataStore(abc.ABC):
    """Where streams' metadata lives. Implementations are safe to share between threads."""

    @abc.abstractmethod
    def create_scope(self, scope: str) -> bool:
        """Create ``scope``; ``False`` when it existed already (creating is idempotent)."""

    @abc.abstractmethod
    def delete_scope(self, scope: str) -> None:
        """Delete an empty scope: :class:`UnknownScopeError` if absent,
        :class:`ScopeNotEmptyError` while it holds a stream."""

    @abc.abstractmethod
    def create_stream(self, metadata: StreamMetadata) -> Versioned:
        """Store a new stream; :class:`StreamExistsError` if the name is taken,
        :class:`UnknownScopeError` when its scope does not exist."""

    @abc.abstractmethod
    def read_stream(self, stream: str) -> Versioned:
        """The stream's metadata and version; :class:`UnknownStreamError` naming it if absent."""

    @abc.abstractmethod
    def replace_stream(self, metadata: StreamMetadata, expected_version: int) -> Versioned:
        """Compare-and-set: replace the record if its version is still ``expected_version``.

        :class:`ConflictError` when it changed, :class:`UnknownStreamError` when it is gone.
        """

    @abc.abstractmethod
    def delete_stream(self, stream: str, expected_version: int) -> None:
        """Compare-and-delete the stream's metadata."""

    @abc.abstractmethod
    def list_streams(self, scope: str | None = None) -> list[str]:
        """Names (``scope/stream``), sorted; :class:`UnknownScopeError` for an unknown scope."""

    @abc.abstractmethod
    def list_scopes(self) -> list[str]:
        """Every scope that exists, sorted."""

    @abc.abstractmethod
    def watch_stream(self, stream: str, callback: StreamCallback) -> None:
        """Call ``callback(metadata)`` now and whenever the stream's metadata changes.

        Calls come from the store's own thread, in order; the watch ends when
        the stream is deleted. A callback must not block for long.
        """

    @abc.abstractmethod
    def register_writer(self, stream: str, writer_id: str, instance: str) -> bool:
        """Register ``instance`` as writer ``writer_id``'s current instance on ``stream``
        (before its first mark); ``False`` when it is already the current one.
        :class:`UnknownStreamError` when the stream does not exist."""

    @abc.abstractmethod
    def writer_registrations(self, stream: str, writer_id: str) -> tuple[Registration, ...]:
        """The id's registrations, oldest first (the last :data:`KEPT_REGISTRATIONS`);
        empty when it has none (or the stream does not exist)."""

    def get_stream(self, stream: str) -> StreamMetadata:
        """The stream's metadata; :class:`UnknownStreamError` naming it if absent."""
        return self.read_stream(stream).metadata

    def catch_up(self) -> None:
        """Make the reads that follow see every change committed before this call, by any
        client. A store whose sessions may read from a server behind the others (a
        ZooKeeper follower) waits for that server here; writers call it before reading
        the stream they open, which another process may have just created or changed.
        A store with one copy of its data has nothing to wait for."""
        return

    def open_for_writing(self, stream: str) -> StreamMetadata:
        """The stream's metadata for a writer opening it: read after :meth:`catch_up`, and
        refused (:func:`~tidemark.controller.states.require_writable`) unless writers may
        append to it now."""
        self.catch_up()
        metadata = self.get_stream(stream)
        require_writable(stream, metadata.state)
        return metadata

    def read_streams(self, streams: Sequence[str]) -> dict[str, Versioned]:
        """Several streams' metadata and versions (one each); absent streams are left out.

        A store that can ask for many records at once (ZooKeeper) overrides this so
        that ``n`` streams cost one round trip's wait, not ``n``."""
        found: dict[str, Versioned] = {}
        for stream in streams:
            try:
                found[stream] = self.read_stream(stream)
            except UnknownStreamError:
                continue
        return found


def check_append_only(old: StreamMetadata, new: StreamMetadata) -> None:
    """Refuse an update that renames the stream or changes or drops an epoch."""
    if old.name != new.name:
        raise InvalidModelError(f"cannot rename stream {old.name!r} to {new.name!r}")
    if new.epochs[: len(old.epochs)] != old.epochs:
        raise ConflictError(
            f"epochs of stream {old.name!r} (immutable once written)",
            len(old.epochs),
            len(new.epochs),
        )


def check_scope(scope: str | None, scopes: list[str]) -> None:
    if scope is not None and scope not in scopes:
        split_stream(f"{scope}/x")  # a malformed scope gets the naming error
        raise UnknownScopeError(scope)


def check_scope_name(scope: str) -> str:
    """``scope`` when it is a valid scope name, else the naming error."""
    split_stream(f"{scope}/x")
    return scope


__all__ = [
    "KEPT_REGISTRATIONS",
    "MetadataStore",
    "StreamCallback",
    "check_append_only",
    "check_scope",
    "check_scope_name",
]
