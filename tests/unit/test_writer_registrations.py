"""Writer registrations: a restarted writer is heard at once, the instance it replaced
and forged tokens are refused (``tidemark.controller.admission.check_registered``, the
workflow around it, and the in-memory store's registrations)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kazoo.protocol.serialization import Auth

from tests.unit.test_jobs_workflow import Committed, Streams
from tidemark.controller.admission import (
    IMPERSONATED,
    RESTARTED,
    SUPERSEDED,
    UNREGISTERED,
    Holder,
    Registration,
    check_registered,
)
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.exceptions import UnknownStreamError, ZooKeeperConfigError
from tidemark.controller.memory_store import MemoryStore
from tidemark.controller.metadata import new_stream_metadata
from tidemark.controller.store import KEPT_REGISTRATIONS
from tidemark.controller.zookeeper.session import auth_options
from tidemark.environment import ZK_AUTH
from tidemark.jobs.config import CycleTrigger, WorkflowSettings
from tidemark.jobs.workflow import (
    Emitted,
    MarkInput,
    Rejected,
    StreamState,
    StreamWorkflow,
    retired_writer,
)
from tidemark.schemas.records import WriterMarkRecord
from tidemark.schemas.tables import Reason

pytestmark = [pytest.mark.unit]

S = "shop/orders"
A, B = Registration("a1", 1_000), Registration("b2", 5_000)


@pytest.mark.parametrize(
    ("claimed", "arrival", "registrations", "holder", "expected"),
    [
        pytest.param("b2", 6_000, [A, B], Holder("a1"), RESTARTED, id="restart-after-a-crash"),
        pytest.param("b2", 6_000, [A, B], Holder("a1", False), RESTARTED, id="after-a-close"),
        pytest.param("b2", 6_000, [A, B], None, None, id="first-mark-of-the-current"),
        pytest.param("b2", 6_000, [A, B], Holder("b2"), None, id="the-holder-goes-on"),
        pytest.param("a1", 6_000, [A, B], Holder("b2"), SUPERSEDED, id="the-old-one-late"),
        pytest.param("a1", 6_000, [A, B], Holder("a1"), SUPERSEDED, id="replaced-unheard"),
        pytest.param("a1", 5_000, [A, B], None, SUPERSEDED, id="at-the-new-registration"),
        pytest.param("a1", 4_999, [A, B], Holder("a1"), None, id="before-it-was-replaced"),
        pytest.param("a1", None, [A, B], Holder("a1"), SUPERSEDED, id="no-arrival-is-late"),
        pytest.param("a1", 4_000, [A, B], Holder("b2"), SUPERSEDED, id="never-back-to-older"),
        pytest.param("f0", 6_000, [A, B], Holder("b2"), IMPERSONATED, id="a-forged-token"),
        pytest.param("f0", 6_000, [A, B], None, IMPERSONATED, id="a-forged-first-mark"),
        pytest.param(None, 6_000, [A, B], None, UNREGISTERED, id="no-token-registered-id"),
        pytest.param(None, 6_000, [A, B], Holder(None), UNREGISTERED, id="no-token-held"),
        pytest.param("f0", None, [A, B], None, IMPERSONATED, id="forged-without-arrival"),
        pytest.param("c3", 500, [A, B], None, IMPERSONATED, id="before-any-registration"),
        pytest.param("c3", 500, [A, B], Holder("c3"), IMPERSONATED, id="held-before-any"),
        pytest.param("c3", 9, [], Holder("d4"), UNREGISTERED, id="unregistered-id-bound"),
        pytest.param("c3", 9, [], Holder("c3"), UNREGISTERED, id="unregistered-own-holder"),
        pytest.param("c3", 9, [], Holder("d4", False), UNREGISTERED, id="unregistered-closed"),
        pytest.param("c3", 9, [], None, UNREGISTERED, id="unregistered-first-mark"),
    ],
)
def test_check_registered(
    claimed: str | None,
    arrival: int | None,
    registrations: list[Registration],
    holder: Holder | None,
    expected: str | None,
) -> None:
    assert check_registered(claimed, arrival, registrations, holder) == expected


tokens = st.sampled_from(["t0", "t1", "t2", "t3", "t4"])
histories = st.lists(
    st.tuples(tokens, st.integers(0, 10_000)), unique_by=lambda x: x[0], max_size=4
).map(lambda pairs: [Registration(t, s) for t, s in sorted(pairs, key=lambda p: p[1])])
holders = st.none() | st.builds(Holder, st.none() | tokens, st.booleans())


@given(histories, st.none() | tokens, st.none() | st.integers(0, 20_000), holders)
def test_a_mark_no_registration_names_is_never_heard(
    history: list[Registration], claimed: str | None, arrival: int | None, holder: Holder | None
) -> None:
    """Whoever holds the id and whenever the mark arrived: no token, or an id without
    registrations, is ``unregistered``; a token none of them names ``impersonated``."""
    verdict = check_registered(claimed, arrival, history, holder)
    if claimed is None or not history:
        assert verdict == UNREGISTERED
    elif claimed not in [r.instance for r in history]:
        assert verdict == IMPERSONATED
    else:
        assert verdict not in (UNREGISTERED, IMPERSONATED)


@given(histories, st.none() | tokens, st.integers(0, 20_000), holders)
def test_only_the_instance_registered_when_a_mark_arrived_is_heard(
    history: list[Registration], claimed: str | None, arrival: int, holder: Holder | None
) -> None:
    """Once an id has a registration: the latest registered instance is always heard,
    whoever holds the id; a token no registration names never is; of the instances
    registered before the mark arrived, only the one registered last is; and a heard
    mark takes the id (``restarted``) exactly when another instance held it."""
    verdict = check_registered(claimed, arrival, history, holder)
    heard = verdict in (None, RESTARTED)
    names = [r.instance for r in history]
    if history and claimed == names[-1]:
        assert heard
    if claimed not in names:
        assert not heard
        return
    registered_before = [r.instance for r in history if r.since_ms <= arrival]
    if heard and claimed in registered_before:
        assert claimed == registered_before[-1]
    assert (verdict == RESTARTED) == (heard and holder is not None and holder.instance != claimed)


class Registry:
    """A :class:`~tidemark.jobs.workflow.RegistrationLookup` over a memory store that counts
    the lookups (each would be a ZooKeeper read without the worker's cache)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.asked: list[tuple[str, str | None]] = []

    def registrations(
        self, stream: str, writer_id: str, claimed: str | None, fresh_since_ms: int | None
    ) -> Sequence[Registration]:
        self.asked.append((writer_id, claimed))
        return self.store.writer_registrations(stream, writer_id)


def setup() -> tuple[StreamWorkflow, MemoryStore, Registry]:
    clock = iter(range(1_000_000, 10**9, 1_000))  # a registration a second
    store = MemoryStore(lambda: next(clock))
    store.create_scope("shop")
    store.create_stream(new_stream_metadata(S, StreamConfiguration(ScalingPolicy.fixed(2)), 0))
    registry = Registry(store)
    settings = WorkflowSettings(trigger=CycleTrigger.TIMERS, writer_timeout_ms=600_000)
    wf = StreamWorkflow(settings, Streams(store.get_stream(S)), Committed(), registry)
    return wf, store, registry


def at(writer: str, t: int, pos: dict[int, int], instance: str | None, offset: int, arrival: int):
    record = WriterMarkRecord(S, writer, t, pos, True, instance=instance)
    return MarkInput(record.encode(), 0, offset, arrival)


def since(store: MemoryStore, writer: str) -> int:
    return store.writer_registrations(S, writer)[-1].since_ms


def test_a_writer_restarted_after_a_crash_is_heard_at_once() -> None:
    """``a`` crashes (no shutdown mark) and comes back registered under its id, beside a
    steady ``z``: its first mark makes a watermark in the same batch (the writer timeout
    is ten minutes); the dead instance's late mark is ``superseded``, a forged token
    ``impersonated``; only the marks whose token changed cost a lookup."""
    wf, store, registry = setup()
    store.register_writer(S, "a", "old")
    store.register_writer(S, "z", "z")
    t0 = since(store, "a")
    state = StreamState()
    first = [at("a", 1_000, {0: 5}, "old", 0, t0 + 1), at("z", 1_100, {1: 2}, "z", 1, t0 + 1)]
    out = wf.on_records(S, state, first, t0 + 10)
    assert [o.watermark.time for o in out if isinstance(o, Emitted)] == [1_000]
    for offset in range(2, 6):  # the bound instances' own marks: no lookups
        wf.on_records(S, state, [at("z", 1_100 + offset, {1: offset}, "z", offset, t0 + 2)], t0)
    assert registry.asked == [("a", "old"), ("z", "z")]

    store.register_writer(S, "a", "new")  # the restart
    t1 = since(store, "a")
    marks = [
        at("a", 1_050, {0: 6}, "new", 6, t1),
        at("a", 9_000, {0: 9}, "old", 7, t1 + 1),  # the old instance, late (a zombie)
        at("a", 9_000, {0: 9}, "forged", 8, t1 + 1),
        at("z", 1_200, {1: 7}, "z", 9, t1 + 1),
    ]
    out = wf.on_records(S, state, marks, t1 + 10)
    assert [(o.reason, o.offset) for o in out if isinstance(o, Rejected)] == [
        (Reason.SUPERSEDED, 7),
        (Reason.IMPERSONATED, 8),
    ]
    emitted = [o.watermark for o in out if isinstance(o, Emitted)]
    # the dead instance's last mark bounds one more cut (its position), then is dropped
    assert [(w.time, w.stream_cut[0]) for w in emitted] == [(1_050, 6)]
    assert state.marks["a"].seen.instance == "new"
    assert set(state.marks) == {"a", "z"}
    assert retired_writer("a", "old") not in state.marks
    assert registry.asked[2:] == [("a", "new"), ("a", "old"), ("a", "forged")]


def test_the_dead_instances_last_mark_bounds_the_cuts_until_a_watermark_passes_it() -> None:
    """The replaced instance counts as shut down at its last mark: its position reaches
    the next cuts, and it holds no watermark once one passed its time."""
    wf, store, _ = setup()
    for writer in ("a", "z"):
        store.register_writer(S, writer, f"{writer}-old")
    state = StreamState()
    t0 = since(store, "z")
    first = [at("z", 1_000, {1: 2}, "z-old", 0, t0), at("a", 2_000, {0: 8}, "a-old", 1, t0)]
    wf.on_records(S, state, first, t0)
    store.register_writer(S, "a", "a-new")
    t1 = since(store, "a")
    marks = [at("a", 1_500, {1: 4}, "a-new", 2, t1), at("z", 3_000, {1: 3}, "z-old", 3, t1)]
    out = wf.on_records(S, state, marks, t1)
    assert [(o.watermark.time, o.watermark.stream_cut) for o in out if isinstance(o, Emitted)] == [
        (1_500, {0: 8, 1: 4})
    ]
    assert retired_writer("a", "a-old") in state.marks
    out = wf.on_records(S, state, [at("a", 2_500, {1: 5}, "a-new", 4, t1 + 1)], t1 + 1)
    assert [o.watermark.time for o in out if isinstance(o, Emitted)] == [2_000, 2_500]
    assert set(state.marks) == {"a", "z"}


def test_a_replay_of_the_whole_history_hears_every_registered_instance() -> None:
    """Three crashes and restarts, replayed in one batch by a controller that lost its state:
    each instance's marks arrived while it was the registered one, so none is refused."""
    wf, store, _ = setup()
    marks, offset = [], 0
    for n in range(4):
        store.register_writer(S, "a", f"gen{n}")
        t = since(store, "a")
        for step in range(2):
            marks.append(at("a", 1_000 * (n + 1) + step, {0: offset + 1}, f"gen{n}", offset, t))
            offset += 1
    out = wf.on_records(S, StreamState(), marks, 10**13)
    assert [o for o in out if isinstance(o, Rejected)] == []
    assert [o.watermark.time for o in out if isinstance(o, Emitted)][-1] == 4_001


def test_a_memory_store_keeps_the_latest_registrations() -> None:
    store = MemoryStore()
    store.create_scope("shop")
    store.create_stream(new_stream_metadata(S, StreamConfiguration(), 0))
    assert store.writer_registrations(S, "w") == ()
    assert store.register_writer(S, "w", "t0") is True
    assert store.register_writer(S, "w", "t0") is False  # already the current one
    for n in range(1, KEPT_REGISTRATIONS + 3):
        store.register_writer(S, "w", f"t{n}")
    kept = store.writer_registrations(S, "w")
    assert [r.instance for r in kept] == [f"t{n}" for n in range(3, KEPT_REGISTRATIONS + 3)]
    assert [r.since_ms for r in kept] == sorted(r.since_ms for r in kept)
    with pytest.raises(UnknownStreamError):
        store.register_writer("shop/missing", "w", "t0")
    store.delete_stream(S, store.read_stream(S).version)
    assert store.writer_registrations(S, "w") == ()


def test_a_zookeeper_principal_comes_from_one_variable_and_is_never_echoed() -> None:
    assert auth_options({}) == {} and auth_options({ZK_AUTH: " "}) == {}
    assert auth_options({ZK_AUTH: "alice:s3cret:x"}) == {
        "auth_data": [("digest", "alice:s3cret:x")]
    }
    for bad in ("alice", "alice:", ":s3cret"):
        with pytest.raises(ZooKeeperConfigError, match="TIDEMARK_ZK_AUTH must be") as raised:
            auth_options({ZK_AUTH: bad})
        assert "s3cret" not in str(raised.value)


def test_kazoo_s_debug_line_of_its_auth_request_hides_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="kazoo.client"):
        request = Auth(0, "digest", "alice:s3cret")
        logging.getLogger("kazoo.client").debug("Sending request(xid=%s): %s", -4, request)
    assert "s3cret" not in caplog.text
    assert "scheme='digest', auth='<hidden>'" in caplog.text
