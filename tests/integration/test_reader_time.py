"""Reader groups kept together in time, checkpoints with readers online, and readers
that die, on real Kafka + ZooKeeper with watermarks in real Delta tables.

Watermarks come from ``watermark_cycle`` over the writer's own marks, appended
with deltalake (as in ``test_reader_group``), so no Spark job is involved.
Readers run in threads (a slow one sleeps after each event); the dying
reader runs in a separate process killed with SIGKILL.
"""

# ruff: noqa: F811  (the fixtures imported from test_reader_group are redefined as arguments)
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.test_reader_group import (  # noqa: F401 (fixtures)
    BASE,
    Marks,
    make_stream,
    manager,
    settings,
    store,
    wconfig,
)
from tests.waiting import wait_until
from tidemark.controller.navigation import key_hash
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.pipelines.reading.group import ReaderConfig, ReaderGroup
from tidemark.pipelines.writing.writer import EventWriter

STEP_MS = 100
KEYS = 8


def even_keys(meta):
    """``KEYS`` routing keys spread evenly over the stream's segments."""
    epoch = meta.epochs[-1]
    per_segment = KEYS // len(epoch.segments)
    chosen: dict[int, list[str]] = {seg.id: [] for seg in epoch.segments}
    for i in range(10_000):
        key = f"k{i}"
        seg = epoch.segment_for(key_hash(key.encode())).id
        if len(chosen[seg]) < per_segment:
            chosen[seg].append(key)
        if all(len(v) == per_segment for v in chosen.values()):
            return [k for keys in chosen.values() for k in keys]
    raise AssertionError("no even spread of keys found")


def fill(stream, store, kafka, wconfig, root, rounds):
    """``rounds`` rounds of one event per key, a noted time and a watermark after each.
    Returns every event's (segment, offset)."""
    marks = Marks(stream, store, root)
    keys = even_keys(store.get_stream(stream))
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        for rnd in range(rounds):
            for k, key in enumerate(keys):
                ts = BASE + rnd * STEP_MS + k
                w.write(f"{key}:{rnd}".encode(), routing_key=key, timestamp=ts)
            marks.note(w, BASE + rnd * STEP_MS + KEYS)
            marks.cycle()
    assert len(marks.emitted) == rounds
    return marks


def filled_stream(manager, store, kafka, wconfig, root, unique, rounds, segments):
    """A new stream of ``segments`` segments, ``fill``-ed with ``rounds`` rounds: its name
    and how many events it holds."""
    stream = make_stream(manager, unique, segments=segments)
    fill(stream, store, kafka, wconfig, root, rounds)
    return stream, rounds * KEYS


class Readers:
    """Reader threads of one group; ``delays`` (seconds slept after each event) by name.

    ``one_by_one``: each reader starts once the one before it has returned an event, so
    the first holds every segment at the start and the others join a group that reads.
    """

    def __init__(self, group, delays, one_by_one=False):
        self.group = group
        self.one_by_one = one_by_one
        self.delays = dict(delays)
        self.got = {name: [] for name in delays}
        self.places = {name: [] for name in delays}  # (checkpoint, events returned before it)
        self.done_after = {name: [] for name in delays}  # the future's done() at each later event
        self.pending = None
        self.stop = threading.Event()
        self.errors = []
        self.threads = [
            threading.Thread(target=self._run, args=(name,), daemon=True) for name in delays
        ]

    def _run(self, name):
        try:
            with self.group.reader(name) as reader:
                while not self.stop.is_set():
                    event = reader.read_next(timeout_ms=100)
                    if event is not None and event.is_checkpoint:
                        self.places[name].append((event.checkpoint_name, len(self.got[name])))
                    elif event is not None:
                        if self.places[name]:
                            pending = self.pending
                            self.done_after[name].append(pending is not None and pending.done())
                        self.got[name].append((event.segment, event.offset, event.timestamp))
                        if self.delays[name]:
                            time.sleep(self.delays[name])
        except Exception as exc:  # reported by the test
            self.errors.append(exc)

    def __enter__(self):
        for name, t in zip(self.delays, self.threads, strict=True):
            t.start()
            if self.one_by_one:
                wait_until(
                    lambda name=name: self.got[name] or self.errors,
                    60,
                    f"{name} reads its first event",
                    poll_s=0.01,
                )
                assert self.got[name], f"{name} returned no event in 60 s: {self.errors}"
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(30)
        assert not self.errors, self.errors

    def read(self):
        return [e for events in self.got.values() for e in events]

    def wait_for(self, count, timeout_s=90):
        deadline = time.monotonic() + timeout_s
        while len(self.read()) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        return len(self.read())


