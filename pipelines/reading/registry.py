"""Where reader groups are recorded, and which reader owns which segment.

    registry = ZooKeeperGroupRegistry(kazoo_client, root="/tidemark")
    registry.create(GroupRecord("billing", "shop/orders", start_cut={0: 0}, created_at_ms=now))
    registry.join("billing", "reader-1")            # ephemeral: gone with the session
    registry.acquire("billing", segment_id, "reader-1")   # True when it got the segment

A group's *position* lives in Kafka (the consumer group's committed offsets);
the registry holds what Kafka cannot: the group's stream and the cut it was
started (or last moved) at, the readers online (with the times they report),
one owner per segment, so that two readers never read the same segment, and
the group's checkpoints (the one being taken, the readers' acknowledgements,
the taken ones). In ZooKeeper, the znodes
(``<root>/readergroups/<group>``, JSON of the record, with ephemeral
``readers/<reader>`` and ``owners/<segment>`` claims) are the control
plane's: ``tidemark.controller.zookeeper.groups``; this module adds the record's JSON and the
reading side's errors.

:class:`MemoryGroupRegistry` does the same within one process (tests,
single-process applications on the in-memory metadata store).
"""

from __future__ import annotations

import abc
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tidemark.controller.metadata import cut_from_json, cut_to_json, json_bytes, json_from_bytes
from tidemark.controller.zookeeper.groups import ZooKeeperGroups
from tidemark.pipelines.reading.exceptions import (
    DuplicateReaderError,
    ReaderConfigError,
    ReaderGroupExistsError,
    UnknownReaderGroupError,
)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,199}$")


def check_name(kind: str, name: object) -> str:
    """A group or reader name: 1-200 of ``[A-Za-z0-9._-]``, starting with a letter or digit."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ReaderConfigError(
            f"{kind} name must be 1-200 of [A-Za-z0-9._-] starting with a letter or digit, "
            f"got {name!r}"
        )
    return name


@dataclass(frozen=True)
class GroupRecord:
    """A reader group: its stream, and the cut it was started (or last moved) at.

    A group over several streams (``tidemark.pipelines.reading.streams_group``) is
    recorded with its ``streams`` (``stream`` then lists them, for messages);
    each stream is read by a member group of its own.
    """

    name: str
    stream: str
    start_cut: Mapping[int, int] = field(default_factory=dict)
    created_at_ms: int = 0
    streams: tuple[str, ...] = ()

    def to_json(self) -> bytes:
        raw: dict[str, object] = {
            "name": self.name,
            "stream": self.stream,
            "start_cut": cut_to_json(self.start_cut),
            "created_at_ms": self.created_at_ms,
        }
        if self.streams:
            raw["streams"] = list(self.streams)
        return json_bytes(raw)

    @classmethod
    def from_json(cls, data: bytes) -> GroupRecord:
        raw = json_from_bytes(data)
        return cls(
            str(raw["name"]),
            str(raw["stream"]),
            cut_from_json(raw.get("start_cut", {})),
            int(raw.get("created_at_ms", 0)),
            tuple(str(s) for s in raw.get("streams", ())),
        )

    def moved_to(self, cut: Mapping[int, int]) -> GroupRecord:
        return replace(self, start_cut=dict(cut))


class GroupRegistry(abc.ABC):
    """Reader groups, their online readers and segment owners. Thread-safe."""

    @abc.abstractmethod
    def create(self, record: GroupRecord) -> None:
        """Record a new group; :class:`ReaderGroupExistsError` if the name is taken."""

    @abc.abstractmethod
    def get(self, group: str) -> GroupRecord:
        """The group's record; :class:`UnknownReaderGroupError` if there is none."""

    @abc.abstractmethod
    def names(self) -> list[str]:
        """Every group's name, sorted."""

    @abc.abstractmethod
    def replace(self, record: GroupRecord) -> None:
        """Overwrite an existing group's record."""

    @abc.abstractmethod
    def delete(self, group: str) -> None:
        """Forget the group (nothing happens when it is unknown)."""

    @abc.abstractmethod
    def join(self, group: str, reader: str) -> None:
        """Mark ``reader`` online; :class:`DuplicateReaderError` if it already is."""

    @abc.abstractmethod
    def leave(self, group: str, reader: str) -> None:
        """Mark ``reader`` offline and release every segment it owns."""

    @abc.abstractmethod
    def readers(self, group: str) -> list[str]:
        """The online readers, sorted."""

    @abc.abstractmethod
    def owners(self, group: str) -> dict[int, str]:
        """Segment id -> the reader that owns it."""

    @abc.abstractmethod
    def acquire(self, group: str, segment: int, reader: str) -> bool:
        """Take ``segment`` for ``reader``; False when another reader owns it."""

    @abc.abstractmethod
    def release(self, group: str, segment: int, reader: str) -> None:
        """Give ``segment`` up (only if ``reader`` owns it)."""

    # reader times (``tidemark.pipelines.reading.balance``) and checkpoints
    # (``tidemark.pipelines.reading.checkpoints``), as bytes those modules encode

    @abc.abstractmethod
    def report(self, group: str, reader: str, data: bytes) -> None:
        """Store what an online ``reader`` reports (its times); gone when it leaves."""

    @abc.abstractmethod
    def reports(self, group: str) -> dict[str, bytes]:
        """Online reader -> its last report (``b""``: none yet)."""

    @abc.abstractmethod
    def request_checkpoint(self, group: str, name: str) -> bool:
        """Ask the readers for checkpoint ``name``; False while another is being taken."""

    @abc.abstractmethod
    def checkpoint_request(self, group: str) -> str | None:
        """The name of the checkpoint being taken, if any."""

    @abc.abstractmethod
    def end_checkpoint_request(self, group: str, name: str) -> None:
        """Withdraw the request for ``name`` and its acknowledgements."""

    @abc.abstractmethod
    def ack_checkpoint(self, group: str, name: str, reader: str) -> None:
        """``reader`` committed its position and holds still for ``name``."""

    @abc.abstractmethod
    def checkpoint_acks(self, group: str, name: str) -> set[str]:
        """The readers that acknowledged ``name``."""

    @abc.abstractmethod
    def save_checkpoint(self, group: str, name: str, data: bytes) -> bool:
        """Store a taken checkpoint in one write; False when the name is taken."""

    @abc.abstractmethod
    def checkpoint(self, group: str, name: str) -> bytes | None:
        """A taken checkpoint, or None."""

    @abc.abstractmethod
    def checkpoint_names(self, group: str) -> list[str]:
        """The taken checkpoints' names, sorted."""

    @abc.abstractmethod
    def delete_checkpoint(self, group: str, name: str) -> None:
        """Forget a taken checkpoint (nothing happens when it is unknown)."""


