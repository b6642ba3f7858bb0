"""Active/standby among controller drivers: a ZooKeeper election (kazoo's ``Election``).

    election = DriverElection(client, "/tidemark", "tidemark-marks", "driver-a")
    election.run(lead, stopping)          # blocks; ``lead(lost)`` runs while this one leads
    controller_view(client, "/tidemark", "tidemark-marks")  # for `tidemark controller status`

Znodes, under ``<root>/controller-job/<marks topic>``::

    election/   kazoo's election (lock) nodes, one per contending driver;
                the one with the lowest sequence number leads
    layout      JSON: bucket count, slot count, checkpoint and delta root
                (written by the leader; a driver with another bucket count
                for the same checkpoint is refused)
    progress    JSON: the leader's last micro-batch (id, time, rows)

Exactly one driver runs the controller's streaming query: kazoo's
``Election`` is a lock whose nodes are ephemeral, so the leader's lock goes
with its session. The leader's function gets an event ``lost`` that is set
when the connection is SUSPENDED (its session may be expiring) or LOST; it
must then stop the query and return, which gives up the leadership. A
standby is elected only once the previous leader's node is gone: after it
returned (query stopped first) or after its session expired.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from controller.exceptions import InvalidModelError

log = logging.getLogger(__name__)

LeaderFunction = Callable[[threading.Event], None]


def job_path(root: str, marks_topic: str) -> str:
    return f"{root.rstrip('/')}/controller-job/{marks_topic}"


class DriverElection:
    """One driver's place in the election; see the module docstring."""

    def __init__(self, client: KazooClient, root: str, marks_topic: str, instance_id: str) -> None:
        if not instance_id or "/" in instance_id:
            raise InvalidModelError(f"instance id {instance_id!r} must be non-empty, without '/'")
        self.client = client
        self.instance_id = instance_id
        self.path = job_path(root, marks_topic)
        self._election: Any = None
        self._lost = threading.Event()
        self._leading = threading.Event()

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    def run(self, lead: LeaderFunction, stopping: threading.Event, pause_s: float = 1.0) -> None:
        """Contend, lead when elected, contend again after losing; until ``stopping``."""
        self.client.add_listener(self._on_connection)
        try:
            while not stopping.is_set():
                if not self.client.connected:
                    stopping.wait(pause_s)
                    continue
                self._lost.clear()
                self._election = self.client.Election(f"{self.path}/election", self.instance_id)
                try:
                    self._election.run(self._lead, lead)
                except KazooException as exc:
                    log.warning("driver %s: election interrupted: %s", self.instance_id, exc)
                stopping.wait(pause_s if not stopping.is_set() else 0)
        finally:
            self.client.remove_listener(self._on_connection)

    def cancel(self) -> None:
        """Stop contending (a running leader function is told through its ``lost`` event)."""
        self._lost.set()
        if self._election is not None:
            self._election.cancel()

    def _lead(self, lead: LeaderFunction) -> None:
        log.info("driver %s: elected", self.instance_id)
        self._leading.set()
        try:
            lead(self._lost)
        finally:
            self._leading.clear()
            log.info("driver %s: no longer leading", self.instance_id)

    def _on_connection(self, state: str) -> None:
        # kazoo's connection thread: flags only, no ZooKeeper calls.
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            self._lost.set()

    # --- what the leader publishes ---------------------------------------------------------

    def publish(self, name: str, data: Mapping[str, Any]) -> None:
        """Write ``<path>/<name>`` (``layout`` or ``progress``) as JSON."""
        write_json(self.client, f"{self.path}/{name}", data)

    def read(self, name: str) -> dict[str, Any] | None:
        return read_json(self.client, f"{self.path}/{name}")


def write_json(client: KazooClient, path: str, data: Mapping[str, Any]) -> None:
    raw = json.dumps(data, sort_keys=True).encode()
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
    found = json.loads(raw) if raw else None
    return found if isinstance(found, dict) else None


@dataclass(frozen=True)
class ControllerView:
    """The drivers and what the leader last published."""

    leader: str | None
    standbys: tuple[str, ...]
    layout: dict[str, Any] | None
    progress: dict[str, Any] | None


def controller_view(client: KazooClient, root: str, marks_topic: str) -> ControllerView:
    path = job_path(root, marks_topic)
    try:
        contenders = list(client.Election(f"{path}/election").contenders())
    except NoNodeError:
        contenders = []
    return ControllerView(
        leader=contenders[0] if contenders else None,
        standbys=tuple(contenders[1:]),
        layout=read_json(client, f"{path}/layout"),
        progress=read_json(client, f"{path}/progress"),
    )


__all__ = [
    "ControllerView",
    "DriverElection",
    "controller_view",
    "job_path",
    "read_json",
    "write_json",
]
