"""Reader groups' znodes in ZooKeeper (beside ``tidemark.controller.zookeeper.store``).

    groups = ZooKeeperGroups(client, root="/tidemark")
    groups.create("billing", b'{"stream": "shop/orders", ...}')    # False if it exists
    groups.join("billing", "reader-1")                             # False if online already
    groups.acquire("billing", 7, "reader-1")                       # True when it got segment 7

Layout (under ``root``)::

    readergroups/<group>                  the group's record (bytes; JSON, written by
                                          ``tidemark.pipelines.reading.registry``)
    readergroups/<group>/readers/<reader> ephemeral: the reader is online
    readergroups/<group>/owners/<segment> ephemeral, data = reader name (a claim,
                                          ``tidemark.controller.zookeeper.claims``)
    readergroups/<group>/checkpoint-request ephemeral (the initiator's session), data =
                                          the name of the checkpoint being taken
    readergroups/<group>/checkpoint-acks/<name>/<reader>
                                          ephemeral: the reader committed and paused
    readergroups/<group>/checkpoints/<name>
                                          a taken checkpoint (bytes; JSON, written by
                                          ``tidemark.pipelines.reading.checkpoints``)

A reader's ``readers/<reader>`` node holds its last reported time (bytes).

Names are checked by the caller; results are plain values (``False``,
``None``), and the reading side turns them into its own errors. This is the
only place that touches reader-group znodes: ``pipelines`` reaches ZooKeeper
through it.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from tidemark.controller.zookeeper.claims import Claims
from tidemark.controller.zookeeper.session import outages_named


@outages_named
class ZooKeeperGroups:
    """Reader groups' records, online readers and segment owners. Thread-safe (kazoo)."""

    def __init__(self, client: Any, root: str = "/tidemark") -> None:
        self.client = client
        self.base = f"{root.rstrip('/')}/readergroups"

    def _group(self, group: str) -> str:
        return f"{self.base}/{group}"

    def _readers(self, group: str) -> Claims:
        return Claims(self.client, f"{self._group(group)}/readers")

    def _owners(self, group: str) -> Claims:
        return Claims(self.client, f"{self._group(group)}/owners")

    def create(self, group: str, record: bytes) -> bool:
        """Record a new group; False when one of that name exists."""
        self.client.ensure_path(self.base)
        try:
            self.client.create(self._group(group), record)
        except NodeExistsError:
            return False
        return True

    def names(self) -> list[str]:
        """Every group's name, sorted."""
        try:
            return sorted(self.client.get_children(self.base))
        except NoNodeError:
            return []

    def get(self, group: str) -> bytes | None:
        try:
            data, _ = self.client.get(self._group(group))
        except NoNodeError:
            return None
        return bytes(data)

    def replace(self, group: str, record: bytes) -> bool:
        """Overwrite the group's record; False when there is no such group."""
        try:
            self.client.set(self._group(group), record)
        except NoNodeError:
            return False
        return True

    def delete(self, group: str) -> None:
        with contextlib.suppress(NoNodeError):
            self.client.delete(self._group(group), recursive=True)

    def join(self, group: str, reader: str) -> bool:
        """Mark ``reader`` online; False when it already is."""
        return self._readers(group).announce(reader)

    def leave(self, group: str, reader: str) -> None:
        """Release every segment ``reader`` owns, then mark it offline."""
        for segment, owner in self.owners(group).items():
            if owner == reader:
                self.release(group, segment, reader)
        self._readers(group).withdraw(reader)

    def readers(self, group: str) -> list[str]:
        return self._readers(group).names()

    def owners(self, group: str) -> dict[int, str]:
        return {int(seg): owner for seg, owner in self._owners(group).owners().items()}

    def acquire(self, group: str, segment: int, reader: str) -> bool:
        return self._owners(group).claim(str(segment), reader)

    def release(self, group: str, segment: int, reader: str) -> None:
        self._owners(group).release(str(segment), reader)

    # --- times and checkpoints ------------------------------------------------------------

    def report(self, group: str, reader: str, data: bytes) -> None:
        """Store ``data`` (the reader's time) on its presence node."""
        self._readers(group).note(reader, data)

    def reports(self, group: str) -> dict[str, bytes]:
        return self._readers(group).data()

    def request_checkpoint(self, group: str, name: str) -> bool:
        """Ask the readers for checkpoint ``name``; False while another is being taken."""
        self.client.ensure_path(self._group(group))
        try:
            self.client.create(
                f"{self._group(group)}/checkpoint-request", name.encode("utf-8"), ephemeral=True
            )
        except NodeExistsError:
            return False
        return True

    def checkpoint_request(self, group: str) -> str | None:
        try:
            data, _ = self.client.get(f"{self._group(group)}/checkpoint-request")
        except NoNodeError:
            return None
        return str(data.decode("utf-8"))

    def end_checkpoint_request(self, group: str, name: str) -> None:
        """Withdraw the request for ``name`` (if it is the one pending) and its acks."""
        if self.checkpoint_request(group) == name:
            with contextlib.suppress(NoNodeError):
                self.client.delete(f"{self._group(group)}/checkpoint-request")
        with contextlib.suppress(NoNodeError):
            self.client.delete(f"{self._group(group)}/checkpoint-acks/{name}", recursive=True)

    def _acks(self, group: str, name: str) -> Claims:
        return Claims(self.client, f"{self._group(group)}/checkpoint-acks/{name}")

    def ack_checkpoint(self, group: str, name: str, reader: str) -> None:
        self._acks(group, name).announce(reader)

    def checkpoint_acks(self, group: str, name: str) -> set[str]:
        return set(self._acks(group, name).names())

    def save_checkpoint(self, group: str, name: str, data: bytes) -> bool:
        """Store a taken checkpoint (one write: atomic); False when the name is taken."""
        base = f"{self._group(group)}/checkpoints"
        self.client.ensure_path(base)
        try:
            self.client.create(f"{base}/{name}", data)
        except NodeExistsError:
            return False
        return True

    def checkpoint(self, group: str, name: str) -> bytes | None:
        try:
            data, _ = self.client.get(f"{self._group(group)}/checkpoints/{name}")
        except NoNodeError:
            return None
        return bytes(data)

    def checkpoint_names(self, group: str) -> list[str]:
        try:
            return sorted(self.client.get_children(f"{self._group(group)}/checkpoints"))
        except NoNodeError:
            return []

    def delete_checkpoint(self, group: str, name: str) -> None:
        with contextlib.suppress(NoNodeError):
            self.client.delete(f"{self._group(group)}/checkpoints/{name}")


__all__ = ["ZooKeeperGroups"]
