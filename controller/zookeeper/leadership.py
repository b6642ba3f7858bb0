"""Leadership among contenders: kazoo's ``Election``, with the connection watched.

    leadership = Leadership(client, "/tidemark/policy-loop/election", "c1")
    leadership.contend(lead)              # blocks: elected, then ``lead(lost)`` until it returns
    leadership.run(lead, stopping)        # contend again after each term, until ``stopping``
    leadership.cancel()                   # from another thread: leave, tell the leader
    contenders(client, path)              # [leader, standby, ...]

The one leadership recipe of the control plane: the controller drivers'
election (:mod:`tidemark.controller.zookeeper.driver`) and the policy loop's
(:mod:`tidemark.controller.policy_loop`) both use it. kazoo's ``Election`` is a lock
whose nodes are ephemeral, so a leader's lock goes with its session. The
leader's function gets an event ``lost``, set when the session is LOST, when
the connection stays SUSPENDED longer than a grace, or on :meth:`cancel`; it
must then stop acting and return, which gives the leadership up. A standby is
elected only once the previous leader's node is gone: after its function
returned, or after its session expired.

The grace (a quarter of the session timeout by default) lets a leader ride
out the loss of the one ZooKeeper node it was connected to: kazoo moves to
another node of the ensemble within the same session, whose nodes (the
leader's lock among them) live on, so nothing changes hands. It is short
enough to be safe: kazoo notices a silent server after two thirds of the
session timeout, so a session cannot have expired before a third has passed
since SUSPENDED; the leader stops well before any standby can be elected.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import KazooState

from tidemark.controller.exceptions import InvalidModelError

log = logging.getLogger(__name__)

LeaderFunction = Callable[[threading.Event], None]
"""Runs while elected; returns once its ``lost`` event is set (or when it is done)."""


class Leadership:
    """One contender, ``identifier``, in the election at ``path``; see the module docstring."""

    def __init__(
        self,
        client: KazooClient,
        path: str,
        identifier: str,
        *,
        suspended_grace_s: float | None = None,
    ) -> None:
        if not identifier or "/" in identifier:
            raise InvalidModelError(f"identifier {identifier!r} must be non-empty, without '/'")
        if suspended_grace_s is not None and suspended_grace_s < 0:
            raise InvalidModelError(f"suspended_grace_s must be >= 0, got {suspended_grace_s}")
        self.client = client
        self.path = path
        self.identifier = identifier
        self.suspended_grace_s = (
            default_suspended_grace_s(client) if suspended_grace_s is None else suspended_grace_s
        )
        self._mutex = threading.Lock()
        self._election: Any = None
        self._cancelled = False
        self._lost = threading.Event()
        self._leading = threading.Event()
        self._suspension: threading.Timer | None = None

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    def contend(self, lead: LeaderFunction) -> None:
        """Wait to be elected, run ``lead(lost)``, give the leadership up when it returns.

        Returns at once after :meth:`cancel`; a ZooKeeper error ends the term (logged).
        """
        with self._mutex:
            if self._cancelled:
                return
            self._lost.clear()
            self._election = self.client.Election(self.path, self.identifier)
            election = self._election
        self.client.add_listener(self._on_connection)
        try:
            election.run(self._lead, lead)
        except KazooException as exc:  # the session went while contending or releasing
            log.warning("%s at %s: election interrupted: %s", self.identifier, self.path, exc)
        finally:
            self.client.remove_listener(self._on_connection)
            self._end_suspension()

    def run(self, lead: LeaderFunction, stopping: threading.Event, pause_s: float = 1.0) -> None:
        """:meth:`contend` again after each term (or while disconnected, wait) until
        ``stopping`` is set or :meth:`cancel` is called."""
        while not stopping.is_set() and not self._cancelled:
            if self.client.connected:
                self.contend(lead)
            stopping.wait(pause_s if not stopping.is_set() else 0)

    def cancel(self) -> None:
        """Stop contending; a running leader function is told through its ``lost`` event."""
        with self._mutex:
            self._cancelled = True
            self._lost.set()
            if self._election is not None:
                self._election.cancel()

    def _lead(self, lead: LeaderFunction) -> None:
        log.info("%s at %s: elected", self.identifier, self.path)
        if self.client.connected and not self._cancelled:
            self._lost.clear()  # a blip while standing by is no reason to stop at once
        self._leading.set()
        try:
            lead(self._lost)
        finally:
            self._leading.clear()
            log.info("%s at %s: no longer leading", self.identifier, self.path)

    def _on_connection(self, state: str) -> None:
        # kazoo's connection thread: flags and a timer only, no ZooKeeper calls.
        if state == KazooState.LOST:
            self._end_suspension()
            self._lost.set()
        elif state == KazooState.SUSPENDED:
            if self.suspended_grace_s == 0:
                self._lost.set()
                return
            log.warning(
                "%s at %s: ZooKeeper connection suspended; still leading for %.1f s while"
                " kazoo reconnects within the session",
                self.identifier,
                self.path,
                self.suspended_grace_s,
            )
            timer = threading.Timer(self.suspended_grace_s, self._suspended_too_long)
            timer.daemon = True
            with self._mutex:
                previous, self._suspension = self._suspension, timer
            if previous is not None:
                previous.cancel()
            timer.start()
        elif state == KazooState.CONNECTED and self._end_suspension():
            log.info("%s at %s: reconnected within the session", self.identifier, self.path)

    def _suspended_too_long(self) -> None:
        if self.client.state != KazooState.CONNECTED:
            log.warning(
                "%s at %s: still disconnected after %.1f s; giving the leadership up",
                self.identifier,
                self.path,
                self.suspended_grace_s,
            )
            self._lost.set()

    def _end_suspension(self) -> bool:
        """Cancel a pending suspension timer; whether there was one."""
        with self._mutex:
            timer, self._suspension = self._suspension, None
        if timer is None:
            return False
        timer.cancel()
        return True


def default_suspended_grace_s(client: KazooClient) -> float:
    """A quarter of ``client``'s session timeout (see the module docstring)."""
    return float(getattr(client, "_session_timeout", 10_000)) / 4000.0


def contenders(client: KazooClient, path: str) -> list[str]:
    """The identifiers in the election at ``path``, the leader first (empty: none)."""
    try:
        return list(client.Election(path).contenders())
    except NoNodeError:
        return []


__all__ = ["LeaderFunction", "Leadership", "contenders", "default_suspended_grace_s"]
