"""Reader groups' znodes in ZooKeeper (beside ``controller.zk_store``).

    groups = ZooKeeperGroups(client, root="/tidemark")
    groups.create("billing", b'{"stream": "shop/orders", ...}')    # False if it exists
    groups.join("billing", "reader-1")                             # False if online already
    groups.acquire("billing", 7, "reader-1")                       # True when it got segment 7

Layout (under ``root``)::

    readergroups/<group>                  the group's record (bytes; JSON, written by
                                          ``pipelines.reading.registry``)
    readergroups/<group>/readers/<reader> ephemeral: the reader is online
    readergroups/<group>/owners/<segment> ephemeral, data = reader name (a claim,
                                          ``controller.claims``)

Names are checked by the caller; results are plain values (``False``,
``None``), and the reading side turns them into its own errors. This is the
only place that touches reader-group znodes: ``pipelines`` reaches ZooKeeper
through it.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from controller.claims import Claims


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


__all__ = ["ZooKeeperGroups"]