class MemoryGroupRegistry(GroupRegistry):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[str, GroupRecord] = {}
        self._readers: dict[str, set[str]] = {}
        self._owners: dict[str, dict[int, str]] = {}
        self._reports: dict[str, dict[str, bytes]] = {}
        self._requests: dict[str, str] = {}
        self._acks: dict[tuple[str, str], set[str]] = {}
        self._checkpoints: dict[str, dict[str, bytes]] = {}

    def create(self, record: GroupRecord) -> None:
        with self._lock:
            found = self._groups.get(record.name)
            if found is not None:
                raise ReaderGroupExistsError(record.name, found.stream)
            self._groups[record.name] = record

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._groups)

    def get(self, group: str) -> GroupRecord:
        with self._lock:
            found = self._groups.get(group)
        if found is None:
            raise UnknownReaderGroupError(group)
        return found

    def replace(self, record: GroupRecord) -> None:
        with self._lock:
            if record.name not in self._groups:
                raise UnknownReaderGroupError(record.name)
            self._groups[record.name] = record

    def delete(self, group: str) -> None:
        with self._lock:
            self._groups.pop(group, None)
            self._readers.pop(group, None)
            self._owners.pop(group, None)
            self._reports.pop(group, None)
            self._requests.pop(group, None)
            self._checkpoints.pop(group, None)

    def join(self, group: str, reader: str) -> None:
        with self._lock:
            online = self._readers.setdefault(group, set())
            if reader in online:
                raise DuplicateReaderError(group, reader)
            online.add(reader)

    def leave(self, group: str, reader: str) -> None:
        with self._lock:
            self._readers.get(group, set()).discard(reader)
            self._reports.get(group, {}).pop(reader, None)
            owners = self._owners.get(group, {})
            for seg in [s for s, r in owners.items() if r == reader]:
                del owners[seg]

    def readers(self, group: str) -> list[str]:
        with self._lock:
            return sorted(self._readers.get(group, ()))

    def owners(self, group: str) -> dict[int, str]:
        with self._lock:
            return dict(self._owners.get(group, {}))

    def acquire(self, group: str, segment: int, reader: str) -> bool:
        with self._lock:
            owners = self._owners.setdefault(group, {})
            if owners.get(segment, reader) != reader:
                return False
            owners[segment] = reader
            return True

    def release(self, group: str, segment: int, reader: str) -> None:
        with self._lock:
            owners = self._owners.get(group, {})
            if owners.get(segment) == reader:
                del owners[segment]

    def report(self, group: str, reader: str, data: bytes) -> None:
        with self._lock:
            if reader in self._readers.get(group, ()):
                self._reports.setdefault(group, {})[reader] = data

    def reports(self, group: str) -> dict[str, bytes]:
        with self._lock:
            got = self._reports.get(group, {})
            return {r: got.get(r, b"") for r in sorted(self._readers.get(group, ()))}

    def request_checkpoint(self, group: str, name: str) -> bool:
        with self._lock:
            if group in self._requests:
                return False
            self._requests[group] = name
            return True

    def checkpoint_request(self, group: str) -> str | None:
        with self._lock:
            return self._requests.get(group)

    def end_checkpoint_request(self, group: str, name: str) -> None:
        with self._lock:
            if self._requests.get(group) == name:
                del self._requests[group]
            self._acks.pop((group, name), None)

    def ack_checkpoint(self, group: str, name: str, reader: str) -> None:
        with self._lock:
            self._acks.setdefault((group, name), set()).add(reader)

    def checkpoint_acks(self, group: str, name: str) -> set[str]:
        with self._lock:
            return set(self._acks.get((group, name), ()))

    def save_checkpoint(self, group: str, name: str, data: bytes) -> bool:
        with self._lock:
            taken = self._checkpoints.setdefault(group, {})
            if name in taken:
                return False
            taken[name] = data
            return True

    def checkpoint(self, group: str, name: str) -> bytes | None:
        with self._lock:
            return self._checkpoints.get(group, {}).get(name)

    def checkpoint_names(self, group: str) -> list[str]:
        with self._lock:
            return sorted(self._checkpoints.get(group, {}))

    def delete_checkpoint(self, group: str, name: str) -> None:
        with self._lock:
            self._checkpoints.get(group, {}).pop(name, None)


