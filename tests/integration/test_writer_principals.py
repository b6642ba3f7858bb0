"""A writer id belongs to the ZooKeeper principal that registered it: another principal
can neither register under it nor change or remove its registrations, and a mark with
that principal's token is refused while the owner's marks are heard (a real ZooKeeper,
digest credentials from ``$TIDEMARK_ZK_AUTH``, the controller's registration lookup)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from kazoo.exceptions import NoAuthError

from tests.unit.test_jobs_workflow import Committed
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.exceptions import WriterIdOwnedError
from tidemark.controller.metadata import StreamMetadata, new_stream_metadata
from tidemark.controller.naming import writer_node_name
from tidemark.controller.zookeeper.session import close_session, open_session
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.environment import ZK_AUTH
from tidemark.jobs.config import WorkflowSettings
from tidemark.jobs.lookups import ZooKeeperRegistrations, ZooKeeperStreams
from tidemark.jobs.workflow import Emitted, MarkInput, Rejected, StreamState, StreamWorkflow
from tidemark.schemas.records import WriterMarkRecord
from tidemark.schemas.tables import Reason

S = "shop/orders"
ROOT = "/tidemark"


@pytest.fixture
def connect(zookeeper: str, unique: str) -> str:
    """A connect string confined to a fresh chroot (made by the zk_client fixture)."""
    return f"{zookeeper}/tidemark-test-{unique}"


@pytest.fixture
def sessions(
    zk_client: Any, connect: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Mapping[str | None, Any]]:
    """Sessions as principals ``alice`` and ``bob`` and an anonymous one (the controller),
    each opened the one way tidemark opens them: ``$TIDEMARK_ZK_AUTH`` set, or not."""
    opened: dict[str | None, Any] = {}
    for user in ("alice", "bob", None):
        if user is None:
            monkeypatch.delenv(ZK_AUTH, raising=False)
        else:
            monkeypatch.setenv(ZK_AUTH, f"{user}:{user}-secret")
        opened[user] = open_session(connect)
    monkeypatch.delenv(ZK_AUTH, raising=False)
    try:
        yield opened
    finally:
        writers = f"{ROOT}/streams/shop/orders/writers"
        for client in opened.values():  # each principal removes the ids it owns
            for name in client.get_children(writers) if client.exists(writers) else ():
                with contextlib.suppress(NoAuthError):
                    client.delete(f"{writers}/{name}", recursive=True)
        for client in opened.values():
            close_session(client)


class Streams:
    def __init__(self, meta: StreamMetadata) -> None:
        self.meta = meta

    def stream(self, stream: str, refresh: bool = False) -> StreamMetadata | None:
        return self.meta if stream == self.meta.name else None

    def prefetch(self, streams: Sequence[str]) -> None:
        pass


@contextlib.contextmanager
def controller_workflow(connect: str, meta: StreamMetadata) -> Iterator[StreamWorkflow]:
    """The controller job's workflow for ``meta``'s stream, looking registrations up as the
    job does (a session of its own, anonymous)."""
    lookups = ZooKeeperStreams(connect, ROOT)
    try:
        yield StreamWorkflow(
            WorkflowSettings(), Streams(meta), Committed(), ZooKeeperRegistrations(lookups)
        )
    finally:
        lookups.close()


def at(writer: str, t: int, instance: str, offset: int) -> MarkInput:
    record = WriterMarkRecord(S, writer, t, {0: offset}, True, instance=instance)
    return MarkInput(record.encode(), 0, offset, None)


def test_another_principal_cannot_claim_a_writer_id_and_its_marks_are_refused(
    sessions: Mapping[str | None, Any], connect: str
) -> None:
    alice, bob, anyone = (ZooKeeperStore(sessions[u], ROOT) for u in ("alice", "bob", None))
    anyone.create_scope("shop")
    anyone.create_stream(new_stream_metadata(S, StreamConfiguration(ScalingPolicy.fixed(1)), 0))
    assert alice.register_writer(S, "w1", "a1")

    # bob may not register under alice's id, nor change or remove her registration
    with pytest.raises(WriterIdOwnedError, match="'w1' of stream 'shop/orders' is registered by"):
        bob.register_writer(S, "w1", "b1")
    node = f"{ROOT}/streams/shop/orders/writers/{writer_node_name('w1')}"
    (name,) = sessions["bob"].get_children(node)
    for change in (
        lambda: sessions["bob"].set(f"{node}/{name}", b'{"instance": "b1"}'),
        lambda: sessions["bob"].delete(f"{node}/{name}"),
        lambda: sessions["bob"].set(node, b"w1"),
        lambda: sessions[None].create(f"{node}/r-", b"{}", sequence=True),
    ):
        with pytest.raises(NoAuthError):
            change()
    # anyone reads them (the controller); bob registers ids of his own; alice restarts
    assert [r.instance for r in anyone.writer_registrations(S, "w1")] == ["a1"]
    assert bob.register_writer(S, "w2", "b2")
    with pytest.raises(WriterIdOwnedError):
        alice.register_writer(S, "w2", "a9")
    assert alice.register_writer(S, "w1", "a2")
    assert [r.instance for r in anyone.writer_registrations(S, "w1")] == ["a1", "a2"]

    # the controller's lookup, as an anonymous session: alice's marks are heard, a mark
    # with bob's token under her id refused, bob's own id heard
    with controller_workflow(connect, anyone.get_stream(S)) as workflow:
        state = StreamState()
        marks = [at("w1", 1_000, "a2", 1), at("w1", 9_000, "b1", 2), at("w2", 1_500, "b2", 3)]
        out = workflow.on_records(S, state, marks, 10_000)
        assert [(o.writer, o.reason) for o in out if isinstance(o, Rejected)] == [
            ("w1", Reason.IMPERSONATED)
        ]
        assert [o.watermark.time for o in out if isinstance(o, Emitted)] == [1_000]
        out = workflow.on_records(S, state, [at("w1", 2_000, "a2", 4)], 11_000)
        assert state.marks["w1"].seen.instance == "a2"
        assert [o.watermark.time for o in out if isinstance(o, Emitted)] == [1_500]
