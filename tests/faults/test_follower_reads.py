"""A writer opens a stream through a ZooKeeper follower that lags the leader.

A session reads from the server it is connected to, and a follower may not have applied
yet what the leader committed a moment ago: without a ``sync``, a writer opened right
after another process created a stream could find it still ``creating`` (and refuse it)
or absent. ``MetadataStore.open_for_writing`` catches up first.

The follower is made to lag on purpose: it is paused (``SIGSTOP``) while the leader
commits the stream and the writer's read reaches it, then resumed. Without the catch-up
most of these reads answered from before the write when tried.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidemark.controller.config import StreamConfiguration
from tidemark.controller.metadata import StreamMetadata, new_stream_metadata
from tidemark.controller.states import StreamState
from tidemark.controller.zookeeper.session import zookeeper_session
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.environment import Environment
from tidemark.infra.ports import HOST
from tidemark.infra.zookeeper import ZooKeeperEnsemble, ZooKeeperServer, mode

pytestmark = [pytest.mark.integration, pytest.mark.faults]

ROOT = "/follower-reads"
ROUNDS = 10


@pytest.fixture
def ensemble(tmp_path: Path, environment: Environment) -> Iterator[ZooKeeperEnsemble]:
    with ZooKeeperEnsemble(tmp_path / "zookeeper", env=environment) as started:
        yield started


def leads(server: ZooKeeperServer) -> bool:
    """Whether ``server`` is the ensemble's leader now (its ``srvr`` answer says so)."""
    return mode(HOST, server.port) == "leader"


def test_a_writer_opening_through_a_lagging_follower_sees_the_stream_just_made(
    ensemble: ZooKeeperEnsemble,
) -> None:
    leader = next(s for s in ensemble.servers if leads(s))
    follower = next(s for s in ensemble.servers if s is not leader)
    pid = follower.process.pid
    assert pid is not None
    with (
        zookeeper_session(leader.connect_string) as maker_zk,
        zookeeper_session(follower.connect_string) as writer_zk,
    ):
        maker = ZooKeeperStore(maker_zk, ROOT)
        maker.create_scope("s")
        writer = ZooKeeperStore(writer_zk, ROOT)
        for i in range(ROUNDS):
            name = f"s/stream-{i}"
            opened: list[StreamMetadata | BaseException] = []

            def open_it(name: str = name, opened: list = opened) -> None:
                try:
                    opened.append(writer.open_for_writing(name))
                except Exception as exc:  # reported below
                    opened.append(exc)

            os.kill(pid, signal.SIGSTOP)
            try:
                made = maker.create_stream(new_stream_metadata(name, StreamConfiguration(), 0))
                maker.replace_stream(
                    made.metadata.with_changes(state=StreamState.ACTIVE), made.version
                )
                opening = threading.Thread(target=open_it, daemon=True)
                opening.start()
                time.sleep(0.05)  # the read waits in the paused follower's queue
            finally:
                os.kill(pid, signal.SIGCONT)
            opening.join(30)
            assert len(opened) == 1, f"round {i}: the open did not return"
            got = opened[0]
            assert isinstance(got, StreamMetadata), f"round {i}: {got!r}"
            assert got.state is StreamState.ACTIVE