def kw(store, kafka, root, **config):
    base = {
        "rebalance_interval_ms": 50,
        "commit_interval_ms": 0,
        "window_refresh_interval_ms": 0,
        # small fetches: a reader's segments advance together, not one after another
        "consumer_overrides": {"max.partition.fetch.bytes": 512},
    }
    base.update(config)
    return {
        "store": store,
        "bootstrap_servers": kafka,
        "delta_root": root,
        "config": ReaderConfig(**base),
    }


def exactly_once(readers, total):
    counts = Counter((seg, off) for seg, off, _ in readers.read())
    assert len(counts) == total, f"read {len(counts)} distinct events of {total}"
    twice = [k for k, n in counts.items() if n > 1]
    assert twice == [], f"read twice: {twice[:10]}"


# --- 3. rebalancing by time and alignment ----------------------------------------


def lower_bound_after(
    name, stream, store, kafka, root, until, total, rounds, unique, one_by_one=False, **config
):
    """Run a slow and a fast reader until ``until(readers, seconds, drift)`` (the seconds
    since they started, the drifts seen so far; ``one_by_one``: the slow one first, see
    ``Readers``); the group's lower bound then (at its committed position); then let the
    slow one speed up and read all."""
    group = ReaderGroup(f"{name}{unique}", stream, **kw(store, kafka, root, **config))
    probe = ReaderGroup(f"{name}{unique}", **kw(store, kafka, root))
    drift = []
    delays = {"slow": 0.06, "fast": 0.0}
    with group, probe, Readers(group, delays, one_by_one) as readers:
        start = time.monotonic()
        while True:
            # how far the fast reader's events run ahead of the slow one's
            fast, slow = readers.got["fast"], readers.got["slow"]
            if fast and slow:
                drift.append(max(t for *_, t in fast) - max(t for *_, t in slow))
            if until(readers, time.monotonic() - start, drift):
                break
            assert time.monotonic() - start < 120, (
                f"{name}: still running after 120 s; events by reader and segment: "
                f"{ {r: Counter(seg for seg, *_ in got) for r, got in readers.got.items()} }"
            )
            time.sleep(0.1)
        lower = probe.current_time_window().lower
        readers.delays["slow"] = 0.0
        readers.wait_for(total)
        assert readers.wait_for(total) == total
        time.sleep(0.3)  # anything read twice would show up now
        exactly_once(readers, total)
    return lower, drift


@pytest.mark.alone  # compares two runs of timed readers: no neighbour's load in either
def test_time_rebalancing_moves_the_group_lower_bound_faster(
    manager, store, kafka, wconfig, unique, tmp_path
):
    """One reader is slow (60 ms per event) and behind; with balance='time' it hands
    segments to the fast reader and the group's lower bound advances faster.

    Both runs start the same way (the slow reader first, holding every segment, then
    the fast one) and end when the slow reader has returned the same number of events,
    not after the same wall time: on a loaded machine the readers' start takes a varying
    part of any fixed span, and the slow reader's pace is the one the policy works on.
    Were the fast reader first, it could read most of the stream before the slow one
    joined, and which run that happened in would decide the comparison."""
    root = str(tmp_path)
    rounds = 40
    stream, total = filled_stream(manager, store, kafka, wconfig, root, unique, rounds, 4)
    slow_events = 80

    def until(readers, _seconds, _drift):
        return len(readers.got["slow"]) >= slow_events

    # a short prefetch queue (both runs): a segment a reader takes over is read at once,
    # not after the backlog already queued for its other segments
    both = {
        "one_by_one": True,
        "consumer_overrides": {"max.partition.fetch.bytes": 512, "queued.min.messages": 20},
    }
    even, _ = lower_bound_after(
        "even", stream, store, kafka, root, until, total, rounds, unique, **both
    )
    by_time, _ = lower_bound_after(
        "time", stream, store, kafka, root, until, total, rounds, unique, balance="time",
        lag_ms=3 * STEP_MS, **both,
    )  # fmt: skip
    gain = {k: None if v is None else v - BASE for k, v in (("even", even), ("time", by_time))}
    print(f"\ngroup lower bound after {slow_events} slow events (ms past the first): {gain}")
    assert by_time is not None
    assert even is None or by_time > even


