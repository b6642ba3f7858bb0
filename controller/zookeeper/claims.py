"""ZooKeeper claims: an ephemeral node naming its owner (kazoo), the one recipe.

    owners = Claims(client, "/tidemark/readergroups/billing/owners")
    owners.claim("7", "reader-1")      # True: reader-1 holds "7" until it releases it
    owners.claim("7", "reader-2")      # False: held by another
    owners.owners()                    # {"7": "reader-1"}
    members = Claims(client, "/tidemark/readergroups/billing/readers")
    members.announce("reader-1")       # False if a node of that name is already there

A claim is an ephemeral znode ``<path>/<name>`` whose data is the owner's
name: it vanishes with the owner's ZooKeeper session, so a crashed owner
frees what it held. :meth:`Claims.release` deletes the node only if it still
names the caller (a versioned delete, so a node re-created by someone else
in between is left alone). Used by the reader groups' registry
(``tidemark.controller.zookeeper.groups``); the controller's bucket ownership can use it too.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from tidemark.controller.zookeeper.session import outages_named


@outages_named
class Claims:
    """Ephemeral nodes under one parent ``path``, each naming its owner."""

    def __init__(self, client: Any, path: str) -> None:
        self.client = client
        self.path = path.rstrip("/")

    def _node(self, name: str) -> str:
        return f"{self.path}/{name}"

    def claim(self, name: str, owner: str) -> bool:
        """Take ``name`` for ``owner``; True when it is (now or already) ``owner``'s."""
        self.client.ensure_path(self.path)
        try:
            self.client.create(self._node(name), owner.encode("utf-8"), ephemeral=True)
            return True
        except NodeExistsError:
            return self.owner(name) == owner

    def release(self, name: str, owner: str) -> None:
        """Give ``name`` up, only if ``owner`` holds it."""
        try:
            data, stat = self.client.get(self._node(name))
            if data.decode("utf-8") == owner:
                self.client.delete(self._node(name), version=stat.version)
        except (NoNodeError, BadVersionError):
            pass

    def owner(self, name: str) -> str | None:
        """Who holds ``name`` (``None``: nobody)."""
        try:
            data, _ = self.client.get(self._node(name))
        except NoNodeError:
            return None
        return str(data.decode("utf-8"))

    def owners(self) -> dict[str, str]:
        """Every claim: name -> owner."""
        out: dict[str, str] = {}
        for name in self.names():
            found = self.owner(name)
            if found is not None:
                out[name] = found
        return out

    def names(self) -> list[str]:
        """The names present, sorted."""
        try:
            return sorted(self.client.get_children(self.path))
        except NoNodeError:
            return []

    def announce(self, name: str) -> bool:
        """Create ``name`` (no owner data: presence only); False if it exists already."""
        self.client.ensure_path(self.path)
        try:
            self.client.create(self._node(name), b"", ephemeral=True)
        except NodeExistsError:
            return False
        return True

    def note(self, name: str, data: bytes) -> bool:
        """Set the data of ``name`` (present, e.g. announced); False when it is gone."""
        try:
            self.client.set(self._node(name), data)
        except NoNodeError:
            return False
        return True

    def data(self) -> dict[str, bytes]:
        """Every name present with its data."""
        out: dict[str, bytes] = {}
        for name in self.names():
            with contextlib.suppress(NoNodeError):
                out[name] = bytes(self.client.get(self._node(name))[0])
        return out

    def withdraw(self, name: str) -> None:
        """Remove ``name`` (nothing happens when it is gone)."""
        with contextlib.suppress(NoNodeError):
            self.client.delete(self._node(name))


__all__ = ["Claims"]