MEMORY_REGISTRY = MemoryGroupRegistry()
"""The registry of groups on an in-memory metadata store (one per process)."""


class ZooKeeperGroupRegistry(GroupRegistry):
    """The registry in ZooKeeper, through ``tidemark.controller.zookeeper.groups`` (its znodes)."""

    def __init__(self, client: Any, root: str = "/tidemark") -> None:
        self.client = client
        self.groups = ZooKeeperGroups(client, root)
        self.base = self.groups.base

    def create(self, record: GroupRecord) -> None:
        if not self.groups.create(check_name("reader group", record.name), record.to_json()):
            raise ReaderGroupExistsError(record.name, self.get(record.name).stream)

    def names(self) -> list[str]:
        return self.groups.names()

    def get(self, group: str) -> GroupRecord:
        data = self.groups.get(check_name("reader group", group))
        if data is None:
            raise UnknownReaderGroupError(group)
        return GroupRecord.from_json(data)

    def replace(self, record: GroupRecord) -> None:
        if not self.groups.replace(check_name("reader group", record.name), record.to_json()):
            raise UnknownReaderGroupError(record.name)

    def delete(self, group: str) -> None:
        self.groups.delete(check_name("reader group", group))

    def join(self, group: str, reader: str) -> None:
        name = check_name("reader", reader)
        if not self.groups.join(check_name("reader group", group), name):
            raise DuplicateReaderError(group, reader)

    def leave(self, group: str, reader: str) -> None:
        self.groups.leave(check_name("reader group", group), reader)

    def readers(self, group: str) -> list[str]:
        return self.groups.readers(check_name("reader group", group))

    def owners(self, group: str) -> dict[int, str]:
        return self.groups.owners(check_name("reader group", group))

    def acquire(self, group: str, segment: int, reader: str) -> bool:
        return self.groups.acquire(check_name("reader group", group), segment, reader)

    def release(self, group: str, segment: int, reader: str) -> None:
        self.groups.release(check_name("reader group", group), segment, reader)

    def report(self, group: str, reader: str, data: bytes) -> None:
        self.groups.report(check_name("reader group", group), reader, data)

    def reports(self, group: str) -> dict[str, bytes]:
        return self.groups.reports(check_name("reader group", group))

    def request_checkpoint(self, group: str, name: str) -> bool:
        return self.groups.request_checkpoint(
            check_name("reader group", group), check_name("checkpoint", name)
        )

    def checkpoint_request(self, group: str) -> str | None:
        return self.groups.checkpoint_request(check_name("reader group", group))

    def end_checkpoint_request(self, group: str, name: str) -> None:
        self.groups.end_checkpoint_request(check_name("reader group", group), name)

    def ack_checkpoint(self, group: str, name: str, reader: str) -> None:
        self.groups.ack_checkpoint(check_name("reader group", group), name, reader)

    def checkpoint_acks(self, group: str, name: str) -> set[str]:
        return self.groups.checkpoint_acks(check_name("reader group", group), name)

    def save_checkpoint(self, group: str, name: str, data: bytes) -> bool:
        return self.groups.save_checkpoint(
            check_name("reader group", group), check_name("checkpoint", name), data
        )

    def checkpoint(self, group: str, name: str) -> bytes | None:
        return self.groups.checkpoint(
            check_name("reader group", group), check_name("checkpoint", name)
        )

    def checkpoint_names(self, group: str) -> list[str]:
        return self.groups.checkpoint_names(check_name("reader group", group))

    def delete_checkpoint(self, group: str, name: str) -> None:
        self.groups.delete_checkpoint(
            check_name("reader group", group), check_name("checkpoint", name)
        )


def registry_for(store: object, root: str = "/tidemark") -> GroupRegistry:
    """The registry that goes with a metadata store: ZooKeeper's for a
    ``ZooKeeperStore`` (same client, same root), else the process's in-memory one."""
    client = getattr(store, "client", None)
    if client is not None and hasattr(client, "ensure_path"):
        store_root = getattr(store, "root", None)
        return ZooKeeperGroupRegistry(client, store_root if isinstance(store_root, str) else root)
    return MEMORY_REGISTRY


__all__ = [
    "MEMORY_REGISTRY",
    "GroupRecord",
    "GroupRegistry",
    "MemoryGroupRegistry",
    "ZooKeeperGroupRegistry",
    "check_name",
    "registry_for",
]