def test_alignment_keeps_readers_within_max_drift(manager, store, kafka, wconfig, unique, tmp_path):
    """With max_drift_ms the fast reader pauses segments that run ahead of the group's
    lower bound and resumes them as the slow reader catches up."""
    root = str(tmp_path)
    rounds = 60
    stream, total = filled_stream(manager, store, kafka, wconfig, root, unique, rounds, 4)

    # Without alignment: until the fast reader runs 3 s of event time ahead (a fixed span
    # of wall time is mostly the readers' start on a loaded machine). With it: at least
    # 4 s, and until the slow reader has read as much as it had in the free run.
    slow_read = []

    def free_until(readers, _seconds, drift):
        if drift and max(drift) > 3000:
            slow_read.append(len(readers.got["slow"]))
            return True
        return False

    def aligned_until(readers, seconds, _drift):
        return seconds >= 4.0 and len(readers.got["slow"]) >= slow_read[0]

    _, free = lower_bound_after(
        "free", stream, store, kafka, root, free_until, total, rounds, unique
    )
    _, aligned = lower_bound_after(
        "aligned", stream, store, kafka, root, aligned_until, total, rounds, unique,
        max_drift_ms=500,
    )  # fmt: skip
    print(
        f"\nlargest drift between the readers' event times (ms): without alignment "
        f"{max(free, default=None)}, with max_drift_ms=500: {max(aligned, default=None)}"
    )
    assert free and aligned
    assert max(free) > 3000  # the fast reader ran far ahead (within the run's 120 s)
    # Pausing is checked at each rebalance tick (50 ms): allow what a reader reads
    # in a few ticks beyond the limit, far below the free run's drift.
    assert max(aligned) < max(free) / 2


# --- 2. checkpoints with readers online ----------------------------------------------


