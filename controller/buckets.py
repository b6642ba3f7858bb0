"""Bucket ownership among controller instances, through ZooKeeper (kazoo).

    owner = BucketOwner(client, "controller-1", bucket_count=8).start()
    owner.owned()                       # frozenset({0, 2, 4, 6}) once balanced
    bucket_ownership(client, 8).owners  # {0: 'controller-1', 1: 'controller-2', ...}
    owner.stop()

Znodes (under ``root``, default ``/tidemark``)::

    controllers/members/<instance id>   ephemeral: the instance is alive
    controllers/owners/<bucket>         ephemeral, data = owner's id: the bucket's one owner

A bucket's owner is whoever created its ``owners`` znode, so ZooKeeper
itself makes ownership exclusive; when an instance's session expires its
ephemeral znodes vanish and the survivors claim its buckets. Each instance
aims at its share from :func:`~controller.assignment.assign_buckets` over
the live members: it releases buckets outside its share (forgetting them
*before* deleting the znode) and claims free buckets of its share (knowing
them only *after* creating the znode), so an instance never believes it
owns a bucket whose znode is not its own.

Connection states (kazoo): on SUSPENDED an instance forgets every bucket at
once (pause: its session may be expiring); on reconnection with the same
session it takes back the buckets whose znodes are still its own; on LOST
(session expired) it stops for good -- the process hosting it should exit
or build a new ``BucketOwner``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch

from controller.assignment import assign_buckets
from controller.exceptions import ControllerError, InvalidModelError

log = logging.getLogger(__name__)

OwnershipCallback = Callable[[frozenset[int]], None]


class OwnerState(StrEnum):
    """``new -> running <-> paused``; ``running | paused -> lost``; any -> ``stopped``."""

    NEW = "new"
    RUNNING = "running"
    PAUSED = "paused"
    LOST = "lost"
    STOPPED = "stopped"


def _paths(root: str) -> tuple[str, str]:
    base = f"{root.rstrip('/')}/controllers"
    return f"{base}/members", f"{base}/owners"


@dataclass(frozen=True)
class BucketOwnership:
    """Who is alive and who owns which bucket (``None``: nobody right now)."""

    members: tuple[str, ...]
    owners: dict[int, str | None]


def bucket_ownership(
    client: KazooClient, bucket_count: int, root: str = "/tidemark"
) -> BucketOwnership:
    """Read the current ownership (what ``tidemark controller buckets`` shows)."""
    members_path, owners_path = _paths(root)
    try:
        members = tuple(sorted(client.get_children(members_path)))
    except NoNodeError:
        members = ()
    owners: dict[int, str | None] = dict.fromkeys(range(bucket_count))
    try:
        children = client.get_children(owners_path)
    except NoNodeError:
        children = []
    for child in children:
        try:
            data, _ = client.get(f"{owners_path}/{child}")
        except NoNodeError:
            continue
        owners[int(child)] = data.decode("utf-8")
    return BucketOwnership(members, owners)


class BucketOwner:
    """One controller instance's share of the buckets; see the module docstring."""

    def __init__(
        self,
        client: KazooClient,
        instance_id: str,
        bucket_count: int,
        root: str = "/tidemark",
        on_change: OwnershipCallback | None = None,
        recheck_s: float = 1.0,
    ) -> None:
        if bucket_count < 1:
            raise InvalidModelError(f"bucket_count must be >= 1, got {bucket_count}")
        if not instance_id or "/" in instance_id:
            raise InvalidModelError(f"instance id {instance_id!r} must be non-empty, without '/'")
        self.client = client
        self.instance_id = instance_id
        self.bucket_count = bucket_count
        self.members_path, self.owners_path = _paths(root)
        self._on_change = on_change
        self._recheck_s = recheck_s
        self._lock = threading.Lock()
        self._owned: frozenset[int] = frozenset()
        self._state = OwnerState.NEW
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # --- public ----------------------------------------------------------------------------

    @property
    def state(self) -> OwnerState:
        return self._state

    def owned(self) -> frozenset[int]:
        """The buckets this instance owns right now (empty while paused or lost)."""
        with self._lock:
            return self._owned

    def owns(self, bucket: int) -> bool:
        return bucket in self.owned()

    def start(self) -> BucketOwner:
        self.client.ensure_path(self.members_path)
        self.client.ensure_path(self.owners_path)
        try:
            self.client.create(
                f"{self.members_path}/{self.instance_id}", self.instance_id.encode(), ephemeral=True
            )
        except NodeExistsError:
            raise ControllerError(
                f"controller instance id {self.instance_id!r} is in use by a live instance"
            ) from None
        self._state = OwnerState.RUNNING
        self.client.add_listener(self._on_connection)
        ChildrenWatch(self.client, self.members_path, self._on_children)
        ChildrenWatch(self.client, self.owners_path, self._on_children)
        self._thread = threading.Thread(
            target=self._run, name=f"buckets-{self.instance_id}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Release every bucket, leave the members, stop the worker."""
        previous = self._state
        self._set_state(OwnerState.STOPPED)
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.client.remove_listener(self._on_connection)
        if previous in (OwnerState.RUNNING, OwnerState.PAUSED) and self.client.connected:
            try:
                children = self.client.get_children(self.owners_path)
            except KazooException:
                children = []
            for child in children:
                self._delete_own(f"{self.owners_path}/{child}")
            self._delete_own(f"{self.members_path}/{self.instance_id}")

    # --- events ------------------------------------------------------------------------------

    def _on_children(self, children: list[str]) -> bool | None:
        if self._state is OwnerState.STOPPED or self._state is OwnerState.LOST:
            return False
        self._wake.set()
        return None

    def _on_connection(self, state: str) -> None:
        # Runs on kazoo's connection thread: only flags, no ZooKeeper calls.
        if self._state in (OwnerState.STOPPED, OwnerState.LOST):
            return
        if state == KazooState.SUSPENDED:
            self._set_state(OwnerState.PAUSED)
        elif state == KazooState.LOST:
            self._set_state(OwnerState.LOST)
            log.warning("controller %s: session lost; it owns no bucket any more", self.instance_id)
        elif state == KazooState.CONNECTED:
            self._set_state(OwnerState.RUNNING)
        self._wake.set()

    def _set_state(self, state: OwnerState) -> None:
        with self._lock:
            self._state = state
            if state is not OwnerState.RUNNING:
                self._owned = frozenset()

    # --- the worker --------------------------------------------------------------------------

    def _run(self) -> None:
        reported: frozenset[int] | None = None
        while self._state is not OwnerState.STOPPED:
            self._wake.wait(self._recheck_s)
            self._wake.clear()
            if self._state is OwnerState.RUNNING:
                try:
                    self._rebalance()
                except KazooException as exc:
                    log.info("controller %s: rebalance interrupted: %s", self.instance_id, exc)
            now = self.owned()
            if now != reported and self._on_change is not None:
                try:
                    self._on_change(now)
                except Exception:
                    log.exception("controller %s: on_change failed", self.instance_id)
            reported = now

    def _rebalance(self) -> None:
        members = self.client.get_children(self.members_path)
        target = assign_buckets(members, self.bucket_count).get(self.instance_id, frozenset())
        holders: dict[int, str] = {}
        for child in self.client.get_children(self.owners_path):
            try:
                data, _ = self.client.get(f"{self.owners_path}/{child}")
            except NoNodeError:
                continue
            holders[int(child)] = data.decode("utf-8")
        mine = {b for b, owner in holders.items() if owner == self.instance_id}
        for bucket in sorted(mine - target):
            with self._lock:
                self._owned = self._owned - {bucket}
            self._delete_own(f"{self.owners_path}/{bucket}")
            log.info("controller %s released bucket %d", self.instance_id, bucket)
        for bucket in sorted(target - set(holders)):
            try:
                self.client.create(
                    f"{self.owners_path}/{bucket}", self.instance_id.encode(), ephemeral=True
                )
            except NodeExistsError:
                continue
            mine.add(bucket)
            log.info("controller %s took bucket %d", self.instance_id, bucket)
        with self._lock:
            if self._state is OwnerState.RUNNING:
                self._owned = frozenset(mine & target)

    def _delete_own(self, path: str) -> None:
        try:
            data, stat = self.client.get(path)
            if data.decode("utf-8") == self.instance_id:
                self.client.delete(path, version=stat.version)
        except (NoNodeError, KazooException) as exc:
            log.debug("controller %s: could not delete %s: %s", self.instance_id, path, exc)


__all__ = ["BucketOwner", "BucketOwnership", "OwnerState", "assign_buckets", "bucket_ownership"]
