"""Fault: the ZooKeeper node a leader is connected to goes down, in a three-node ensemble.

The leader (``tidemark.controller.zookeeper.leadership.Leadership``) keeps leading: kazoo
moves to another node within the same session, inside the suspension grace, so
its lock node lives on and the standby is never elected. When the ensemble loses
its quorum instead, the leader gives up once the grace has passed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.waiting import wait_until
from tidemark.controller.zookeeper.leadership import Leadership, contenders
from tidemark.controller.zookeeper.session import zookeeper_session
from tidemark.environment import Environment
from tidemark.infra.zookeeper import ZooKeeperEnsemble

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]

PATH = "/leadership-faults/election"


@pytest.fixture
def ensemble(tmp_path: Path, environment: Environment) -> Iterator[ZooKeeperEnsemble]:
    with ZooKeeperEnsemble(tmp_path / "zookeeper", env=environment) as started:
        yield started


def connected_server(client: Any, ensemble: ZooKeeperEnsemble) -> int:
    """The server id (1-based) of the node ``client`` is connected to now."""
    port = client._connection._socket.getpeername()[1]
    ports = [int(s.connect_string.rsplit(":", 1)[1]) for s in ensemble.servers]
    return ports.index(port) + 1


def reconnected_elsewhere(client: Any, ensemble: ZooKeeperEnsemble, node: int) -> bool:
    """Whether ``client`` is connected, and to a node other than ``node``."""
    if not client.connected:
        return False
    try:
        return connected_server(client, ensemble) != node
    except (AttributeError, OSError, ValueError):  # its socket closed or replaced meanwhile
        return False


class Contender:
    """``Leadership.run`` on a thread, recording each term and each ``lost``."""

    def __init__(self, client: Any, identifier: str) -> None:
        self.leadership = Leadership(client, PATH, identifier)
        self.terms = 0
        self.elected = threading.Event()
        self.stopped_leading = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(
            target=self.leadership.run, args=(self._lead, self.stopping), daemon=True
        )
        self.thread.start()

    def _lead(self, lost: threading.Event) -> None:
        self.terms += 1
        self.elected.set()
        lost.wait()
        self.stopped_leading.set()

    def stop(self) -> None:
        self.stopping.set()
        self.leadership.cancel()
        self.thread.join(15)


def test_the_leader_rides_out_its_zookeeper_node_going_down(
    ensemble: ZooKeeperEnsemble,
) -> None:
    with (
        zookeeper_session(ensemble.connect_string) as one,
        zookeeper_session(ensemble.connect_string) as two,
        zookeeper_session(ensemble.connect_string) as observer,
    ):
        a = Contender(one, "a")
        assert a.elected.wait(15)
        b = Contender(two, "b")
        wait_until(lambda: contenders(observer, PATH) == ["a", "b"], 15, "b stands by", poll_s=0.05)
        node = connected_server(one, ensemble)
        session = one.client_id
        ensemble.servers[node - 1].stop()
        # not `one.connected` alone: until its client sees the socket close, it is still
        # connected to the stopped node
        took = wait_until(
            lambda: reconnected_elsewhere(one, ensemble, node),
            15,
            "the leader reconnects to another node",
            poll_s=0.05,  # the seconds it took are the figure
        )
        assert one.client_id == session, "the leader's session was replaced"
        time.sleep(a.leadership.suspended_grace_s + 0.5)  # past the grace: still leading
        assert a.terms == 1 and not a.stopped_leading.is_set(), "the leader stepped down"
        assert a.leadership.leading and not b.elected.is_set()
        wait_until(lambda: observer.connected, 15, "the observer reconnects", poll_s=0.05)
        assert contenders(observer, PATH) == ["a", "b"]
        print(f"leader reconnected in {took:.2f} s (grace {a.leadership.suspended_grace_s} s)")
        ensemble.servers[node - 1].start()
        a.stop()
        assert b.elected.wait(15), "the standby was not elected after the leader left"
        b.stop()


def test_the_leader_gives_up_once_the_quorum_is_gone_past_the_grace(
    ensemble: ZooKeeperEnsemble,
) -> None:
    with zookeeper_session(ensemble.connect_string) as one:
        a = Contender(one, "a")
        assert a.elected.wait(15)
        grace = a.leadership.suspended_grace_s
        node = connected_server(one, ensemble)
        others = [s for i, s in enumerate(ensemble.servers, start=1) if i != node]
        others[0].stop()
        started = time.monotonic()
        others[1].stop()  # the connected node is alone: no quorum, it drops its clients
        assert a.stopped_leading.wait(grace + 10), "the leader kept leading without a quorum"
        took = time.monotonic() - started
        assert took >= grace - 0.2, f"gave up after {took:.2f} s, before the {grace} s grace"
        assert not a.leadership.leading or a.terms == 1
        a.stopping.set()
        a.leadership.cancel()
        for server in others:
            server.start(timeout_s=0)
        a.thread.join(30)
