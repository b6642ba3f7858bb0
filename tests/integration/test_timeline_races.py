"""Many consumers racing for leases: never two live leases on one message."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict

import pytest

from tests.faults.figures import report
from tidemark.pipelines.timeline.config import TimelineConfig
from tidemark.pipelines.timeline.exceptions import NotAvailableError
from tidemark.pipelines.timeline.store import NewMessage, TimelineStore

pytestmark = pytest.mark.faults  # lease races are part of the fault suite (make test-faults)

RACERS = 12


@pytest.fixture
def tl(postgres, unique):
    with TimelineStore(postgres) as store:
        store.migrate()
        store.create_timeline(TimelineConfig(f"race-{unique}", buckets=4))
    return f"race-{unique}"


def _race(postgres, n, body):
    """Run ``body(store, index)`` in ``n`` threads that start together; return results."""
    stores = [TimelineStore(postgres) for _ in range(n)]
    barrier = threading.Barrier(n)
    results: list[object] = [None] * n
    errors: list[BaseException] = []

    def run(i):
        try:
            barrier.wait()
            results[i] = body(stores[i], i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for s in stores:
        s.close()
    assert not errors, errors
    return results


def test_batch_leases_never_overlap(postgres, tl):
    with TimelineStore(postgres) as store:
        store.create_many(tl, [NewMessage(b"x", 0, "g", f"m{i}") for i in range(300)])

    def body(store, i):
        got = []
        while batch := store.lease(tl, f"c{i}", lease_ms=600_000, limit=7):
            got.extend(lease.message.id for lease in batch)
        return got

    results = _race(postgres, RACERS, body)
    leased = [mid for got in results for mid in got]
    assert len(leased) == len(set(leased)) == 300
    assert sum(1 for got in results if got) > 1  # the work was shared


def test_one_message_one_winner(postgres, tl):
    with TimelineStore(postgres) as store:
        store.create(tl, b"x", timestamp_ms=0, producer_group="g", id="prize")

    def body(store, i):
        try:
            return store.lease_one(tl, "prize", f"c{i}", lease_ms=600_000).message.lock_consumer
        except NotAvailableError:
            return None

    winners = [w for w in _race(postgres, RACERS, body) if w is not None]
    assert len(winners) == 1


def test_short_leases_churning_never_overlap_in_database_time(postgres, tl):
    with TimelineStore(postgres) as store:
        store.create_many(tl, [NewMessage(b"x", 0, "g", f"s{i}") for i in range(10)])
    stop_at = time.monotonic() + 2.0

    def body(store, i):
        held = []
        while time.monotonic() < stop_at:
            for lease in store.lease(tl, f"c{i}", lease_ms=40, limit=3):
                held.append((lease.message.id, lease.leased_at_ms, lease.until_ms, f"c{i}"))
            time.sleep(0.005)
        return held

    intervals = defaultdict(list)
    for held in _race(postgres, 8, body):
        for mid, start, end, who in held:
            intervals[mid].append((start, end, who))
    grants = sum(len(v) for v in intervals.values())
    report("lease-races", f"{grants} grants of 40 ms leases to 8 racers, 0 overlapping")
    assert grants > 50
    for mid, spans in intervals.items():
        spans.sort()
        for (_, end, who), (start, _, other) in itertools.pairwise(spans):
            assert start >= end, (
                f"{mid}: {other} leased at {start} before {who}'s lease ended {end}"
            )
