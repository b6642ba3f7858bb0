"""Active/standby among controller drivers: their election and what the leader publishes.

    election = DriverElection(client, "/tidemark", "tidemark-marks", "driver-a")
    election.run(lead, stopping)          # blocks; ``lead(lost)`` runs while this one leads
    controller_view(client, "/tidemark", "tidemark-marks")  # for `tidemark controller status`

Znodes, under ``<root>/controller-job/<marks topic>``::

    election/   the election's (lock) nodes, one per contending driver;
                the one with the lowest sequence number leads
    layout      JSON: bucket count, slot count, checkpoint and delta root
                (written by the leader; a driver with another bucket count
                for the same checkpoint is refused)
    progress    JSON: the leader's last micro-batch (id, time, rows)

Exactly one driver runs the controller's streaming query: the election is
:class:`tidemark.controller.zookeeper.leadership.Leadership` (its ``lost`` event: stop
the query and return, which gives up the leadership).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from tidemark.controller.metadata import json_bytes, json_from_bytes
from tidemark.controller.zookeeper.leadership import LeaderFunction, Leadership, contenders
from tidemark.controller.zookeeper.session import unavailable


def job_path(root: str, marks_topic: str) -> str:
    return f"{root.rstrip('/')}/controller-job/{marks_topic}"


class DriverElection:
    """One driver's place in the election; see the module docstring."""

    def __init__(self, client: KazooClient, root: str, marks_topic: str, instance_id: str) -> None:
        self.client = client
        self.instance_id = instance_id
        self.path = job_path(root, marks_topic)
        self._leadership = Leadership(client, f"{self.path}/election", instance_id)

    @property
    def leading(self) -> bool:
        return self._leadership.leading

    def leader(self) -> str | None:
        """The driver that leads now (``None``: none; this one may lead at once)."""
        found = contenders(self.client, f"{self.path}/election")
        return found[0] if found else None

    def run(self, lead: LeaderFunction, stopping: threading.Event, pause_s: float = 1.0) -> None:
        """Contend, lead when elected, contend again after losing; until ``stopping``."""
        self._leadership.run(lead, stopping, pause_s)

    def cancel(self) -> None:
        """Stop contending (a running leader function is told through its ``lost`` event)."""
        self._leadership.cancel()

    # --- what the leader publishes ---------------------------------------------------------

    def publish(self, name: str, data: Mapping[str, Any]) -> None:
        """Write ``<path>/<name>`` (``layout`` or ``progress``) as JSON."""
        write_json(self.client, f"{self.path}/{name}", data)

    def read(self, name: str) -> dict[str, Any] | None:
        return read_json(self.client, f"{self.path}/{name}")


def write_json(client: KazooClient, path: str, data: Mapping[str, Any]) -> None:
    raw = json_bytes(data)
    try:
        client.set(path, raw)
    except NoNodeError:
        try:
            client.create(path, raw, makepath=True)
        except NodeExistsError:
            client.set(path, raw)


def read_json(client: KazooClient, path: str) -> dict[str, Any] | None:
    try:
        raw, _ = client.get(path)
    except NoNodeError:
        return None
    found = json_from_bytes(raw) if raw else None
    return found if isinstance(found, dict) else None


@dataclass(frozen=True)
class ControllerView:
    """The drivers and what the leader last published."""

    leader: str | None
    standbys: tuple[str, ...]
    layout: dict[str, Any] | None
    progress: dict[str, Any] | None


def controller_view(client: KazooClient, root: str, marks_topic: str) -> ControllerView:
    """The drivers and the leader's last published state; :class:`ZooKeeperUnavailableError`
    when ZooKeeper does not answer."""
    path = job_path(root, marks_topic)
    if not client.connected:  # a request now would wait for the session to come back
        raise unavailable(client, "not connected")
    try:
        found = contenders(client, f"{path}/election")
        return ControllerView(
            leader=found[0] if found else None,
            standbys=tuple(found[1:]),
            layout=read_json(client, f"{path}/layout"),
            progress=read_json(client, f"{path}/progress"),
        )
    except (KazooException, KazooTimeoutError) as exc:
        raise unavailable(client, type(exc).__name__) from exc


__all__ = [
    "ControllerView",
    "DriverElection",
    "controller_view",
    "job_path",
    "read_json",
    "write_json",
]
