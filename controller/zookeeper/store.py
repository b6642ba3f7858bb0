"""The metadata store in ZooKeeper, through kazoo.

    with zookeeper_session("127.0.0.1:2181") as client:   # tidemark.controller.zookeeper.session
        store = ZooKeeperStore(client, root="/tidemark")

Znode layout (under ``root``)::

    streams/<scope>                            a scope (``create_scope``; deleted only
                                               when empty: ZooKeeper refuses to delete
                                               a znode with children)
    streams/<scope>/<name>                     the stream record: JSON of configuration,
                                               state, current epoch, truncation record,
                                               sealed sizes, pending operation. Its znode
                                               version is the compare-and-set version.
    streams/<scope>/<name>/epochs/<0000000007> epoch 7: JSON of its segments and creation
                                               time. Created once, never changed.
    streams/<scope>/<name>/writers/<writer id> a writer id's registrations (the id as data;
                                               the name is ``naming.writer_node_name``)
    streams/<scope>/<name>/writers/<writer id>/r-<0000000012>
                                               one registered instance: JSON
                                               ``{"instance": token, "registered_at": ms}``
                                               (the writer's clock; the znode's creation
                                               time, ZooKeeper's clock, is when it holds
                                               the id from). Sequential: the highest is
                                               the current instance; the writer deletes
                                               all but the last ``KEPT_REGISTRATIONS``.

A session with credentials (``$TIDEMARK_ZK_AUTH``) makes a writer id's znode and its
registrations under an ACL: all rights for the principal that made them, reading for
anyone (the controller). Another principal's registration under that id is refused
(:class:`WriterIdOwnedError`); a mark with its token is then never heard.

A scale adds its epoch znode and rewrites the stream record in one ZooKeeper
transaction whose set checks the record's version, so a new epoch and the
record naming it appear together or not at all. Watchers watch the record
znode alone: every change, an added epoch included, rewrites it (a
registration does not: it is no change of the stream). Epochs
are cached (keyed by the record's creation zxid, so a re-created stream
of the same name does not see stale ones).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.recipe.watchers import DataWatch
from kazoo.security import ACL, CREATOR_ALL_ACL, READ_ACL_UNSAFE

from tidemark.controller.admission import Registration
from tidemark.controller.exceptions import (
    ConflictError,
    ControllerError,
    ScopeNotEmptyError,
    StreamExistsError,
    UnknownScopeError,
    UnknownStreamError,
    WriterIdOwnedError,
)
from tidemark.controller.metadata import (
    StreamMetadata,
    Versioned,
    epoch_from_dict,
    epoch_to_dict,
    json_bytes,
    json_from_bytes,
    record_from_dict,
    record_to_dict,
)
from tidemark.controller.model import Epoch
from tidemark.controller.naming import split_stream, writer_node_name
from tidemark.controller.store import (
    KEPT_REGISTRATIONS,
    MetadataStore,
    StreamCallback,
    check_append_only,
    check_scope_name,
)
from tidemark.controller.zookeeper.session import outages_named

log = logging.getLogger(__name__)


def _epoch_count(record: bytes) -> int:
    """Epochs a stream record names (0 when it names none readably: its decoding says why)."""
    try:
        return int(json_from_bytes(record)["current_epoch"]) + 1
    except (ValueError, KeyError, TypeError):
        return 0


@outages_named
class ZooKeeperStore(MetadataStore):
    def __init__(self, client: KazooClient, root: str = "/tidemark") -> None:
        self.client = client
        self.root = root.rstrip("/") or ""
        self._streams_path = f"{self.root}/streams"
        self._cache_lock = threading.Lock()
        self._epochs: dict[tuple[str, int, int], Epoch] = {}

    # --- paths -----------------------------------------------------------------------------

    def _stream_path(self, stream: str) -> str:
        scope, name = split_stream(stream)
        return f"{self._streams_path}/{scope}/{name}"

    def _epoch_path(self, stream: str, number: int) -> str:
        return f"{self._stream_path(stream)}/epochs/{number:010d}"

    def _writer_path(self, stream: str, writer_id: str) -> str:
        return f"{self._stream_path(stream)}/writers/{writer_node_name(writer_id)}"

    # --- reading ---------------------------------------------------------------------------

    def _epochs_of(self, stream: str, czxid: int, count: int) -> tuple[Epoch, ...]:
        out = []
        for number in range(count):
            key = (stream, czxid, number)
            with self._cache_lock:
                cached = self._epochs.get(key)
            if cached is None:
                try:
                    data, _ = self.client.retry(self.client.get, self._epoch_path(stream, number))
                except NoNodeError:
                    raise UnknownStreamError(stream, f"epoch {number} is missing") from None
                cached = self._remember_epoch(key, data)
            out.append(cached)
        return tuple(out)

    def _remember_epoch(self, key: tuple[str, int, int], data: bytes) -> Epoch:
        """Epoch znode ``data`` decoded and cached under ``(stream, czxid, number)``."""
        epoch = epoch_from_dict(json_from_bytes(data))
        with self._cache_lock:
            self._epochs[key] = epoch
        return epoch

    def _decode(self, stream: str, data: bytes, czxid: int) -> StreamMetadata:
        raw = json_from_bytes(data)
        epochs = self._epochs_of(stream, czxid, int(raw["current_epoch"]) + 1)
        return record_from_dict(raw, epochs)

    def catch_up(self) -> None:
        """A ``sync``: the session's server first applies every write the ensemble's
        leader has committed (ZooKeeper reads are otherwise only as fresh as the server
        the session happens to be connected to)."""
        self.client.retry(self.client.sync, self._streams_path or "/")

    def read_stream(self, stream: str) -> Versioned:
        try:
            data, stat = self.client.retry(self.client.get, self._stream_path(stream))
        except NoNodeError:
            raise UnknownStreamError(stream) from None
        return Versioned(self._decode(stream, data, stat.czxid), stat.version)

    def read_streams(self, streams: Sequence[str]) -> dict[str, Versioned]:
        """Several streams at once: every record is asked for before any answer is awaited,
        then every epoch not cached yet, so ``n`` streams wait about two round trips, not
        ``2 n``. A record whose read fails otherwise than by being absent (a lost
        connection) is read again on its own, with the client's retries; a malformed one
        raises as :meth:`read_stream` does."""
        pending = [(s, self.client.get_async(self._stream_path(s))) for s in dict.fromkeys(streams)]
        records: dict[str, tuple[bytes, Any]] = {}
        alone: list[str] = []
        for stream, answer in pending:
            try:
                records[stream] = answer.get()
            except NoNodeError:
                continue
            except KazooException:
                alone.append(stream)
        epochs = []
        for stream, (data, stat) in records.items():
            for number in range(_epoch_count(data)):
                key = (stream, stat.czxid, number)
                with self._cache_lock:
                    if key in self._epochs:
                        continue
                epochs.append((key, self.client.get_async(self._epoch_path(stream, number))))
        for key, answer in epochs:
            # a failed or malformed epoch is read again by _decode, which names the problem
            with contextlib.suppress(Exception):
                self._remember_epoch(key, answer.get()[0])
        found = {
            stream: Versioned(self._decode(stream, data, stat.czxid), stat.version)
            for stream, (data, stat) in records.items()
        }
        found.update(super().read_streams(alone))  # one by one, with the client's retries
        return found

    # --- writing ---------------------------------------------------------------------------

    def create_scope(self, scope: str) -> bool:
        check_scope_name(scope)
        self.client.retry(self.client.ensure_path, self._streams_path)
        try:
            self.client.retry(self.client.create, f"{self._streams_path}/{scope}", b"")
        except NodeExistsError:
            return False
        return True

    def delete_scope(self, scope: str) -> None:
        check_scope_name(scope)
        try:
            self.client.retry(self.client.delete, f"{self._streams_path}/{scope}")
        except NoNodeError:
            raise UnknownScopeError(scope) from None
        except NotEmptyError:
            raise ScopeNotEmptyError(scope, self.list_streams(scope)) from None

    def create_stream(self, metadata: StreamMetadata) -> Versioned:
        path = self._stream_path(metadata.name)
        tx = self.client.transaction()
        tx.create(path, json_bytes(record_to_dict(metadata)))
        tx.create(f"{path}/epochs", b"")
        for epoch in metadata.epochs:
            tx.create(
                self._epoch_path(metadata.name, epoch.number), json_bytes(epoch_to_dict(epoch))
            )
        results = tx.commit()
        if isinstance(results[0], NodeExistsError):
            raise StreamExistsError(metadata.name)
        if isinstance(results[0], NoNodeError):  # the scope's znode is missing
            raise UnknownScopeError(metadata.scope)
        self._raise_failures(metadata.name, results)
        return self.read_stream(metadata.name)

    def replace_stream(self, metadata: StreamMetadata, expected_version: int) -> Versioned:
        current = self.read_stream(metadata.name)
        if current.version != expected_version:
            raise ConflictError(f"stream {metadata.name!r}", expected_version, current.version)
        check_append_only(current.metadata, metadata)
        path = self._stream_path(metadata.name)
        tx = self.client.transaction()
        for epoch in metadata.epochs[len(current.metadata.epochs) :]:
            tx.create(
                self._epoch_path(metadata.name, epoch.number), json_bytes(epoch_to_dict(epoch))
            )
        tx.set_data(path, json_bytes(record_to_dict(metadata)), version=expected_version)
        results = tx.commit()
        if any(isinstance(r, BadVersionError | NodeExistsError) for r in results):
            found = self._version_or_none(path)
            raise ConflictError(f"stream {metadata.name!r}", expected_version, found)
        if any(isinstance(r, NoNodeError) for r in results):
            raise UnknownStreamError(metadata.name)
        self._raise_failures(metadata.name, results)
        stat = results[-1]
        return Versioned(metadata, stat.version)

    def delete_stream(self, stream: str, expected_version: int) -> None:
        path = self._stream_path(stream)
        try:
            epochs = self.client.retry(self.client.get_children, f"{path}/epochs")
        except NoNodeError:
            raise UnknownStreamError(stream) from None
        found = self._version_or_none(path)
        if found != expected_version:
            raise ConflictError(f"stream {stream!r}", expected_version, found)
        # Registrations first, on their own: a stream's writers may be many more than one
        # transaction holds. A writer registering meanwhile makes the delete a conflict.
        try:
            self.client.retry(self.client.delete, f"{path}/writers", recursive=True)
        except NoAuthError:
            raise ControllerError(
                f"stream {stream!r}: its writer registrations belong to ZooKeeper principals "
                "this session is not (their ACLs refuse the delete); delete it as ZooKeeper's "
                "super user"
            ) from None
        tx = self.client.transaction()
        for child in epochs:
            tx.delete(f"{path}/epochs/{child}")
        tx.delete(f"{path}/epochs")
        tx.delete(path, version=expected_version)
        results = tx.commit()
        if any(isinstance(r, BadVersionError | NotEmptyError) for r in results):
            raise ConflictError(f"stream {stream!r}", expected_version, self._version_or_none(path))
        if any(isinstance(r, NoNodeError) for r in results):
            raise UnknownStreamError(stream)
        self._raise_failures(stream, results)

    def _version_or_none(self, path: str) -> int | None:
        stat = self.client.retry(self.client.exists, path)
        return None if stat is None else int(stat.version)

    @staticmethod
    def _raise_failures(stream: str, results: list[Any]) -> None:
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            raise ControllerError(f"ZooKeeper refused an update of stream {stream!r}: {failures}")

    # --- writer registrations --------------------------------------------------------------

    def _owned_acl(self) -> list[ACL] | None:
        """The ACL of a writer id's znode and registrations: the session's principal may
        change them, anyone may read them; ``None`` (open) for an anonymous session."""
        if not self.client.auth_data:
            return None
        return [*CREATOR_ALL_ACL, *READ_ACL_UNSAFE]

    def register_writer(self, stream: str, writer_id: str, instance: str) -> bool:
        node = self._writer_path(stream, writer_id)
        kept = self._registration_names(node)
        if kept and self._registration(node, kept[-1], instance) is not None:
            return False
        data = json_bytes({"instance": instance, "registered_at": int(time.time() * 1000)})
        acl = self._owned_acl()
        create = self.client.create
        try:
            try:
                self.client.retry(create, f"{node}/r-", data, acl=acl, sequence=True)
            except NoNodeError:
                # Made one level at a time: never the stream's own znode (a deleted stream
                # stays deleted, and the missing record is the error). The id's own znode
                # is the principal's: nobody else may add registrations under it.
                writers = node.rsplit("/", 1)[0]
                for parent, value, owned in ((writers, b"", None), (node, writer_id.encode(), acl)):
                    try:
                        self.client.retry(create, parent, value, acl=owned)
                    except NodeExistsError:
                        pass
                    except NoNodeError:
                        raise UnknownStreamError(stream) from None
                self.client.retry(create, f"{node}/r-", data, acl=acl, sequence=True)
        except NoAuthError:
            raise WriterIdOwnedError(stream, writer_id) from None
        for old in self._registration_names(node)[:-KEPT_REGISTRATIONS]:
            with contextlib.suppress(NoNodeError):
                self.client.retry(self.client.delete, f"{node}/{old}")
        return True

    def writer_registrations(
        self, stream: str, writer_id: str, latest: bool = False
    ) -> tuple[Registration, ...]:
        """``latest``: ask the ZooKeeper server to catch up with its leader first (``sync``),
        so a registration written through another server just before is seen."""
        node = self._writer_path(stream, writer_id)
        if latest:
            self.client.retry(self.client.sync, node)
        names = self._registration_names(node)
        answers = [(name, self.client.get_async(f"{node}/{name}")) for name in names]
        found = []
        for name, answer in answers:
            try:
                data, stat = answer.get()
            except NoNodeError:  # pruned meanwhile
                continue
            registration = self._decode_registration(node, name, data, stat)
            if registration is not None:
                found.append(registration)
        return tuple(found)

    def _registration_names(self, node: str) -> list[str]:
        """The registration znodes under ``node``, oldest first (none: ``[]``)."""
        try:
            names = self.client.retry(self.client.get_children, node)
        except NoNodeError:
            return []
        return sorted(n for n in names if n.startswith("r-"))

    def _registration(self, node: str, name: str, instance: str) -> Registration | None:
        """Registration ``name`` when it holds ``instance``, else ``None``."""
        try:
            data, stat = self.client.retry(self.client.get, f"{node}/{name}")
        except NoNodeError:
            return None
        found = self._decode_registration(node, name, data, stat)
        return found if found is not None and found.instance == instance else None

    @staticmethod
    def _decode_registration(node: str, name: str, data: bytes, stat: Any) -> Registration | None:
        try:
            instance = json_from_bytes(data)["instance"]
        except (ValueError, KeyError, TypeError):
            instance = None
        if not isinstance(instance, str) or not instance:
            log.warning("registration %s/%s is not tidemark's JSON; ignored", node, name)
            return None
        return Registration(instance, int(stat.ctime))

    # --- listing and watching --------------------------------------------------------------

    def list_scopes(self) -> list[str]:
        try:
            return sorted(self.client.retry(self.client.get_children, self._streams_path))
        except NoNodeError:
            return []

    def list_streams(self, scope: str | None = None) -> list[str]:
        scopes = self.list_scopes()
        if scope is not None:
            if scope not in scopes:
                split_stream(f"{scope}/x")
                raise UnknownScopeError(scope)
            scopes = [scope]
        names: list[str] = []
        for sc in scopes:
            try:
                children = self.client.retry(self.client.get_children, f"{self._streams_path}/{sc}")
            except NoNodeError:
                continue
            names.extend(f"{sc}/{name}" for name in children)
        return sorted(names)

    def watch_stream(self, stream: str, callback: StreamCallback) -> None:
        self.read_stream(stream)  # an unknown stream fails here, naming it
        path = self._stream_path(stream)

        def on_data(data: bytes | None, stat: Any, event: Any = None) -> bool | None:
            if data is None or stat is None:
                return False  # deleted: the watch ends
            try:
                callback(self._decode(stream, data, stat.czxid))
            except Exception:
                log.exception("a watcher of stream %r failed", stream)
            return None

        DataWatch(self.client, path, on_data)

    def watch_once(self, streams: Iterable[str], on_change: Callable[[str], None]) -> None:
        """``on_change(stream)`` once, at the next change of each stream's record (an
        update, a scale, its deletion or creation), when the session's watches are reset,
        or when the watch could not be set (no watch: treat it as changed). The requests
        are sent without waiting for answers: ``n`` streams cost no round trip. Watch
        again after reading the stream anew (ZooKeeper watches fire once)."""
        for stream in streams:

            def fired(event: Any, stream: str = stream) -> None:
                on_change(stream)

            def answered(result: Any, stream: str = stream) -> None:
                if not result.successful():
                    on_change(stream)

            self.client.exists_async(self._stream_path(stream), watch=fired).rawlink(answered)


__all__ = ["ZooKeeperStore"]