def test_checkpoint_with_readers_online_then_reset(
    manager, store, kafka, wconfig, unique, tmp_path, zookeeper
):
    root = str(tmp_path)
    rounds = 30
    stream, total = filled_stream(manager, store, kafka, wconfig, root, unique, rounds, 2)
    name = f"cp{unique}"
    group = ReaderGroup(name, stream, **kw(store, kafka, root))
    with group:
        with Readers(group, {"r1": 0.01, "r2": 0.01}) as readers:
            readers.wait_for(total // 3)
            pending = readers.pending = group.initiate_checkpoint("mid", timeout_ms=30_000)
            taken = pending.result()
            returned = {(s, o) for s, o, _ in readers.read()}
            assert set(taken.readers) == {"r1", "r2"}
            # every event before the cut had been returned when it was taken
            assert all(
                (s, o) in returned for s, cut in taken.stream_cut.items() for o in range(cut)
            )
            assert sum(taken.stream_cut.values()) >= total // 3
            assert readers.wait_for(total) == total
            exactly_once(readers, total)
            # each reader returned the checkpoint's place once; the events before the
            # places are exactly the cut, and the future was done before any event after
            places = readers.places
            assert {r: [c for c, _ in p] for r, p in places.items()} == {
                "r1": ["mid"],
                "r2": ["mid"],
            }
            before = {
                (s, o) for r, got in readers.got.items() for s, o, _ in got[: places[r][0][1]]
            }
            assert before == {(s, o) for s, cut in taken.stream_cut.items() for o in range(cut)}
            assert all(all(done) for done in readers.done_after.values())
        window = group.current_time_window()
    assert taken.lower is not None and taken.watermark_seq is not None
    assert window.lower is not None and window.lower > taken.lower  # read to the end

    # durable: another ZooKeeper session finds it; reset_to starts exactly there
    from kazoo.client import KazooClient

    client = KazooClient(hosts=f"{zookeeper}/tidemark-test-{unique}")
    client.start(timeout=15)
    try:
        other = ZooKeeperStore(client, "/tidemark")
        with ReaderGroup(name, **kw(other, kafka, root)) as again:
            assert [c.name for c in again.checkpoints()] == ["mid"]
            assert again.reset_to("mid") == dict(taken.stream_cut)
            assert again.stream_cut() == dict(taken.stream_cut)
            assert again.current_time_window().lower == taken.lower
            with Readers(again, {"r3": 0.0}) as after:
                expected = total - sum(taken.stream_cut.values())
                assert after.wait_for(expected) == expected
                time.sleep(0.5)
                got = [(s, o) for s, o, _ in after.read()]
                assert len(got) == len(set(got)) == expected
                assert all(o >= taken.stream_cut[s] for s, o in got)
    finally:
        client.stop()
        client.close()


# --- 4. a reader that dies ----------------------------------------------------------------

DOOMED = """
import sys, time
from kazoo.client import KazooClient
from tidemark.controller.navigation import key_hash
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.pipelines.reading.group import ReaderConfig, ReaderGroup
hosts, name, kafka, root, count = sys.argv[1:6]
client = KazooClient(hosts=hosts, timeout=2.0)
client.start(timeout=15)
config = ReaderConfig(rebalance_interval_ms=50, commit_interval_ms=0, window_refresh_interval_ms=0)
group = ReaderGroup(name, store=ZooKeeperStore(client, "/tidemark"), bootstrap_servers=kafka,
                    delta_root=root, config=config)
reader = group.reader("doomed")
got = 0
while got < int(count):
    event = reader.read_next(timeout_ms=5000)
    if event is not None:
        got += 1
        print(f"{event.segment} {event.offset}", flush=True)
reader.commit()
print("committed", flush=True)
time.sleep(600)
"""


def test_a_reader_that_dies_hands_its_segments_on(
    manager, store, kafka, wconfig, unique, tmp_path, zookeeper
):
    """A reader process killed without closing: once its ZooKeeper session ends its
    segments return to the group, the survivor resumes from the committed offsets
    (nothing lost, nothing read twice since the dead reader committed), and the
    group's window never goes backwards."""
    root = str(tmp_path)
    rounds = 30
    stream, total = filled_stream(manager, store, kafka, wconfig, root, unique, rounds, 2)
    name = f"die{unique}"
    ReaderGroup(name, stream, **kw(store, kafka, root)).close()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            DOOMED,
            f"{zookeeper}/tidemark-test-{unique}",
            name,
            kafka,
            root,
            "40",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    dead_read = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "committed":
                break
            seg, off = line.split()
            dead_read.append((int(seg), int(off)))
        assert len(dead_read) == 40
        group = ReaderGroup(name, **kw(store, kafka, root))
        with group:
            owned_by_dead = {s for s, o in group.registry.owners(name).items() if o == "doomed"}
            assert owned_by_dead  # it held segments when it died
            lowers = [group.current_time_window().lower]
            with Readers(group, {"survivor": 0.0}) as readers:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
                killed_at = time.monotonic()
                deadline = killed_at + 60
                while len(readers.read()) + len(dead_read) < total and time.monotonic() < deadline:
                    lowers.append(group.current_time_window().lower)
                    time.sleep(0.1)
                taken_over = {s for s, o in group.registry.owners(name).items() if o == "survivor"}
                assert owned_by_dead <= taken_over
                time.sleep(0.5)
            lowers.append(group.current_time_window().lower)
            survivor = [(s, o) for s, o, _ in readers.read()]
            counts = Counter(dead_read + survivor)
            assert len(counts) == total
            assert [k for k, n in counts.items() if n > 1] == []
            known = [x for x in lowers if x is not None]
            assert known == sorted(known), lowers  # the window never went backwards
            assert known and known[-1] >= BASE + (rounds - 2) * STEP_MS
            print(
                f"\ndead reader read {len(dead_read)}, survivor {len(survivor)}; group "
                f"lower bound sampled {len(lowers)} times, never backwards"
            )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
